"""The one-round-trip append on PostgreSQL (store.pg_append, store.pg_fast): a store object that knows
the heads its last append left sends the server's check of those heads and the inserts as one
prepared statement in its own transaction. Whatever another writer did meanwhile, the check sends
the append the long way: versions, positions, chains and projections stay what one writer alone
would make, and ``verify`` passes."""

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
)
from turnlog.projections.registry import materializer
from turnlog.store import MessageAppended, MessagePinned, MessageRemoved, VersionConflictError

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'turnlog[postgres]')")

import psycopg

__all__ = ["pg_schema"]  # the fixture, imported for this module's tests


def _open(schema: str, projections: bool = True) -> Any:
    if projections:
        return turnlog.open_store(f"{pg_url()}?schema={schema}")
    from turnlog.store.postgres import PostgresStore

    return PostgresStore.open(pg_url(), schema=schema)


def _say(text: str, **kwargs: Any) -> MessageAppended:
    return MessageAppended(role="user", content=text, **kwargs)


@pytest.mark.parametrize("projections", [False, True])
def test_a_writer_alone_appends_in_one_query(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch, projections: bool
) -> None:
    store = _open(pg_schema, projections)
    try:
        store.append("s", [_say("first")])  # the long way: nothing known yet
        store.append("t", [_say("other")])
        store.append("s", [_say("second")])  # one query; the projections read their rows once
        sent = sent_queries(monkeypatch)
        prepared = _prepare_flags(monkeypatch)
        for i in range(3):
            records = store.append("s", [_say(f"turn {i}"), _say(f"more {i}")])
            assert [r.version for r in records] == [3 + 2 * i, 4 + 2 * i]
        # One statement each, the same text (the values are its parameters), prepared on the
        # server: no BEGIN or COMMIT of its own (autocommit: the statement is its transaction).
        assert len(sent) == 3 and len(set(sent)) == 1
        assert sent[0].startswith("WITH ok AS") and ";" not in sent[0]
        assert prepared == [True, True, True]
        monkeypatch.undo()
        assert store.verify().ok
        assert [r.position for r in store.read_session("s")] == [1, 3, 4, 5, 6, 7, 8, 9]
        if projections:
            assert materializer(store).differences() == []
    finally:
        store.close()


def _prepare_flags(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The ``prepare`` argument of every statement sent from here on."""
    flags: list[object] = []
    execute = psycopg.Cursor.execute

    def recording(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if str(query):
            flags.append(kwargs.get("prepare"))
        return execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    return flags


def test_a_head_the_statements_snapshot_missed_fails_on_its_key_and_takes_the_long_way(
    two: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One statement reads the heads in a snapshot taken before its locks: a writer that committed
    # in between is not seen by the check. Made certain here by a check that passes whatever the
    # heads: the batch linked to the stale head fails on the unique key of the other writer's row,
    # nothing of it is stored, and it is appended the long way.
    from turnlog.store import pg_fast

    first, second = two
    first.append("s", [_say("a")])
    first.append("s", [_say("b")])
    second.append("s", [_say("c")])  # first's guess of the session's head is now stale
    blind = "WITH ok AS (SELECT 0 AS z, %s::int, %s, %s::bigint, %s, %s::bigint, %s, %s::bigint, %s)"
    assert blind.count("%s") == pg_fast._CHECK.count("%s")
    monkeypatch.setattr(pg_fast, "_CHECK", blind)
    pg_fast.placed_insert_sql.cache_clear()
    sent = sent_queries(monkeypatch)
    assert [(r.version, r.position) for r in first.append("s", [_say("d")])] == [(4, 4)]
    assert sent[0].startswith("WITH ok AS (SELECT 0 AS z,") and len(sent) > 1
    second.append("t", [_say("e")])  # only the order moved: the stale position fails on its key
    assert [(r.version, r.position) for r in first.append("s", [_say("f")])] == [(5, 6)]
    monkeypatch.undo()
    pg_fast.placed_insert_sql.cache_clear()
    assert first.verify().ok
    assert [r.event.content for r in first.read_session("s")] == ["a", "b", "c", "d", "f"]


@pytest.fixture
def two(pg_schema: str) -> Iterator[tuple[Any, Any]]:
    """Two store objects on one schema, as two processes would have."""
    first, second = _open(pg_schema), _open(pg_schema)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def test_heads_moved_by_another_writer_send_the_append_the_long_way(two: tuple[Any, Any]) -> None:
    first, second = two
    first.append("s", [_say("a")])
    first.append("s", [_say("b")])  # first knows the heads now
    second.append("s", [_say("c")])  # the same session: first's guess of its head is stale
    assert [r.version for r in first.append("s", [_say("d")])] == [4]
    second.append("t", [_say("e")])  # another session: only the order moved
    records = first.append("s", [_say("f")])
    assert [(r.version, r.position) for r in records] == [(5, 6)]
    assert first.verify().ok
    assert [r.event.content for r in first.read_session("s")] == ["a", "b", "c", "d", "f"]
    for store in two:
        assert materializer(store).differences() == []


def test_an_expected_version_is_checked_against_the_log_not_the_guess(two: tuple[Any, Any]) -> None:
    first, second = two
    first.append("s", [_say("a")])
    first.append("s", [_say("b")])
    second.append("s", [_say("c")])
    # first guesses 2; the log says 3, and the log decides, both ways.
    with pytest.raises(VersionConflictError):
        first.append("s", [_say("d")], expected_version=2)
    assert [r.version for r in first.append("s", [_say("d")], expected_version=3)] == [4]
    assert first.verify().ok


def test_checks_that_read_the_log_take_the_long_way(pg_schema: str) -> None:
    store = _open(pg_schema)
    try:
        kept = store.append("s", [_say("keep", event_id="m1"), _say("drop", event_id="m2")])
        store.append("s", [MessagePinned(target_event_id=kept[0].event_id)])
        store.append("s", [MessageRemoved(target_event_ids=("m2",), reason="test")])
        with pytest.raises(turnlog.store.StoreError, match="no message"):
            store.append("s", [MessageRemoved(target_event_ids=("nope",), reason="test")])
        assert store.head_version("s") == 4
        assert store.verify().ok
        assert materializer(store).differences() == []
    finally:
        store.close()


def test_a_retry_of_a_stored_batch_returns_it(pg_schema: str) -> None:
    store = _open(pg_schema)
    try:
        store.append("s", [_say("a")])
        batch = [_say("b", event_id="b1"), _say("c", event_id="c1")]
        first = store.append("s", batch)
        assert store.append("s", batch) == first
        assert store.count_events() == 3
        assert store.verify().ok
    finally:
        store.close()


def test_a_lock_held_elsewhere_sends_the_append_the_long_way(pg_schema: str) -> None:
    store = _open(pg_schema)
    try:
        store.append("s", [_say("a")])
        store.append("s", [_say("b")])
        # Another process holds the store's lock (catching the projections up, say): the append
        # neither waits for it nor fails; its projections' rows are left to the catch-up.
        with psycopg.connect(pg_url(), autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (store.lock_key,))
            records = store.append("s", [_say("c")])
            other.execute("SELECT pg_advisory_unlock(%s)", (store.lock_key,))
        assert [(r.version, r.position) for r in records] == [(3, 3)]
        assert [r.version for r in store.append("s", [_say("d")])] == [4]
        assert store.verify().ok
        assert materializer(store).differences() == []
    finally:
        store.close()


_STEPS = st.tuples(st.integers(0, 2), st.sampled_from("st"), st.integers(1, 3))
"""(which of three writers, which session, how many events)"""


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_STEPS, min_size=1, max_size=14))
def test_any_interleaving_of_three_writers_gives_one_writers_log(steps: list[tuple[int, str, int]]) -> None:
    require_pg()
    schema = new_schema_name()
    stores = [_open(schema) for _ in range(3)]
    try:
        expected: dict[str, list[str]] = {"s": [], "t": []}
        for n, (writer, session, count) in enumerate(steps):
            texts = [f"{n}.{i}" for i in range(count)]
            records = stores[writer].append(session, [_say(text) for text in texts])
            assert [r.version for r in records] == list(
                range(len(expected[session]) + 1, len(expected[session]) + count + 1)
            )
            expected[session] += texts
        for session, texts in expected.items():
            assert [r.event.content for r in stores[0].read_session(session)] == texts
        positions = [r.position for r in stores[0].iter_after(0)]
        assert positions == list(range(1, sum(c for _, _, c in steps) + 1))
        assert stores[0].verify().ok
        assert materializer(stores[0]).differences() == []
    finally:
        for store in stores:
            store.close()
        drop_schema(schema)


def test_misses_in_a_row_make_the_tries_rarer() -> None:
    from turnlog.store.pg_fast import Tips

    tips = Tips()
    assert tips.ready()
    waits = []
    for _ in range(8):
        tips.missed("s")
        wait = 0
        while not tips.ready():
            wait += 1
        waits.append(wait)
    assert waits == [2, 4, 8, 16, 32, 64, 64, 64]
    tips.misses = 0  # a try that worked
    tips.missed("s")
    assert [tips.ready() for _ in range(3)] == [False, False, True]
