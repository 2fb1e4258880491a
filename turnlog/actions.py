"""Writes that operators and agents make besides appending raw events: pinning, unpinning, and
replacing the todo list. Each validates its input, then appends one event, and leaves the store's
materialized projections caught up."""

from __future__ import annotations

from collections.abc import Sequence

from projections.registry import keep_caught_up
from projections.todos import TodoInput, build_todo_list
from store import (
    NO_SESSION,
    ForkPoint,
    InvalidEventError,
    MessageAppended,
    MessagePinned,
    MessageUnpinned,
    RecordedEvent,
    SessionStarted,
    SQLiteStore,
    UnknownEventError,
)


def pin_message(store: SQLiteStore, session_id: str, ref: str, reason: str | None = None) -> RecordedEvent:
    """Pin a message (by event id or unique prefix) so every projection keeps it, whole."""
    store.require_session(session_id)
    target = _message(store, session_id, ref)
    keep_caught_up(store)
    [recorded] = store.append(session_id, [MessagePinned(target_event_id=target.event_id, reason=reason)])
    return recorded


def unpin_message(store: SQLiteStore, session_id: str, ref: str, reason: str | None = None) -> RecordedEvent:
    """Lift a pin (by event id or unique prefix)."""
    store.require_session(session_id)
    target = _message(store, session_id, ref)
    keep_caught_up(store)
    [recorded] = store.append(session_id, [MessageUnpinned(target_event_id=target.event_id, reason=reason)])
    return recorded


def write_todos(store: SQLiteStore, session_id: str, items: Sequence[TodoInput]) -> RecordedEvent:
    """Replace the session's todo list (built and checked by the one todo-list builder)."""
    todo_list = build_todo_list(items)
    keep_caught_up(store)
    [recorded] = store.append(session_id, [todo_list])
    return recorded


def fork_session(
    store: SQLiteStore, session_id: str, at_version: int, into: str, *, title: str | None = None
) -> RecordedEvent:
    """Start ``into`` as a fork of ``session_id`` sharing its history up to ``at_version``. Nothing
    is copied: the fork's ``session_started`` points at the parent and version, and every projection
    of the fork sees that prefix; appends to either never affect the other."""
    head = store.require_session(session_id)
    if not 1 <= at_version <= head:
        raise InvalidEventError(
            f"--at must be a version of {session_id!r} from 1 to {head}, not {at_version}"
        )
    if store.head_version(into) != 0:
        raise InvalidEventError(f"session {into!r} already exists: choose another name for the fork")
    first = store.first_event(session_id)
    model = first.event.model if first is not None and isinstance(first.event, SessionStarted) else None
    started = SessionStarted(
        title=title or f"fork of {session_id} at version {at_version}",
        model=model,
        parent=ForkPoint(session_id=session_id, version=at_version),
    )
    keep_caught_up(store)
    [recorded] = store.append(into, [started], expected_version=NO_SESSION)
    return recorded


def _message(store: SQLiteStore, session_id: str, ref: str) -> RecordedEvent:
    record = store.find_event(session_id, ref)
    if not isinstance(record.event, MessageAppended):
        raise UnknownEventError(
            f"event {record.event_id[:12]} is a {record.type}, not a message: only messages can be pinned"
        )
    return record
