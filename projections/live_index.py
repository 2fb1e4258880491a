"""The live set, materialized: per session, the ranges of versions that a rewind or a removal made not
live, each with the positions during which it holds. Readers of the other projections skip what is
dead as of their position, so those projections keep their rows unchanged (money is never undone).

A ``session_rewound`` at version R to T adds one range (T, R) and, to return to the state of T,
revives the ranges that began after T's position and re-applies those that held then: the work is
the rewind's few rows, never the session's length. A ``message_removed`` adds one range per target
(and per tool return answering a removed assistant message). The rule is ``projections.live``'s;
the tests check that both give the same live set at every version."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

# The readers of the ranges live in live_ranges, which loads neither the event models nor this
# machinery (`turnlog log` starts fast); they are imported from here too.
from turnlog.projections.live_ranges import DEAD_RANGES as DEAD_RANGES
from turnlog.projections.live_ranges import LIVE_PROJECTION, LIVE_VERSION
from turnlog.projections.live_ranges import Gap as Gap
from turnlog.projections.live_ranges import dead_ranges as dead_ranges
from turnlog.projections.live_ranges import is_dead as is_dead
from turnlog.projections.live_ranges import live_condition as live_condition
from turnlog.projections.materialize import Projection, copy_rows, fork_of
from turnlog.store import MessageAppended, MessageRemoved, RecordedEvent, SessionRewound, ToolReturned
from turnlog.store.dialect import Connection, dialect_of

_CALLS_KEPT = 1000
"""Calls remembered per session (see :meth:`LiveIndex.apply_remembering`)."""


class LiveIndex(Projection):
    """The ranges of versions that are not live, and when."""

    name: ClassVar[str] = LIVE_PROJECTION
    version: ClassVar[int] = LIVE_VERSION
    tables: ClassVar[tuple[str, ...]] = ("live_gaps", "live_calls", "live_answers", "live_forks")
    types: ClassVar[tuple[str, ...] | None] = (
        "session_started",
        "message_appended",
        "tool_returned",
        "session_rewound",
        "message_removed",
    )

    def create(self, conn: Connection, schema: str = "main") -> None:
        dialect_of(conn).create(
            conn,
            """
            CREATE TABLE {schema}.live_gaps (
                session_id TEXT NOT NULL,
                first_version INTEGER NOT NULL,
                last_version INTEGER NOT NULL,
                dead_at INTEGER NOT NULL,        -- position from which the range is not live
                alive_at INTEGER,                -- position from which it is live again, if any
                PRIMARY KEY (session_id, dead_at, first_version, last_version)
            );
            CREATE TABLE {schema}.live_calls (
                session_id TEXT NOT NULL,
                call_id TEXT NOT NULL,
                version INTEGER NOT NULL,        -- an assistant message that made this call
                PRIMARY KEY (session_id, call_id, version)
            );
            CREATE TABLE {schema}.live_answers (
                session_id TEXT NOT NULL,
                call_version INTEGER NOT NULL,
                return_version INTEGER NOT NULL,
                PRIMARY KEY (session_id, call_version, return_version)
            );
            CREATE TABLE {schema}.live_forks (
                session_id TEXT PRIMARY KEY,
                parent TEXT NOT NULL,
                version INTEGER NOT NULL
            )
            """,
            schema,
        )

    def apply(self, conn: Connection, records: Sequence[RecordedEvent]) -> None:
        self.apply_remembering(conn, records, {})

    def apply_remembering(
        self, conn: Connection, records: Sequence[RecordedEvent], memo: dict[str, dict[str, int]]
    ) -> None:
        """The memo: per session, the latest version of a call by its id, as live_calls holds it
        (a turn's return answers the call the turn before stored). The calls and answers go in with
        one statement each at the end (or before a fork, removal or rewind reads the tables): a
        batch of a rebuild is not two statements per tool return."""
        calls: list[tuple[str, str, int]] = []
        answers: list[tuple[str, int, int]] = []
        for record in records:
            event = record.event
            sid = record.session_id
            fork = fork_of(conn, record)
            if fork is not None:
                _flush(conn, calls, answers)
                memo.pop(sid, None)  # its calls are the copied rows'
                _copy_prefix(conn, fork, sid)
            elif isinstance(event, MessageAppended) and event.tool_calls:
                known = memo.setdefault(sid, {})
                if len(known) > _CALLS_KEPT:
                    _flush(conn, calls, answers)  # the ones forgotten are read again when named
                    known.clear()
                for call in event.tool_calls:  # versions only grow: this one is the latest
                    calls.append((sid, call.id, record.version))
                    known[call.id] = record.version
            elif isinstance(event, ToolReturned):
                # It answers the latest earlier assistant message with a call of that id.
                call_version = memo.get(sid, {}).get(event.tool_call_id)
                if call_version is None:  # (a pending call with this id would be in the memo)
                    row = conn.execute(
                        "SELECT max(version) FROM live_calls WHERE session_id = ? AND call_id = ?",
                        (sid, event.tool_call_id),
                    ).fetchone()
                    call_version = row[0]
                if call_version is not None:
                    answers.append((sid, call_version, record.version))
            elif isinstance(event, MessageRemoved):
                _flush(conn, calls, answers)
                _remove(conn, record, event)
            elif isinstance(event, SessionRewound):
                _flush(conn, calls, answers)
                _rewind(conn, record, event)
        _flush(conn, calls, answers)


def _flush(conn: Connection, calls: list[tuple[str, str, int]], answers: list[tuple[str, int, int]]) -> None:
    if calls:
        conn.executemany("INSERT INTO live_calls VALUES (?, ?, ?) ON CONFLICT DO NOTHING", calls)
        calls.clear()
    if answers:
        conn.executemany("INSERT INTO live_answers VALUES (?, ?, ?)", answers)
        answers.clear()


def _remove(conn: Connection, record: RecordedEvent, event: MessageRemoved) -> None:
    sid = record.session_id
    dead = dead_ranges(conn, sid, record.position)
    versions: set[int] = set()
    for target in event.target_event_ids:
        row = conn.execute("SELECT version FROM events WHERE event_id = ?", (target,)).fetchone()
        # The store checked every target when it was appended; a target that is not live is
        # ignored, and so are the returns answering it.
        if row is None or is_dead(dead, row[0]):
            continue
        versions.add(int(row[0]))
        versions.update(
            v
            for (v,) in conn.execute(
                "SELECT return_version FROM live_answers WHERE session_id = ? AND call_version = ? "
                "AND return_version < ?",
                (sid, row[0], record.version),
            )
            if not is_dead(dead, v)
        )
    versions.add(record.version)  # its own version, never live: it lets neighbouring ranges merge
    conn.executemany(
        "INSERT INTO live_gaps VALUES (?, ?, ?, ?, NULL) ON CONFLICT DO NOTHING",
        [(sid, v, v, record.position) for v in versions],
    )


def _rewind(conn: Connection, record: RecordedEvent, event: SessionRewound) -> None:
    sid, position = record.session_id, record.position
    then = _position_of(conn, sid, event.to_version)
    # Ranges holding now that did not hold at T: live again (any part above T is covered below).
    conn.execute(
        "UPDATE live_gaps SET alive_at = ? WHERE session_id = ? AND alive_at IS NULL AND dead_at > ?",
        (position, sid, then),
    )
    # Ranges that held at T but were revived since: they hold again.
    conn.execute(
        "INSERT INTO live_gaps SELECT session_id, first_version, last_version, ?, NULL "
        "FROM live_gaps WHERE session_id = ? AND dead_at <= ? AND alive_at > ? AND alive_at < ? "
        "ON CONFLICT DO NOTHING",
        (position, sid, then, then, position),
    )
    # The range takes in the rewind's own version (never live anyway), so that successive pops
    # make adjacent ranges that readers merge into one.
    conn.execute(
        "INSERT INTO live_gaps VALUES (?, ?, ?, ?, NULL) ON CONFLICT DO NOTHING",
        (sid, event.to_version + 1, record.version, position),
    )


def _position_of(conn: Connection, sid: str, version: int) -> int:
    """The position of a session's version, through its fork parents (0 for version 0)."""
    while version > 0:
        fork = conn.execute("SELECT parent, version FROM live_forks WHERE session_id = ?", (sid,)).fetchone()
        if fork is None or version > fork[1]:
            row = conn.execute(
                "SELECT position FROM events WHERE session_id = ? AND version = ?", (sid, version)
            ).fetchone()
            return int(row[0]) if row else 0
        sid = fork[0]
    return 0


def _copy_prefix(conn: Connection, fork: tuple[str, int, int], child: str) -> None:
    """A fork's live set starts as its parent's was at the fork."""
    parent, version, position = fork
    conn.execute(
        "INSERT INTO live_forks VALUES (?, ?, ?) "
        "ON CONFLICT (session_id) DO UPDATE SET parent = excluded.parent, version = excluded.version",
        (child, parent, version),
    )
    copy_rows(
        conn,
        "live_gaps",
        parent,
        child,
        "dead_at <= ?",
        (position,),
        overrides={"alive_at": f"CASE WHEN alive_at <= {int(position)} THEN alive_at END"},
    )
    copy_rows(conn, "live_calls", parent, child, "version <= ?", (version,))
    copy_rows(conn, "live_answers", parent, child, "return_version <= ?", (version,))
