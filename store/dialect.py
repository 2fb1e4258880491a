"""What differs between the databases behind a store, kept in ``store/`` so that nothing above it writes
dialect SQL: projections write their tables in one neutral form and portable statements, and ask the
connection's dialect for the rest.

The neutral DDL form: ``CREATE TABLE {schema}.name (... standard column types TEXT / INTEGER / BLOB /
REAL ..., PRIMARY KEY (...))`` and ``CREATE INDEX name ON {schema}.table (columns) [WHERE ...]``,
statements separated by ``;``, ``--`` comments allowed. Each dialect renders it: SQLite adds ``IF NOT
EXISTS`` and ``STRICT, WITHOUT ROWID`` (a table with a primary key) and puts the schema on the index
name; PostgreSQL makes integers ``BIGINT`` and blobs ``BYTEA``. Portable statements need nothing:
``INSERT ... ON CONFLICT DO NOTHING`` and ``ON CONFLICT (key) DO UPDATE SET c = excluded.c`` mean the
same on both."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Hashable, Iterator
from typing import Any, Protocol, TypeAlias

Connection: TypeAlias = Any
"""A connection a store hands to projections (``sqlite3.Connection``, or a psycopg connection
behind the same ``execute`` / ``executemany`` / ``fetchone`` / ``fetchall`` calls); its dialect is
:func:`dialect_of` it."""

_TABLE = re.compile(r"^\s*CREATE\s+TABLE\s+(\S+?)\.(\w+)\s*\(", re.IGNORECASE)
_INDEX = re.compile(
    r"^\s*CREATE\s+(UNIQUE\s+)?INDEX\s+(\w+)\s+ON\s+(\S+?)\.(\w+)\s*(\(.*)$", re.IGNORECASE | re.DOTALL
)
_COMMENT = re.compile(r"--[^\n]*")


class Dialect(Protocol):
    """How one database spells what projections need beyond portable SQL."""

    name: str
    main: str
    """The schema of the store's own tables."""
    scratch: str
    """A schema for scratch copies whose tables hide the store's (verify's fresh rebuild)."""
    remote: bool
    """Each statement is a round trip to a server: worth queueing writes and remembering what
    would be read back (SQLite runs statements in process, for next to nothing)."""

    def pipeline(self, conn: Any) -> contextlib.AbstractContextManager[None]:
        """A block whose statements may be sent together: a write is queued, and sent with the
        next read or at the end of the block, where its error (if any) is raised."""

    def create(self, conn: Any, ddl: str, schema: str) -> None:
        """Create the tables and indexes of ``ddl`` (the neutral form) in ``schema``, if missing."""

    def hint(self, index: str) -> str:
        """A clause after a table name that makes the planner use ``index`` ('' where not needed)."""

    def json_field_equals(self, column: str, path: str, value: Any) -> tuple[str, list[Any]]:
        """A condition (and its parameters) on a JSON text column's field at a dotted path."""

    def columns(self, conn: Any, schema: str, table: str) -> list[str]:
        """A table's column names, in order."""

    def unchanged_token(self, conn: Any) -> Hashable | None:
        """Inside a read snapshot: a value that is equal at two reads only if no connection has
        changed the database between them (None: the database cannot say cheaply)."""

    def tables(self, conn: Any, schema: str) -> set[str]:
        """The tables of a schema."""


def statements(ddl: str) -> list[str]:
    """The statements of a neutral DDL script, comments removed."""
    return [s.strip() for s in _COMMENT.sub("", ddl).split(";") if s.strip()]


class _Neutral:
    """Renders the neutral DDL form; a dialect says how a table and an index are spelled."""

    def render(self, ddl: str, schema: str) -> list[str]:
        out: list[str] = []
        for statement in statements(ddl.replace("{schema}", schema)):
            table = _TABLE.match(statement)
            index = _INDEX.match(statement)
            if table is not None:
                out.append(self._table(_TABLE.sub(r"CREATE TABLE IF NOT EXISTS \1.\2 (", statement, count=1)))
            elif index is not None:
                unique, name, where, table_name, rest = index.groups()
                out.append(self._index(unique or "", name, where, table_name, rest))
            else:
                raise ValueError(f"not a neutral CREATE TABLE / CREATE INDEX statement: {statement[:80]!r}")
        return out

    def create(self, conn: Any, ddl: str, schema: str) -> None:
        for statement in self.render(ddl, schema):
            conn.execute(statement)

    def _table(self, statement: str) -> str:
        raise NotImplementedError

    def _index(self, unique: str, name: str, schema: str, table: str, rest: str) -> str:
        raise NotImplementedError


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


class SQLiteDialect(_Neutral):
    """SQLite: STRICT tables, WITHOUT ROWID for a primary-keyed table, schemas ``main`` and ``temp``."""

    name = "sqlite"
    main = "main"
    """The schema of the store's own tables."""
    scratch = "temp"
    """The schema a verify rebuilds projections into (temp tables hide main ones of the same name)."""
    remote = False
    """Statements run in process."""

    def pipeline(self, conn: Any) -> contextlib.AbstractContextManager[None]:
        """Nothing to queue: each statement runs at once."""
        return contextlib.nullcontext()

    def _table(self, statement: str) -> str:
        return statement + (" STRICT, WITHOUT ROWID" if "PRIMARY KEY" in statement.upper() else " STRICT")

    def _index(self, unique: str, name: str, schema: str, table: str, rest: str) -> str:
        return f"CREATE {unique}INDEX IF NOT EXISTS {schema}.{name} ON {table} {rest}"

    def hint(self, index: str) -> str:
        # SQLite does not always choose a partial index on its own (an OR, for one).
        return f"INDEXED BY {index}"

    def unchanged_token(self, conn: Any) -> Hashable | None:
        """``PRAGMA data_version`` changes with every commit of another connection, and this
        connection's own count of changed rows with each of its writes (its triggers' included)."""
        return (conn.execute("PRAGMA data_version").fetchone()[0], conn.total_changes)

    def json_field_equals(self, column: str, path: str, value: Any) -> tuple[str, list[Any]]:
        """A JSON text column's field at a dotted ``path`` equal to ``value``, as LangGraph's
        SqliteSaver compares them (json_extract gives SQL values; True binds as 1)."""
        field = f"json_extract({column}, '$.{path}')"
        if value is None:
            return f"{field} IS NULL", []
        if isinstance(value, str | int | float):
            return f"{field} = ?", [value]
        if isinstance(value, dict | list):
            return f"{field} = ?", [_json_text(value)]
        return f"{field} = ?", [str(value)]

    def columns(self, conn: sqlite3.Connection, schema: str, table: str) -> list[str]:
        return [str(row[1]) for row in conn.execute(f"PRAGMA {schema}.table_info({table})")]

    def tables(self, conn: sqlite3.Connection, schema: str) -> set[str]:
        master = "sqlite_temp_master" if schema == "temp" else f"{schema}.sqlite_master"
        return {str(row[0]) for row in conn.execute(f"SELECT name FROM {master} WHERE type = 'table'")}


SQLITE = SQLiteDialect()


class PostgresDialect(_Neutral):
    """PostgreSQL: 64-bit integers, bytea, the index name without a schema; one per store schema."""

    name = "postgresql"
    scratch = "pg_temp"
    """The schema a verify rebuilds projections into (the session's temporary schema)."""
    remote = True
    """Each statement is a round trip to the server, unless batched (:meth:`pipeline`)."""

    def __init__(self, main: str = "turnlog") -> None:
        self.main = main
        """The schema of the store's own tables."""

    def _table(self, statement: str) -> str:
        # Text compares and sorts by code point, as on SQLite, whatever the database's locale.
        statement = re.sub(r"\bTEXT\b", 'TEXT COLLATE "C"', statement)
        statement = re.sub(r"\bINTEGER\b", "BIGINT", statement)
        statement = re.sub(r"\bBLOB\b", "BYTEA", statement)
        return re.sub(r"\bREAL\b", "DOUBLE PRECISION", statement)

    def _index(self, unique: str, name: str, schema: str, table: str, rest: str) -> str:
        return f"CREATE {unique}INDEX IF NOT EXISTS {name} ON {schema}.{table} {rest}"

    def hint(self, index: str) -> str:
        return ""

    def unchanged_token(self, conn: Any) -> Hashable | None:
        """No cheap equivalent of SQLite's data_version: the caller reads what it needs."""
        return None

    @contextlib.contextmanager
    def pipeline(self, conn: Any) -> Iterator[None]:
        """The store's connection batching its statements (store.pg_qmark, store.pg_batch): writes
        are queued and go with the next read or the block's end, as one query: one round trip for
        many statements."""
        with conn.pipeline():
            yield

    def expecting_rows(self, update: str, count: int) -> str:
        """``update`` (an ``UPDATE`` without ``RETURNING``) as a statement that fails when it
        changes other than ``count`` rows, so that a batch can go on to its commit without waiting
        to read the row count: the failure ends the batch there (its text names ``turnlog: expected
        N rows``). The text-to-integer cast of a computed value raises at run time only."""
        return (
            f"WITH changed AS ({update} RETURNING 1) SELECT CASE WHEN count(*) = {int(count)} THEN 0 "
            f"ELSE ('turnlog: expected {int(count)} rows, changed ' || count(*))::int END FROM changed"
        )

    def json_field_equals(self, column: str, path: str, value: Any) -> tuple[str, list[Any]]:
        """A JSON text column's field at a dotted ``path`` equal to ``value``, as LangGraph's
        PostgresSaver compares them (JSON values: ``1`` and ``true`` differ, a missing field and a
        JSON ``null`` both match None)."""
        field = f"({column}::jsonb #> ?::text[])"
        keys = "{" + ",".join(json.dumps(part) for part in path.split(".")) + "}"
        if value is None:
            return f"({field} IS NULL OR {field} = 'null'::jsonb)", [keys, keys]
        plain = value if isinstance(value, str | int | float | bool | dict | list) else str(value)
        return f"{field} = ?::jsonb", [keys, _json_text(plain)]

    # Through the store's connection wrapper: ``?`` placeholders, as everywhere above store/. The
    # session's temporary schema is named pg_temp_N in the catalog.
    _SCHEMA = "(CASE WHEN ? = 'pg_temp' THEN pg_my_temp_schema()::regnamespace::text ELSE ? END)"

    def columns(self, conn: Any, schema: str, table: str) -> list[str]:
        rows = conn.execute(
            f"SELECT column_name FROM information_schema.columns WHERE table_schema = {self._SCHEMA} "
            "AND table_name = ? ORDER BY ordinal_position",
            (schema, schema, table),
        ).fetchall()
        return [str(row[0]) for row in rows]

    def tables(self, conn: Any, schema: str) -> set[str]:
        rows = conn.execute(
            f"SELECT table_name FROM information_schema.tables WHERE table_schema = {self._SCHEMA}",
            (schema, schema),
        ).fetchall()
        return {str(row[0]) for row in rows}


def dialect_of(conn: Any) -> SQLiteDialect | PostgresDialect:
    """The dialect of a connection a store handed out."""
    found = getattr(conn, "turnlog_dialect", None)
    if found is not None:
        return found  # type: ignore[no-any-return]
    if isinstance(conn, sqlite3.Connection):
        return SQLITE
    raise TypeError(f"not a turnlog store connection: {type(conn).__name__}")


__all__ = ["SQLITE", "Connection", "Dialect", "PostgresDialect", "SQLiteDialect", "dialect_of", "statements"]
