"""The sessions projection: one row per session with its counts, title, model, fork point and activity,
plus a cumulative row per event so the same listing can be read as of any earlier position."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from turnlog.projections.live_index import dead_ranges
from turnlog.projections.materialize import Projection
from turnlog.store import (
    ForkPoint,
    MessageAppended,
    RecordedEvent,
    SessionStarted,
    Store,
    StoreError,
    ToolReturned,
)
from turnlog.store.dialect import Connection, dialect_of


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


# The counters kept cumulatively, in column order (both tables hold them under these names).
_COUNTERS = (
    "version",
    "system_messages",
    "user_messages",
    "assistant_messages",
    "tool_calls",
    "tool_returns",
    "tokens",
)


@dataclass(slots=True)
class _State:
    counters: list[int]
    last_position: int
    last_recorded_at: str
    new: bool
    """Not in sess_sessions yet: inserted whole, with its static columns."""
    title: str | None = None
    model: str | None = None
    parent_session_id: str | None = None
    parent_version: int | None = None
    first_position: int = 0
    first_recorded_at: str = ""


class SessionsProjection(Projection):
    """Per session: its current counters (``sess_sessions``) and their value after each of its events
    (``sess_history``, keyed by position, which is what makes "as of a position" one index seek)."""

    name: ClassVar[str] = "sessions"
    version: ClassVar[int] = 2
    tables: ClassVar[tuple[str, ...]] = ("sess_sessions", "sess_history")
    types: ClassVar[tuple[str, ...] | None] = None  # every event counts towards the totals

    def create(self, conn: Connection, schema: str = "main") -> None:
        dialect_of(conn).create(
            conn,
            """
            CREATE TABLE {schema}.sess_sessions (
                session_id TEXT PRIMARY KEY,
                title TEXT,
                model TEXT,
                parent_session_id TEXT,          -- fork point, from session_started
                parent_version INTEGER,
                first_position INTEGER NOT NULL,
                first_recorded_at TEXT NOT NULL,
                version INTEGER NOT NULL,        -- head version = number of events
                system_messages INTEGER NOT NULL,
                user_messages INTEGER NOT NULL,
                assistant_messages INTEGER NOT NULL,
                tool_calls INTEGER NOT NULL,
                tool_returns INTEGER NOT NULL,
                tokens INTEGER NOT NULL,
                last_position INTEGER NOT NULL,
                last_recorded_at TEXT NOT NULL
            );
            CREATE INDEX sess_sessions_first
                ON {schema}.sess_sessions (first_position);
            CREATE TABLE {schema}.sess_history (
                session_id TEXT NOT NULL,
                position INTEGER NOT NULL,       -- the event's global position
                recorded_at TEXT NOT NULL,
                version INTEGER NOT NULL,        -- counters as they are after this event
                system_messages INTEGER NOT NULL,
                user_messages INTEGER NOT NULL,
                assistant_messages INTEGER NOT NULL,
                tool_calls INTEGER NOT NULL,
                tool_returns INTEGER NOT NULL,
                tokens INTEGER NOT NULL,
                PRIMARY KEY (session_id, position)
            )
            """,
            schema,
        )

    def apply(self, conn: Connection, records: Sequence[RecordedEvent]) -> None:
        self.apply_remembering(conn, records, {})

    def apply_remembering(
        self, conn: Connection, records: Sequence[RecordedEvent], memo: dict[str, _State]
    ) -> None:
        """The memo: each session's sess_sessions row."""
        states: dict[str, _State] = {}  # the sessions of these records
        history: list[tuple[object, ...]] = []
        for record in records:
            sid = record.session_id
            st = states.get(sid) or memo.get(sid)
            if st is None:
                st = _load(conn, sid) or _State(
                    [0] * len(_COUNTERS),
                    0,
                    "",
                    new=True,
                    first_position=record.position,
                    first_recorded_at=record.recorded_at,
                )
            states[sid] = st
            event = record.event
            c = st.counters
            c[0] = record.version
            if isinstance(event, MessageAppended):
                c[1 + ("system", "user", "assistant").index(event.role)] += 1
                c[4] += len(event.tool_calls or ())
            elif isinstance(event, ToolReturned):
                c[5] += 1
            elif isinstance(event, SessionStarted):
                st.title, st.model = event.title, event.model
                if event.parent is not None:
                    st.parent_session_id = event.parent.session_id
                    st.parent_version = event.parent.version
            c[6] += record.tokens or 0
            st.last_position = record.position
            st.last_recorded_at = record.recorded_at
            history.append((sid, record.position, record.recorded_at, *c))
        conn.executemany(
            f"INSERT INTO sess_history (session_id, position, recorded_at, {', '.join(_COUNTERS)}) "
            f"VALUES ({', '.join('?' * (3 + len(_COUNTERS)))})",
            history,
        )
        for sid, st in states.items():
            memo[sid] = st
            if st.new:
                st.new = False
                conn.execute(
                    "INSERT INTO sess_sessions (session_id, title, model, parent_session_id, "
                    "parent_version, first_position, first_recorded_at, "
                    f"{', '.join(_COUNTERS)}, last_position, last_recorded_at) "
                    f"VALUES ({', '.join('?' * (9 + len(_COUNTERS)))})",
                    (sid, st.title, st.model, st.parent_session_id, st.parent_version,
                     st.first_position, st.first_recorded_at, *st.counters,
                     st.last_position, st.last_recorded_at),
                )  # fmt: skip
            else:
                # session_started is always version 1, so an existing row's static columns are final.
                conn.execute(
                    f"UPDATE sess_sessions SET {', '.join(f'{name} = ?' for name in _COUNTERS)}, "
                    "last_position = ?, last_recorded_at = ? WHERE session_id = ?",
                    (*st.counters, st.last_position, st.last_recorded_at, sid),
                )


def _load(conn: Connection, sid: str) -> _State | None:
    row = conn.execute(
        f"SELECT {', '.join(_COUNTERS)}, last_position, last_recorded_at FROM sess_sessions "
        "WHERE session_id = ?",
        (sid,),
    ).fetchone()
    if row is None:
        return None
    n = len(_COUNTERS)
    return _State(list(row[:n]), row[n], row[n + 1], new=False)


_STATIC = (
    "s.session_id, s.title, s.model, s.parent_session_id, s.parent_version, s.first_position, "
    "s.first_recorded_at"
)


def list_sessions(store: Store, at: int | None = None) -> list[SessionInfo]:
    """Every session, in the order they began, as of global position ``at`` (None: now).

    ``at=None`` reads the materialized ``sess_sessions`` rows: one row per session. With ``at``, each
    session that began at or before it gets its counters from its last ``sess_history`` row at or
    before ``at``: one seek on the ``(session_id, position)`` key per session, so the cost is
    O(S·log N) for S sessions and N events, whatever the sessions' lengths; no event is read.
    """
    if at is not None and (isinstance(at, bool) or not isinstance(at, int) or at < 0):
        raise StoreError(f"at must be a log position (an integer >= 0), not {at!r}")
    from turnlog.projections.registry import materializer  # here: the registry imports this module

    materializer(store).catch_up()
    counters = ", ".join(f"h.{name}" for name in _COUNTERS)
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
        rows = [_live_counts(conn, row, through) for row in rows]
    return [_info(row) for row in rows]


def _live_counts(conn: Connection, row: tuple[Any, ...], at: int) -> tuple[Any, ...]:
    """The row with its message counters counting live messages only: those of each of its own
    ranges that a rewind or a removal took out are subtracted (work for what was undone only)."""
    sid, parent_version = row[0], row[4] or 0
    dead = [(max(lo, parent_version + 1), hi) for lo, hi in dead_ranges(conn, sid, at) if hi > parent_version]
    if not dead:
        return row
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
    parent = None if parent_sid is None else ForkPoint(session_id=parent_sid, version=parent_version)
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
