"""The live set (projections/live.py) against a list-based reference written here: the state at every
version kept whole, rewinds copying an earlier state (nested rewinds bring events back: time travel)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.projections.live import LiveFold, live_events, live_versions
from turnlog.store import (
    MessageAppended,
    MessageRemoved,
    RecordedEvent,
    SessionRewound,
    SessionStarted,
    SQLiteStore,
    TodosUpdated,
    ToolCall,
    ToolReturned,
)


def _reference(events: list[Any]) -> list[list[int]]:
    """states[v]: the live versions after version v, by the rules of docs/events.md, naively."""
    states: list[list[int]] = [[]]
    ids: dict[str, int] = {}
    calls: dict[str, int] = {}  # call id -> the latest assistant version that made it
    answers: dict[int, list[int]] = {}
    for version, event in enumerate(events, 1):
        ids[event.event_id] = version
        before = states[-1]
        if isinstance(event, SessionRewound):
            states.append(list(states[event.to_version]))
            continue
        if isinstance(event, MessageRemoved):
            gone = set()
            for target in event.target_event_ids:
                v = ids.get(target)
                if v in before:
                    gone.add(v)
                    gone.update(answers.get(v, []))
            states.append([v for v in before if v not in gone])
            continue
        if isinstance(event, MessageAppended):
            for call in event.tool_calls or ():
                calls[call.id] = version
        if isinstance(event, ToolReturned) and event.tool_call_id in calls:
            answers.setdefault(calls[event.tool_call_id], []).append(version)
        states.append([*before, version])
    return states


@st.composite
def histories(draw: st.DrawFn) -> list[Any]:
    """Messages, calls and returns, rewinds to any earlier version, removals of any earlier event
    (live or not, message or not)."""
    events: list[Any] = []
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["user", "call", "return", "todo", "rewind", "remove"]))
        if kind == "rewind" and events:
            to = draw(st.integers(0, len(events)))
            events.append(SessionRewound(to_version=to, reason=draw(st.sampled_from(["pop", "time_travel"]))))
        elif kind == "remove" and events:
            targets = draw(st.lists(st.sampled_from(events), min_size=1, max_size=3, unique=True))
            events.append(MessageRemoved(target_event_ids=tuple(e.event_id for e in targets)))
        elif kind == "call":
            ids = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=2, unique=True))
            calls = tuple(ToolCall(id=i, name="f") for i in ids)
            events.append(MessageAppended(role="assistant", tool_calls=calls))
        elif kind == "return":
            events.append(ToolReturned(tool_call_id=draw(st.sampled_from(["a", "b", "c"])), content="r"))
        elif kind == "todo":
            events.append(TodosUpdated(todos=()))
        else:
            events.append(MessageAppended(role="user", content="u"))
    return events


@settings(max_examples=300, deadline=None)
@given(events=histories())
def test_the_fold_matches_the_reference_at_every_version(events: list[Any]) -> None:
    states = _reference(events)
    fold = LiveFold()
    for version, event in enumerate(events, 1):
        fold.apply(version, event)
        assert fold.live == set(states[version])
    for version in range(len(events) + 1):
        assert fold.live_at(version) == set(states[version])
    assert fold.live == set(states[-1])  # live_at leaves the fold as it was


def _records(events: list[Any]) -> list[RecordedEvent]:
    return [RecordedEvent(v, "s", v, e, 0, "", "", "") for v, e in enumerate(events, 1)]


def test_nested_rewinds_bring_events_back() -> None:
    m = [MessageAppended(role="user", content=f"m{i}") for i in range(4)]
    events = [
        m[0],  # 1
        m[1],  # 2
        MessageRemoved(target_event_ids=(m[0].event_id,)),  # 3: {2}
        m[2],  # 4: {2, 4}
        SessionRewound(to_version=2),  # 5: {1, 2} - m0 is back
        m[3],  # 6: {1, 2, 6}
        SessionRewound(to_version=4, reason="time_travel"),  # 7: {2, 4}
    ]
    fold = LiveFold()
    lives = []
    for v, e in enumerate(events, 1):
        fold.apply(v, e)
        lives.append(set(fold.live))
    assert lives == [{1}, {1, 2}, {2}, {2, 4}, {1, 2}, {1, 2, 6}, {2, 4}]
    assert live_versions(_records(events)) == {2, 4}


def test_removing_an_assistant_message_takes_its_tool_results() -> None:
    call = MessageAppended(
        role="assistant", tool_calls=(ToolCall(id="c1", name="f"), ToolCall(id="c2", name="g"))
    )
    events = [
        MessageAppended(role="user", content="go"),
        call,
        ToolReturned(tool_call_id="c1", content="1"),
        ToolReturned(tool_call_id="c2", content="2"),
        MessageAppended(role="assistant", content="done"),
        MessageRemoved(target_event_ids=(call.event_id,)),
    ]
    assert live_versions(_records(events)) == {1, 5}


def test_a_rewind_to_a_version_not_applied_is_refused() -> None:
    fold = LiveFold()
    fold.apply(1, MessageAppended(role="user", content="x"))
    with pytest.raises(ValueError, match="unknown version"):
        fold.apply(2, SessionRewound(to_version=2))
    with pytest.raises(ValueError, match="in order"):
        fold.apply(1, MessageAppended(role="user", content="y"))


def test_live_events_reads_a_session_and_a_fork(tmp_path: Any) -> None:
    with SQLiteStore.open(tmp_path / "s.db") as s:
        m = [MessageAppended(role="user", content=f"m{i}") for i in range(3)]
        s.append("p", [SessionStarted(), m[0], m[1]])
        s.append("p", [SessionRewound(to_version=2)])
        assert [r.event.event_id for r in live_events(s, "p")] == [
            s.read_session("p")[0].event_id,
            m[0].event_id,
        ]
        assert len(live_events(s, "p", at_version=3)) == 3
        from turnlog.store import ForkPoint

        s.append("child", [SessionStarted(parent=ForkPoint(session_id="p", version=3)), m[2]])
        s.append("child", [SessionRewound(to_version=2, reason="time_travel")])
        assert [r.version for r in live_events(s, "child")] == [1, 2]
        assert [r.version for r in live_events(s, "child", at_version=5)] == [1, 2, 3, 4, 5]


@settings(max_examples=100, deadline=None)
@given(events=histories(), fork_at=st.integers(0, 30))
def test_the_materialized_live_set_matches_the_fold(events: list[Any], fork_at: int) -> None:
    """The live index (rows kept incrementally, a fork copying its parent's) gives the fold's live set
    as of every version; removals naming events that are not messages are replaced (the store
    refuses them)."""
    from turnlog.projections.live import COMPENSATING_TYPES
    from turnlog.projections.live_index import dead_ranges, is_dead
    from turnlog.projections.registry import keep_caught_up, materializer
    from turnlog.store import ForkPoint

    removable = {e.event_id for e in events if isinstance(e, (MessageAppended, ToolReturned))}
    events = [
        e
        if not isinstance(e, MessageRemoved) or set(e.target_event_ids) <= removable
        else TodosUpdated(todos=())
        for e in events
    ]
    with SQLiteStore.open(":memory:") as s:
        keep_caught_up(s)
        half = min(fork_at, len(events))
        for event in events[:half]:
            s.append("p", [event])
        sessions = ["p"]
        if half:
            s.append("c", [SessionStarted(parent=ForkPoint(session_id="p", version=half))])
            s.append("c", [MessageAppended(role="user", content="child")])
            sessions.append("c")
        for event in events[half:]:
            s.append("p", [event])  # a parent's later rewinds must not reach its fork
        materializer(s).catch_up()  # what a read does first (a SQLite append leaves it to the read)
        for sid in sessions:
            records = s.read_session(sid)
            fold = LiveFold()
            for record in records:
                fold.apply(record.version, record.event)
                with s.reading() as conn:
                    ranges = dead_ranges(conn, sid, record.position)
                seen = {
                    r.version
                    for r in records
                    if r.version <= record.version
                    and r.type not in COMPENSATING_TYPES
                    and not is_dead(ranges, r.version)
                }
                assert seen == fold.live, (sid, record.version)
