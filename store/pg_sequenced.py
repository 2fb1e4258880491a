"""The contended append on PostgreSQL (store.pg_append): where other writers keep moving the global
order, a writer does not know the order's head, so the server reads it and chains the batch's rows
to it, in **one call** of a procedure (store.pg_schema, migration 3), prepared, in one round trip.

The procedure's first transaction turns ``synchronous_commit`` off for itself, tries the session's
lock and compares the session's head with the one the batch was linked to (read after the lock, so
up to date: a writer of the session that committed is seen), waits for the placing lock, places the
rows other writers committed unplaced, reads the order's head and inserts the batch's rows chained to
it, then commits. The placing lock is waited for before any insert of the transaction (so never
while holding rows another writer's insert could wait for) and held for CPU time only: the commit
does not wait for the disk. The procedure's second transaction writes one WAL record and commits
with ``synchronous_commit`` on: it waits for the flush of everything logged before it, so the rows
are durable before the call returns, and the writers' flushes share the disk's (PostgreSQL's group
commit; store.pg_chain's placing does the same). One statement and one round trip per append, where
a statement that placed the rows and a second that waited for the flush took two."""

from __future__ import annotations

import functools
import weakref
from typing import Any

import psycopg.errors

from turnlog.store.chain import LinkedBatch
from turnlog.store.pg_fast import Stale, kept_cursor, numbered, stale_key
from turnlog.store.pg_schema import APPEND_PROCEDURE, ROW_FIELDS

Connection = Any  # psycopg.Connection[tuple[Any, ...]]


@functools.lru_cache(maxsize=64)
def call_sql(rows: int, blobs: int) -> str:
    """The call of a batch of ``rows`` events and ``blobs`` blobs. The arrays are built by the server
    from one parameter per value (psycopg adapts a plain value in C, a list in Python: a row's values
    as one list cost the client more than the round trip saved); one text per shape, so one prepared
    statement per shape and connection. The procedure's results are its last two arguments, given
    as NULL here (a default would be read from the catalog's text form at every call)."""
    row_values = ", ".join(["%s::text"] * ROW_FIELDS * rows)
    blob_fields = ", ".join(["%s::text"] * 3 * blobs)
    blob_data = ", ".join(["%s::bytea"] * blobs)
    return (
        f"CALL {APPEND_PROCEDURE}(%s::integer, %s::text, %s::bigint, %s::text, %s::bigint, "
        f"ARRAY[{row_values}]::text[], ARRAY[{blob_fields}]::text[], ARRAY[{blob_data}]::bytea[], "
        "NULL, NULL)"
    )


_CURSORS: weakref.WeakKeyDictionary[Connection, Any] = weakref.WeakKeyDictionary()


def insert_sequenced(
    conn: Connection, batch: LinkedBatch, locks: tuple[int, str, int], session_head: tuple[int, str]
) -> tuple[int, str, dict[str, int]]:
    """Insert ``batch`` placed and wait for the flush (``conn`` in autocommit mode). ``locks``: the
    session locks' space, the session id, the placing lock's key. Returns the order's head the batch
    left and its positions. Raises :class:`store.pg_fast.Stale` when the session's head had moved or
    its lock was taken (nothing stored), else the driver's error (after the first commit, the
    flush's: the rows may be stored)."""
    space, session_id, place_key = locks
    params: list[Any] = [space, session_id, *session_head, place_key]
    for row in batch.rows:
        params.extend(row[1:-1])
    blob_data: list[bytes] = []
    for blob_id, size, codec, data in batch.blobs.values():
        params.extend((blob_id, size, codec))
        blob_data.append(data)
    params.extend(blob_data)
    cursor = kept_cursor(conn, _CURSORS)
    try:
        cursor.execute(numbered(call_sql(len(batch.rows), len(batch.blobs))), params, prepare=True)
    except psycopg.errors.UniqueViolation as exc:
        if stale_key(exc):
            raise Stale from None
        raise
    first, last_order = cursor.fetchone()
    positions = {record.event_id: int(first) + n for n, record in enumerate(batch.records)}
    return int(first) + len(batch.records) - 1, str(last_order), positions
