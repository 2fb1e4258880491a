"""Bounds of the event models: the largest numbers and the deepest JSON an event may hold, so that
nothing stored can overflow a sum or be too deep to read back. Importers call check_json_depth too."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, JsonValue

from store.errors import InvalidEventError

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


# The tokens that matter for nesting: a quote, an escape (inside strings), a bracket.
_NESTING_TOKENS = re.compile(r'["\[\]{}]|\\.', re.DOTALL)


def json_text_depth(text: str) -> int:
    """How deeply brackets nest in JSON text (brackets inside strings do not count), in one linear
    scan without parsing: call it before ``json.loads`` on untrusted text (which recurses). Stops
    counting past MAX_JSON_DEPTH + 1."""
    if "[" not in text and "{" not in text:
        return 0
    depth = deepest = 0
    in_string = False
    for match in _NESTING_TOKENS.finditer(text):
        token = match.group()
        if token == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif token in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_JSON_DEPTH:
                    return deepest
        elif token in "]}":
            depth = max(0, depth - 1)
    return deepest


def _too_deep(value: object) -> bool:
    if isinstance(value, str):
        # Fewer opening brackets than the limit cannot nest past it: the common case costs two counts.
        return _count_exceeds(value) and json_text_depth(value) > MAX_JSON_DEPTH
    return json_depth(value) > MAX_JSON_DEPTH


def _count_exceeds(text: str) -> bool:
    return text.count("[") + text.count("{") > MAX_JSON_DEPTH


def check_json_depth(value: object, where: str = "value") -> None:
    """Raise InvalidEventError when a JSON value (parsed, or JSON text given as a str) nests more than
    MAX_JSON_DEPTH levels. The one depth check for event fields and for importers' input."""
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


JsonObject = Annotated[dict[str, JsonValue], BeforeValidator(shallow)]
"""A JSON object field: at most MAX_JSON_DEPTH levels of nesting."""
