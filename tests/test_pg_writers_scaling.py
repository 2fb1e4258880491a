"""Writers of different sessions beside each other on PostgreSQL (issue 17): where other writers keep
moving the global order, an append is one call of the store's procedure (store.pg_sequenced), one
round trip, and a fast try that found the order moved costs one more round trip, not the long way's
three. Counted in queries sent (tests/helpers/postgres.sent_queries), never in time. Whatever the
interleaving, positions stay gapless, versions and expected-version conflicts are what one writer
alone would give, and ``verify`` passes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import turnlog
from tests.helpers.postgres import (
    drop_schema,
    new_schema_name,
    pg_schema,
    pg_url,
    require_pg,
    sent_queries,
    sql,
)
from turnlog.projections.registry import materializer
from turnlog.store import MessageAppended, VersionConflictError

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'turnlog[postgres]')")

__all__ = ["pg_schema"]  # the fixture, imported for this module's tests

CALL = "CALL turnlog_append_sequenced("
FAST = "WITH ok AS"


def _open(schema: str) -> Any:
    return turnlog.open_store(f"{pg_url()}?schema={schema}")


def _say(text: str) -> MessageAppended:
    return MessageAppended(role="user", content=text)


@pytest.fixture
def two(pg_schema: str) -> Iterator[tuple[Any, Any]]:
    first, second = _open(pg_schema), _open(pg_schema)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def _taking_turns(first: Any, second: Any) -> None:
    """Three appends each, taking turns: both know their heads, and have seen the other move the order."""
    for i in range(3):
        first.append("a", [_say(f"a{i}")])
        second.append("b", [_say(f"b{i}")])


def _counted(monkeypatch: pytest.MonkeyPatch, store: Any, session: str, text: str) -> tuple[list[str], Any]:
    """The queries one append sends, and its records."""
    sent = sent_queries(monkeypatch)
    try:
        records = store.append(session, [_say(text)])
    finally:
        monkeypatch.undo()
    return [query.split("(")[0] + "(" if query.startswith("CALL") else query[:10] for query in sent], records


def _beside(
    monkeypatch: pytest.MonkeyPatch, first: Any, second: Any, rounds: int
) -> list[tuple[list[str], Any]]:
    """``rounds`` times: ``second`` appends to "b", then ``first`` to "a", its queries counted."""
    made = []
    for i in range(rounds):
        second.append("b", [_say(f"b more {i}")])
        made.append(_counted(monkeypatch, first, "a", f"a more {i}"))
    return made


def test_appends_beside_another_writer_take_one_round_trip_each(
    two: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two
    _taking_turns(first, second)
    made = _beside(monkeypatch, first, second, 12)
    assert [[r.version for r in records] for _, records in made] == [[4 + i] for i in range(12)]
    shapes = [sent for sent, _ in made]
    # Each append is one call; now and then (misses in a row make it rarer) a fast try goes first,
    # finds the order moved, and the call follows at once.
    assert all(sent in ([CALL], [FAST, CALL]) for sent in shapes), shapes
    assert sum(len(sent) for sent in shapes) <= 12 + 2
    positions = [r.position for r in first.iter_after(0)]
    assert positions == list(range(1, 31))
    assert first.verify().ok and second.verify().ok
    assert materializer(first).differences() == []


def test_a_fast_try_that_finds_the_order_moved_is_placed_by_the_server_at_once(
    two: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two
    first.append("a", [_say("a0")])
    first.append("a", [_say("a1")])  # first knows the heads: its next append tries them
    second.append("b", [_say("b0")])  # and they move
    sent, records = _counted(monkeypatch, first, "a", "a2")
    assert sent == [FAST, CALL]  # not the long way: lock and heads, insert, placing
    assert [(r.version, r.position) for r in records] == [(3, 4)]
    (waiting,) = sql("SELECT count(*) FROM event_log WHERE position IS NULL", first.schema)
    assert waiting[0] == 0
    assert first.verify().ok


def test_a_stale_expected_version_on_the_contended_way_is_a_conflict_and_stores_nothing(
    two: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two
    _taking_turns(first, second)
    first.append("a", [_say("a3")])  # first appends to "a" the contended way, knowing head 4
    second.append("a", [_say("from second")], expected_version=4)  # "a" moves to 5 behind its back
    before = [r.event_id for r in first.iter_after(0)]
    with pytest.raises(VersionConflictError):
        first.append("a", [_say("stale")], expected_version=4)
    assert [r.event_id for r in first.iter_after(0)] == before
    records = first.append("a", [_say("fresh")], expected_version=5)
    assert [r.version for r in records] == [6]
    assert [r.event.content for r in first.read_session("a")][-2:] == ["from second", "fresh"]
    assert first.verify().ok


_STEPS = st.tuples(
    st.integers(0, 2), st.sampled_from("abc"), st.integers(1, 3), st.none() | st.integers(-1, 1)
)
"""(which of three writers, which session, how many events, the expected version's offset from the
session's true head: 0 right, -1 stale, 1 ahead; None: no expected version)"""


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_STEPS, min_size=1, max_size=16))
def test_any_interleaving_with_expected_versions_gives_one_writers_log(
    steps: list[tuple[int, str, int, int | None]],
) -> None:
    require_pg()
    schema = new_schema_name()
    stores = [_open(schema) for _ in range(3)]
    try:
        heads = {"a": 0, "b": 0, "c": 0}
        stored = 0
        for n, (writer, session, count, offset) in enumerate(steps):
            events = [_say(f"{n}.{i}") for i in range(count)]
            expected = {} if offset is None else {"expected_version": max(heads[session] + offset, 0)}
            if expected and expected["expected_version"] != heads[session]:
                with pytest.raises(VersionConflictError):
                    stores[writer].append(session, events, **expected)
                continue
            records = stores[writer].append(session, events, **expected)
            assert [r.version for r in records] == list(range(heads[session] + 1, heads[session] + count + 1))
            heads[session] += count
            stored += count
        assert [r.position for r in stores[0].iter_after(0)] == list(range(1, stored + 1))
        for session, head in heads.items():
            assert [r.version for r in stores[1].read_session(session)] == list(range(1, head + 1))
        assert stores[2].verify().ok
        assert materializer(stores[0]).differences() == []
    finally:
        for store in stores:
            store.close()
        drop_schema(schema)


def test_beside_a_writer_that_keeps_moving_the_order_no_fast_try_is_sent(
    two: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two
    _taking_turns(first, second)
    shapes = [sent for sent, _ in _beside(monkeypatch, first, second, 40)]
    # Each call saw the order moved since first's last append: no try goes first (without that
    # signal, a try went first now and then, after 2, 4, 8, ... calls), so no round trip is lost
    # and the placing lock is never held through a flush while the other writer waits.
    assert shapes[1:] == [[CALL]] * 39, shapes
    assert [r.position for r in first.iter_after(0)] == list(range(1, 87))
    assert first.verify().ok and second.verify().ok


def test_a_writer_left_alone_tries_the_one_statement_after_one_call(
    two: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two
    _taking_turns(first, second)
    for i in range(8):  # misses in a row: without the signal, the next tries would wait 8 and more
        second.append("b", [_say(f"b more {i}")])
        first.append("a", [_say(f"a more {i}")])
    shapes = [_counted(monkeypatch, first, "a", f"alone {i}")[0] for i in range(3)]
    # The first call finds the order where first's last append left it: first is alone again.
    assert shapes == [[CALL], [FAST], [FAST]], shapes
    assert [r.position for r in first.iter_after(0)] == list(range(1, 26))
    assert first.verify().ok


def test_an_append_placed_by_the_server_settles_the_tries() -> None:
    from turnlog.store.pg_fast import Tips

    tips = Tips()
    tips.missed("s")
    for _ in range(200):  # the order keeps moving: never a try
        assert not tips.ready()
        tips.settled(True)
    tips.settled(False)  # it stood still: the next append tries
    assert tips.ready() and tips.misses == 0
