"""The Python API for agent loops: a SessionRecorder records messages, tool calls and results,
todos, artifacts, usage and runs (failed when the block raises), builds contexts, serves the turnlog
tool's calls, surfaces version conflicts clearly and retries transient errors idempotently."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from turnlog.projections.todos import build_todo_list, current_todos
from turnlog.recorder import SessionRecorder, session
from turnlog.store import (
    ArtifactWritten,
    ContextBuilt,
    DuplicateEventError,
    InvalidEventError,
    MessageAppended,
    MessagePinned,
    MessageUnpinned,
    RunFinished,
    RunStarted,
    SessionStarted,
    SQLiteStore,
    StoreError,
    TodosUpdated,
    ToolCall,
    ToolReturned,
    UsageRecorded,
    VersionConflictError,
)

ROOT = Path(__file__).parent.parent


@pytest.fixture
def store(db_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore.open(db_path) as opened:
        yield opened


def events(store: SQLiteStore, session_id: str = "s") -> list[Any]:
    return [r.event for r in store.read_session(session_id)]


def test_a_whole_turn_is_recorded(store: SQLiteStore) -> None:
    rec = session(store, "s", title="Fix it", model="gpt-4o", metadata={"agent": "coder"})
    rec.system("You are a coding agent.")
    first = rec.user("Fix the failing test.", pinned="the task")
    with rec.run("run-1") as run_id:
        assert run_id == "run-1" and rec.run_id == "run-1"
        built = rec.context(budget=2000)
        reply = rec.assistant(
            "Reading it.",
            tool_calls=[
                {"id": "c1", "name": "read_file", "arguments": {"path": "a.py"}},
                {"name": "run_tests"},
                ToolCall(id="c3", name="ls", arguments="{}"),
            ],
        )
        rec.usage(input_tokens=built.total_tokens, output_tokens=12, cache_read_tokens=5)
        assert isinstance(reply.event, MessageAppended) and reply.event.tool_calls
        calls = reply.event.tool_calls
        rec.tool_result("c1", "def f(): ...")
        rec.tool_result(calls[1].id, "1 failed", is_error=True)
        rec.tool_result("c3", "a.py", tool_name="list_files")
        rec.todos(["fix f", {"content": "run the tests", "status": "in_progress"}])
        rec.artifact("a.py", "def f(): return 1\n", media_type="text/x-python", tool_call_id="c1")
        rec.pin(reply, reason="the plan")
        rec.unpin(reply.event_id)
    assert rec.run_id is None
    got = events(store)
    assert [type(e) for e in got] == [
        SessionStarted,
        MessageAppended,
        MessageAppended,
        RunStarted,
        ContextBuilt,
        MessageAppended,
        UsageRecorded,
        ToolReturned,
        ToolReturned,
        ToolReturned,
        TodosUpdated,
        ArtifactWritten,
        MessagePinned,
        MessageUnpinned,
        RunFinished,
    ]
    assert got[0].title == "Fix it" and got[0].model == "gpt-4o" and got[0].metadata == {"agent": "coder"}
    assert got[2].pinned is not None and got[2].pinned.reason == "the task"
    assert got[2].event_id == first.event_id
    assert got[4].run_id == "run-1" and got[4].model == "gpt-4o"
    assert [c.arguments for c in got[5].tool_calls] == ['{"path": "a.py"}', "{}", "{}"]
    assert calls[1].id.startswith("call_")
    assert got[6].model == "gpt-4o" and got[6].run_id == "run-1"
    assert [r.tool_name for r in got[7:10]] == ["read_file", "run_tests", "list_files"]
    assert got[8].is_error
    assert [(t.content, t.status) for t in current_todos(store, "s")] == [
        ("fix f", "pending"),
        ("run the tests", "in_progress"),
    ]
    assert got[-1].status == "completed"
    assert rec.version == store.head_version("s") == len(got)
    assert store.verify().ok


def test_a_failing_run_is_recorded_as_failed_and_the_error_re_raised(store: SQLiteStore) -> None:
    rec = session(store, "s")
    rec.user("go")
    with pytest.raises(RuntimeError, match="provider down"), rec.run("r1"):
        rec.assistant("thinking")
        raise RuntimeError("provider down")
    with pytest.raises(KeyboardInterrupt), rec.run("r2"):
        raise KeyboardInterrupt
    finished = [e for e in events(store) if isinstance(e, RunFinished)]
    assert [(e.run_id, e.status) for e in finished] == [("r1", "failed"), ("r2", "cancelled")]
    with rec.run() as run_id:
        assert run_id.startswith("run-")
        with pytest.raises(InvalidEventError, match="runs do not nest"), rec.run():
            pass


def test_another_writer_is_a_clear_version_conflict(store: SQLiteStore) -> None:
    mine = session(store, "s", model="m")
    theirs = session(store, "s")
    assert theirs.model == "m"  # continued: the model is read from session_started
    theirs.user("I was here first")
    before = store.head_version("s")
    with pytest.raises(VersionConflictError) as caught:
        mine.user("me too")
    assert caught.value.expected == 1 and caught.value.actual == 2
    assert "expected version 1" in str(caught.value)
    assert any("call sync()" in note for note in getattr(caught.value, "__notes__", []))
    assert store.head_version("s") == before
    assert mine.sync() == 2
    mine.user("me too")
    assert [e.content for e in events(store) if isinstance(e, MessageAppended)] == [
        "I was here first",
        "me too",
    ]


def test_a_transient_error_is_retried_with_the_same_ids(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = session(store, "s")
    real = store.append
    calls: list[list[str]] = []

    def lost_acknowledgement(session_id: str, batch: Any, **kwargs: Any) -> Any:
        calls.append([e.event_id for e in batch])
        records = real(session_id, batch, **kwargs)
        if len(calls) == 1:
            raise StoreError("turnlog.db is busy: another process held the write lock")
        return records

    monkeypatch.setattr(store, "append", lost_acknowledgement)
    monkeypatch.setattr("turnlog.recorder.time.sleep", lambda seconds: None)
    recorded = rec.user("hello")
    assert len(calls) == 2 and calls[0] == calls[1]  # the retry sent the same event
    assert store.count_events() == 2 and recorded.version == rec.version == 2


def test_errors_that_are_answers_are_not_retried(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = session(store, "s", retries=2)
    attempts = 0

    def always_busy(*args: Any, **kwargs: Any) -> Any:
        nonlocal attempts
        attempts += 1
        raise StoreError("busy")

    monkeypatch.setattr("turnlog.recorder.time.sleep", lambda seconds: None)
    with pytest.raises(InvalidEventError, match="unknown field 'when'"):
        rec.assistant(tool_calls=[{"name": "x", "when": "now"}])
    with pytest.raises(InvalidEventError, match="give model="):
        rec.usage(input_tokens=1, output_tokens=1)
    with pytest.raises(InvalidEventError, match="MessageAppended: role"):
        rec.message("robot", "x")  # type: ignore[arg-type]
    monkeypatch.setattr(store, "append", always_busy)
    with pytest.raises(StoreError, match="busy"):
        rec.user("x")
    assert attempts == 3

    # The store's answers (its StoreError subclasses) reach the caller after one attempt.
    answers: list[StoreError] = [
        InvalidEventError("bad batch"),
        VersionConflictError("s", 1, 2),
        DuplicateEventError("event id already stored with other content"),
    ]
    for answer in answers:
        attempts = 0

        def refuse(*args: Any, answer: StoreError = answer, **kwargs: Any) -> Any:
            nonlocal attempts
            attempts += 1
            raise answer

        monkeypatch.setattr(store, "append", refuse)
        with pytest.raises(type(answer)):
            rec.user("x")
        assert attempts == 1, f"{type(answer).__name__} was retried"


def test_context_builds_records_and_takes_a_policy(store: SQLiteStore) -> None:
    rec = session(store, "s", model="gpt-4o")
    rec.system("sys")
    rec.user("question " * 50)
    built = rec.context(budget=500, format="anthropic")
    assert built.rendered["system"] == "sys" and built.total_tokens <= 500
    head = store.head_version("s")
    rec.context(budget=500, record=False)
    assert store.head_version("s") == head
    with pytest.raises(InvalidEventError, match="budget="):
        rec.context()
    with pytest.raises(InvalidEventError, match="context policy: budget"):
        rec.context(budget=0)
    with pytest.raises(InvalidEventError, match="context policy: colour: unknown field"):
        rec.context(budget=500, colour="red")


def test_session_by_path_opens_and_closes_its_store(db_path: Path) -> None:
    with session(db_path, "s", title="t") as rec:
        rec.user("hi")
        opened = rec.store
    with pytest.raises(StoreError, match="closed"):
        opened.head_version("s")
    with session(str(db_path), "s", title="ignored") as again:
        assert again.version == 2
        again.user("again")
    with SQLiteStore.open(db_path) as check:
        recorded = events(check)
        assert [e.type for e in recorded] == ["session_started", "message_appended", "message_appended"]
        assert recorded[0].title == "t"


def test_recorder_is_also_usable_directly(store: SQLiteStore) -> None:
    rec = SessionRecorder(store, "raw")
    assert rec.version == 0
    rec.user("no session_started needed")
    assert store.head_version("raw") == 1


def test_invoke_tool_answers_a_recorded_turnlog_call(store: SQLiteStore) -> None:
    rec = session(store, "s", model="gpt-4o")
    todos = {"todos": [{"content": "fix it", "status": "in_progress"}, {"content": "test it"}]}
    envelope = {"module": "todos", "method": "write", "input": todos}
    rec.assistant("Planning.", tool_calls=[{"id": "c1", "name": "turnlog", "arguments": envelope}])
    result = rec.invoke_tool("c1", json.dumps(envelope))
    assert not result.is_error and result.method == "todos.write"
    assert [r.type for r in result.recorded] == ["todos_updated", "tool_returned"]
    assert rec.version == store.head_version("s") == result.recorded[-1].version
    assert current_todos(store, "s") == list(build_todo_list(todos["todos"]).todos)
    returned = events(store)[-1]
    assert isinstance(returned, ToolReturned) and returned.tool_call_id == "c1"
    assert returned.tool_name == "turnlog" and returned.content == result.text
    # A retry with the same id and input writes nothing and gives the first answer.
    again = rec.invoke_tool("c1", envelope)
    assert again.retried and again.text == result.text and store.head_version("s") == rec.version
    rec.user("and the recorder goes on at its version")


def test_invoke_tool_answers_invalid_input_with_an_error_result(store: SQLiteStore) -> None:
    rec = session(store, "s", model="gpt-4o")
    rec.assistant(tool_calls=[{"id": "c1", "name": "turnlog", "arguments": "not json"}])
    result = rec.invoke_tool("c1", "not json", max_tokens=100)
    assert result.is_error and result.text.startswith("error:")
    assert [r.type for r in result.recorded] == ["tool_returned"] and rec.version == store.head_version("s")
    assert not any(isinstance(e, TodosUpdated) for e in events(store))
    with pytest.raises(StoreError, match="max_tokens"):
        rec.invoke_tool("c2", "{}", max_tokens=5)


def test_invoke_tool_refuses_to_write_after_another_writer(store: SQLiteStore) -> None:
    rec = session(store, "s", model="gpt-4o")
    envelope = {"module": "todos", "method": "write", "input": {"todos": [{"content": "x"}]}}
    rec.assistant(tool_calls=[{"id": "c1", "name": "turnlog", "arguments": envelope}])
    store.append("s", [MessageAppended(role="user", content="someone else")])
    head = store.head_version("s")
    with pytest.raises(VersionConflictError):
        rec.invoke_tool("c1", envelope)
    assert store.head_version("s") == head and current_todos(store, "s") == []
    rec.sync()
    assert not rec.invoke_tool("c1", envelope).is_error and len(current_todos(store, "s")) == 1
