"""Importing OpenHands event streams: messages, tool calls paired with their results, one assistant
message and one usage per model response (however many actions and observations repeat it), file
edits as artifact writes, idempotent re-imports, and bad input refused whole."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from turnlog.importers import import_conversations, import_path
from turnlog.importers.from_openhands import looks_like_openhands, parse_openhands
from turnlog.importers.registry import detect_format
from turnlog.store import (
    ArtifactWritten,
    InvalidEventError,
    MessageAppended,
    SessionStarted,
    SQLiteStore,
    ToolReturned,
    UsageRecorded,
)

STREAM = FIXTURES / "openhands" / "trajectory.json"


def _events() -> list[dict[str, Any]]:
    return json.loads(STREAM.read_text())


def _text(events: list[dict[str, Any]]) -> str:
    return json.dumps(events)


def _stored(store: SQLiteStore, session_id: str) -> list[Any]:
    return [r.event for r in store.read_session(session_id)]


def _import(store: SQLiteStore, events: list[dict[str, Any]] | None = None) -> tuple[str, list[Any]]:
    [conversation] = parse_openhands(_text(events if events is not None else _events()))
    import_conversations(store, [conversation])
    return conversation.session_id, _stored(store, conversation.session_id)


def test_detection() -> None:
    assert detect_format(STREAM) == "openhands"
    assert looks_like_openhands(STREAM.read_text()[:4096])
    assert detect_format(FIXTURES / "openai_chat.json") == "openai"
    assert not looks_like_openhands((FIXTURES / "openai_chat.json").read_text()[:4096])


def test_messages_and_paired_tool_calls(file_store: SQLiteStore) -> None:
    _, events = _import(file_store)
    started = events[0]
    assert isinstance(started, SessionStarted)
    assert (started.model, started.title) == (
        "gpt-4o-2024-08-06",
        "Fix the add function in calc.py: it subtracts.",
    )
    messages = [e for e in events if isinstance(e, MessageAppended)]
    assert [(m.role, [c.id for c in m.tool_calls or ()]) for m in messages] == [
        ("system", []),
        ("user", []),
        ("assistant", ["call_run1"]),
        ("assistant", ["call_edit1", "call_edit2"]),  # one response, two actions: one message
        ("assistant", ["call_run2"]),
        ("assistant", ["call_fin"]),
    ]
    assert messages[2].content == "Let me look at the file first."
    edit = messages[3].tool_calls[0]  # type: ignore[index]
    assert (edit.name, json.loads(edit.arguments)["new_str"]) == ("str_replace_editor", "return a + b")
    returns = [e for e in events if isinstance(e, ToolReturned)]
    # Each result comes once, after its call; the repeated model responses add no message.
    assert [(r.tool_call_id, r.tool_name) for r in returns] == [
        ("call_run1", "execute_bash"),
        ("call_edit1", "str_replace_editor"),
        ("call_edit2", "str_replace_editor"),
        ("call_run2", "execute_bash"),
    ]
    assert returns[0].content == "def add(a, b):\n    return a - b\n"
    position = {id(e): i for i, e in enumerate(events)}
    for result in returns:
        call_at = next(
            i
            for i, e in enumerate(events)
            if isinstance(e, MessageAppended) and any(c.id == result.tool_call_id for c in e.tool_calls or ())
        )
        assert call_at < position[id(result)]
    # Agent state changes and recalls are not conversation.
    assert not any("workspace context" in getattr(e, "content", "") for e in events)


def test_usage_once_per_model_response(file_store: SQLiteStore) -> None:
    _, events = _import(file_store)
    usages = [e for e in events if isinstance(e, UsageRecorded)]
    assert [u.response_id for u in usages] == [
        "chatcmpl-AqK1",
        "chatcmpl-AqK2",
        "chatcmpl-AqK3",
        "chatcmpl-AqK4",
    ]
    assert [u.input_tokens for u in usages] == [3150, 3402, 3790, 3890]
    assert [u.cache_read_tokens for u in usages] == [0, 3072, 3328, 3712]
    assert sum(u.output_tokens for u in usages) == 41 + 188 + 25 + 30
    assert {u.source for u in usages} == {"openhands"}
    ids = {e.event_id: e for e in events}
    for usage in usages:
        message = ids[usage.call_event_id]
        assert isinstance(message, MessageAppended) and message.role == "assistant"
        # The message the response produced holds every call the response made.
        assert usage.response_id in {"chatcmpl-AqK2"} or len(message.tool_calls or ()) == 1
    response_b = next(u for u in usages if u.response_id == "chatcmpl-AqK2")
    assert [c.id for c in ids[response_b.call_event_id].tool_calls] == ["call_edit1", "call_edit2"]


def test_response_repeated_on_observations_is_counted_once(file_store: SQLiteStore) -> None:
    events = _events()
    # Only the observation carries the usage: still one usage for the response.
    events[5]["tool_call_metadata"]["model_response"].pop("usage")
    _, stored = _import(file_store, events)
    usages = [e for e in stored if isinstance(e, UsageRecorded) and e.response_id == "chatcmpl-AqK1"]
    assert [u.input_tokens for u in usages] == [3150]


def test_edits_are_artifact_writes(file_store: SQLiteStore) -> None:
    _, events = _import(file_store)
    artifacts = [e for e in events if isinstance(e, ArtifactWritten)]
    assert [(a.name, a.content, a.tool_call_id) for a in artifacts] == [
        ("/workspace/calc.py", "return a + b", "call_edit1"),
        (
            "/workspace/test_calc.py",
            "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
            "call_edit2",
        ),
    ]


def test_failed_edit_writes_no_artifact(file_store: SQLiteStore) -> None:
    events = _events()
    events[8] = {
        **events[8],
        "observation": "error",
        "content": "No replacement was performed.",
        "extras": {},
    }
    _, stored = _import(file_store, events)
    failed = next(e for e in stored if isinstance(e, ToolReturned) and e.tool_call_id == "call_edit1")
    assert failed.is_error
    assert [a.name for a in stored if isinstance(a, ArtifactWritten)] == ["/workspace/test_calc.py"]


def test_reimport_writes_nothing_and_a_grown_stream_appends_only_the_new(file_store: SQLiteStore) -> None:
    used, first = import_path(file_store, STREAM)
    assert used == "openhands" and first.appended > 0
    assert import_path(file_store, STREAM)[1].appended == 0
    grown = [
        *_events(),
        {
            "id": 15,
            "timestamp": "2025-01-15T10:13:00",
            "source": "user",
            "action": "message",
            "message": "thanks",
            "args": {"content": "Thanks!"},
        },
    ]
    result = import_conversations(file_store, parse_openhands(_text(grown)))
    assert result.appended == 1
    sid = result.sessions[0]["session_id"]
    assert _stored(file_store, sid)[-1].content == "Thanks!"


def _broken(events: list[dict[str, Any]], index: int, change: Any) -> str:
    events = copy.deepcopy(events)
    change(events[index])
    return _text(events)


@pytest.mark.parametrize(
    ("index", "change", "message"),
    [
        (5, lambda e: e.update(source="robot"), r"event \[5\] \(id 5\): source must be"),
        (5, lambda e: e.update(source=["agent"]), r"event \[5\] \(id 5\): source must be"),
        (
            5,
            lambda e: e["tool_call_metadata"]["model_response"]["usage"]["prompt_tokens_details"].update(
                cached_tokens=-1
            ),
            r"prompt_tokens_details.cached_tokens must be a whole number",
        ),
        (
            5,
            lambda e: e["tool_call_metadata"].pop("tool_call_id"),
            r"event \[5\] \(id 5\), tool_call_metadata.tool_call_id",
        ),
        (
            5,
            lambda e: e["tool_call_metadata"]["model_response"]["usage"].update(prompt_tokens="3150"),
            r"event \[5\] \(id 5\), model_response.usage: prompt_tokens must be a whole number",
        ),
        (
            6,
            lambda e: e["tool_call_metadata"].update(tool_call_id="call_nowhere"),
            r"event \[6\] \(id 6\).*answers no tool call",
        ),
        (7, lambda e: e["args"].update(path=None), r"event \[7\] \(id 7\): args.path"),
        (
            1,
            lambda e: e["args"].update(content=["x"]),
            r"event \[1\] \(id 1\): args.content must be a string",
        ),
    ],
)
def test_bad_input_names_the_event_and_the_field_and_writes_nothing(
    file_store: SQLiteStore, index: int, change: Any, message: str
) -> None:
    text = _broken(_events(), index, change)
    with pytest.raises(InvalidEventError, match=message):
        import_path(file_store, text.encode(), "openhands")
    assert file_store.head_position() == 0


def test_not_a_stream_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidEventError, match="expected an OpenHands event stream"):
        parse_openhands('{"history": []}')
    with pytest.raises(InvalidEventError, match=r"malformed JSON"):
        parse_openhands("[{")
    with pytest.raises(InvalidEventError, match=r"event \[0\]: expected an object"):
        parse_openhands("[1]")
