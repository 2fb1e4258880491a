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
placed in version order too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from turnlog.store.chain import GENESIS_HASH, order_hash
from turnlog.store.chain_migration import Update, V1Row
from turnlog.store.pg_qmark import quiet_pipeline
from turnlog.store.pg_schema import EVENT_TABLE
from turnlog.store.rows import hash_in_lineage

Connection = Any  # psycopg.Connection[tuple[Any, ...]]

_UNPLACED = f"SELECT row_id, hash FROM {EVENT_TABLE} WHERE position IS NULL ORDER BY row_id"
_LAST_PLACED = (
    f"SELECT position, order_hash FROM {EVENT_TABLE} WHERE position IS NOT NULL "
    "ORDER BY position DESC LIMIT 1"
)
_PLACE = (
    f"UPDATE {EVENT_TABLE} AS e SET position = v.p, order_hash = v.o "
    "FROM unnest(%s::bigint[], %s::bigint[], %s::text[]) AS v(r, p, o) WHERE e.row_id = v.r"
)


def place_unplaced(conn: Connection) -> tuple[int, str]:
    """Place every committed unplaced row (the caller's transaction holds the store's lock);
    returns the last position placed and its order hash, (0, "") when there was nothing to place."""
    with quiet_pipeline(conn):
        waiting_cursor = conn.execute(_UNPLACED)
        last_cursor = conn.execute(_LAST_PLACED)
    waiting = waiting_cursor.fetchall()
    if not waiting:
        return 0, ""
    position, order = last_cursor.fetchone() or (0, GENESIS_HASH)
    row_ids, positions, orders = [], [], []
    for row_id, event_hash in waiting:
        position += 1
        order = order_hash(order, position, event_hash)
        row_ids.append(row_id)
        positions.append(position)
        orders.append(order)
    conn.execute(_PLACE, (row_ids, positions, orders))
    return int(position), order


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
