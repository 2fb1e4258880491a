"""The context index: per session, one light row per message with its stored token count and running
totals, the pairing of tool calls with their returns, pin intervals and run boundaries. It lets the
context builder read only the retained messages and the tail, whatever the session's length."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from turnlog.projections.context_rows import whole_of
from turnlog.projections.materialize import Projection, copy_rows, fork_of
from turnlog.store import (
    MessageAppended,
    MessagePinned,
    MessageUnpinned,
    RecordedEvent,
    RunFinished,
    RunStarted,
    SummaryRecorded,
    ToolReturned,
)
from turnlog.store.dialect import Connection, dialect_of


@dataclass(slots=True)
class _SessionState:
    messages: int
    tokens: int
    has_first_user: bool
    calls: dict[str, list[int]] | None = None
    """Its unanswered tool calls' versions by call id, oldest first (None: not known, ask the rows)."""
    remembered: bool = False
    """Kept in a memo from an earlier apply: worth learning its unanswered calls once."""


class ContextIndex(Projection):
    """Rows the context builder reads instead of the session's events."""

    name: ClassVar[str] = "context_index"
    version: ClassVar[int] = 5
    tables: ClassVar[tuple[str, ...]] = ("ctx_messages", "ctx_calls", "ctx_pins", "ctx_runs", "ctx_summaries")
    types: ClassVar[tuple[str, ...] | None] = (
        "message_appended",
        "tool_returned",
        "message_pinned",
        "message_unpinned",
        "run_started",
        "run_finished",
        "summary_recorded",
        "session_started",
    )

    def create(self, conn: Connection, schema: str = "main") -> None:
        dialect_of(conn).create(
            conn,
            """
            CREATE TABLE {schema}.ctx_messages (
                session_id TEXT NOT NULL,
                version INTEGER NOT NULL,
                position INTEGER NOT NULL,
                role TEXT NOT NULL,             -- system, user, assistant, tool
                first_user INTEGER NOT NULL,    -- 1 for the session's first user message
                has_name INTEGER NOT NULL,
                n_calls INTEGER NOT NULL,       -- tool calls on an assistant message
                call_version INTEGER,           -- for a tool return: the version of its call
                tokens INTEGER NOT NULL,        -- the event's stored count
                cum_messages INTEGER NOT NULL,  -- messages in the session up to this one
                cum_tokens INTEGER NOT NULL,    -- their stored tokens
                event_id TEXT NOT NULL,
                length INTEGER NOT NULL,        -- characters of its text
                whole INTEGER NOT NULL,         -- 1: a build reads its text with the row (context_rows)
                PRIMARY KEY (session_id, version)
            );
            CREATE INDEX ctx_messages_retained
                ON {schema}.ctx_messages (session_id, version) WHERE role = 'system' OR first_user = 1;
            CREATE TABLE {schema}.ctx_calls (
                session_id TEXT NOT NULL,
                call_id TEXT NOT NULL,
                call_version INTEGER NOT NULL,
                return_version INTEGER,          -- the first return that answered it
                return_position INTEGER,
                PRIMARY KEY (session_id, call_id, call_version)
            );
            CREATE TABLE {schema}.ctx_pins (
                session_id TEXT NOT NULL,
                target_version INTEGER NOT NULL,
                pinned_at INTEGER NOT NULL,      -- position of the pin
                unpinned_at INTEGER,             -- position of the unpin, if any
                reason TEXT,
                PRIMARY KEY (session_id, target_version, pinned_at)
            );
            CREATE TABLE {schema}.ctx_runs (
                session_id TEXT NOT NULL,
                run_id TEXT NOT NULL,
                started_position INTEGER NOT NULL,
                started_version INTEGER NOT NULL,
                finished_position INTEGER,
                PRIMARY KEY (session_id, started_position)
            );
            CREATE TABLE {schema}.ctx_summaries (
                session_id TEXT NOT NULL,
                version INTEGER NOT NULL,        -- the summary event's own version
                position INTEGER NOT NULL,
                event_id TEXT NOT NULL,
                first_version INTEGER NOT NULL,
                last_version INTEGER NOT NULL,
                level INTEGER NOT NULL,
                tokens INTEGER NOT NULL,         -- of its context message, header included
                key TEXT NOT NULL,
                superseded_at INTEGER,           -- position of a later summary covering its range
                PRIMARY KEY (session_id, version)
            );
            CREATE INDEX ctx_summaries_key ON {schema}.ctx_summaries (key);
            CREATE INDEX ctx_summaries_active
                ON {schema}.ctx_summaries (session_id, superseded_at)
            """,
            schema,
        )

    def apply(self, conn: Connection, records: Sequence[RecordedEvent]) -> None:
        self.apply_remembering(conn, records, {})

    def apply_remembering(
        self, conn: Connection, records: Sequence[RecordedEvent], memo: dict[str, _SessionState]
    ) -> None:
        """The memo: each session's running totals, as its last ctx_messages row holds them."""
        states = memo
        loaded: list[_SessionState] = []  # read from the rows by this apply

        def state(session_id: str) -> _SessionState:
            found = states.get(session_id)
            if found is None:
                # Both asked before either answer is read: one round trip on a server.
                last = conn.execute(
                    "SELECT cum_messages, cum_tokens FROM ctx_messages WHERE session_id = ? "
                    "ORDER BY version DESC LIMIT 1",
                    (session_id,),
                )
                first_user = conn.execute(
                    f"SELECT 1 FROM ctx_messages {dialect_of(conn).hint('ctx_messages_retained')} "
                    "WHERE session_id = ? "
                    "AND (role = 'system' OR first_user = 1) AND first_user = 1",
                    (session_id,),
                )
                row, first = last.fetchone(), first_user.fetchone()
                found = _SessionState(row[0] if row else 0, row[1] if row else 0, first is not None)
                if row is None:
                    # No message yet, so no call either (ctx_calls rows come with their message's
                    # row, a fork's copies too): its calls are known, none need asking for.
                    found.calls = {}
                states[session_id] = found
                loaded.append(found)
            return found

        rows: list[tuple[object, ...]] = []
        # ctx_calls rows written together (see _flush_calls): a call's row, with its return when the
        # return comes in the same apply, and the returns of calls whose rows are stored already.
        new_calls: dict[tuple[str, str, int], list[int | None]] = {}
        answered: list[tuple[int, int, str, str, int]] = []
        for record in records:
            event = record.event
            sid = record.session_id
            tokens = record.tokens or 0
            fork = fork_of(conn, record)
            if fork is not None:
                _flush(conn, rows)
                _flush_calls(conn, new_calls, answered)
                _copy_prefix(conn, fork, sid)
                states.pop(sid, None)  # its totals are the copied rows'
            elif isinstance(event, MessageAppended):
                st = state(sid)
                first_user = event.role == "user" and not st.has_first_user
                st.has_first_user = st.has_first_user or first_user
                st.messages += 1
                st.tokens += tokens
                calls = event.tool_calls or ()
                whole = whole_of(event, tokens, always_kept=first_user or event.role == "system")
                rows.append(
                    (sid, record.version, record.position, event.role, int(first_user),
                     int(event.name is not None), len(calls), None, tokens, st.messages, st.tokens,
                     record.event_id, len(event.content), int(whole))
                )  # fmt: skip
                for call in calls:
                    new_calls.setdefault((sid, call.id, record.version), [None, None])
                if st.calls is not None:
                    for call in calls:
                        versions = st.calls.setdefault(call.id, [])
                        if record.version not in versions:
                            versions.append(record.version)
                if event.pinned is not None:
                    _pin(conn, sid, record.version, record.position, event.pinned.reason)
            elif isinstance(event, ToolReturned):
                st = state(sid)
                st.messages += 1
                st.tokens += tokens
                # A return answers the latest unanswered call with its id (ids can repeat).
                if st.calls is None and st.remembered:
                    _flush_calls(conn, new_calls, answered)
                    st.calls = _open_calls(conn, sid)
                answers: int | None
                if st.calls is not None:
                    open_versions = st.calls.get(event.tool_call_id)
                    answers = open_versions.pop() if open_versions else None
                    if open_versions is not None and not open_versions:
                        # Answered calls are forgotten: a memo kept over a whole rebuild would
                        # otherwise hold every call id of every session.
                        del st.calls[event.tool_call_id]
                else:
                    _flush_calls(conn, new_calls, answered)
                    found = conn.execute(
                        "SELECT call_version FROM ctx_calls WHERE session_id = ? AND call_id = ? "
                        "AND return_version IS NULL ORDER BY call_version DESC LIMIT 1",
                        (sid, event.tool_call_id),
                    ).fetchone()
                    answers = None if found is None else int(found[0])
                if answers is not None:
                    pending = new_calls.get((sid, event.tool_call_id, answers))
                    if pending is not None:
                        pending[0], pending[1] = record.version, record.position
                    else:
                        answered.append((record.version, record.position, sid, event.tool_call_id, answers))
                rows.append(
                    (sid, record.version, record.position, "tool", 0, 0, 0,
                     answers, tokens, st.messages, st.tokens, record.event_id,
                     len(event.content), int(whole_of(event, tokens)))
                )  # fmt: skip
            elif isinstance(event, MessagePinned):
                target = _target_version(conn, sid, event.target_event_id, rows)
                if target is not None:
                    _pin(conn, sid, target, record.position, event.reason)
            elif isinstance(event, MessageUnpinned):
                target = _target_version(conn, sid, event.target_event_id, rows)
                if target is not None:
                    conn.execute(
                        "UPDATE ctx_pins SET unpinned_at = ? WHERE session_id = ? "
                        "AND target_version = ? AND unpinned_at IS NULL",
                        (record.position, sid, target),
                    )
            elif isinstance(event, SummaryRecorded):
                # A later summary whose range holds an earlier one's replaces it; keeping only the
                # active ones current is what lets a build read O(active) rows, not every summary.
                conn.execute(
                    "UPDATE ctx_summaries SET superseded_at = ? WHERE session_id = ? "
                    "AND superseded_at IS NULL AND first_version >= ? AND last_version <= ?",
                    (record.position, sid, event.first_version, event.last_version),
                )
                conn.execute(
                    "INSERT INTO ctx_summaries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)",
                    (sid, record.version, record.position, record.event_id, event.first_version,
                     event.last_version, event.level, event.tokens, event.key),
                )  # fmt: skip
            elif isinstance(event, RunStarted):
                conn.execute(
                    "INSERT INTO ctx_runs (session_id, run_id, started_position, started_version) "
                    "VALUES (?, ?, ?, ?)",
                    (sid, event.run_id, record.position, record.version),
                )
            elif isinstance(event, RunFinished):
                conn.execute(
                    "UPDATE ctx_runs SET finished_position = ? WHERE session_id = ? AND run_id = ? "
                    "AND finished_position IS NULL",
                    (record.position, sid, event.run_id),
                )
            # Rows go in before the next event that may look them up (pins of a message of the
            # same batch).
            if len(rows) >= 1000 or isinstance(event, (MessagePinned, MessageUnpinned)):
                _flush(conn, rows)
        _flush(conn, rows)
        _flush_calls(conn, new_calls, answered)
        for st in loaded:
            st.remembered = True


def _copy_prefix(conn: Connection, fork: tuple[str, int, int], child: str) -> None:
    """A fork's index starts as its parent's was at the fork: rows up to the fork version, and what
    happened later in the parent (a return, an unpin, a run's end, a newer summary) undone."""
    parent, version, position = fork

    def until_fork(*columns: str, by: str) -> dict[str, str]:
        return {c: f"CASE WHEN {by} <= {int(position)} THEN {c} END" for c in columns}

    copy_rows(conn, "ctx_messages", parent, child, "version <= ?", (version,))
    later_return = until_fork("return_version", "return_position", by="return_position")
    copy_rows(conn, "ctx_calls", parent, child, "call_version <= ?", (version,), overrides=later_return)
    unpinned = until_fork("unpinned_at", by="unpinned_at")
    copy_rows(conn, "ctx_pins", parent, child, "pinned_at <= ?", (position,), overrides=unpinned)
    finished = until_fork("finished_position", by="finished_position")
    copy_rows(conn, "ctx_runs", parent, child, "started_position <= ?", (position,), overrides=finished)
    superseded = until_fork("superseded_at", by="superseded_at")
    copy_rows(conn, "ctx_summaries", parent, child, "position <= ?", (position,), overrides=superseded)


def _open_calls(conn: Connection, sid: str) -> dict[str, list[int]]:
    """A session's unanswered tool calls: their versions by call id, oldest first."""
    calls: dict[str, list[int]] = {}
    for call_id, version in conn.execute(
        "SELECT call_id, call_version FROM ctx_calls WHERE session_id = ? AND return_version IS NULL "
        "ORDER BY call_version",
        (sid,),
    ).fetchall():
        calls.setdefault(call_id, []).append(int(version))
    return calls


def _flush(conn: Connection, rows: list[tuple[object, ...]]) -> None:
    if rows:
        conn.executemany("INSERT INTO ctx_messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        rows.clear()


def _flush_calls(
    conn: Connection,
    new_calls: dict[tuple[str, str, int], list[int | None]],
    answered: list[tuple[int, int, str, str, int]],
) -> None:
    """Write the ctx_calls rows an apply kept back: two statements for a batch instead of one per
    call message and one per return. Done before anything reads ctx_calls (and at the apply's
    end). A call's (session, id, version) is one event's, so no stored row can conflict with a
    new one (ON CONFLICT: the same id twice in one message, kept once, as before)."""
    if new_calls:
        conn.executemany(
            "INSERT INTO ctx_calls (session_id, call_id, call_version, return_version, return_position) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [(*key, *answer) for key, answer in new_calls.items()],
        )
        new_calls.clear()
    if answered:
        conn.executemany(
            "UPDATE ctx_calls SET return_version = ?, return_position = ? "
            "WHERE session_id = ? AND call_id = ? AND call_version = ?",
            answered,
        )
        answered.clear()


def _pin(conn: Connection, sid: str, version: int, position: int, reason: str | None) -> None:
    already = conn.execute(
        "SELECT 1 FROM ctx_pins WHERE session_id = ? AND target_version = ? AND unpinned_at IS NULL",
        (sid, version),
    ).fetchone()
    if already is None:
        conn.execute(
            "INSERT INTO ctx_pins (session_id, target_version, pinned_at, reason) VALUES (?, ?, ?, ?)",
            (sid, version, position, reason),
        )


def _target_version(
    conn: Connection, sid: str, event_id: str, pending: list[tuple[object, ...]]
) -> int | None:
    _flush(conn, pending)
    row = conn.execute(
        "SELECT version FROM events WHERE event_id = ? AND session_id = ?", (event_id, sid)
    ).fetchone()
    return int(row[0]) if row else None
