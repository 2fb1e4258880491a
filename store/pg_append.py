"""Appending to a PostgreSQL store: the batch prepared and checked by the backend-neutral rules
(store.append_rules), hash-chained (store.chain) and inserted in one transaction; it returns once the
batch is durable (``synchronous_commit=on``); a retried batch returns what was stored.

Writers of different sessions share no head (store.chain, v2): an append takes its session's
advisory lock (writers of one session take turns; versions and the session's chain stay whole) and
*tries* the placing lock (then the store's, the projections' lock, only for ``within_append`` hooks:
``turnlog.open_store`` registers none, and applies the projections at the next read). With the
placing lock (no other writer is placing rows: the common case of one writer), it places its rows in
the global order in its own transaction, after any committed rows still waiting: one transaction,
one commit (one prepared statement when the heads are known: store.pg_fast). Where other writers
were seen moving the order lately and the session's head is known, one call of a procedure has the
server place the batch after the order's head it reads under the placing lock, committing without
a flush, then wait for the flush in a transaction of its own (store.pg_sequenced): one round trip;
a one-statement try that found the order moved is followed by that call at once, and the calls go
on without tries while each finds the order moved since the writer's last append (a try would
lose a round trip, or hold the placing lock through its flush): the first that finds it where
the writer left it sends the next append back to the one statement. Otherwise, when
another writer holds the placing lock, the rows are inserted unplaced and committed side by side
with the other writers', then placed right after with every other waiting row, without holding the
placing lock through a flush (store.pg_chain.place_durably: one flush makes the rows and their
placing durable)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NoReturn

import psycopg
import psycopg.errors
from psycopg.pq import TransactionStatus

from turnlog.store.append_rules import (
    Prepared,
    Segments,
    StoredEventId,
    check_expected_head,
    check_semantics,
    fork_link,
    is_retry,
    prepare_event,
)
from turnlog.store.appender import BatchAppender
from turnlog.store.base import Expected, RecordedEvent
from turnlog.store.chain import GENESIS_HASH, INSERT_COLUMNS, Heads, LinkedBatch, link_batch, now
from turnlog.store.errors import InvalidEventError, StoreError, VersionConflictError
from turnlog.store.pg_batch import StatementBatch
from turnlog.store.pg_chain import FLUSH, place_durably, place_unplaced, placed_rows, queue_placing
from turnlog.store.pg_connection import Connection, suppress_closed, translate, translated
from turnlog.store.pg_fast import (
    COPY_ROWS,
    FAST_FAIL,
    LOCKED_MARK,
    MAX_FAST_ROWS,
    Locked,
    NeedsRead,
    NoReads,
    Stale,
    Tips,
    copy_rows,
    insert_placed,
    is_stale,
)
from turnlog.store.pg_reading import pg_lineage, select_records
from turnlog.store.pg_schema import EVENT_TABLE
from turnlog.store.pg_sequenced import insert_sequenced
from turnlog.store.pg_tokens import PgTokenCounting
from turnlog.store.rows import gc_paused

# The session's last version and hash (placed or not), the last placed position and its order
# hash, and whether committed rows wait to be placed: read after the locks, so up to date.
_HEADS = (
    f"SELECT s.version, s.hash, g.position, g.order_hash, "
    f"EXISTS (SELECT 1 FROM {EVENT_TABLE} WHERE position IS NULL) FROM (SELECT 1) AS one "
    f"LEFT JOIN (SELECT version, hash FROM {EVENT_TABLE} WHERE session_id = %s "
    "ORDER BY version DESC LIMIT 1) AS s ON TRUE "
    f"LEFT JOIN (SELECT position, order_hash FROM {EVENT_TABLE} WHERE position IS NOT NULL "
    "ORDER BY position DESC LIMIT 1) AS g ON TRUE"
)
_INSERT_BLOB = "INSERT INTO blobs (id, size, codec, data) VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO NOTHING"
_INSERT_EVENT = f"INSERT INTO {EVENT_TABLE} ({INSERT_COLUMNS}) VALUES ({', '.join(['%s'] * 14)})"
_SESSION_LOCK = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"


def _try_locks(wanted: int) -> str:
    """The locks tried after the session's, up to ``wanted`` (0: none; 1: the placing lock; 2: and
    the store's, for the projections' rows in the append's transaction): the level taken, 0 when
    another writer is placing rows (then this one does not place in its transaction)."""
    if wanted == 0:
        return "0"
    if wanted == 1:
        return "CASE WHEN pg_try_advisory_xact_lock(%s) THEN 1 ELSE 0 END"
    return (
        "CASE WHEN pg_try_advisory_xact_lock(%s) "
        "THEN CASE WHEN pg_try_advisory_xact_lock(%s) THEN 2 ELSE 1 END ELSE 0 END"
    )


_TRY_LOCKS = {wanted: f"SELECT {_try_locks(wanted)}" for wanted in (0, 1, 2)}
# The first round trip's question: the session's head (every row, placed or not: versions only
# grow), then -2 when it is past the expected version (a conflict, found without any lock), -1 when
# another writer of the session holds its lock (not waited for here), else the locks as above.
_TRY_ALL_LOCKS = {
    wanted: "SELECT h.v, CASE WHEN coalesce(h.v, 0) > %s THEN -2 "
    f"WHEN pg_try_advisory_xact_lock(%s, hashtext(%s)) THEN {_try_locks(wanted)} ELSE -1 END "
    f"FROM (SELECT max(version) AS v FROM {EVENT_TABLE} WHERE session_id = %s) AS h"
    for wanted in (0, 1, 2)
}
# The same for a batch inserted unplaced (other writers keep moving the order): the session's lock
# and head only; the placing follows the commit (store.pg_chain.place_durably).
_FAST_SESSION_LOCK = (
    f"SELECT CASE WHEN pg_try_advisory_xact_lock(%s, hashtext(%s)) THEN 0 ELSE {FAST_FAIL} END"
)
_FAST_LOCKS = (
    "SELECT CASE WHEN pg_try_advisory_xact_lock(%s, hashtext(%s)) AND pg_try_advisory_xact_lock(%s) "
    f"THEN 0 ELSE {FAST_FAIL} END"
)
_FAST_LOCKS_ALL = (
    "SELECT CASE WHEN pg_try_advisory_xact_lock(%s, hashtext(%s)) AND pg_try_advisory_xact_lock(%s) "
    f"AND pg_try_advisory_xact_lock(%s) THEN 0 ELSE {FAST_FAIL} END"
)
_FAST_SESSION_HEAD = (
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM (SELECT version, hash FROM "
    f"{EVENT_TABLE} WHERE session_id = %s ORDER BY version DESC LIMIT 1) AS s "
    f"WHERE s.version = %s AND s.hash = %s) THEN 0 ELSE {FAST_FAIL} END"
)
_FAST_HEADS = (
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM (SELECT version, hash FROM "
    f"{EVENT_TABLE} WHERE session_id = %s ORDER BY version DESC LIMIT 1) AS s "
    "WHERE s.version = %s AND s.hash = %s) AND EXISTS (SELECT 1 FROM (SELECT position, order_hash "
    f"FROM {EVENT_TABLE} WHERE position IS NOT NULL ORDER BY position DESC LIMIT 1) AS g "
    "WHERE g.position = %s AND g.order_hash = %s) "
    f"AND NOT EXISTS (SELECT 1 FROM {EVENT_TABLE} WHERE position IS NULL) THEN 0 ELSE {FAST_FAIL} END"
)
_NOT_STORED = "nothing of the batch was stored; retry it"
_PLACING = (
    "the batch is stored but not yet placed in the global order; the next append or "
    "`turnlog verify` places it"
)
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
            f"SELECT session_id, version, type FROM {EVENT_TABLE} WHERE event_id = %s", (event_id,)
        ).fetchone()
        return None if row is None else (row[0], int(row[1]), row[2])

    def lineage(self, session_id: str) -> Segments:
        return pg_lineage(self.conn, session_id, self.cache, EVENT_TABLE)

    def head_version(self, session_id: str) -> int:
        if "\x00" in session_id:
            return 0
        row = self.conn.execute(
            f"SELECT max(version) FROM {EVENT_TABLE} WHERE session_id = %s", (session_id,)
        ).fetchone()
        return int(row[0] or 0) if row else 0

    def hash_of(self, session_id: str, version: int) -> str | None:
        row = self.conn.execute(
            f"SELECT hash FROM {EVENT_TABLE} WHERE session_id = %s AND version = %s", (session_id, version)
        ).fetchone()
        return None if row is None else str(row[0])


class PgAppendingStore(BatchAppender, PgTokenCounting):
    """The appends to the log."""

    def has_within_hooks(self) -> bool:
        """Whether hooks run inside the append's transaction (store.pg_storage)."""
        return False

    def run_within(
        self, conn: Connection, records: list[RecordedEvent], batch: StatementBatch | None = None
    ) -> None:
        """Run them (store.pg_storage); their statements join ``batch`` when given."""

    def _store_name(self) -> str:
        return self.where

    def _prepare(self, event: Any, index: int) -> Prepared:
        # Counted before the transaction, so no lock is held while the tokenizer runs; after the
        # commit when the store defers counts (store.pg_tokens) and no hook inside the transaction
        # needs them.
        inline = self.token_counting == "inline" or self.has_within_hooks()
        return prepare_event(event, index, self.tokenizer, self.count_event_tokens if inline else None)

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
        """One transaction: the locks, the heads, check, insert (placed when the store's lock was
        free), commit; then, for rows inserted unplaced, their placing. Any failure before the commit
        rolls it all back; a lost connection says whether the batch may have been stored. When this
        store object knows the heads its last append left (its own session's and the order's), the
        whole transaction is one round trip (:meth:`_planned`)."""
        with self.connection() as conn:
            planned = self._planned(conn, session_id, prepared, expected_version, times)
            if planned is not None:
                insert, batch, within, heads = planned
                try:
                    if insert is None and batch.rows[-1][0] is None:  # store.pg_sequenced
                        return self._with_positions(
                            session_id, batch, self._insert_sequenced(conn, batch, heads)
                        )
                    if insert is None:  # one prepared statement (store.pg_fast)
                        alone = self._insert_placed(conn, batch, heads)
                    elif batch.rows[-1][0] is None:  # inserted unplaced, and placed in the same query
                        return self._with_positions(
                            session_id, batch, self._commit_placing(conn, insert, batch)
                        )
                    else:
                        alone = self._commit(conn, insert, batch, within, committing=not within)
                except Stale as stale:
                    self._tips().missed(session_id)  # another writer appended
                    if insert is None and batch.rows[-1][0] is not None and not isinstance(stale, Locked):
                        # Another writer moved the order: the server places the same rows after the
                        # order's head it reads (their session chain does not depend on it), in one
                        # call; the long way only when the session's head moved too, or when a lock
                        # was taken (the long way commits without waiting for the placing lock).
                        try:
                            return self._with_positions(
                                session_id, batch, self._insert_sequenced(conn, batch, heads)
                            )
                        except Stale:
                            pass
                else:
                    self._tips().misses = 0
                    self._tips().remember(session_id, batch)
                    return list(batch.records) if alone else batch.records
            try:
                # The locks tried and the heads read in one round trip; only when another writer of
                # the session holds its lock does the append queue for it (after a quick look at the
                # head: versions only grow, so a head already past the expected one is a conflict
                # whatever happens next, found without waiting behind the other writers).
                expected = expected_version if isinstance(expected_version, int) else None
                # Where other writers were seen moving the order, the rows go in unplaced and are
                # placed after the commit, with the others' (store.pg_chain.place_durably): a writer
                # placing in its own transaction would hold the placing lock through its flush.
                wanted = 0 if self._tips().misses else 2 if self.has_within_hooks() else 1
                locks, heads_row = self._begin(conn, session_id, expected, wanted)
                placing = locks >= 1
                head, prev_hash, position, order, waiting = heads_row or (None, None, None, None, False)
                head = int(head or 0)
                check_expected_head(session_id, expected_version, head)
                lookup = _Lookup(conn, self._lineages)
                new_session = head == 0
                if new_session:
                    # A fork's own events continue its parent's versions and chain (nothing is copied).
                    head, prev_hash = fork_link(lookup, session_id, prepared[0].event)
                if placing and waiting:
                    # Rows another writer committed wait for their place: theirs come first.
                    position, order, _ = place_unplaced(conn, self.place_key)
                with gc_paused():
                    check_semantics(lookup, session_id, head, prepared, new_session=new_session)
                    heads = Heads(
                        head,
                        prev_hash,
                        (int(position or 0)) if placing else None,
                        order or GENESIS_HASH,
                    )
                    batch = link_batch(
                        session_id, prepared, heads, salt=self.salt, recorded_at=now(), times=times
                    )
            except BaseException as exc:
                self._failed(conn, exc, committing=False)
            within = locks == 2 and self.has_within_hooks()
            alone = self._commit(conn, StatementBatch(conn), batch, within, committing=not within)
            if placing:
                self._tips().remember(session_id, batch)
                # Records that are not the list the hooks were given tell the catch-up after the
                # commit that their rows did not commit (projections.materialize: it redoes them).
                return list(batch.records) if alone else batch.records
            return self._placed(conn, session_id, batch)

    def _placed(self, conn: Connection, session_id: str, batch: LinkedBatch) -> list[RecordedEvent]:
        """A batch committed unplaced, placed now (with whatever else waits), durably."""
        try:
            placed = place_durably(conn, self.place_key, [r.event_id for r in batch.records])
        except psycopg.Error as exc:
            self._tips().forget(session_id)
            raise translated(exc, self.where, _PLACING) from exc
        return self._with_positions(session_id, batch, placed)

    def _with_positions(
        self, session_id: str, batch: LinkedBatch, placed: tuple[int, str, dict[str, int]]
    ) -> list[RecordedEvent]:
        last, order, positions = placed
        records = [replace(r, position=positions[r.event_id]) for r in batch.records]
        self._tips().placed(session_id, records[-1], (last, order))
        return records

    def _commit_placing(
        self, conn: Connection, insert: StatementBatch, batch: LinkedBatch
    ) -> tuple[int, str, dict[str, int]]:
        """Queue the unplaced inserts, COMMIT and the placing with its flush (store.pg_chain:
        queue_placing) after what ``insert`` holds, and send them: one round trip. A failure before
        the COMMIT stores nothing (Stale, StoredEventId as in :meth:`_commit`); a lost connection
        may have stored the batch, unplaced or placed (a retry finds it; the next append or verify
        places what waits)."""
        try:
            insert.execute("SET LOCAL synchronous_commit = off")  # the placing's flush covers it
            self._queue_rows(conn, insert, batch)
            insert.execute("COMMIT")
            placed = queue_placing(insert, self.place_key, [r.event_id for r in batch.records])
            insert.send()
            return placed_rows(placed.fetchall())
        except BaseException as exc:
            self._tips().forget(batch.records[0].session_id)
            self._failed(conn, exc, committing=True)

    def _commit(
        self, conn: Connection, insert: StatementBatch, batch: LinkedBatch, within: bool, *, committing: bool
    ) -> bool:
        """Queue the inserts (after what ``insert`` holds already), the projections' rows when
        ``within``, and the COMMIT, and send them: one round trip. Returns whether the events
        committed alone (the projections' part failed and was rolled back); raises the StoreError
        of a failure (StoredEventId for an event id already stored; Stale when a one-round-trip
        append found the heads moved)."""
        try:
            if batch.rows[-1][0] is None:
                # Unplaced rows are seen by no reader, and the placing's flush (store.pg_chain:
                # place_durably, before the append returns) makes them durable with it: one flush.
                insert.execute("SET LOCAL synchronous_commit = off")
            self._queue_rows(conn, insert, batch)
            if not within:
                insert.execute("COMMIT")
                insert.send()
                return False
            # The projections' rows in the same transaction (one commit), in a savepoint, their
            # statements joining the inserts' round trip (a read of theirs would send them first).
            # A failure found there may be the inserts' own: then the savepoint does not exist, and
            # the inserts' error is raised. A failure of the projections' rolls the savepoint back
            # and commits the events alone (the catch-up redoes them).
            insert.execute("SAVEPOINT turnlog_within")
            try:
                self.run_within(conn, batch.records, insert)
                insert.execute("RELEASE SAVEPOINT turnlog_within")
                insert.execute("COMMIT")
                committing = True
                insert.send()
                return False
            except Exception as exc:
                if conn.closed or conn.info.transaction_status == TransactionStatus.IDLE:
                    raise  # lost (the message says whether it may be stored), or committed
                first = insert.errors[0] if insert.errors else exc
                committing = False
                if is_stale(first):
                    raise first from None
                try:
                    conn.execute("ROLLBACK TO SAVEPOINT turnlog_within")
                except psycopg.Error:
                    raise first from None  # the inserts failed: nothing is committed
                committing = True
                conn.execute("RELEASE SAVEPOINT turnlog_within; COMMIT")
                return True
        except BaseException as exc:
            self._failed(conn, exc, committing=committing)

    def _queue_rows(self, conn: Connection, insert: StatementBatch, batch: LinkedBatch) -> None:
        """Queue the batch's inserts on ``insert``; a large batch is sent first (what ``insert``
        holds, then its blobs) and its events copied (store.pg_fast.copy_rows), in the same
        transaction: statements queued after it follow in a round trip of their own."""
        if batch.blobs:
            insert.executemany(_INSERT_BLOB, list(batch.blobs.values()))
        if len(batch.rows) <= COPY_ROWS:
            insert.executemany(_INSERT_EVENT, batch.rows)
            return
        insert.send()
        copy_rows(conn, batch.rows)

    def _failed(self, conn: Connection, exc: BaseException, *, committing: bool) -> NoReturn:
        """Raise what ``exc`` means, the transaction rolled back (``committing``: the COMMIT had
        been sent, so the batch may be stored). Called in the ``except`` block that caught it."""
        if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
            suppress_closed(lambda: conn.execute("ROLLBACK"))
        if is_stale(exc):
            raise (Locked if LOCKED_MARK in str(exc) else Stale) from None
        if (
            isinstance(exc, psycopg.errors.UniqueViolation)
            and exc.diag.constraint_name == "events_event_id_key"
        ):
            raise StoredEventId from None
        if isinstance(exc, psycopg.Error):
            raise translated(exc, self.where, _MAYBE_STORED if committing else _NOT_STORED) from exc
        raise exc

    def _insert_placed(self, conn: Connection, batch: LinkedBatch, heads: Heads) -> bool:
        """The one-statement append of a batch placed in its own transaction (store.pg_fast);
        False: the events committed with their projections' rows (there are none here)."""
        try:
            insert_placed(
                conn,
                batch,
                (self.session_lock_space, batch.records[0].session_id, self.place_key),
                (heads.version, heads.prev_hash),
                (heads.position or 0, heads.order_hash),
            )
        except BaseException as exc:
            self._failed(conn, exc, committing=True)
        return False

    def _insert_sequenced(
        self, conn: Connection, batch: LinkedBatch, heads: Heads
    ) -> tuple[int, str, dict[str, int]]:
        """The contended append in one call, placed by the server, then flushed (store.pg_sequenced).
        A failed check raises Stale (nothing stored). Whether other writers had moved the order
        since this object's last append decides whether the next one tries the one statement
        (store.pg_fast.Tips.settled)."""
        known = self._tips().order
        try:
            placed = insert_sequenced(
                conn,
                batch,
                (self.session_lock_space, batch.records[0].session_id, self.place_key),
                (heads.version, heads.prev_hash),
            )
        except BaseException as exc:
            self._tips().forget(batch.records[0].session_id)
            self._failed(conn, exc, committing=True)
        first = placed[0] - len(batch.records) + 1
        self._tips().settled(known is None or first != known[0] + 1)
        return placed

    def _tips(self) -> Tips:
        found: Tips | None = vars(self).get("_known_tips")
        if found is None:
            found = self.__dict__.setdefault("_known_tips", Tips())
        return found

    def _planned(
        self,
        conn: Connection,
        session_id: str,
        prepared: list[Prepared],
        expected_version: Expected,
        times: list[str] | None,
    ) -> tuple[StatementBatch | None, LinkedBatch, bool, Heads] | None:
        """The one-round-trip append, when this store object's last append of the session left its
        heads (the session's version and hash, the order's position and hash) and the batch's
        checks need nothing read: BEGIN, the locks tried and the heads compared by the server (a
        statement that fails unless all the locks were free and the heads are those: then the
        append takes the long way), then the inserts, the projections' rows and COMMIT, queued
        together. Where other writers keep moving the order (the last tries missed), the batch is
        checked against the session's head only and placed by the server (store.pg_sequenced; a
        batch over MAX_FAST_ROWS: inserted unplaced and placed after the commit).
        None when it cannot be tried."""
        tips = self._tips()
        session, order = tips.sessions.get(session_id), tips.order
        if session is None:
            return None
        head, prev_hash = session
        placing = order is not None and tips.ready()
        if not placing and not tips.misses:
            return None  # the order is not known, and nothing says other writers move it
        position, order_hash = order if placing and order is not None else (None, GENESIS_HASH)
        try:
            check_expected_head(session_id, expected_version, head)
            with gc_paused():
                check_semantics(NoReads(self._lineages), session_id, head, prepared, new_session=False)
        except (NeedsRead, StoreError):
            return None  # the long way reads what it needs, and raises what is wrong
        within = placing and self.has_within_hooks()
        heads = Heads(head, prev_hash, position, order_hash)
        with gc_paused():
            batch = link_batch(session_id, prepared, heads, salt=self.salt, recorded_at=now(), times=times)
        if placing and not within and len(prepared) <= MAX_FAST_ROWS:
            return None, batch, False, heads  # one prepared statement (store.pg_fast)
        if not placing and len(prepared) <= MAX_FAST_ROWS:
            return None, batch, False, heads  # placed by the server (store.pg_sequenced)
        insert = StatementBatch(conn)
        insert.execute("BEGIN")
        if not placing:
            insert.execute(_FAST_SESSION_LOCK, (self.session_lock_space, session_id))
            insert.execute(_FAST_SESSION_HEAD, (session_id, head, prev_hash))
            return insert, batch, False, heads
        if within:
            insert.execute(
                _FAST_LOCKS_ALL, (self.session_lock_space, session_id, self.place_key, self.lock_key)
            )
        else:
            insert.execute(_FAST_LOCKS, (self.session_lock_space, session_id, self.place_key))
        insert.execute(_FAST_HEADS, (session_id, head, prev_hash, position, order_hash))
        return insert, batch, within, heads

    def _begin(
        self, conn: Connection, session_id: str, expected: int | None, wanted: int
    ) -> tuple[int, tuple[Any, ...] | None]:
        """BEGIN, the locks and the heads: which locks were taken (0: the session's only; 1: and
        the placing lock; 2: and the store's; none past ``wanted`` is tried) and the heads, read
        after the locks (so up to date).
        One round trip, unless another writer of the session holds its lock: then a second one
        queues for it. A head already past ``expected`` is a conflict found before any lock is
        taken or waited for (VersionConflictError)."""
        keys = (self.place_key, self.lock_key)[:wanted]
        first = StatementBatch(conn)
        first.execute("BEGIN")
        tried = first.execute(
            _TRY_ALL_LOCKS[wanted], (expected, self.session_lock_space, session_id, *keys, session_id)
        )
        heads = first.execute(_HEADS, (session_id,))
        first.send()
        head_now, locks = tried.fetchone() or (None, -1)
        if locks == -2 and expected is not None:
            conn.execute("ROLLBACK")
            raise VersionConflictError(session_id, expected, int(head_now or 0))
        if locks >= 0:
            return int(locks), heads.fetchone()
        # Another writer of the session is appending: queue for its lock, in the same transaction
        # (nothing is held yet), then try the others and read the heads again.
        second = StatementBatch(conn)
        second.execute(_SESSION_LOCK, (self.session_lock_space, session_id))
        tried = second.execute(_TRY_LOCKS[wanted], keys)
        heads = second.execute(_HEADS, (session_id,))
        second.send()
        return int((tried.fetchone() or (0,))[0]), heads.fetchone()

    def _place(self, conn: Connection, event_ids: list[str]) -> tuple[int, dict[str, int]]:
        """Place the committed unplaced rows under the placing lock, durably (store.pg_chain);
        returns the last position placed (0 for none) and the positions of ``event_ids``."""
        last, _, positions = place_durably(conn, self.place_key, event_ids)
        return last, positions

    def place_waiting(self) -> int:
        """Place rows whose writer committed them but stopped before placing them (it was killed, or
        lost its connection); returns the last position placed, 0 when none waited."""
        if getattr(self, "refuse_appends", False):
            return 0
        with self.connection() as conn:
            waiting = conn.execute(f"SELECT EXISTS (SELECT 1 FROM {EVENT_TABLE} WHERE position IS NULL)")
            if not (waiting.fetchone() or (False,))[0]:
                return 0
            with translate(self.where):
                last, _ = self._place(conn, [])
        return last

    def _already_stored(
        self, conn: Connection, session_id: str, prepared: list[Prepared]
    ) -> list[RecordedEvent] | None:
        ids = [p.event.event_id for p in prepared]
        found: dict[str, tuple[Any, ...]] = {
            row[0]: row
            for row in conn.execute(
                "SELECT event_id, session_id, type, payload, blob_id, position IS NULL "
                f"FROM {EVENT_TABLE} WHERE event_id = ANY(%s)",
                (ids,),
            )
        }
        if not is_retry(found, session_id, prepared):
            return None
        if any(row[5] for row in found.values()):  # stored, but its writer stopped before placing it
            self._place(conn, [])
        else:
            # Placed, maybe by a placing not flushed yet (store.pg_chain): durable before it is returned.
            conn.execute(f"BEGIN; {FLUSH}; COMMIT")
        by_id = {r.event_id: r for r in select_records(conn, "WHERE e.event_id = ANY(%s)", (ids,))}
        return [by_id[event_id] for event_id in ids]
