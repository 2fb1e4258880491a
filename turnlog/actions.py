"""Writes that operators and agents make besides appending raw events: pinning, unpinning,
replacing the todo list, forking and rewinding. Each validates its input, then appends one event,
and leaves the store's materialized projections caught up."""

from __future__ import annotations

from collections.abc import Sequence

from turnlog.projections.registry import keep_caught_up
from turnlog.projections.todos import TodoInput, build_todo_list
from turnlog.store import (
    NO_SESSION,
    ForkPoint,
    InvalidEventError,
    MessageAppended,
    MessagePinned,
    MessageUnpinned,
    RecordedEvent,
    SessionRewound,
    SessionStarted,
    Store,
    UnknownEventError,
)
from turnlog.store.events_loop import RewindReason


def pin_message(store: Store, session_id: str, ref: str, reason: str | None = None) -> RecordedEvent:
    """Pin a message (by event id or unique prefix) so every projection keeps it, whole."""
    store.require_session(session_id)
    target = _message(store, session_id, ref)
    keep_caught_up(store)
    [recorded] = store.append(session_id, [MessagePinned(target_event_id=target.event_id, reason=reason)])
    return recorded


def unpin_message(store: Store, session_id: str, ref: str, reason: str | None = None) -> RecordedEvent:
    """Lift a pin (by event id or unique prefix)."""
    store.require_session(session_id)
    target = _message(store, session_id, ref)
    keep_caught_up(store)
    [recorded] = store.append(session_id, [MessageUnpinned(target_event_id=target.event_id, reason=reason)])
    return recorded


def write_todos(store: Store, session_id: str, items: Sequence[TodoInput]) -> RecordedEvent:
    """Replace the session's todo list (built and checked by the one todo-list builder)."""
    todo_list = build_todo_list(items)
    keep_caught_up(store)
    [recorded] = store.append(session_id, [todo_list])
    return recorded


def fork_session(
    store: Store, session_id: str, at_version: int, into: str, *, title: str | None = None
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


def rewind_session(
    store: Store,
    session_id: str,
    to_version: int,
    *,
    reason: RewindReason = "rewind",
    note: str | None = None,
    source: str | None = "cli",
) -> RecordedEvent:
    """Return the session to the state it had at ``to_version`` (0: empty) by appending a
    ``session_rewound``; nothing is deleted, and a later rewind can bring the undone events back.
    Refused unless ``to_version`` is below the session's head version (a rewind to the head would
    undo nothing)."""
    head = store.require_session(session_id)
    if isinstance(to_version, bool) or not isinstance(to_version, int) or not 0 <= to_version < head:
        raise InvalidEventError(
            f"cannot rewind {session_id!r} to version {to_version}: its head is version {head}; give a "
            f"version from 0 to {head - 1} (`turnlog log {session_id}` shows them)"
        )
    keep_caught_up(store)
    rewound = SessionRewound(to_version=to_version, reason=reason, note=note, source=source)
    # expected_version: a concurrent append moves the head, and the rewind must mean what was asked.
    [recorded] = store.append(session_id, [rewound], expected_version=head)
    return recorded


def _message(store: Store, session_id: str, ref: str) -> RecordedEvent:
    record = store.find_event(session_id, ref)
    if not isinstance(record.event, MessageAppended):
        raise UnknownEventError(
            f"event {record.event_id[:12]} is a {record.type}, not a message: only messages can be pinned"
        )
    return record
