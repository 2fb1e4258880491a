"""PostgreSQL connections as projections use them: ``?`` placeholders (sqlite3's style, the one
portable spelling the projections write), ``execute`` returning a cursor, ``executemany``, and the
dialect the connection speaks. psycopg takes ``%s`` and reads every ``%`` of a query that has
parameters as the start of one, so a query is rewritten once (and remembered): ``?`` outside quoted
text and identifiers becomes ``%s``, a ``%`` becomes ``%%``."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import psycopg

from turnlog.store.dialect import PostgresDialect


@functools.lru_cache(maxsize=2048)
def qmark(sql: str) -> str:
    """``sql`` with ``?`` placeholders as psycopg's ``%s`` (and ``%`` doubled); quoted text
    (``'...'``), quoted identifiers (``"..."``) and ``--`` comments are copied as they are, except
    that their ``%`` is doubled too (psycopg reads the whole query)."""
    out: list[str] = []
    quote: str | None = None
    index = 0
    while index < len(sql):
        char = sql[index]
        if quote is not None:
            out.append("%%" if char == "%" else char)
            if char == quote:
                quote = None
        elif char in ("'", '"'):
            quote = char
            out.append(char)
        elif char == "-" and sql.startswith("--", index):
            end = sql.find("\n", index)
            end = len(sql) if end == -1 else end
            out.append(sql[index:end].replace("%", "%%"))
            index = end
            continue
        elif char == "?":
            out.append("%s")
        elif char == "%":
            out.append("%%")
        else:
            out.append(char)
        index += 1
    return "".join(out)


def _params(params: Sequence[Any]) -> tuple[Any, ...]:
    """Parameters as PostgreSQL text takes them: it cannot hold NUL, so a projection row (derived,
    shown to people) holds U+FFFD where the event's text has one; the log keeps the exact text."""
    return tuple(p.replace("\x00", "\ufffd") if isinstance(p, str) and "\x00" in p else p for p in params)


class QmarkConnection:
    """A psycopg connection behind the calls projections make (``execute``, ``executemany``,
    ``fetchone``/``fetchall`` on what they return), with ``?`` placeholders."""

    def __init__(self, conn: Any, dialect: PostgresDialect) -> None:
        self._conn = conn
        self.turnlog_dialect = dialect
        """The dialect :func:`store.dialect.dialect_of` finds on it."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        # Without parameters psycopg sends the text as it is: a doubled % would stay doubled.
        return self._conn.execute(qmark(sql), _params(params)) if params else self._conn.execute(sql)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        rows = [_params(row) for row in rows]
        cursor = self._conn.cursor()
        if rows:
            cursor.executemany(qmark(sql), rows)
        return cursor

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[None]:
        """psycopg's pipeline mode: statements are queued and sent together, a read (a fetch) or
        the end of the block waits for the results. An error is raised at that read or at the end;
        the statements queued after it are skipped, and the block's exit says so quietly (psycopg
        would log "error ignored terminating Pipeline ... pipeline aborted" on stderr)."""
        with quiet_pipeline(self._conn):
            yield

    @property
    def raw(self) -> Any:
        """The psycopg connection itself (``%s`` placeholders), for store/ code."""
        return self._conn


@contextlib.contextmanager
def quiet_pipeline(conn: Any) -> Iterator[None]:
    """``conn.pipeline()`` whose failure is raised once, quietly: the sync that ends the aborted part
    is made here and its PipelineAborted dropped (the error that matters is the one already
    propagating), so psycopg logs no "error ignored terminating Pipeline" on stderr."""
    with conn.pipeline() as pipeline:
        try:
            yield
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                pipeline.sync()
            raise


__all__ = ["QmarkConnection", "qmark", "quiet_pipeline"]
