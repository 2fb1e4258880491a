"""state_recorded: a framework's opaque state stored like artifact content, once by content."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from turnlog.store import InvalidEventError, SQLiteStore, StateRecorded


def _state(content: str, **fields: object) -> StateRecorded:
    return StateRecorded(
        framework="langgraph", namespace="", key="k", media_type="application/json", content=content, **fields
    )  # type: ignore[arg-type]


def test_a_big_checkpoint_is_stored_once_and_read_back(tmp_path: Path) -> None:
    content = '{"channel_values": {"messages": [' + ",".join(f'"m{i}"' for i in range(20_000)) + "]}}"
    with SQLiteStore.open(tmp_path / "s.db") as s:
        first = s.append("a", [_state(content)])[0].event
        s.append("b", [_state(content, metadata={"step": 2})])
        assert isinstance(first, StateRecorded)
        assert first.state_id == hashlib.sha256(content.encode()).hexdigest()
        assert first.size == len(content.encode())
        assert s.conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 1
        payload = s.conn.execute("SELECT payload FROM events WHERE type = 'state_recorded'").fetchone()[0]
        assert len(payload) < 500  # the content is in the blob, not in the payload
        assert [r.event for r in s.read_session("a")] == [first]
        assert s.verify().ok


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"state_id": "0" * 64}, "state_id .* is not the sha256"), ({"size": 3}, "size 3 does not match")],
)
def test_wrong_filled_fields_are_refused(fields: dict[str, object], message: str) -> None:
    with SQLiteStore.open(":memory:") as s:
        with pytest.raises(InvalidEventError, match=message):
            s.append("a", [_state("{}", **fields)])
        assert s.head_position() == 0
        # Right values given are accepted.
        s.append("a", [_state("{}", state_id=hashlib.sha256(b"{}").hexdigest(), size=2)])
