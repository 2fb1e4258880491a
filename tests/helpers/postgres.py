"""The PostgreSQL server the tests use (``TURNLOG_TEST_PG``), and a fresh schema per test.

When the server cannot be reached, the PostgreSQL tests are skipped with one line saying why (and
fail under TURNLOG_NO_SKIP=1, as in CI)."""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator

import pytest

DEFAULT_URL = "postgresql://root@127.0.0.1:5432/test"


def pg_url() -> str:
    return os.environ.get("TURNLOG_TEST_PG") or DEFAULT_URL


@functools.cache
def unreachable() -> str | None:
    """Why the PostgreSQL tests cannot run here, or None when they can."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install 'turnlog[postgres]')"
    try:
        with psycopg.connect(pg_url(), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"PostgreSQL at {pg_url().split('@')[-1]} is unreachable ({line}); set TURNLOG_TEST_PG"
    return None


def require_pg() -> None:
    reason = unreachable()
    if reason is not None:
        pytest.skip(reason)


def new_schema_name() -> str:
    return f"tl_test_{uuid.uuid4().hex[:16]}"


def drop_schema(name: str) -> None:
    import psycopg

    with psycopg.connect(pg_url(), autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def sql(statement: str, schema: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Run one statement on its own connection in ``schema`` (raw access, as a DBA would)."""
    import psycopg

    with psycopg.connect(pg_url(), autocommit=True, options=f"-c search_path={schema}") as conn:
        cursor = conn.execute(statement.encode() if not params else statement, params or None)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A schema name no store uses yet; dropped (with whatever was made in it) after the test."""
    require_pg()
    name = new_schema_name()
    try:
        yield name
    finally:
        drop_schema(name)


def sent_queries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The queries psycopg sends from here on, in order (a batch of statements is one query); not
    the pool's liveness check (an empty query) of a connection left idle for a while, which a slow,
    loaded machine makes happen at any point."""
    import psycopg

    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counting(self: object, query: object, params: object = None, **kwargs: object) -> object:
        if str(query):
            sent.append(str(query))
        return execute(self, query, params, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(psycopg.Cursor, "execute", counting)
    return sent
