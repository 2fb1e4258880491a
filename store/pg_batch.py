"""Statements sent to PostgreSQL together, as one query of several statements: one round trip, and
none of the per-statement work psycopg's pipeline mode does in Python (on a local server that work,
not the network, was most of an append's cost: five small statements took 0.37 ms of CPU one by one
or pipelined, 0.10 ms as one query).

The parameters are bound on the client by psycopg's own quoting (``ClientCursor.mogrify``: the
connection's escaping, bytea as hex, arrays as array literals), so a value is never pasted into
SQL by hand. The statements run in order; the first that fails stops the rest, and its error is
raised where the batch is sent (as pipeline mode raises it at the next read). Results are read
after the batch ran, in the order the statements were queued: a read of a statement still queued
sends the batch first."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import psycopg
from psycopg.types.numeric import FloatDumper

_VALUES = re.compile(
    r"(?is)\A\s*(INSERT\s+INTO\s+.+?\s+VALUES\s*)(\((?:\s*%s\s*,)*\s*%s\s*\))(\s*ON\s+CONFLICT\b.*?\bDO\s+NOTHING)?\s*\Z"
)


class _Float8(FloatDumper):
    """A float as a ``float8`` literal: bare, PostgreSQL would read ``1.5`` as ``numeric``."""

    def quote(self, obj: float) -> bytes:
        return bytes(super().quote(obj)) + b"::float8"


@functools.lru_cache(maxsize=512)
def _values_parts(sql: str) -> tuple[str, str, str] | None:
    """An ``INSERT ... VALUES (%s, ...)`` split at its row (head, row, tail), else None."""
    found = _VALUES.match(sql)
    return None if found is None else (found.group(1), found.group(2), found.group(3) or "")


class Result:
    """A queued statement's outcome: its rows (None for a statement that returns none) and row
    count, readable once the batch was sent (a read sends it)."""

    __slots__ = ("_batch", "_index", "_rowcount", "_rows", "_sent")

    def __init__(self, batch: StatementBatch | None, index: int) -> None:
        self._batch = batch
        self._index = index
        self._rows: list[tuple[Any, ...]] | None = None
        self._rowcount = -1
        self._sent = batch is None

    @classmethod
    def of(cls, rows: list[tuple[Any, ...]]) -> Result:
        """A result already read."""
        result = cls(None, -1)
        result._set(list(rows), len(rows))
        return result

    def _set(self, rows: list[tuple[Any, ...]] | None, rowcount: int) -> None:
        self._rows, self._rowcount, self._sent = rows, rowcount, True

    def _wait(self) -> None:
        if not self._sent and self._batch is not None:
            self._batch.send()
        if not self._sent:  # the batch failed before this statement: its error was raised already
            raise psycopg.ProgrammingError("the statement was not run: an earlier one of its batch failed")

    @property
    def rowcount(self) -> int:
        self._wait()
        return self._rowcount

    def fetchall(self) -> list[tuple[Any, ...]]:
        self._wait()
        if self._rows is None:
            raise psycopg.ProgrammingError("the statement returned no rows")
        rows, self._rows = self._rows, []
        return rows

    def fetchone(self) -> tuple[Any, ...] | None:
        self._wait()
        if self._rows is None:
            raise psycopg.ProgrammingError("the statement returned no rows")
        return self._rows.pop(0) if self._rows else None

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.fetchall())

    def close(self) -> None:
        """Nothing to release (a cursor's method, for callers that close what they got)."""


class StatementBatch:
    """Statements queued on a psycopg connection (``%s`` placeholders) and sent as one query by
    :meth:`send` (or by a read of a result still queued)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._cursor = psycopg.ClientCursor(conn)
        self._cursor.adapters.register_dumper(float, _Float8)  # this cursor's only
        self._queued: list[str] = []
        self._results: list[Result] = []
        self.errors: list[psycopg.Error] = []
        """The failures of its sends, the first first (a caller that let a later statement fail
        finds the one that made it fail)."""

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Result:
        """Queue a statement; its result is read once the batch is sent."""
        text = self._cursor.mogrify(sql, params) if params else sql
        result = Result(self, len(self._results))
        self._queued.append(text)
        self._results.append(result)
        return result

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Result:
        """Queue a statement once per row. A plain ``INSERT ... VALUES (%s, ...)`` (or one that
        does nothing on conflict) becomes one statement of many rows, which the server runs as the
        rows one after the other would; the result holds the total row count."""
        rows = list(rows)
        parts = _values_parts(sql)
        if parts is None:
            results = [self.execute(sql, row) for row in rows]
            return results[-1] if results else Result(None, -1)
        if not rows:
            return Result(None, -1)
        head, values, tail = parts
        mogrify = self._cursor.mogrify
        return self.execute(head + ", ".join(mogrify(values, row) for row in rows) + tail)

    def __len__(self) -> int:
        return len(self._queued)

    def send(self) -> None:
        """Run every queued statement in one round trip; their results become readable. On a
        failure the statements after the failing one did not run, and its error is raised."""
        if not self._queued:
            return
        text, results = ";\n".join(self._queued), self._results
        self._queued, self._results = [], []
        cursor = self._cursor
        try:
            cursor.execute(text)
        except psycopg.Error as exc:
            self.errors.append(exc)
            raise
        for index, result in enumerate(results):
            if index and not cursor.nextset():
                raise psycopg.InterfaceError(f"a batch of {len(results)} statements returned {index} results")
            result._set(cursor.fetchall() if cursor.description is not None else None, cursor.rowcount)


__all__ = ["Result", "StatementBatch"]
