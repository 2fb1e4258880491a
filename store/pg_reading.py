"""Reading a PostgreSQL store: sessions (following a fork's lineage), events by version, id or
position, blobs, and verify. Rows become records through the same mapper as SQLite's
(store.rows), and verify runs the same chain check (store.verify.ChainCheck)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from turnlog.store.append_rules import Segments
from turnlog.store.base import Blob, OriginItem, RecordedEvent, SessionSummary, VerifyReport
from turnlog.store.errors import (
    InvalidEventError,
    UnknownEventError,
)
from turnlog.store.log_ops import PG_COUNTED_THROUGH
from turnlog.store.pg_chain import pg_hash_at
from turnlog.store.pg_connection import Connection, PostgresBase
from turnlog.store.pg_schema import EVENT_TABLE, TRIGGERS
from turnlog.store.rows import (
    EVENT_COLUMNS,
    EVENT_SELECT,
    blob_from_row,
    event_ref,
    gc_paused,
    lineage_from,
    origin_item,
    records_from_rows,
    the_event,
)
from turnlog.store.verify import ChainCheck, Findings, blob_matches

_NO_LIMIT = 2**62

_SESSIONS = (
    "SELECT session_id, max(version), count(*), coalesce(sum(tokens), 0)::bigint, "
    "min(position), max(position), min(recorded_at), max(recorded_at), count(*) - count(tokens) "
    "FROM events GROUP BY session_id ORDER BY min(position)"
)
"""Each session's summary, and how many of its events wait for their token count."""


def _absent(text: str) -> bool:
    """An id holding NUL names nothing here (PostgreSQL text cannot hold it): the read finds
    nothing, as it would on SQLite, instead of failing."""
    return "\x00" in text


def select_records(conn: Connection, where: str, params: Sequence[Any]) -> list[RecordedEvent]:
    """The events a ``WHERE ...`` clause (on ``e``, the events table; ``%s`` placeholders) selects."""
    return records_from_rows(conn.execute(f"{EVENT_SELECT} {where}", params))


def pg_lineage(
    conn: Connection, session_id: str, cache: dict[str, Segments], table: str = "events"
) -> Segments:
    """(session, first version, last version) segments of a session's history, oldest first (from the
    placed events, or from every row with ``table="event_log"``)."""

    def first_row(sid: str) -> tuple[str, str] | None:
        row = conn.execute(
            f"SELECT type, payload FROM {table} WHERE session_id = %s ORDER BY version LIMIT 1", (sid,)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    return lineage_from(first_row, session_id, cache)


def pg_head_version(conn: Connection, session_id: str) -> int:
    if _absent(session_id):
        return 0
    row = conn.execute("SELECT max(version) FROM events WHERE session_id = %s", (session_id,)).fetchone()
    return int(row[0] or 0) if row else 0


class PgReadingStore(PostgresBase):
    """The reads of the log."""

    def with_counts(self, records: list[RecordedEvent]) -> list[RecordedEvent]:
        """``records`` with the counts of those still waiting for one made in memory (the counts
        the next catch-up stores: they depend only on the event and the tokenizer), so that a read
        never spends a round trip looking for events to count (store.pg_tokens)."""
        if all(r.tokens is not None for r in records):
            return records
        count = self.count_event_tokens
        return [r if r.tokens is not None else replace(r, tokens=count(r.event)) for r in records]

    def held_snapshot(self) -> Connection | None:
        """The connection of a snapshot this thread holds open, if any (store.pg_storage)."""
        return None

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[Connection]:
        """The snapshot this thread holds, or one of its own: a build's reads of events share its
        snapshot, with no BEGIN and ROLLBACK of their own."""
        held = self.held_snapshot()
        if held is not None:
            yield held
            return
        with self.snapshot() as conn:
            yield conn

    def lineage(self, session_id: str) -> Segments:
        """The session's history as (session id, first version, last version) segments."""
        with self._snapshot() as conn:
            return pg_lineage(conn, session_id, self._lineages)

    def _segments_read(
        self, session_id: str, where: str, extra: Sequence[Any] = (), *, own: bool = False
    ) -> list[RecordedEvent]:
        """The records ``where`` selects in each segment of the session's lineage, oldest first;
        ``where`` starts with the segment's ``session_id = %s AND version BETWEEN %s AND %s``."""
        found: list[RecordedEvent] = []
        if _absent(session_id):
            return found
        with self._snapshot() as conn:
            segments = pg_lineage(conn, session_id, self._lineages)
            for sid, lo, hi in segments[-1:] if own else segments:
                found += select_records(conn, where, (sid, lo, hi, *extra))
        return self.with_counts(found)

    def read_session(
        self, session_id: str, *, from_version: int = 1, to_version: int | None = None, own: bool = False
    ) -> list[RecordedEvent]:
        lower = min(max(from_version, -_NO_LIMIT), _NO_LIMIT)
        upper = max(min(to_version if to_version is not None else _NO_LIMIT, _NO_LIMIT), -_NO_LIMIT)
        return self._segments_read(
            session_id,
            "WHERE e.session_id = %s AND e.version BETWEEN %s AND %s "
            "AND e.version BETWEEN %s AND %s ORDER BY e.version",
            (lower, upper),
            own=own,
        )

    def read_versions(self, session_id: str, versions: Sequence[int]) -> list[RecordedEvent]:
        wanted = sorted({int(v) for v in versions if 1 <= v < _NO_LIMIT})
        found: list[RecordedEvent] = []
        if _absent(session_id) or not wanted:
            return found
        with self._snapshot() as conn:
            for sid, lo, hi in pg_lineage(conn, session_id, self._lineages):
                mine = [v for v in wanted if lo <= v <= hi]
                if mine:
                    # Only the versions as the index condition: with a range beside them, a planner
                    # without statistics yet (a table just filled) reads the whole range instead.
                    found += select_records(
                        conn, "WHERE e.session_id = %s AND e.version = ANY(%s::bigint[])", (sid, mine)
                    )
        found.sort(key=lambda r: r.version)
        return self.with_counts(found)

    def first_event(self, session_id: str) -> RecordedEvent | None:
        if _absent(session_id):
            return None
        with self.snapshot() as conn:
            rows = select_records(conn, "WHERE e.session_id = %s ORDER BY e.version LIMIT 1", (session_id,))
        return self.with_counts(rows)[0] if rows else None

    def read_origins(self, session_id: str, *, newest: int | None = None) -> list[OriginItem]:
        if newest is not None and newest < 0:
            raise InvalidEventError(f"read_origins: newest must be 0 or more, not {newest}")
        select = (
            "SELECT position, version, type, schema_version, payload FROM events "
            "WHERE session_id = %s AND version BETWEEN %s AND %s "
        )
        rows: list[Any] = []
        if _absent(session_id):
            return []
        with self._snapshot() as conn:
            segments = pg_lineage(conn, session_id, self._lineages)
            for sid, lo, hi in segments if newest is None else reversed(segments):
                if newest is None:
                    rows += conn.execute(select + "ORDER BY version", (sid, lo, hi)).fetchall()
                elif len(rows) < newest:
                    more = conn.execute(
                        select + "ORDER BY version DESC LIMIT %s", (sid, lo, hi, newest - len(rows))
                    ).fetchall()
                    rows += more
        if newest is not None:
            rows.reverse()
        with gc_paused():
            return [origin_item(row) for row in rows]

    def version_at(self, session_id: str, position: int) -> int:
        if _absent(session_id):
            return 0
        with self.connection() as conn:
            row = conn.execute(
                "SELECT version FROM events WHERE session_id = %s AND position <= %s "
                "ORDER BY version DESC LIMIT 1",
                (session_id, min(position, _NO_LIMIT)),
            ).fetchone()
        return int(row[0]) if row else 0

    def read_tail(self, session_id: str, limit: int) -> list[RecordedEvent]:
        if limit < 0:
            raise InvalidEventError(f"read_tail: limit must be 0 or more, not {limit}")
        rows: list[RecordedEvent] = []
        limit = min(limit, _NO_LIMIT)
        if _absent(session_id):
            return rows
        with self.snapshot() as conn:
            for sid, lo, hi in reversed(pg_lineage(conn, session_id, self._lineages)):
                if len(rows) >= limit:
                    break
                rows += select_records(
                    conn,
                    "WHERE e.session_id = %s AND e.version BETWEEN %s AND %s "
                    "ORDER BY e.version DESC LIMIT %s",
                    (sid, lo, hi, limit - len(rows)),
                )
        rows.reverse()
        return self.with_counts(rows)

    def iter_after(
        self, position: int = 0, *, types: Sequence[str] | None = None, batch: int = 1000
    ) -> Iterator[RecordedEvent]:
        if types is not None and not types:
            return  # no types asked for: nothing matches
        type_filter = " AND e.type = ANY(%s)" if types else ""
        tail: tuple[Any, ...] = (list(types),) if types else ()
        last = position
        while True:
            with self.connection() as conn:
                chunk = select_records(
                    conn,
                    f"WHERE e.position > %s{type_filter} ORDER BY e.position LIMIT %s",
                    (last, *tail, int(batch)),
                )
            if not chunk:
                return
            yield from self.with_counts(chunk)
            last = chunk[-1].position

    def get_event(self, event_id: str) -> RecordedEvent:
        rows: list[RecordedEvent] = []
        if not _absent(event_id):
            with self.connection() as conn:
                rows = select_records(conn, "WHERE e.event_id = %s", (event_id,))
        if not rows:
            raise UnknownEventError(f"no event with id {event_id!r} in this store")
        return self.with_counts(rows)[0]

    def find_event(self, session_id: str, ref: str) -> RecordedEvent:
        ref = event_ref(ref)
        if _absent(ref):
            return the_event(session_id, ref, [])
        segment = "WHERE e.session_id = %s AND e.version BETWEEN %s AND %s "
        rows = self._segments_read(session_id, segment + "AND e.event_id = %s", (ref,))
        if not rows:
            rows = self._segments_read(
                session_id, segment + "AND left(e.event_id, %s) = %s LIMIT 3", (len(ref), ref)
            )
        return the_event(session_id, ref, rows)

    def head_version(self, session_id: str) -> int:
        with self.connection() as conn:
            return pg_head_version(conn, session_id)

    def head_position(self) -> int:
        with self.connection() as conn:
            row = conn.execute("SELECT max(position) FROM events").fetchone()
        return int(row[0] or 0) if row else 0

    def count_events(self) -> int:
        """The number of events in the store."""
        with self.connection() as conn:
            row = conn.execute("SELECT count(*) FROM events").fetchone()
        return int(row[0]) if row else 0

    def sessions(self) -> list[SessionSummary]:
        # The sums need every count: events still waiting for theirs are counted and stored first
        # (as SQLite's reads do), seen in the same statement (no round trip when none waits).
        for _ in range(3):
            with self.connection() as conn:
                rows = conn.execute(_SESSIONS).fetchall()
            if not any(row[8] for row in rows):
                return [SessionSummary(*row[:8]) for row in rows]
            self.catch_up_tokens()
        # Writers keep adding events faster than they are counted: these are counted in memory.
        with self.snapshot() as conn:
            rows = conn.execute(_SESSIONS).fetchall()
            waiting = select_records(conn, "WHERE e.tokens IS NULL ORDER BY e.position", ())
        extra: dict[str, int] = {}
        for record in self.with_counts(waiting):
            extra[record.session_id] = extra.get(record.session_id, 0) + (record.tokens or 0)
        return [
            SessionSummary(row[0], row[1], row[2], row[3] + extra.get(row[0], 0), *row[4:8]) for row in rows
        ]

    def get_blob(self, blob_id: str) -> Blob:
        row = None
        if not _absent(blob_id):
            with self.connection() as conn:
                row = conn.execute(
                    "SELECT id, size, codec, data FROM blobs WHERE id = %s", (blob_id,)
                ).fetchone()
        return blob_from_row(blob_id, row)

    # --- verifying -----------------------------------------------------------------------------

    def place_waiting(self) -> int:
        """Place rows committed but not yet placed in the order (store.pg_append does)."""
        return 0

    def verify(self, *, quick: bool = False) -> VerifyReport:
        """Check the immutability triggers (present and enabled), the hash chain and gapless
        positions, that every row decodes, every stored token count, and the content blobs.
        (``quick`` changes nothing here: PostgreSQL has no faster whole-database check to choose.)"""
        findings = Findings(VerifyReport())
        self.place_waiting()
        with self.snapshot() as conn:
            self._check_triggers(conn, findings)
            unplaced = conn.execute(f"SELECT count(*) FROM {EVENT_TABLE} WHERE position IS NULL").fetchone()
            if unplaced and unplaced[0]:
                findings.add(
                    None,
                    f"{unplaced[0]} events are stored but not placed in the global order (their writers "
                    "stopped before placing them): open the store for writing, e.g. `turnlog verify` "
                    "without a read-only role, to place them",
                )
            # (No count is ever missing below this: the first row without one says where it is.)
            counted = int((conn.execute(PG_COUNTED_THROUGH).fetchone() or (0,))[0])
            check = ChainCheck(
                findings, self.count_event_tokens, self.tokenizer, counted, self.salt, pg_hash_at(conn)
            )
            with conn.cursor(name="turnlog_verify_events") as cursor:
                cursor.itersize = 2000
                cursor.execute(
                    f"SELECT {EVENT_COLUMNS}, e.payload_digest, e.order_hash "
                    "FROM events e LEFT JOIN blobs b ON b.id = e.blob_id ORDER BY e.position"
                )
                for row in cursor:
                    check.row(row, row[8], row[14], row[15])
            with conn.cursor(name="turnlog_verify_blobs") as cursor:
                cursor.itersize = 200
                cursor.execute("SELECT id, size, codec, data FROM blobs ORDER BY id")
                for blob_id, size, codec, data in cursor:
                    if not blob_matches(blob_id, size, codec, data):
                        first = conn.execute(
                            "SELECT min(position) FROM events WHERE blob_id = %s", (blob_id,)
                        ).fetchone()
                        findings.add(
                            first[0] if first else None,
                            f"blob {blob_id[:12]}…: content does not match its sha256 (or its size)",
                        )
            for (pos,) in conn.execute(
                "SELECT e.position FROM events e LEFT JOIN blobs b ON b.id = e.blob_id "
                "WHERE e.blob_id IS NOT NULL AND b.id IS NULL ORDER BY e.position"
            ):
                findings.add(pos, f"position {pos}: its content blob is missing")
        return findings.finish()

    def _check_triggers(self, conn: Connection, findings: Findings) -> None:
        stored = {
            name: (table, enabled, function)
            for name, table, enabled, function in conn.execute(
                "SELECT t.tgname, c.relname, t.tgenabled, p.proname FROM pg_trigger t "
                "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
                "JOIN pg_proc p ON p.oid = t.tgfoid "
                "WHERE n.nspname = %s AND c.relname IN ('event_log', 'events', 'blobs') "
                "AND NOT t.tgisinternal",
                (self.schema,),
            )
        }
        for name, (table, _, function) in TRIGGERS.items():
            found = stored.get(name)
            if found is None:
                findings.add(
                    None, f"trigger {name} is missing: the log is no longer protected against changes"
                )
            elif found[0] != table or found[2] != function:
                findings.add(None, f"trigger {name} was altered: it is not the one turnlog created")
            elif found[1] == "D":
                findings.add(None, f"trigger {name} is disabled: the log is not protected against changes")
        for name in sorted(set(stored) - set(TRIGGERS)):
            findings.add(None, f"trigger {name} on the log is not one turnlog created")
