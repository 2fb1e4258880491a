"""Making a RecordedEvent fast: the store makes one for every row it reads (store.rows) and every
event it appends (store.chain), and the frozen dataclass's ``__init__`` is about half of that work."""

from __future__ import annotations

from dataclasses import fields as dataclass_fields
from typing import Any

from turnlog.store.base import RecordedEvent

_RECORD_FIELDS = ("position", "session_id", "version", "event", "tokens", "recorded_at", "prev_hash", "hash")
if tuple(f.name for f in dataclass_fields(RecordedEvent)) != _RECORD_FIELDS:  # pragma: no cover
    raise RuntimeError("store.records.make_record: RecordedEvent's fields changed; update _RECORD_FIELDS")
_new = object.__new__
(_set_pos, _set_sid, _set_version, _set_event, _set_tokens, _set_at, _set_prev, _set_hash) = (
    getattr(RecordedEvent, name).__set__ for name in _RECORD_FIELDS
)


def make_record(
    pos: int, sid: str, version: int, event: Any, tokens: int | None, at: str, prev: str, digest: str
) -> RecordedEvent:
    """RecordedEvent(...) without the frozen dataclass's ``__init__``, which sets each field with
    the generic ``object.__setattr__``: each slot is set through its own descriptor (a quarter of
    the time; tests/test_batch_hashing.py checks the record is equal to the one ``__init__`` makes)."""
    record = _new(RecordedEvent)
    _set_pos(record, pos)
    _set_sid(record, sid)
    _set_version(record, version)
    _set_event(record, event)
    _set_tokens(record, tokens)
    _set_at(record, at)
    _set_prev(record, prev)
    _set_hash(record, digest)
    return record
