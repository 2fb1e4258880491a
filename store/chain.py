"""The log's hash chain, the same on every backend: the hash of one event, and the linking of a
batch (positions, versions, prev_hash, hash) before it is inserted. SQLite and PostgreSQL give the
same events, with the same ids and ``recorded_at``, the same hashes."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from turnlog.store.base import RecordedEvent

if TYPE_CHECKING:
    from turnlog.store.append_rules import Prepared
    from turnlog.store.events import Event

GENESIS_HASH = "0" * 64
"""The prev_hash of the first event."""

EventRow = tuple[int, str, int, str, str, int, str, str | None, int | None, str, str, str]
"""An events row as inserted: position, session_id, version, event_id, type, schema_version, payload,
blob_id, tokens, recorded_at, prev_hash, hash."""


def event_hash(
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
    # Length-prefixed fields (length in characters): an unambiguous encoding, whatever characters
    # the fields hold. Written out in one f-string, since it runs once per appended event.
    pos, ver, sv, blob = str(position), str(version), str(schema_version), blob_id or ""
    material = (
        f"{len(prev_hash)}:{prev_hash};{len(pos)}:{pos};{len(session_id)}:{session_id};"
        f"{len(ver)}:{ver};{len(event_id)}:{event_id};{len(event_type)}:{event_type};"
        f"{len(sv)}:{sv};{len(payload)}:{payload};{len(blob)}:{blob};{len(recorded_at)}:{recorded_at};"
    )
    # surrogateescape: a row verify read as undecodable bytes hashes to its stored bytes (stored text
    # never holds lone surrogates otherwise: input refuses them), so the hash is unchanged.
    return hashlib.sha256(material.encode("utf-8", "surrogateescape")).hexdigest()


class LinkedBatch:
    """A batch linked into the chain: the rows to insert, the records append returns, and the
    distinct content blobs (id, size, codec, data) the rows refer to."""

    __slots__ = ("blobs", "records", "rows")

    def __init__(self) -> None:
        self.rows: list[EventRow] = []
        self.records: list[RecordedEvent] = []
        self.blobs: dict[str, tuple[str, int, str, bytes]] = {}


def link_batch(
    session_id: str,
    prepared: Sequence[Prepared],
    *,
    head: int,
    position: int,
    prev_hash: str,
    recorded_at: str,
    times: Sequence[str] | None = None,
) -> LinkedBatch:
    """Number and hash a prepared batch after the store's last ``position`` (whose hash is
    ``prev_hash``) and the session's ``head`` version. Every event is recorded at ``recorded_at``,
    or at its own entry of ``times`` (an import restoring an export). The material is
    :func:`event_hash`'s, with the parts every event of the batch shares made once."""
    batch = LinkedBatch()
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
            batch.blobs[item.blob[0]] = item.blob
        p, v, event_id, payload, blob = (str(pos), str(version), event.event_id, item.payload, blob_id or "")
        type_part = _TYPE_PARTS.get((event.type, event.schema_version)) or _type_part(event)
        digest = hashlib.sha256(
            f"{len(prev_hash)}:{prev_hash};{len(p)}:{p};{session_part}{len(v)}:{v};"
            f"{len(event_id)}:{event_id};{type_part}{len(payload)}:{payload};{len(blob)}:{blob};"
            f"{time_part}".encode()
        ).hexdigest()
        batch.rows.append(
            (
                pos,
                session_id,
                version,
                event_id,
                event.type,
                event.schema_version,
                payload,
                blob_id,
                item.tokens,
                recorded_at,
                prev_hash,
                digest,
            )
        )
        batch.records.append(
            RecordedEvent(pos, session_id, version, event, item.tokens, recorded_at, prev_hash, digest)
        )
        prev_hash = digest
    return batch


_TYPE_PARTS: dict[tuple[str, int], str] = {}


def _type_part(event: Event | Any) -> str:
    """The type and schema-version part of an event's hash material (made once per pair)."""
    sv = str(event.schema_version)
    part = _TYPE_PARTS[(event.type, event.schema_version)] = f"{len(event.type)}:{event.type};{len(sv)}:{sv};"
    return part


_second: tuple[int, str] = (0, "")


def now() -> str:
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
