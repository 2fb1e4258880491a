"""An agent loop recorded with turnlog's Python API, runnable offline: a scripted fake model answers
with text and tool calls, fake tools (read_file, run_tests, edit_file, update_todos) return
deterministic text, and every message, tool result, todo list, artifact, usage record and run goes
into a turnlog store. Before each model call the loop builds the context under a token budget and
prints its size.

    .venv/bin/python scripts/example_agent.py            # a store in a new temporary folder
    .venv/bin/python scripts/example_agent.py --db x.db  # or in a file of your choice
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from projections.todos import render_checklist
from store import TodoItem
from turnlog.recorder import SessionRecorder, session

MODEL = "gpt-4o-2024-08-06"
BUDGET = 2500
"""Prompt tokens per model call: small, so the later calls show capping and omission."""

SOURCE = "\n".join(
    [
        "from decimal import ROUND_HALF_EVEN, Decimal",
        "",
        "CENT = Decimal('0.01')",
        "",
        "",
        "def line_total(price: Decimal, quantity: int) -> Decimal:",
        "    return (price * quantity).quantize(CENT, ROUND_HALF_EVEN)",
        "",
        "",
        "def invoice_total(lines: list[tuple[Decimal, int]]) -> Decimal:",
        "    return sum((line_total(p, q) for p, q in lines), Decimal(0))",
        "",
        *(f"# changelog {i:03}: reformatted the rounding helpers, no behaviour change" for i in range(120)),
    ]
)


# --- the fake world ---------------------------------------------------------------------------------


@dataclass
class Reply:
    """What the fake model answers: text, tool calls, and the output tokens it bills."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


class FakeModelError(RuntimeError):
    """The fake provider's outage, to show how a failed run is recorded."""


class FakeModel:
    """Replays a script of replies, one per call, and bills deterministic usage."""

    def __init__(self, script: list[Reply | Exception]) -> None:
        self.script = list(script)
        self.calls = 0

    def respond(self, messages: list[dict[str, Any]]) -> Reply:
        self.calls += 1
        reply = self.script.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


class Tools:
    """Deterministic stand-ins for a coding agent's tools."""

    def __init__(self) -> None:
        self.fixed = False
        self.todos: list[TodoItem] = []

    def read_file(self, path: str) -> tuple[str, bool]:
        return (
            SOURCE if path == "invoice/totals.py" else f"error: no such file {path}"
        ), path != "invoice/totals.py"

    def run_tests(self, path: str = "tests") -> tuple[str, bool]:
        if self.fixed:
            return (
                "collected 12 items\n\ntests/test_totals.py ............ [100%]\n\n12 passed in 0.21s",
                False,
            )
        failure = (
            "collected 12 items\n\ntests/test_totals.py ...........F [100%]\n\n"
            "FAILED tests/test_totals.py::test_half_cent - assert Decimal('2.68') == Decimal('2.69')\n"
            "    line_total(Decimal('1.345'), 2) rounds half to even\n"
            "1 failed, 11 passed in 0.23s"
        )
        return failure, True

    def edit_file(self, path: str, old: str, new: str) -> tuple[str, bool]:
        if old not in SOURCE:
            return f"error: {old!r} not found in {path}", True
        self.fixed = True
        return f"edited {path}: 1 replacement", False


def script() -> list[list[Reply | Exception]]:
    """The fake model's replies, per user turn."""
    todo = [
        {"id": "1", "content": "Reproduce the rounding failure", "status": "in_progress"},
        {"id": "2", "content": "Fix the rounding mode", "status": "pending"},
        {"id": "3", "content": "Run the whole test suite", "status": "pending"},
    ]
    done = [dict(item, status="completed") for item in todo]
    return [
        [
            Reply(
                "I'll plan, read the module and run its tests.",
                [
                    {"id": "call_1", "name": "update_todos", "arguments": {"items": todo}},
                    {"id": "call_2", "name": "read_file", "arguments": {"path": "invoice/totals.py"}},
                    {"id": "call_3", "name": "run_tests", "arguments": {"path": "tests/test_totals.py"}},
                ],
            ),
            Reply(
                "Half-cents round to even; invoices must round half up.",
                [
                    {
                        "id": "call_4",
                        "name": "edit_file",
                        "arguments": {
                            "path": "invoice/totals.py",
                            "old": "ROUND_HALF_EVEN",
                            "new": "ROUND_HALF_UP",
                        },
                    },
                    {"id": "call_5", "name": "run_tests", "arguments": {"path": "tests"}},
                ],
            ),
            Reply(
                "Fixed: line totals now round half up; all 12 tests pass.",
                [{"id": "call_6", "name": "update_todos", "arguments": {"items": done}}],
            ),
            Reply("Done. `invoice/totals.py` now uses ROUND_HALF_UP; the suite passes."),
        ],
        [FakeModelError("503 Service Unavailable (fake provider outage)")],
        [Reply("Yes: totals are rounded per line, then summed, so the invoice total is exact to the cent.")],
    ]


# --- the agent loop ---------------------------------------------------------------------------------


def agent_turn(rec: SessionRecorder, model: FakeModel, tools: Tools, user_text: str) -> None:
    """One user turn: a run of model calls until the model answers without tool calls."""
    rec.user(user_text)
    with rec.run() as run_id:
        while True:
            context = rec.context(budget=BUDGET, max_tool_tokens=300)
            print(
                f"  {run_id} call {model.calls + 1}: context {context.total_tokens:,} of {BUDGET:,} tokens, "
                f"{len(context.messages)} messages ({context.omitted_messages} older ones left out)"
            )
            reply = model.respond(context.rendered)
            recorded = rec.assistant(reply.text, tool_calls=reply.tool_calls)
            output_tokens = rec.store.tokenizer.count(reply.text) + 20 * len(reply.tool_calls)
            rec.usage(input_tokens=context.total_tokens, output_tokens=output_tokens)
            for call in getattr(recorded.event, "tool_calls", None) or ():
                arguments = json.loads(call.arguments)
                if call.name == "update_todos":
                    rec.todos(arguments["items"])
                    tools.todos = [TodoItem(**item) for item in arguments["items"]]
                    rec.tool_result(call.id, render_checklist(tools.todos))
                    continue
                text, failed = getattr(tools, call.name)(**arguments)
                rec.tool_result(call.id, text, is_error=failed)
                if call.name == "edit_file" and not failed:
                    rec.artifact(
                        "invoice/totals.py",
                        SOURCE.replace(arguments["old"], arguments["new"]),
                        media_type="text/x-python",
                        tool_call_id=call.id,
                    )
            if not reply.tool_calls:
                print(f"  assistant: {reply.text}")
                return


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", type=Path, help="store file (default: a new temporary folder)")
    args = parser.parse_args()
    db = args.db or Path(tempfile.mkdtemp(prefix="turnlog-example-")) / "agent.db"
    print(f"store: {db}")

    turns = [
        "Invoice totals are off by one cent for half-cent prices. Fix it.",
        "Can you double-check the totals of invoice 1042?",
        "Are invoice totals exact to the cent now?",
    ]
    replies = script()
    tools = Tools()
    with session(db, "example", title="Fix invoice rounding", model=MODEL) as rec:
        rec.system(
            "You are a coding agent in the repository invoice-tool. Use the tools; keep changes small."
        )
        for number, user_text in enumerate(turns, 1):
            print(f"turn {number}: {user_text}")
            try:
                agent_turn(rec, FakeModel(replies[number - 1]), tools, user_text)
            except FakeModelError as exc:
                print(f"  model call failed: {exc} (recorded: run_finished status=failed)")
        report = rec.store.verify()
        events = rec.version
    print(f"\n{events} events in session 'example'; verify: {'ok' if report.ok else report.problems}")
    print("look inside:")
    for command in (
        "log example",
        "context example --budget 2500 --format text --manifest",
        "todos example",
        "artifacts example",
        "audit example --by run",
    ):
        print(f"  .venv/bin/turnlog --db {db} {command}")


if __name__ == "__main__":
    main()
