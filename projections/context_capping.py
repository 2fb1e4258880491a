"""Capping for the context: the notices that say what was capped and where the full text is, and
a per-store cache of capped tool outputs (capping is deterministic, and a warm build that caps the
same outputs again costs several times as much)."""

from __future__ import annotations

import weakref
from collections import OrderedDict

from projections.capping import Capped, Notice, cap_text
from store import MessageAppended, SQLiteStore, Tokenizer


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


def other_texts(event: MessageAppended) -> list[str]:
    """The texts of a message, other than its content, that its stored token count includes."""
    texts = [event.name] if event.name else []
    for call in event.tool_calls or ():
        texts += [call.id, call.name, call.arguments]
    return texts


_CacheKey = tuple[str, str, int, int, int, str | None]
_CACHE_SIZE = 4096
"""Capped outputs kept per store (a few MB at most: each is at most the cap's tokens)."""

# One cache per store object: event ids are unique within a store only, so two stores with the same
# id and different content (a copy, an import into a second file) never see each other's text. Weak
# keys: a closed and dropped store takes its cache with it, and a new store at the same address
# starts empty.
_CACHES: weakref.WeakKeyDictionary[SQLiteStore, OrderedDict[_CacheKey, Capped]] = weakref.WeakKeyDictionary()


def cap_output(
    store: SQLiteStore,
    event_id: str,
    content: str,
    cap: int,
    total: int,
    artifact_id: str | None,
) -> Capped:
    """A tool output capped to ``cap`` tokens, capped once per store and cap."""
    tok: Tokenizer = store.tokenizer
    cache = _CACHES.get(store)
    if cache is None:
        cache = _CACHES[store] = OrderedDict()
    # The length and count guard against a store whose file was replaced under the same object.
    key: _CacheKey = (tok.name, event_id, cap, len(content), total, artifact_id)
    found = cache.get(key)
    if found is not None:
        cache.move_to_end(key)
        return found
    ref = artifact_id or event_id
    capped = cap_text(
        content, cap, tok, output_notice(ref, is_artifact=artifact_id is not None), total_tokens=total
    )
    cache[key] = capped
    if len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)
    return capped
