"""A third side for the floor's append figures: turnlog's own rows, replayed by plain ``sqlite3``.

The same messages are first appended to a scratch turnlog store (not timed); the rows it stored
(every column, and the content blobs they point to) are then inserted by plain ``sqlite3`` into an
empty copy of that store (its salt: the rows verify) at the same durability (WAL,
synchronous=FULL), one INSERT + COMMIT an event or ``executemany`` + COMMIT a batch. This side
pays for turnlog's schema (its wider rows, the unique indexes on the event id and the session's
version, the immutability triggers, the blob table) and for nothing of turnlog's Python (the
public event objects, validation, JSON, the chain's keyed hashes): turnlog ÷ it is the share of
the gap that is turnlog's code, it ÷ the floor the schema's."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COLUMNS = (
    "position, session_id, version, event_id, type, schema_version, payload, blob_id, tokens, "
    "recorded_at, prev_hash, hash, payload_digest, order_hash"
)
_INSERT = f"INSERT INTO events ({COLUMNS}) VALUES ({', '.join('?' * 14)})"
_INSERT_BLOB = "INSERT OR IGNORE INTO blobs (id, size, codec, data) VALUES (?, ?, ?, ?)"

Row = tuple[tuple[Any, ...], tuple[Any, ...] | None]
"""An event's row and the blob row it points to (or None)."""


def stored_rows(path: Path) -> list[Row]:
    """Every event row of the turnlog store at ``path`` in position order, each with its blob row."""
    conn = sqlite3.connect(path)
    try:
        blobs = {row[0]: row for row in conn.execute("SELECT id, size, codec, data FROM blobs")}
        return [
            (row, blobs[row[7]] if row[7] is not None else None)
            for row in conn.execute(f"SELECT {COLUMNS} FROM events ORDER BY position")
        ]
    finally:
        conn.close()


class Rows:
    """An empty turnlog store (a copy of the store that made the rows, taken while it was empty: the
    same salt) that plain ``sqlite3`` fills with those rows."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")

    def append_one(self, row: Row) -> None:
        event, blob = row
        if blob is None:
            self.conn.execute(_INSERT, event)  # autocommit: one INSERT, one COMMIT
            return
        self.append([row])

    def append(self, rows: Sequence[Row]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        blobs = [blob for _, blob in rows if blob is not None]
        if blobs:
            self.conn.executemany(_INSERT_BLOB, blobs)
        self.conn.executemany(_INSERT, [event for event, _ in rows])
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


__all__ = ["Rows", "stored_rows"]
