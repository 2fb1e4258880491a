"""The event log in one SQLite file: WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE`` appends,
a hash chain over every event, content-addressed blobs, and token counts stored once.

The class is built in layers, one module each: the connection and its transactions
(store.sqlite_connection), token counts (store.sqlite_tokens), reads (store.sqlite_reading) and
appends (store.sqlite_append)."""

from __future__ import annotations

from turnlog.store.base import TokenCounting
from turnlog.store.sqlite_append import INLINE_LIMIT, MAX_BATCH, MAX_CONTENT_BYTES, AppendingStore
from turnlog.store.sqlite_connection import WAL_SIZE_LIMIT, Synchronous
from turnlog.store.sqlite_reading import position_of, records_between
from turnlog.store.sqlite_tokens import counted_through, write_token_counts

__all__ = [
    "INLINE_LIMIT",
    "MAX_BATCH",
    "MAX_CONTENT_BYTES",
    "WAL_SIZE_LIMIT",
    "SQLiteStore",
    "Synchronous",
    "TokenCounting",
    "counted_through",
    "position_of",
    "records_between",
    "write_token_counts",
]


class SQLiteStore(AppendingStore):
    """The event log in one SQLite file (or ``":memory:"``).

    Open it with :meth:`open`. One object may be shared by threads; many processes may open the
    same file at once (appends are serialised by SQLite's write lock and ``expected_version``).
    A store opened with ``readonly=True`` never writes to its file.
    """
