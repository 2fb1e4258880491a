"""Statements sent to PostgreSQL as one query (store.pg_batch), on a real server: values bound on the
client come back exactly as the server-side binding returns them, an ``INSERT ... VALUES`` run for
many rows stores what ``executemany`` stores, results are read in order, a failure stops the rest
and is raised; and the projections' connection (store.pg_qmark) built on it: a block's statements
in one query, prefetched reads answered once, a reading's BEGIN sent with its first statement."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.postgres import pg_url, require_pg, sent_queries

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'turnlog[postgres]')")

import psycopg

from turnlog.store.dialect import PostgresDialect
from turnlog.store.pg_batch import StatementBatch
from turnlog.store.pg_qmark import QmarkConnection


@pytest.fixture
def conn() -> Iterator[Any]:
    require_pg()
    with psycopg.connect(pg_url(), autocommit=True) as connection:
        connection.execute("CREATE TEMP TABLE t (k BIGINT PRIMARY KEY, s TEXT, b BYTEA, f DOUBLE PRECISION)")
        yield connection


_TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=40)
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    _TEXT,
    st.binary(max_size=40),
    st.lists(_TEXT, max_size=4),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(_VALUES, min_size=1, max_size=6))
def test_values_bound_on_the_client_read_back_as_the_server_binds_them(conn: Any, values: list[Any]) -> None:
    query = "SELECT " + ", ".join("%s" for _ in values)
    expected = conn.execute(query, values).fetchone()
    batch = StatementBatch(conn)
    first = batch.execute(query, values)
    second = batch.execute("SELECT %s::text || '%%'", ("100",))
    batch.send()
    assert first.fetchone() == expected
    assert second.fetchall() == [("100%",)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 50), _TEXT, st.binary(max_size=10) | st.none(), st.floats(allow_nan=False)),
        max_size=12,
        unique_by=lambda row: row[0],
    )
)
def test_an_insert_of_many_rows_stores_what_executemany_stores(conn: Any, rows: list[Any]) -> None:
    insert = "INSERT INTO t (k, s, b, f) VALUES (%s, %s, %s, %s)"
    conn.execute("DELETE FROM t")
    conn.cursor().executemany(insert, rows)
    expected = conn.execute("SELECT * FROM t ORDER BY k").fetchall()
    conn.execute("DELETE FROM t")
    batch = StatementBatch(conn)
    result = batch.executemany(insert, rows)
    batch.send()
    assert conn.execute("SELECT * FROM t ORDER BY k").fetchall() == expected
    assert result.rowcount == (len(rows) if rows else -1)


def test_on_conflict_do_nothing_goes_in_one_statement_and_others_row_by_row(conn: Any) -> None:
    batch = StatementBatch(conn)
    batch.executemany("INSERT INTO t (k, s) VALUES (%s, %s) ON CONFLICT (k) DO NOTHING", [(1, "a"), (1, "b")])
    # DO UPDATE cannot take one key twice in a statement: it stays one statement a row.
    batch.executemany(
        "INSERT INTO t (k, s) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET s = excluded.s",
        [(2, "x"), (2, "y")],
    )
    assert len(batch) == 3
    batch.send()
    assert conn.execute("SELECT k, s FROM t ORDER BY k").fetchall() == [(1, "a"), (2, "y")]


def test_a_failure_stops_the_rest_and_is_raised_where_the_batch_is_sent(conn: Any) -> None:
    batch = StatementBatch(conn)
    batch.execute("BEGIN")
    before = batch.execute("INSERT INTO t (k) VALUES (%s)", (1,))
    batch.execute("INSERT INTO t (k) VALUES (%s)", (1,))
    after = batch.execute("INSERT INTO t (k) VALUES (%s)", (2,))
    with pytest.raises(psycopg.errors.UniqueViolation):
        _ = before.rowcount  # a read sends the batch
    with pytest.raises(psycopg.ProgrammingError, match="not run"):
        after.fetchone()
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_the_projections_connection_sends_a_block_as_one_query(
    conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = sent_queries(monkeypatch)
    wrapped = QmarkConnection(conn, PostgresDialect("pg_temp"))
    with wrapped.pipeline():
        wrapped.execute("INSERT INTO t (k, s) VALUES (?, ?)", (1, "it's 50%"))
        wrapped.executemany("INSERT INTO t (k, s) VALUES (?, ?)", [(2, "b"), (3, None)])
        moved = wrapped.execute("UPDATE t SET f = ? WHERE k >= ?", (0.5, 2))
        assert sent == []
    assert len(sent) == 1
    assert moved.rowcount == 2
    assert wrapped.execute("SELECT k, s, f FROM t ORDER BY k").fetchall() == [
        (1, "it's 50%", None),
        (2, "b", 0.5),
        (3, None, 0.5),
    ]


def test_a_failing_block_still_sends_what_it_queued_and_raises_its_own_error(conn: Any) -> None:
    wrapped = QmarkConnection(conn, PostgresDialect("pg_temp"))
    conn.execute("BEGIN")
    with pytest.raises(KeyError), wrapped.pipeline():
        wrapped.execute("SAVEPOINT here")
        wrapped.execute("INSERT INTO t (k) VALUES (?)", (1,))
        raise KeyError("the block's own")
    conn.execute("ROLLBACK TO SAVEPOINT here")  # it exists: the block's statements ran
    conn.execute("COMMIT")
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_prefetched_reads_are_answered_once_as_they_were_read(conn: Any) -> None:
    conn.execute("INSERT INTO t (k, s) VALUES (1, 'a')")
    wrapped = QmarkConnection(conn, PostgresDialect("pg_temp"), begin="BEGIN ISOLATION LEVEL REPEATABLE READ")
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # nothing sent yet
    query = "SELECT s FROM t WHERE k = ?"
    wrapped.prefetch([(query, (1,)), ("SELECT count(*) FROM t", ())])
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # BEGIN went with them
    conn.execute("UPDATE t SET s = 'changed' WHERE k = 1")  # after the prefetch: not seen by its answer
    assert wrapped.execute(query, (1,)).fetchall() == [("a",)]
    assert wrapped.execute("SELECT count(*) FROM t").fetchone() == (1,)
    # Answered once: the same query again goes to the server (a statement, not a stored answer).
    conn.execute("UPDATE t SET s = 'b' WHERE k = 1")
    assert wrapped.execute(query, (1,)).fetchall() == [("b",)]
    assert wrapped.execute(query, (2,)).fetchall() == []
    conn.execute("ROLLBACK")


def test_a_readings_begin_goes_with_its_first_statement(conn: Any) -> None:
    wrapped = QmarkConnection(conn, PostgresDialect("pg_temp"), begin="BEGIN ISOLATION LEVEL REPEATABLE READ")
    assert wrapped.execute("SELECT ? || 'x'", ("a",)).fetchone() == ("ax",)
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    assert conn.execute("SHOW transaction_isolation").fetchone() == ("repeatable read",)
    conn.execute("ROLLBACK")
    raw = QmarkConnection(conn, PostgresDialect("pg_temp"), begin="BEGIN").raw  # store code: BEGIN first
    assert raw.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    conn.execute("ROLLBACK")


def test_a_last_prefetch_ends_the_reading_it_began_in_the_same_round_trip(conn: Any) -> None:
    conn.execute("INSERT INTO t (k, s) VALUES (1, 'a')")
    idle, intrans = psycopg.pq.TransactionStatus.IDLE, psycopg.pq.TransactionStatus.INTRANS
    begin = "BEGIN ISOLATION LEVEL REPEATABLE READ"
    wrapped = QmarkConnection(conn, PostgresDialect("pg_temp"), begin=begin)
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counting(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        sent.append(str(query))
        return execute(self, query, params, **kwargs)

    psycopg.Cursor.execute = counting  # type: ignore[method-assign]
    try:
        wrapped.prefetch([("SELECT s FROM t WHERE k = ?", (1,)), ("SELECT count(*) FROM t", ())], last=True)
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    assert len(sent) == 1 and sent[0].startswith("BEGIN") and sent[0].endswith("ROLLBACK")
    assert conn.info.transaction_status == idle
    assert wrapped.execute("SELECT s FROM t WHERE k = ?", (1,)).fetchall() == [("a",)]
    assert wrapped.execute("SELECT count(*) FROM t").fetchone() == (1,)
    # A statement after all: a snapshot of its own, begun as the reading's first was.
    assert wrapped.execute("SELECT k FROM t").fetchall() == [(1,)]
    assert conn.info.transaction_status == intrans
    assert conn.execute("SHOW transaction_isolation").fetchone() == ("repeatable read",)
    conn.execute("ROLLBACK")
    # Not the reading's first statements, or a reading inside another: its transaction goes on.
    started = QmarkConnection(conn, PostgresDialect("pg_temp"), begin=begin)
    started.execute("SELECT 1")
    started.prefetch([("SELECT count(*) FROM t", ())], last=True)
    assert conn.info.transaction_status == intrans
    conn.execute("ROLLBACK")
    inner = QmarkConnection(conn, PostgresDialect("pg_temp"), begin=begin)
    inner.nested = 1
    inner.prefetch([("SELECT count(*) FROM t", ())], last=True)
    assert conn.info.transaction_status == intrans
    conn.execute("ROLLBACK")
