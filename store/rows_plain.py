"""The parts of reading stored rows that need no event model (no pydantic): the events select, a
fork's lineage from its first row, and the blob decoder. Shared by store.rows (the full mapper) and
store.sqlite_quick (the commands that must start at once)."""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Callable

import zstandard

from turnlog.store.errors import CorruptStoreError

EVENT_COLUMNS = (
    "e.position, e.session_id, e.version, e.event_id, e.type, e.schema_version, e.payload, "
    "e.blob_id, e.tokens, e.recorded_at, e.prev_hash, e.hash, b.codec, b.data"
)
EVENT_SELECT = f"SELECT {EVENT_COLUMNS} FROM events e LEFT JOIN blobs b ON b.id = e.blob_id"
"""The columns record_from_row reads, in its order (events ``e`` joined to their blob ``b``)."""


def fork_parent(payload: str, session_id: str) -> tuple[str, int] | None:
    """The (parent session, version) a session_started payload forks at, None when it is no fork.
    A payload that cannot be read raises CorruptStoreError (every read of the session needs it)."""
    try:
        parent = json.loads(payload).get("parent")
        return (str(parent["session_id"]), int(parent["version"])) if parent else None
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        raise CorruptStoreError(
            f"session {session_id!r}: its session_started event cannot be read ({exc}); run `turnlog verify`"
        ) from exc


def lineage_from(
    first_row: Callable[[str], tuple[str, str] | None],
    session_id: str,
    cache: dict[str, list[tuple[str, int, int]]],
) -> list[tuple[str, int, int]]:
    """(session, first version, last version) segments of a session's history, oldest first: a
    fork's parent prefix (recursively), then its own events. ``first_row`` gives a session's first
    event as (type, payload), None when it has none (each backend reads it its own way)."""
    found = cache.get(session_id)
    if found is not None:
        return found
    row = first_row(session_id)
    parent = fork_parent(row[1], session_id) if row and row[0] == "session_started" else None
    if not parent:
        segments = [(session_id, 1, 2**62)]
    else:
        parent_id, upto = parent
        prefix = lineage_from(first_row, parent_id, cache)
        segments = [(sid, lo, min(hi, upto)) for sid, lo, hi in prefix if lo <= upto]
        segments.append((session_id, upto + 1, 2**62))
    if row is not None:  # the facts of an existing session never change
        cache[session_id] = segments
    return segments


_decompressors = threading.local()  # zstd contexts are not thread-safe: one per thread


def _decompressor() -> zstandard.ZstdDecompressor:
    found: zstandard.ZstdDecompressor | None = getattr(_decompressors, "zstd", None)
    if found is None:
        found = _decompressors.zstd = zstandard.ZstdDecompressor()
    return found


def decode_blob(codec: str, data: bytes) -> bytes:
    """A blob's bytes. Raises BlobDecodeError when they cannot be decompressed."""
    try:
        if codec == "zstd":
            return _decompressor().decompress(data)
        if codec == "zlib":  # written by turnlog before schema 2
            return zlib.decompress(data)
    except (zstandard.ZstdError, zlib.error) as exc:
        raise BlobDecodeError(f"{codec} data cannot be decompressed: {exc}") from exc
    return bytes(data)


class BlobDecodeError(ValueError):
    """A stored blob's compressed bytes are damaged."""
