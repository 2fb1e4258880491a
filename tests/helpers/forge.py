"""Rows appended to an SQLite store by hand, with valid v2 chains (the session's and the order's):
what an older or buggy writer could have left, so that only their content is bad."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from turnlog.store.chain import GENESIS_HASH, event_hash, order_hash, payload_digest

AT = "2025-08-01T10:00:00.000000+00:00"


def forge_row(
    path: Path,
    session_id: str | bytes,
    event_type: str,
    payload: str | bytes,
    event_id: str = "forged",
    *,
    at: str = AT,
) -> int:
    """Insert one row after the store's last, chained as append would; returns its position. Bytes go
    in as TEXT unchecked (CAST), as a bug or a damaged disk could leave them."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        salt = bytes.fromhex(conn.execute("SELECT value FROM turnlog_meta WHERE key = 'salt'").fetchone()[0])
        last = conn.execute(
            "SELECT position, order_hash FROM events ORDER BY position DESC LIMIT 1"
        ).fetchone()
        position, order = (last[0], last[1]) if last else (0, GENESIS_HASH)
        position += 1
        sid_text = (
            session_id if isinstance(session_id, str) else session_id.decode("utf-8", "surrogateescape")
        )
        head = conn.execute(
            "SELECT version, hash FROM events WHERE session_id = CAST(? AS TEXT) "
            "ORDER BY version DESC LIMIT 1",
            (session_id,),
        ).fetchone()
        version, prev = (head[0] + 1, head[1]) if head else (1, GENESIS_HASH)
        text = payload if isinstance(payload, str) else payload.decode("utf-8", "surrogateescape")
        digest = payload_digest(salt, text)
        this = event_hash(sid_text, version, prev, event_id, event_type, 1, digest, None, at)
        conn.execute(
            "INSERT INTO events (position, session_id, version, event_id, type, schema_version, payload, "
            "blob_id, tokens, recorded_at, prev_hash, hash, payload_digest, order_hash) "
            "VALUES (?, CAST(? AS TEXT), ?, ?, ?, 1, CAST(? AS TEXT), NULL, NULL, ?, ?, ?, ?, ?)",
            (position, session_id, version, event_id, event_type, payload, at, prev, this, digest,
             order_hash(order, position, this)),
        )  # fmt: skip
    finally:
        conn.close()
    return int(position)
