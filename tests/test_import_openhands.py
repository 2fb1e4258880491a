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


PLAIN = FIXTURES / "openhands" / "plain_replies.json"
R1 = (5210, 62, 0, 5100)
R2 = (5480, 48, 5100, 310)
R3 = (5630, 95, 5410, 150)


def _plain() -> list[dict[str, Any]]:
    return json.loads(PLAIN.read_text())


def _counts(usage: UsageRecorded) -> tuple[int, int, int, int]:
    return (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)


def _message_of(events: list[Any], usage: UsageRecorded) -> MessageAppended:
    message = next(e for e in events if e.event_id == usage.call_event_id)
    assert isinstance(message, MessageAppended) and message.role == "assistant"
    return message


def test_plain_replies_take_their_usage_from_llm_metrics_once_per_response(file_store: SQLiteStore) -> None:
    _, events = _import(file_store, _plain())
    usages = [e for e in events if isinstance(e, UsageRecorded)]
    # Every snapshot repeats the earlier responses; chatcmpl-P2 is also the tool call's response.
    assert [u.response_id for u in usages] == ["chatcmpl-P1", "chatcmpl-P2", "chatcmpl-P3"]
    assert [_counts(u) for u in usages] == [R1, R2, R3]
    assert [_message_of(events, u).content for u in usages] == [
        "It retries the wrapped call up to three times, doubling the delay after each failure.",
        "I'll run them.",
        "All four retry tests pass.",
    ]
    assert [bool(_message_of(events, u).tool_calls) for u in usages] == [False, True, False]
    # A cost is the change of accumulated_cost when it is one response's alone.
    assert [u.cost_usd for u in usages] == [pytest.approx(0.02019), None, pytest.approx(0.005475)]
    assert {u.model for u in usages} == {"claude-sonnet-4-20250514"}


def test_accumulated_totals_alone_give_each_reply_the_change_since_the_last(file_store: SQLiteStore) -> None:
    # Later OpenHands releases write only the running totals (no token_usages).
    events = _plain()
    for event in events:
        if "llm_metrics" in event:
            event["llm_metrics"]["token_usages"] = []
    _, stored = _import(file_store, events)
    usages = [e for e in stored if isinstance(e, UsageRecorded)]
    assert [_counts(u) for u in usages] == [R1, R2, R3]
    assert [u.response_id for u in usages] == [None, "chatcmpl-P2", None]
    assert [_message_of(stored, u).content[:9] for u in usages] == ["It retrie", "I'll run ", "All four "]


def test_a_tool_call_response_without_usage_takes_its_metrics_entry(file_store: SQLiteStore) -> None:
    events = _plain()
    for index in (4, 5):
        events[index]["tool_call_metadata"]["model_response"] = {
            k: v for k, v in events[index]["tool_call_metadata"]["model_response"].items() if k != "usage"
        }
    _, stored = _import(file_store, events)
    usages = [e for e in stored if isinstance(e, UsageRecorded)]
    assert [(u.response_id, _counts(u)) for u in usages] == [
        ("chatcmpl-P1", R1),
        ("chatcmpl-P2", R2),
        ("chatcmpl-P3", R3),
    ]
    assert _message_of(stored, usages[1]).tool_calls


def test_plain_replies_reimport_writes_nothing(file_store: SQLiteStore, tmp_path: Path) -> None:
    path = tmp_path / "plain.json"
    path.write_text(PLAIN.read_text())
    assert import_path(file_store, path)[1].appended == 11
    assert import_path(file_store, path)[1].appended == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m.update(token_usages={}), r"\(id 2\), llm_metrics.token_usages: must be a list"),
        (
            lambda m: m["token_usages"][0].update(completion_tokens=-3),
            r"event \[2\] \(id 2\), llm_metrics.token_usages\[0\]: completion_tokens must be a whole number",
        ),
        (
            lambda m: m["accumulated_token_usage"].update(prompt_tokens=1.5),
            r"llm_metrics.accumulated_token_usage: prompt_tokens must be a whole number",
        ),
        (lambda m: m.update(accumulated_cost="0.02"), r"llm_metrics.accumulated_cost: must be a cost"),
    ],
)
def test_bad_llm_metrics_name_the_event_and_field(file_store: SQLiteStore, change: Any, message: str) -> None:
    events = _plain()
    change(events[2]["llm_metrics"])
    with pytest.raises(InvalidEventError, match=message):
        import_path(file_store, _text(events).encode(), "openhands")
    assert file_store.head_position() == 0


def _file_store(root: Path, sid: str, events: list[dict[str, Any]]) -> Path:
    folder = root / "sessions" / sid / "events"
    folder.mkdir(parents=True)
    for event in events:
        (folder / f"{event['id']}.json").write_text(json.dumps(event))
    return root


def test_a_file_store_imports_each_session_under_its_id(file_store: SQLiteStore, tmp_path: Path) -> None:
    root = _file_store(tmp_path / "file_store", "a1b2c3", _plain())
    _file_store(tmp_path / "file_store", "d4e5f6", _events())
    assert detect_format(root) == "openhands"
    assert detect_format(root / "sessions" / "a1b2c3") == "openhands"
    used, result = import_path(file_store, root)
    assert used == "openhands"
    assert [s["session_id"] for s in result.sessions] == ["a1b2c3", "d4e5f6"]
    # The same conversation as the saved trajectory: events read in the order of their numbers.
    [from_file] = parse_openhands(PLAIN.read_text(), session="a1b2c3")
    stored = _stored(file_store, "a1b2c3")
    assert [type(e).__name__ for e in stored] == [type(e).__name__ for e in from_file.events]
    assert [e.event_id for e in stored] == [e.event_id for e in from_file.events]
    assert import_path(file_store, root / "sessions" / "a1b2c3" / "events")[1].appended == 0


def test_a_file_store_grows_and_errors_name_the_event_file(file_store: SQLiteStore, tmp_path: Path) -> None:
    events = _plain()
    root = _file_store(tmp_path / "fs", "s1", events[:4])
    assert import_path(file_store, root)[1].appended > 0
    folder = root / "sessions" / "s1" / "events"
    for event in events[4:]:
        (folder / f"{event['id']}.json").write_text(json.dumps(event))
    grown = import_path(file_store, root)[1]
    assert grown.sessions[0]["skipped"] > 0 and grown.appended > 0
    (folder / "8.json").write_text('{"id": 8, "source": "agent"}')
    head = file_store.head_position()
    with pytest.raises(InvalidEventError, match=r"8\.json.*either an 'action' or an 'observation'"):
        import_path(file_store, root)
    assert file_store.head_position() == head
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InvalidEventError, match="no OpenHands events in it"):
        import_path(file_store, empty, "openhands")


@pytest.mark.parametrize("accumulated_only", [False, True])
def test_a_reply_first_counted_by_a_later_snapshot_gets_its_usage_once(
    file_store: SQLiteStore, accumulated_only: bool
) -> None:
    # The reply's own event has no llm_metrics: the tool call's snapshot is the first to count it.
    events = _plain()
    del events[2]["llm_metrics"]
    if accumulated_only:
        for event in events:
            if "llm_metrics" in event:
                event["llm_metrics"]["token_usages"] = []
    _, stored = _import(file_store, events)
    usages = [e for e in stored if isinstance(e, UsageRecorded)]
    assert sorted(_counts(u) for u in usages) == sorted([R1, R2, R3])
    by_message = [_message_of(stored, u).content[:9] for u in usages]
    assert sorted(by_message) == sorted(["It retrie", "I'll run ", "All four "])
    # The reply's usage comes after the tool call's message it was written with, never on it.
    reply = next(u for u in usages if _counts(u) == R1)
    assert not _message_of(stored, reply).tool_calls
