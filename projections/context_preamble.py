"""The index preamble of a built context: when the session has artifacts, one system message right
after the leading system messages that lists them, one line each (`` - `id12` · source · `path` —
abstract ``, the newest live write of each path, sorted by path), and says how to fetch a full body.
Its full contents are never included. It is cut to whole lines within INDEX_MAX_CHARS characters and
half the budget, with a closing line that says how many were left out, and left out when not even its
header and that line fit. A build reads one row to know whether the index it rendered before still
holds (the session's newest artifact write as of the build, and the ranges that are not live): the
rendering and its token count are cached per store, so a warm build does not grow with the index."""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from projections.artifact_index import INDEX_MAX_CHARS, cap_entries, index_entries, is_own_output
from projections.artifacts import list_artifacts
from projections.context_reader import ContextReader
from projections.context_types import PER_MESSAGE, ContextMessage
from store import SQLiteStore

INDEX_ORDER = -10
"""The preamble's place among messages of the same order key: before a notice or a summary there."""


def preamble_header(count: int) -> str:
    """The preamble's first line: what it lists and how to fetch a full body."""
    return (
        f"Artifacts of this session ({count:,}), one line each: `id` · source · `path` — its first words. "
        "Their full contents are not included here: fetch one by its id with the turnlog tool "
        '(artifacts.read {"id": ID}) or `turnlog artifact ID`.'
    )


def preamble_omitted(count: int) -> str:
    """The preamble's closing line when it is cut."""
    return (
        f"… {count:,} more not listed (the index is capped at {INDEX_MAX_CHARS:,} characters and half "
        "the context's budget); artifacts.list lists them all"
    )


@dataclass(frozen=True, slots=True)
class _Index:
    header: str
    entries: tuple[str, ...]
    text: str
    """Header and every entry."""
    tokens: int | None
    """Tokens of ``text`` as a system message; None when it is over the character cap (not counted)."""


_Key = tuple[str, str, int, str, tuple[tuple[int, int], ...]]
_CACHE_SIZE = 512

_CACHES: weakref.WeakKeyDictionary[
    SQLiteStore, OrderedDict[tuple[_Key, int | None], _Index | tuple[str, int] | None]
] = weakref.WeakKeyDictionary()


def index_message(
    reader: ContextReader, room: int, before_version: Callable[[], int]
) -> ContextMessage | None:
    """The preamble for this build, within ``room`` tokens and half the budget (None: no artifacts,
    the policy turns it off, or not even its header and closing line fit). ``before_version`` says
    (asked only when there is a preamble) the version it is placed before: the first live message
    that is not a system message."""
    policy = reader.policy
    if not policy.index:
        return None
    key = _watermark(reader)
    if key is None:
        return None
    index = _full(reader, key)
    if index is None:
        return None
    limit = min(policy.budget // 2, room)
    overhead = PER_MESSAGE + reader.costs["system"]
    if index.tokens is not None and index.tokens <= limit:
        text, tokens, mode = index.text, index.tokens, "full"
    else:
        cut = _cut(reader, key, index, limit - overhead)
        if cut is None:
            return None
        text, tokens, mode = cut[0], overhead + cut[1], "capped"
    return ContextMessage(
        role="system",
        content=text,
        tokens=tokens,
        mode=mode,  # type: ignore[arg-type]
        category="index",
        event_ids=(),
        order=(before_version() - 0.5, INDEX_ORDER),
    )


def _watermark(reader: ContextReader) -> _Key | None:
    """What the index as of the build depends on: the newest artifact row at or before the build's
    position (rows are only ever added), and the ranges not live then. None: no artifacts."""
    with reader.store.reading() as conn:
        row = conn.execute(
            "SELECT position, event_id FROM artifacts WHERE session_id = ? AND position <= ? "
            "ORDER BY position DESC LIMIT 1",
            (reader.sid, reader.at),
        ).fetchone()
    if row is None:
        return None
    return (reader.tok.name, reader.sid, int(row[0]), str(row[1]), tuple(reader.dead))


def _cache(store: SQLiteStore) -> OrderedDict[tuple[_Key, int | None], _Index | tuple[str, int] | None]:
    cache = _CACHES.get(store)
    if cache is None:
        cache = _CACHES[store] = OrderedDict()
    return cache


def _remember(
    store: SQLiteStore, key: tuple[_Key, int | None], value: _Index | tuple[str, int] | None
) -> None:
    cache = _cache(store)
    cache[key] = value
    if len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)


def _full(reader: ContextReader, key: _Key) -> _Index | None:
    """The whole index (header and every entry), rendered once per watermark."""
    cache = _cache(reader.store)
    if (key, None) in cache:
        cache.move_to_end((key, None))
        found = cache[(key, None)]
        assert found is None or isinstance(found, _Index)
        return found
    infos = [info for info in list_artifacts(reader.store, reader.sid, reader.at) if not is_own_output(info)]
    index: _Index | None = None
    if infos:
        entries = tuple(index_entries(infos, latest_only=True))
        header = preamble_header(len(entries))
        text = "\n".join([header, *entries])
        tokens = None
        if len(text) <= INDEX_MAX_CHARS:
            tokens = PER_MESSAGE + reader.costs["system"] + reader.tok.count(text)
        index = _Index(header, entries, text, tokens)
    _remember(reader.store, (key, None), index)
    return index


def _cut(reader: ContextReader, key: _Key, index: _Index, limit: int) -> tuple[str, int] | None:
    """The index cut to whole lines within the character cap and ``limit`` content tokens, and its
    content tokens; None when not even the header and the closing line fit. Cached per limit."""
    if limit <= 0:
        return None
    cache = _cache(reader.store)
    if (key, limit) in cache:
        cache.move_to_end((key, limit))
        found = cache[(key, limit)]
        assert found is None or isinstance(found, tuple)
        return found
    tok = reader.tok

    def fits(text: str) -> bool:
        # Characters first: a text over the character cap is never counted.
        return len(text) <= INDEX_MAX_CHARS and tok.count(text) <= limit

    capped = cap_entries(index.header, index.entries, fits, preamble_omitted)
    result = None if capped is None else (capped[0], tok.count(capped[0]))
    _remember(reader.store, (key, limit), result)
    return result


__all__ = ["INDEX_ORDER", "index_message", "preamble_header", "preamble_omitted"]
