"""read_origins: a session's events as their place and the framework item each carries, without
decoding the events (what the adapters' full reads use)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.forge import forge_row
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
    payload = '{"role":"user","content":"x","origin":{"framework":"f","item":[unterminated'
    position = forge_row(path, "s", "message_appended", payload) - 1
    with SQLiteStore.open(path) as store, pytest.raises(CorruptStoreError, match=f"position {position + 1}"):
        store.read_origins("s")
