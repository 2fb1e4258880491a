"""End to end, the seeds in the loop: a scripted agent (a fake model) works through turnlog — big tool
outputs, files written, todos through the `turnlog` tool — under a session policy. During the run its
context shows the open run's outputs whole; once run_finished commits, the outputs' summaries and the
run-end summaries exist, and the next run's context fits the budget, carries the artifact index and
shows the summaries."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import turnlog
from turnlog.recorder import SessionRecorder
from turnlog.store import OutputCondensed, SQLiteStore, SummaryRecorded, TodosUpdated

BUDGET = 1500
CAP = 300


def search_output(term: str) -> str:
    """A search tool's output of about 8,000 tokens."""
    return "\n".join(
        f"src/pkg/mod{i}.py:{i}: {term} = compute_{term}({i}) # TODO check {term}" for i in range(400)
    )


def file_text(name: str) -> str:
    return f"# {name}\n" + "".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(30))


@dataclass
class FakeModel:
    """Answers each model call from a script: text, or tool calls; records what it was sent."""

    script: Iterator[dict[str, Any]]
    sent: list[list[dict[str, Any]]] = field(default_factory=list)

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        assert tools[0]["function"]["name"] == "turnlog"
        self.sent.append(messages)
        return next(self.script)


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": json.dumps(arguments)}


def first_run_script() -> Iterator[dict[str, Any]]:
    yield {"tool_calls": [call("t1", "turnlog", {"module": "todos", "method": "write", "input": {"todos": [
        {"content": "Find every compute_total call", "status": "in_progress"},
        {"content": "Write the fix"},
    ]}})]}  # fmt: skip
    yield {"tool_calls": [call("s1", "search", {"term": "total"}), call("s2", "search", {"term": "tax"})]}
    for i in range(6):
        yield {
            "text": f"Reading module {i}.",
            "tool_calls": [call(f"r{i}", "read_file", {"path": f"src/pkg/mod{i}.py"})],
        }
    yield {"tool_calls": [call("w1", "write_file", {"path": "src/pkg/fix.py"})]}
    yield {"tool_calls": [call("t2", "turnlog", {"module": "todos", "method": "write", "input": {"todos": [
        {"id": "1", "content": "Find every compute_total call", "status": "completed"},
        {"id": "2", "content": "Write the fix", "status": "completed"},
    ]}})]}  # fmt: skip
    yield {"text": "Fixed: compute_total now checks its input; see src/pkg/fix.py."}


def run_agent(rec: SessionRecorder, model: FakeModel, task: str, during: list[turnlog.BuiltContext]) -> None:
    tools = [turnlog.tool_definition("openai"), {"type": "function", "function": {"name": "search"}}]
    rec.user(task)
    with rec.run():
        while True:
            context = turnlog.build_context(
                rec.store, rec.session_id, turnlog.ContextPolicy(budget=20_000, max_tool_tokens=CAP)
            )
            during.append(context)
            reply = model(context.rendered, tools)
            recorded = rec.assistant(reply.get("text", ""), tool_calls=reply.get("tool_calls"))
            calls = recorded.event.tool_calls or ()
            if not calls:
                return
            for made in calls:
                args = json.loads(made.arguments)
                if made.name == "turnlog":
                    rec.invoke_tool(made.id, args)
                elif made.name == "search":
                    rec.tool_result(made.id, search_output(args["term"]))
                elif made.name == "read_file":
                    rec.tool_result(made.id, file_text(args["path"])[:900])
                else:
                    rec.artifact(args["path"], file_text(args["path"]), tool_call_id=made.id)
                    rec.tool_result(made.id, f"wrote {args['path']}")


def test_a_run_through_turnlog_then_the_next_run_starts_small(file_store: SQLiteStore) -> None:
    file_store.append("agent", [{"type": "message_appended", "role": "system", "content": "You fix code."}])
    turnlog.set_policy(
        file_store,
        "agent",
        turnlog.SessionPolicy(
            compact_on_run_end=True,
            budget=BUDGET,
            max_tool_tokens=CAP,
            keep_last=4,
            tool_output_modes={"search": "auto", "default": "simple"},
            condense_at="run_end",
        ),
    )
    model = FakeModel(first_run_script())
    during: list[turnlog.BuiltContext] = []
    with turnlog.session(file_store, "agent") as rec:
        run_agent(rec, model, "compute_total is wrong for empty carts; fix it.", during)
        report = rec.last_report

    # During the run: the search outputs (about 8,000 tokens each) were shown whole.
    after_search = during[2]
    outputs = [m for m in after_search.messages if m.role == "tool" and m.tool_call_id in ("s1", "s2")]
    assert [m.mode for m in outputs] == ["full", "full"] and all(m.tokens > 5000 for m in outputs)

    # After run_finished: each search output has its summary, and the run-end compaction wrote summaries.
    assert report is not None and report.errors == [] and report.compaction is not None
    events = [r.event for r in file_store.read_session("agent")]
    views = [e for e in events if isinstance(e, OutputCondensed)]
    assert sorted(v.condenser.name for v in views) == ["extractive", "extractive"]
    assert any(isinstance(e, SummaryRecorded) for e in events)
    types = [type(e).__name__ for e in events]
    assert types.index("RunFinished") < types.index("OutputCondensed") < types.index("SummaryRecorded")
    # Todos went through the tool's one builder.
    todos = [e for e in events if isinstance(e, TodosUpdated)][-1]
    assert [(t.id, t.status) for t in todos.todos] == [("1", "completed"), ("2", "completed")]

    # The next run's context: within the budget, nothing silently dropped, the index after the system
    # message, the search outputs as their summaries.
    policy = turnlog.get_policy(file_store, "agent")
    assert policy.budget == BUDGET
    with turnlog.session(file_store, "agent") as rec:
        rec.user("Now add a test for empty carts.")
    built = turnlog.build_context(
        file_store, "agent", turnlog.ContextPolicy(budget=BUDGET, max_tool_tokens=CAP)
    )
    assert built.total_tokens <= BUDGET
    categories = [m.category for m in built.messages]
    assert categories[:2] == ["system", "index"]
    index = built.messages[1].content
    assert "src/pkg/fix.py" in index and "artifacts.read" in index
    assert "summary" in categories  # the run-end compaction's summary stands in for the old turns
    # Between the outputs' summaries and the run-end compaction, a build shows the summaries in place
    # of the 8,000-token outputs.
    records = file_store.read_session("agent")
    at = max(r.position for r in records if r.type == "output_condensed")
    then = turnlog.build_context(
        file_store, "agent", turnlog.ContextPolicy(budget=20_000, max_tool_tokens=CAP), at=at
    )
    shown = {m.tool_call_id: m for m in then.messages if m.role == "tool"}
    assert shown["s1"].mode == shown["s2"].mode == "condensed"
    assert (
        shown["s1"].content.startswith("[turnlog: summary of a tool output of")
        and shown["s1"].tokens <= CAP + 20
    )
    assert built.messages[-1].content == "Now add a test for empty carts."
