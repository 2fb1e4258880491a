"""The projections' storage on PostgreSQL: what makes a :class:`PostgresStore` a :class:`Store`.
Projections get connections that take ``?`` placeholders (store.pg_qmark) in the store's schema;
their rows are written inside each append's transaction (``within_append`` hooks, in a savepoint:
a failure there leaves the events to commit alone and the catch-up after the commit redoes it) and
caught up after it (``on_append`` hooks). Token counts are made before the append's transaction,
or after its commit with ``token_counting="deferred"`` (store.pg_tokens).

A store opened ``readonly`` refuses appends; its projections are still caught up in the database
when a read needs them (they are derived rows in a shared server, not a file a reader may not write)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from psycopg.pq import TransactionStatus

from turnlog.store.base import RecordedEvent
from turnlog.store.dialect import Connection, PostgresDialect
from turnlog.store.errors import LockBusy, StoreError
from turnlog.store.pg_batch import StatementBatch
from turnlog.store.pg_qmark import QmarkConnection
from turnlog.store.pg_reading import pg_lineage, select_records

WithinHook = Callable[[Any, Sequence[RecordedEvent]], None]
AfterHook = Callable[[Sequence[RecordedEvent]], None]


if TYPE_CHECKING:
    from turnlog.store.pg_connection import PostgresBase as _Base
else:
    _Base = object


class PgProjectionStorage(_Base):
    """The Store members a PostgreSQL store adds to its log (mixed into PostgresStore, before the
    log's layers and :class:`Store`, whose abstract members these are)."""

    readonly: bool = False
    """Always False here: the projections of a PostgreSQL store are caught up in the database even
    for a reader (derived rows on a shared server, not a file the reader may not write)."""
    refuse_appends: bool = False
    """Opened for reading (``turnlog.open_store(..., readonly=True)``): appends are refused."""
    schema: str
    where: str

    @property
    def dialect(self) -> PostgresDialect:
        found: PostgresDialect | None = vars(self).get("_dialect")
        if found is None:
            found = self.__dict__["_dialect"] = PostgresDialect(self.schema)
        return found

    def _hooks(self, kind: str) -> list[Any]:
        found: list[Any] = self.__dict__.setdefault(kind, [])
        return found

    @contextlib.contextmanager
    def reading(self) -> Iterator[QmarkConnection]:
        """One snapshot, rolled back at the end: what a reader writes there (verify's scratch copies
        in pg_temp) goes with it. Not READ ONLY, since PostgreSQL refuses even temporary tables then.
        A reading inside another of the same thread is that one (as on SQLite): a build's many reads
        share one snapshot and one connection, and pay its BEGIN and ROLLBACK once."""
        held: QmarkConnection | None = getattr(self._held_reading(), "conn", None)
        if held is not None:
            held.nested += 1
            try:
                yield held
            finally:
                held.nested -= 1
            return
        with self.connection() as conn:
            # Its BEGIN goes with the first statement (one round trip less).
            wrapped = QmarkConnection(conn, self.dialect, begin="BEGIN ISOLATION LEVEL REPEATABLE READ")
            self._held_reading().conn = wrapped
            try:
                yield wrapped
            finally:
                self._held_reading().conn = None
                if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                    with contextlib.suppress(Exception):
                        conn.execute("ROLLBACK")

    @contextlib.contextmanager
    def reading_on(self, conn: Any) -> Iterator[None]:
        local = self._held_reading()
        held = getattr(local, "conn", None)
        if held is conn or not isinstance(conn, QmarkConnection):
            yield
            return
        local.conn = conn
        try:
            yield
        finally:
            local.conn = held

    def _held_reading(self) -> threading.local:
        """This thread's open :meth:`reading`, as ``.conn`` (None or missing: none)."""
        found: threading.local | None = vars(self).get("_reading_local")
        if found is None:
            found = self.__dict__.setdefault("_reading_local", threading.local())
        return found

    def held_snapshot(self) -> Connection | None:
        """The psycopg connection of this thread's open :meth:`reading`, if any: the log's reads
        (store.pg_reading) use it rather than begin a snapshot of their own."""
        held: QmarkConnection | None = getattr(self._held_reading(), "conn", None)
        return None if held is None else held.raw

    @contextlib.contextmanager
    def atomic(self, *, durable: bool = True, wait: bool = True) -> Iterator[QmarkConnection]:
        """A transaction in the store's schema, holding the store's write lock from its start (the
        lock an append takes when it advances the projections in its own transaction), as SQLite's
        ``BEGIN IMMEDIATE`` does: two processes catching the projections up take turns, and the
        second finds the first's checkpoints (no sum is ever added twice). ``durable=False``: its
        commit does not wait for the disk — derived rows, remade from the log if a crash takes them
        back. ``wait=False``: LockBusy at once when another connection holds the lock."""
        with self.connection() as conn:
            try:
                first = StatementBatch(conn)  # one round trip
                first.execute("BEGIN")
                lock = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
                got = first.execute(f"SELECT {lock}(%s)::text", (self.lock_key,))
                if not durable:
                    first.execute("SET LOCAL synchronous_commit = off")
                first.send()
                if not wait and (got.fetchone() or ("false",))[0] != "true":
                    raise LockBusy(f"{self.where}: another writer holds the store's lock")
                yield QmarkConnection(conn, self.dialect)
            except BaseException:
                if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                    with contextlib.suppress(Exception):
                        conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def within_append(self, hook: WithinHook) -> None:
        self._hooks("_within_append").append(hook)

    def on_append(self, hook: AfterHook) -> None:
        self._hooks("_after_append").append(hook)

    def has_within_hooks(self) -> bool:
        return bool(self._hooks("_within_append"))

    def run_within(
        self, conn: Connection, records: Sequence[RecordedEvent], batch: StatementBatch | None = None
    ) -> None:
        """The within-append hooks, on the append's own connection and transaction, in a savepoint:
        a hook that fails leaves the events to commit without its rows. With ``batch`` (the append's
        inserts, not sent yet) their statements join it: the first read a hook makes sends them all."""
        wrapped = QmarkConnection(conn, self.dialect, batch=batch)
        for hook in self._hooks("_within_append"):
            hook(wrapped, records)

    def _appended(self, records: list[RecordedEvent]) -> None:
        for hook in self._hooks("_after_append"):
            with contextlib.suppress(StoreError):  # derived state only: readers catch up
                hook(records)


def pg_records_between(
    conn: QmarkConnection, after: int, through: int, types: Sequence[str] | None = None
) -> list[RecordedEvent]:
    """The events with after < position <= through (optionally only some types), on ``conn``."""
    if types:
        return select_records(
            conn.raw,
            "WHERE e.position > %s AND e.position <= %s AND e.type = ANY(%s) ORDER BY e.position",
            (after, through, list(types)),
        )
    return select_records(
        conn.raw, "WHERE e.position > %s AND e.position <= %s ORDER BY e.position", (after, through)
    )


def pg_position_of(conn: QmarkConnection, session_id: str, version: int) -> int | None:
    """The global position of a session's version, following a fork's lineage."""
    for sid, lo, hi in pg_lineage(conn.raw, session_id, {}):
        if lo <= version <= hi:
            row = conn.raw.execute(
                "SELECT position FROM events WHERE session_id = %s AND version = %s", (sid, version)
            ).fetchone()
            return int(row[0]) if row else None
    return None


__all__ = ["PgProjectionStorage", "pg_position_of", "pg_records_between"]
