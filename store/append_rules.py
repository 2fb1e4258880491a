"""The rules of an append, the same on every backend: the checks of the arguments, each event
prepared (checked, serialized, its large content moved to a content-addressed blob, its tokens
counted), the batch checked against the session (session_started first, summary ranges, rewind
targets, pins, removals, condensed outputs, fork bases), and a retried batch recognised.

A backend answers the few questions the checks ask through :class:`EventLookup`, inside its append
transaction."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import zstandard
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from turnlog.store.base import ANY, NO_SESSION, Expected, RecordedEvent
from turnlog.store.chain import GENESIS_HASH
from turnlog.store.errors import (
    CorruptStoreError,
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
    UsageRecorded,
    parse_event,
)
from turnlog.store.events_loop import MessageRemoved, Origin, SessionRewound, StateRecorded
from turnlog.store.events_policy import CompactionFailed, OutputCondensed
from turnlog.store.limits import recorded_time
from turnlog.store.tokenizer import EXACT_COUNT_LIMIT, Tokenizer, estimate_tokens

INLINE_LIMIT = 1024
"""Tool outputs larger than this many UTF-8 bytes are kept as content-addressed artifacts."""

MAX_CONTENT_BYTES = 64 * 1024 * 1024
"""The largest content one event may carry."""

MAX_BATCH = 100_000
"""The most events one append may carry."""

_COMPRESS_FROM = 32 * 1024  # smaller blobs stay raw: compressing cost more CPU than the bytes were worth
_COMPRESS_LEVEL = 1

FREE_OF_RULES: frozenset[type[Any]] = frozenset((MessageAppended, ToolReturned))
"""Event classes no rule of :func:`check_semantics` applies to (the rules concern the events that
refer to others, and session_started): a batch of one of them, in a session that has events, needs no
check and no lookup."""

# Fields left out of the stored payload (never mutated: pydantic only reads them).
_ENVELOPE: set[str] = {"type", "schema_version", "event_id"}
_ENVELOPE_AND_CONTENT: set[str] = _ENVELOPE | {"content"}

# A session id: 1 to 200 characters, no whitespace (``\s`` is exactly ``str.isspace``), no control
# characters (C0, DEL, C1: printed raw they drive the terminal), no lone surrogates (UTF-8 cannot
# hold them).
_SESSION_ID = re.compile("[^\\s\x00-\x1f\x7f-\x9f\ud800-\udfff]{1,200}")

Segments = list[tuple[str, int, int]]
"""A session's history: (session id, first version, last version), oldest first."""


class Prepared:
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


class StoredEventId(Exception):
    """Inside append: the insert met an event id that is already stored (rolls the append back)."""


class EventLookup(Protocol):
    """What the checks of a batch ask the log, answered inside the append's transaction."""

    def event_facts(self, event_id: str) -> tuple[str, int, str] | None:
        """(session id, version, type) of a stored event, None when no event has this id."""

    def lineage(self, session_id: str) -> Segments:
        """The session's history segments (see store.rows.lineage_from)."""

    def head_version(self, session_id: str) -> int:
        """The session's own last version, 0 when it has none."""

    def hash_of(self, session_id: str, version: int) -> str | None:
        """The hash of the session's own event at ``version`` (no lineage followed), None if none."""


# --- the arguments ---------------------------------------------------------------------------------


def check_arguments(
    session_id: str,
    count: int,
    expected_version: Expected,
    recorded_at: Sequence[str] | None,
    bounded: bool,
) -> list[str] | None:
    """Check an append's arguments; returns the given times of recording, if any, in the store's form."""
    _check_session_id(session_id)
    _check_expected(expected_version)
    times = None if recorded_at is None else _recorded_times(recorded_at, count)
    if bounded and count > MAX_BATCH:
        raise InvalidEventError(f"a batch holds at most {MAX_BATCH} events, got {count}; split it")
    return times


def check_unique_ids(prepared: Sequence[Prepared]) -> None:
    if len(prepared) < 2:
        return
    ids = [p.event.event_id for p in prepared]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise InvalidEventError(f"event id {dup!r} appears twice in one batch")


def check_expected_head(session_id: str, expected_version: Expected, head: int) -> None:
    """VersionConflictError unless the session's ``head`` is what the caller expected."""
    if expected_version is NO_SESSION:
        if head != 0:
            raise VersionConflictError(session_id, expected_version, head)
    elif expected_version is not ANY and expected_version != head:
        raise VersionConflictError(session_id, expected_version, head)


# --- one event -------------------------------------------------------------------------------------


def event_tokens(tokenizer: Tokenizer, event: Event) -> int:
    """The tokens an event adds, with ``tokenizer``: exact, except for content over
    EXACT_COUNT_LIMIT bytes, which is estimated from its size."""
    if isinstance(event, SummaryRecorded):
        return event.tokens  # checked against the tokenizer when it was appended
    total = 0
    for text in event.token_texts():
        if len(text) * 4 > EXACT_COUNT_LIMIT and len(text.encode()) > EXACT_COUNT_LIMIT:
            total += estimate_tokens(len(text.encode()))
        else:
            total += tokenizer.count(text)
    return total


def prepare_event(
    event: Any, index: int, tokenizer: Tokenizer, count: Callable[[Event], int] | None
) -> Prepared:
    """The ``index``-th event of a batch checked and serialized; its tokens counted with ``count``
    when given (a backend that defers counting gives None)."""
    cls = event.__class__
    if (
        cls is MessageAppended
        and len(event.content) <= MAX_CONTENT_BYTES // 4
        and event.origin is None  # an origin's item may hold dicts: the general path checks them
    ) or (
        cls is ToolReturned
        and event.origin is None
        and event.artifact_id is None
        and (
            len(event.content) <= INLINE_LIMIT // 4  # at most 4 bytes a character: it stays inline
            or (len(event.content) <= INLINE_LIMIT and event.content.isascii())  # as many bytes
        )
    ):
        # The common cases, kept short: a message, or a small tool output, has no dict-valued
        # field, needs no blob, and is within the size limit at 4 bytes a character. Text the
        # serializer refuses takes the general path below, which names the problem.
        try:
            payload = _dump(event, _ENVELOPE)
        except (UnicodeEncodeError, PydanticSerializationError):
            pass
        else:
            return Prepared(event, payload, None, None if count is None else count(event))
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
        return _prepare_checked(event, where, tokenizer, count)
    except (UnicodeEncodeError, PydanticSerializationError):
        for name, value in event:
            _check_unicode(value, f"{where} ({event.type}): {name}")
        raise


def _prepare_checked(
    event: Any, where: str, tokenizer: Tokenizer, count: Callable[[Event], int] | None
) -> Prepared:
    content: str | None = None
    blob: tuple[str, int, str, bytes] | None = None
    updates: dict[str, Any] = {}
    if isinstance(event, SessionStarted):
        if event.tokenizer is None:
            updates["tokenizer"] = tokenizer.name
        elif event.tokenizer != tokenizer.name:
            raise InvalidEventError(
                f"{where} (session_started): tokenizer {event.tokenizer!r} differs from the "
                f"store's {tokenizer.name!r}; omit it and the store fills it in"
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
        counted = tokenizer.count(event.context_text())
        if event.tokens != counted:
            raise InvalidEventError(
                f"{where} (summary_recorded): tokens is {event.tokens}, but its context message "
                f"has {counted} tokens with {tokenizer.name}; set tokens={counted}"
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
        event = with_fields(event, updates)
    payload = _dump(event, _ENVELOPE if content is None else _ENVELOPE_AND_CONTENT)
    return Prepared(event, payload, blob, None if count is None else count(event))


def _dump(event: Any, exclude: set[str]) -> str:
    """The stored payload: ``event.model_dump_json(exclude=exclude, exclude_none=True)``, asked of the
    model's serializer directly (model_dump_json passes every one of its defaults on, about a
    microsecond of a small event's append; tests/test_append_prepare.py checks the text is the same)."""
    return str(event.__pydantic_serializer__.to_json(event, exclude=exclude, exclude_none=True).decode())


def with_fields(event: Any, updates: Mapping[str, Any]) -> Any:
    """``event.model_copy(update=updates)`` for the fields the store fills in (artifact and state ids,
    sizes, the tokenizer): a shallow copy whose ``updates`` are set and marked as set, made without
    pydantic's general copy (a third of its cost; it was about 5 µs of each blob's append). The values
    are the store's own, already valid, as model_copy would take them unchecked too."""
    cls = event.__class__
    copied = cls.__new__(cls)
    fields = dict(event.__dict__)
    fields.update(updates)
    object.__setattr__(copied, "__dict__", fields)
    object.__setattr__(copied, "__pydantic_fields_set__", event.__pydantic_fields_set__ | updates.keys())
    object.__setattr__(copied, "__pydantic_extra__", None)
    object.__setattr__(copied, "__pydantic_private__", None)
    return copied


# --- the batch against the session -----------------------------------------------------------------


def fork_base(lookup: EventLookup, session_id: str, first: Event) -> int:
    """For a new session started as a fork: the parent's version it branches at (checked)."""
    if not isinstance(first, SessionStarted) or first.parent is None:
        return 0
    parent = first.parent
    if parent.session_id == session_id:
        raise InvalidEventError(f"session {session_id!r} cannot be a fork of itself")
    parent_head = lookup.head_version(parent.session_id)
    if parent_head == 0:
        raise UnknownSessionError(parent.session_id)
    if parent.version > parent_head:
        raise InvalidEventError(
            f"cannot fork {parent.session_id!r} at version {parent.version}: "
            f"its head version is {parent_head}"
        )
    return parent.version


def fork_link(lookup: EventLookup, session_id: str, first: Event) -> tuple[int, str]:
    """Where a new session's chain starts: (0, the genesis hash), or for a fork the parent's version
    it branches at (checked) and the hash of the parent's event there (store.chain)."""
    base = fork_base(lookup, session_id, first)
    if base == 0:
        return 0, GENESIS_HASH
    assert isinstance(first, SessionStarted) and first.parent is not None
    for sid, lo, hi in lookup.lineage(first.parent.session_id):
        if lo <= base <= hi:
            found = lookup.hash_of(sid, base)
            if found is not None:
                return base, found
    raise CorruptStoreError(
        f"session {first.parent.session_id!r} has no event at version {base} in its history; "
        "run `turnlog verify`"
    )


def check_semantics(
    lookup: EventLookup, session_id: str, head: int, prepared: Sequence[Prepared], *, new_session: bool
) -> None:
    """The batch makes sense after the session's ``head`` version (events refer to events of the
    session, stored before them or earlier in the batch)."""
    if len(prepared) == 1 and prepared[0].event.__class__ in FREE_OF_RULES:
        return  # a message or a tool return refers to nothing (the usual durable append)
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
            # Every target is a message or tool return of this session (a fork's parent prefix
            # included) stored before the removal: a removal cannot reach into another session.
            for removed in event.target_event_ids:
                _check_target(
                    lookup, session_id, removed, ("message_appended", "tool_returned"),
                    batch_messages | batch_removable,
                    f"message_removed: no message or tool return with event id {removed!r}",
                )  # fmt: skip
        elif isinstance(event, OutputCondensed) or (
            isinstance(event, CompactionFailed) and event.target_event_id is not None
        ):
            condensed = event.target_event_id
            assert condensed is not None
            _check_target(
                lookup, session_id, condensed, ("tool_returned",), batch_removable,
                f"{event.type}: no tool output with event id {condensed!r}",
            )  # fmt: skip
        elif isinstance(event, UsageRecorded) and event.call_event_id is not None:
            _check_target(
                lookup, session_id, event.call_event_id, ("message_appended",), batch_messages,
                f"usage_recorded: call_event_id names no message {event.call_event_id!r}",
            )  # fmt: skip
        elif isinstance(event, (MessagePinned, MessageUnpinned)):
            target = event.target_event_id
            if target in batch_messages:
                continue
            if not _in_lineage(lookup, session_id, target, ("message_appended",)):
                raise UnknownEventError(
                    f"{event.type}: no message with event id {target!r} in session "
                    f"{session_id!r}; `turnlog log {session_id}` shows the event ids"
                )


def _in_lineage(lookup: EventLookup, session_id: str, target: str, types: tuple[str, ...]) -> bool:
    facts = lookup.event_facts(target)
    if facts is None or facts[2] not in types:
        return False
    return any(sid == facts[0] and lo <= facts[1] <= hi for sid, lo, hi in lookup.lineage(session_id))


def _check_target(
    lookup: EventLookup,
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
    if not _in_lineage(lookup, session_id, target, types):
        raise InvalidEventError(
            f"{what} in session {session_id!r}; `turnlog log {session_id}` shows the event ids"
        )


# --- retries ---------------------------------------------------------------------------------------


def is_retry(found: Mapping[str, Sequence[Any]], session_id: str, prepared: Sequence[Prepared]) -> bool:
    """Whether a refused batch is one already stored: ``found`` maps the batch's stored event ids to
    their (event_id, session_id, type, payload, blob_id) rows. True: the same batch, whose stored
    records the append returns; False: none of it is stored. Anything else is DuplicateEventError."""
    if not found:
        return False
    same = len(found) == len(prepared) and all(
        tuple(found[p.event.event_id][1:5])
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
    return True


def append_or_stored(
    attempt: Callable[[], list[RecordedEvent]],
    stored: Callable[[], list[RecordedEvent] | None],
    where: str,
) -> tuple[list[RecordedEvent], bool]:
    """Run an append ``attempt``; when it is refused, look whether the batch is already stored.
    Returns (the records, whether this attempt stored them).

    A retry of a batch that is already stored fails one of the checks (its versions are taken, its
    session_started is no longer first, or its ids are): only then is it worth looking the ids up
    (``stored``, through :func:`is_retry`). The same batch returns what was stored; anything else
    with a stored id is refused."""
    try:
        return attempt(), True
    except (StoredEventId, VersionConflictError, InvalidEventError, UnknownEventError) as refused:
        found = stored()
        if found is not None:
            return found, False
        if isinstance(refused, StoredEventId):  # cannot happen: stored events stay stored
            raise StoreError(f"{where}: an event id of the batch is stored, but not found") from None
        raise


def chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# --- helpers ---------------------------------------------------------------------------------------


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
