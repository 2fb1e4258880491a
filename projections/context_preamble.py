"""The index preamble of a built context: when the session has artifacts, one system message right
after the leading system messages that lists them, one line each (`` - `id12` · source · `path` —
abstract ``, the newest live write of each path, sorted by path), and says how to fetch a full body.
Its full contents are never included. It is cut to whole lines within INDEX_MAX_CHARS characters and
half the budget, with a closing line that says how many were left out, and left out when not even its
header and that line fit. A build reads one row to know whether the index it rendered before still
holds (the session's newest artifact write as of the build, and the ranges that are not live): the
rendering and its token count are cached per store, so a warm build does not grow with the index."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from dataclasses import dataclass

from turnlog.projections.artifact_index import INDEX_MAX_CHARS, cap_entries, index_entries, is_own_output
from turnlog.projections.artifacts import ArtifactInfo, artifact_rows, list_artifacts
from turnlog.projections.context_reader import ARTIFACT_WATERMARK, ContextReader
from turnlog.projections.context_types import PER_MESSAGE, ContextMessage, Mode
from turnlog.projections.store_cache import StoreCache

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
    """The first entries, as many as fit with the header within the character cap (all when they
    do): the others can never be shown."""
    total: int
    """How many entries in all."""
    text: str | None
    """Header and every entry; None when that is over the character cap."""
    tokens: int | None
    """Tokens of ``text`` as a system message; None when it is over the character cap (not counted)."""


@dataclass(slots=True)
class _Listing:
    """The index's lines of a session as of an artifact row, kept to be brought forward with the
    rows written after it (a turn adds a few), rather than listed and rendered again."""

    position: int
    """The newest artifact row it has taken in."""
    entries: dict[str, str]
    """Each name's line (its newest live write's, the agent tool's own results left out)."""
    names: list[str]
    """The names, sorted in code-point order."""


_Key = tuple[str, str, int, str, tuple[tuple[int, int], ...]]
_FULL: StoreCache[_Key, tuple[_Index | None]] = StoreCache(256)
"""The whole index per watermark (None inside: nothing to list)."""
_CUTS: StoreCache[tuple[_Key, int], tuple[tuple[str, int] | None]] = StoreCache(256)
"""The index cut to a token limit, per watermark and limit (None inside: not even its header fits)."""
_LISTINGS: StoreCache[tuple[str, tuple[tuple[int, int], ...]], _Listing] = StoreCache(64)
"""Per session and ranges not live: the newest listing made (the live writes at or before a
position do not change while those ranges do not)."""
_LISTING_LOCK = threading.Lock()
_LINE_TOKENS: StoreCache[tuple[str, str], int] = StoreCache(8192)
"""Tokens of an index line with its break: its exact share of the index's count where the
lines' joins split (``Tokenizer.splits``), an estimate elsewhere."""


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
    mode: Mode = "full"
    if index.text is not None and index.tokens is not None and index.tokens <= limit:
        text, tokens = index.text, index.tokens
    else:
        cut = _cut(reader, key, index, limit - overhead)
        if cut is None:
            return None
        text, tokens, mode = cut[0], overhead + cut[1], "capped"
    return ContextMessage(
        role="system",
        content=text,
        tokens=tokens,
        mode=mode,
        category="index",
        event_ids=(),
        order=(before_version() - 0.5, INDEX_ORDER),
    )


NOTE_ORDER = 5
"""A new-artifact note's place among messages of the same order key."""


def artifact_note(lines: list[str]) -> str:
    """The text of a note that lists artifacts written since the index was last made."""
    head = "[turnlog: new artifact, not in the index yet; fetch it by its id with artifacts.read]"
    return "\n".join([head, *lines])


def artifact_notes(reader: ContextReader, since: int) -> list[ContextMessage]:
    """Under a cache-stable policy, the artifacts written after global position ``since`` (the
    cut's last move, whose index lists the older ones): one short system note per writing event,
    placed right after it, so that a note, once sent, stays where it was until the next cut move
    folds it into the index. Tool outputs kept whole are not noted: their capped text names them."""
    if not reader.policy.index:
        return []
    with reader.reading() as conn:
        newer = conn.execute(
            "SELECT 1 FROM artifacts WHERE session_id = ? AND position > ? AND position <= ? "
            "AND kind = 'artifact' LIMIT 1",
            (reader.sid, since, reader.at),
        ).fetchone()
    if newer is None:
        return []
    by_version: dict[int, list[ArtifactInfo]] = {}
    for info in list_artifacts(reader.store, reader.sid, reader.at, after=since):
        if info.kind != "tool_output" and not is_own_output(info):
            by_version.setdefault(info.version, []).append(info)
    notes = []
    overhead = PER_MESSAGE + reader.costs["system"]
    for version, infos in sorted(by_version.items()):
        text = artifact_note(index_entries(infos))
        notes.append(
            ContextMessage(
                role="system",
                content=text,
                tokens=overhead + reader.tok.count(text),
                mode="notice",
                category="index",
                event_ids=tuple(dict.fromkeys(info.event_id for info in infos)),
                order=(version + 0.5, NOTE_ORDER),
            )
        )
    return notes


def _watermark(reader: ContextReader) -> _Key | None:
    """What the index as of the build depends on: the newest artifact row at or before the build's
    position (rows are only ever added), and the ranges not live then. None: no artifacts."""
    known = reader.known()
    if known is not None:
        row = known.artifact
    else:
        with reader.reading() as conn:
            row = conn.execute(ARTIFACT_WATERMARK, (reader.sid, reader.at)).fetchone()
    if row is None:
        return None
    return (reader.tok.name, reader.sid, int(row[0]), str(row[1]), tuple(reader.dead))


def _full(reader: ContextReader, key: _Key) -> _Index | None:
    """The index (header and every entry within the character cap), rendered once per watermark
    from the session's listing, which takes in only the artifact rows written since it was made."""
    found = _FULL.get(reader.store, key)
    if found is not None:
        return found[0]
    with _LISTING_LOCK:
        listing = _listing(reader, key)
        names, entries = listing.names, listing.entries
        index: _Index | None = None
        if names:
            header = preamble_header(len(names))
            shown: list[str] = []
            size = len(header)
            for name in names:  # the lines past the character cap can never be shown
                size += 1 + len(entries[name])
                if size > INDEX_MAX_CHARS:
                    break
                shown.append(entries[name])
            text = tokens = None
            if len(shown) == len(names):
                text = "\n".join([header, *shown])
                tokens = PER_MESSAGE + reader.costs["system"] + _count_lines(reader, header, shown, text)
            index = _Index(header, tuple(shown), len(names), text, tokens)
    return _FULL.put(reader.store, key, (index,))[0]


def _listing(reader: ContextReader, key: _Key) -> _Listing:
    """The session's listing as of the watermark ``key``: the one kept, brought forward with the
    rows written after it, or (none kept, or kept for a later position) listed afresh."""
    place = (reader.sid, key[4])
    position = key[2]
    listing = _LISTINGS.get(reader.store, place)
    if listing is None or listing.position > position:
        listing = _LISTINGS.put(reader.store, place, _Listing(0, {}, []))
    if listing.position == position:
        return listing
    # In the build's snapshot: the session has events, and the artifacts' rows are caught up.
    with reader.reading() as conn:
        infos = artifact_rows(conn, reader.sid, reader.at, after=listing.position)
    for info in infos:
        if is_own_output(info):
            continue
        if info.name not in listing.entries:
            bisect.insort(listing.names, info.name)
        listing.entries[info.name] = index_entries([info])[0]
    listing.position = position
    return listing


def _cut(reader: ContextReader, key: _Key, index: _Index, limit: int) -> tuple[str, int] | None:
    """The index cut to whole lines within the character cap and ``limit`` content tokens, and its
    content tokens; None when not even the header and the closing line fit. Cached per limit."""
    if limit <= 0:
        return None
    found = _CUTS.get(reader.store, (key, limit))
    if found is not None:
        return found[0]
    tok = reader.tok
    by_lines = _cut_by_lines(reader, index, limit)
    if by_lines is not None:
        return _CUTS.put(reader.store, (key, limit), (by_lines[0],))[0]

    def fits(text: str) -> bool:
        # Characters first: a text over the character cap is never counted.
        return len(text) <= INDEX_MAX_CHARS and tok.count(text) <= limit

    guess = _guess(reader, index, limit)
    capped = cap_entries(index.header, index.entries, fits, preamble_omitted, total=index.total, guess=guess)
    result = None if capped is None else (capped[0], tok.count(capped[0]))
    return _CUTS.put(reader.store, (key, limit), (result,))[0]


def _cut_by_lines(reader: ContextReader, index: _Index, limit: int) -> tuple[tuple[str, int] | None] | None:
    """The cut of :func:`_cut` (as many entries as fit, in order), its counts the sums of its lines'
    remembered counts, so that a cut tokenizes only the lines it has not seen (a turn's new
    entry and the closing line), not the index; None when a line's join does not split (see
    ``Tokenizer.splits``): the caller then counts the texts."""
    tok = reader.tok
    header, entries = index.header + "\n", index.entries
    last = len(entries) - 1 if index.total == len(entries) else len(entries)
    if not tok.splits_lines([index.header, *entries[: last + 1], preamble_omitted(index.total)]):
        return None

    # The whole index never fits here: index_message cuts only an index over the limit or the cap.
    def fits(kept: int, size: int, used: int) -> bool:
        omitted = preamble_omitted(index.total - kept)
        return size + len(omitted) <= INDEX_MAX_CHARS and used + tok.count(omitted) <= limit

    kept, size, used = 0, len(header), tok.count(header)
    if not fits(kept, size, used):
        return (None,)
    # Every closing line is at most as long as the first, and has at most as many tokens as bytes:
    # below that bound an entry fits without counting the closing line it would get.
    widest = preamble_omitted(index.total)
    room_chars, room_tokens = INDEX_MAX_CHARS - len(widest), limit - len(widest.encode("utf-8"))
    while kept < last:
        entry = entries[kept]
        more_size, more_used = size + len(entry) + 1, used + _line_tokens(reader, entry)
        surely = more_size <= room_chars and more_used <= room_tokens
        if not surely and not fits(kept + 1, more_size, more_used):
            break
        kept, size, used = kept + 1, more_size, more_used
    omitted = preamble_omitted(index.total - kept)
    return (("\n".join([index.header, *entries[:kept], omitted]), used + tok.count(omitted)),)


def _count_lines(reader: ContextReader, header: str, entries: list[str], text: str) -> int:
    """Tokens of ``text``, the header and entries joined by breaks: the sum of its lines' counts
    (each counted once per store) where their joins split, else ``text`` counted whole."""
    tok = reader.tok
    if not entries or not tok.splits_lines([header, *entries]):
        return tok.count(text)
    return (
        tok.count(header + "\n") + sum(_line_tokens(reader, e) for e in entries[:-1]) + tok.count(entries[-1])
    )


def _line_tokens(reader: ContextReader, entry: str) -> int:
    """Tokens of an index line with its break, counted once per store."""
    tok = reader.tok
    key = (tok.name, entry)
    found = _LINE_TOKENS.get(reader.store, key)
    return found if found is not None else _LINE_TOKENS.put(reader.store, key, tok.count(entry + "\n"))


def _guess(reader: ContextReader, index: _Index, limit: int) -> int:
    """How many entries fit ``limit`` tokens by the sum of their lines' counts (each line counted
    once per store), where the exact cut's search starts: two or three counts of the whole text
    instead of one per step of a bisection."""
    tok = reader.tok
    used = tok.count(index.header) + tok.count(preamble_omitted(index.total))
    for kept, entry in enumerate(index.entries):
        used += _line_tokens(reader, entry)
        if used > limit:
            return kept
    return len(index.entries)


__all__ = [
    "INDEX_ORDER",
    "artifact_note",
    "artifact_notes",
    "index_message",
    "preamble_header",
    "preamble_omitted",
]
