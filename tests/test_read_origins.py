"""read_origins: a session's events as their place and the framework item each carries, without
decoding the events (what the adapters' full reads use)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from turnlog.store import (
    CorruptStoreError,
    ForkPoint,
    InvalidEventError,
    MessageAppended,
    Origin,
    SessionStarted,
    SQLiteStore,
    UsageRecorded,
)
from turnlog.store.rows import event_hash


def _msg(i: int, framework: str | None = "f") -> MessageAppended:
    origin = (
        None if framework is None else Origin(framework=framework, item={"n": i, "nested": [i, {"k": None}]})
    )
    return MessageAppended(role="user", content=f"m{i}", origin=origin)


def test_items_places_and_frameworks_follow_the_log(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "t.db") as store:
        store.append("p", [_msg(1), _msg(2, None), UsageRecorded(model="m", input_tokens=1, output_tokens=1)])
        store.append("p", [_msg(3, "other")])
        store.append("c", [SessionStarted(parent=ForkPoint(session_id="p", version=2)), _msg(4)])
        rows = store.read_origins("c")
        assert [(r.version, r.type, r.framework, r.item) for r in rows] == [
            (1, "message_appended", "f", {"n": 1, "nested": [1, {"k": None}]}),
            (2, "message_appended", None, None),
            (3, "session_started", None, None),
            (4, "message_appended", "f", {"n": 4, "nested": [4, {"k": None}]}),
        ]
        full = store.read_session("c")
        assert [r.position for r in rows] == [r.position for r in full]
        assert store.read_origins("c", newest=3) == rows[-3:]
        assert store.read_origins("c", newest=0) == []
        assert store.read_origins("c", newest=99) == rows
        assert store.read_origins("nobody") == []
        with pytest.raises(InvalidEventError, match="newest"):
            store.read_origins("c", newest=-1)


def test_a_row_that_cannot_be_parsed_names_its_position(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with SQLiteStore.open(path) as store:
        store.append("s", [_msg(1)])
    conn = sqlite3.connect(path, isolation_level=None)
    position, prev = conn.execute(
        "SELECT position, hash FROM events ORDER BY position DESC LIMIT 1"
    ).fetchone()
    payload = '{"role":"user","content":"x","origin":{"framework":"f","item":[unterminated'
    at = "2025-08-01T10:00:00.000000+00:00"
    digest = event_hash(prev, position + 1, "s", 2, "forged", "message_appended", 1, payload, None, at)
    conn.execute(
        "INSERT INTO events (position, session_id, version, event_id, type, schema_version, payload, "
        "blob_id, tokens, recorded_at, prev_hash, hash) VALUES (?, 's', 2, 'forged', 'message_appended', "
        "1, ?, NULL, NULL, ?, ?, ?)",
        (position + 1, payload, at, prev, digest),
    )
    conn.close()
    with SQLiteStore.open(path) as store, pytest.raises(CorruptStoreError, match=f"position {position + 1}"):
        store.read_origins("s")
