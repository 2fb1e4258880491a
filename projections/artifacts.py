"""Artifacts of a session: files written with ``artifact_written`` and tool outputs too large to keep
inline, listed from a materialized table, indexed in a few characters per artifact, and read back page
by page (by lines, optionally under a token budget) by full id or a unique id prefix."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import turnlog.store.tokenizer as _tokenizer_module
from turnlog.projections.artifact_index import (
    INDEX_MAX_CHARS,
    cap_entries,
    chars_omitted,
    index_entries,
    index_header,
    within_chars,
)
from turnlog.projections.capping import MIN_CAP, cap_text
from turnlog.projections.live_index import live_condition
from turnlog.projections.materialize import Projection, copy_rows, fork_of
from turnlog.store import (
    ArtifactWritten,
    RecordedEvent,
    Store,
    StoreError,
    Tokenizer,
    ToolReturned,
    UnknownArtifactError,
)
from turnlog.store.dialect import Connection, dialect_of
from turnlog.store.tokenizer import DEFAULT_ENCODING, lazy_tokenizer

ABSTRACT_CHARS = 120
"""Characters of content (whitespace collapsed) kept as an artifact's abstract."""

MIN_PREFIX = 8
"""The shortest id prefix :func:`read_artifact` accepts."""

DEFAULT_LIMIT = 200
"""Lines per page when the caller does not say."""

Source = Literal["tool", "user"]
Kind = Literal["artifact", "tool_output"]


class InvalidArgumentError(StoreError):
    """A query was called with an argument out of range (negative offset, zero limit, bad id, ...)."""


@dataclass(frozen=True, slots=True)
class ArtifactInfo:
    """One artifact as listed: where it was written and what it holds, without its content."""

    session_id: str
    """The session it belongs to."""
    position: int
    """Global log position of the event that wrote it."""
    version: int
    """The event's version within the session."""
    event_id: str
    """The event that wrote it."""
    recorded_at: str
    """When that event was stored (UTC, ISO 8601)."""
    kind: Kind
    """``artifact`` (an ``artifact_written`` event) or ``tool_output`` (a large tool return)."""
    artifact_id: str
    """sha256 of the content: fetch it with :func:`read_artifact` (a 12-character prefix is enough)."""
    name: str
    """Its name (a path, usually); for a tool output ``"{tool} output {tool_call_id}"``."""
    source: Source
    """``tool`` when a tool call produced it, else ``user`` (the user, or the agent directly)."""
    tool_call_id: str | None
    """The tool call that produced it, if any."""
    media_type: str
    """Its media type (tool outputs are ``text/plain``)."""
    size: int
    """Bytes of its UTF-8 content."""
    tokens: int
    """Tokens of its content with the store's tokenizer."""
    tokens_exact: bool
    """False when ``tokens`` is a size-based estimate (content over ``EXACT_COUNT_LIMIT`` bytes)."""
    lines: int
    """Lines of its content (what :func:`read_artifact` pages over)."""
    abstract: str
    """Its first characters, whitespace collapsed, with ``…`` when there is more."""

    @property
    def short_id(self) -> str:
        """The first 12 hex characters of the id: what the index shows, enough to fetch it."""
        return self.artifact_id[:12]


@dataclass(frozen=True, slots=True)
class ArtifactPage:
    """A page of an artifact's lines, with the notice that says where it is and how to go on."""

    artifact_id: str
    """The full id of the artifact read."""
    text: str
    """The lines, each with its line break (the last line of the content may have none)."""
    offset: int
    """0-based index of the first line returned."""
    lines: int
    """How many lines were returned."""
    total_lines: int
    """Lines of the whole artifact."""
    next_offset: int | None
    """The offset of the next page (``offset + lines``); None when this page reaches the end."""
    notice: str
    """E.g. ``[lines 201–400 of 1,234; next: offset=400]``."""
    capped: bool
    """True when the one line returned was cut to fit ``max_tokens`` (its middle is left out)."""
    size: int
    """Bytes of the whole artifact."""

    def render(self) -> str:
        """The page as shown to a model or a person: the text, then the notice on its own line.
        ``max_tokens`` applies to this."""
        return _render(self.text, self.notice)


class ArtifactsProjection(Projection):
    """One row per artifact write and per tool output kept as an artifact, with everything a
    listing shows, so neither listing nor indexing ever loads a blob."""

    name: ClassVar[str] = "artifacts"
    version: ClassVar[int] = 2
    tables: ClassVar[tuple[str, ...]] = ("artifacts",)
    types: ClassVar[tuple[str, ...] | None] = ("artifact_written", "tool_returned", "session_started")

    def create(self, conn: Connection, schema: str = "main") -> None:
        dialect_of(conn).create(
            conn,
            """
            CREATE TABLE {schema}.artifacts (
                session_id TEXT NOT NULL,
                position INTEGER NOT NULL,
                version INTEGER NOT NULL,
                event_id TEXT NOT NULL,
                recorded_at TEXT NOT NULL,
                kind TEXT NOT NULL CHECK (kind IN ('artifact', 'tool_output')),
                artifact_id TEXT NOT NULL,        -- sha256 hex of the content: the blob's id
                name TEXT NOT NULL,
                source TEXT NOT NULL CHECK (source IN ('tool', 'user')),
                tool_call_id TEXT,
                media_type TEXT NOT NULL,
                size INTEGER NOT NULL,            -- UTF-8 bytes
                tokens INTEGER NOT NULL,          -- of the content alone
                tokens_exact INTEGER NOT NULL,    -- 0 when tokens is a size-based estimate
                lines INTEGER NOT NULL,
                abstract TEXT NOT NULL,
                PRIMARY KEY (session_id, position)
            );
            CREATE INDEX artifacts_by_id ON {schema}.artifacts (artifact_id)
            """,
            schema,
        )

    def apply(self, conn: Connection, records: Sequence[RecordedEvent]) -> None:
        tokenizer: Tokenizer | None = None
        rows: list[tuple[object, ...]] = []
        for record in records:
            event = record.event
            own_tokens = 0
            fork = fork_of(conn, record)
            if fork is not None:  # a fork lists its parent's artifacts up to the fork
                self._insert(conn, rows)
                copy_rows(conn, "artifacts", fork[0], record.session_id, "position <= ?", (fork[2],))
                continue
            if isinstance(event, ArtifactWritten):
                kind: Kind = "artifact"
                name, media_type, call_id = event.name, event.media_type, event.tool_call_id
            elif isinstance(event, ToolReturned) and event.artifact_id is not None:
                kind = "tool_output"
                name = f"{event.tool_name or 'tool'} output {event.tool_call_id}"
                media_type, call_id = "text/plain", event.tool_call_id
                # The stored count also covers the call id (see ToolReturned.token_texts).
                tokenizer = tokenizer or self._tokenizer(conn)
                own_tokens = tokenizer.count(event.tool_call_id)
            else:
                continue
            if event.artifact_id is None:  # the store always fills it in
                continue
            content = event.content
            # (isascii is a flag check: most outputs are ASCII, and then need no encoded copy.)
            size = len(content) if content.isascii() else len(content.encode("utf-8"))
            exact = size <= _tokenizer_module.EXACT_COUNT_LIMIT
            tokens = record.tokens
            if tokens is None:  # the materializer counts tokens first; kept for robustness
                tokenizer = tokenizer or self._tokenizer(conn)
                tokens = tokenizer.count(content) if exact else _tokenizer_module.estimate_tokens(size)
                own_tokens = 0
            rows.append(
                (record.session_id, record.position, record.version, record.event_id,
                 record.recorded_at, kind, event.artifact_id, name,
                 "tool" if call_id is not None else "user", call_id, media_type, size,
                 max(0, tokens - own_tokens), int(exact), _count_lines(content), _abstract(content))
            )  # fmt: skip
        self._insert(conn, rows)

    def _tokenizer(self, conn: Connection) -> Tokenizer:
        """The store's tokenizer (recorded once, when the file was made), read once per connection:
        a turn that returns a tool output does not read it again."""
        kept: tuple[Connection, Tokenizer] | None = self.__dict__.get("_kept_tokenizer")
        if kept is not None and kept[0] is conn:
            return kept[1]
        tokenizer = _store_tokenizer(conn)
        self.__dict__["_kept_tokenizer"] = (conn, tokenizer)
        return tokenizer

    @staticmethod
    def _insert(conn: Connection, rows: list[tuple[object, ...]]) -> None:
        conn.executemany(
            "INSERT INTO artifacts (session_id, position, version, event_id, recorded_at, kind, "
            "artifact_id, name, source, tool_call_id, media_type, size, tokens, tokens_exact, lines, "
            "abstract) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        rows.clear()


# --- queries ---------------------------------------------------------------------------------------


def list_artifacts(
    store: Store, session_id: str, at: int | None = None, *, after: int = 0
) -> list[ArtifactInfo]:
    """The session's artifacts in log order, each write listed once (the same content written twice
    is listed twice, with the same id). ``at``: only those written at or before that global position;
    ``after``: only those written after that one (what a caller that listed them before lacks).
    Raises UnknownSessionError for a session with no events."""
    _check_at(at)
    store.require_session(session_id)
    _caught_up(store)
    with store.reading() as conn:
        return artifact_rows(conn, session_id, at, after=after)


def artifact_rows(conn: Connection, session_id: str, at: int | None, *, after: int = 0) -> list[ArtifactInfo]:
    """What :func:`list_artifacts` lists, read in the caller's snapshot, which knows the session
    has events and the projections are caught up (a context build's: no check, no catch-up)."""
    through = _through(at)
    rows = conn.execute(  # live writes only: a rewound or removed write is not listed
        f"SELECT {_INFO_COLUMNS} FROM artifacts WHERE session_id = ? AND position <= ? "
        f"AND position > ? AND {live_condition('artifacts')} ORDER BY position",
        (session_id, through, after, through, through),
    ).fetchall()
    return [_info(row) for row in rows]


def artifact_index(
    store: Store, session_id: str, at: int | None = None, max_chars: int = INDEX_MAX_CHARS
) -> str:
    """A short index of the session's artifacts for progressive disclosure: a header line, then one
    line per artifact, `` - `id12` · source · `name` — abstract ``, sorted by name (code-point order)
    then position. Live writes only, as :func:`list_artifacts` lists them (a rewound or removed write
    is not listed).

    An artifact written several times under one name is listed once per write (each with the id of
    that content), oldest first; all but the newest are marked ``(overwritten later)`` so a reader
    knows which is current without losing the history. At most ``max_chars`` characters in all: when
    entries do not fit, the last ones are left out and a final line (within the cap) says how many."""
    if isinstance(max_chars, bool) or not isinstance(max_chars, int):
        raise InvalidArgumentError(f"max_chars must be an integer, not {max_chars!r}")
    infos = list_artifacts(store, session_id, at)
    header = index_header(session_id, len(infos), at)
    entries = index_entries(infos)
    capped = cap_entries(header, entries, within_chars(max_chars), chars_omitted(max_chars))
    if capped is None:
        needed = len(header) + 1 + len(chars_omitted(max_chars)(len(entries)))
        raise InvalidArgumentError(
            f"max_chars={max_chars:,} is too small for the index's header and notice; use at least {needed:,}"
        )
    return capped[0]


def read_artifact(
    store: Store,
    artifact_id: str,
    offset: int = 0,
    limit: int = DEFAULT_LIMIT,
    max_tokens: int | None = None,
) -> ArtifactPage:
    """A page of an artifact's lines: ``limit`` lines from the 0-based line ``offset``.

    ``artifact_id`` is the full sha256 or a prefix of at least 8 hex characters that only one
    artifact has. With ``max_tokens``, fewer whole lines are returned so that :meth:`ArtifactPage.render`
    (text plus notice) has at most that many tokens; if even the first line does not fit, it is
    returned capped (head and tail around a notice) and the page says so. ``next_offset`` is always
    ``offset + lines``, so reading page after page never skips or repeats a line."""
    _check_int("offset", offset, 0)
    _check_int("limit", limit, 1)
    if max_tokens is not None:
        _check_int("max_tokens", max_tokens, 1)
    full_id = _resolve(store, artifact_id)
    blob = store.get_blob(full_id)
    content = blob.text
    total = _count_lines(content)
    if total == 0:
        if offset != 0:
            raise InvalidArgumentError(f"offset {offset} is past the end: artifact {full_id[:12]} is empty")
        return ArtifactPage(full_id, "", 0, 0, 0, None, "[empty artifact: 0 lines]", False, blob.size)
    if offset >= total:
        raise InvalidArgumentError(
            f"offset {offset:,} is past the end: artifact {full_id[:12]} has {total:,} lines "
            f"(offsets 0 to {total - 1:,})"
        )
    start, end, count = _line_span(content, offset, limit)
    chunk = content[start:end]
    if max_tokens is None:
        return _page(full_id, chunk, offset, count, total, blob.size)
    return _fit(store.tokenizer, full_id, _split_lines(chunk), offset, total, blob.size, max_tokens)


# --- helpers ---------------------------------------------------------------------------------------

_INFO_COLUMNS = (
    "session_id, position, version, event_id, recorded_at, kind, artifact_id, name, source, "
    "tool_call_id, media_type, size, tokens, tokens_exact, lines, abstract"
)

_HEX = re.compile(r"[0-9a-f]+")


def _caught_up(store: Store) -> None:
    # Imported here: the registry imports this module to list its projection.
    from turnlog.projections.registry import materializer

    materializer(store).catch_up()


def _store_tokenizer(conn: Connection) -> Tokenizer:
    """The tokenizer the store records (projections get a connection, not the store)."""
    row = conn.execute("SELECT value FROM turnlog_meta WHERE key = 'tokenizer'").fetchone()
    return lazy_tokenizer(row[0] if row else DEFAULT_ENCODING)


def _info(row: tuple[Any, ...]) -> ArtifactInfo:
    (sid, pos, version, event_id, at, kind, aid, name, source, call, media, size, tokens, exact,
     lines, abstract) = row  # fmt: skip
    return ArtifactInfo(
        session_id=str(sid),
        position=int(pos),
        version=int(version),
        event_id=str(event_id),
        recorded_at=str(at),
        kind="tool_output" if kind == "tool_output" else "artifact",
        artifact_id=str(aid),
        name=str(name),
        source="tool" if source == "tool" else "user",
        tool_call_id=None if call is None else str(call),
        media_type=str(media),
        size=int(size),
        tokens=int(tokens),
        tokens_exact=bool(exact),
        lines=int(lines),
        abstract=str(abstract),
    )


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} must be an integer, not {value!r}")
    if value < minimum:
        raise InvalidArgumentError(f"{name} must be {minimum} or more, got {value}")


def _check_at(at: int | None) -> None:
    if at is not None:
        _check_int("at (a global log position)", at, 0)


def _through(at: int | None) -> int:
    return 2**62 if at is None else at


def _resolve(store: Store, artifact_id: str) -> str:
    """The full id for a full id or a unique prefix of at least MIN_PREFIX hex characters."""
    if not isinstance(artifact_id, str):
        raise InvalidArgumentError(f"an artifact id is a string of hex characters, not {artifact_id!r}")
    wanted = artifact_id.strip().lower()
    if not _HEX.fullmatch(wanted) or len(wanted) > 64:
        raise InvalidArgumentError(
            f"{artifact_id!r} is not an artifact id: ids are sha256 digests, 64 hex characters "
            f"(a prefix of at least {MIN_PREFIX} is enough)"
        )
    if len(wanted) < MIN_PREFIX:
        raise InvalidArgumentError(
            f"artifact id prefix {artifact_id!r} is too short: give at least {MIN_PREFIX} hex characters "
            "(the index shows 12)"
        )
    if len(wanted) == 64:
        return wanted  # read straight from the store's blobs: no table needed
    _caught_up(store)
    with store.reading() as conn:
        # Ids are lowercase hex, so every id starting with the prefix sorts below prefix + 'g'.
        found = [
            str(row[0])
            for row in conn.execute(
                "SELECT DISTINCT artifact_id FROM artifacts WHERE artifact_id >= ? AND artifact_id < ? "
                "ORDER BY artifact_id LIMIT 4",
                (wanted, wanted + "g"),
            )
        ]
    if not found:
        raise UnknownArtifactError(
            f"no artifact id starts with {wanted!r}; `turnlog artifacts SESSION` lists them"
        )
    if len(found) > 1:
        shown = ", ".join(f"{aid[: len(wanted) + 4]}…" for aid in found[:3])
        more = " and more" if len(found) > 3 else ""
        raise UnknownArtifactError(
            f"artifact id prefix {wanted!r} is ambiguous: it matches {shown}{more}; give more characters"
        )
    return found[0]


def _count_lines(text: str) -> int:
    """Lines split at ``\\n`` only (the last one may lack it); an empty text has none."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _line_span(text: str, offset: int, limit: int) -> tuple[int, int, int]:
    """Character range of ``limit`` lines from line ``offset`` (which exists), and their count."""
    start = 0
    for _ in range(offset):
        start = text.index("\n", start) + 1
    end, count = start, 0
    while count < limit and end < len(text):
        newline = text.find("\n", end)
        end = len(text) if newline < 0 else newline + 1
        count += 1
    return start, end, count


def _split_lines(chunk: str) -> list[str]:
    """The lines of ``chunk``, each keeping its ``\\n`` (str.splitlines would also split at \\r,
    form feeds and more, and disagree with the line count)."""
    parts = chunk.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _render(text: str, notice: str) -> str:
    if not text:
        return notice
    return f"{text}{notice}" if text.endswith("\n") else f"{text}\n{notice}"


def _notice(offset: int, count: int, total: int) -> str:
    first, last = offset + 1, offset + count
    where = f"line {first:,}" if count == 1 else f"lines {first:,}–{last:,}"
    after = "end of artifact" if last >= total else f"next: offset={last}"
    return f"[{where} of {total:,}; {after}]"


def _page(artifact_id: str, text: str, offset: int, count: int, total: int, size: int) -> ArtifactPage:
    last = offset + count
    return ArtifactPage(
        artifact_id,
        text,
        offset,
        count,
        total,
        None if last >= total else last,
        _notice(offset, count, total),
        False,
        size,
    )


def _fit(
    tok: Tokenizer,
    artifact_id: str,
    lines: list[str],
    offset: int,
    total: int,
    size: int,
    max_tokens: int,
) -> ArtifactPage:
    """The most whole lines whose rendered page fits ``max_tokens``, else the first line capped."""

    def fits(k: int) -> bool:
        return tok.count(_render("".join(lines[:k]), _notice(offset, k, total))) <= max_tokens

    # Only lines inside the first max_tokens + 1 tokens can fit, so no more text than that (plus one
    # short line of slack) is ever counted, however long the page or its lines are.
    chunk = "".join(lines)
    head = tok.head(chunk, max_tokens + 1)
    if len(head) >= len(chunk):
        upper = len(lines)
    else:
        upper = head.count("\n")
        if upper < len(lines) and len(lines[upper]) <= 8 * max_tokens + 64:
            upper += 1
    low, high = 0, upper  # invariant: fits(low) or low == 0; the answer is in [low, high]
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    if low > 0:
        return _page(artifact_id, "".join(lines[:low]), offset, low, total, size)
    return _capped_line(tok, artifact_id, lines[0], offset, total, size, max_tokens)


def _capped_line(
    tok: Tokenizer, artifact_id: str, line: str, offset: int, total: int, size: int, max_tokens: int
) -> ArtifactPage:
    number = offset + 1
    after = "end of artifact" if number >= total else f"next: offset={number}"
    notice = f"[line {number:,} of {total:,}, cut to fit max_tokens={max_tokens:,}; {after}]"
    body = line[:-1] if line.endswith("\n") else line
    line_bytes = len(body.encode("utf-8"))
    # Counting a huge line exactly costs seconds, and the estimate only feeds the notice's total.
    line_tokens = (
        tok.count(body)
        if line_bytes <= _tokenizer_module.EXACT_COUNT_LIMIT
        else _tokenizer_module.estimate_tokens(line_bytes)
    )

    def inline(shown: int, all_tokens: int) -> str:
        return f"[turnlog: line {number:,} cut: {shown:,} of {all_tokens:,} tokens shown]"

    budget = max_tokens - tok.count(notice) - 1
    for _ in range(4):
        if budget < MIN_CAP:
            break
        capped = cap_text(body, budget, tok, inline, total_tokens=line_tokens)
        if not capped.capped:
            # Whole, it fitted the budget but not the page (tokens merge across the join): cut it.
            budget = min(budget, capped.tokens) - 1
            line_tokens = capped.tokens
            continue
        text = capped.text + "\n"
        used = tok.count(_render(text, notice))
        if used <= max_tokens:
            return ArtifactPage(
                artifact_id, text, offset, 1, total, None if number >= total else number, notice, True, size
            )
        budget -= used - max_tokens
    needed = tok.count(notice) + 1 + MIN_CAP + 8
    raise InvalidArgumentError(
        f"max_tokens={max_tokens:,} is too small to show line {number:,} of artifact {artifact_id[:12]} "
        f"with its notice; use at least {needed:,}"
    )


def _abstract(content: str) -> str:
    """The first ABSTRACT_CHARS characters with whitespace collapsed, ``…`` when more follows. Only
    a prefix is looked at (grown while whitespace runs eat it), so a huge artifact costs no more."""
    window = 4 * ABSTRACT_CHARS
    while True:
        piece = content[:window]
        # (split/join: the same runs as the regex ``\s+`` with strip, both use str.isspace's set,
        # at a fraction of a regex search per character.)
        collapsed = " ".join(piece.split())
        if len(collapsed) > ABSTRACT_CHARS or window >= len(content):
            break
        window *= 4
    if len(collapsed) > ABSTRACT_CHARS:
        return collapsed[:ABSTRACT_CHARS].rstrip() + "…"
    return collapsed


__all__ = [
    "ArtifactInfo",
    "ArtifactPage",
    "ArtifactsProjection",
    "InvalidArgumentError",
    "artifact_index",
    "artifact_rows",
    "list_artifacts",
    "read_artifact",
]
