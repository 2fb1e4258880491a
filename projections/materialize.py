"""Materialized projections: rows kept in the store's file, advanced from a checkpoint that is
written in the same transaction as the rows, so a crash can never leave the two apart.

Each projection is deterministic: its rows after processing positions 1..P depend only on those
events. So catching up incrementally, rebuilding from zero and resuming from any checkpoint give the
same rows — the property the tests check for every projection.

Writers advance the rows after their commit. A store opened read-only never writes: what its file's
rows lack (they are behind the log, or missing) is folded into temp copies of the tables that shadow
them on its own connection (SQLite resolves an unqualified name in the temp schema first), so every
read sees the rows as a catch-up would have written them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from turnlog.projections.batch_types import TypeFilter, union_types
from turnlog.projections.checkpoints import HEAD as _HEAD
from turnlog.projections.checkpoints import POSITIONS as _POSITIONS
from turnlog.projections.checkpoints import (
    checkpoint_of,
    set_checkpoints,
    stored_checkpoint,
    watermark_and_checkpoints,
)
from turnlog.projections.projection import Projection, copy_rows, fork_of, quiet_catch_up, quieted
from turnlog.projections.rebuild_check import BATCH, RebuildCheck
from turnlog.store import RecordedEvent, Store
from turnlog.store.dialect import Connection, PostgresDialect, dialect_of
from turnlog.store.errors import LockBusy
from turnlog.store.log_ops import (
    PG_COUNTED_THROUGH,
    counted_through,
    counted_through_expr,
    given_counts,
    records_between,
    write_token_counts,
)
from turnlog.store.rows import gc_paused

DEFERRED = 2000
"""Records of this process's appends kept in memory for the next catch-up (see :meth:`Materializer.defer`);
past this many the next catch-up reads them from the log instead."""

MEMO_KEYS = 10_000
"""A projection's memo (see :meth:`Projection.apply_remembering`) holding more keys (sessions) than
this is dropped, and begins again from the rows."""


_CHECKPOINTS = """
CREATE TABLE {schema}.projection_checkpoints (
    name TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    position INTEGER NOT NULL
)
"""


Progress = Callable[[int, int], None]


class Materializer(RebuildCheck):
    """Keeps a set of projections up to date in the store's file."""

    def __init__(self, store: Store, projections: Iterable[Projection]) -> None:
        self.store = store
        self.projections = list(projections)
        self._ready = False
        self._current_sql: str | None = None
        """What :meth:`current_head` reads (made once: it depends on the dialect and projections)."""
        self._folded: dict[str, int] = {}
        """Read-only store: the projections shadowed in temp, and the position each has applied."""
        self._applied_within: Sequence[RecordedEvent] | None = None
        """The records of the last append whose projection rows were written in its own
        transaction (see :meth:`apply_within`): its catch-up after the commit has nothing to do."""
        self._memo: tuple[int, dict[str, dict[Any, Any]]] | None = None
        """On a server (``dialect.remote``): the projections' memos and the position whose rows
        they describe, made by an append of this process that committed (see :meth:`apply_within`)."""
        self._memo_pending: tuple[Sequence[RecordedEvent], dict[str, dict[Any, Any]]] | None = None
        """The memos of the last append's own apply, kept once its commit is known."""
        self._memo_lock = threading.Lock()
        self._deferred: list[RecordedEvent] = []
        """Records this process appended and committed, not yet applied (see :meth:`defer`)."""
        self._owed = False
        """Appends were deferred since the last catch-up of a read."""

    def prepare(self) -> None:
        """Create the projections' tables now (remaking those another version of the code wrote),
        rather than at the first catch-up: a writer that catches up only now and then (the
        LangGraph saver) pays it when it opens, as PostgresSaver's ``setup()``."""
        self._prepare()

    def _prepare(self) -> None:
        if self._ready:
            return
        if self.store.readonly:  # nothing to create: missing tables are folded in temp
            self._ready = True
            return
        with self.store.atomic() as conn:
            dialect = dialect_of(conn)
            dialect.create(conn, _CHECKPOINTS, dialect.main)
            for projection in self.projections:
                row = conn.execute(
                    "SELECT version FROM projection_checkpoints WHERE name = ?", (projection.name,)
                ).fetchone()
                if row is not None and row[0] != projection.version:
                    # Written by another version of the code: derived data, so start again.
                    for table in projection.tables:
                        conn.execute(f"DROP TABLE IF EXISTS {table}")
                    conn.execute("DELETE FROM projection_checkpoints WHERE name = ?", (projection.name,))
                projection.create(conn, dialect.main)
        self._ready = True

    def checkpoint(self, projection: Projection) -> int:
        """The last position the projection has applied."""
        self._prepare()
        with self.store.reading() as conn:
            return self._position(conn, projection)

    def _position(self, conn: Connection, projection: Projection) -> int:
        if not self.store.readonly:
            return checkpoint_of(conn, projection)
        folded = self._folded.get(projection.name)
        if folded is not None:
            return folded
        stored = stored_checkpoint(conn, projection)
        return 0 if stored is None else stored

    def apply_within(self, conn: Connection, records: Sequence[RecordedEvent]) -> bool:
        """Inside an append's transaction (a :meth:`store.SQLiteStore.within_append` hook): apply
        the records it just inserted, with their token counts, to every projection, so they
        commit together and the append costs one commit. Only when everything before them is
        counted and applied (else, or on any failure, nothing is written here and the catch-up
        after the commit does the work). Returns whether the rows were written."""
        self._applied_within = None
        if not self._ready or not records or any(r.tokens is None for r in records):
            return False  # the tables may not exist yet, or the counts were not made up front
        if dialect_of(conn).remote:
            return self._apply_within_remote(conn, records)
        start, end = records[0].position - 1, records[-1].position
        conn.execute("SAVEPOINT turnlog_projections")
        try:
            stored = dict(conn.execute("SELECT name, position FROM projection_checkpoints").fetchall())
            # (< start: a backend that counts before it stores already counts the batch itself.)
            behind = counted_through(conn) < start or any(
                stored.get(p.name) != start for p in self.projections
            )
            if not behind:
                write_token_counts(conn, (), end)  # the counts are in the rows: only the watermark moves
                for projection in self.projections:
                    types = projection.types
                    projection.apply(conn, [r for r in records if types is None or r.type in types])
                # Every checkpoint row exists, at this code's version (checked above): one statement.
                names = [p.name for p in self.projections]
                conn.execute(
                    "UPDATE projection_checkpoints SET position = ? "
                    f"WHERE name IN ({','.join('?' * len(names))})",
                    (end, *names),
                )
        except Exception:
            # Derived state only: the events commit without it, and the catch-up after the commit
            # does the work again (and reports what is not a StoreError, as it always has). A
            # failure that ended the whole transaction makes this rollback fail: then the append
            # cannot commit either, and says so.
            conn.execute("ROLLBACK TO turnlog_projections")
            conn.execute("RELEASE turnlog_projections")
            return False
        conn.execute("RELEASE turnlog_projections")
        if behind:
            return False
        self._applied_within = records
        return True

    def _apply_within_remote(self, conn: Connection, records: Sequence[RecordedEvent]) -> bool:
        """:meth:`apply_within` on a server, where each statement waiting for its answer costs a
        round trip: the writes are pipelined, and what the projections would read back is taken
        from the memos this process's last append left, when its rows are the ones still stored
        (its commit is the last one, and every checkpoint stands where it left them). Then the
        whole apply is one round trip; the checkpoints are moved only from where the memos expect
        them (else everything here is rolled back, and the catch-up after the commit works)."""
        start, end = records[0].position - 1, records[-1].position
        names = [p.name for p in self.projections]
        memos = self._take_memo(start)
        try:
            with dialect_of(conn).pipeline(conn):
                conn.execute("SAVEPOINT turnlog_projections")
                if memos is None:
                    stored = dict(
                        conn.execute("SELECT name, position FROM projection_checkpoints").fetchall()
                    )
                    if any(stored.get(name) != start for name in names):
                        conn.execute("RELEASE turnlog_projections")
                        return False
                    memos = {name: {} for name in names}
                # Moved only from where the memos expect them, else the statement fails (another
                # process rebuilt or reset them: the memos say nothing). That failure ends the
                # append's batch, which then commits the events alone and returns records that are
                # not these (store.pg_append), so the catch-up after the commit does the work. No
                # row count is read here: the append's RELEASE and COMMIT go in the same round trip.
                conn.execute(
                    _server_dialect(conn).expecting_rows(
                        "UPDATE projection_checkpoints SET position = ? "
                        f"WHERE name IN ({','.join('?' * len(names))}) AND position = ?",
                        len(names),
                    ),
                    (end, *names, start),
                )
                for projection in self.projections:
                    types = projection.types
                    projection.apply_remembering(
                        conn, [r for r in records if types is None or r.type in types], memos[projection.name]
                    )
        except Exception:
            # As in apply_within: derived state only, redone by the catch-up after the commit.
            conn.execute("ROLLBACK TO turnlog_projections")
            conn.execute("RELEASE turnlog_projections")
            return False
        # The savepoint is left for the append's commit to end (a RELEASE would be a round trip).
        with self._memo_lock:
            self._memo_pending = (records, memos)
        self._applied_within = records
        return True

    def _take_memo(self, start: int) -> dict[str, dict[Any, Any]] | None:
        """The memos, if they describe the rows as of ``start``; they are handed over (an apply
        changes them), whatever becomes of the append."""
        with self._memo_lock:
            kept, self._memo, self._memo_pending = self._memo, None, None
        return kept[1] if kept is not None and kept[0] == start else None

    def _remember(self, position: int, memos: dict[str, dict[Any, Any]]) -> None:
        """A catch-up of this process's own appends committed: its memos describe the rows as of
        ``position`` (the next one uses them when every checkpoint is still there)."""
        if all(len(memo) <= MEMO_KEYS for memo in memos.values()):
            with self._memo_lock:
                self._memo = (position, memos)

    def _keep_memo(self, appended: Sequence[RecordedEvent]) -> None:
        """The append that applied ``appended`` committed: its memos describe the stored rows."""
        with self._memo_lock:
            pending, self._memo_pending = self._memo_pending, None
            if pending is not None and pending[0] is appended:
                memos = pending[1]
                if all(len(memo) <= MEMO_KEYS for memo in memos.values()):
                    self._memo = (appended[-1].position, memos)

    def watched(self) -> list[str] | None:
        """The projections :meth:`current_head` checks; None when it answers None without a read
        (this process has not prepared their tables yet, or the store is read-only). For a read that
        makes the check with others in one statement (projections.context_start)."""
        if not self._ready or self.store.readonly:
            return None
        return [p.name for p in self.projections]

    def current_head(self, session_id: str) -> tuple[int, int] | None:
        """(the head position, ``session_id``'s version there) when every event is counted and
        applied, read with one statement in the caller's snapshot; None when a catch-up may have
        work (or this process has not prepared the tables yet): then call :meth:`catch_up`."""
        names = self.watched()
        if names is None:
            return None
        with self.store.reading() as conn:
            if self._current_sql is None:
                self._current_sql = (
                    f"SELECT (SELECT coalesce(max(position), 0) FROM events), {counted_through_expr(conn)}, "
                    "(SELECT coalesce(max(version), 0) FROM events WHERE session_id = ?), "
                    "min(position), count(*) FROM projection_checkpoints "
                    f"WHERE name IN ({', '.join('?' * len(names))})"
                )
            row = conn.execute(self._current_sql, (session_id, *names)).fetchone()
        head, counted, version, applied, known = (int(v or 0) for v in row)
        if counted < head or known < len(names) or applied < head:
            return None
        return head, version

    def defer(self, records: Sequence[RecordedEvent]) -> None:
        """After an append's commit (an ``on_append`` hook): leave its records for the next catch-up
        (normally the next read), so the durable append costs its own commit and nothing more — no
        token counting, no projection rows. Kept in memory while they follow on from each other and
        stay few (the next catch-up then counts and applies them without reading the log back);
        else dropped, and the catch-up reads them from the log like another process's appends."""
        with self._memo_lock:
            self._owed = True
            kept = self._deferred
            follows = not kept or kept[-1].position + 1 == records[0].position
            if follows and len(kept) + len(records) <= DEFERRED:
                kept.extend(records)
            else:
                self._deferred = list(records) if len(records) <= DEFERRED else []

    def owed(self) -> bool:
        """Whether this process's appends left work for the next catch-up (see :meth:`defer`): then
        a read knows, without a statement, that the projections are behind."""
        return self._owed

    def _take_deferred(self) -> list[RecordedEvent]:
        with self._memo_lock:
            kept, self._deferred, self._owed = self._deferred, [], False
        return kept

    def finish(self) -> None:
        """Catch up what this process's appends left for later (see :meth:`defer`), if anything:
        called when the store closes, so a writer leaves its file caught up for readers."""
        if self._owed:
            self.catch_up()

    def catch_up(
        self,
        *,
        through: int | None = None,
        progress: Progress | None = None,
        appended: Sequence[RecordedEvent] = (),
    ) -> int:
        """Apply every event not applied yet (up to ``through``), reading each batch of events once
        for all projections; return the last position applied. Token counts are caught up first,
        since projections use them. ``appended``: the records an append of this process just
        stored (a writer's catch-up after its commit), whose counts are made from memory."""
        if appended and appended is self._applied_within and through is None:
            self._keep_memo(appended)
            return appended[-1].position  # applied in the append's own transaction
        if quieted():
            return 0  # a projection's apply, reading the rows being written (quiet_catch_up)
        self._prepare()
        if self.store.readonly:
            return self._fold(through)
        reading = not appended  # a read's catch-up waits for the lock; a writer's after its commit need not
        if reading and through is None:
            appended = self._take_deferred()
        # A typical turn leaves a few uncounted events: count them now, outside the lock, and write
        # the counts in the same transaction as the projections (one commit per turn).
        pending: tuple[list[tuple[int, int]], int] | None
        after: int | None = None  # the counts are only the appended events': all before must be counted
        fresh: list[RecordedEvent] = []  # the appended records with their counts, applied without a read
        if appended and through is None:
            count = self.store.count_event_tokens
            fresh = [r if r.tokens is not None else replace(r, tokens=count(r.event)) for r in appended]
            # Only the counts made here are written (an append that counted inline stored its own).
            made = [
                (r.tokens or 0, r.position) for r, was in zip(fresh, appended, strict=True) if r is not was
            ]
            pending = (made, fresh[-1].position)
            after = fresh[0].position - 1
        else:
            # On a server whether any count waits is read with the checkpoints below (one round trip).
            server = getattr(self.store, "dialect", None)
            pending = None if server is not None and server.remote else self._pending_counts()
        # What the projections kept in memory of their rows at this process's last catch-up of its
        # own appends (handed over: an apply changes them; kept again once this commit succeeds).
        memos = self._take_memo(after) if after is not None else None
        if pending is None:
            with self.store.reading() as conn:
                prefetch = dialect_of(conn).remote and hasattr(conn, "prefetch")
                if prefetch:
                    # One round trip, its snapshot's end included (nothing else is read here).
                    conn.prefetch([(PG_COUNTED_THROUGH, ()), (_POSITIONS, ()), (_HEAD, ())], last=True)
                counted, kept = watermark_and_checkpoints(conn)
                waiting = prefetch and not fresh and counted < int(conn.execute(_HEAD).fetchone()[0])
                limit = counted if through is None else min(counted, through)
                checkpoints = [kept[p.name][0] if p.name in kept else 0 for p in self.projections]
            if waiting:
                pending = self._pending_counts()
            elif checkpoints and min(checkpoints) >= limit:
                return min(checkpoints)  # up to date: no write lock taken
        # What each projection kept in memory of its rows (see Projection.apply_remembering), carried
        # from one batch to the next of this catch-up: true of the rows while every checkpoint
        # stands where the last batch left them (``carried_at``), since the rows at a position are
        # the same whoever wrote them. A rebuild then reads its running state back once, not once
        # per batch and session.
        carried: dict[str, dict[Any, Any]] = {}
        carried_at = -1
        while True:
            try:
                # Not durable: the rows are remade from the log if a power loss takes them back.
                # The collector paused for the whole batch, its read included: a batch's records all
                # live until it ends, and a collection between the read and the applies walked them
                # all (about 5% of a rebuild's CPU, one collection a batch).
                with gc_paused(), self.store.atomic(durable=False, wait=reading or not fresh) as conn:
                    # Read inside the write lock: another process may have advanced them meanwhile.
                    if dialect_of(conn).remote and hasattr(conn, "prefetch"):
                        conn.prefetch([(PG_COUNTED_THROUGH, ()), (_POSITIONS, ())])  # one round trip
                    limit, kept = watermark_and_checkpoints(conn)
                    counts: tuple[list[tuple[int, int]], int] | None = None  # written with the rows below
                    if pending is not None:
                        if after is not None and limit < after:
                            # Older events still wait for their counts (a catch-up that did not run):
                            # the general path counts them all.
                            pending = None
                            break
                        counts, pending = pending, None
                        limit = max(limit, counts[1])
                    starts = {p.name: kept[p.name][0] if p.name in kept else 0 for p in self.projections}
                    if through is not None:
                        limit = min(limit, through)
                    start = min(starts.values(), default=limit)
                    end = min(limit, start + BATCH)
                    if end <= start:
                        if counts is not None:
                            write_token_counts(conn, *counts)
                        return start
                    wanted = union_types(p.types for p in self.projections if starts[p.name] < end)
                    remembering: dict[str, dict[Any, Any]] | None = None
                    own_turn = False
                    if fresh and start == after and end == fresh[-1].position:
                        records = [r for r in fresh if wanted is None or r.type in wanted]
                        if not dialect_of(conn).remote and all(
                            # (No row yet: nothing applied, its tables just made.)
                            kept.get(p.name, (0, p.version)) == (start, p.version)
                            for p in self.projections
                        ):
                            # Every row as of ``start``, which the memos describe when they were
                            # left at ``start`` (rows depend only on the events before: whoever
                            # wrote them since, they are the same); else the applies fill new ones.
                            remembering = memos or {p.name: {} for p in self.projections}
                            own_turn = True
                    else:
                        records = records_between(conn, start, end, wanted)
                        if counts is not None:  # read before the counts are written (just below)
                            records = given_counts(records, counts[0])
                    if remembering is None:
                        if any(own != carried_at for own in starts.values()) or any(
                            len(memo) > MEMO_KEYS for memo in carried.values()
                        ):
                            carried = {p.name: {} for p in self.projections}
                        remembering = carried
                    carried_at = -1  # until this batch commits
                    by_type = TypeFilter(records)
                    # On a server the writes go together up to each read (a no-op on SQLite); a
                    # failure rolls the whole transaction back, as before.
                    with dialect_of(conn).pipeline(conn):
                        if counts is not None:
                            # Queued with the projections' rows: on a server, no round trip of its own.
                            write_token_counts(conn, *counts)
                        moved = []
                        for projection in self.projections:
                            own = starts[projection.name]
                            if own >= end:
                                continue
                            projection.apply_remembering(
                                conn,
                                by_type.after(projection.types, own, start),
                                remembering[projection.name],
                            )
                            moved.append(projection)
                        set_checkpoints(conn, moved, end, kept)
                    # Let go of this batch before the next is read: one batch in memory, not two.
                    del records, by_type
                carried, carried_at = remembering, end
                if own_turn:
                    self._remember(end, remembering)
                if progress is not None:
                    progress(end, limit)
                if end >= limit:
                    return end  # no transaction just to find that nothing is left
            except LockBusy:
                # A writer just after its commit does not queue behind another process holding the
                # lock (placing rows, or catching up itself): that one, the next append or the next
                # read catches these events up.
                return after or 0
        return self.catch_up(through=through, progress=progress)

    def _pending_counts(self) -> tuple[list[tuple[int, int]], int] | None:
        """store.count_pending, or None: none wait, or a large backlog was stored in batches first."""
        pending = self.store.count_pending(limit=BATCH)
        if pending is not None and len(pending[0]) >= BATCH:
            self.store.catch_up_tokens()
            return None
        return pending

    def _fold(self, through: int | None) -> int:
        """A read-only store's catch-up, in temp tables on its connection (see the module's doc)."""
        self.store.catch_up_tokens()  # folded in memory too
        limit = self.store.counted_position()
        if through is not None:
            limit = min(limit, through)
        with self.store.reading() as conn:
            dialect = dialect_of(conn)
            for projection in self.projections:
                if projection.name in self._folded:
                    continue
                stored = stored_checkpoint(conn, projection)
                if stored is not None and stored >= limit:
                    continue
                projection.create(conn, dialect.scratch)
                if stored is not None:
                    for table in projection.tables:
                        conn.execute(
                            f"INSERT INTO {dialect.scratch}.{table} SELECT * FROM {dialect.main}.{table}"
                        )
                self._folded[projection.name] = stored or 0
            while True:
                behind = [p for p in self.projections if self._folded.get(p.name, limit) < limit]
                if not behind:
                    break
                start = min(self._folded[p.name] for p in behind)
                end = min(limit, start + BATCH)
                records = records_between(conn, start, end, union_types(p.types for p in behind))
                for projection in behind:
                    own = self._folded[projection.name]
                    if own >= end:
                        continue
                    projection.apply(
                        conn,
                        [
                            r
                            for r in records
                            if r.position > own and (projection.types is None or r.type in projection.types)
                        ],
                    )
                    self._folded[projection.name] = end
            return min((self._position(conn, p) for p in self.projections), default=limit)

    def reset(self) -> None:
        """Empty every projection and its checkpoint (the next catch-up starts from zero)."""
        self._prepare()
        with self.store.atomic() as conn:
            for projection in self.projections:
                for table in projection.tables:
                    conn.execute(f"DELETE FROM {table}")
                conn.execute("DELETE FROM projection_checkpoints WHERE name = ?", (projection.name,))

    def rebuild(self, *, progress: Progress | None = None) -> None:
        """Empty every projection and apply the whole log again."""
        self.reset()
        self.catch_up(progress=progress)

    def snapshots(self) -> dict[str, dict[str, list[tuple[Any, ...]]]]:
        """Every projection's rows, by projection name (for comparisons)."""
        with self.store.reading() as conn:
            dialect = dialect_of(conn)
            return {
                p.name: p.snapshot(conn, dialect.scratch if p.name in self._folded else dialect.main)
                for p in self.projections
            }


def _server_dialect(conn: Connection) -> PostgresDialect:
    """The dialect of a connection to a server (the remote apply runs only there)."""
    dialect = dialect_of(conn)
    if not isinstance(dialect, PostgresDialect):
        raise TypeError(f"not a server's connection: {dialect.name}")
    return dialect


__all__ = [
    "BATCH",
    "DEFERRED",
    "MEMO_KEYS",
    "Materializer",
    "Progress",
    "Projection",
    "copy_rows",
    "fork_of",
    "quiet_catch_up",
]
