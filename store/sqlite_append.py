"""Appending to the log: the batch prepared and checked by the backend-neutral rules
(store.append_rules), hash-chained (store.chain) and inserted in one ``BEGIN IMMEDIATE``
transaction; a retried batch returns what was stored."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from turnlog.store.append_rules import (
    FREE_OF_RULES,
    INLINE_LIMIT,
    MAX_BATCH,
    MAX_CONTENT_BYTES,
    Prepared,
    Segments,
    StoredEventId,
    append_or_stored,
    check_arguments,
    check_expected_head,
    check_semantics,
    chunks,
    fork_link,
    is_retry,
    prepare_event,
)
from turnlog.store.appender import BatchAppender
from turnlog.store.base import ANY, NO_SESSION, Expected, RecordedEvent
from turnlog.store.chain import GENESIS_HASH, INSERT_COLUMNS, EventRow, Heads, link_batch, link_one, now
from turnlog.store.errors import InvalidEventError, StoreError, UnknownEventError, VersionConflictError
from turnlog.store.events import Event
from turnlog.store.rows import gc_paused
from turnlog.store.sqlite_connection import WAL_CHECK_EVERY, translated
from turnlog.store.sqlite_reading import ReadingStore, head_version_of, lineage_of

__all__ = ["INLINE_LIMIT", "MAX_BATCH", "MAX_CONTENT_BYTES", "AppendingStore"]

_HEADS = (
    "SELECT s.version, s.hash, g.position, g.order_hash FROM (SELECT 1) "
    "LEFT JOIN (SELECT version, hash FROM events WHERE session_id = ? "
    "ORDER BY version DESC LIMIT 1) s ON TRUE "
    "LEFT JOIN (SELECT position, order_hash FROM events ORDER BY position DESC LIMIT 1) g ON TRUE"
)
_INSERT = f"INSERT INTO events ({INSERT_COLUMNS}) VALUES ({', '.join('?' * 14)})"
_INSERT_BLOB = "INSERT OR IGNORE INTO blobs (id, size, codec, data) VALUES (?, ?, ?, ?)"


_Seen = tuple[str, int, str, int, str]
"""The heads an append left: its session, the session's version and hash, the store's position and
order hash."""


def _raising(refused: BaseException) -> Callable[[], list[RecordedEvent]]:
    """An append attempt that was refused: raises what it raised (for append_or_stored)."""

    def attempt() -> list[RecordedEvent]:
        raise refused

    return attempt


class _Moved(Exception):
    """Inside append: the insert met a stored position or session version (the heads it was made on
    were stale: another connection appended since)."""

    def __init__(self, error: sqlite3.IntegrityError) -> None:
        super().__init__(str(error))
        self.error = error


class _Lookup:
    """The append rules' questions (store.append_rules.EventLookup), asked on the write connection."""

    __slots__ = ("cache", "conn")

    def __init__(self, conn: sqlite3.Connection, cache: dict[str, Segments]) -> None:
        self.conn = conn
        self.cache = cache

    def event_facts(self, event_id: str) -> tuple[str, int, str] | None:
        row = self.conn.execute(
            "SELECT session_id, version, type FROM events WHERE event_id = ?", (event_id,)
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def lineage(self, session_id: str) -> Segments:
        return lineage_of(self.conn, session_id, self.cache)

    def head_version(self, session_id: str) -> int:
        return head_version_of(self.conn, session_id)

    def hash_of(self, session_id: str, version: int) -> str | None:
        row = self.conn.execute(
            "SELECT hash FROM events WHERE session_id = ? AND version = ?", (session_id, version)
        ).fetchone()
        return None if row is None else str(row[0])


class AppendingStore(BatchAppender, ReadingStore):
    """The appends to the log."""

    _heads_seen: _Seen | None = None
    """After this connection's last committed append: its session, and that session's and the
    store's heads (version, hash, position, order hash)."""
    _heads_pending: _Seen | None = None
    """The same, for the append in progress, kept once it commits."""
    _session_checked: str | None = None
    """The session id of the last append whose arguments were checked (its id is valid)."""

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: Expected = ANY,
        recorded_at: Sequence[str] | None = None,
        bounded: bool = True,
    ) -> list[RecordedEvent]:
        # One event, the durable append's usual batch, takes a short path: the same checks and the
        # same rows as BatchAppender.append, without the batch's structures (a durable append's
        # Python work is most of what it costs above the database's own INSERT and COMMIT).
        if len(events) != 1 or recorded_at is not None or self._within_append or self.readonly:
            return super().append(
                session_id,
                events,
                expected_version=expected_version,
                recorded_at=recorded_at,
                bounded=bounded,
            )
        if session_id != self._session_checked or not (
            expected_version is ANY
            or expected_version is NO_SESSION
            or (expected_version.__class__ is int and expected_version >= 0)
        ):
            check_arguments(session_id, 1, expected_version, None, bounded)
            self._session_checked = session_id
        # No within_append hook on this path: the counts are made first only when counting inline.
        count = self.count_event_tokens if self.token_counting == "inline" else None
        item = prepare_event(events[0], 1, self.tokenizer, count)
        try:
            records = self._append_one(session_id, item, expected_version)
        except (StoredEventId, VersionConflictError, InvalidEventError, UnknownEventError) as refused:
            # What append_or_stored does with a refused attempt: a retry returns what was stored.
            return append_or_stored(
                _raising(refused), lambda: self._stored_batch(session_id, [item]), self.path
            )[0]
        self._appended(records)
        return records

    def _append_one(self, session_id: str, item: Prepared, expected_version: Expected) -> list[RecordedEvent]:
        """:meth:`_append_batch` for one event and no within_append hook. With the heads this
        connection's last append kept and no blob to write, the INSERT is the whole transaction
        (SQLite's autocommit: the statement's own BEGIN and COMMIT, durable like any commit, as the
        floor's is): nothing is read in it, and another connection's append since makes the insert
        trigger refuse it (see _append_locked), when the append is made again in a ``BEGIN
        IMMEDIATE`` transaction on read heads. The -wal's size is looked at only now and then."""
        with self._lock:
            conn = self.conn
            seen, self._heads_seen = self._heads_seen, None  # known again once this commit succeeds
            records: list[RecordedEvent] | None = None
            if seen is not None and seen[0] == session_id and item.blob is None and not conn.in_transaction:
                try:
                    if item.event.__class__ in FREE_OF_RULES:
                        records = self._append_free(conn, session_id, item, expected_version, seen)
                    else:
                        records = self._append_after(
                            conn, session_id, [item], expected_version, None, seen[1:]
                        )
                except (VersionConflictError, InvalidEventError, UnknownEventError, _Moved):
                    seen = None  # perhaps stale: made again below, on the heads read
                except sqlite3.Error as exc:
                    raise translated(exc, self.path) from exc
            if records is None:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        records = self._append_locked(conn, session_id, [item], expected_version, None, seen)
                        conn.execute("COMMIT")
                    except BaseException:
                        if conn.in_transaction:  # SQLite may have rolled back already (disk full, I/O)
                            conn.execute("ROLLBACK")
                        raise
                except sqlite3.Error as exc:
                    raise translated(exc, self.path) from exc
            self._heads_seen, self._heads_pending = self._heads_pending, None
            if self._wal_file is not None:  # bound_wal(written)'s count, kept here: most commits add to it
                written = len(item.payload) + (item.blob[1] if item.blob else 0)
                commits, size = self._wal_unseen
                commits, size = commits + 1, size + written
                if commits < WAL_CHECK_EVERY and size * 8 < self.wal_size_limit and not self._wal_over:
                    self._wal_unseen = (commits, size)
                else:
                    self.bound_wal(written)
        return records

    def _append_free(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        item: Prepared,
        expected_version: Expected,
        seen: _Seen,
    ) -> list[RecordedEvent]:
        """:meth:`_append_after` on the kept heads, for an event no rule of check_semantics
        refers to (a message or a tool return: see append_rules.FREE_OF_RULES) and whose session
        has events (the kept heads are an append's): nothing to look up, so no lookup is made."""
        _, head, prev_hash, position, order = seen
        if expected_version is not ANY and expected_version != head:
            raise VersionConflictError(session_id, expected_version, head)  # NO_SESSION too: head > 0
        row, record = link_one(
            session_id, item, head, prev_hash, position, order, salt=self.salt, recorded_at=now()
        )
        self._insert(conn, _INSERT, row)
        placed = row[13]
        assert placed is not None  # placed in the order: its position was given
        self._heads_pending = (session_id, head + 1, record.hash, record.position, placed)
        return [record]

    def _counts_inline(self) -> bool:
        # A hook inside the append's transaction needs the counts: made before the write lock is
        # taken, they cost the lock nothing (see within_append).
        return self.token_counting == "inline" or bool(self._within_append)

    def _store_name(self) -> str:
        return self.path

    def _append_batch(
        self, session_id: str, prepared: list[Prepared], expected_version: Expected, times: list[str] | None
    ) -> list[RecordedEvent]:
        with self._lock:  # the heads kept are those of this connection's last commit, whatever the threads
            seen, self._heads_seen = self._heads_seen, None  # known again once this commit succeeds
            with self.atomic() as conn, gc_paused():
                records = self._append_locked(conn, session_id, prepared, expected_version, times, seen)
                for within in self._within_append:
                    within(conn, records)
            self._heads_seen, self._heads_pending = self._heads_pending, None
        return records

    def _stored_batch(self, session_id: str, prepared: list[Prepared]) -> list[RecordedEvent] | None:
        with self.reading() as conn:
            return self._already_stored(conn, session_id, prepared)

    def _appended(self, records: list[RecordedEvent]) -> None:
        for hook in self._after_append:
            # try/except, not contextlib.suppress: no context manager made for every durable append
            try:  # noqa: SIM105
                hook(records)
            except StoreError:  # derived state only: see on_append
                pass

    def _prepare(self, event: Any, index: int) -> Prepared:
        count = self.count_event_tokens if self._counts_inline() else None
        return prepare_event(event, index, self.tokenizer, count)

    def _append_locked(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        prepared: list[Prepared],
        expected_version: Expected,
        times: list[str] | None = None,
        seen: _Seen | None = None,
    ) -> list[RecordedEvent]:
        """The append itself, inside the write transaction (``seen``: the heads this connection's
        last committed append left). Duplicate ids surface as StoredEventId from the insert (the
        UNIQUE index checks them), not from a lookup of every id first."""
        # The facts an append needs: the session's last version and hash, the store's last position
        # and order hash. This connection's last append left them, and they still hold unless
        # another connection has appended since. Positions are dense and never reused, so such an
        # append took the position after ours, and the events table's insert trigger refuses ours:
        # the heads are read then (one statement), and the append made again on them. A refusal
        # by the checks made on the kept heads is made again on read ones too, before it stands
        # (another connection's events may have made the batch valid, e.g. a rewind's target).
        if seen is not None and seen[0] == session_id:
            try:
                return self._append_after(conn, session_id, prepared, expected_version, times, seen[1:])
            except (VersionConflictError, InvalidEventError, UnknownEventError, _Moved):
                pass
        head, prev_hash, position, order = conn.execute(_HEADS, (session_id,)).fetchone()
        heads = (head or 0, prev_hash or GENESIS_HASH, position or 0, order or GENESIS_HASH)
        try:
            return self._append_after(conn, session_id, prepared, expected_version, times, heads)
        except _Moved as moved:  # the heads were read in this transaction: nothing moved them
            raise moved.error from None

    def _append_after(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        prepared: list[Prepared],
        expected_version: Expected,
        times: list[str] | None,
        heads: tuple[int, str, int, str],
    ) -> list[RecordedEvent]:
        """The append after the given heads (version, hash, position, order hash); _Moved when the
        insert meets a stored position or session version (the heads were stale)."""
        head, prev_hash, position, order = heads
        check_expected_head(session_id, expected_version, head)
        # One message or tool return (a blob's, or a session's first) needs no lookup: no rule of
        # check_semantics applies to it, and it is no fork (only a session_started starts one).
        if len(prepared) != 1 or prepared[0].event.__class__ not in FREE_OF_RULES:
            lookup = _Lookup(conn, self._lineages)
            new_session = head == 0
            if new_session:
                # A fork's own events continue its parent's versions and chain: the shared prefix
                # keeps the numbers it has in the parent, and nothing is copied.
                head, prev_hash = fork_link(lookup, session_id, prepared[0].event)
            check_semantics(lookup, session_id, head, prepared, new_session=new_session)
        if len(prepared) == 1 and times is None:
            # A durable append's usual batch: one row, through execute (executemany's iteration
            # costs more than the row itself) and chain.link_one (no batch structures).
            item = prepared[0]
            row, record = link_one(
                session_id, item, head, prev_hash, position, order, salt=self.salt, recorded_at=now()
            )
            if item.blob is not None:
                conn.execute(_INSERT_BLOB, item.blob)
            self._insert(conn, _INSERT, row)
            assert row[13] is not None  # placed in the order: its position was given
            self._heads_pending = (session_id, record.version, record.hash, record.position, row[13])
            return [record]
        batch = link_batch(
            session_id,
            prepared,
            Heads(head, prev_hash, position, order),
            salt=self.salt,
            recorded_at=now(),
            times=times,
        )
        blobs = list(batch.blobs.values())
        if len(blobs) == 1:
            conn.execute(_INSERT_BLOB, blobs[0])
        elif blobs:
            conn.executemany(_INSERT_BLOB, blobs)
        self._insert(conn, _INSERT, batch.rows)
        last, placed = batch.records[-1], batch.rows[-1][13]
        assert placed is not None  # placed in the order: its position was given
        self._heads_pending = (session_id, last.version, last.hash, last.position, placed)
        return batch.records

    @staticmethod
    def _insert(conn: sqlite3.Connection, sql: str, rows: EventRow | list[EventRow]) -> None:
        """Insert one row (a tuple) or many (a list); StoredEventId for a stored event id, _Moved for
        a stored position or session version."""
        try:
            if isinstance(rows, tuple):
                conn.execute(sql, rows)
            else:
                conn.executemany(sql, rows)
        except sqlite3.IntegrityError as exc:
            text = str(exc)
            if "events.event_id" in text:
                raise StoredEventId from None
            if (
                "position or session version" in text
                or "events.position" in text
                or "events.session_id" in text
            ):
                raise _Moved(exc) from None
            raise

    def _already_stored(
        self, conn: sqlite3.Connection, session_id: str, prepared: list[Prepared]
    ) -> list[RecordedEvent] | None:
        ids = [p.event.event_id for p in prepared]
        found: dict[str, tuple[Any, ...]] = {}
        for chunk in chunks(ids, 500):
            marks = ",".join("?" * len(chunk))
            for row in conn.execute(
                "SELECT event_id, session_id, type, payload, blob_id FROM events "
                f"WHERE event_id IN ({marks})",
                chunk,
            ):
                found[row[0]] = row
        if not is_retry(found, session_id, prepared):
            return None
        by_id: dict[str, RecordedEvent] = {}
        for chunk in chunks(ids, 500):
            marks = ",".join("?" * len(chunk))
            by_id.update((r.event_id, r) for r in self._read(conn, f"WHERE e.event_id IN ({marks})", chunk))
        return [by_id[event_id] for event_id in ids]
