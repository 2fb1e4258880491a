"""Stored rows back into events: the one mapper from an events row to a RecordedEvent, the hash of
a row, and the blob decoder. Shared by the log (store.sqlite) and its checker (store.verify)."""

from __future__ import annotations

import gc
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import from_json

from turnlog.store.base import Blob, OriginItem, RecordedEvent
from turnlog.store.errors import CorruptStoreError, UnknownArtifactError, UnknownEventError
from turnlog.store.events import (
    CURRENT_VERSIONS,
    EVENT_CLASSES,
    describe_validation_error,
    load_stored,
    upcast,
)
from turnlog.store.limits import MAX_TOKENS, STORED
from turnlog.store.records import make_record

# What the store's other modules (pg_reading, verify, sqlite_reading) import from here; defined in
# rows_plain, which loads no event model.
from turnlog.store.rows_plain import EVENT_COLUMNS as EVENT_COLUMNS
from turnlog.store.rows_plain import EVENT_SELECT as EVENT_SELECT
from turnlog.store.rows_plain import BlobDecodeError as BlobDecodeError
from turnlog.store.rows_plain import decode_blob as decode_blob
from turnlog.store.rows_plain import fork_parent as fork_parent
from turnlog.store.rows_plain import lineage_from as lineage_from

# The text columns of a row, for finding the one that is not UTF-8 (cast to bytes, they can be read).
TEXT_COLUMNS = ("session_id", "event_id", "type", "payload", "blob_id", "recorded_at", "prev_hash", "hash")
TEXT_AS_BYTES = ", ".join(f"CAST(e.{name} AS BLOB)" for name in TEXT_COLUMNS)


def select_records(conn: sqlite3.Connection, where: str, params: Sequence[Any]) -> list[RecordedEvent]:
    """The events a ``WHERE ...`` clause (on ``e``, the events table) selects, as records. A stored row
    that cannot be decoded raises CorruptStoreError naming its position, never a driver error."""
    try:
        return records_from_rows(conn.execute(f"{EVENT_SELECT} {where}", params))
    except sqlite3.OperationalError as exc:
        # sqlite3 decodes TEXT as UTF-8 while it steps; invalid bytes end the whole query.
        if "decode" not in str(exc):
            raise
        raise undecodable_row(conn, where, params) from exc


def select_decodable(
    conn: sqlite3.Connection, where: str, params: Sequence[Any]
) -> tuple[list[RecordedEvent], int, int | None]:
    """Like select_records, but a row that cannot be decoded is left out instead of ending the read
    (verify reports it): for work over many sessions' rows, such as counting deferred tokens, which
    one bad row must not stop for every session. Returns (the records, how many rows were selected,
    the position of the last one)."""
    try:
        records = select_records(conn, where, params)
    except CorruptStoreError:
        pass
    else:
        return records, len(records), records[-1].position if records else None
    records = []
    seen = 0
    last = None
    query = (
        f"SELECT e.position, e.version, e.schema_version, e.tokens, {TEXT_AS_BYTES}, CAST(b.codec AS BLOB), "
        f"b.data FROM events e LEFT JOIN blobs b ON b.id = e.blob_id {where}"
    )
    for pos, version, sv, tokens, *raw in conn.execute(query, params):
        seen += 1
        last = pos
        try:
            sid, event_id, etype, payload, blob_id, at, prev, digest, codec = (
                None if value is None else bytes(value).decode("utf-8") for value in raw[:-1]
            )
            row = (
                pos,
                sid,
                version,
                event_id,
                etype,
                sv,
                payload,
                blob_id,
                tokens,
                at,
                prev,
                digest,
                codec,
                raw[-1],
            )
            records.append(record_from_row(row))
        except (UnicodeDecodeError, CorruptStoreError):
            continue
    return records, seen, last


def hash_in_lineage(
    first_row: Callable[[str], tuple[str, str] | None],
    hash_of: Callable[[str, int], str | None],
    session_id: str,
    version: int,
    cache: dict[str, list[tuple[str, int, int]]],
) -> str | None:
    """The stored hash of a session's event at ``version``, in whichever session of its lineage holds
    it (``hash_of`` reads one session's own row); None when there is none."""
    for sid, lo, hi in lineage_from(first_row, session_id, cache):
        if lo <= version <= hi:
            return hash_of(sid, version)
    return None


def sqlite_hash_at(conn: sqlite3.Connection) -> Callable[[str, int], str | None]:
    """hash_at for ChainCheck on an SQLite connection."""
    cache: dict[str, list[tuple[str, int, int]]] = {}

    def first_row(sid: str) -> tuple[str, str] | None:
        row = conn.execute(
            "SELECT type, payload FROM events WHERE session_id = ? ORDER BY version LIMIT 1", (sid,)
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def hash_of(sid: str, version: int) -> str | None:
        row = conn.execute(
            "SELECT hash FROM events WHERE session_id = ? AND version = ?", (sid, version)
        ).fetchone()
        return None if row is None else str(row[0])

    return lambda sid, version: hash_in_lineage(first_row, hash_of, sid, version, cache)


def blob_from_row(blob_id: str, row: Sequence[Any] | None) -> Blob:
    """The content a blobs row (id, size, codec, data) holds, looked up as ``blob_id``: UnknownArtifactError
    when there is no row, CorruptStoreError when its data cannot be decoded."""
    if row is None:
        raise UnknownArtifactError(f"no artifact with id {blob_id!r}; `turnlog artifacts SESSION` lists them")
    try:
        text = decode_blob(row[2], row[3]).decode("utf-8")
    except (BlobDecodeError, UnicodeDecodeError) as exc:
        raise CorruptStoreError(f"artifact {blob_id} cannot be read: {exc}; run `turnlog verify`") from exc
    return Blob(row[0], row[1], text)


def event_ref(ref: str) -> str:
    """An event reference (an id, or a prefix of one, as `turnlog log` shows them) stripped and
    checked: at least 6 characters."""
    ref = ref.strip()
    if len(ref) < 6:
        raise UnknownEventError(f"event id {ref!r} is too short: give at least 6 characters")
    return ref


def the_event(session_id: str, ref: str, rows: Sequence[RecordedEvent]) -> RecordedEvent:
    """The one event a reference found in a session, or UnknownEventError naming the problem."""
    if not rows:
        raise UnknownEventError(
            f"no event {ref!r} in session {session_id!r}; `turnlog log {session_id}` shows the ids"
        )
    if len(rows) > 1:
        ids = ", ".join(r.event_id[:16] for r in rows)
        raise UnknownEventError(f"event id prefix {ref!r} is ambiguous ({ids}, ...): give more of it")
    return rows[0]


def undecodable_row(conn: sqlite3.Connection, where: str, params: Sequence[Any]) -> CorruptStoreError:
    """The error for the first row of a query whose text is not UTF-8 (read again as bytes)."""
    query = f"SELECT e.position, {TEXT_AS_BYTES} FROM events e LEFT JOIN blobs b ON b.id = e.blob_id {where}"
    for position, *columns in conn.execute(query, params):
        bad = text_column_error(columns)
        if bad is not None:
            return CorruptStoreError(f"position {position}: {bad}; run `turnlog verify`")
    return CorruptStoreError("a stored row holds text that is not valid UTF-8; run `turnlog verify`")


def text_column_error(columns: Sequence[bytes | None]) -> str | None:
    """What is wrong with a row's text columns read as bytes (in TEXT_COLUMNS order), if anything."""
    for name, value in zip(TEXT_COLUMNS, columns, strict=True):
        if value is None:
            continue
        try:
            bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"stored {name} is not valid UTF-8 (byte {exc.start})"
    return None


def origin_item(row: Sequence[Any]) -> OriginItem:
    """An OriginItem from a (position, version, type, schema_version, payload) row, without
    validating the event."""
    position, version, etype, schema_version, payload = row
    if '"origin"' not in payload:  # no origin field: nothing to parse
        return OriginItem(position, version, etype, None, None)
    try:
        body = from_json(payload)  # pydantic-core's parser: about 3x json.loads
        if schema_version != CURRENT_VERSIONS.get(etype, schema_version):
            body = upcast(etype, schema_version, body)
        origin = body.get("origin")
        if origin is None:
            return OriginItem(position, version, etype, None, None)
        return OriginItem(position, version, etype, str(origin["framework"]), origin.get("item"))
    except Exception as exc:  # RecursionError too: never more than this row is lost
        raise CorruptStoreError(
            f"position {position}: stored {etype} event cannot be read: {exc}; run `turnlog verify`"
        ) from exc


# Rows at their type's current schema version go straight to that class's validator (no union
# dispatch, no upcasting). The event models are built on first use (defer_build), so a command
# reading a few types builds only theirs: each validator is looked up once its class is complete.
_VALIDATORS: dict[str, Any] = {}


def _validator(etype: str) -> Any:
    found = _VALIDATORS.get(etype)
    if found is None:
        cls = EVENT_CLASSES.get(etype)
        if cls is None:
            return None
        if not cls.__pydantic_complete__:
            cls.model_rebuild()
        found = _VALIDATORS[etype] = cls.__pydantic_validator__
    return found


_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:+-]+")  # ids that need no escaping inside a JSON string


def record_from_row(row: Sequence[Any], *, trusted: bool = True) -> RecordedEvent:
    """The record a stored row holds. ``trusted``: the row was validated when it was appended, so
    the JSON depth checks are not run again (see store.limits.STORED); every other check is, and a
    row that fails one raises CorruptStoreError. ``verify`` reads with ``trusted=False``."""
    (pos, sid, version, event_id, etype, sv, payload, blob_id, tokens, at, prev, digest) = row[:12]
    context = STORED if trusted else None
    try:
        validator = _VALIDATORS.get(etype) or _validator(etype)
        if validator is not None and CURRENT_VERSIONS[etype] == sv and payload[:1] == "{":
            if blob_id is None:
                # The common case, parsed and validated in one pass by pydantic's JSON parser: the
                # event id is spliced into the stored payload text (the type is the class's default).
                quoted = f'"{event_id}"' if _PLAIN_ID.fullmatch(event_id) else json.dumps(event_id)
                if payload == "{}":
                    event = validator.validate_json(f'{{"event_id":{quoted}}}', context=context)
                else:
                    event = validator.validate_json(f'{{"event_id":{quoted},{payload[1:]}', context=context)
            else:
                body = json.loads(payload)
                body["event_id"] = event_id
                body["content"] = decode_blob(row[12], row[13]).decode("utf-8")
                event = validator.validate_python(body, context=context)
        else:
            body = json.loads(payload)
            if blob_id is not None:
                body["content"] = decode_blob(row[12], row[13]).decode("utf-8")
            event = load_stored(etype, sv, event_id, body)
    except Exception as exc:  # RecursionError and OverflowError too: never more than this row is lost
        detail = describe_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)
        if len(detail) > 300:  # a path 200 levels deep says nothing more than its start
            detail = detail[:300] + "…"
        raise CorruptStoreError(
            f"position {pos}: stored {etype} event cannot be read: {detail}; run `turnlog verify`"
        ) from exc
    if tokens is not None and not 0 <= tokens <= MAX_TOKENS:
        raise CorruptStoreError(
            f"position {pos}: stored token count {tokens} is out of range; run `turnlog verify`"
        )
    return make_record(pos, sid, version, event, tokens, at, prev, digest)


PAYLOAD_JOIN = (
    "JOIN events e ON e.position = {table}.position LEFT JOIN blobs b ON b.id = e.blob_id AND {wanted}"
)
"""Joins a projection's rows (``{table}``: its name or alias, with a ``position`` column) to their
events ``e``, and to the content blob ``b`` where ``{wanted}`` (an SQL condition) holds: for a read
that takes an event's payload with the projection's row instead of keeping a copy of it."""

PAYLOAD_COLUMNS = "e.type, e.schema_version, e.payload, b.codec, b.data"
"""What payload_fields reads, in its order, from PAYLOAD_JOIN's tables."""


def payload_fields(
    etype: str, schema_version: int, payload: str, codec: str | None, data: bytes | None
) -> dict[str, Any] | None:
    """The fields of a stored event's payload (PAYLOAD_COLUMNS), decoded without validation: it was
    validated when it was appended. ``content`` is there when the payload holds it, or when its blob
    was joined (``codec`` set). None for a payload of an older schema version, which only the
    validating mapper (record_from_row) upcasts; a payload that cannot be decoded raises
    CorruptStoreError."""
    if CURRENT_VERSIONS.get(etype) != schema_version:
        return None
    try:
        fields: dict[str, Any] = from_json(payload)
        if codec is not None and data is not None:
            fields["content"] = decode_blob(codec, data).decode("utf-8")
    except ValueError as exc:  # BlobDecodeError and UnicodeDecodeError are ValueErrors
        raise CorruptStoreError(f"stored {etype} event cannot be read: {exc}; run `turnlog verify`") from exc
    return fields


def records_from_rows(rows: Iterable[Sequence[Any]]) -> list[RecordedEvent]:
    """Rows turned into records, with the cyclic garbage collector paused."""
    with gc_paused():
        return [record_from_row(row) for row in rows]


class gc_paused:
    """Pause the cyclic garbage collector for a block that makes many objects which all survive
    (decoding or appending a long run of events, reading a checkpoint's messages): every collection
    of young objects would walk them again, about a sixth of the time of a 20,000-event read.
    Nothing made there is cyclic garbage. Counted across threads and nesting: the collector runs
    again when the last block leaves, and only if it ran when the first came in (an application
    that turned it off keeps it off)."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _paused, _was_on
        with _pause_lock:
            if not _paused:
                _was_on = gc.isenabled()
                if _was_on:
                    gc.disable()
            _paused += 1

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        global _paused
        with _pause_lock:
            _paused -= 1
            if not _paused and _was_on:
                gc.enable()


_paused = 0  # blocks inside gc_paused, in every thread
_was_on = False  # whether the collector ran when the first of them came in
_pause_lock = threading.Lock()
