"""Export and import: the lossless jsonl round trip (every event type, large contents, forks,
several sessions, random payloads), OpenAI and Anthropic transcripts, idempotent re-imports, clear
errors that leave the store unchanged, and the `export` / `import` commands."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.cli import cli
from turnlog.cli_group import load_commands
from turnlog.exporters import (
    export_anthropic,
    export_jsonl,
    export_openai,
    export_sessions,
    export_to_file,
    jsonl_digest,
)
from turnlog.importers import import_file, parse_jsonl
from turnlog.projections.context import INTERRUPTED, ContextPolicy, build_context
from turnlog.store import (
    EVENT_CLASSES,
    INLINE_LIMIT,
    ArtifactWritten,
    CompactionFailed,
    CondenserInfo,
    DuplicateEventError,
    Event,
    ForkPoint,
    InvalidEventError,
    MessageAppended,
    MessagePinned,
    MessageRemoved,
    MessageUnpinned,
    Origin,
    OutputCondensed,
    Pin,
    PolicySet,
    RecordedEvent,
    RunFinished,
    RunStarted,
    SessionPolicy,
    SessionRewound,
    SessionStarted,
    SQLiteStore,
    StateRecorded,
    TodoItem,
    TodosUpdated,
    ToolCall,
    ToolReturned,
    UnknownSessionError,
    UsageRecorded,
    parse_event,
)

BIG_OUTPUT = "".join(f"line {i}: FAILED test_{i} - AssertionError ✗\n" for i in range(400))
BIG_ARTIFACT = "def f(x):\n    return x * 2  # ünïcode\n" * 300


@pytest.fixture
def store() -> Iterator[SQLiteStore]:
    with SQLiteStore.open(":memory:") as opened:
        yield opened


@pytest.fixture
def other() -> Iterator[SQLiteStore]:
    with SQLiteStore.open(":memory:") as opened:
        yield opened


def full_session(store: SQLiteStore, session_id: str = "full") -> list[RecordedEvent]:
    """A session holding every event type, with tool outputs and artifacts over the inline limit."""
    user = MessageAppended(role="user", content="Fix the failing test.", pinned=Pin(reason="the task"))
    call = MessageAppended(
        role="assistant",
        content="Running the tests.",
        name="coder",
        tool_calls=(
            ToolCall(id="call_1", name="run_tests", arguments='{"path": "tests"}'),
            ToolCall(id="call_2", name="read_file", arguments="not json at all"),
        ),
    )
    big = ToolReturned(tool_call_id="call_1", tool_name="run_tests", content=BIG_OUTPUT, is_error=True)
    events: list[Event] = [
        SessionStarted(
            title="Full", model="gpt-4o", metadata={"agent": "coder", "n": 1.5, "tags": [1, None]}
        ),
        MessageAppended(role="system", content="You are a coding agent."),
        RunStarted(run_id="run-1"),
        user,
        call,
        big,
        ToolReturned(tool_call_id="call_2", tool_name="read_file", content="short output"),
        PolicySet(
            policy=SessionPolicy(
                budget=4000, compact_on_run_end=True, tool_output_modes={"run_tests": "auto"}
            )
        ),
        OutputCondensed(
            target_event_id=big.event_id,
            condenser=CondenserInfo(mode="auto", name="extractive"),
            text="The tests failed: 3 errors.",
            source_tokens=5000,
            key="c" * 64,
        ),
        CompactionFailed(stage="output", target_event_id=big.event_id, handler="grep", error="exited with 2"),
        TodosUpdated(todos=(TodoItem(id="1", content="fix it", status="in_progress"),)),
        ArtifactWritten(
            name="src/f.py", content=BIG_ARTIFACT, media_type="text/x-python", tool_call_id="call_2"
        ),
        UsageRecorded(
            model="gpt-4o", input_tokens=1200, output_tokens=80, cache_read_tokens=1024, run_id="run-1"
        ),
        MessagePinned(target_event_id=call.event_id, reason="keep"),
        MessageUnpinned(target_event_id=call.event_id),
        RunFinished(run_id="run-1", status="failed"),
        MessageAppended(role="assistant", content=""),
    ]
    store.append(session_id, events)
    build_context(store, session_id, ContextPolicy(budget=4000), record=True, run_id="run-1", model="gpt-4o")
    if "summary_recorded" in EVENT_CLASSES:
        store.append(session_id, [_summary(store, last_version=4)])
    last = MessageAppended(role="assistant", content="", origin=Origin(framework="f", item={"id": [1, None]}))
    store.append(
        session_id,
        [
            StateRecorded(
                framework="langgraph",
                namespace="",
                key="c1",
                media_type="application/json",
                content=BIG_ARTIFACT,
            ),
            last,
            MessageRemoved(target_event_ids=(last.event_id,), reason="RemoveMessage"),
            SessionRewound(to_version=3, reason="time_travel"),
        ],
    )
    return store.read_session(session_id)


def _summary(store: SQLiteStore, last_version: int) -> Event:
    """A summary_recorded event built from its JSON (the type is newer than some of this code)."""
    data: dict[str, Any] = {
        "type": "summary_recorded",
        "first_version": 2,
        "last_version": last_version,
        "level": 0,
        "text": "The user asked for a fix; tests were run.",
        "tokens": 0,
        "summarizer": {"name": "extractive"},
        "key": hashlib.sha256(b"range").hexdigest(),
    }
    draft: Any = parse_event(data)
    return parse_event({**data, "tokens": store.tokenizer.count(draft.context_text())})


def same_events(a: list[RecordedEvent], b: list[RecordedEvent]) -> None:
    assert [(r.session_id, r.version, r.event_id, r.type) for r in a] == [
        (r.session_id, r.version, r.event_id, r.type) for r in b
    ]
    for left, right in zip(a, b, strict=True):
        assert left.event.schema_version == right.event.schema_version
        assert left.event.model_dump() == right.event.model_dump()
        assert left.tokens == right.tokens


def export_text(store: SQLiteStore, *session_ids: str) -> str:
    return "".join(export_sessions(store, session_ids, "jsonl"))


# --- jsonl -----------------------------------------------------------------------------------------


def test_jsonl_round_trip_of_every_event_type(store: SQLiteStore, other: SQLiteStore) -> None:
    original = full_session(store)
    assert {r.type for r in original} == set(EVENT_CLASSES)
    assert any(isinstance(r.event, ToolReturned) and r.event.artifact_id for r in original)
    text = export_text(store, "full")
    result = import_file(other, text, "jsonl")
    assert result.sessions == [
        {"session_id": "full", "events": len(original), "appended": len(original), "skipped": 0}
    ]
    imported = other.read_session("full")
    same_events(original, imported)
    assert other.verify().ok
    # Every event keeps the time it was first recorded, so a restored store's audit per day is the
    # source's.
    assert [r.recorded_at for r in imported] == [r.recorded_at for r in original]
    assert other.get_blob(_artifact_id(imported)).text == BIG_ARTIFACT


def test_jsonl_round_trip_keeps_recorded_at_where_positions_and_hashes_are_new(
    store: SQLiteStore, other: SQLiteStore
) -> None:
    original = full_session(store)
    other.append("already-here", [MessageAppended(role="user", content="first")])
    import_file(other, export_text(store, "full"), "jsonl")
    imported = other.read_session("full")
    same_events(original, imported)
    assert [r.recorded_at for r in imported] == [r.recorded_at for r in original]
    # The new store's chain is its own: the events were appended again, after its own.
    assert [r.position for r in imported] == [r.position + 1 for r in original]
    assert {r.hash for r in imported}.isdisjoint(r.hash for r in original)
    assert other.verify().ok
    # The times come back in the store's own format, from the export's (any UTC offset).
    line = json.loads(export_text(store, "full").splitlines()[0])
    line["recorded_at"] = "2025-01-31T13:00:00+01:00"
    line["session_id"] = "dated"
    line["event_id"] = "dated-1"
    line["digest"] = jsonl_digest(line)
    import_file(other, json.dumps(line), "jsonl")
    assert other.read_session("dated")[0].recorded_at == "2025-01-31T12:00:00.000000+00:00"
    assert any(
        s.session_id == "dated" and s.first_recorded_at.startswith("2025-01-31") for s in other.sessions()
    )


@pytest.mark.parametrize("value", ["yesterday", "2025-01-31T12:00:00", 12])
def test_a_recorded_at_that_is_not_a_utc_time_is_refused(
    store: SQLiteStore, other: SQLiteStore, value: Any
) -> None:
    store.append("s", [MessageAppended(role="user", content="x")])
    line = json.loads(export_text(store, "s"))
    line["recorded_at"] = value
    with pytest.raises(InvalidEventError, match=r"line 1: recorded_at .* is not an ISO 8601 time"):
        import_file(other, json.dumps(line), "jsonl")
    assert other.count_events() == 0


def _artifact_id(records: list[RecordedEvent]) -> str:
    return next(
        r.event.artifact_id for r in records if isinstance(r.event, ArtifactWritten) and r.event.artifact_id
    )


def test_jsonl_lines_carry_the_envelope_and_a_checkable_digest(store: SQLiteStore) -> None:
    full_session(store)
    lines = [json.loads(line) for line in export_jsonl(store, "full")]
    first = lines[0]
    assert set(first) == {
        "position",
        "session_id",
        "version",
        "event_id",
        "type",
        "schema_version",
        "tokens",
        "recorded_at",
        "prev_hash",
        "hash",
        "event",
        "digest",
    }
    assert first["event"]["tokenizer"] == store.tokenizer.name
    assert all(line["digest"] == jsonl_digest(line) for line in lines)
    big = next(line for line in lines if line["type"] == "tool_returned" and "artifact_id" in line["event"])
    assert big["event"]["content"] == BIG_OUTPUT


def test_several_sessions_and_a_fork_import_in_order(store: SQLiteStore, other: SQLiteStore) -> None:
    full_session(store, "parent")
    store.append("fork", [SessionStarted(parent=ForkPoint(session_id="parent", version=3))])
    store.append("fork", [MessageAppended(role="user", content="Try another way.")])
    store.append("third", [MessageAppended(role="user", content="hello")])
    # Given fork first, the export still puts its parent before it.
    text = export_text(store, "fork", "third", "parent")
    assert json.loads(text.splitlines()[0])["session_id"] == "parent"
    result = import_file(other, text, "jsonl")
    assert [s["session_id"] for s in result.sessions] == ["parent", "fork", "third"]
    for sid in ("parent", "fork", "third"):
        same_events(store.read_session(sid), other.read_session(sid))
    assert other.verify().ok


def test_a_fork_before_its_parent_or_without_it_is_refused(store: SQLiteStore, other: SQLiteStore) -> None:
    store.append("parent", [MessageAppended(role="user", content="hi")] * 1)
    store.append("fork", [SessionStarted(parent=ForkPoint(session_id="parent", version=1))])
    parent_lines = list(export_jsonl(store, "parent"))
    fork_lines = list(export_jsonl(store, "fork"))
    with pytest.raises(InvalidEventError, match="comes later in the file"):
        parse_jsonl("\n".join(fork_lines + parent_lines))
    with pytest.raises(InvalidEventError, match="parent first"):
        import_file(other, "\n".join(fork_lines), "jsonl")
    assert other.count_events() == 0
    import_file(other, "\n".join(parent_lines), "jsonl")
    assert import_file(other, "\n".join(fork_lines), "jsonl").appended == 1


def test_session_option_renames_sessions_and_their_forks(store: SQLiteStore, other: SQLiteStore) -> None:
    store.append("a", [MessageAppended(role="user", content="hi")])
    store.append("b", [SessionStarted(parent=ForkPoint(session_id="a", version=1))])
    conversations = parse_jsonl(export_text(store, "a", "b"), session="copy")
    assert [c.session_id for c in conversations] == ["copy-1", "copy-2"]
    fork = conversations[1].events[0]
    assert isinstance(fork, SessionStarted) and fork.parent is not None
    assert fork.parent.session_id == "copy-1"
    import_file(other, export_text(store, "a"), "jsonl", session="renamed")
    assert other.head_version("renamed") == 1


def test_reimport_is_idempotent_and_a_grown_export_appends_the_rest(
    store: SQLiteStore, other: SQLiteStore
) -> None:
    full_session(store)
    text = export_text(store, "full")
    import_file(other, text, "jsonl")
    before = other.count_events()
    again = import_file(other, text, "jsonl")
    assert again.appended == 0 and again.sessions[0]["skipped"] == before
    assert other.count_events() == before
    store.append("full", [MessageAppended(role="user", content="one more thing")])
    grown = import_file(other, export_text(store, "full"), "jsonl")
    assert grown.appended == 1
    same_events(store.read_session("full"), other.read_session("full"))


def test_importing_into_the_source_store_is_a_no_op(store: SQLiteStore) -> None:
    full_session(store)
    before = store.count_events()
    assert import_file(store, export_text(store, "full"), "jsonl").appended == 0
    assert store.count_events() == before


def _lines(store: SQLiteStore) -> list[dict[str, Any]]:
    store.append("s", [SessionStarted(title="t"), MessageAppended(role="user", content="hello")])
    return [json.loads(line) for line in export_jsonl(store, "s")]


def _edit(line: dict[str, Any], **changes: Any) -> dict[str, Any]:
    edited = {**line, **changes}
    edited["digest"] = jsonl_digest(edited)
    return edited


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda lines: "", "no events"),
        (lambda lines: "{not json", "line 1: malformed JSON"),
        (lambda lines: "[1, 2]", "line 1: expected a JSON object"),
        (lambda lines: json.dumps({"role": "user"}), "missing session_id, version, event_id, type, event"),
        (lambda lines: json.dumps(lines[1]), "version 2 where 1 was expected"),
        (lambda lines: "\n".join(json.dumps(line) for line in [lines[0], lines[0]]), "version 1 where 2"),
        (
            lambda lines: json.dumps({**lines[0], "event": {**lines[0]["event"], "title": "edited"}}),
            "does not match its digest",
        ),
        (lambda lines: json.dumps(_edit(lines[0], type="wizard_cast")), "unknown event type 'wizard_cast'"),
        (lambda lines: json.dumps(_edit(lines[0], schema_version=9)), "newer than this turnlog reads"),
        (
            lambda lines: json.dumps(lines[0]) + "\n" + json.dumps(_edit(lines[1], event={"role": "robot"})),
            "line 2 .*role",
        ),
        (lambda lines: json.dumps(_edit(lines[0], version="1")), "version must be an integer"),
        (
            lambda lines: json.dumps(_edit(lines[0], event={**lines[0]["event"], "tokenizer": "o200k_base"})),
            "turnlog init --tokenizer o200k_base",
        ),
    ],
)
def test_malformed_jsonl_is_one_clear_error_and_changes_nothing(
    store: SQLiteStore, other: SQLiteStore, make: Any, message: str
) -> None:
    text = make(_lines(store))
    import_file(other, json.dumps([{"role": "user", "content": "keep"}]), "openai", session="keep")
    before = other.count_events()
    with pytest.raises(InvalidEventError, match=message):
        import_file(other, text, "jsonl")
    assert other.count_events() == before
    assert other.verify().ok


def test_a_name_taken_by_another_session_is_refused_before_anything_is_written(
    store: SQLiteStore, other: SQLiteStore
) -> None:
    store.append("a", [MessageAppended(role="user", content="a")])
    store.append("b", [MessageAppended(role="user", content="b")])
    other.append("b", [MessageAppended(role="user", content="not from the file")])
    with pytest.raises(DuplicateEventError, match="--session"):
        import_file(other, export_text(store, "a", "b"), "jsonl")
    assert other.head_version("a") == 0  # "a" comes first in the file, yet nothing was written


json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_leaves | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
contents = st.text(st.characters(codec="utf-8"), max_size=60) | st.builds(
    lambda piece, n: piece * n,
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=5),
    st.integers(INLINE_LIMIT // 4, INLINE_LIMIT + 50),
)
ids = st.text(st.characters(exclude_categories=("Z", "C")), min_size=1, max_size=20)


@st.composite
def sessions(draw: st.DrawFn) -> list[Event]:
    events: list[Event] = [
        SessionStarted(
            title=draw(st.none() | contents),
            metadata=draw(st.none() | st.dictionaries(st.text(max_size=6), json_values, max_size=3)),
        )
    ]
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["message", "call", "artifact", "todos", "usage"]))
        if kind == "message":
            events.append(
                MessageAppended(
                    role=draw(st.sampled_from(["system", "user", "assistant"])), content=draw(contents)
                )
            )
        elif kind == "call":
            call_id = draw(ids)
            events.append(
                MessageAppended(
                    role="assistant",
                    tool_calls=(ToolCall(id=call_id, name="tool", arguments=draw(contents)),),
                )
            )
            events.append(
                ToolReturned(tool_call_id=call_id, content=draw(contents), is_error=draw(st.booleans()))
            )
        elif kind == "artifact":
            events.append(
                ArtifactWritten(name=draw(st.text(min_size=1, max_size=20)), content=draw(contents))
            )
        elif kind == "todos":
            events.append(
                TodosUpdated(todos=(TodoItem(id="1", content=draw(st.text(min_size=1, max_size=20))),))
            )
        else:
            events.append(
                UsageRecorded(
                    model="m",
                    input_tokens=draw(st.integers(0, 10**9)),
                    output_tokens=draw(st.integers(0, 10**6)),
                )
            )
    return events


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_jsonl_round_trip_property(events: list[Event]) -> None:
    with SQLiteStore.open(":memory:") as source, SQLiteStore.open(":memory:") as target:
        source.append("s", events)
        import_file(target, export_text(source, "s"), "jsonl")
        same_events(source.read_session("s"), target.read_session("s"))
        assert target.verify().ok


# --- transcripts -----------------------------------------------------------------------------------


def conversation(store: SQLiteStore) -> None:
    store.append(
        "chat",
        [
            SessionStarted(title="A chat", model="gpt-4o"),
            MessageAppended(role="system", content="Be brief."),
            MessageAppended(role="user", content="List the files and show the README.", name="ana"),
            MessageAppended(
                role="assistant",
                tool_calls=(
                    ToolCall(id="c1", name="ls", arguments="{}"),
                    ToolCall(id="c2", name="cat", arguments='{"path": "README.md"}'),
                ),
            ),
            ToolReturned(tool_call_id="c1", tool_name="ls", content="README.md\nsrc/"),
            ToolReturned(tool_call_id="c2", tool_name="cat", content=BIG_OUTPUT, is_error=True),
            TodosUpdated(todos=(TodoItem(id="1", content="read"),)),
            UsageRecorded(model="gpt-4o", input_tokens=100, output_tokens=10, cache_read_tokens=64),
            MessageAppended(role="assistant", content="Two entries; the README is long."),
            UsageRecorded(model="gpt-4o", input_tokens=200, output_tokens=20, reasoning_tokens=5),
            MessageAppended(role="system", content="Wrap up."),
            MessageAppended(role="user", content="Thanks!"),
        ],
    )


def _conversation_of(records: list[RecordedEvent]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for r in records:
        e = r.event
        if isinstance(e, MessageAppended):
            out.append((e.role, e.content, e.name, e.tool_calls))
        elif isinstance(e, ToolReturned):
            out.append(("tool", e.tool_call_id, e.tool_name, e.content))
    return out


def test_openai_export_reads_back_with_the_openai_importer(store: SQLiteStore, other: SQLiteStore) -> None:
    conversation(store)
    document = export_openai(store, "chat")
    assert (document["id"], document["title"], document["model"]) == ("chat", "A chat", "gpt-4o")
    assert document["messages"][2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "cat", "arguments": '{"path": "README.md"}'},
            },
        ],
    }
    assert document["usage"]["prompt_tokens"] == 300 and document["usage"]["completion_tokens"] == 30
    import_file(other, json.dumps(document), "openai")
    assert _conversation_of(other.read_session("chat")) == _conversation_of(store.read_session("chat"))
    [usage] = [r.event for r in other.read_session("chat") if isinstance(r.event, UsageRecorded)]
    assert (usage.input_tokens, usage.cache_read_tokens, usage.reasoning_tokens) == (300, 64, 5)


def test_anthropic_export_shape(store: SQLiteStore) -> None:
    conversation(store)
    document = export_anthropic(store, "chat")
    assert set(document) == {"system", "messages"}
    assert document["system"] == "Be brief."
    turns = document["messages"]
    roles = [t["role"] for t in turns]
    assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))
    tool_use = [b for t in turns for b in t["content"] if b["type"] == "tool_use"]
    assert tool_use == [
        {"type": "tool_use", "id": "c1", "name": "ls", "input": {}},
        {"type": "tool_use", "id": "c2", "name": "cat", "input": {"path": "README.md"}},
    ]
    results = [b for t in turns for b in t["content"] if b["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == ["c1", "c2"]
    assert results[1]["content"] == BIG_OUTPUT and results[1]["is_error"] is True
    assert "is_error" not in results[0]
    # The late system message is said by the user, in order, as Anthropic has no system turns.
    last = turns[-1]
    assert last["role"] == "user" and [b["text"] for b in last["content"]] == ["Wrap up.", "Thanks!"]


def test_transcript_formats_take_one_session(store: SQLiteStore) -> None:
    conversation(store)
    store.append("other", [MessageAppended(role="user", content="x")])
    with pytest.raises(InvalidEventError, match="one conversation"):
        export_sessions(store, ["chat", "other"], "openai")
    with pytest.raises(UnknownSessionError, match=r"no session 'chta'.*'chat'"):
        export_sessions(store, ["chta"], "jsonl")


# --- the command line ------------------------------------------------------------------------------


def invoke(runner: CliRunner, db: Path, *args: str, input: str | None = None) -> Any:
    result = runner.invoke(cli, ["--db", str(db), *args], input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def test_cli_export_then_import_into_a_new_store(runner: CliRunner, tmp_path: Path) -> None:
    source, target = tmp_path / "a.db", tmp_path / "b.db"
    with SQLiteStore.open(source) as opened:
        full_session(opened)
        conversation(opened)
    result = invoke(runner, source, "export", "full", "chat")
    assert result.exit_code == 0
    assert {json.loads(line)["session_id"] for line in result.stdout.splitlines()} == {"full", "chat"}
    out = tmp_path / "all.jsonl"
    result = invoke(runner, source, "export", "full", "chat", "--output", str(out), "--json")
    summary = json.loads(result.stdout)
    assert summary["sessions"] == ["full", "chat"] and summary["bytes"] == out.stat().st_size
    assert out.read_text() == invoke(runner, source, "export", "full", "chat").stdout
    result = invoke(runner, target, "import", str(out), "--format", "jsonl", "--json")
    with SQLiteStore.open(source) as opened:
        sizes = [opened.head_version("full"), opened.head_version("chat")]
    assert [s["appended"] for s in json.loads(result.stdout)] == sizes
    assert invoke(runner, target, "verify").exit_code == 0
    with SQLiteStore.open(source) as a, SQLiteStore.open(target) as b:
        for sid in ("full", "chat"):
            same_events(a.read_session(sid), b.read_session(sid))
    again = invoke(runner, target, "import", str(out), "--format", "jsonl", "--json")
    assert [s["appended"] for s in json.loads(again.stdout)] == [0, 0]


def test_cli_transcript_exports(runner: CliRunner, tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    with SQLiteStore.open(db) as opened:
        conversation(opened)
    openai = json.loads(invoke(runner, db, "export", "chat", "--format", "openai").stdout)
    assert openai["id"] == "chat" and openai["messages"][0] == {"role": "system", "content": "Be brief."}
    anthropic = json.loads(invoke(runner, db, "export", "chat", "--format", "anthropic").stdout)
    assert anthropic["system"] == "Be brief."
    transcript = tmp_path / "chat.json"
    invoke(runner, db, "export", "chat", "--format", "openai", "-o", str(transcript))
    result = invoke(
        runner, tmp_path / "b.db", "import", str(transcript), "--format", "openai", "--session", "copy"
    )
    assert result.exit_code == 0 and "copy" in result.stdout


def test_cli_export_errors_leave_no_file(runner: CliRunner, tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    with SQLiteStore.open(db) as opened:
        conversation(opened)
    out = tmp_path / "x.json"
    result = invoke(runner, db, "export", "chta", "--output", str(out))
    assert result.exit_code == 1 and "did you mean 'chat'" in result.output
    assert not out.exists() and list(tmp_path.glob(".x.json.*")) == []
    result = invoke(runner, db, "export", "chat", "chat", "--format", "anthropic")
    assert result.exit_code == 1 and "one conversation" in result.output
    result = invoke(runner, db, "export", "chat", "--format", "yaml")
    assert result.exit_code == 2
    result = invoke(runner, db, "export", "chat", "--output", str(tmp_path / "no" / "such" / "dir.json"))
    assert result.exit_code == 1 and result.output.startswith("Error:")


def test_cli_import_of_a_malformed_file_is_one_line(runner: CliRunner, tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"session_id": "s"}\n')
    result = invoke(runner, db, "import", str(bad), "--format", "jsonl")
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and "line 1: missing version" in result.output


def test_cli_progress_bar_and_quiet(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import turnlog.commands.io

    original = turnlog.commands.io._ProgressBar.__init__

    def on_any_stream(self: Any, label: str, *, enabled: bool) -> None:
        original(self, label, enabled=enabled)
        self.enabled = enabled  # CliRunner's stderr is no terminal; pretend it is

    monkeypatch.setattr(turnlog.commands.io._ProgressBar, "__init__", on_any_stream)
    source = tmp_path / "a.db"
    with SQLiteStore.open(source) as opened:
        full_session(opened)
        conversation(opened)  # over the 20 events from which a bar is shown
    out = tmp_path / "full.jsonl"
    invoke(runner, source, "export", "full", "chat", "-o", str(out))
    loud = invoke(runner, tmp_path / "b.db", "import", str(out), "--format", "jsonl")
    assert loud.exit_code == 0 and "importing" in loud.stderr
    quiet = invoke(runner, tmp_path / "c.db", "import", str(out), "--format", "jsonl", "--quiet")
    assert quiet.exit_code == 0 and quiet.stderr == ""
    assert "full" in quiet.stdout


def test_export_is_listed_with_help_and_json(runner: CliRunner) -> None:
    commands = load_commands()
    assert "export" in commands
    result = runner.invoke(cli, ["export", "--help"])
    assert result.exit_code == 0 and "--format [jsonl|openai|anthropic]" in result.output
    assert "jsonl" in commands["import"].params[1].type.choices  # type: ignore[attr-defined]
    assert "pydantic-ai" in commands["import"].params[1].type.choices  # type: ignore[attr-defined]


# --- export --output never harms the store ---------------------------------------------------------


def _store_state(db: Path) -> list[tuple[int, str, str]]:
    with SQLiteStore.open(db, create=False) as opened:
        assert opened.verify().ok
        return [(r.position, r.event_id, r.hash) for r in opened.read_session("chat")]


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_cli_export_refuses_the_stores_own_files(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    db = tmp_path / "a.db"
    with SQLiteStore.open(db) as opened:
        conversation(opened)
    before = _store_state(db)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    (tmp_path / "link.db").symlink_to(db.name + suffix)
    targets = [
        str(db) + suffix,  # the same path
        f"../a.db{suffix}",  # relative, from another folder
        f"../sub/../a.db{suffix}",
        str(tmp_path / "link.db"),  # a symlink to it
    ]
    if not suffix:
        os.link(db, tmp_path / "hard.db")  # another name for the same inode
        targets.append(str(tmp_path / "hard.db"))
    for target in targets:
        result = invoke(runner, Path("../a.db"), "export", "chat", "--output", target)
        assert result.exit_code == 1, (target, result.output)
        assert result.output.count("\n") == 1 and "is the store's own file" in result.output, result.output
        assert _store_state(db) == before
    assert list(tmp_path.glob(".*.tmp")) == []


def test_export_to_file_refuses_the_stores_file_in_the_api(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    with SQLiteStore.open(db) as opened:
        conversation(opened)
        with pytest.raises(InvalidEventError, match="own file"):
            export_to_file(opened, ["chat"], "jsonl", db)
        assert opened.verify().ok and opened.head_version("chat") > 0


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_cli_export_file_gets_the_users_normal_mode(runner: CliRunner, tmp_path: Path, umask: int) -> None:
    db = tmp_path / "a.db"
    with SQLiteStore.open(db) as opened:
        conversation(opened)
    out = tmp_path / "chat.jsonl"
    previous = os.umask(umask)
    try:
        result = invoke(runner, db, "export", "chat", "--output", str(out))
    finally:
        os.umask(previous)
    assert result.exit_code == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    # Replacing a file keeps the mode its owner gave it.
    out.chmod(0o600)
    assert invoke(runner, db, "export", "chat", "--output", str(out)).exit_code == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert out.read_text() == export_text_of(db, "chat")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def export_text_of(db: Path, *session_ids: str) -> str:
    with SQLiteStore.open(db, create=False) as opened:
        return export_text(opened, *session_ids)


# --- each session all or nothing, the file checked whole before anything is written -----------


HELPER = Path(__file__).resolve().parent / "helpers" / "importer.py"
ROOT = Path(__file__).resolve().parent.parent


def sized_session(store: SQLiteStore, session_id: str, messages: int) -> None:
    events: list[Event] = [SessionStarted(title=session_id)]
    events += [
        MessageAppended(role="user" if i % 2 else "assistant", content=f"{session_id} message {i}")
        for i in range(messages)
    ]
    store.append(session_id, events)


def test_an_import_killed_midway_leaves_whole_sessions_and_a_rerun_finishes_it(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    sizes = {"s1": 30, "s2": 130, "s3": 75}
    with SQLiteStore.open(source) as opened:
        for sid, size in sizes.items():
            sized_session(opened, sid, size)
        export = tmp_path / "all.jsonl"
        export.write_text(export_text(opened, *sizes))
        originals = {sid: opened.read_session(sid) for sid in sizes}
    # The batch limit lowered to 50: s2 and s3 are each larger than one batch.
    for kill_in in range(1, 7):
        target = tmp_path / f"target-{kill_in}.db"
        done = subprocess.run(
            [
                sys.executable,
                str(HELPER),
                *("--db", str(target), "--file", str(export), "--format", "jsonl"),
                *("--max-batch", "50", "--kill-in", str(kill_in)),
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            check=False,
        )
        killed = done.returncode == -signal.SIGKILL
        assert killed or (done.returncode == 0 and "finished" in done.stdout), done.stderr
        with SQLiteStore.open(target) as opened:
            heads = [opened.head_version(sid) for sid in sizes]
            # Whole sessions only, in the file's order; the one in flight was rolled back.
            assert heads in ([0, 0, 0], [31, 0, 0], [31, 131, 0], [31, 131, 76]), (kill_in, heads)
            if killed:
                assert heads != [31, 131, 76]
            assert opened.verify().ok
            rerun = import_file(opened, export.read_bytes(), "jsonl")
            assert [s["appended"] for s in rerun.sessions] == [
                0 if head else size + 1 for head, size in zip(heads, sizes.values(), strict=True)
            ]
            for sid in sizes:
                imported = opened.read_session(sid)
                same_events(originals[sid], imported)
                assert [r.recorded_at for r in imported] == [r.recorded_at for r in originals[sid]]
            assert opened.verify().ok
            assert import_file(opened, export.read_bytes(), "jsonl").appended == 0


def test_duplicate_conversation_ids_in_one_file_are_refused_before_writing(file_store: SQLiteStore) -> None:
    first = {"id": "conv", "messages": [{"role": "user", "content": "one"}]}
    second = {"id": "conv", "messages": [{"role": "user", "content": "two"}]}
    text = json.dumps({"id": "fine", "messages": [{"role": "user", "content": "ok"}]})
    text += "\n" + json.dumps(first) + "\n" + json.dumps(second)
    with pytest.raises(InvalidEventError, match="conversations 2 and 3 of the file are both session 'conv'"):
        import_file(file_store, text, "openai")
    assert file_store.count_events() == 0


def test_an_event_id_twice_in_the_file_is_refused_before_writing(
    store: SQLiteStore, other: SQLiteStore
) -> None:
    store.append("a", [MessageAppended(event_id="same", role="user", content="a")])
    lines = export_text(store, "a")
    renamed = json.loads(lines)
    renamed["session_id"] = "b"
    renamed["digest"] = jsonl_digest(renamed)
    with pytest.raises(InvalidEventError, match="event id 'same' appears twice in the file"):
        import_file(other, lines + json.dumps(renamed) + "\n", "jsonl")
    assert other.count_events() == 0


def test_ids_stored_in_another_session_are_refused_before_writing(store: SQLiteStore) -> None:
    sized_session(store, "a", 3)
    sized_session(store, "b", 3)
    before = store.count_events()
    # Renamed, the export's events would get new sessions but keep their (stored) ids.
    with pytest.raises(DuplicateEventError, match="already stored in session 'a'"):
        import_file(store, export_text(store, "a", "b"), "jsonl", session="copy")
    assert store.count_events() == before and store.head_version("copy-1") == 0


def test_a_session_larger_than_the_batch_limit_is_one_append(
    store: SQLiteStore, other: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import turnlog.store.append_rules as backend

    sized_session(store, "big", 40)
    monkeypatch.setattr(backend, "MAX_BATCH", 10)
    appends: list[int] = []
    original = other.append

    def counting(session_id: str, events: Any, **kw: Any) -> Any:
        appends.append(len(events))
        return original(session_id, events, **kw)

    monkeypatch.setattr(other, "append", counting)
    assert import_file(other, export_text(store, "big"), "jsonl").appended == 41
    assert appends == [41]
    with pytest.raises(InvalidEventError, match="at most 10 events"):
        original("direct", [MessageAppended(role="user", content=str(i)) for i in range(11)])


def test_append_with_given_times_checks_them(store: SQLiteStore) -> None:
    events = [MessageAppended(role="user", content="a"), MessageAppended(role="user", content="b")]
    with pytest.raises(InvalidEventError, match="holds 2 times for 1 events"):
        store.append("s", events[:1], recorded_at=["2025-01-01T00:00:00+00:00"] * 2)
    with pytest.raises(InvalidEventError, match="recorded_at of event 2"):
        store.append("s", events, recorded_at=["2025-01-01T00:00:00+00:00", "2025-01-01"])
    assert store.count_events() == 0
    records = store.append("s", events, recorded_at=["2025-01-01T00:00:00Z", "2025-01-02T01:00:00+01:00"])
    assert [r.recorded_at for r in records] == [
        "2025-01-01T00:00:00.000000+00:00",
        "2025-01-02T00:00:00.000000+00:00",
    ]
    assert [r.recorded_at for r in store.read_session("s")] == [r.recorded_at for r in records]
    assert store.verify().ok


# --- dangling tool calls: a marked "interrupted" result in the transcript formats, never imported ---


def dangling(store: SQLiteStore) -> None:
    store.append(
        "crashed",
        [
            SessionStarted(title="crashed"),
            MessageAppended(role="user", content="Run both."),
            MessageAppended(
                role="assistant",
                tool_calls=(
                    ToolCall(id="done", name="ls", arguments="{}"),
                    ToolCall(id="lost", name="rm", arguments='{"path": "x"}'),
                ),
            ),
            ToolReturned(tool_call_id="done", tool_name="ls", content="a b"),
            MessageAppended(role="user", content="Still there?"),
            MessageAppended(role="assistant", tool_calls=(ToolCall(id="last", name="ls", arguments="{}"),)),
        ],
    )


def test_openai_export_gives_each_dangling_call_a_marked_interrupted_result(store: SQLiteStore) -> None:
    dangling(store)
    document = export_openai(store, "crashed")
    roles = [(m["role"], m.get("tool_call_id")) for m in document["messages"]]
    assert roles == [
        ("user", None),
        ("assistant", None),
        ("tool", "done"),
        ("tool", "lost"),
        ("user", None),
        ("assistant", None),
        ("tool", "last"),
    ]
    synthesized = [m for m in document["messages"] if m.get("tool_call_id") in ("lost", "last")]
    assert all(m["content"] == INTERRUPTED for m in synthesized)
    assert document["turnlog_synthesized_results"] == ["lost", "last"]


def test_anthropic_export_pairs_every_tool_use(store: SQLiteStore) -> None:
    dangling(store)
    turns = export_anthropic(store, "crashed")["messages"]
    uses = [b["id"] for t in turns for b in t["content"] if b["type"] == "tool_use"]
    results = {b["tool_use_id"]: b for t in turns for b in t["content"] if b["type"] == "tool_result"}
    assert uses == ["done", "lost", "last"] and set(results) == set(uses)
    assert results["lost"]["content"] == INTERRUPTED and results["lost"]["is_error"] is True
    assert turns[-1]["role"] == "user"  # the API needs the result after the last tool_use


@pytest.mark.parametrize("marker", [True, False])
def test_a_synthesized_result_read_back_is_dropped(
    store: SQLiteStore, other: SQLiteStore, marker: bool
) -> None:
    dangling(store)
    document = export_openai(store, "crashed")
    if not marker:  # the plain list of messages, as one would send it to the API
        document = document["messages"]
    import_file(other, json.dumps(document), "openai", session="back")
    returns = [r.event for r in other.read_session("back") if isinstance(r.event, ToolReturned)]
    assert [r.tool_call_id for r in returns] == ["done"]
    assert all(r.content != INTERRUPTED for r in returns)
    # Exported again, the session gives the same transcript: the calls are still dangling.
    again = export_openai(other, "back")
    assert again["messages"] == export_openai(store, "crashed")["messages"]


def test_a_listed_result_that_is_not_the_marker_is_kept(other: SQLiteStore) -> None:
    document = {
        "messages": [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c", "content": "a real result"},
        ],
        "turnlog_synthesized_results": ["c"],
    }
    import_file(other, json.dumps(document), "openai", session="s")
    assert [r.type for r in other.read_session("s")][-1] == "tool_returned"
