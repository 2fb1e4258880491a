"""The sessions projection's writer: one row per session with its counts, title, model, fork point and
activity (``sess_sessions``), plus a cumulative row per event (``sess_history``), so the listing can be
read as of any earlier position. Its reader is projections.sessions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from turnlog.projections.materialize import Projection
from turnlog.projections.sessions import COUNTERS, SESSIONS_PROJECTION, SESSIONS_VERSION
from turnlog.store import MessageAppended, RecordedEvent, SessionStarted, ToolReturned
from turnlog.store.dialect import Connection, dialect_of


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

    name: ClassVar[str] = SESSIONS_PROJECTION
    version: ClassVar[int] = SESSIONS_VERSION
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
                    [0] * len(COUNTERS),
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
            f"INSERT INTO sess_history (session_id, position, recorded_at, {', '.join(COUNTERS)}) "
            f"VALUES ({', '.join('?' * (3 + len(COUNTERS)))})",
            history,
        )
        for sid, st in states.items():
            memo[sid] = st
            if st.new:
                st.new = False
                conn.execute(
                    "INSERT INTO sess_sessions (session_id, title, model, parent_session_id, "
                    "parent_version, first_position, first_recorded_at, "
                    f"{', '.join(COUNTERS)}, last_position, last_recorded_at) "
                    f"VALUES ({', '.join('?' * (9 + len(COUNTERS)))})",
                    (sid, st.title, st.model, st.parent_session_id, st.parent_version,
                     st.first_position, st.first_recorded_at, *st.counters,
                     st.last_position, st.last_recorded_at),
                )  # fmt: skip
            else:
                # session_started is always version 1, so an existing row's static columns are final.
                conn.execute(
                    f"UPDATE sess_sessions SET {', '.join(f'{name} = ?' for name in COUNTERS)}, "
                    "last_position = ?, last_recorded_at = ? WHERE session_id = ?",
                    (*st.counters, st.last_position, st.last_recorded_at, sid),
                )


def _load(conn: Connection, sid: str) -> _State | None:
    row = conn.execute(
        f"SELECT {', '.join(COUNTERS)}, last_position, last_recorded_at FROM sess_sessions "
        "WHERE session_id = ?",
        (sid,),
    ).fetchone()
    if row is None:
        return None
    n = len(COUNTERS)
    return _State(list(row[:n]), row[n], row[n + 1], new=False)
