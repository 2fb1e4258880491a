"""Capping for the context: the notices that say what was capped and where the full text is, and
a per-store cache of capped tool outputs (capping is deterministic, and a warm build that caps the
same outputs again costs several times as much)."""

from __future__ import annotations

import json
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from turnlog.projections.capping import MIN_CAP, Capped, Notice, cap_text, short_notice
from turnlog.store import Store, Tokenizer


def output_notice(ref: str, *, is_artifact: bool) -> Notice:
    """The notice of a capped tool output: what was shown and where the full text is."""
    where = f"artifact {ref[:12]}" if is_artifact else f"event {ref}"

    def notice(shown: int, total: int) -> str:
        return f"[turnlog: output capped: {shown:,} of {total:,} tokens shown; the full text is {where}]"

    return notice


def message_notice(event_id: str) -> Notice:
    """The notice of a capped message's content."""

    def notice(shown: int, total: int) -> str:
        shown_of = f"{shown:,} of {total:,} tokens shown"
        return f"[turnlog: message capped: {shown_of}; the full text is event {event_id}]"

    return notice


def arguments_notice(event_id: str) -> Notice:
    """The notice put in a capped tool call's arguments (in each capped string value when they are
    JSON): the whole call stays in the log as the named event."""

    def notice(shown: int, total: int) -> str:
        shown_of = f"{shown:,} of {total:,} tokens shown"
        return f"[turnlog: arguments capped: {shown_of}; the full call is event {event_id}]"

    return notice


_CacheKey = tuple[object, ...]
_CACHE_SIZE = 4096
"""Capped outputs kept per store (a few MB at most: each is at most the cap's tokens)."""

# One cache per store object: event ids are unique within a store only, so two stores with the same
# id and different content (a copy, an import into a second file) never see each other's text. Weak
# keys: a closed and dropped store takes its cache with it, and a new store at the same address
# starts empty.
_CACHES: weakref.WeakKeyDictionary[Store, OrderedDict[_CacheKey, Capped]] = weakref.WeakKeyDictionary()


def cap_output(
    store: Store,
    event_id: str,
    content: Callable[[], str],
    length: int,
    cap: int,
    total: int,
    artifact_id: str | None,
) -> Capped:
    """A tool output (``content()``, of ``length`` characters) capped to ``cap`` tokens, capped
    once per store and cap: a warm build reads neither the text nor the tokenizer."""
    tok: Tokenizer = store.tokenizer
    # The length and count guard against a store whose file was replaced under the same object.
    key: _CacheKey = (tok.name, "output", event_id, cap, length, total, artifact_id)
    found = _cached(store, key)
    if found is not None:
        return found
    ref = artifact_id or event_id
    notice = output_notice(ref, is_artifact=artifact_id is not None)
    return _remember(store, key, cap_text(content(), cap, tok, notice, total_tokens=total))


_COUNTS: OrderedDict[tuple[str, str], int] = OrderedDict()
_COUNTS_SIZE = 8192
_SHORT = 512
"""Texts up to this many characters have their counts remembered (ids, notices): a few MB at most."""


def count_short(tok: Tokenizer, text: str) -> int:
    """``tok.count(text)``, remembered for short texts (a tool call's id, a notice): the same few
    texts are counted by every build of a session. Counts depend only on the tokenizer and text."""
    if len(text) > _SHORT:
        return tok.count(text)
    key = (tok.name, text)
    found = _COUNTS.get(key)
    if found is None:
        found = _COUNTS[key] = tok.count(text)
        if len(_COUNTS) > _COUNTS_SIZE:
            _COUNTS.popitem(last=False)
    return found


def cap_call_arguments(store: Store, event_id: str, index: int, arguments: str, cap: int) -> Capped:
    """The arguments of a message's ``index``-th tool call capped to ``cap`` tokens (once per
    store, call and cap): see ``cap_arguments``."""
    key: _CacheKey = (store.tokenizer.name, f"arguments {index}", event_id, cap, len(arguments), 0, None)
    found = _cached(store, key)
    if found is not None:
        return found
    return _remember(store, key, cap_arguments(arguments, cap, store.tokenizer, arguments_notice(event_id)))


def cap_arguments(arguments: str, cap: int, tok: Tokenizer, notice: Notice) -> Capped:
    """Tool-call arguments in at most ``cap`` tokens. Arguments that are JSON stay JSON of the
    same shape (providers and the anthropic format parse them): the longest string values are
    capped head and tail around the notice, the rest is kept. Other arguments are capped as text."""
    total = tok.count(arguments)
    if total <= cap:
        return Capped(arguments, total, total, False, total)
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return cap_text(arguments, cap, tok, notice, total_tokens=total)
    leaves: list[tuple[tuple[Any, ...], str, int]] = []
    _strings(value, (), leaves, tok)
    leaves.sort(key=lambda leaf: -leaf[2])
    # Cap the fewest, longest strings that leave the rest (and a notice and some text in each) in
    # the cap; then share the room among them by size, and tighten while the JSON is over.
    rest = total
    chosen: list[tuple[tuple[Any, ...], str, int]] = []
    per_string = tok.count(notice(total, total)) + 8
    for leaf in leaves:
        if rest + len(chosen) * per_string <= cap:
            break
        chosen.append(leaf)
        rest -= leaf[2]
    room = cap - rest - 2 * len(chosen)
    if chosen and room >= len(chosen) * max(per_string, MIN_CAP):
        weight = sum(leaf[2] for leaf in chosen)
        shares = [max(MIN_CAP, per_string, room * leaf[2] // weight) for leaf in chosen]
        for _ in range(6):
            shown = 0
            for (path, text, _), share in zip(chosen, shares, strict=True):
                capped = cap_text(text, share, tok, notice)
                shown += capped.shown_tokens
                value = _replace(value, path, capped.text)
            result = json.dumps(value, ensure_ascii=False)
            tokens = tok.count(result)
            if tokens <= cap:
                return Capped(result, tokens, total, True, shown + rest)
            over = tokens - cap
            # JSON escapes (newlines, quotes) cost tokens cap_text did not see: take the excess
            # back from the shares, by size, and try again.
            shares = [max(MIN_CAP, share - over * share // sum(shares) - 1) for share in shares]
    # Too many small values to cap one by one: a JSON object that says what was left out.
    only = json.dumps({"_turnlog_capped": notice(0, total)}, ensure_ascii=False)
    if tok.count(only) > cap:
        only = json.dumps({"_turnlog_capped": short_notice(total)})
    return Capped(only, tok.count(only), total, True, 0)


def _strings(
    value: Any, path: tuple[Any, ...], out: list[tuple[tuple[Any, ...], str, int]], tok: Tokenizer
) -> None:
    """Every string value of a JSON document, with its path and its tokens as JSON."""
    if isinstance(value, str):
        out.append((path, value, tok.count(json.dumps(value, ensure_ascii=False))))
    elif isinstance(value, dict):
        for key, item in value.items():
            _strings(item, (*path, key), out, tok)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _strings(item, (*path, index), out, tok)


def _replace(value: Any, path: tuple[Any, ...], text: str) -> Any:
    if not path:
        return text
    parent = value
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = text
    return value


def cached_capped(store: Store, key: _CacheKey, make: Callable[[], Capped]) -> Capped:
    """``make()``, remembered per store under ``key`` (with the tokenizer's name added)."""
    full = (store.tokenizer.name, *key)
    found = _cached(store, full)
    return found if found is not None else _remember(store, full, make())


def _cached(store: Store, key: _CacheKey) -> Capped | None:
    cache = _CACHES.get(store)
    found = cache.get(key) if cache is not None else None
    if cache is not None and found is not None:
        cache.move_to_end(key)
    return found


def _remember(store: Store, key: _CacheKey, capped: Capped) -> Capped:
    cache = _CACHES.get(store)
    if cache is None:
        cache = _CACHES[store] = OrderedDict()
    cache[key] = capped
    if len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)
    return capped
