"""An agent loop recorded with turnlog's public API, runnable offline. A scripted fake model is offered
the `turnlog` tool (its own log: the todo list, full tool outputs, earlier history) beside three fake
coding tools; every message, tool call and result, todo list, artifact, usage record and run goes into
a turnlog store. Before each model call the loop builds the context under a token budget and prints
its size.

    .venv/bin/python scripts/example_agent.py            # a store in a new temporary folder
    .venv/bin/python scripts/example_agent.py --db x.db  # or in a file of your choice
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import turnlog
from turnlog.recorder import SessionRecorder

MODEL = "gpt-4o-2024-08-06"
BUDGET = 2500
"""Prompt tokens per model call: small, so the later calls show capping and omission."""
MAX_TOOL_TOKENS = 300
"""Tokens a tool output may take in the context; the full text stays fetchable through the tool."""

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


def function_tool(name: str, description: str, **parameters: str) -> dict[str, Any]:
    """An OpenAI function tool taking the given string parameters (all required)."""
    properties = {key: {"type": "string", "description": text} for key, text in parameters.items()}
    schema = {"type": "object", "properties": properties, "required": list(parameters)}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


TOOLS = [
    turnlog.tool_definition("openai"),  # the agent's own log, through one tool: `turnlog`
    function_tool("read_file", "Read a file of the repository.", path="The file's path."),
    function_tool("run_tests", "Run pytest.", path="A test file or folder."),
    function_tool(
        "edit_file", "Replace text in a file.", path="The file.", old="Text to find.", new="Its new text."
    ),
]
"""What the model is offered on every call (OpenAI chat-completions shape)."""


# --- the fake world ---------------------------------------------------------------------------------


@dataclass
class Reply:
    """What the fake model answers: text, and the tool calls it makes."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


Step = Reply | Exception | Callable[[list[dict[str, Any]]], Reply]
"""One scripted model call: a reply, an outage, or a reply made from the messages it is sent."""


class FakeModelError(RuntimeError):
    """The fake provider's outage, to show how a failed run is recorded."""


class FakeModel:
    """Replays a script of steps, one per call, like a chat-completions endpoint would answer."""

    def __init__(self, script: list[Step]) -> None:
        self.script = list(script)
        self.calls = 0
        self.tools: list[dict[str, Any]] = []

    def respond(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        self.calls += 1
        self.tools = tools
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step if isinstance(step, Reply) else step(messages)


class Tools:
    """Deterministic stand-ins for a coding agent's tools; each returns (text, is_error)."""

    fixed = False

    def run(self, name: str, arguments: str) -> tuple[str, bool]:
        """A call as the model made it: a bad name or bad arguments is an error result, not a crash."""
        tool: dict[str, Callable[..., tuple[str, bool]]] = {
            "read_file": self.read_file,
            "run_tests": self.run_tests,
            "edit_file": self.edit_file,
        }
        try:
            given = json.loads(arguments)
            if name not in tool or not isinstance(given, dict):
                return f"error: there is no tool {name!r} taking {arguments}", True
            return tool[name](**given)
        except (ValueError, TypeError) as exc:
            return f"error: {name} cannot take {arguments}: {exc}", True

    def read_file(self, path: str) -> tuple[str, bool]:
        if path != "invoice/totals.py":
            return f"error: no such file {path}", True
        return SOURCE, False

    def run_tests(self, path: str) -> tuple[str, bool]:
        if self.fixed:
            return f"collected 12 items in {path}\n12 passed in 0.21s", False
        failed = "FAILED test_half_cent - assert Decimal('2.68') == Decimal('2.69')\n1 failed, 11 passed"
        return f"collected 12 items in {path}\n{failed}", True

    def edit_file(self, path: str, old: str, new: str) -> tuple[str, bool]:
        if old not in SOURCE:
            return f"error: {old!r} not found in {path}", True
        self.fixed = True
        return f"edited {path}: 1 replacement", False


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def turnlog_call(call_id: str, module: str, method: str, **given: Any) -> dict[str, Any]:
    """A call of the `turnlog` tool: one envelope, {"module", "method", "input"}."""
    return call(call_id, "turnlog", module=module, method=method, input=given)


def recheck(messages: list[dict[str, Any]]) -> Reply:
    """The model finds the notice of an output capped in its context, and fetches the full text by
    the artifact id the notice names, beside a search of its history."""
    text = "\n".join(str(message.get("content") or "") for message in messages)
    artifact_id = re.findall(r"the full text is artifact ([0-9a-f]+)", text)[-1]
    return Reply(
        "My first read of the file is capped here; let me see its functions and the last test run.",
        [
            turnlog_call("call_8", "artifacts", "read", id=artifact_id, offset=0, limit=11),
            turnlog_call("call_9", "history", "search", query="passed", role="tool", limit=1),
        ],
    )


def script() -> list[list[Step]]:
    """The fake model's steps, per user turn."""
    plan = [
        {"content": "Reproduce the rounding failure", "status": "in_progress"},
        {"content": "Fix the rounding mode — half-cents (½¢) must round up", "status": "pending"},
        {"content": "Run the whole test suite"},
    ]
    done = [
        {"id": str(n), "content": item["content"], "status": "completed"} for n, item in enumerate(plan, 1)
    ]
    return [
        [
            Reply(
                "I'll plan, read the module and run its tests.",
                [
                    turnlog_call("call_1", "todos", "write", todos=plan),
                    call("call_2", "read_file", path="invoice/totals.py"),
                    call("call_3", "run_tests", path="tests/test_totals.py"),
                ],
            ),
            Reply(
                "Half-cents round to even; invoices must round half up.",
                [
                    call(
                        "call_4",
                        "edit_file",
                        path="invoice/totals.py",
                        old="ROUND_HALF_EVEN",
                        new="ROUND_HALF_UP",
                    ),
                    call("call_5", "run_tests", path="tests"),
                ],
            ),
            Reply(
                "All 12 tests pass.",
                [turnlog_call("call_6", "todos", "write", todos=[{**done[0], "status": "done"}])],
            ),
            Reply(
                "`done` is refused: the status is `completed`.",
                [turnlog_call("call_7", "todos", "write", todos=done)],
            ),
            Reply("Done. `invoice/totals.py` now uses ROUND_HALF_UP; the suite passes."),
        ],
        [FakeModelError("503 Service Unavailable (fake provider outage)")],
        [recheck, Reply("Yes: each line is rounded half up to the cent, then summed; all 12 tests pass.")],
    ]


# --- the agent loop ---------------------------------------------------------------------------------


def agent_turn(rec: SessionRecorder, model: FakeModel, tools: Tools, user_text: str) -> None:
    """One user turn: a run of model calls until the model answers without tool calls."""
    rec.user(user_text)
    with rec.run() as run_id:
        while True:
            policy = turnlog.ContextPolicy(budget=BUDGET, max_tool_tokens=MAX_TOOL_TOKENS)
            context = turnlog.build_context(rec.store, rec.session_id, policy)
            rec.append(context.to_event(run_id=run_id, model=MODEL))  # what the model saw on this call
            print(
                f"  {run_id} call {model.calls + 1}: context {context.total_tokens:,} of {BUDGET:,} tokens, "
                f"{len(context.messages)} messages ({context.omitted_messages} older ones left out)"
            )
            reply = model.respond(context.rendered, TOOLS)
            recorded = rec.assistant(reply.text, tool_calls=reply.tool_calls)
            output_tokens = rec.store.tokenizer.count(reply.text) + 20 * len(reply.tool_calls)
            rec.usage(input_tokens=context.total_tokens, output_tokens=output_tokens)
            for tool_call in getattr(recorded.event, "tool_calls", None) or ():
                if tool_call.name == turnlog.tool.TOOL_NAME:
                    # The tool validates the envelope, writes what the call writes (a todo list goes
                    # through the one todo-list builder) and records its result for this call id.
                    result = rec.invoke_tool(tool_call.id, tool_call.arguments)
                    print(f"    turnlog {result.method}: {' '.join(result.text.split())[:90]}")
                    continue
                text, failed = tools.run(tool_call.name, tool_call.arguments)
                rec.tool_result(tool_call.id, text, is_error=failed)
                if tool_call.name == "edit_file" and not failed:
                    arguments = json.loads(tool_call.arguments)
                    new_source = SOURCE.replace(arguments["old"], arguments["new"])
                    rec.artifact(
                        "invoice/totals.py", new_source, media_type="text/x-python", tool_call_id=tool_call.id
                    )
            if not reply.tool_calls:
                print(f"  assistant: {reply.text}")
                return


def run(db: Path, steps: list[list[Step]], turns: list[str]) -> None:
    """Record the session `example` in the store at `db`: one run per user turn."""
    tools = Tools()
    metadata = {"tools": TOOLS}  # what the model is offered, kept for replay and audit
    with turnlog.session(db, "example", title="Fix invoice rounding", model=MODEL, metadata=metadata) as rec:
        rec.system(
            "You are a coding agent in the repository invoice-tool. Use the tools; keep changes small."
        )
        for number, (user_text, turn_steps) in enumerate(zip(turns, steps, strict=True), 1):
            print(f"turn {number}: {user_text}")
            try:
                agent_turn(rec, FakeModel(turn_steps), tools, user_text)
            except FakeModelError as exc:
                print(f"  model call failed: {exc} (recorded: run_finished status=failed)")
        report = rec.store.verify()
        print(
            f"\n{rec.version} events in session 'example'; verify: {'ok' if report.ok else report.problems}"
        )


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
    run(db, script(), turns)
    print("look inside:")
    for command in (
        "log example",
        f"context example --budget {BUDGET} --max-tool-tokens {MAX_TOOL_TOKENS} --format text --manifest",
        "todos example",
        "artifacts example",
        "audit example --by run",
    ):
        print(f"  .venv/bin/turnlog --db {db} {command}")
    envelope = '{"module": "todos", "method": "read", "input": {}}'
    print(f"  echo '{envelope}' | .venv/bin/turnlog --db {db} tool call example")


if __name__ == "__main__":
    main()
