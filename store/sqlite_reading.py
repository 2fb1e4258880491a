"""Reading the log: sessions (following a fork's lineage), events by version, id or position,
blobs, and the store's checker."""

from __future__ import annotations

import difflib
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from turnlog.store.base import Blob, OriginItem, RecordedEvent, SessionSummary, VerifyReport
from turnlog.store.errors import (
    InvalidEventError,
    UnknownEventError,
    UnknownSessionError,
)
from turnlog.store.rows import (
    blob_from_row,
    event_ref,
    gc_paused,
    lineage_from,
    origin_item,
    select_records,
    the_event,
    undecodable_row,
)
from turnlog.store.sqlite_connection import translate
from turnlog.store.sqlite_tokens import TokenCountingStore, counted_through
from turnlog.store.verify import verify_log


class ReadingStore(TokenCountingStore):
    """The reads of the log."""

    def lineage(self, session_id: str) -> list[tuple[str, int, int]]:
        """The session's history as (session id, first version, last version) segments, oldest
        first: a fork's parent prefix (recursively), then its own events."""
        with self.reading() as conn:
            return lineage_of(conn, session_id, self._lineages)

    def _read(self, conn: sqlite3.Connection, where: str, params: Sequence[Any]) -> list[RecordedEvent]:
        return select_records(conn, where, params)

    def read_session(
        self, session_id: str, *, from_version: int = 1, to_version: int | None = None, own: bool = False
    ) -> list[RecordedEvent]:
        self.catch_up_tokens()
        # Numbers past SQLite's 64-bit integers mean "beyond every version" (they cannot be bound).
        upper = _clamped(to_version if to_version is not None else _NO_LIMIT)
        from_version = _clamped(from_version)
        found: list[RecordedEvent] = []
        with self.reading() as conn:
            segments = lineage_of(conn, session_id, self._lineages)
            for sid, lo, hi in segments[-1:] if own else segments:
                if max(lo, from_version) <= min(hi, upper):
                    found += self._read(
                        conn,
                        "WHERE e.session_id = ? AND e.version BETWEEN ? AND ? ORDER BY e.version",
                        (sid, max(lo, from_version), min(hi, upper)),
                    )
        return found

    def read_versions(self, session_id: str, versions: Sequence[int]) -> list[RecordedEvent]:
        """The session's events with these versions, in order (missing versions are left out)."""
        self.catch_up_tokens()
        found: list[RecordedEvent] = []
        with self.reading() as conn:
            for sid, lo, hi in lineage_of(conn, session_id, self._lineages):
                mine = [v for v in versions if lo <= v <= hi and v < _NO_LIMIT]
                for start in range(0, len(mine), 500):
                    chunk = mine[start : start + 500]
                    found += self._read(
                        conn,
                        f"WHERE e.session_id = ? AND e.version IN ({','.join('?' * len(chunk))})",
                        (sid, *chunk),
                    )
        found.sort(key=lambda r: r.version)
        return found

    def first_event(self, session_id: str) -> RecordedEvent | None:
        """The session's own first event (a fork's is its session_started), if it has any."""
        with self.reading() as conn:
            rows = self._read(conn, "WHERE e.session_id = ? ORDER BY e.version LIMIT 1", (session_id,))
        return rows[0] if rows else None

    def read_origins(self, session_id: str, *, newest: int | None = None) -> list[OriginItem]:
        if newest is not None and newest < 0:
            raise InvalidEventError(f"read_origins: newest must be 0 or more, not {newest}")
        rows: list[Any] = []
        with self.reading() as conn:
            segments = lineage_of(conn, session_id, self._lineages)
            for sid, lo, hi in segments if newest is None else reversed(segments):
                if newest is None:
                    rows += _origin_rows(conn, "ORDER BY version", (sid, lo, hi))
                elif len(rows) < newest:
                    more = _origin_rows(
                        conn, "ORDER BY version DESC LIMIT ?", (sid, lo, hi, newest - len(rows))
                    )
                    rows += more
        if newest is not None:
            rows.reverse()
        with gc_paused():  # many objects that all survive (see records_from_rows)
            return [origin_item(row) for row in rows]

    def version_at(self, session_id: str, position: int) -> int:
        """The session's last version at or before a global position (0 if none)."""
        with self._lock, translate(self.path):
            row = self.conn.execute(
                "SELECT version FROM events WHERE session_id = ? AND position <= ? "
                "ORDER BY version DESC LIMIT 1",
                (session_id, _clamped(position)),
            ).fetchone()
        return int(row[0]) if row else 0

    def read_tail(self, session_id: str, limit: int) -> list[RecordedEvent]:
        if limit < 0:
            raise InvalidEventError(f"read_tail: limit must be 0 or more, not {limit}")
        limit = _clamped(limit)
        self.catch_up_tokens()
        rows: list[RecordedEvent] = []
        with self.reading() as conn:
            for sid, lo, hi in reversed(lineage_of(conn, session_id, self._lineages)):
                if len(rows) >= limit:
                    break
                rows += self._read(
                    conn,
                    "WHERE e.session_id = ? AND e.version BETWEEN ? AND ? ORDER BY e.version DESC LIMIT ?",
                    (sid, lo, hi, limit - len(rows)),
                )
        rows.reverse()
        return rows

    def iter_after(
        self, position: int = 0, *, types: Sequence[str] | None = None, batch: int = 1000
    ) -> Iterator[RecordedEvent]:
        type_filter = ""
        params_tail: tuple[Any, ...] = ()
        if types is not None and not types:
            return  # no types asked for: nothing matches
        if types:
            type_filter = f" AND e.type IN ({','.join('?' * len(types))})"
            params_tail = tuple(types)
        self.catch_up_tokens()
        last = _clamped(position)
        while True:
            with self.reading() as conn:
                chunk = self._read(
                    conn,
                    f"WHERE e.position > ?{type_filter} ORDER BY e.position LIMIT {int(batch)}",
                    (last, *params_tail),
                )
            if not chunk:
                return
            yield from chunk
            last = chunk[-1].position

    def get_event(self, event_id: str) -> RecordedEvent:
        self.catch_up_tokens()
        with self.reading() as conn:
            rows = self._read(conn, "WHERE e.event_id = ?", (event_id,))
        if not rows:
            raise UnknownEventError(f"no event with id {event_id!r} in this store")
        return rows[0]

    def find_event(self, session_id: str, ref: str) -> RecordedEvent:
        """An event of the session by its id or a unique prefix of it (at least 6 characters, as
        `turnlog log` shows them). Raises UnknownEventError naming the problem."""
        ref = event_ref(ref)
        rows: list[RecordedEvent] = []
        with self.reading() as conn:
            segments = lineage_of(conn, session_id, self._lineages)
            for sid, lo, hi in segments:
                rows += self._read(
                    conn,
                    "WHERE e.event_id = ? AND e.session_id = ? AND e.version BETWEEN ? AND ?",
                    (ref, sid, lo, hi),
                )
            if not rows:
                for sid, lo, hi in segments:
                    rows += self._read(
                        conn,
                        "WHERE e.session_id = ? AND e.version BETWEEN ? AND ? "
                        "AND substr(e.event_id, 1, ?) = ? LIMIT 3",
                        (sid, lo, hi, len(ref), ref),
                    )
        return the_event(session_id, ref, rows)

    def head_version(self, session_id: str) -> int:
        with self._lock, translate(self.path):
            return head_version_of(self.conn, session_id)

    def head_position(self) -> int:
        with self._lock, translate(self.path):
            row = self.conn.execute("SELECT max(position) FROM events").fetchone()
            return int(row[0] or 0)

    def sessions(self) -> list[SessionSummary]:
        self.catch_up_tokens()
        with self.reading() as conn:
            rows = conn.execute(
                "SELECT session_id, max(version), count(*), coalesce(sum(tokens), 0), "
                "min(position), max(position), min(recorded_at), max(recorded_at) "
                "FROM events GROUP BY session_id ORDER BY min(position)"
            ).fetchall()
        return [SessionSummary(*row) for row in rows]

    def require_session(self, session_id: str) -> int:
        head = self.head_version(session_id)
        if head == 0:
            with self._lock, translate(self.path):
                names = [r[0] for r in self.conn.execute("SELECT DISTINCT session_id FROM events")]
            raise UnknownSessionError(
                session_id, difflib.get_close_matches(session_id, names, n=3, cutoff=0.5)
            )
        return head

    def get_blob(self, blob_id: str) -> Blob:
        with self._lock, translate(self.path):
            row = self.conn.execute(
                "SELECT id, size, codec, data FROM blobs WHERE id = ?", (blob_id,)
            ).fetchone()
        return blob_from_row(blob_id, row)

    def count_events(self) -> int:
        """The number of events in the store."""
        with self._lock, translate(self.path):
            return int(self.conn.execute("SELECT count(*) FROM events").fetchone()[0])

    # --- verifying -----------------------------------------------------------------------------

    def verify(self, *, quick: bool = False) -> VerifyReport:
        """Check the database's integrity (SQLite's full ``integrity_check``; ``quick=True`` runs the
        faster ``quick_check``, which skips the indexes), the immutability triggers, the hash chain,
        that every row decodes, every stored token count, and the content blobs."""
        with self.reading() as conn:
            return verify_log(
                conn,
                self.count_event_tokens,
                self.tokenizer,
                salt=self.salt,
                quick=quick,
                counted_through=counted_through(conn),
            )


_ORIGIN_SELECT = (
    "SELECT position, version, type, schema_version, payload FROM events "
    "WHERE session_id = ? AND version BETWEEN ? AND ? "
)


def _origin_rows(conn: sqlite3.Connection, order: str, params: Sequence[Any]) -> list[Any]:
    try:
        return conn.execute(_ORIGIN_SELECT + order, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc):  # text that is not UTF-8 ends the query: name its row
            raise
        where = "WHERE e.session_id = ? AND e.version BETWEEN ? AND ?"
        raise undecodable_row(conn, where, params[:3]) from exc


_NO_LIMIT = 2**62
"""Beyond every version and position a store can hold (store.limits.MAX_VERSION + 1)."""


def _clamped(number: int) -> int:
    """A version, position or count as SQLite can bind it: past the largest any store holds, the
    same answer as that largest (and below, as its negative)."""
    return max(-_NO_LIMIT, min(int(number), _NO_LIMIT))


def records_between(
    conn: sqlite3.Connection, after: int, through: int, types: Sequence[str] | None = None
) -> list[RecordedEvent]:
    """The events with after < position <= through (optionally only some types), read on ``conn``
    inside the caller's transaction. For projections that materialize in the store's file."""
    type_filter = ""
    if types:
        type_filter = f" AND e.type IN ({','.join('?' * len(types))})"
    return select_records(
        conn,
        f"WHERE e.position > ? AND e.position <= ?{type_filter} ORDER BY e.position",
        (after, through, *(types or ())),
    )


def lineage_of(
    conn: sqlite3.Connection, session_id: str, cache: dict[str, list[tuple[str, int, int]]]
) -> list[tuple[str, int, int]]:
    """(session, first version, last version) segments of a session's history, oldest first."""

    def first_row(sid: str) -> tuple[str, str] | None:
        row = conn.execute(
            "SELECT type, payload FROM events WHERE session_id = ? ORDER BY version LIMIT 1", (sid,)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    return lineage_from(first_row, session_id, cache)


def position_of(conn: sqlite3.Connection, session_id: str, version: int) -> int | None:
    """The global position of a session's version, following a fork's lineage."""
    for sid, lo, hi in lineage_of(conn, session_id, {}):
        if lo <= version <= hi:
            row = conn.execute(
                "SELECT position FROM events WHERE session_id = ? AND version = ?", (sid, version)
            ).fetchone()
            return int(row[0]) if row else None
    return None


def head_version_of(conn: sqlite3.Connection, session_id: str) -> int:
    row = conn.execute("SELECT max(version) FROM events WHERE session_id = ?", (session_id,)).fetchone()
    return int(row[0] or 0)
