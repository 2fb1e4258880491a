"""Re-importing a file that the previous release imported. That release stored usage_recorded with
schema 1 (no call_event_id, scope, source...), and an imported event's id derives from its content,
so this release gives those usage events other ids: the session is recognised as this file's import
all the same, nothing is written twice, and what the file has gained since is appended."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from turnlog.importers import Conversation, import_conversations, import_path, prepare_import
from turnlog.store import Event, MessageAppended, SQLiteStore, UsageRecorded
from turnlog.store.errors import DuplicateEventError

_V1_FIELDS = (
    "model",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "run_id",
    "response_id",
)


def _v1_id(session_id: str, index: int, usage: UsageRecorded) -> str:
    """The id the previous release (42bf099) derived for a usage event: the hash of the session, the
    index and the schema-1 JSON. Checked against stores that release wrote from the fixtures below."""
    body = {"type": "usage_recorded", "schema_version": 1, **{f: getattr(usage, f) for f in _V1_FIELDS}}
    content = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{session_id}\0{index}\0{content}".encode()).hexdigest()[:32]


def _as_earlier_release(conversation: Conversation, count: int | None = None) -> Conversation:
    """The first ``count`` events as the previous release imported them."""
    events: list[Event] = []
    for index, event in enumerate(conversation.events[:count]):
        if isinstance(event, UsageRecorded):
            old = UsageRecorded(**{f: getattr(event, f) for f in _V1_FIELDS}, event_id="x")
            event = old.model_copy(update={"event_id": _v1_id(conversation.session_id, index, old)})
        events.append(event)
    return Conversation(conversation.session_id, tuple(events))


def _read(path: Path, fmt: str) -> Conversation:
    [conversation] = prepare_import(path, fmt)[1]
    return conversation


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("openai_chat.json", "openai"),
        ("pydantic_ai_coding_run.json", "pydantic-ai"),
        ("pydantic_ai_legacy_v0.json", "pydantic-ai"),
    ],
)
def test_reimporting_an_earlier_release_import_writes_nothing(
    file_store: SQLiteStore, name: str, fmt: str
) -> None:
    conversation = _read(FIXTURES / name, fmt)
    old = _as_earlier_release(conversation)
    assert [e.event_id for e in old.events] != [e.event_id for e in conversation.events]
    import_conversations(file_store, [old])
    head = file_store.head_position()
    result = import_path(file_store, FIXTURES / name, fmt)[1]
    assert result.sessions == [
        {
            "session_id": conversation.session_id,
            "events": len(conversation.events),
            "appended": 0,
            "skipped": len(conversation.events),
        }
    ]
    assert file_store.head_position() == head


def test_a_grown_file_appends_only_the_new_events_after_the_stored_ones(
    file_store: SQLiteStore,
) -> None:
    conversation = _read(FIXTURES / "pydantic_ai_coding_run.json", "pydantic-ai")
    usages = [i for i, e in enumerate(conversation.events) if isinstance(e, UsageRecorded)]
    cut = usages[1]  # stored up to the message of the second response, its usage still to come
    import_conversations(file_store, [_as_earlier_release(conversation, cut)])
    result = import_path(file_store, FIXTURES / "pydantic_ai_coding_run.json", "pydantic-ai")[1]
    assert (result.sessions[0]["appended"], result.sessions[0]["skipped"]) == (
        len(conversation.events) - cut,
        cut,
    )
    stored = [r.event for r in file_store.read_session(conversation.session_id)]
    assert len(stored) == len(conversation.events)
    first_new = stored[cut]
    assert isinstance(first_new, UsageRecorded) and first_new.source == "pydantic-ai"
    called = next(e for e in stored if e.event_id == first_new.call_event_id)
    assert isinstance(called, MessageAppended) and called.role == "assistant"
    assert stored.index(called) < cut  # the message the earlier release stored
    # The usage the earlier release stored stays as it was (schema-1 fields at their defaults).
    assert [(u.source, u.call_event_id) for u in stored[:cut] if isinstance(u, UsageRecorded)] == [
        (None, None)
    ]
    assert import_path(file_store, FIXTURES / "pydantic_ai_coding_run.json", "pydantic-ai")[1].appended == 0


def test_a_session_that_is_not_this_files_import_is_still_refused(file_store: SQLiteStore) -> None:
    conversation = _read(FIXTURES / "openai_chat.json", "openai")
    old = _as_earlier_release(conversation)
    usage_at = next(i for i, e in enumerate(old.events) if isinstance(e, UsageRecorded))
    usage = old.events[usage_at]
    assert isinstance(usage, UsageRecorded)
    # Other token counts: another conversation under the same name, not an earlier import of it.
    other = usage.model_copy(update={"input_tokens": usage.input_tokens + 1, "event_id": "other-usage"})
    events = (*old.events[:usage_at], other, *old.events[usage_at + 1 :])
    import_conversations(file_store, [Conversation(old.session_id, events)])
    head = file_store.head_position()
    with pytest.raises(DuplicateEventError, match="already exists and was not imported from this file"):
        import_path(file_store, FIXTURES / "openai_chat.json", "openai")
    assert file_store.head_position() == head
