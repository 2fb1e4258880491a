"""The context builder: the messages to send to the model for a session, as of any position, under
a token budget. System messages, the first user message and pinned messages are always kept whole;
then the newest messages, newest first, until the budget is reached. A tool call and its returns
are kept or dropped together; tool outputs and over-long messages are capped by real tokens with a
notice that counts; what is left out is said. Only the retained messages and the tail are read,
with the token counts stored at append time, so a build costs the same at any session length."""

from __future__ import annotations

import bisect
import functools
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from projections.capping import MIN_CAP, Capped, cap_text
from projections.context_index import ContextIndex
from projections.formats import render
from projections.registry import materializer
from store import (
    ContextBuilt,
    ManifestEntry,
    MessageAppended,
    RecordedEvent,
    SQLiteStore,
    StoreError,
    SummaryRecorded,
    Tokenizer,
    ToolCall,
    ToolReturned,
)

PRIME_TOKENS = 3
"""Tokens every reply is primed with (OpenAI's rule)."""
PER_MESSAGE = 3
"""Tokens of chat-format overhead per message."""
PER_NAME = 1
"""Extra token when a message has a ``name``."""

INTERRUPTED = "[turnlog: no result was recorded for this call: it was interrupted]"
"""The synthesized result of a call that never got one (shown in contexts, never logged)."""

FILL_MIN = 48
"""The least room worth filling with a capped message at the oldest end of the context."""

Format = Literal["openai", "anthropic", "text"]
Mode = Literal["full", "capped", "synthesized", "notice", "summary"]
Category = Literal["system", "pinned", "summary", "tool_output", "message", "notice"]


class ContextBudgetError(StoreError):
    """The messages that must always be kept do not fit the budget."""


class ContextPolicy(BaseModel):
    """How a context is built."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    budget: int = Field(ge=1)
    """Prompt tokens, everything included (messages, chat-format overhead, notices)."""
    max_tool_tokens: int = Field(default=1000, ge=MIN_CAP)
    """Inline cap for a tool output (the full output stays fetchable)."""
    max_message_tokens: int = Field(default=4000, ge=MIN_CAP)
    """Cap for an over-long user or assistant message's content."""
    format: Format = "openai"
    """Output format: OpenAI chat-completions messages, Anthropic messages, or plain text."""
    cap_open_run: bool = False
    """Cap tool outputs of the run still open too (by default they are shown whole if they fit)."""
    fill: bool = True
    """Use leftover budget for the next older message, capped to fit."""


@dataclass(slots=True)
class ContextMessage:
    """A message of the context, before it is rendered in a format."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tokens: int
    mode: Mode
    category: Category
    event_ids: tuple[str, ...]
    order: tuple[float, int]
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False


@dataclass
class BuiltContext:
    """The result of a build: the rendered messages and the manifest of what went in."""

    session_id: str
    at_position: int
    head_version: int
    policy: ContextPolicy
    tokenizer: str
    total_tokens: int
    messages: list[ContextMessage]
    omitted_messages: int
    omitted_tokens: int
    rendered: Any = field(default=None)

    @functools.cached_property
    def entries(self) -> tuple[ManifestEntry, ...]:
        """One manifest entry per message, in order (computed once)."""
        return tuple(
            ManifestEntry(
                event_ids=m.event_ids,
                role=m.role,
                mode=m.mode,
                category=m.category,
                tokens=m.tokens,
            )
            for m in self.messages
        )

    def manifest(self) -> dict[str, Any]:
        """What went into the context, as JSON data."""
        return {
            "session_id": self.session_id,
            "at_position": self.at_position,
            "head_version": self.head_version,
            "tokenizer": self.tokenizer,
            "budget": self.policy.budget,
            "total_tokens": self.total_tokens,
            "omitted_messages": self.omitted_messages,
            "omitted_tokens": self.omitted_tokens,
            "policy": self.policy.model_dump(),
            "entries": [e.model_dump() for e in self.entries],
        }

    def to_event(self, *, run_id: str | None = None, model: str | None = None) -> ContextBuilt:
        """The ``context_built`` event recording this build."""
        return ContextBuilt(
            at_position=self.at_position,
            head_version=self.head_version,
            format=self.policy.format,
            tokenizer=self.tokenizer,
            budget=self.policy.budget,
            total_tokens=self.total_tokens,
            policy=self.policy.model_dump(),
            entries=self.entries,
            run_id=run_id,
            model=model,
        )


@dataclass(slots=True)
class _Row:
    """A light ctx_messages row."""

    version: int
    position: int
    role: str
    first_user: bool
    has_name: bool
    n_calls: int
    call_version: int | None
    tokens: int


@dataclass(slots=True)
class _Summary:
    """An active summary_recorded, as the index has it."""

    version: int
    event_id: str
    first: int
    last: int
    level: int
    tokens: int


_ROW_COLUMNS = "version, position, role, first_user, has_name, n_calls, call_version, tokens"


def build_context(
    store: SQLiteStore,
    session_id: str,
    policy: ContextPolicy,
    at: int | None = None,
    *,
    record: bool = False,
    run_id: str | None = None,
    model: str | None = None,
) -> BuiltContext:
    """Build the context of ``session_id`` as of global position ``at`` (default: now).

    With ``record=True`` a ``context_built`` event with the manifest is appended to the session, so
    an audit can show exactly what the model saw on each call."""
    store.require_session(session_id)
    materializer(store).catch_up()
    head_position = store.head_position()
    if at is None:
        at = head_position
    elif at < 1 or at > head_position:
        raise StoreError(f"position {at} is outside the log (1 to {head_position})")
    head_version = store.version_at(session_id, at)
    if head_version == 0:
        raise StoreError(f"session {session_id!r} has no events at or before position {at}")
    builder = _Builder(store, session_id, policy, at, head_version)
    built = builder.build()
    if record:
        store.append(session_id, [built.to_event(run_id=run_id, model=model)])
    return built


@dataclass(frozen=True, slots=True)
class Block:
    """A piece of a session's timeline, as compaction plans with it."""

    kind: Literal["retained", "summary", "unit"]
    """A message that is always kept, an active summary, or a message with its tool results."""
    first: int
    """First version it spans."""
    last: int
    """Last version it spans (a call's last result)."""
    cost: int
    """Tokens it adds to a context (estimated for units: capped as the policy caps them)."""
    messages: int
    """Messages it stands for."""
    level: int = -1
    """A summary's level (-1 for others)."""
    event_id: str = ""
    """A summary's event id."""
    versions: tuple[int, ...] = ()
    """A unit's message versions."""


def timeline(store: SQLiteStore, session_id: str, policy: ContextPolicy) -> list[Block]:
    """The session as compaction sees it now, in version order: retained messages, active summaries
    (their covered messages are not read), and every other message grouped with its tool results."""
    store.require_session(session_id)
    materializer(store).catch_up()
    at = store.head_position()
    builder = _Builder(store, session_id, policy, at, store.version_at(session_id, at))
    return builder.timeline()


def open_run(store: SQLiteStore, session_id: str, at: int | None = None) -> str | None:
    """The id of the session's run that is still open (as of ``at``), if any."""
    materializer(store).catch_up()
    at = store.head_position() if at is None else at
    with store.reading() as conn:
        row = conn.execute(
            "SELECT run_id FROM ctx_runs WHERE session_id = ? AND started_position <= ? "
            "AND (finished_position IS NULL OR finished_position > ?) ORDER BY started_position DESC LIMIT 1",
            (session_id, at, at),
        ).fetchone()
    return str(row[0]) if row else None


class _Builder:
    def __init__(
        self, store: SQLiteStore, session_id: str, policy: ContextPolicy, at: int, head_version: int
    ) -> None:
        self.store = store
        self.sid = session_id
        self.policy = policy
        self.at = at
        self.head_version = head_version
        self.tok = store.tokenizer
        self.costs = _costs(self.tok)
        self.events: dict[int, RecordedEvent] = {}

    # -- reading ------------------------------------------------------------------------------

    def _rows(self, where: str, params: Sequence[Any], *, hint: str = "") -> list[_Row]:
        with self.store.reading() as conn:
            return [
                _Row(v, p, r, bool(f), bool(n), c, cv, t)
                for v, p, r, f, n, c, cv, t in conn.execute(
                    f"SELECT {_ROW_COLUMNS} FROM ctx_messages {hint} WHERE session_id = ? {where}",
                    (self.sid, *params),
                )
            ]

    def _load(self, versions: Sequence[int]) -> None:
        missing = [v for v in versions if v not in self.events]
        if missing:
            for record in self.store.read_versions(self.sid, missing):
                self.events[record.version] = record

    def _retained(self) -> tuple[list[_Row], set[int]]:
        """System messages, the first user message and pinned messages, each with its whole unit
        (a call with its returns)."""
        versions = {
            r.version
            for r in self._rows(
                # INDEXED BY: SQLite does not choose a partial index for an OR on its own, and the
                # primary key would read every row of the session.
                "AND version <= ? AND (role = 'system' OR first_user = 1)",
                (self.head_version,),
                hint="INDEXED BY ctx_messages_retained",
            )
        }
        with self.store.reading() as conn:
            pinned = {
                v
                for (v,) in conn.execute(
                    "SELECT target_version FROM ctx_pins WHERE session_id = ? AND pinned_at <= ? "
                    "AND (unpinned_at IS NULL OR unpinned_at > ?)",
                    (self.sid, self.at, self.at),
                )
            }
            versions |= pinned
            rows = {r.version: r for r in self._rows_in(versions)}
            # A pinned return keeps its call; a kept call keeps all its returns.
            calls = {r.call_version for r in rows.values() if r.role == "tool" and r.call_version}
            calls |= {r.version for r in rows.values() if r.n_calls}
            for call in calls:
                versions.add(call)
                versions |= {
                    v
                    for (v,) in conn.execute(
                        "SELECT return_version FROM ctx_calls WHERE session_id = ? AND "
                        "call_version = ? AND return_version IS NOT NULL AND return_position <= ?",
                        (self.sid, call, self.at),
                    )
                }
        all_rows = self._rows_in(versions)
        return all_rows, pinned

    def _rows_in(self, versions: set[int]) -> list[_Row]:
        found: list[_Row] = []
        ordered = sorted(versions)
        for start in range(0, len(ordered), 500):
            chunk = ordered[start : start + 500]
            found += self._rows(f"AND version IN ({','.join('?' * len(chunk))})", chunk)
        return found

    def _open_run_start(self) -> int | None:
        with self.store.reading() as conn:
            row = conn.execute(
                "SELECT started_version FROM ctx_runs WHERE session_id = ? AND started_position <= ? "
                "AND (finished_position IS NULL OR finished_position > ?) "
                "ORDER BY started_position DESC LIMIT 1",
                (self.sid, self.at, self.at),
            ).fetchone()
        return int(row[0]) if row else None

    # -- rendering of one unit ----------------------------------------------------------------

    def _unit(
        self,
        head: _Row,
        returns: list[_Row],
        *,
        category: Category | None,
        tool_cap: int | None,
        message_cap: int | None,
    ) -> list[ContextMessage]:
        """A message, or a call with its returns (and synthesized results for calls that got
        none), each capped as asked (None: whole)."""
        self._load([head.version, *(r.version for r in returns)])
        record = self.events[head.version]
        event = record.event
        assert isinstance(event, MessageAppended)
        out = [self._message(head, record, event, category, message_cap)]
        answered: set[str] = set()
        for sub, ret in enumerate(sorted(returns, key=lambda r: r.version), 1):
            ret_record = self.events[ret.version]
            ret_event = ret_record.event
            assert isinstance(ret_event, ToolReturned)
            answered.add(ret_event.tool_call_id)
            out.append(self._tool_output(ret, ret_record, ret_event, category, tool_cap, head, sub))
        for sub, call in enumerate(event.tool_calls or (), len(out)):
            if call.id in answered:
                continue
            text = INTERRUPTED
            tokens = PER_MESSAGE + self.costs["tool"] + self.tok.count(text) + self.tok.count(call.id)
            out.append(
                ContextMessage(
                    role="tool",
                    content=text,
                    tokens=tokens,
                    mode="synthesized",
                    category=category or "tool_output",
                    event_ids=(record.event_id,),
                    order=(head.version, sub + 1000),
                    tool_call_id=call.id,
                    is_error=True,
                )
            )
        return out

    def _message(
        self,
        row: _Row,
        record: RecordedEvent,
        event: MessageAppended,
        category: Category | None,
        cap: int | None,
    ) -> ContextMessage:
        role = event.role
        full = (
            PER_MESSAGE
            + self.costs[role]
            + row.tokens
            + (PER_NAME if event.name else 0)
            + len(event.tool_calls or ()) * self.costs["function"]
        )
        content, mode, tokens = event.content, "full", full
        if cap is not None and row.tokens > cap and event.content:
            other = self.tok.count_all(_other_texts(event))
            capped = cap_text(
                event.content,
                cap,
                self.tok,
                _notice("message", record.event_id, is_artifact=False),
                total_tokens=row.tokens - other,
            )
            if capped.capped:
                content, mode = capped.text, "capped"
                tokens = full - (row.tokens - other) + capped.tokens
        default: Category = "system" if role == "system" else "message"
        return ContextMessage(
            role=role,
            content=content,
            tokens=tokens,
            mode=mode,  # type: ignore[arg-type]
            category=category or default,
            event_ids=(record.event_id,),
            order=(row.version, 0),
            name=event.name,
            tool_calls=event.tool_calls or (),
        )

    def _tool_output(
        self,
        row: _Row,
        record: RecordedEvent,
        event: ToolReturned,
        category: Category | None,
        cap: int | None,
        head: _Row,
        sub: int,
    ) -> ContextMessage:
        full = PER_MESSAGE + self.costs["tool"] + row.tokens
        content, mode, tokens = event.content, "full", full
        if cap is not None:
            id_tokens = self.tok.count(event.tool_call_id)
            capped = _cap_cached(
                self.tok,
                record.event_id,
                event.content,
                cap,
                row.tokens - id_tokens,
                event.artifact_id,
            )
            if capped.capped:
                content, mode = capped.text, "capped"
                tokens = PER_MESSAGE + self.costs["tool"] + id_tokens + capped.tokens
        return ContextMessage(
            role="tool",
            content=content,
            tokens=tokens,
            mode=mode,  # type: ignore[arg-type]
            category=category or "tool_output",
            event_ids=(record.event_id,),
            order=(head.version, sub),
            tool_call_id=event.tool_call_id,
            is_error=event.is_error,
        )

    # -- the build ----------------------------------------------------------------------------

    def build(self) -> BuiltContext:
        policy = self.policy
        retained_rows, pinned = self._retained()
        retained_versions = {r.version for r in retained_rows}
        open_run = self._open_run_start()

        messages: list[ContextMessage] = []
        for row in retained_rows:
            if row.role == "tool":
                continue  # rendered with its call
            returns = [r for r in retained_rows if r.role == "tool" and r.call_version == row.version]
            category: Category | None = "pinned" if row.version in pinned else None
            unit = self._unit(row, returns, category=category, tool_cap=None, message_cap=None)
            for message in unit:
                if message.role == "tool" and message.event_ids[0] in self._pinned_ids(pinned):
                    message.category = "pinned"
            messages += unit

        used = PRIME_TOKENS + sum(m.tokens for m in messages)
        total_messages, total_tokens = self._cumulative(self.head_version + 1)
        reserve = self._notice_cost(total_messages, total_tokens)
        if used > policy.budget:
            raise ContextBudgetError(
                f"the messages that are always kept (system, first user message, pinned) need "
                f"{used:,} tokens, {used - policy.budget:,} over the budget of {policy.budget:,}; "
                "raise the budget or unpin messages"
            )
        remaining = policy.budget - used - reserve

        kept: list[tuple[int, list[ContextMessage]]] = []  # (first version, unit), newest first
        pending: dict[int, list[_Row]] = {}
        exhausted = True
        for item in self._walk_back(retained_versions, self._active_summaries()):
            if isinstance(item, _Summary):
                shown = self._summary_message(item)
                if shown.tokens > remaining:
                    exhausted = False
                    break
                kept.append((item.first, [shown]))
                remaining -= shown.tokens
                continue
            row = item
            if row.role == "tool":
                if row.call_version is not None and row.call_version not in retained_versions:
                    pending.setdefault(row.call_version, []).append(row)
                continue
            returns = pending.pop(row.version, [])
            in_open_run = open_run is not None and row.version > open_run
            tool_cap = None if (in_open_run and not policy.cap_open_run) else policy.max_tool_tokens
            unit = self._unit(
                row, returns, category=None, tool_cap=tool_cap, message_cap=policy.max_message_tokens
            )
            cost = sum(m.tokens for m in unit)
            if cost > remaining and tool_cap is None and returns:
                unit = self._unit(
                    row,
                    returns,
                    category=None,
                    tool_cap=policy.max_tool_tokens,
                    message_cap=policy.max_message_tokens,
                )
                cost = sum(m.tokens for m in unit)
            if cost > remaining:
                exhausted = False
                squeezed = self._squeeze(row, returns, remaining) if policy.fill else None
                if squeezed is not None:
                    kept.append((row.version, squeezed))
                break
            kept.append((row.version, unit))
            remaining -= cost

        notice: ContextMessage | None = None
        omitted_messages = omitted_tokens = 0
        while not exhausted:
            oldest_kept = kept[-1][0] if kept else self.head_version + 1
            before_messages, before_tokens = self._cumulative(oldest_kept)
            retained_before = [r for r in retained_rows if r.version < oldest_kept]
            omitted_messages = before_messages - len(retained_before)
            omitted_tokens = before_tokens - sum(r.tokens for r in retained_before)
            if omitted_messages <= 0:
                break
            room = policy.budget - used - sum(m.tokens for _, unit in kept for m in unit)
            notice = self._notice_message(omitted_messages, omitted_tokens, oldest_kept, room)
            if notice is not None:
                break
            if not kept:
                raise ContextBudgetError(
                    f"the messages that are always kept (system, first user message, pinned) leave "
                    f"{room:,} tokens of the budget of {policy.budget:,}: too few for the notice "
                    "that says what was left out; raise the budget"
                )
            kept.pop()  # make room for the notice at the cost of the oldest kept message
        for _, unit in kept:
            messages += unit
        if notice is not None:
            messages.append(notice)
        messages.sort(key=lambda m: m.order)
        total = PRIME_TOKENS + sum(m.tokens for m in messages)
        if total > policy.budget:  # pragma: no cover - guarded above
            raise ContextBudgetError(f"internal error: built {total} tokens over {policy.budget}")
        built = BuiltContext(
            session_id=self.sid,
            at_position=self.at,
            head_version=self.head_version,
            policy=policy,
            tokenizer=self.tok.name,
            total_tokens=total,
            messages=messages,
            omitted_messages=omitted_messages,
            omitted_tokens=omitted_tokens,
        )
        built.rendered = render(messages, policy.format)
        return built

    def timeline(self) -> list[Block]:
        retained_rows, _ = self._retained()
        retained = {r.version for r in retained_rows}
        blocks: list[Block] = []
        for row in retained_rows:
            blocks.append(Block("retained", row.version, row.version, self._estimate(row), 1))
        units: dict[int, list[_Row]] = {}
        heads: dict[int, _Row] = {}
        orphans = 0
        for item in self._walk_back(retained, self._active_summaries(), load=False):
            if isinstance(item, _Summary):
                cost = PER_MESSAGE + self.costs["system"] + item.tokens
                messages = self._cumulative(item.last + 1)[0] - self._cumulative(item.first)[0]
                blocks.append(
                    Block("summary", item.first, item.last, cost, messages, item.level, item.event_id)
                )
            elif item.role == "tool":
                if item.call_version is None:
                    orphans += 1
                else:
                    units.setdefault(item.call_version, []).append(item)
            else:
                heads[item.version] = item
        for version, head in heads.items():
            rows = [head, *sorted(units.pop(version, []), key=lambda r: r.version)]
            blocks.append(
                Block(
                    "unit",
                    version,
                    rows[-1].version,
                    sum(self._estimate(r) for r in rows),
                    len(rows),
                    versions=tuple(r.version for r in rows),
                )
            )
        blocks.sort(key=lambda b: (b.first, b.kind != "summary"))
        return blocks

    def _estimate(self, row: _Row) -> int:
        cap = self.policy.max_tool_tokens if row.role == "tool" else self.policy.max_message_tokens
        return (
            PER_MESSAGE
            + self.costs[row.role]
            + min(row.tokens, cap + 40)
            + (PER_NAME if row.has_name else 0)
            + row.n_calls * self.costs["function"]
        )

    def _pinned_ids(self, pinned: set[int]) -> set[str]:
        return {self.events[v].event_id for v in pinned if v in self.events}

    def _squeeze(self, row: _Row, returns: list[_Row], remaining: int) -> list[ContextMessage] | None:
        """The unit capped hard enough to fit ``remaining``, if that leaves anything worth showing."""
        if remaining < FILL_MIN:
            return None
        if not returns and row.n_calls == 0:
            cap = remaining - PER_MESSAGE - self.costs[row.role] - 8
            if cap < MIN_CAP:
                return None
            unit = self._unit(row, [], category=None, tool_cap=None, message_cap=cap)
        else:
            # The call stays whole; what is left is shared by its outputs.
            head_cost = self._unit(row, [], category=None, tool_cap=None, message_cap=None)[0].tokens
            per_output = PER_MESSAGE + self.costs["tool"] + 12
            outputs = max(1, row.n_calls)
            cap = min((remaining - head_cost) // outputs - per_output, self.policy.max_tool_tokens)
            if cap < MIN_CAP:
                return None
            unit = self._unit(
                row, returns, category=None, tool_cap=cap, message_cap=self.policy.max_message_tokens
            )
        return unit if sum(m.tokens for m in unit) <= remaining else None

    def _walk_back(
        self, skip: set[int], summaries: list[_Summary], *, load: bool = True
    ) -> Iterator[_Row | _Summary]:
        """From the head version down: ctx rows in growing chunks, and in place of each range an
        active summary covers, the summary (its rows are never read)."""
        starts = [summary.first for summary in summaries]
        upper = self.head_version
        size = 32
        while upper >= 1:
            i = bisect.bisect_right(starts, upper) - 1
            if i >= 0 and summaries[i].last >= upper:
                yield summaries[i]
                upper = summaries[i].first - 1
                continue
            lower = summaries[i].last + 1 if i >= 0 else 1
            rows = self._rows(
                "AND version <= ? AND version >= ? ORDER BY version DESC LIMIT ?", (upper, lower, size)
            )
            if rows:
                if load:
                    self._load([r.version for r in rows if r.version not in skip and r.role != "system"])
                for row in rows:
                    if row.version not in skip:
                        yield row
            upper = rows[-1].version - 1 if len(rows) == size else lower - 1
            size = min(size * 2, 512)

    def _active_summaries(self) -> list[_Summary]:
        """The summaries a context shows as of ``at``: not replaced by a later one, the highest
        level first, then the newest, never two over the same versions; in version order."""
        with self.store.reading() as conn:
            found = [
                _Summary(*row)
                for row in conn.execute(
                    # Two index ranges rather than an OR, which would read every summary ever written.
                    "SELECT version, event_id, first_version, last_version, level, tokens FROM ctx_summaries "
                    "INDEXED BY ctx_summaries_active "
                    "WHERE session_id = ? AND superseded_at IS NULL AND position <= ? UNION ALL "
                    "SELECT version, event_id, first_version, last_version, level, tokens FROM ctx_summaries "
                    "INDEXED BY ctx_summaries_active "
                    "WHERE session_id = ? AND superseded_at > ? AND position <= ?",
                    (self.sid, self.at, self.sid, self.at, self.at),
                )
            ]
        chosen: list[_Summary] = []
        for summary in sorted(found, key=lambda s: (-s.level, -s.version)):
            if all(summary.last < c.first or summary.first > c.last for c in chosen):
                chosen.append(summary)
        return sorted(chosen, key=lambda s: s.first)

    def _summary_message(self, summary: _Summary) -> ContextMessage:
        self._load([summary.version])
        event = self.events[summary.version].event
        assert isinstance(event, SummaryRecorded)
        return ContextMessage(
            role="system",
            content=event.context_text(),
            tokens=PER_MESSAGE + self.costs["system"] + summary.tokens,
            mode="summary",
            category="summary",
            event_ids=(summary.event_id,),
            order=(summary.first, -1),
        )

    def _cumulative(self, before_version: int) -> tuple[int, int]:
        """Messages and stored tokens of the session below a version."""
        with self.store.reading() as conn:
            row = conn.execute(
                "SELECT cum_messages, cum_tokens FROM ctx_messages WHERE session_id = ? AND "
                "version < ? ORDER BY version DESC LIMIT 1",
                (self.sid, before_version),
            ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def _notice_cost(self, messages: int, tokens: int) -> int:
        return PER_MESSAGE + self.costs["system"] + self.tok.count(_omission_text(messages, tokens))

    def _notice_message(
        self, messages: int, tokens: int, before_version: int, room: int
    ) -> ContextMessage | None:
        """The omission notice, in full or in short, if either fits ``room``."""
        for text in (_omission_text(messages, tokens), f"[turnlog: {messages:,} earlier messages omitted]"):
            cost = PER_MESSAGE + self.costs["system"] + self.tok.count(text)
            if cost <= room:
                return ContextMessage(
                    role="system",
                    content=text,
                    tokens=cost,
                    mode="notice",
                    category="notice",
                    event_ids=(),
                    order=(before_version - 0.5, 0),
                )
        return None


def _omission_text(messages: int, tokens: int) -> str:
    return (
        f"[turnlog: {messages:,} earlier messages (about {tokens:,} tokens) are not shown here; "
        "they remain in the session's log]"
    )


def _notice(kind: str, ref: str, *, is_artifact: bool) -> Any:
    where = f"artifact {ref[:12]}" if is_artifact else f"event {ref}"

    def notice(shown: int, total: int) -> str:
        return f"[turnlog: {kind} capped: {shown:,} of {total:,} tokens shown; the full text is {where}]"

    return notice


def _other_texts(event: MessageAppended) -> list[str]:
    texts = [event.name] if event.name else []
    for call in event.tool_calls or ():
        texts += [call.id, call.name, call.arguments]
    return texts


_CAP_CACHE: OrderedDict[tuple[str, str, int], Capped] = OrderedDict()
_CAP_CACHE_SIZE = 4096


def _cap_cached(
    tok: Tokenizer,
    event_id: str,
    content: str,
    cap: int,
    total: int,
    artifact_id: str | None,
) -> Capped:
    """Capping is deterministic, so the same output at the same cap is capped once per process."""
    key = (tok.name, event_id, cap)
    found = _CAP_CACHE.get(key)
    if found is not None:
        _CAP_CACHE.move_to_end(key)
        return found
    ref = artifact_id or event_id
    capped = cap_text(
        content, cap, tok, _notice("output", ref, is_artifact=artifact_id is not None), total_tokens=total
    )
    _CAP_CACHE[key] = capped
    if len(_CAP_CACHE) > _CAP_CACHE_SIZE:
        _CAP_CACHE.popitem(last=False)
    return capped


@functools.lru_cache(maxsize=8)
def _costs_for(name: str, tok: Tokenizer) -> dict[str, int]:
    return {word: tok.count(word) for word in ("system", "user", "assistant", "tool", "function")}


def _costs(tok: Tokenizer) -> dict[str, int]:
    return _costs_for(tok.name, tok)


__all__ = [
    "INTERRUPTED",
    "BuiltContext",
    "ContextBudgetError",
    "ContextIndex",
    "ContextMessage",
    "ContextPolicy",
    "build_context",
]
