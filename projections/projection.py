"""What a materialized projection is (the contract every projection's module implements), and the
helpers their applies share: forks' rows copied from the parent's, and the switch that keeps a
projection's own reads from catching up. projections.materialize keeps them up to date."""

from __future__ import annotations

import abc
import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from turnlog.store import CorruptStoreError, RecordedEvent, SessionStarted
from turnlog.store.dialect import Connection, dialect_of
from turnlog.store.log_ops import position_of

_QUIET = threading.local()


@contextlib.contextmanager
def quiet_catch_up() -> Iterator[None]:
    """Inside the block, this thread's catch-ups do nothing: for a projection whose apply builds
    from the other projections' rows (projections.stable_cuts), which are the ones being written
    in the same transaction, as far as they go."""
    depth: int = getattr(_QUIET, "depth", 0)
    _QUIET.depth = depth + 1
    try:
        yield
    finally:
        _QUIET.depth = depth


class Projection(abc.ABC):
    """A materialized projection: its tables, and how a range of events changes them."""

    name: ClassVar[str]
    """Unique name; also the prefix of its tables."""
    version: ClassVar[int]
    """Bump when the tables or the logic change: stored rows of an older version are rebuilt."""
    tables: ClassVar[tuple[str, ...]]
    """Its tables, emptied by a rebuild and compared by verify."""
    types: ClassVar[tuple[str, ...] | None] = None
    """The event types it needs (None: all)."""

    @abc.abstractmethod
    def create(self, conn: Connection, schema: str = "main") -> None:
        """Create its tables and indexes, if missing, in ``schema`` (the store's own, or the
        dialect's scratch schema for the fresh copy verify builds: scratch tables hide the store's
        tables of the same name). Written in the neutral DDL form of store.dialect."""

    @abc.abstractmethod
    def apply(self, conn: Connection, records: Sequence[RecordedEvent]) -> None:
        """Apply these events (of its ``types``, in log order, none applied before) to its rows."""

    def apply_remembering(
        self, conn: Connection, records: Sequence[RecordedEvent], memo: dict[Any, Any]
    ) -> None:
        """As :meth:`apply`, with ``memo``: what this projection kept in memory of its rows during
        its earlier applies (its own keys and values), true of the rows as they stand. It reads
        there instead of the rows where it can, and leaves there what its rows now hold. The
        default keeps nothing."""
        self.apply(conn, records)

    def snapshot(self, conn: Connection, schema: str = "main") -> dict[str, list[tuple[Any, ...]]]:
        """Its whole contents, in a canonical order: what verify and the tests compare."""
        result = {}
        for table in self.tables:
            columns = dialect_of(conn).columns(conn, schema, table)
            order = ", ".join(str(i) for i in range(1, len(columns) + 1))
            result[table] = conn.execute(f"SELECT * FROM {schema}.{table} ORDER BY {order}").fetchall()
        return result


def quieted() -> bool:
    """Whether this thread is inside :func:`quiet_catch_up`."""
    return bool(getattr(_QUIET, "depth", 0))


def fork_of(conn: Connection, record: RecordedEvent) -> tuple[str, int, int] | None:
    """For a fork's ``session_started``: (parent session, fork version, position of that version).
    Projections copy their parent's rows as of that position, so a fork sees its prefix."""
    event = record.event
    if not isinstance(event, SessionStarted) or event.parent is None:
        return None
    position = position_of(conn, event.parent.session_id, event.parent.version)
    if position is None:  # the store checked the parent when the fork was appended
        raise CorruptStoreError(f"position {record.position}: fork of a missing parent version")
    return event.parent.session_id, event.parent.version, position


def copy_rows(
    conn: Connection,
    table: str,
    parent: str,
    child: str,
    where: str,
    params: Sequence[Any],
    *,
    overrides: dict[str, str] | None = None,
) -> None:
    """Copy a table's rows of ``parent`` that match ``where`` as rows of ``child``; ``overrides``
    maps a column to the SQL expression that replaces it (e.g. clearing what happened later)."""
    dialect = dialect_of(conn)
    columns = dialect.columns(conn, dialect.main, table)
    chosen = {"session_id": "?", **(overrides or {})}
    select = ", ".join(chosen.get(c, c) for c in columns)
    conn.execute(
        f"INSERT INTO {table} ({', '.join(columns)}) SELECT {select} FROM {table} "
        f"WHERE session_id = ? AND ({where})",
        (child, parent, *params),
    )


__all__ = ["Projection", "copy_rows", "fork_of", "quiet_catch_up", "quieted"]
