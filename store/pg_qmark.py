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
from turnlog.store.pg_batch import Result, StatementBatch


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

    def __init__(
        self,
        conn: Any,
        dialect: PostgresDialect,
        *,
        begin: str | None = None,
        batch: StatementBatch | None = None,
    ) -> None:
        """``begin``: the transaction's BEGIN, sent with the first statement; ``batch``: statements
        queued already, which this connection's join (as in a :meth:`pipeline` block around all its
        use: a read sends them, the caller sends the rest)."""
        self._conn = conn
        self.turnlog_dialect = dialect
        """The dialect :func:`store.dialect.dialect_of` finds on it."""
        self._batch: StatementBatch | None = batch
        self._begin = begin
        self._begin_text = begin
        self.nested = 0
        """Readings inside the one that made this connection (store.pg_storage): while there are
        any, :meth:`prefetch` never ends the transaction."""
        self._prefetched: dict[tuple[str, tuple[Any, ...]], list[tuple[Any, ...]]] = {}
        self.ahead: dict[Any, Any] = {}
        """What a read of this reading learnt for a later one (keys are the reader's own): a read
        that answers several in one statement leaves them here (projections.context_header)."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        if self._prefetched:
            rows = self._prefetched.pop((sql, tuple(params)), None)
            if rows is not None:
                return Result.of(rows)
        if self._batch is not None:
            return self._queue(self._batch, sql, params)
        if self._begin is not None:  # the transaction's BEGIN goes with its first statement
            batch = self._started()
            result = self._queue(batch, sql, params)
            batch.send()
            return result
        # Without parameters psycopg sends the text as it is: a doubled % would stay doubled.
        return self._conn.execute(qmark(sql), _params(params)) if params else self._conn.execute(sql)

    @staticmethod
    def _queue(batch: StatementBatch, sql: str, params: Sequence[Any]) -> Result:
        return batch.execute(qmark(sql), _params(params)) if params else batch.execute(sql)

    def _started(self) -> StatementBatch:
        """A batch that begins with the transaction's BEGIN, when it was not sent yet."""
        batch = StatementBatch(self._conn)
        if self._begin is not None:
            batch.execute(self._begin)
            self._begin = None
        return batch

    def prefetch(self, queries: Iterable[tuple[str, Sequence[Any]]], *, last: bool = False) -> None:
        """Run ``queries`` (``?`` placeholders, hashable parameters) together, one round trip; each
        result is kept for the first :meth:`execute` of the same query with the same parameters
        (in the same snapshot, so what it would have read). A read that knows what it will ask
        next saves the round trips. ``last``: the reading asks nothing else, so when these are its
        first statements its transaction ends in the same round trip (its ROLLBACK sent with
        them, not at its end); a statement it sends after all begins a snapshot of its own."""
        ending = last and self._begin is not None and self._batch is None and self.nested == 0
        batch = self._started()
        pending = [(sql, tuple(params), self._queue(batch, sql, params)) for sql, params in queries]
        if ending:
            batch.execute("ROLLBACK")
        batch.send()
        for sql, params, result in pending:
            self._prefetched[(sql, params)] = result.fetchall()
        if ending:
            self._begin = self._begin_text

    def alone(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The rows of one statement, prepared on the server (parsed and planned once a connection).
        As the reading's first statement it runs on its own, outside the transaction: one statement
        sees one snapshot, and the reading's BEGIN waits for the statement after it, if any, so a
        reading that one statement answers makes one round trip, with no BEGIN and no ROLLBACK
        (what it reads after that sees a snapshot of its own). Else it runs in the transaction."""
        alone = self._begin is not None and self._batch is None and self.nested == 0
        if not alone and (self._begin is not None or self._batch is not None):
            return self.execute(sql, params).fetchall()  # type: ignore[no-any-return]
        # Results in binary: a number is copied rather than parsed from its digits (a build's
        # statement answers some 1,500 of them; texts are the same bytes either way).
        rows: list[tuple[Any, ...]] = self._conn.execute(
            qmark(sql), _params(params), prepare=True, binary=True
        ).fetchall()
        return rows

    def remember(self, sql: str, params: Sequence[Any], rows: list[tuple[Any, ...]]) -> None:
        """Answer the first :meth:`execute` of ``sql`` with ``params`` with ``rows``: what a read
        made ahead (in a snapshot that sees what that statement would see) found for it."""
        self._prefetched[(sql, tuple(params))] = rows

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        rows = [_params(row) for row in rows]
        if self._begin is not None and self._batch is None:
            self._started().send()
        if self._batch is not None:
            return self._batch.executemany(qmark(sql), rows)
        cursor = self._conn.cursor()
        if rows:
            cursor.executemany(qmark(sql), rows)
        return cursor

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[None]:
        """The statements of the block sent together, as one query (store.pg_batch): a read of a
        result (a fetch, a row count) or the end of the block sends what is queued, one round
        trip. An error is raised at that read or at the end, and the statements after the failing
        one do not run. When the block itself raises, what it queued is still sent (its error
        ignored: the block's own is the one that matters), so a savepoint it queued exists for
        the caller's rollback, as in psycopg's pipeline mode. A block inside another is part of
        the outer one."""
        if self._batch is not None:
            yield
            return
        batch = self._batch = self._started()
        try:
            yield
        except BaseException:
            self._batch = None
            with contextlib.suppress(psycopg.Error):
                batch.send()
            raise
        self._batch = None
        batch.send()

    @property
    def raw(self) -> Any:
        """The psycopg connection itself (``%s`` placeholders), for store/ code (in the transaction:
        its BEGIN is sent first if it was not yet, and in a :meth:`pipeline` what it queued, so
        that statements run in the order they were made)."""
        if self._batch is not None:
            self._batch.send()
        elif self._begin is not None:
            self._started().send()
        return self._conn


__all__ = ["QmarkConnection", "qmark"]
