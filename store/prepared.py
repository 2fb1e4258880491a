"""A prepared event: what an append inserts for one event (its payload text, its content blob, its
token count), and its variant whose blob the blob worker (store.blob_worker) is still making."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnlog.store.blob_worker import BlobJob
from turnlog.store.events import Event

# Fields left out of the stored payload (never mutated: pydantic only reads them).
_ENVELOPE: set[str] = {"type", "schema_version", "event_id"}
_ENVELOPE_AND_CONTENT: set[str] = _ENVELOPE | {"content"}


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


# The slots of a Prepared, read and set past the properties of a DeferredBlob.
_EVENT: Any = Prepared.__dict__["event"]
_PAYLOAD: Any = Prepared.__dict__["payload"]
_BLOB: Any = Prepared.__dict__["blob"]


class DeferredBlob(Prepared):
    """A prepared event whose content's blob the blob worker is making (store.blob_worker). Its
    event, payload and blob are complete from the first time one of them is read: the blob id is
    filled in as the event's artifact_id, and the payload serialized with it. link_batch reads them
    in the batch's order, by when the worker has usually made the blob."""

    __slots__ = ("_job", "_size", "_updates")

    def __init__(
        self, event: Event, job: BlobJob, size: int, updates: dict[str, Any], tokens: int | None
    ) -> None:
        _EVENT.__set__(self, event)
        _PAYLOAD.__set__(self, "")
        _BLOB.__set__(self, None)
        self.tokens = tokens
        self._job: BlobJob | None = job
        self._size = size
        self._updates = updates

    def _settle(self) -> None:
        job = self._job
        assert job is not None
        digest, codec, packed = job.result()
        event = with_fields(_EVENT.__get__(self), {**self._updates, "artifact_id": digest})
        _EVENT.__set__(self, event)
        _PAYLOAD.__set__(self, _dump(event, _ENVELOPE_AND_CONTENT))
        _BLOB.__set__(self, (digest, self._size, codec, packed))
        self._job = None

    @property
    def event(self) -> Event:  # type: ignore[override]
        if self._job is not None:
            self._settle()
        result: Event = _EVENT.__get__(self)
        return result

    @property
    def payload(self) -> str:  # type: ignore[override]
        if self._job is not None:
            self._settle()
        result: str = _PAYLOAD.__get__(self)
        return result

    @property
    def blob(self) -> tuple[str, int, str, bytes] | None:  # type: ignore[override]
        if self._job is not None:
            self._settle()
        result: tuple[str, int, str, bytes] | None = _BLOB.__get__(self)
        return result


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
