"""Appending to the log: each event prepared (checked, serialized, its large content moved to a
content-addressed blob), the batch checked against the session, hash-chained and inserted in one
``BEGIN IMMEDIATE`` transaction; a retried batch returns what was stored."""

from __future__ import annotations

import contextlib
import hashlib
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import zstandard
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from turnlog.store.base import ANY, NO_SESSION, Expected, RecordedEvent
from turnlog.store.errors import (
    DuplicateEventError,
    InvalidEventError,
    StoreError,
    UnknownEventError,
    UnknownSessionError,
    VersionConflictError,
)
from turnlog.store.events import (
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
from turnlog.store.events_loop import MessageRemoved, Origin, SessionRewound, StateRecorded
from turnlog.store.events_policy import CompactionFailed, OutputCondensed
from turnlog.store.limits import recorded_time
from turnlog.store.rows import GENESIS_HASH, gc_paused
from turnlog.store.sqlite_connection import now
from turnlog.store.sqlite_reading import ReadingStore, head_version_of, lineage_of

INLINE_LIMIT = 1024
"""Tool outputs larger than this many UTF-8 bytes are kept as content-addressed artifacts."""

MAX_CONTENT_BYTES = 64 * 1024 * 1024
"""The largest content one event may carry."""

MAX_BATCH = 100_000
"""The most events one append may carry."""

_COMPRESS_FROM = 32 * 1024  # smaller blobs stay raw: compressing cost more CPU than the bytes were worth
_COMPRESS_LEVEL = 1

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


class AppendingStore(ReadingStore):
    """The appends to the log."""

    def _counts_inline(self) -> bool:
        # A hook inside the append's transaction needs the counts: made before the write lock is
        # taken, they cost the lock nothing (see within_append).
        return self.token_counting == "inline" or bool(self._within_append)

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
                for within in self._within_append:
                    within(conn, records)
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
        recorded_at = now()
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
                tokens = self.count_event_tokens(event) if self._counts_inline() else None
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
        tokens = self.count_event_tokens(event) if self._counts_inline() else None
        return _Prepared(event, payload, blob, tokens)

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
        parent_head = head_version_of(conn, parent.session_id)
        if parent_head == 0:
            raise UnknownSessionError(parent.session_id)
        if parent.version > parent_head:
            raise InvalidEventError(
                f"cannot fork {parent.session_id!r} at version {parent.version}: "
                f"its head version is {parent_head}"
            )
        return parent.version

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
            elif isinstance(event, OutputCondensed) or (
                isinstance(event, CompactionFailed) and event.target_event_id is not None
            ):
                target = event.target_event_id
                assert target is not None
                self._check_target(
                    conn, session_id, target, ("tool_returned",), batch_removable,
                    f"{event.type}: no tool output with event id {target!r}",
                )  # fmt: skip
            elif isinstance(event, (MessagePinned, MessageUnpinned)):
                target = event.target_event_id
                if target in batch_messages:
                    continue
                row = conn.execute(
                    "SELECT session_id, version, type FROM events WHERE event_id = ?", (target,)
                ).fetchone()
                in_lineage = row is not None and any(
                    sid == row[0] and lo <= row[1] <= hi
                    for sid, lo, hi in lineage_of(conn, session_id, self._lineages)
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
        for target in event.target_event_ids:
            self._check_target(
                conn, session_id, target, ("message_appended", "tool_returned"), in_batch,
                f"message_removed: no message or tool return with event id {target!r}",
            )  # fmt: skip

    def _check_target(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        target: str,
        types: tuple[str, ...],
        in_batch: set[str],
        what: str,
    ) -> None:
        """``target`` is an event of one of ``types`` in this session's lineage, stored before (or
        earlier in the batch)."""
        if target in in_batch:
            return
        row = conn.execute(
            "SELECT session_id, version, type FROM events WHERE event_id = ?", (target,)
        ).fetchone()
        ok = (
            row is not None
            and row[2] in types
            and any(
                sid == row[0] and lo <= row[1] <= hi
                for sid, lo, hi in lineage_of(conn, session_id, self._lineages)
            )
        )
        if not ok:
            raise InvalidEventError(
                f"{what} in session {session_id!r}; `turnlog log {session_id}` shows the event ids"
            )


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


def _recorded_times(values: Sequence[str], count: int) -> list[str]:
    """Given times of recording, one per event, in the store's own format (as ``now`` writes it)."""
    if len(values) != count:
        raise InvalidEventError(
            f"recorded_at holds {len(values)} times for {count} events; give one per event"
        )
    return [recorded_time(value, f"recorded_at of event {index}:") for index, value in enumerate(values, 1)]


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
