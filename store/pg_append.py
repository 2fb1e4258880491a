"""Appending to a PostgreSQL store: the batch prepared and checked by the backend-neutral rules
(store.append_rules), hash-chained (store.chain) and inserted in one transaction, durable at its
commit (``synchronous_commit=on``); a retried batch returns what was stored.

The chain hashes the previous event of the whole store, so appends serialize: each takes the
store's transaction-level advisory lock before it reads the head, and holds it through its insert
and commit. Positions are assigned under that lock, so they have no gaps. (Issue 17 item 3
replaces this global chain by per-session chains and a sequencer that stamps the global order after
commit, so that writers run side by side; that is not done here.)"""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg.errors
from psycopg.pq import TransactionStatus

from turnlog.store.append_rules import (
    Prepared,
    Segments,
    StoredEventId,
    check_expected_head,
    check_semantics,
    fork_base,
    is_retry,
    prepare_event,
)
from turnlog.store.appender import BatchAppender
from turnlog.store.base import Expected, RecordedEvent
from turnlog.store.chain import GENESIS_HASH, link_batch, now
from turnlog.store.errors import InvalidEventError, VersionConflictError
from turnlog.store.pg_connection import Connection, suppress_closed, translated
from turnlog.store.pg_reading import PgReadingStore, pg_head_version, pg_lineage, select_records
from turnlog.store.rows import gc_paused

_HEAD = (
    "SELECT (SELECT coalesce(max(version), 0) FROM events WHERE session_id = %s), "
    "(SELECT position FROM events ORDER BY position DESC LIMIT 1), "
    "(SELECT hash FROM events ORDER BY position DESC LIMIT 1)"
)
_INSERT_BLOB = "INSERT INTO blobs (id, size, codec, data) VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO NOTHING"
_INSERT_EVENT = (
    "INSERT INTO events (position, session_id, version, event_id, type, schema_version, payload, "
    "blob_id, tokens, recorded_at, prev_hash, hash) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
_NOT_STORED = "nothing of the batch was stored; retry it"
_MAYBE_STORED = (
    "the batch was stored whole or not at all: retry it with the same event ids (a batch already "
    "stored is returned, not stored twice)"
)


class _Lookup:
    """The append rules' questions (store.append_rules.EventLookup), asked in the append's transaction."""

    __slots__ = ("cache", "conn")

    def __init__(self, conn: Connection, cache: dict[str, Segments]) -> None:
        self.conn = conn
        self.cache = cache

    def event_facts(self, event_id: str) -> tuple[str, int, str] | None:
        if "\x00" in event_id:  # no stored id holds one (PostgreSQL text cannot)
            return None
        row = self.conn.execute(
            "SELECT session_id, version, type FROM events WHERE event_id = %s", (event_id,)
        ).fetchone()
        return None if row is None else (row[0], int(row[1]), row[2])

    def lineage(self, session_id: str) -> Segments:
        return pg_lineage(self.conn, session_id, self.cache)

    def head_version(self, session_id: str) -> int:
        return pg_head_version(self.conn, session_id)


class PgAppendingStore(BatchAppender, PgReadingStore):
    """The appends to the log."""

    def has_within_hooks(self) -> bool:
        """Whether hooks run inside the append's transaction (store.pg_storage)."""
        return False

    def run_within(self, conn: Connection, records: list[RecordedEvent]) -> None:
        """Run them (store.pg_storage)."""

    def _store_name(self) -> str:
        return self.where

    def _prepare(self, event: Any, index: int) -> Prepared:
        # Counted before the transaction: the lock is never held while tiktoken runs.
        return prepare_event(event, index, self.tokenizer, self.count_event_tokens)

    def _check_batch(self, prepared: list[Prepared]) -> None:
        for index, item in enumerate(prepared, 1):
            if "\x00" in item.event.event_id:
                raise InvalidEventError(
                    f"event {index} ({item.event.type}): event_id holds a NUL character, which "
                    "PostgreSQL text cannot store; use another id"
                )

    def _stored_batch(self, session_id: str, prepared: list[Prepared]) -> list[RecordedEvent] | None:
        # No snapshot needed: stored events never change, so each statement runs on its own.
        with self.connection() as conn:
            return self._already_stored(conn, session_id, prepared)

    def _append_batch(
        self, session_id: str, prepared: list[Prepared], expected_version: Expected, times: list[str] | None
    ) -> list[RecordedEvent]:
        """One transaction: lock, read the head, check, insert, commit. Any failure rolls it all
        back; a lost connection says whether the batch may have been stored."""
        committing = False
        with self.connection() as conn:
            if isinstance(expected_version, int):
                # Versions only grow: a head already past the expected one is a conflict whatever
                # happens next, found without queueing for the lock behind the other writers.
                head_now = pg_head_version(conn, session_id)
                if head_now > expected_version:
                    raise VersionConflictError(session_id, expected_version, head_now)
            try:
                with conn.pipeline():  # one round trip for the three
                    conn.execute("BEGIN")
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (self.lock_key,))
                    cursor = conn.execute(_HEAD, (session_id,))
                head, position, prev_hash = cursor.fetchone() or (0, None, None)
                head = int(head)
                check_expected_head(session_id, expected_version, head)
                lookup = _Lookup(conn, self._lineages)
                new_session = head == 0
                if new_session:
                    # A fork's own events continue its parent's versions (nothing is copied).
                    head = fork_base(lookup, session_id, prepared[0].event)
                with gc_paused():
                    check_semantics(lookup, session_id, head, prepared, new_session=new_session)
                    batch = link_batch(
                        session_id,
                        prepared,
                        head=head,
                        position=0 if position is None else int(position),
                        prev_hash=GENESIS_HASH if prev_hash is None else prev_hash,
                        recorded_at=now(),
                        times=times,
                    )
                # The inserts and the commit in one round trip: from here on, a lost connection
                # leaves the outcome unknown (whole or nothing), and the message says so.
                within = self.has_within_hooks()
                if not within:
                    committing = True
                with conn.pipeline(), conn.cursor() as insert:
                    if batch.blobs:
                        insert.executemany(_INSERT_BLOB, list(batch.blobs.values()))
                    insert.executemany(_INSERT_EVENT, batch.rows)
                    if not within:
                        conn.execute("COMMIT")
                if within:
                    # The projections' rows in the same transaction (one commit), in a savepoint:
                    # a failure there leaves the events to commit alone; the catch-up redoes it.
                    conn.execute("SAVEPOINT turnlog_within")
                    try:
                        self.run_within(conn, batch.records)
                    except Exception:
                        conn.execute("ROLLBACK TO SAVEPOINT turnlog_within")
                    conn.execute("RELEASE SAVEPOINT turnlog_within")
                    committing = True
                    conn.execute("COMMIT")
            except BaseException as exc:
                if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                    suppress_closed(lambda: conn.execute("ROLLBACK"))
                if (
                    isinstance(exc, psycopg.errors.UniqueViolation)
                    and exc.diag.constraint_name == "events_event_id_key"
                ):
                    raise StoredEventId from None
                if isinstance(exc, psycopg.Error):
                    raise translated(exc, self.where, _MAYBE_STORED if committing else _NOT_STORED) from exc
                raise
        return batch.records

    def _already_stored(
        self, conn: Connection, session_id: str, prepared: list[Prepared]
    ) -> list[RecordedEvent] | None:
        ids = [p.event.event_id for p in prepared]
        found: dict[str, tuple[Any, ...]] = {
            row[0]: row
            for row in conn.execute(
                "SELECT event_id, session_id, type, payload, blob_id FROM events WHERE event_id = ANY(%s)",
                (ids,),
            )
        }
        if not is_retry(found, session_id, prepared):
            return None
        by_id = {r.event_id: r for r in select_records(conn, "WHERE e.event_id = ANY(%s)", (ids,))}
        return [by_id[event_id] for event_id in ids]
