"""scripts/example_agent.py, the agent loop an agent author reads: the scripted model is offered the
`turnlog` tool, its calls of it are served and recorded like any tool call, its todos are built by the
tool's one todo-list builder, its contexts stay within budget, and valid input never crashes it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import turnlog
import turnlog.projections.todos
import turnlog.recorder
import turnlog.tool.methods
from turnlog.projections.todos import build_todo_list, current_todos
from turnlog.store import (
    ArtifactWritten,
    ContextBuilt,
    MessageAppended,
    RunFinished,
    SessionStarted,
    SQLiteStore,
    TodosUpdated,
    ToolReturned,
    UsageRecorded,
)

ROOT = Path(__file__).parent.parent
SCRIPT = ROOT / "scripts" / "example_agent.py"


@pytest.fixture(scope="module")
def agent() -> Iterator[ModuleType]:
    """The script, imported as a module (its loop and fake model are reused with other scripts)."""
    spec = importlib.util.spec_from_file_location("example_agent", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["example_agent"] = module  # dataclasses look their module up while it loads
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["example_agent"]


def events(store: SQLiteStore, session_id: str = "example") -> list[Any]:
    return [r.event for r in store.read_session(session_id)]


def turnlog_calls(recorded: list[Any]) -> dict[str, dict[str, Any]]:
    """Every call of the `turnlog` tool the model made: call id -> its envelope."""
    return {
        call.id: json.loads(call.arguments)
        for event in recorded
        if isinstance(event, MessageAppended)
        for call in event.tool_calls or ()
        if call.name == "turnlog"
    }


def returns(recorded: list[Any]) -> dict[str, list[ToolReturned]]:
    found: dict[str, list[ToolReturned]] = {}
    for event in recorded:
        if isinstance(event, ToolReturned):
            found.setdefault(event.tool_call_id, []).append(event)
    return found


def test_the_example_agent_runs_with_the_turnlog_tool(tmp_path: Path) -> None:
    db = tmp_path / "example.db"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"store: {db}" in out and "verify: ok" in out and "run_finished status=failed" in out
    assert "turnlog todos.write: Todo list replaced." in out
    with SQLiteStore.open(db) as check:
        recorded = events(check)
        todos_now = current_todos(check, "example")

    # The model was offered the turnlog tool: OpenAI's function shape, the envelope schema.
    started = recorded[0]
    assert isinstance(started, SessionStarted) and started.metadata is not None
    offered = {tool["function"]["name"]: tool for tool in started.metadata["tools"]}
    assert set(offered) == {"turnlog", "read_file", "run_tests", "edit_file"}
    assert offered["turnlog"] == turnlog.tool_definition("openai")
    schema = offered["turnlog"]["function"]["parameters"]
    assert schema == turnlog.tool.parameters_schema()
    assert schema["required"] == ["module", "method", "input"] and schema["additionalProperties"] is False

    # Every call of it was served and recorded: one result per call id, named turnlog.
    calls = turnlog_calls(recorded)
    answered = returns(recorded)
    methods = sorted({f"{c['module']}.{c['method']}" for c in calls.values()})
    assert methods == ["artifacts.read", "history.search", "todos.write"]
    for call_id in calls:
        assert [r.tool_name for r in answered[call_id]] == ["turnlog"]
    errors = [call_id for call_id in calls if answered[call_id][0].is_error]
    assert len(errors) == 1 and answered[errors[0]][0].content.startswith(
        "error: invalid input for todos.write"
    )
    # No call of any tool is left without exactly one result.
    every_call = [c.id for e in recorded if isinstance(e, MessageAppended) for c in e.tool_calls or ()]
    assert sorted(every_call) == sorted(answered) and all(len(r) == 1 for r in answered.values())

    # The capped output was read back whole through the tool, by the artifact id its notice gave.
    [read] = [i for i, c in calls.items() if c["method"] == "read"]
    assert "def line_total(price: Decimal, quantity: int) -> Decimal:" in answered[read][0].content
    [found] = [i for i, c in calls.items() if c["method"] == "search"]
    assert "12 passed" in answered[found][0].content

    # The todos in the store are exactly what the tool's builder made of each accepted write.
    writes = [c["input"]["todos"] for i, c in calls.items() if c["method"] == "write" and i not in errors]
    updates = [e for e in recorded if isinstance(e, TodosUpdated)]
    assert [u.todos for u in updates] == [build_todo_list(w).todos for w in writes]
    assert todos_now == list(updates[-1].todos) and {t.status for t in todos_now} == {"completed"}
    assert "½¢" in todos_now[1].content

    # The run finished; every model call had a context within budget, recorded with its usage.
    statuses = [e.status for e in recorded if isinstance(e, RunFinished)]
    assert statuses == ["completed", "failed", "completed"]
    manifests = [e for e in recorded if isinstance(e, ContextBuilt)]
    assert len(manifests) == 8 and all(m.total_tokens <= m.budget == 2500 for m in manifests)
    assert sum(isinstance(e, UsageRecorded) for e in recorded) == 7
    assert any(isinstance(e, ArtifactWritten) for e in recorded)
    assert out.count("of 2,500 tokens") == 8


def test_the_script_builds_todos_with_the_tools_one_builder(
    agent: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One helper: the tool, the recorder and the projection share one function ...
    assert turnlog.tool.methods.build_todo_list is turnlog.projections.todos.build_todo_list
    assert turnlog.recorder.build_todo_list is turnlog.projections.todos.build_todo_list
    # ... and the script has no todo path of its own: replacing the helper changes what it records.
    seen: list[Any] = []

    def spy(items: Any, **options: Any) -> TodosUpdated:
        seen.append(items)
        built = build_todo_list(items, **options)
        return built.model_copy(
            update={"todos": tuple(t.model_copy(update={"content": "spied"}) for t in built.todos)}
        )

    monkeypatch.setattr(turnlog.tool.methods, "build_todo_list", spy)
    items = [{"content": "one", "status": "in_progress"}, {"content": "two"}]
    agent.run(tmp_path / "a.db", [write_and_stop(agent, items)], ["plan it"])
    assert [[item["content"] for item in call] for call in seen] == [["one", "two"]]
    with SQLiteStore.open(tmp_path / "a.db") as check:
        assert [t.content for t in current_todos(check, "example")] == ["spied", "spied"]
    source = SCRIPT.read_text()
    assert "TodoItem" not in source and "build_todo_list" not in source and "update_todos" not in source


def write_and_stop(agent: ModuleType, items: list[Any]) -> list[Any]:
    """One turn: the model writes the todo list through the turnlog tool, then answers."""
    return [
        agent.Reply("Planning.", [agent.turnlog_call("c1", "todos", "write", todos=items)]),
        agent.Reply("ok"),
    ]


VALID_LISTS = [
    pytest.param([], id="empty list"),
    pytest.param([{"content": "Reproduce it", "status": "in_progress"}, {"content": "Fix it"}], id="no ids"),
    pytest.param(
        [
            {"content": "Écrire les tests ✓ — 日本語 🚀", "status": "completed"},
            {"content": "a\nb", "id": "x-1"},
        ],
        id="unicode",
    ),
    pytest.param(
        [{"content": "second", "id": "2"}, {"content": "gets 1"}, {"content": "gets 3"}], id="some ids"
    ),
]


@pytest.mark.parametrize("items", VALID_LISTS)
def test_valid_todo_lists_that_crashed_the_old_script(
    agent: ModuleType, tmp_path: Path, items: list[Any]
) -> None:
    # The old loop rebuilt todos as TodoItem(**item): an item without an id (valid for the tool)
    # raised there. Now every list the tool accepts is recorded as the tool built it.
    db = tmp_path / "t.db"
    agent.run(db, [write_and_stop(agent, items)], ["plan it"])
    with SQLiteStore.open(db) as check:
        recorded = events(check)
        assert current_todos(check, "example") == list(build_todo_list(items).todos)
    [result] = returns(recorded)["c1"]
    assert not result.is_error and result.content.startswith("Todo list replaced.")
    assert [e.status for e in recorded if isinstance(e, RunFinished)] == ["completed"]


TODO_ENTRY = st.fixed_dictionaries(
    {"content": st.text(min_size=1, max_size=30).filter(lambda s: "\x00" not in s and s.strip() != "")},
    optional={"status": st.sampled_from(["pending", "in_progress", "completed"])},
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(TODO_ENTRY, max_size=6))
def test_any_valid_todo_list_is_recorded_as_the_tool_builds_it(
    agent: ModuleType, tmp_path_factory: pytest.TempPathFactory, items: list[dict[str, str]]
) -> None:
    db = tmp_path_factory.mktemp("prop") / "p.db"
    agent.run(db, [write_and_stop(agent, items)], ["plan it"])
    with SQLiteStore.open(db) as check:
        [result] = returns(events(check))["c1"]
        assert not result.is_error, result.content
        assert current_todos(check, "example") == list(build_todo_list(items).todos)


def test_bad_tool_calls_are_answered_as_errors_not_crashes(agent: ModuleType, tmp_path: Path) -> None:
    bad = [
        {"id": "b1", "name": "turnlog", "arguments": "not json"},
        agent.turnlog_call("b2", "todos", "write", todos=[{"content": "x", "status": "done"}]),
        {"id": "b3", "name": "delete_everything", "arguments": {}},
        {"id": "b4", "name": "read_file", "arguments": {"path": "a", "mode": "rb"}},
        {"id": "b5", "name": "run_tests", "arguments": ["tests"]},
    ]
    db = tmp_path / "b.db"
    agent.run(db, [[agent.Reply("Trying.", bad), agent.Reply("Giving up.")]], ["go"])
    with SQLiteStore.open(db) as check:
        recorded = events(check)
        assert current_todos(check, "example") == []
    answered = returns(recorded)
    assert sorted(answered) == ["b1", "b2", "b3", "b4", "b5"]
    assert all(len(r) == 1 and r[0].is_error for r in answered.values())
    assert answered["b1"][0].content.startswith("error:") and "JSON" in answered["b1"][0].content
    assert "done" in answered["b2"][0].content and "completed" in answered["b2"][0].content
    assert not any(isinstance(e, TodosUpdated) for e in recorded)
    assert [e.status for e in recorded if isinstance(e, RunFinished)] == ["completed"]


def test_the_fake_model_is_offered_the_turnlog_tool(agent: ModuleType, tmp_path: Path) -> None:
    model = agent.FakeModel([agent.Reply("hello")])
    with turnlog.session(tmp_path / "m.db", "m", model=agent.MODEL) as rec:
        agent.agent_turn(rec, model, agent.Tools(), "hi")
    assert model.calls == 1 and model.tools[0] == turnlog.tool_definition("openai")
    assert [tool["function"]["name"] for tool in model.tools] == [
        "turnlog",
        "read_file",
        "run_tests",
        "edit_file",
    ]
