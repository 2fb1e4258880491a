"""Writes that operators and agents make besides appending raw events: pinning, unpinning, and
replacing the todo list. Each validates its input, then appends one event."""

from __future__ import annotations

from collections.abc import Sequence

from projections.todos import TodoInput, build_todo_list
from store import (
    MessageAppended,
    MessagePinned,
    MessageUnpinned,
    RecordedEvent,
    SQLiteStore,
    UnknownEventError,
)


def pin_message(store: SQLiteStore, session_id: str, ref: str, reason: str | None = None) -> RecordedEvent:
    """Pin a message (by event id or unique prefix) so every projection keeps it, whole."""
    store.require_session(session_id)
    target = _message(store, session_id, ref)
    [recorded] = store.append(session_id, [MessagePinned(target_event_id=target.event_id, reason=reason)])
    return recorded


def unpin_message(store: SQLiteStore, session_id: str, ref: str, reason: str | None = None) -> RecordedEvent:
    """Lift a pin (by event id or unique prefix)."""
    store.require_session(session_id)
    target = _message(store, session_id, ref)
    [recorded] = store.append(session_id, [MessageUnpinned(target_event_id=target.event_id, reason=reason)])
    return recorded


def write_todos(store: SQLiteStore, session_id: str, items: Sequence[TodoInput]) -> RecordedEvent:
    """Replace the session's todo list (built and checked by the one todo-list builder)."""
    [recorded] = store.append(session_id, [build_todo_list(items)])
    return recorded


def _message(store: SQLiteStore, session_id: str, ref: str) -> RecordedEvent:
    record = store.find_event(session_id, ref)
    if not isinstance(record.event, MessageAppended):
        raise UnknownEventError(
            f"event {record.event_id[:12]} is a {record.type}, not a message: only messages can be pinned"
        )
    return record
