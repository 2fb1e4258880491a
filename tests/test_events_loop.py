"""The agent-loop event models (store/events_loop.py): their shape, and that the optional ``origin``
changes nothing stored for an event without it (hashes computed with the code before it existed)."""

from __future__ import annotations

import pytest

from turnlog.store import (
    EVENT_CLASSES,
    InvalidEventError,
    MessageAppended,
    MessageRemoved,
    Origin,
    SessionRewound,
    SQLiteStore,
    StateRecorded,
    ToolCall,
    ToolReturned,
    parse_event,
)
from turnlog.store.chain import event_hash_v1
from turnlog.store.events import dump_payload, load_stored

_AT = ["2026-01-01T00:00:00.000000Z"] * 2
# Computed by the store of commit 0a74d56 (before ``origin`` existed) for the two events below.
_HASHES_BEFORE_ORIGIN = [
    "5fbd30319bd4ea14e2e8c33ce94cd8300bddac9e1aadd8337337bc0e9606c5b9",
    "46088e12236e1e836bbbe9ad3ab030f7c56e9357ab0a7e75c1e6cbb01c1be135",
]


def _pair(origin: Origin | None = None) -> list[MessageAppended | ToolReturned]:
    call = ToolCall(id="c", name="f")
    return [
        MessageAppended(event_id="m1", role="assistant", content="hi", tool_calls=(call,), origin=origin),
        ToolReturned(event_id="t1", tool_call_id="c", content="out", origin=origin),
    ]


def _v1_hashes(s: SQLiteStore) -> list[str]:
    """The stored rows hashed as the v1 chain did (their payload text and every column)."""
    hashes, prev = [], "0" * 64
    for row in s.conn.execute(
        "SELECT position, session_id, version, event_id, type, schema_version, payload, blob_id, recorded_at "
        "FROM events ORDER BY position"
    ):
        prev = event_hash_v1(prev, *row)
        hashes.append(prev)
    return hashes


def test_an_event_without_origin_is_stored_and_hashed_as_before() -> None:
    with SQLiteStore.open(":memory:") as s:
        s.append("s", _pair(), recorded_at=_AT)
        assert _v1_hashes(s) == _HASHES_BEFORE_ORIGIN
        payloads = [row[0] for row in s.conn.execute("SELECT payload FROM events ORDER BY position")]
        assert all("origin" not in p for p in payloads)
    with SQLiteStore.open(":memory:") as s:  # the check can fail: an origin changes the hash
        s.append("s", _pair(Origin(framework="x", item=None)), recorded_at=_AT)
        assert _v1_hashes(s) != _HASHES_BEFORE_ORIGIN


def test_origin_round_trips_verbatim() -> None:
    item = {"type": "function_call_output", "call_id": "c", "output": "out", "status": None, "x": [1.5, {}]}
    for origin in (Origin(framework="openai-agents", item=item), Origin(framework="f", item=None)):
        with SQLiteStore.open(":memory:") as s:
            stored = [r.event for r in s.append("s", _pair(origin))]
            assert [r.event for r in s.read_session("s")] == stored
            assert all(e.origin == origin for e in stored)
        for event in _pair(origin):
            assert load_stored(event.type, 1, event.event_id, dump_payload(event)) == event


def test_origin_json_depth_is_bounded() -> None:
    deep: object = 1
    for _ in range(200):
        deep = [deep]
    with pytest.raises(InvalidEventError, match=r"origin\.item: .*nested more than 128"):
        parse_event({"type": "message_appended", "role": "user", "origin": {"framework": "f", "item": deep}})
    with pytest.raises(InvalidEventError, match=r"origin\.extra: unknown field"):
        parse_event(
            {
                "type": "tool_returned",
                "tool_call_id": "c",
                "content": "",
                "origin": {"framework": "f", "extra": 1},
            }
        )


def test_the_new_types_are_in_the_union() -> None:
    assert {"session_rewound", "message_removed", "state_recorded"} <= set(EVENT_CLASSES)
    assert isinstance(parse_event({"type": "session_rewound", "to_version": 0}), SessionRewound)
    assert isinstance(parse_event({"type": "message_removed", "target_event_ids": ["a"]}), MessageRemoved)
    state = {
        "type": "state_recorded",
        "framework": "lg",
        "namespace": "",
        "key": "k",
        "media_type": "a/b",
        "content": "{}",
    }
    assert isinstance(parse_event(state), StateRecorded)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"type": "session_rewound", "to_version": -1}, "to_version"),
        ({"type": "session_rewound", "to_version": 2**63}, "to_version"),
        ({"type": "session_rewound", "to_version": 1, "reason": "undo"}, "reason"),
        ({"type": "message_removed", "target_event_ids": []}, "target_event_ids"),
        ({"type": "message_removed", "target_event_ids": ["a", "a"]}, "each event id may be named once"),
        ({"type": "message_removed", "target_event_ids": [f"e{i}" for i in range(1001)]}, "target_event_ids"),
        ({"type": "message_removed", "target_event_ids": ["has space"]}, "target_event_ids"),
        (
            {
                "type": "state_recorded",
                "framework": "lg",
                "namespace": "",
                "key": "",
                "media_type": "a",
                "content": "",
            },
            "key",
        ),
        (
            {
                "type": "state_recorded",
                "framework": "lg",
                "namespace": "",
                "key": "k",
                "media_type": "a",
                "content": "",
                "size": -1,
            },
            "size",
        ),
        (
            {
                "type": "state_recorded",
                "framework": "lg",
                "namespace": "",
                "key": "k",
                "media_type": "a",
                "content": "",
                "state_id": "x",
            },
            "state_id",
        ),
    ],
)
def test_bad_new_events_are_refused_naming_the_field(data: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidEventError, match=message):
        parse_event(data)


def test_the_new_models_are_exported_by_turnlog_too() -> None:
    import turnlog

    for name in ("SessionRewound", "MessageRemoved", "StateRecorded", "Origin"):
        assert name in turnlog.__all__ and getattr(turnlog, name).__module__ == "turnlog.store.events_loop"
