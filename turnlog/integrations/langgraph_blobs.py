"""How the LangGraph saver stores a checkpoint's channel values: each channel once per change, not
the whole state in every checkpoint.

LangGraph's own savers (PostgresSaver, SqliteSaver's successors) store a blob per (channel, version)
and let a checkpoint name the versions it holds, so a step writes only the channels it changed. A
turnlog checkpoint event does the same within its session: its content names, for each channel, the
segments its value is made of, each a blob of this event or of an earlier event of the session (by
session version; the log keeps every event, so a reference never dangles, whatever a rewind did).

- A channel whose value is the very object the previous checkpoint of the namespace held, at the
  same channel version, refers to that checkpoint's segments (LangGraph's rule: an unchanged
  version is an unchanged value).
- A list that the previous value is a prefix of (the same objects, in order: LangGraph's
  ``add_messages`` copies the list and keeps its messages) refers to the previous segments and adds
  one blob of the new items; the value read back is the segments' lists joined. So a turn of a
  ``MessagesState`` graph serializes its new messages, not the whole history. After
  :data:`MAX_SEGMENTS` segments the value is written whole again, so a read joins a bounded number.
- Anything else is one blob of the whole value.

A blob of LangChain messages (a list of them: a whole value or the new items) is stored in a form
read back without validating each message again (integrations.langgraph_messages; its type is the
serde's with ``+construct``); any other blob is the serde's own.

Content (text, one item per line, so the references are read without decoding the blobs): line 0
is JSON ``{"channels": {name: [[version or null (this event), blob index], ...]}, "types": [the
checkpoint's serde type, then each blob's]}``, line 1 the checkpoint without its channel values
(serde bytes, base64), then one line per blob (serde bytes, base64). The media type says
``encoding=channels``; events in the earlier form (``encoding=base64``: the whole checkpoint) are
read as before.
"""

from __future__ import annotations

import base64
import itertools
import json
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.serde.base import SerializerProtocol

from turnlog.integrations import langgraph_messages
from turnlog.store import StateRecorded
from turnlog.store.rows import gc_paused

__all__ = ["ENCODING", "MAX_SEGMENTS", "Previous", "Stored", "decode", "encode", "references", "resolved"]

MAX_SEGMENTS = 32
"""Segments a channel's value is read from at most (then it is written whole again)."""

ENCODING = "channels"

Segment = tuple[int | None, int]
"""A blob: (session version of the event holding it, None for this event; its index there)."""


@dataclass(slots=True)
class Stored:
    """How a channel's value was stored (or read): its segments, and for a list its items then."""

    segments: list[Segment]
    items: tuple[Any, ...] | None = None
    """A list value's items (the objects, not the list, which its owner may change in place)."""
    fields: tuple[Any, ...] = ()
    """Each item's attributes then (a shallow copy), so an item edited in place is seen as new."""
    value: Any = None
    """Any other value: the object."""


@dataclass(slots=True)
class Previous:
    """A namespace's last checkpoint put (committed) or read by this saver: what the next one, if
    it is its child, may refer to."""

    checkpoint_id: str
    versions: Mapping[str, Any]
    """Its ``channel_versions``."""
    values: dict[str, Stored] = field(default_factory=dict)
    """Channel -> how its value is stored, segments at session versions."""


def encode(
    serde: SerializerProtocol,
    checkpoint: Checkpoint,
    new_versions: Mapping[str, Any],
    previous: Previous | None,
) -> tuple[str, str, dict[str, Stored]]:
    """The checkpoint's serde type, its content, and how each channel's value is stored (the
    segments of this event with version None, to be filled in by :func:`resolved` once it is
    stored). ``previous`` is the namespace's last checkpoint if it is this one's parent."""
    values = checkpoint.get("channel_values") or {}
    skeleton_type, skeleton = serde.dumps_typed({**checkpoint, "channel_values": {}})
    types: list[str] = [skeleton_type]
    lines = [base64.b64encode(skeleton).decode("ascii")]
    stored: dict[str, Stored] = {}
    versions = checkpoint.get("channel_versions") or {}

    def blob(value: Any) -> Segment:
        type_, data = (
            langgraph_messages.dumps(serde, value) if isinstance(value, list) else serde.dumps_typed(value)
        )
        types.append(type_)
        lines.append(base64.b64encode(data).decode("ascii"))
        return (None, len(types) - 2)

    for name, value in values.items():
        before = previous.values.get(name) if previous is not None else None
        if before is None:
            stored[name] = _whole(value, blob)
        elif isinstance(value, list) and before.items is not None:
            count = len(before.items)
            if count > len(value) or not _same_items(before, value):
                stored[name] = _whole(value, blob)
            elif count == len(value):
                stored[name] = before
            elif count == 0 or len(before.segments) >= MAX_SEGMENTS:
                stored[name] = _whole(value, blob)
            else:
                tail = value[count:]
                stored[name] = Stored(
                    [*before.segments, blob(tail)], (*before.items, *tail), (*before.fields, *_fields(tail))
                )
        elif (
            before.value is value
            and name not in new_versions
            and versions.get(name) is not None
            and versions.get(name) == previous.versions.get(name)  # type: ignore[union-attr]
        ):
            stored[name] = before  # the same object at the same version: LangGraph's savers' rule
        else:
            stored[name] = _whole(value, blob)
    header = {"channels": {name: value.segments for name, value in stored.items()}, "types": types}
    content = "\n".join([json.dumps(header, separators=(",", ":")), *lines])
    return skeleton_type, content, stored


def _whole(value: Any, blob: Any) -> Stored:
    if isinstance(value, list):
        return Stored([blob(value)], tuple(value), _fields(value))
    return Stored([blob(value)], value=value)


def _fields(items: Sequence[Any]) -> tuple[Any, ...]:
    """Each item's attributes (a message's fields), copied: compared with the item's later."""
    try:
        return tuple(map(dict, map(vars, items)))  # (in C: a list of messages is long)
    except TypeError:  # an item without attributes
        return tuple(
            dict(vars(item)) if hasattr(item, "__dict__") else dict(item) if isinstance(item, dict) else None
            for item in items
        )


def _same_items(before: Stored, value: list[Any]) -> bool:
    """Whether ``value`` starts with the items stored before, each unchanged (the same object, its
    attributes the same objects: an item edited in place by assignment is not the same)."""
    assert before.items is not None
    if not all(map(operator.is_, before.items, value)):
        return False
    try:
        return all(map(operator.eq, before.fields, map(vars, value)))
    except TypeError:  # an item without attributes
        pass
    for fields, new in zip(before.fields, value, strict=False):
        if fields is not None and fields != (vars(new) if hasattr(new, "__dict__") else new):
            return False
    return True


def is_channels(state: StateRecorded) -> bool:
    """Whether a checkpoint event is in this form."""
    return f"encoding={ENCODING}" in state.media_type


def references(version: int, state: StateRecorded) -> set[int]:
    """The session versions whose blobs a checkpoint event (stored at ``version``) is read from."""
    if not is_channels(state):
        return {version}
    header = json.loads(state.content[: state.content.index("\n")])
    return {
        version,
        *(at for segments in header["channels"].values() for at, _ in segments if at is not None),
    }


def decode(
    serde: SerializerProtocol, version: int, state: StateRecorded, events: Mapping[int, StateRecorded]
) -> tuple[Checkpoint, dict[str, Stored]]:
    """The checkpoint a ``channels`` event (at ``version``) holds, its blobs taken from ``events``
    (by session version: every one of :func:`references`), and how each value is stored. Read
    with the collector paused (store.rows.gc_paused)."""
    with gc_paused():
        return _decode(serde, version, state, events)


def _decode(
    serde: SerializerProtocol, version: int, state: StateRecorded, events: Mapping[int, StateRecorded]
) -> tuple[Checkpoint, dict[str, Stored]]:
    lines = state.content.split("\n")
    header = json.loads(lines[0])
    types: list[str] = header["types"]
    checkpoint: Checkpoint = serde.loads_typed((types[0], base64.b64decode(lines[1])))
    split: dict[int, list[str]] = {version: lines}
    kinds: dict[int, list[str]] = {version: types}
    values: dict[str, Any] = {}
    stored: dict[str, Stored] = {}
    for name, segments in header["channels"].items():
        parts = []
        places: list[Segment] = []
        for at, index in segments:
            at = version if at is None else at
            if at not in split:
                other = events[at]
                split[at] = other.content.split("\n")
                kinds[at] = json.loads(split[at][0])["types"]
            parts.append(
                langgraph_messages.loads(serde, kinds[at][index + 1], base64.b64decode(split[at][index + 2]))
            )
            places.append((at, index))
        value = values[name] = parts[0] if len(parts) == 1 else list(itertools.chain.from_iterable(parts))
        stored[name] = (
            Stored(places, tuple(value), _fields(value))
            if isinstance(value, list)
            else Stored(places, value=value)
        )
    checkpoint["channel_values"] = values
    return checkpoint, stored


def resolved(version: int, stored: dict[str, Stored]) -> dict[str, Stored]:
    """How a stored checkpoint's values are stored, this event's own segments now at ``version``."""
    return {
        name: Stored(
            [(version if at is None else at, i) for at, i in value.segments],
            value.items,
            value.fields,
            value.value,
        )
        for name, value in stored.items()
    }
