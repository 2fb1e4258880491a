"""The PostgreSQL side of the projections' seam: ``?`` queries rewritten for psycopg, and every
projection's tables created by the PostgreSQL dialect on a real server (a schema of its own, dropped
after), written and read through the same portable statements the projections use on SQLite."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from turnlog.projections.registry import all_projections
from turnlog.store.dialect import PostgresDialect, dialect_of
from turnlog.store.pg_qmark import QmarkConnection, qmark

PG_URL = os.environ.get("TURNLOG_TEST_PG") or "postgresql://root@127.0.0.1:5432/test"


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT * FROM t WHERE a = ? AND b = ?", "SELECT * FROM t WHERE a = %s AND b = %s"),
        ("SELECT '?' || ? FROM t", "SELECT '?' || %s FROM t"),
        (
            "SELECT 'it''s 100%' , \"odd?name\" FROM t WHERE x = ?",
            "SELECT 'it''s 100%%' , \"odd?name\" FROM t WHERE x = %s",
        ),
        ("SELECT a % 2 FROM t -- what? 5%\nWHERE b = ?", "SELECT a %% 2 FROM t -- what? 5%%\nWHERE b = %s"),
    ],
)
def test_qmark(sql: str, expected: str) -> None:
    assert qmark(sql) == expected


@pytest.fixture
def pg() -> Iterator[tuple[Any, str]]:
    psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    try:
        conn = psycopg.connect(PG_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL at {PG_URL.split('@')[-1]} is unreachable ({str(exc).splitlines()[0]})")
    schema = f"turnlog_qmark_{uuid.uuid4().hex[:12]}"
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(f"SET search_path = {schema}")
    try:
        yield conn, schema
    finally:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
        conn.close()


def test_every_projection_creates_its_tables_on_postgresql(pg: tuple[Any, str]) -> None:
    raw, schema = pg
    dialect = PostgresDialect(schema)
    conn = QmarkConnection(raw, dialect)
    assert dialect_of(conn) is dialect
    for projection in all_projections():
        projection.create(conn, schema)
        projection.create(conn, schema)  # idempotent
        assert set(projection.tables) <= dialect.tables(conn, schema)
    assert dialect.columns(conn, schema, "todos")[:3] == ["session_id", "position", "version"]
    types = dict(raw.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
        "AND table_name = 'ctx_messages'", (schema,)).fetchall())  # fmt: skip
    assert types["position"] == "bigint" and types["role"] == "text"
    # The portable statements the projections use: conflicts ignored, upserts, ? parameters.
    conn.execute("INSERT INTO live_forks VALUES (?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET "
                 "parent = excluded.parent, version = excluded.version", ("child", "p1", 3))  # fmt: skip
    conn.execute("INSERT INTO live_forks VALUES (?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET "
                 "parent = excluded.parent, version = excluded.version", ("child", "p2", 4))  # fmt: skip
    assert conn.execute("SELECT parent, version FROM live_forks").fetchall() == [("p2", 4)]
    conn.executemany(
        "INSERT INTO live_calls VALUES (?, ?, ?) ON CONFLICT DO NOTHING", [("s", "c", 1), ("s", "c", 1)]
    )
    assert conn.execute("SELECT count(*) FROM live_calls WHERE call_id LIKE 'c%'").fetchone() == (1,)
    # Verify's scratch copy: pg_temp hides the store's table of the same name.
    for projection in all_projections():
        if projection.name == "todos":
            projection.create(conn, dialect.scratch)
    assert "todos" in dialect.tables(conn, dialect.scratch)
    assert conn.execute("SELECT count(*) FROM todos").fetchone() == (0,)
