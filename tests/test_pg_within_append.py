"""The projections' apply inside a PostgreSQL append's transaction, for a store whose projections are
advanced by ``within_append`` hooks (``turnlog.open_store`` defers them to the next read instead:
tests/test_pg_deferred_projections.py): pipelined, and reading from the memos its last committed
append left instead of the rows. Whatever another store object does between
two appends (append to the same session, reset, rebuild, a row in the way), the rows stay what a
fresh rebuild makes, and a failure inside the pipeline leaves the events to commit and prints
nothing on stderr."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

import turnlog
from tests.helpers.postgres import pg_schema, pg_url, sql
from turnlog.projections.registry import materializer
from turnlog.projections.sessions import list_sessions
from turnlog.store import MessageAppended, RunFinished, RunStarted, ToolCall, ToolReturned

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'turnlog[postgres]')")

import psycopg

__all__ = ["pg_schema"]  # the fixture, imported for this module's tests


def _open(schema: str) -> Any:
    """A store advancing its projections in each append's transaction (and, when that could not,
    right after its commit)."""
    from turnlog.store.postgres import PostgresStore

    store = PostgresStore.open(pg_url(), schema=schema)
    kept = materializer(store)
    store.within_append(kept.apply_within)
    store.on_append(lambda records: kept.catch_up(appended=records))
    return store


@pytest.fixture
def two(pg_schema: str) -> Iterator[tuple[Any, Any]]:
    """Two store objects on one schema, as two processes would have."""
    first = _open(pg_schema)
    second = _open(pg_schema)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def _turn(i: int) -> list[Any]:
    call = ToolCall(id=f"c{i}", name="look", arguments=f'{{"i": {i}}}')
    return [
        MessageAppended(role="user", content=f"question {i}"),
        MessageAppended(role="assistant", content="", tool_calls=[call]),
        ToolReturned(tool_call_id=f"c{i}", content=f"answer {i}"),
    ]


def _selects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SELECT statements sent from here on (the projections' reads among them), each of a batch
    on its own."""
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counting(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        # A batch (store.pg_batch) sends its statements as one query, one statement a line.
        sent.extend(q for q in str(query).split(";\n") if q.lstrip().upper().startswith("SELECT"))
        return execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counting)
    return sent


def test_a_writer_alone_reads_no_projection_rows(pg_schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _open(pg_schema)
    try:
        store.append("s", [MessageAppended(role="system", content="be brief"), *_turn(0)])
        store.append("s", _turn(1))  # the first apply inside an append: rows read
        store.append("s", _turn(2))  # the first from memos: the unanswered calls read once
        sent = _selects(monkeypatch)
        store.append("s", _turn(3))
        store.append("s", [RunStarted(run_id="r1"), *_turn(4), RunFinished(run_id="r1")])
        read = [q for q in sent if "ctx_" in q or "sess_" in q or "ledger_" in q or "checkpoints" in q]
        assert read == []
        assert materializer(store).differences() == []
    finally:
        store.close()


def test_appends_of_another_store_object_between_are_taken_into_account(two: tuple[Any, Any]) -> None:
    first, second = two
    first.append("s", _turn(0))
    first.append("s", _turn(1))
    second.append("s", _turn(2))  # the same session: first's memos no longer describe the rows
    first.append("s", _turn(3))
    second.append("t", _turn(4))  # another session
    first.append("s", [RunStarted(run_id="r"), *_turn(5)])
    second.append("s", [RunFinished(run_id="r")])
    first.append("s", _turn(6))
    for store in two:
        assert materializer(store).differences() == []
    sessions = {s.session_id: s for s in list_sessions(first)}
    assert (sessions["s"].user_messages, sessions["s"].tool_returns) == (6, 6)


@pytest.mark.parametrize("how", ["reset", "rebuild"])
def test_a_reset_or_rebuild_by_another_store_object_between(two: tuple[Any, Any], how: str) -> None:
    first, second = two
    first.append("s", _turn(0))
    first.append("s", [RunStarted(run_id="r"), *_turn(1)])
    getattr(materializer(second), how)()
    first.append("s", _turn(2))
    first.append("s", _turn(3))
    assert materializer(first).differences() == []
    rows = sql("SELECT count(*) FROM ctx_messages WHERE session_id = 's'", first.schema)
    assert rows == [(12,)]


@pytest.mark.parametrize("memos", [False, True])
def test_a_failure_inside_the_pipeline_commits_the_events_and_prints_nothing(
    pg_schema: str, caplog: pytest.LogCaptureFixture, memos: bool
) -> None:
    store = _open(pg_schema)
    try:
        store.append("s", _turn(0))
        store.append("s", _turn(1))
        if not memos:  # a store object that has none: the failure surfaces at one of its reads
            store.close()
            store = _open(pg_schema)
        # A row where the next message's will go: the projections' insert fails in the pipeline.
        sql(
            "INSERT INTO ctx_messages (session_id, version, position, role, first_user, has_name, n_calls, "
            "tokens, cum_messages, cum_tokens, event_id, length, whole) "
            "VALUES ('s', 7, 0, 'user', 0, 0, 0, 0, 0, 0, 'in-the-way', 0, 0)",
            pg_schema,
        )
        with caplog.at_level(logging.WARNING, logger="psycopg"):
            records = store.append("s", [MessageAppended(role="user", content="next")])
        assert [r.version for r in records] == [7]
        assert [r.version for r in store.read_session("s")][-1] == 7
        assert not [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")]
        # Nothing was advanced past the row in the way (the catch-up after the commit hit it too).
        checkpoints = sql("SELECT DISTINCT position FROM projection_checkpoints", pg_schema)
        assert checkpoints == [(6,)]
        sql("DELETE FROM ctx_messages WHERE session_id = 's' AND version = 7", pg_schema)
        store.append("s", _turn(2))
        assert materializer(store).differences() == []
    finally:
        store.close()


def test_an_insert_refused_in_the_round_trip_of_the_projections_rows_stores_nothing(pg_schema: str) -> None:
    # The projections' statements join the inserts' round trip: an insert refused there (an id
    # stored in another session) must fail the append as before, not commit the rest.
    store = _open(pg_schema)
    try:
        first = store.append("s", [MessageAppended(role="user", content="hi", event_id="x1")])
        assert store.append("s", [MessageAppended(role="user", content="hi", event_id="x1")]) == first
        store.append("s", _turn(0))
        batches = (
            [MessageAppended(role="user", content="other", event_id="x1")],
            [
                MessageAppended(role="user", content="new", event_id="x2"),
                MessageAppended(role="user", content="dup", event_id="x1"),
            ],
        )
        for batch in batches:
            with pytest.raises(turnlog.store.DuplicateEventError, match="x1"):
                store.append("t", batch)
        assert store.count_events() == 4
        assert store.head_version("t") == 0
        assert materializer(store).differences() == []
        store.append("t", _turn(1))
        assert materializer(store).differences() == []
        assert [r.version for r in store.read_session("t")] == [1, 2, 3]
    finally:
        store.close()
