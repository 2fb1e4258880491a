"""The sessions projection: per-session counts, title, model, fork point and activity, read now or as
of any earlier position, by index seeks only, and equal to a rebuild after incremental catch-up."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnlog.projections.materialize import Materializer
from turnlog.projections.sessions import SessionInfo, list_sessions
from turnlog.projections.sessions_projection import SessionsProjection
from turnlog.store import (
    ForkPoint,
    MessageAppended,
    RecordedEvent,
    RunStarted,
    SessionStarted,
    SQLiteStore,
    StoreError,
    ToolCall,
    ToolReturned,
    UsageRecorded,
)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SQLiteStore]:
    opened = SQLiteStore.open(tmp_path / "sessions.db")
    # A clock that ticks one second per append, so first and last activity differ predictably.
    ticks = itertools.count()
    monkeypatch.setattr(
        "turnlog.store.sqlite_append.now", lambda: f"2025-08-01T10:00:{next(ticks):02d}.000000+00:00"
    )
    try:
        yield opened
    finally:
        opened.close()


def fill(store: SQLiteStore) -> None:
    """Two sessions, interleaved: s1 with every kind of counted event, s2 a fork of s1."""
    store.append(
        "s1",
        [
            SessionStarted(title="Refactor", model="gpt-4o"),
            MessageAppended(role="system", content="You are terse."),
            MessageAppended(role="user", content="list the files"),
        ],
    )  # 1..3, at :00
    store.append(
        "s1",
        [
            MessageAppended(
                role="assistant",
                content="",
                tool_calls=(ToolCall(id="c1", name="ls"), ToolCall(id="c2", name="pwd")),
            ),
            ToolReturned(tool_call_id="c1", content="a.py b.py"),
        ],
    )  # 4..5, at :01
    store.append(
        "s2", [SessionStarted(parent=ForkPoint(session_id="s1", version=3)), RunStarted(run_id="r")]
    )  # 6..7, at :02
    store.append(
        "s1",
        [
            ToolReturned(tool_call_id="c2", content="/work"),
            UsageRecorded(model="gpt-4o", input_tokens=10, output_tokens=2),
            MessageAppended(role="assistant", content="Two files."),
        ],
    )  # 8..10, at :03
    store.append("s2", [MessageAppended(role="user", content="and now?")])  # 11, at :04


def expected(events: list[RecordedEvent], at: int) -> list[SessionInfo]:
    """The listing as of ``at``, folded independently from the raw events."""
    by_session: dict[str, list[RecordedEvent]] = {}
    for record in events:
        if record.position <= at:
            by_session.setdefault(record.session_id, []).append(record)
    result = []
    for sid, records in sorted(by_session.items(), key=lambda item: item[1][0].position):
        messages = [r.event for r in records if isinstance(r.event, MessageAppended)]
        first = records[0].event
        started = first if isinstance(first, SessionStarted) else None
        result.append(
            SessionInfo(
                session_id=sid,
                head_version=records[-1].version,
                event_count=len(records),
                system_messages=sum(m.role == "system" for m in messages),
                user_messages=sum(m.role == "user" for m in messages),
                assistant_messages=sum(m.role == "assistant" for m in messages),
                tool_calls=sum(len(m.tool_calls or ()) for m in messages),
                tool_returns=sum(isinstance(r.event, ToolReturned) for r in records),
                tokens=sum(r.tokens or 0 for r in records),
                title=started.title if started else None,
                model=started.model if started else None,
                parent=started.parent if started else None,
                first_position=records[0].position,
                last_position=records[-1].position,
                first_recorded_at=records[0].recorded_at,
                last_recorded_at=records[-1].recorded_at,
            )
        )
    return result


def test_fields(store: SQLiteStore) -> None:
    fill(store)
    s1, s2 = list_sessions(store)
    assert (s1.session_id, s1.title, s1.model, s1.parent) == ("s1", "Refactor", "gpt-4o", None)
    assert (s1.head_version, s1.event_count) == (8, 8)
    assert (s1.system_messages, s1.user_messages, s1.assistant_messages) == (1, 1, 2)
    assert (s1.tool_calls, s1.tool_returns) == (2, 2)
    assert (s1.first_position, s1.last_position) == (1, 10)
    assert (s1.first_recorded_at, s1.last_recorded_at) == (
        "2025-08-01T10:00:00.000000+00:00",
        "2025-08-01T10:00:03.000000+00:00",
    )
    assert s1.tokens == sum(r.tokens or 0 for r in store.read_session("s1")) > 0
    assert (s2.session_id, s2.title, s2.model) == ("s2", None, None)
    assert s2.parent == ForkPoint(session_id="s1", version=3)
    # A fork's own versions continue after the fork version (3): its 3 own events are versions 4-6.
    assert (s2.head_version, s2.event_count, s2.user_messages) == (6, 3, 1)
    assert (s2.first_position, s2.last_position) == (6, 11)
    # The log's own summary agrees on what both know.
    summaries = {s.session_id: s for s in store.sessions()}
    for info in (s1, s2):
        summary = summaries[info.session_id]
        assert (info.head_version, info.event_count, info.tokens) == (
            summary.head_version,
            summary.event_count,
            summary.tokens,
        )


def test_session_without_session_started(store: SQLiteStore) -> None:
    store.append("bare", [MessageAppended(role="user", content="hi")])
    (info,) = list_sessions(store)
    assert (info.title, info.model, info.parent, info.user_messages) == (None, None, None, 1)


def test_as_of_every_position(store: SQLiteStore) -> None:
    fill(store)
    events = list(store.iter_after(0))
    head = store.head_position()
    for at in range(head + 2):
        assert list_sessions(store, at=at) == expected(events, at), at
    assert list_sessions(store, at=0) == []
    assert list_sessions(store, at=head + 100) == list_sessions(store)
    # As of position 5, s2 does not exist yet and s1 has one tool return out of two.
    (s1,) = list_sessions(store, at=5)
    assert (s1.head_version, s1.tool_calls, s1.tool_returns, s1.last_position) == (5, 2, 1, 5)


def test_as_of_a_position_in_another_session_keeps_the_last_state(store: SQLiteStore) -> None:
    fill(store)
    at_seven = {s.session_id: s for s in list_sessions(store, at=7)}
    assert at_seven["s1"].last_position == 5
    assert (at_seven["s2"].head_version, at_seven["s2"].event_count) == (5, 2)  # a fork of s1 at version 3


@pytest.mark.parametrize("at", [-1, 1.5, True])
def test_invalid_position(store: SQLiteStore, at: object) -> None:
    with pytest.raises(StoreError, match="at must be a log position"):
        list_sessions(store, at=at)  # type: ignore[arg-type]


def test_as_of_reads_by_index_seeks_only(store: SQLiteStore) -> None:
    fill(store)
    list_sessions(store)  # catch up first: what follows is the query itself
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    try:
        list_sessions(store, at=7)
    finally:
        store.conn.set_trace_callback(None)
    queries = [s for s in statements if "sess_" in s]
    assert queries
    for sql in queries:
        assert "events" not in sql
        plan = " | ".join(row[3] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
        assert "SCAN" not in plan, plan


def test_incremental_catch_up_equals_rebuild(store: SQLiteStore) -> None:
    sessions_only = Materializer(store, [SessionsProjection()])
    store.append("a", [SessionStarted(title="A"), MessageAppended(role="user", content="one")])
    sessions_only.catch_up()
    store.append("b", [SessionStarted(parent=ForkPoint(session_id="a", version=1))])
    sessions_only.catch_up()
    for i in range(5):
        store.append("a" if i % 2 else "b", [MessageAppended(role="assistant", content=f"reply {i}")])
        sessions_only.catch_up()
    store.append("a", [ToolReturned(tool_call_id="x", content="orphan output")])
    assert sessions_only.differences() == []
    before = list_sessions(store)
    history = [list_sessions(store, at=at) for at in range(store.head_position() + 1)]
    sessions_only.rebuild()
    assert list_sessions(store) == before
    assert [list_sessions(store, at=at) for at in range(store.head_position() + 1)] == history
    assert [s.event_count for s in before] == [5, 4]
