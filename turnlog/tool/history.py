"""``history.read`` and ``history.search``: the session's earlier events as an agent reads them, each
under a header with its version and event id, long contents capped by tokens the way the context
builder caps them, and every partial result ending with the call that shows the rest."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from turnlog.output import describe
from turnlog.projections.artifacts import InvalidArgumentError, read_artifact
from turnlog.projections.capping import MIN_CAP, cap_text
from turnlog.projections.live import COMPENSATING_TYPES
from turnlog.projections.live_index import Gap, dead_ranges, is_dead
from turnlog.projections.registry import materializer
from turnlog.projections.todos import render_checklist
from turnlog.store import (
    ArtifactWritten,
    MessageAppended,
    MessagePinned,
    MessageUnpinned,
    RecordedEvent,
    SessionStarted,
    Store,
    TodosUpdated,
    Tokenizer,
    ToolReturned,
    UnknownEventError,
)
from turnlog.tool.cards import TOOL_NAME
from turnlog.tool.errors import ToolInputError
from turnlog.tool.inputs import MAX_RANGE, HistoryEvent, HistoryRange, HistorySearch, HistoryTail

SKIPPED_TYPES = frozenset({"usage_recorded", "context_built"})
"""Bookkeeping events history results leave out: they say nothing the agent needs."""

ITEM_SHARE = 4
"""One event's content gets at most 1/ITEM_SHARE of a result's budget in tail and range reads."""

EXCERPT_BEFORE = 60
EXCERPT_AFTER = 100
"""Characters of context around a search match."""

_SPACE = re.compile(r"\s+")

_WINDOW = 500
"""Versions read per step when walking a session."""


@dataclass(slots=True)
class Page:
    """Blocks of text added while they fit a token budget."""

    tok: Tokenizer
    budget: int
    used: int = 0
    blocks: list[str] = field(default_factory=list)

    def room(self) -> int:
        return self.budget - self.used

    def add(self, block: str, *, force: bool = False) -> bool:
        """Add ``block`` (a line break is counted before it) if it fits, or with ``force`` anyway;
        say whether it was added. Results force their first item, so that even a tiny budget shows
        something (the dispatcher's cap then cuts it, keeping the notice at its end)."""
        cost = self.tok.count(block) + 1
        if cost > self.room() and not force:
            return False
        self.blocks.append(block)
        self.used += cost
        return True

    def text(self) -> str:
        return "\n".join(self.blocks)


def find_event(store: Store, session_id: str, ref: str) -> RecordedEvent:
    """The session's event with this id or unique prefix; an unknown one is the agent's mistake, said
    in the tool's own terms."""
    try:
        return store.find_event(session_id, ref)
    except UnknownEventError as exc:
        if "ambiguous" in str(exc):
            raise ToolInputError(str(exc)) from None
        raise ToolInputError(
            f"no event {ref!r} in this session; history.search and history.read show event ids"
        ) from None


def call_text(module: str, method: str, data: dict[str, object]) -> str:
    """A call as results quote it: ``history.read {"mode": "event", ...}``."""
    return f"{module}.{method} {json.dumps(data, ensure_ascii=False)}"


# --- history.read ------------------------------------------------------------------------------


def read_tail(store: Store, session_id: str, query: HistoryTail, tok: Tokenizer, budget: int) -> str:
    """The last ``n`` messages and the events among them, oldest first; when they do not all fit,
    the newest that do, and the range call that shows the older ones."""
    head = store.head_version(session_id)
    wanted: list[RecordedEvent] = []  # newest first
    messages = 0
    for record in _newest_first(store, session_id, head):
        if messages >= query.n:
            break
        wanted.append(record)
        if isinstance(record.event, (MessageAppended, ToolReturned)):
            messages += 1
    if not wanted:
        return "This session has no events yet."
    page = Page(tok, budget - 80)
    shown = 0
    for record in wanted:
        block = render_event(record, tok, min(budget // ITEM_SHARE, page.room() - 1))
        if block is not None and not page.add(block, force=not page.blocks):
            break
        shown += 1
    page.blocks.reverse()
    first_wanted = wanted[-1].version
    if shown == 0:
        alone = call_text("history", "read", {"mode": "event", "event_id": wanted[0].event_id[:12]})
        note = f"[version {head} does not fit this result; read it alone: {alone}]"
    elif shown < len(wanted):
        oldest = wanted[shown - 1].version
        lower = max(first_wanted, oldest - MAX_RANGE)
        older = call_text(
            "history", "read", {"mode": "range", "from_version": lower, "to_version": oldest - 1}
        )
        note = f"[versions {oldest}–{head} shown; older ones: {older}]"
    else:
        note = f"[versions {first_wanted}–{head}: the last {messages} messages"
        note += f"; before them: versions 1–{first_wanted - 1}]" if first_wanted > 1 else "]"
    body = page.text()
    return f"{body}\n{note}" if body else note


def read_range(store: Store, session_id: str, query: HistoryRange, tok: Tokenizer, budget: int) -> str:
    """The events of a version range, oldest first, as many as fit; the notice says where to go on."""
    head = store.head_version(session_id)
    if query.from_version > head:
        raise ToolInputError(
            f"from_version {query.from_version} is past the end: the session's last version is {head}"
        )
    last = min(query.to_version, head)
    dead = _dead(store, session_id)
    records = [
        r
        for r in store.read_session(session_id, from_version=query.from_version, to_version=last)
        if _live(r, dead)
    ]
    if not records:
        return f"[versions {query.from_version}–{last}: nothing live (rewound or removed)]"
    page = Page(tok, budget - 80)
    reached = query.from_version - 1
    for record in records:
        block = render_event(record, tok, min(budget // ITEM_SHARE, page.room() - 1))
        if block is not None and not page.add(block, force=not page.blocks):
            break
        reached = record.version
    end = "" if last == query.to_version else f"; the session ends at version {head}"
    if reached >= last:
        note = f"[versions {query.from_version}–{reached} of {query.from_version}–{last} shown{end}]"
    elif reached < query.from_version:
        whole = call_text("history", "read", {"mode": "event", "event_id": records[0].event_id[:12]})
        note = f"[version {query.from_version} does not fit this result; read it alone: {whole}]"
    else:
        following = call_text(
            "history", "read", {"mode": "range", "from_version": reached + 1, "to_version": last}
        )
        shown = f"versions {query.from_version}–{reached} of {query.from_version}–{last} shown"
        note = f"[{shown}; next: {following}]"
    body = page.text()
    return f"{body}\n{note}" if body else note


def read_event(store: Store, session_id: str, query: HistoryEvent, tok: Tokenizer, budget: int) -> str:
    """One event, whole when it fits; a large tool output as its first page of lines (with the
    artifacts.read call that goes on), anything else capped head and tail around a notice."""
    record = find_event(store, session_id, query.event_id)
    event = record.event
    artifact = event.artifact_id if isinstance(event, ToolReturned) else None
    if artifact is not None and isinstance(event, ToolReturned):
        header = _header(record)
        room = budget - tok.count(header) - 40
        try:
            page = read_artifact(store, artifact, max_tokens=max(room, MIN_CAP))
        except InvalidArgumentError:  # too little room for even one line and its notice
            return f"{header}\n{_capped(event.content, record, tok, room)}"
        text = f"{header}\n{page.render()}"
        if page.next_offset is not None:
            more = call_text("artifacts", "read", {"id": artifact[:12], "offset": page.next_offset})
            text += f"\n[the rest: {more}]"
        return text
    block = render_event(record, tok, budget - 8, skip_own=False)
    if block is None:
        return f"{_header(record)}\n{describe(record, 200)}"
    return block


def render_event(record: RecordedEvent, tok: Tokenizer, cap: int, *, skip_own: bool = True) -> str | None:
    """An event as history results show it, its content capped at ``cap`` tokens; None for the
    bookkeeping events history leaves out."""
    event = record.event
    header = _header(record)
    if record.type in SKIPPED_TYPES:
        return None
    if isinstance(event, MessageAppended):
        lines = []
        if event.content:
            lines.append(_capped(event.content, record, tok, cap - tok.count(header)))
        for call in event.tool_calls or ():
            lines.append(f"→ {call.name} [{call.id}] {_short(call.arguments, 400)}")
        return "\n".join([header, *lines])
    if isinstance(event, ToolReturned):
        if skip_own and event.tool_name == TOOL_NAME:
            return f"{header}\n(a result of this tool, not repeated: {record.tokens or 0:,} tokens)"
        return f"{header}\n{_capped(event.content, record, tok, cap - tok.count(header))}"
    if isinstance(event, TodosUpdated):
        return f"{header}\n{render_checklist(event.todos, show_ids=True)}"
    if isinstance(event, ArtifactWritten):
        size = len(event.content.encode("utf-8"))
        return f"{header} `{event.name}` ({(event.artifact_id or '')[:12]}, {size:,} bytes)"
    if isinstance(event, (MessagePinned, MessageUnpinned)):
        reason = f": {event.reason}" if event.reason else ""
        return f"{header} {event.target_event_id[:12]}{reason}"
    if isinstance(event, SessionStarted):
        return f"{header} {event.title or ''}".rstrip()
    return f"{header} {describe(record, 100)}".rstrip()


def _header(record: RecordedEvent) -> str:
    event = record.event
    ref = record.event_id[:12]
    if isinstance(event, MessageAppended):
        who = event.role + (f" ({event.name})" if event.name else "") + (" [pinned]" if event.pinned else "")
        return f"[v{record.version} {who} · {ref}]"
    if isinstance(event, ToolReturned):
        error = " ERROR" if event.is_error else ""
        return f"[v{record.version} tool {event.tool_name or '?'} [{event.tool_call_id}]{error} · {ref}]"
    names = {
        "todos_updated": "todos updated",
        "artifact_written": "artifact written",
        "message_pinned": "pinned",
        "message_unpinned": "unpinned",
        "session_started": "session started",
    }
    return f"[v{record.version} {names.get(record.type, record.type)} · {ref}]"


def _capped(content: str, record: RecordedEvent, tok: Tokenizer, cap: int) -> str:
    """``content`` capped like the context builder caps it; the notice names the call that shows
    the whole (the artifact for a large tool output, else the event)."""
    event = record.event
    artifact = event.artifact_id if isinstance(event, ToolReturned) else None
    if artifact is not None:
        whole = call_text("artifacts", "read", {"id": artifact[:12]})
    else:
        whole = call_text("history", "read", {"mode": "event", "event_id": record.event_id[:12]})

    def notice(shown: int, total: int) -> str:
        return f"[turnlog: capped: {shown:,} of {total:,} tokens shown; whole: {whole}]"

    # The stored count covers the event's other texts too, so it bounds the content's from above;
    # passing it spares counting a long text that cannot fit anyway.
    stored = record.tokens
    total = stored if stored is not None and stored > cap else None
    return cap_text(content, max(cap, MIN_CAP), tok, notice, total_tokens=total).text


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _newest_first(store: Store, session_id: str, below: int) -> Iterator[RecordedEvent]:
    """The session's live events with version <= ``below``, newest first, read in growing windows;
    a range a rewind or a removal took out is skipped without being read."""
    dead = _dead(store, session_id)
    upper = below
    size = 64
    while upper >= 1:
        gap = next((g for g in dead if g[0] <= upper <= g[1]), None)
        if gap is not None:
            upper = gap[0] - 1
            continue
        lower = max(1, upper - size + 1)
        chunk = store.read_session(session_id, from_version=lower, to_version=upper)
        yield from (r for r in reversed(chunk) if _live(r, dead))
        upper = lower - 1
        size = min(size * 2, _WINDOW)


def _dead(store: Store, session_id: str) -> list[Gap]:
    """The session's versions that are not live now (the agent reads the live history only)."""
    materializer(store).catch_up()
    with store.reading() as conn:
        return dead_ranges(conn, session_id, store.head_position())


def _live(record: RecordedEvent, dead: list[Gap]) -> bool:
    return record.type not in COMPENSATING_TYPES and not is_dead(dead, record.version)


# --- history.search ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Match:
    """One search hit."""

    version: int
    role: str
    event_id: str
    excerpt: str


def search(store: Store, session_id: str, query: HistorySearch, tok: Tokenizer, budget: int) -> str:
    """Matches of the query in the session's messages and tool returns, newest first, as many as
    ``limit`` and the budget allow; the footer gives the ``before_version`` of the next page. Results
    of this tool itself are not searched (they only repeat the log, and would match every query that
    was searched for before)."""
    head = store.head_version(session_id)
    start = head if query.before_version is None else min(head, query.before_version - 1)
    patterns = _patterns(query)
    header = f'Matches for "{query.query}"' + (" (all words)" if query.match == "all_words" else "")
    header += ", newest first" + ("" if query.before_version is None else f", below v{query.before_version}")
    widest = call_text("history", "search", {**_search_args(query), "before_version": start})
    reserve = tok.count(f"[more: {widest}]") + tok.count(_whole_line("x" * 12)) + 4
    page = Page(tok, budget - reserve)
    page.add(header + ":")
    shown: list[Match] = []
    more = False
    for match in _matches(store, session_id, start, patterns, query.role):
        line = f"- v{match.version} {match.role} · {match.event_id[:12]}: {match.excerpt}"
        if len(shown) >= query.limit or not page.add(line, force=not shown):
            more = True
            break
        shown.append(match)
    if not shown:
        where = "" if query.before_version is None else f" below version {query.before_version}"
        return f"{header}: none{where}."
    if more:
        following = {**_search_args(query), "before_version": shown[-1].version}
        page.blocks.append(f"[more: {call_text('history', 'search', following)}]")
    else:
        page.blocks.append(f"[{len(shown)} match{'es' if len(shown) != 1 else ''}; no more]")
    page.blocks.append(_whole_line(shown[0].event_id[:12]))
    return page.text()


def _whole_line(ref: str) -> str:
    return f"[a match whole: {call_text('history', 'read', {'mode': 'event', 'event_id': ref})}]"


def _search_args(query: HistorySearch) -> dict[str, object]:
    return query.model_dump(exclude_defaults=True, exclude={"before_version"})


def _patterns(query: HistorySearch) -> list[re.Pattern[str]]:
    words = query.query.split() if query.match == "all_words" else [query.query]
    return [re.compile(re.escape(word), re.IGNORECASE) for word in words]


def _matches(
    store: Store, session_id: str, start: int, patterns: list[re.Pattern[str]], role: str
) -> Iterator[Match]:
    for record in _newest_first(store, session_id, start):
        event = record.event
        kind: str
        if isinstance(event, MessageAppended):
            kind = event.role
            text = event.content
            calls = [c for c in event.tool_calls or () if c.name != TOOL_NAME]
            if calls:
                text += "".join(f"\n→ {c.name} {c.arguments}" for c in calls)
        elif isinstance(event, ToolReturned) and event.tool_name != TOOL_NAME:
            kind = "tool"
            text = event.content
        else:
            continue
        if role not in ("any", kind):
            continue
        found = [pattern.search(text) for pattern in patterns]
        if not all(found):
            continue
        first = min((m for m in found if m is not None), key=lambda m: m.start())
        label = f"tool {event.tool_name or '?'}" if isinstance(event, ToolReturned) else kind
        yield Match(record.version, label, record.event_id, _excerpt(text, first.start(), first.end()))


def _excerpt(text: str, start: int, end: int) -> str:
    """The match with some text around it, whitespace collapsed, ``…`` where it is cut."""
    left = max(0, start - EXCERPT_BEFORE)
    right = min(len(text), end + EXCERPT_AFTER)
    # Cut at whitespace when there is some nearby, so the excerpt starts and ends with whole words.
    space = _SPACE.search(text, left, start)
    if left > 0 and space is not None:
        left = space.end()
    back = text.rfind(" ", end, right)
    if right < len(text) and back > end:
        right = back
    piece = " ".join(text[left:right].split())
    return ("…" if left > 0 else "") + piece + ("…" if right < len(text) else "")


__all__ = [
    "Page",
    "call_text",
    "find_event",
    "read_event",
    "read_range",
    "read_tail",
    "render_event",
    "search",
]
