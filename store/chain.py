"""The log's hash chains, the same on every backend (format ``v2``; docs/backends.md).

- Each event's ``hash`` covers its session, version, the hash of the session's previous event
  (``prev_hash``: a fork's first event links to its parent's event at the fork version, a new
  session's first event to :data:`GENESIS_HASH`), its id, type, schema version, blob id, the time it
  was recorded (in one backend-neutral form) and the **digest** of its payload: an HMAC-SHA256 of the
  payload under the store's own salt, kept in ``payload_digest``. The payload itself is not hashed,
  so it could later be erased and the chain still check.
- The global order (positions 1, 2, 3, ...) is chained apart: ``order_hash`` at position p covers the
  order hash at p - 1, p, and the hash of the event at p. Writers of different sessions share
  nothing but this order, which is stamped in one short step (on PostgreSQL after their commits).

The v1 format (one chain over every event of the store, payload bytes hashed) is kept for verifying
a store opened read-only before its migration, and for the migration's own check of the old chain."""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from turnlog.store import determinism
from turnlog.store.base import RecordedEvent
from turnlog.store.records import make_record

if TYPE_CHECKING:
    from turnlog.store.append_rules import Prepared
    from turnlog.store.events import Event

GENESIS_HASH = "0" * 64
"""The prev_hash of a session's first event (not a fork), and the order hash before position 1."""

CHAIN_FORMAT = "v2"
"""The chain format of a current store (turnlog_meta ``chain``)."""

EventRow = tuple[
    int | None, str, int, str, str, int, str, str | None, int | None, str, str, str, str, str | None
]
"""An events row as inserted: position, session_id, version, event_id, type, schema_version, payload,
blob_id, tokens, recorded_at, prev_hash, hash, payload_digest, order_hash (position and order_hash
None while the row waits for its place in the order: see store.pg_append)."""

INSERT_COLUMNS = (
    "position, session_id, version, event_id, type, schema_version, payload, blob_id, tokens, "
    "recorded_at, prev_hash, hash, payload_digest, order_hash"
)
"""The events columns of an :data:`EventRow`, in its order."""


def new_salt() -> str:
    """A store's salt: 32 random bytes, as hex (turnlog_meta ``salt``)."""
    if determinism.active():
        return determinism.salt()
    return secrets.token_hex(32)


@functools.lru_cache(maxsize=16)
def _keyed(salt: bytes) -> tuple[Any, Any]:
    """HMAC-SHA256 under ``salt`` (RFC 2104) as its two sha256 states with the padded key already
    absorbed, copied for each payload: :func:`payload_digest`'s result, without hmac.digest looking
    the digest up by name again for every event (about a sixth of a small append's own work)."""
    key = salt if len(salt) <= 64 else hashlib.sha256(salt).digest()
    key = key.ljust(64, b"\0")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
    outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))
    return inner, outer


def payload_digest(salt: bytes, payload: str) -> str:
    """The HMAC-SHA256 of a payload's UTF-8 text under the store's salt, as hex."""
    # surrogateescape: a row verify read as undecodable bytes digests to its stored bytes.
    return hmac.digest(salt, payload.encode("utf-8", "surrogateescape"), "sha256").hex()


def canonical_time(recorded_at: str) -> str:
    """``recorded_at`` as hashed: UTC, ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, whatever form a backend keeps
    it in. Text that is no ISO time (only a damaged row holds one) is hashed as it is."""
    if len(recorded_at) == 32 and recorded_at.endswith("+00:00"):
        return recorded_at[:26] + "Z"  # the store's own form: every event append writes
    try:
        moment = datetime.fromisoformat(recorded_at)
    except ValueError:
        return recorded_at
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _part(text: str) -> str:
    # Length-prefixed (length in characters): an unambiguous encoding, whatever the field holds.
    return f"{len(text)}:{text};"


def event_hash(
    session_id: str,
    version: int,
    prev_hash: str,
    event_id: str,
    event_type: str,
    schema_version: int,
    digest: str,
    blob_id: str | None,
    recorded_at: str,
) -> str:
    """The v2 hash of one event (``digest`` is its :func:`payload_digest`)."""
    material = (
        "turnlog-event-v2;"
        + _part(session_id)
        + _part(str(version))
        + _part(prev_hash)
        + _part(event_id)
        + _part(event_type)
        + _part(str(schema_version))
        + _part(digest)
        + _part(blob_id or "")
        + _part(canonical_time(recorded_at))
    )
    return hashlib.sha256(material.encode("utf-8", "surrogateescape")).hexdigest()


def order_hash(prev_order_hash: str, position: int, event_hash: str) -> str:
    """The order chain at ``position``: the order hash before it, the position, and its event's hash."""
    material = f"turnlog-order-v2;{_part(prev_order_hash)}{_part(str(position))}{_part(event_hash)}"
    return hashlib.sha256(material.encode("utf-8", "surrogateescape")).hexdigest()


def event_hash_v1(
    prev_hash: str,
    position: int,
    session_id: str,
    version: int,
    event_id: str,
    event_type: str,
    schema_version: int,
    payload: str,
    blob_id: str | None,
    recorded_at: str,
) -> str:
    """The v1 hash (one chain over the whole store, payload bytes hashed): for stores not migrated."""
    material = (
        _part(prev_hash)
        + _part(str(position))
        + _part(session_id)
        + _part(str(version))
        + _part(event_id)
        + _part(event_type)
        + _part(str(schema_version))
        + _part(payload)
        + _part(blob_id or "")
        + _part(recorded_at)
    )
    return hashlib.sha256(material.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True, slots=True)
class Heads:
    """Where a batch continues: the session's ``version`` and ``prev_hash`` (its last event's hash, or
    a fork parent's at the fork version), and the store's last ``position`` and its ``order_hash``
    (None for a batch that waits for its place in the order)."""

    version: int
    prev_hash: str
    position: int | None = None
    order_hash: str = GENESIS_HASH


class LinkedBatch:
    """A batch linked into the chains: the rows to insert, the records append returns, and the
    distinct content blobs (id, size, codec, data) the rows refer to."""

    __slots__ = ("blobs", "records", "rows")

    def __init__(self) -> None:
        self.rows: list[EventRow] = []
        self.records: list[RecordedEvent] = []
        self.blobs: dict[str, tuple[str, int, str, bytes]] = {}


def link_batch(
    session_id: str,
    prepared: Sequence[Prepared],
    heads: Heads,
    *,
    salt: bytes,
    recorded_at: str,
    times: Sequence[str] | None = None,
) -> LinkedBatch:
    """Version and hash a prepared batch after the session's head, and place it in the order after
    ``heads.position`` when that is given. Every event is recorded at ``recorded_at``, or at its own
    entry of ``times`` (an import restoring an export). The material is :func:`event_hash`'s and
    :func:`order_hash`'s, with the parts every event of the batch shares made once.

    This loop runs once per event of every append: what it looks up is bound to locals first, and
    each record is made by :func:`store.records.make_record` (a batch of 1,000 spent a third of
    its linking in the dataclass's ``__init__`` and attribute lookups)."""
    batch = LinkedBatch()
    rows, records, blobs = batch.rows, batch.records, batch.blobs
    add_row, add_record = rows.append, records.append
    inner_copy, outer_copy = (state.copy for state in _keyed(salt))
    sha256 = hashlib.sha256
    type_parts = _TYPE_PARTS
    new, (set_pos, set_sid, set_version, set_event, set_tokens, set_at, set_prev, set_hash) = _RECORD_MAKING
    session_part = f"turnlog-event-v2;{_part(session_id)}"
    stamps = None if times is None else iter(times)
    time_part = _part(canonical_time(recorded_at))
    prev_hash, pos, order = heads.prev_hash, heads.position, heads.order_hash
    version = heads.version
    placed: str | None = None
    for item in prepared:
        version += 1
        event = item.event
        if stamps is not None:
            recorded_at = next(stamps)
            time_part = _part(canonical_time(recorded_at))
        blob_row = item.blob
        if blob_row is None:
            blob_id = None
            blob_part = "0:;"
        else:
            blob_id = blob_row[0]
            blob_part = f"{len(blob_id)}:{blob_id};"
            blobs[blob_id] = blob_row
        payload, event_id, v = item.payload, event.event_id, str(version)
        inner = inner_copy()
        inner.update(payload.encode("utf-8", "surrogateescape"))
        outer = outer_copy()
        outer.update(inner.digest())
        digest = outer.hexdigest()
        etype, schema_version = event.type, event.schema_version
        type_part = type_parts.get((etype, schema_version)) or _type_part(event)
        event_digest = sha256(
            f"{session_part}{len(v)}:{v};{len(prev_hash)}:{prev_hash};{len(event_id)}:{event_id};"
            f"{type_part}64:{digest};{blob_part}{time_part}".encode("utf-8", "surrogateescape")
        ).hexdigest()
        if pos is not None:
            pos += 1
            p = str(pos)
            placed = order = sha256(
                f"turnlog-order-v2;64:{order};{len(p)}:{p};64:{event_digest};".encode()
            ).hexdigest()
        tokens = item.tokens
        add_row(
            (
                pos,
                session_id,
                version,
                event_id,
                etype,
                schema_version,
                payload,
                blob_id,
                tokens,
                recorded_at,
                prev_hash,
                event_digest,
                digest,
                placed,
            )
        )
        record = new(RecordedEvent)
        set_pos(record, pos or 0)
        set_sid(record, session_id)
        set_version(record, version)
        set_event(record, event)
        set_tokens(record, tokens)
        set_at(record, recorded_at)
        set_prev(record, prev_hash)
        set_hash(record, event_digest)
        add_record(record)
        prev_hash = event_digest
    return batch


_TYPE_PARTS: dict[tuple[str, int], str] = {}

_RECORD_ORDER = ("position", "session_id", "version", "event", "tokens", "recorded_at", "prev_hash", "hash")
if tuple(f.name for f in dataclass_fields(RecordedEvent)) != _RECORD_ORDER:  # pragma: no cover
    raise RuntimeError("store.chain.link_batch: RecordedEvent's fields changed; update _RECORD_ORDER")
_RECORD_MAKING = (object.__new__, tuple(getattr(RecordedEvent, name).__set__ for name in _RECORD_ORDER))
"""store.records.make_record's steps, bound once for link_batch's loop, which makes its records
inline (the call was about a tenth of the loop's own work; test_batch_hashing checks the records)."""


def _type_part(event: Event | Any) -> str:
    """The type and schema-version part of an event's hash material (made once per pair)."""
    part = _TYPE_PARTS[(event.type, event.schema_version)] = _part(event.type) + _part(
        str(event.schema_version)
    )
    return part


_second: tuple[int, str] = (0, "")
_DETERMINISTIC = determinism.active()  # fixed when turnlog is imported (store.determinism)


def now() -> str:
    """The time now as ``datetime.now(UTC).isoformat(timespec="microseconds")`` writes it, with the
    date-and-seconds part formatted once a second (this runs once per append)."""
    global _second
    if _DETERMINISTIC:
        return determinism.now()
    seconds, fraction = divmod(time.time_ns() // 1000, 1_000_000)
    second, text = _second
    if seconds != second:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _second = (seconds, text)
    return f"{text}.{fraction:06d}+00:00"


def link_one(
    session_id: str, item: Prepared, head: int, prev_hash: str, position: int, order: str, *, salt: bytes,
    recorded_at: str,
) -> tuple[EventRow, RecordedEvent]:  # fmt: skip
    """One event linked after the session's ``head`` (whose hash is ``prev_hash``) and the store's
    ``position`` (whose order hash is ``order``): :func:`link_batch`'s row and record for a batch of
    one, made without its batch structures (a durable append's usual batch is one event, and its
    Python path is most of what it costs above the database's own insert). The material is the same
    (tests/test_append_fast_path.py checks the rows are identical); each field is read once, and
    the store's own time form (what :func:`now` writes) is made canonical without a call."""
    keyed_inner, keyed_outer = _keyed(salt)
    event = item.event
    payload, event_id, etype, schema_version = item.payload, event.event_id, event.type, event.schema_version
    version = head + 1
    v = str(version)
    inner = keyed_inner.copy()
    inner.update(payload.encode("utf-8", "surrogateescape"))
    outer = keyed_outer.copy()
    outer.update(inner.digest())
    digest = outer.hexdigest()
    type_part = _TYPE_PARTS.get((etype, schema_version)) or _type_part(event)
    blob_row = item.blob
    if blob_row is None:
        blob_id, blob = None, ""
    else:
        blob_id = blob = blob_row[0]
    if len(recorded_at) == 32 and recorded_at.endswith("+00:00"):
        at = recorded_at[:26] + "Z"  # canonical_time's first case, without the call
    else:
        at = canonical_time(recorded_at)
    event_digest = hashlib.sha256(
        f"turnlog-event-v2;{len(session_id)}:{session_id};{len(v)}:{v};{len(prev_hash)}:{prev_hash};"
        f"{len(event_id)}:{event_id};{type_part}64:{digest};{len(blob)}:{blob};{len(at)}:{at};".encode(
            "utf-8", "surrogateescape"
        )
    ).hexdigest()
    pos = position + 1
    p = str(pos)
    placed = hashlib.sha256(
        f"turnlog-order-v2;64:{order};{len(p)}:{p};64:{event_digest};".encode()
    ).hexdigest()
    tokens = item.tokens
    row: EventRow = (
        pos, session_id, version, event_id, etype, schema_version, payload, blob_id,
        tokens, recorded_at, prev_hash, event_digest, digest, placed,
    )  # fmt: skip
    return row, make_record(pos, session_id, version, event, tokens, recorded_at, prev_hash, event_digest)
