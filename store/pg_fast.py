"""The one-round-trip append on PostgreSQL (store.pg_append): what a store object remembers of the
heads its last appends left (:class:`Tips`), and the one statement that checks them and inserts.

A writer alone appends with **one prepared statement** run in its own implicit transaction (the
connection is in autocommit mode): its ``WITH`` part tries the session's lock and the placing lock
and compares the heads the batch was linked to with the log's; the inserts follow in the same
statement, and its end commits it (``synchronous_commit=on``: durable when it returns). Prepared
(psycopg ``prepare=True``, per connection and statement shape), the server neither parses nor plans
it again, and the values go as parameters (blobs as binary ``bytea``), not rendered into SQL text.

One statement has one snapshot, taken before its locks are: a writer that committed and let its
lock go between the two is not seen by the check. Nothing wrong can be stored for it: a row's
version and position are unique, so a batch linked to a stale head fails on the unique key of the
row the other writer stored (nothing of it is stored) and takes the long way, like a failed check."""

from __future__ import annotations

import functools
import weakref
from typing import Any

import psycopg
import psycopg.errors

from turnlog.store.append_rules import Segments
from turnlog.store.base import RecordedEvent
from turnlog.store.chain import INSERT_COLUMNS, LinkedBatch
from turnlog.store.pg_schema import EVENT_TABLE

Connection = Any  # psycopg.Connection[tuple[Any, ...]]

FAST_MARK = "turnlog: one-round-trip append"
FAST_FAIL = f"('{FAST_MARK}: ' || pg_backend_pid())::int"
"""A text that is not a number, cast at run time: the failure of a check, ending the statement."""
LOCKED_MARK = "(a lock is taken)"
FAST_LOCKED = f"('{FAST_MARK} {LOCKED_MARK}: ' || pg_backend_pid())::int"
"""The same failure when the session's lock or the placing lock was taken by another writer."""

_STALE_KEYS = frozenset({"events_session_version_key", "events_position_key"})
"""The unique keys a batch linked to heads its statement's snapshot did not see yet fails on."""

# The check, as the first part of the statement: the session's lock and the placing lock free, and
# the heads (the session's last version and hash, the order's last position and hash) the ones the
# batch was linked to, with no row waiting for its place.
_CHECK = (
    "WITH ok AS (SELECT CASE WHEN NOT (pg_try_advisory_xact_lock(%s::int, hashtext(%s)) "
    f"AND pg_try_advisory_xact_lock(%s::bigint)) THEN {FAST_LOCKED} "
    "WHEN EXISTS (SELECT 1 FROM (SELECT version, hash FROM "
    f"{EVENT_TABLE} WHERE session_id = %s ORDER BY version DESC LIMIT 1) AS s "
    "WHERE s.version = %s::bigint AND s.hash = %s) AND EXISTS (SELECT 1 FROM (SELECT position, order_hash "
    f"FROM {EVENT_TABLE} WHERE position IS NOT NULL ORDER BY position DESC LIMIT 1) AS g "
    "WHERE g.position = %s::bigint AND g.order_hash = %s) "
    f"AND NOT EXISTS (SELECT 1 FROM {EVENT_TABLE} WHERE position IS NULL) THEN 0 ELSE {FAST_FAIL} END AS z)"
)
_EVENT_ROW = "(%s::bigint, %s, %s::bigint, %s, %s, %s::int, %s, %s, %s::bigint, %s, %s, %s, %s, %s)"
_BLOB_ROW = "(%s, %s::bigint, %s, %s::bytea)"


@functools.lru_cache(maxsize=64)
def placed_insert_sql(rows: int, blobs: int) -> str:
    """The statement of a batch of ``rows`` events and ``blobs`` blobs (one text per shape, so one
    prepared statement per shape and connection)."""
    parts = [_CHECK]
    if blobs:
        parts.append(
            ", b AS (INSERT INTO blobs (id, size, codec, data) SELECT r.* FROM ok, (VALUES "
            + ", ".join([_BLOB_ROW] * blobs)
            + ") AS r ON CONFLICT (id) DO NOTHING)"
        )
    parts.append(
        f" INSERT INTO {EVENT_TABLE} ({INSERT_COLUMNS}) SELECT r.* FROM ok, (VALUES "
        + ", ".join([_EVENT_ROW] * rows)
        + ") AS r"
    )
    return "".join(parts)


_CURSORS: weakref.WeakKeyDictionary[Connection, Any] = weakref.WeakKeyDictionary()
"""A cursor kept per pooled connection for the statement (one thread uses a connection at a time):
``conn.execute`` would make a cursor, and its map of adapters, at every append."""


def kept_cursor(conn: Connection, kept: weakref.WeakKeyDictionary[Connection, Any]) -> Any:
    """The raw cursor (``$1`` placeholders, see :func:`numbered`) kept in ``kept`` for ``conn``."""
    cursor = kept.get(conn)
    if cursor is None or cursor.closed:
        cursor = kept[conn] = psycopg.RawCursor(conn)
    return cursor


@functools.lru_cache(maxsize=128)
def numbered(sql: str) -> str:
    """``sql`` with its ``%s`` placeholders as PostgreSQL's own ``$1``, ``$2``, ... for a
    ``RawCursor``. psycopg converts a ``%s`` query at every execute once it has more than 50
    parameters or 4,096 characters (the limits of its cache): an append statement of four rows or
    more was parsed again in Python at every call (in a LangGraph turn, most appends; about a
    tenth of the turn's CPU). The texts here have no other ``%``."""
    parts = sql.split("%s")
    if any("%" in part for part in parts):
        raise ValueError("store.pg_fast.numbered: a statement with a literal % cannot be numbered")
    return "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], 1)) + parts[-1]


MAX_FAST_ROWS = 64
"""The largest batch the statement takes (a larger one takes the long way: few appends are that
large, and each size is a statement prepared on every connection)."""


def insert_placed(
    conn: Connection,
    batch: LinkedBatch,
    locks: tuple[int, str, int],
    session_head: tuple[int, str],
    order_head: tuple[int, str],
) -> None:
    """Run the checked inserts of ``batch`` as one statement in its own transaction (``conn`` in
    autocommit mode). ``locks``: the session locks' space, the session id, the placing lock's key.
    Raises :class:`Stale` when the heads had moved (nothing stored), or the driver's error."""
    space, session_id, place_key = locks
    params: list[Any] = [space, session_id, place_key, session_id, *session_head, *order_head]
    for blob in batch.blobs.values():
        params.extend(blob)
    for row in batch.rows:
        params.extend(row)
    try:
        kept_cursor(conn, _CURSORS).execute(
            numbered(placed_insert_sql(len(batch.rows), len(batch.blobs))), params, prepare=True
        )
    except psycopg.errors.UniqueViolation as exc:
        if stale_key(exc):
            raise Stale from None
        raise


def stale_key(exc: psycopg.errors.UniqueViolation) -> bool:
    """Whether a unique key's failure is that of a batch linked to heads moved by another writer."""
    return exc.diag.constraint_name in _STALE_KEYS


COPY_ROWS = 64
"""A batch of more events is inserted by binary COPY (:func:`copy_rows`): psycopg formats its rows
in C, where a multi-row INSERT's values are rendered one row at a time in Python."""

_COPY_TYPES = [
    "int8", "text", "int8", "text", "text", "int4", "text", "text", "int8", "text", "text", "text",
    "text", "text",
]  # fmt: skip
"""The binary types of INSERT_COLUMNS, in their order."""


def copy_rows(conn: Connection, rows: list[Any]) -> None:
    """COPY the event rows into the log, in the transaction open on ``conn``."""
    with (
        conn.cursor() as cursor,
        cursor.copy(f"COPY {EVENT_TABLE} ({INSERT_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy,
    ):
        copy.set_types(_COPY_TYPES)
        for row in rows:
            copy.write_row(row)


class Stale(Exception):
    """The heads a one-round-trip append was linked to had moved (or a lock was taken): nothing
    was stored, and the append takes the long way."""


class Locked(Stale):
    """A one-round-trip append found the session's lock or the placing lock taken: nothing was
    stored, and the append takes the long way (which commits its rows without waiting for the
    placing lock, and places them after)."""


def is_stale(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.errors.InvalidTextRepresentation) and FAST_MARK in str(exc)


class NeedsRead(Exception):
    """A check of the batch needs to read the log: not a one-round-trip append."""


class NoReads:
    """The append rules' questions when nothing may be read (store.append_rules.EventLookup): a
    session's lineage already known, else :class:`NeedsRead`."""

    __slots__ = ("cache",)

    def __init__(self, cache: dict[str, Segments]) -> None:
        self.cache = cache

    def event_facts(self, event_id: str) -> tuple[str, int, str] | None:
        raise NeedsRead

    def lineage(self, session_id: str) -> Segments:
        found = self.cache.get(session_id)
        if found is None:
            raise NeedsRead
        return found

    def head_version(self, session_id: str) -> int:
        raise NeedsRead

    def hash_of(self, session_id: str, version: int) -> str | None:
        raise NeedsRead


class Tips:
    """The heads this store object's last placed appends left: each session's (version, hash), and
    the order's (position, order hash). Only a guess: the server checks it (stale, it costs the
    append one failed round trip), so threads may share it without a lock."""

    __slots__ = ("misses", "order", "sessions", "skip")

    LIMIT = 4096
    """Sessions remembered (all are forgotten past it: a worker's few live sessions come back)."""

    def __init__(self) -> None:
        self.sessions: dict[str, tuple[int, str]] = {}
        self.order: tuple[int, str] | None = None
        self.misses = 0
        """One-round-trip appends that found the heads moved, one after the other."""
        self.skip = 0
        """Appends left to take the long way without trying: where other writers keep moving the
        order, a try mostly costs a round trip, so each miss in a row doubles the wait (to 64);
        an append placed by the server that saw the order moved keeps it at 1 or more, one that
        saw it still ends it (:meth:`settled`)."""

    def ready(self) -> bool:
        """Whether to try the next append in one round trip."""
        if self.skip:
            self.skip -= 1
            return False
        return True

    def missed(self, session_id: str) -> None:
        self.forget(session_id)
        self.misses = min(self.misses + 1, 6)
        self.skip = 2**self.misses

    def settled(self, moved: bool) -> None:
        """After an append the server placed (store.pg_sequenced): ``moved`` when other writers had
        placed rows since this object's last append (the order's head it knew was not the batch's
        predecessor, or was not known). Moved, the next append is placed by the server again,
        without a try: a try would find the order moved (a round trip lost), or, finding the
        placing lock free at that moment, hold it through its flush while the other writers
        wait for it. Not moved, this writer is alone again: the next append tries the one
        statement, whatever the misses before."""
        if moved:
            self.misses = max(self.misses, 1)
            self.skip = max(self.skip, 1)
        else:
            self.misses = 0
            self.skip = 0

    def remember(self, session_id: str, batch: LinkedBatch) -> None:
        last = batch.rows[-1]  # in INSERT_COLUMNS' order
        if len(self.sessions) >= self.LIMIT:
            self.sessions.clear()
        self.sessions[session_id] = (int(last[2]), str(last[11]))
        self.order = None if last[0] is None else (int(last[0]), str(last[13]))

    def placed(self, session_id: str, last: RecordedEvent, order: tuple[int, str]) -> None:
        """An append placed after its commit: its session's head, and the order's as its placing
        left it (a guess, as every tip: the next try finds whether another writer moved it)."""
        if len(self.sessions) >= self.LIMIT:
            self.sessions.clear()
        self.sessions[session_id] = (last.version, last.hash)
        self.order = order if order[0] else None

    def forget(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)
        self.order = None
