"""Appending to the log: the batch prepared and checked by the backend-neutral rules
(store.append_rules), hash-chained (store.chain) and inserted in one ``BEGIN IMMEDIATE``
transaction; a retried batch returns what was stored."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

from turnlog.store.append_rules import (
    INLINE_LIMIT,
    MAX_BATCH,
    MAX_CONTENT_BYTES,
    Prepared,
    Segments,
    StoredEventId,
    check_expected_head,
    check_semantics,
    chunks,
    fork_link,
    is_retry,
    prepare_event,
)
from turnlog.store.appender import BatchAppender
from turnlog.store.base import Expected, RecordedEvent
from turnlog.store.chain import GENESIS_HASH, INSERT_COLUMNS, Heads, link_batch, now
from turnlog.store.errors import StoreError
from turnlog.store.rows import gc_paused
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

    _heads_seen: tuple[int, str, int, str, int, str | None] | None = None
    """After this connection's last committed append: the database's data_version then, its
    session, and that session's and the store's heads (version, hash, position, order hash)."""
    _heads_pending: tuple[int, str, int, str, int, str | None] | None = None
    """The same, for the append in progress, kept once it commits."""

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
            with contextlib.suppress(StoreError):  # derived state only: see on_append
                hook(records)

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
        seen: tuple[int, str, int, str, int, str | None] | None = None,
    ) -> list[RecordedEvent]:
        """The append itself, inside the write transaction (``seen``: the heads this connection's
        last committed append left). Duplicate ids surface as StoredEventId
        from the insert (the UNIQUE index checks them), not from a lookup of every id first."""
        # The facts an append needs: the session's last version and hash, the store's last position
        # and order hash. This connection's last append left them; they still hold if no other
        # connection has committed since (SQLite's data_version counts those commits, not ours) —
        # else one statement reads them.
        changes = conn.execute("PRAGMA data_version").fetchone()[0]
        if seen is not None and seen[0] == changes and seen[1] == session_id:
            head, prev_hash, position, order = seen[2:]
        else:
            head, prev_hash, position, order = conn.execute(_HEADS, (session_id,)).fetchone()
            head = head or 0
        check_expected_head(session_id, expected_version, head)
        lookup = _Lookup(conn, self._lineages)
        new_session = head == 0
        if new_session:
            # A fork's own events continue its parent's versions and chain: the shared prefix keeps
            # the numbers it has in the parent, and nothing is copied.
            head, prev_hash = fork_link(lookup, session_id, prepared[0].event)
        check_semantics(lookup, session_id, head, prepared, new_session=new_session)
        batch = link_batch(
            session_id,
            prepared,
            Heads(head, prev_hash, position or 0, order or GENESIS_HASH),
            salt=self.salt,
            recorded_at=now(),
            times=times,
        )
        # One row (a durable append's usual batch) goes through execute: executemany's iteration
        # costs more than the row itself.
        blobs = list(batch.blobs.values())
        if len(blobs) == 1:
            conn.execute(_INSERT_BLOB, blobs[0])
        elif blobs:
            conn.executemany(_INSERT_BLOB, blobs)
        try:
            if len(batch.rows) == 1:
                conn.execute(_INSERT, batch.rows[0])
            else:
                conn.executemany(_INSERT, batch.rows)
        except sqlite3.IntegrityError as exc:
            if "events.event_id" in str(exc):
                raise StoredEventId from None
            raise
        last = batch.records[-1]
        self._heads_pending = (
            changes,
            session_id,
            last.version,
            last.hash,
            last.position,
            batch.rows[-1][13],
        )
        return batch.records

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
