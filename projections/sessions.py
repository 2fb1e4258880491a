"""The list of sessions, read from the sessions projection (its writer is projections.sessions_projection):
one row per session with its counts, title, model, fork point and activity, as of now or of any
earlier position. Loads neither the event models nor the materializer until a read needs them, so
``turnlog sessions`` starts at once on a store whose projections are caught up."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from turnlog.projections.live_ranges import LIVE_PROJECTION, LIVE_VERSION, dead_ranges
from turnlog.store.dialect import Connection
from turnlog.store.errors import StoreError

if TYPE_CHECKING:
    from turnlog.store import ForkPoint, Store
    from turnlog.store.sqlite_quick import QuickView


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One session, as of the position it was read at."""

    session_id: str
    """The session's id."""
    head_version: int
    """Its last version (a fork's own versions continue after its parent's fork version)."""
    event_count: int
    """Events of the session."""
    system_messages: int
    """Live ``message_appended`` events with role system (rewound or removed ones do not count)."""
    user_messages: int
    """Live ``message_appended`` events with role user."""
    assistant_messages: int
    """Live ``message_appended`` events with role assistant."""
    tool_calls: int
    """Tool calls requested by its live assistant messages."""
    tool_returns: int
    """Live ``tool_returned`` events."""
    tokens: int
    """Sum of the stored token counts of its events."""
    title: str | None
    """The title its ``session_started`` gave, if any."""
    model: str | None
    """The model its ``session_started`` named, if any."""
    parent: ForkPoint | None
    """For a fork: the parent session and the last parent version it shares."""
    first_position: int
    """Global position of its first event."""
    last_position: int
    """Global position of its last event."""
    first_recorded_at: str
    """When its first event was recorded (UTC, ISO 8601)."""
    last_recorded_at: str
    """When its last event was recorded."""


SESSIONS_PROJECTION = "sessions"
"""The projection's name (its checkpoint's key); its writer is projections.sessions_projection."""
SESSIONS_VERSION = 2
"""The projection's version: bump it when its tables or its logic change."""

COUNTERS = (
    "version",
    "system_messages",
    "user_messages",
    "assistant_messages",
    "tool_calls",
    "tool_returns",
    "tokens",
)
"""The counters kept cumulatively, in column order (both tables hold them under these names)."""


_STATIC = (
    "s.session_id, s.title, s.model, s.parent_session_id, s.parent_version, s.first_position, "
    "s.first_recorded_at"
)


class _Reader(Protocol):
    """What the listing reads through: a store, or a quick view of a store file."""

    def reading(self) -> AbstractContextManager[Any]: ...
    def head_position(self) -> int: ...


class _NeedsContextIndex(Exception):
    """A quick listing met undone messages, whose counts need the context index's rows."""


def list_sessions(store: Store, at: int | None = None) -> list[SessionInfo]:
    """Every session, in the order they began, as of global position ``at`` (None: now).

    ``at=None`` reads the materialized ``sess_sessions`` rows: one row per session. With ``at``, each
    session that began at or before it gets its counters from its last ``sess_history`` row at or
    before ``at``: one seek on the ``(session_id, position)`` key per session, so the cost is
    O(S·log N) for S sessions and N events, whatever the sessions' lengths; no event is read.
    """
    _check_at(at)
    from turnlog.projections.registry import materializer  # here: the registry imports the writer

    materializer(store).catch_up()
    return _listing(store, at, quick=False)


def quick_sessions(view: QuickView, at: int | None = None) -> list[SessionInfo] | None:
    """:func:`list_sessions` read from a quick view of a store file, without the materializer; None
    when the file's rows cannot give it as they stand (the projections it reads are behind, or a
    session has undone messages: then the full store lists them)."""
    _check_at(at)
    if not (
        view.current(SESSIONS_PROJECTION, SESSIONS_VERSION) and view.current(LIVE_PROJECTION, LIVE_VERSION)
    ):
        return None
    try:
        return _listing(view, at, quick=True)
    except _NeedsContextIndex:
        return None


def _check_at(at: int | None) -> None:
    if at is not None and (isinstance(at, bool) or not isinstance(at, int) or at < 0):
        raise StoreError(f"at must be a log position (an integer >= 0), not {at!r}")


def _listing(store: _Reader, at: int | None, *, quick: bool) -> list[SessionInfo]:
    counters = ", ".join(f"h.{name}" for name in COUNTERS)
    with store.reading() as conn:
        if at is None:
            rows = conn.execute(
                f"SELECT {_STATIC}, {counters.replace('h.', 's.')}, s.last_position, s.last_recorded_at "
                "FROM sess_sessions s ORDER BY s.first_position"
            ).fetchall()
        else:
            rows = conn.execute(
                f"SELECT {_STATIC}, {counters}, h.position, h.recorded_at "
                "FROM sess_sessions s JOIN sess_history h ON h.session_id = s.session_id "
                "AND h.position = (SELECT position FROM sess_history WHERE session_id = s.session_id "
                "AND position <= ? ORDER BY position DESC LIMIT 1) "
                "WHERE s.first_position <= ? ORDER BY s.first_position",
                (at, at),
            ).fetchall()
        through = store.head_position() if at is None else at
        rows = [_live_counts(conn, row, through, quick) for row in rows]
    return [_info(row) for row in rows]


def _live_counts(conn: Connection, row: tuple[Any, ...], at: int, quick: bool) -> tuple[Any, ...]:
    """The row with its message counters counting live messages only: those of each of its own
    ranges that a rewind or a removal took out are subtracted (work for what was undone only)."""
    sid, parent_version = row[0], row[4] or 0
    dead = [(max(lo, parent_version + 1), hi) for lo, hi in dead_ranges(conn, sid, at) if hi > parent_version]
    if not dead:
        return row
    if quick:
        raise _NeedsContextIndex(sid)
    counts = list(row[7:14])  # version, system, user, assistant, tool calls, tool returns, tokens
    roles = {"system": 1, "user": 2, "assistant": 3, "tool": 5}
    for lo, hi in dead:
        for role, n, calls in conn.execute(
            "SELECT role, count(*), CAST(sum(n_calls) AS BIGINT) FROM ctx_messages WHERE session_id = ? "
            "AND version BETWEEN ? AND ? GROUP BY role",
            (sid, lo, hi),
        ):
            counts[roles[role]] -= n
            counts[4] -= calls or 0
    return (*row[:7], *counts, *row[14:])


def _info(row: tuple[Any, ...]) -> SessionInfo:
    sid, title, model, parent_sid, parent_version, first_position, first_at = row[:7]
    version, system, user, assistant, calls, returns, tokens, last_position, last_at = row[7:]
    parent = None
    if parent_sid is not None:  # only a fork loads the event models
        from turnlog.store import ForkPoint

        parent = ForkPoint(session_id=parent_sid, version=parent_version)
    return SessionInfo(
        session_id=sid,
        head_version=version,
        event_count=version - (parent_version or 0),
        system_messages=system,
        user_messages=user,
        assistant_messages=assistant,
        tool_calls=calls,
        tool_returns=returns,
        tokens=tokens,
        title=title,
        model=model,
        parent=parent,
        first_position=first_position,
        last_position=last_position,
        first_recorded_at=first_at,
        last_recorded_at=last_at,
    )
