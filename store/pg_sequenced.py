"""The contended append on PostgreSQL, placed in its own transaction (store.pg_append): where other
writers keep moving the global order, a writer does not know the order's head, so the server reads
it and chains the batch's rows to it, in **one prepared statement** (its own implicit transaction,
the connection in autocommit mode), then a second that waits for the flush.

The statement's ``WITH`` part turns ``synchronous_commit`` off for its transaction, tries the
session's lock and compares the session's head with the one the batch was linked to (as
store.pg_fast: a stale snapshot fails on the unique key of the row it missed, nothing stored);
then the placing function (store.pg_schema) waits for the placing lock, places the rows other
writers committed unplaced and returns the order's head, read in a snapshot taken after the lock
(every placing before it committed); the batch's rows are inserted chained to it. The lock is
waited for before any insert of the transaction (so never while holding rows another writer's
insert could wait for) and held for CPU time only: the commit does not wait for the disk. The
next statement writes one WAL record in a transaction of its own and waits for the flush, which
makes the rows durable before the append returns, the writers sharing flushes (store.pg_chain's
placing does the same). One insert per row, where an unplaced insert and its placing's update
wrote each row twice, and a plan made once per connection."""

from __future__ import annotations

import functools
import weakref
from typing import Any

from turnlog.store.chain import INSERT_COLUMNS, LinkedBatch
from turnlog.store.pg_chain import FLUSH
from turnlog.store.pg_fast import FAST_FAIL
from turnlog.store.pg_schema import EVENT_TABLE, PLACE_FUNCTION

Connection = Any  # psycopg.Connection[tuple[Any, ...]]

_ROW_COLUMNS = INSERT_COLUMNS.split(", ")[1:-1]
"""The columns a linked row gives (its position and order hash are the server's here)."""
_ROW = (
    "(%s::int, %s::text, %s::bigint, %s::text, %s::text, %s::int, %s::text, %s::text, %s::bigint, "
    "%s::text, %s::text, %s::text, %s::text)"
)
_BLOB_ROW = "(%s, %s::bigint, %s, %s::bytea)"
_ORDER = (
    "encode(sha256(convert_to('turnlog-order-v2;' || length(c.ord) || ':' || c.ord || ';' "
    "|| length((c.pos + 1)::text) || ':' || (c.pos + 1) || ';' || length(v.hash) || ':' || v.hash "
    "|| ';', 'UTF8')), 'hex')"
)
"""store.chain.order_hash, as the placing function (store.pg_schema) computes it."""
_CHECK = (
    "WITH RECURSIVE ok AS (SELECT CASE WHEN set_config('synchronous_commit', 'off', true) = 'off' "
    "AND pg_try_advisory_xact_lock(%s::int, hashtext(%s)) AND EXISTS (SELECT 1 FROM (SELECT version, "
    f"hash FROM {EVENT_TABLE} WHERE session_id = %s ORDER BY version DESC LIMIT 1) AS s "
    f"WHERE s.version = %s::bigint AND s.hash = %s) THEN 0 ELSE {FAST_FAIL} END AS z), "
    f"g AS MATERIALIZED (SELECT p.placed_position AS pos, p.placed_order AS ord FROM ok, {PLACE_FUNCTION}"
    "(%s::bigint + ok.z, '{}'::text[]) AS p WHERE p.placed_id IS NULL)"
)


@functools.lru_cache(maxsize=64)
def sequenced_insert_sql(rows: int, blobs: int) -> str:
    """The statement of ``rows`` events and ``blobs`` blobs (one text per shape, so one prepared
    statement per shape and connection)."""
    names = ", ".join(_ROW_COLUMNS)
    parts = [_CHECK]
    if blobs:
        parts.append(
            ", b AS (INSERT INTO blobs (id, size, codec, data) SELECT r.* FROM g, (VALUES "
            + ", ".join([_BLOB_ROW] * blobs)
            + ") AS r ON CONFLICT (id) DO NOTHING)"
        )
    parts.append(
        f", v (n, {names}) AS (VALUES {', '.join([_ROW] * rows)}), "
        f"c (n, pos, ord) AS (SELECT 0, g.pos, g.ord FROM g UNION ALL SELECT c.n + 1, c.pos + 1, {_ORDER} "
        "FROM c JOIN v ON v.n = c.n + 1) "
        f"INSERT INTO {EVENT_TABLE} ({INSERT_COLUMNS}) SELECT c.pos, "
        + ", ".join(f"v.{name}" for name in _ROW_COLUMNS)
        + ", c.ord FROM v JOIN c ON c.n = v.n ORDER BY v.n RETURNING event_id, position, order_hash"
    )
    return "".join(parts)


_CURSORS: weakref.WeakKeyDictionary[Connection, Any] = weakref.WeakKeyDictionary()


def insert_sequenced(
    conn: Connection, batch: LinkedBatch, locks: tuple[int, str, int], session_head: tuple[int, str]
) -> tuple[int, str, dict[str, int]]:
    """Insert ``batch`` placed (``conn`` in autocommit mode), then wait for the flush. ``locks``:
    the session locks' space, the session id, the placing lock's key. Returns the order's head the
    batch left and its positions. Raises the driver's error (a failed check: store.pg_fast.is_stale;
    nothing stored), or, after the insert committed, the flush's."""
    space, session_id, place_key = locks
    params: list[Any] = [space, session_id, session_id, *session_head, place_key]
    for blob in batch.blobs.values():
        params.extend(blob)
    for n, row in enumerate(batch.rows, 1):
        params.append(n)
        params.extend(row[1:-1])
    cursor = _CURSORS.get(conn)
    if cursor is None or cursor.closed:
        cursor = _CURSORS[conn] = conn.cursor()
    cursor.execute(sequenced_insert_sql(len(batch.rows), len(batch.blobs)), params, prepare=True)
    rows = cursor.fetchall()
    cursor.execute(FLUSH, prepare=True)
    positions = {str(event_id): int(position) for event_id, position, _ in rows}
    last = max(rows, key=lambda row: int(row[1]))
    return int(last[1]), str(last[2]), positions
