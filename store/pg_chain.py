"""The v2 chain on PostgreSQL: placing committed rows in the global order (the sequencer), the
lookups of a session's hash, and the chain migration's view of a store (store.chain_migration).

**Placing.** A row is inserted with ``position`` and ``order_hash`` NULL when its writer could not
take the store's lock at once (another writer is placing rows). Right after its commit the writer
takes the lock (waiting for the holder's commit, never for a whole append) and places every
committed unplaced row in insertion order (``row_id``): the next positions, each chained to the one
before. Placing happens only under the lock, and a placing commits with the lock's release, so the
placed rows are always a gapless prefix 1..N; the view ``events`` shows just those, and a reader never
sees a hole it could pass and not revisit (the sequence-gap bug of event stores that number rows at
insert). Rows of one session are inserted in version order (the session's own lock), so they are
placed in version order too.

**Placing without a flush under the lock.** A placing commit that waited for its WAL flush would
hold the lock through it (PostgreSQL releases a transaction's locks after its commit's flush), and
every other writer's placing would queue behind one flush after another. So a writer places after
its commit (:func:`place_durably`) with ``synchronous_commit = off`` — the lock is held for the
placing's CPU time only, and whoever holds it places every writer's waiting rows — and then waits
for a flush outside the lock, in a transaction of its own that writes one WAL record (a logical
decoding message, read by nobody unless logical decoding runs; then its prefix ``turnlog`` says
whose it is): the flush covers everything logged before it, so the placing is durable before the
append returns, and the writers' flushes share the disk's (PostgreSQL's group commit). A reader
may see a placing for the few milliseconds before its flush; if the server crashes in them, the
rows (durable since their own commit) are placed again at the next append or verify, and what a
reader wrote from them in the database (a checkpoint, an event) is later in the WAL, so lost too."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from turnlog.store.chain import GENESIS_HASH
from turnlog.store.chain_migration import Update, V1Row
from turnlog.store.pg_batch import Result, StatementBatch
from turnlog.store.pg_schema import EVENT_TABLE, PLACE_FUNCTION
from turnlog.store.rows import hash_in_lineage

Connection = Any  # psycopg.Connection[tuple[Any, ...]]

_PLACE = f"SELECT placed_id, placed_position, placed_order FROM {PLACE_FUNCTION}(%s, %s)"
FLUSH = "SELECT pg_logical_emit_message(true, 'turnlog', 'placed')"
"""A statement that writes one WAL record in its transaction: committed with ``synchronous_commit``
on, it waits for the flush of everything logged before it (a transaction that writes no WAL, even
with an xid, commits without a flush)."""


def place_unplaced(
    conn: Connection, place_key: int, event_ids: Sequence[str] = ()
) -> tuple[int, str, dict[str, int]]:
    """Place every committed unplaced row, in one statement (the server-side function takes the
    placing lock for the caller's transaction, reads the waiting rows, chains and stamps them).
    Returns the last placed position and its order hash ((0, 64 zeros) on an empty log), and the
    positions of ``event_ids`` (those placed)."""
    return placed_rows(conn.execute(_PLACE, (place_key, list(event_ids))).fetchall())


def place_durably(
    conn: Connection, place_key: int, event_ids: Sequence[str] = ()
) -> tuple[int, str, dict[str, int]]:
    """:func:`place_unplaced` without holding the placing lock through a flush (see the module's
    doc), then the flush that makes the placing durable: one round trip, two transactions."""
    batch = StatementBatch(conn)
    placed = queue_placing(batch, place_key, event_ids)
    batch.send()
    return placed_rows(placed.fetchall())


def queue_placing(batch: StatementBatch, place_key: int, event_ids: Sequence[str]) -> Result:
    """Queue :func:`place_durably`'s statements on ``batch`` (after a COMMIT, or first): the result
    holds the rows :func:`placed_rows` reads."""
    batch.execute("BEGIN")
    batch.execute("SET LOCAL synchronous_commit = off")
    placed = batch.execute(_PLACE, (place_key, list(event_ids)))
    batch.execute("COMMIT")
    batch.execute("BEGIN")
    batch.execute(FLUSH)
    batch.execute("COMMIT")
    return placed


def placed_rows(rows: list[tuple[Any, ...]]) -> tuple[int, str, dict[str, int]]:
    """The last placed position and its order hash, and the positions of the ids asked about."""
    positions: dict[str, int] = {}
    last, order = 0, GENESIS_HASH
    for event_id, position, order_hash in rows:
        if event_id is None:
            last, order = int(position), str(order_hash)
        elif position is not None:
            positions[event_id] = int(position)
    return last, order, positions


def pg_hash_at(conn: Connection, cache: dict[str, Any] | None = None) -> Callable[[str, int], str | None]:
    """The stored hash of a session's event at a version, following its fork lineage (every row
    of the log, placed or not: a session's chain is whole at its commit)."""
    segments: dict[str, Any] = {} if cache is None else cache

    def first_row(sid: str) -> tuple[str, str] | None:
        row = conn.execute(
            f"SELECT type, payload FROM {EVENT_TABLE} WHERE session_id = %s ORDER BY version LIMIT 1", (sid,)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def hash_of(sid: str, version: int) -> str | None:
        row = conn.execute(
            f"SELECT hash FROM {EVENT_TABLE} WHERE session_id = %s AND version = %s", (sid, version)
        ).fetchone()
        return None if row is None else str(row[0])

    return lambda sid, version: hash_in_lineage(first_row, hash_of, sid, version, segments)


class PgRelink:
    """The v2 chain migration's view of a PostgreSQL store (store.chain_migration.RelinkTarget)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.hashes = pg_hash_at(conn)

    def rows_after(self, position: int, limit: int) -> list[V1Row]:
        rows: list[V1Row] = self.conn.execute(
            "SELECT position, session_id, version, event_id, type, schema_version, payload, blob_id, "
            f"recorded_at, prev_hash, hash FROM {EVENT_TABLE} WHERE position > %s ORDER BY position LIMIT %s",
            (position, limit),
        ).fetchall()
        return rows

    def write(self, updates: list[Update]) -> None:
        if updates:
            prevs, hashes, digests, orders, positions = (
                list(column) for column in zip(*updates, strict=True)
            )
            self.conn.execute(
                f"UPDATE {EVENT_TABLE} AS e SET prev_hash = v.prev, hash = v.h, payload_digest = v.d, "
                "order_hash = v.o FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::bigint[]) "
                "AS v(prev, h, d, o, p) WHERE e.position = v.p",
                (prevs, hashes, digests, orders, positions),
            )

    def hash_at(self, session_id: str, version: int) -> str | None:
        return self.hashes(session_id, version)

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM turnlog_meta WHERE key = %s", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO turnlog_meta (key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )
