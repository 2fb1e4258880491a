"""Bounds of the event models: the largest numbers and the deepest JSON an event may hold, so that
nothing stored can overflow a sum or be too deep to read back. Importers call check_json_depth too."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, JsonValue, ValidationInfo

from turnlog.store.errors import InvalidEventError

MAX_TOKENS = 2**32 - 1
"""The largest token count one field may hold (over a thousand times the largest context window).
Bounded so that no sum the projections, the ledger or the audit make can overflow SQLite's 64-bit
integers: 2^31 events at this bound still sum below 2^63."""

MAX_VERSION = 2**62 - 1
"""The largest session version or log position a field may name (2^62 stands for "no end")."""

MAX_SIZE = 2**40
"""The largest byte size a field may state (the store refuses content over 64 MiB anyway)."""

MAX_MANIFEST_ENTRIES = 2**20
"""The most entries one context manifest may list (their token sum stays far below 2^63)."""

MAX_REMOVED_TARGETS = 1000
"""The most messages one ``message_removed`` event may name."""

MAX_JSON_DEPTH = 128
"""The deepest nesting of lists and objects a JSON-valued field may hold: deeper JSON could not be
read back (pydantic-core's JSON parser stops at about 200 levels, Python's json at the stack)."""

NonNegative = Annotated[int, Field(ge=0, le=MAX_TOKENS)]
"""A token count: 0 to MAX_TOKENS."""

Version = Annotated[int, Field(ge=1, le=MAX_VERSION)]
"""A session version: 1 to MAX_VERSION."""

Position = Annotated[int, Field(ge=0, le=MAX_VERSION)]
"""A log position or a head version, 0 meaning none: 0 to MAX_VERSION."""


def json_depth(value: object) -> int:
    """How deeply lists, tuples and dicts nest in ``value`` (0 for a scalar, 1 for ``{}``), found
    without recursion, so any depth can be measured. Stops counting past MAX_JSON_DEPTH + 1."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _too_deep(value: object) -> bool:
    if isinstance(value, str):
        # Fewer opening brackets than the limit cannot nest past it: the common case costs two counts.
        if not _count_exceeds(value):
            return False
        # Text that is not JSON (code, prose full of braces) is no JSON value to nest: only what a
        # JSON parser would read, and how deep, matters. Python's parser recurses, and says so.
        try:
            parsed = json.loads(value)
        except RecursionError:
            return True
        except ValueError:
            return False
        return json_depth(parsed) > MAX_JSON_DEPTH
    return json_depth(value) > MAX_JSON_DEPTH


def _count_exceeds(text: str) -> bool:
    return text.count("[") + text.count("{") > MAX_JSON_DEPTH


def check_json_depth(value: object, where: str = "value") -> None:
    """Raise InvalidEventError when a JSON value (parsed, or JSON text given as a str: text that is
    not JSON passes) nests more than MAX_JSON_DEPTH levels. Safe on any depth (no RecursionError):
    the one depth check for event fields and for importers' input (call it before json.loads)."""
    if _too_deep(value):
        raise InvalidEventError(depth_message(where))


def depth_message(where: str) -> str:
    return (
        f"{where}: JSON nested more than {MAX_JSON_DEPTH} levels deep; "
        "flatten it (or store it as text or an artifact)"
    )


def shallow(value: Any) -> Any:
    # Before pydantic walks the value (it recurses): a too-deep value gets one clear error.
    if _too_deep(value):
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep; flatten it")
    return value


STORED: dict[str, bool] = {"stored": True}
"""The validation context of a row read back from the store: its JSON values were depth-checked
when it was appended, so reads skip the check (about a third of decoding an ``origin``). ``verify``
validates without it, so a row edited behind the store's back is still found."""


def shallow_unless_stored(value: Any, info: ValidationInfo) -> Any:
    """:func:`shallow`, except for a row read back from the store (validated with STORED)."""
    context = info.context
    if context is not None and context.get("stored"):
        return value
    return shallow(value)


JsonObject = Annotated[dict[str, JsonValue], BeforeValidator(shallow_unless_stored)]
"""A JSON object field: at most MAX_JSON_DEPTH levels of nesting."""


def recorded_time(value: object, where: str) -> str:
    """A given time of recording in the store's own format (UTC, microseconds, as the store writes
    it), or InvalidEventError naming ``where``: an ISO 8601 time with a UTC offset."""
    try:
        when = datetime.datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise InvalidEventError(
            f"{where} {str(value)[:60]!r} is not an ISO 8601 time with a UTC offset "
            "(such as 2025-01-31T12:00:00.000000+00:00)"
        )
    return when.astimezone(datetime.UTC).isoformat(timespec="microseconds")
