"""Materialized projections: rows kept in the store's file, advanced from a checkpoint that is
written in the same transaction as the rows, so a crash can never leave the two apart.

Each projection is deterministic: its rows after processing positions 1..P depend only on those
events. So catching up incrementally, rebuilding from zero and resuming from any checkpoint give the
same rows — the property the tests check for every projection."""

from __future__ import annotations

import abc
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from store import CorruptStoreError, RecordedEvent, SessionStarted, SQLiteStore
from store.sqlite import counted_through, position_of, records_between, write_token_counts

BATCH = 5000
"""Events applied per transaction while catching up."""


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
    def create(self, conn: sqlite3.Connection, schema: str = "main") -> None:
        """Create its tables and indexes (``IF NOT EXISTS``) in ``schema`` (``main``, or ``temp``
        for the fresh copy verify builds: temp tables hide main ones of the same name)."""

    @abc.abstractmethod
    def apply(self, conn: sqlite3.Connection, records: Sequence[RecordedEvent]) -> None:
        """Apply these events (of its ``types``, in log order, none applied before) to its rows."""

    def snapshot(self, conn: sqlite3.Connection, schema: str = "main") -> dict[str, list[tuple[Any, ...]]]:
        """Its whole contents, in a canonical order: what verify and the tests compare."""
        result = {}
        for table in self.tables:
            columns = [row[1] for row in conn.execute(f"PRAGMA {schema}.table_info({table})")]
            order = ", ".join(str(i) for i in range(1, len(columns) + 1))
            result[table] = conn.execute(f"SELECT * FROM {schema}.{table} ORDER BY {order}").fetchall()
        return result


_CHECKPOINTS = """
CREATE TABLE IF NOT EXISTS projection_checkpoints (
    name TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    position INTEGER NOT NULL
) STRICT
"""

Progress = Callable[[int, int], None]


class Materializer:
    """Keeps a set of projections up to date in the store's file."""

    def __init__(self, store: SQLiteStore, projections: Iterable[Projection]) -> None:
        self.store = store
        self.projections = list(projections)
        self._ready = False

    def _prepare(self) -> None:
        if self._ready:
            return
        with self.store.atomic() as conn:
            conn.execute(_CHECKPOINTS)
            for projection in self.projections:
                row = conn.execute(
                    "SELECT version FROM projection_checkpoints WHERE name = ?", (projection.name,)
                ).fetchone()
                if row is not None and row[0] != projection.version:
                    # Written by another version of the code: derived data, so start again.
                    for table in projection.tables:
                        conn.execute(f"DROP TABLE IF EXISTS {table}")
                    conn.execute("DELETE FROM projection_checkpoints WHERE name = ?", (projection.name,))
                projection.create(conn)
        self._ready = True

    def checkpoint(self, projection: Projection) -> int:
        """The last position the projection has applied."""
        self._prepare()
        with self.store.reading() as conn:
            return _checkpoint(conn, projection)

    def catch_up(self, *, through: int | None = None, progress: Progress | None = None) -> int:
        """Apply every event not applied yet (up to ``through``), reading each batch of events once
        for all projections; return the last position applied. Token counts are caught up first,
        since projections use them."""
        self._prepare()
        # A typical turn leaves a few uncounted events: count them now, outside the lock, and write
        # the counts in the same transaction as the projections (one commit, one fsync, per turn).
        pending = self.store.count_pending(limit=BATCH)
        if pending is not None and len(pending[0]) >= BATCH:
            self.store.catch_up_tokens()  # a large backlog: in its own batches first
            pending = None
        if pending is None:
            with self.store.reading() as conn:
                limit = counted_through(conn) if through is None else min(counted_through(conn), through)
                checkpoints = [_checkpoint(conn, p) for p in self.projections]
            if checkpoints and min(checkpoints) >= limit:
                return min(checkpoints)  # up to date: no write lock taken
        while True:
            with self.store.atomic() as conn:
                if pending is not None:
                    write_token_counts(conn, *pending)
                    pending = None
                # Re-read inside the write lock: another process may have advanced them meanwhile.
                starts = {p.name: _checkpoint(conn, p) for p in self.projections}
                limit = counted_through(conn)
                if through is not None:
                    limit = min(limit, through)
                start = min(starts.values(), default=limit)
                end = min(limit, start + BATCH)
                if end <= start:
                    return start
                wanted = _union_types(p.types for p in self.projections if starts[p.name] < end)
                records = records_between(conn, start, end, wanted)
                for projection in self.projections:
                    own = starts[projection.name]
                    if own >= end:
                        continue
                    mine = [
                        r
                        for r in records
                        if r.position > own and (projection.types is None or r.type in projection.types)
                    ]
                    projection.apply(conn, mine)
                    _set_checkpoint(conn, projection, end)
            if progress is not None:
                progress(end, limit)

    def reset(self) -> None:
        """Empty every projection and its checkpoint (the next catch-up starts from zero)."""
        self._prepare()
        with self.store.atomic() as conn:
            for projection in self.projections:
                for table in projection.tables:
                    conn.execute(f"DELETE FROM {table}")
                conn.execute("DELETE FROM projection_checkpoints WHERE name = ?", (projection.name,))

    def rebuild(self, *, progress: Progress | None = None) -> None:
        """Empty every projection and apply the whole log again."""
        self.reset()
        self.catch_up(progress=progress)

    def snapshots(self) -> dict[str, dict[str, list[tuple[Any, ...]]]]:
        """Every projection's rows, by projection name (for comparisons)."""
        with self.store.reading() as conn:
            return {p.name: p.snapshot(conn) for p in self.projections}

    def differences(self) -> list[str]:
        """Compare every projection, caught up, with a fresh rebuild of it; return one line per
        projection whose rows differ (empty when all agree). The rebuild is made in SQLite's temp
        schema on the same connection, inside one read snapshot, and dropped afterwards."""
        head = self.catch_up()
        problems = []
        with self.store.reading() as conn:
            for projection in self.projections:
                if _checkpoint(conn, projection) != head:
                    problems.append(f"projection {projection.name}: behind the log")
                    continue
                try:
                    projection.create(conn, "temp")
                    for start in range(0, head, BATCH):
                        end = min(head, start + BATCH)
                        projection.apply(conn, records_between(conn, start, end, projection.types))
                    if projection.snapshot(conn, "temp") != projection.snapshot(conn, "main"):
                        problems.append(
                            f"projection {projection.name}: rows differ from a fresh rebuild; "
                            "run `turnlog rebuild`"
                        )
                finally:
                    for table in projection.tables:
                        conn.execute(f"DROP TABLE IF EXISTS temp.{table}")
        return problems


def fork_of(conn: sqlite3.Connection, record: RecordedEvent) -> tuple[str, int, int] | None:
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
    conn: sqlite3.Connection,
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
    columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
    chosen = {"session_id": "?", **(overrides or {})}
    select = ", ".join(chosen.get(c, c) for c in columns)
    conn.execute(
        f"INSERT INTO {table} ({', '.join(columns)}) SELECT {select} FROM {table} "
        f"WHERE session_id = ? AND ({where})",
        (child, parent, *params),
    )


def _union_types(type_sets: Iterable[tuple[str, ...] | None]) -> tuple[str, ...] | None:
    wanted: set[str] = set()
    for types in type_sets:
        if types is None:
            return None
        wanted.update(types)
    return tuple(sorted(wanted))


def _set_checkpoint(conn: sqlite3.Connection, projection: Projection, position: int) -> None:
    conn.execute(
        "INSERT INTO projection_checkpoints (name, version, position) VALUES (?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET version = excluded.version, position = excluded.position",
        (projection.name, projection.version, position),
    )


def _checkpoint(conn: sqlite3.Connection, projection: Projection) -> int:
    row = conn.execute(
        "SELECT position FROM projection_checkpoints WHERE name = ?", (projection.name,)
    ).fetchone()
    return int(row[0]) if row else 0
