"""store.dialect: the neutral DDL form projections write, rendered for SQLite exactly as the tables
were declared before (STRICT, WITHOUT ROWID for a primary-keyed table, the schema on the index name)
and for PostgreSQL (BIGINT, BYTEA, the schema on the table)."""

from __future__ import annotations

import sqlite3

import pytest

from turnlog.projections.registry import all_projections
from turnlog.store.dialect import SQLITE, PostgresDialect, dialect_of, statements

DDL = """
CREATE TABLE {schema}.things (
    session_id TEXT NOT NULL,   -- a comment; its semicolon splits nothing (comments go first)
    n INTEGER NOT NULL,
    data BLOB,
    score REAL,
    PRIMARY KEY (session_id, n)
);
CREATE INDEX things_by_n ON {schema}.things (n) WHERE n > 0;
CREATE TABLE {schema}.loose (a TEXT)
"""


def test_sqlite_rendering() -> None:
    rendered = SQLITE.render(DDL, "main")
    assert rendered[0].startswith("CREATE TABLE IF NOT EXISTS main.things (")
    assert rendered[0].endswith(") STRICT, WITHOUT ROWID")
    assert rendered[1] == "CREATE INDEX IF NOT EXISTS main.things_by_n ON things (n) WHERE n > 0"
    assert rendered[2].endswith(") STRICT") and "WITHOUT ROWID" not in rendered[2]
    conn = sqlite3.connect(":memory:")
    SQLITE.create(conn, DDL, "main")
    SQLITE.create(conn, DDL, "main")  # idempotent
    SQLITE.create(conn, DDL, "temp")
    assert SQLITE.columns(conn, "main", "things") == ["session_id", "n", "data", "score"]
    assert SQLITE.tables(conn, "main") == {"things", "loose"} == SQLITE.tables(conn, "temp")
    assert dialect_of(conn) is SQLITE and SQLITE.hint("things_by_n") == "INDEXED BY things_by_n"


def test_postgres_rendering() -> None:
    dialect = PostgresDialect("tl")
    table, index, loose = dialect.render(DDL, "tl")
    assert table.startswith("CREATE TABLE IF NOT EXISTS tl.things (") and "STRICT" not in table
    assert "n BIGINT NOT NULL" in table and "data BYTEA" in table and "score DOUBLE PRECISION" in table
    assert 'session_id TEXT COLLATE "C" NOT NULL' in table
    assert index == "CREATE INDEX IF NOT EXISTS things_by_n ON tl.things (n) WHERE n > 0"
    assert loose == 'CREATE TABLE IF NOT EXISTS tl.loose (a TEXT COLLATE "C")' and dialect.hint("x") == ""


def test_every_projection_is_written_in_the_neutral_form() -> None:
    conn = sqlite3.connect(":memory:")
    for projection in all_projections():
        projection.create(conn, "main")
        assert set(projection.tables) <= SQLITE.tables(conn, "main")
    for statement in statements(DDL):
        assert "IF NOT EXISTS" not in statement


@pytest.mark.parametrize("bad", ["DROP TABLE {schema}.x", "CREATE VIEW {schema}.v AS SELECT 1"])
def test_anything_else_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a neutral"):
        SQLITE.render(bad, "main")
    with pytest.raises(TypeError, match="not a turnlog store connection"):
        dialect_of(object())
