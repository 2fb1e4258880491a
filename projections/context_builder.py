"""The build itself: the retained messages, then units (a message with its tool results) from the
newest back while they fit, capped as the policy says, and a notice of what was left out; and the
timeline compaction plans with."""

from __future__ import annotations

import copy
import dataclasses
import operator

from turnlog.projections.capping import MIN_CAP
from turnlog.projections.context_capping import count_short
from turnlog.projections.context_preamble import INDEX_ORDER, artifact_notes, index_message
from turnlog.projections.context_reader import Row, SummaryRow
from turnlog.projections.context_types import (
    FILL_MIN,
    PER_MESSAGE,
    PER_NAME,
    PRIME_TOKENS,
    Block,
    BuiltContext,
    CacheOverflow,
    Category,
    ContextBudgetError,
    ContextMessage,
    StableCut,
)
from turnlog.projections.context_units import UnitRenderer
from turnlog.projections.formats import render
from turnlog.store import SummaryRecorded

_ORDER = operator.attrgetter("order")

STABLE_NOTICE_RESERVE = 64
"""Under a cache-stable policy, the room the artifact index leaves for the omission notice: a fixed
figure, so the index is cut the same way on every call between two cut moves."""


class ContextBuilder(UnitRenderer):
    """One build of one session as of one position under one policy."""

    start: int = 0
    """After a build: the version its history starts from (the oldest kept unit or summary)."""
    previous_head: int | None = None
    """Cache-stable: the head version of the previous call, when the cut has not moved since (the
    end of what it sent is marked as an Anthropic breakpoint)."""

    # -- the build ----------------------------------------------------------------------------

    def build(self) -> BuiltContext:
        policy = self.policy
        stable = self.stable
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
        # The artifact index comes next: before any message that is not always kept.
        if stable is None:
            index = self._index(policy.budget - used - reserve)
        else:
            # Within what the build at the cut's move gave it (refill_to of the budget), whatever
            # the history's length now: the same index on every call until the next move.
            refill = int(policy.budget * policy.refill_to)
            index = self._stable_index(stable, min(refill // 2, refill - used - STABLE_NOTICE_RESERVE))
            for note in artifact_notes(self, stable.moved_at):
                messages.append(note)
                used += note.tokens
        if index is not None:
            messages.append(index)
            used += index.tokens
        if stable is not None and used > policy.budget:
            # The notes of artifacts written since the cut's move are not cut to the room left:
            # when they do not fit, the cut moves and the index takes them in.
            raise CacheOverflow
        remaining = policy.budget - used - reserve

        kept: list[tuple[int, list[ContextMessage]]] = []  # (first version, unit), newest first
        kept_tokens = 0  # the tokens of the units in kept
        pending: dict[int, list[Row]] = {}
        exhausted = True
        if total_messages and total_tokens > 0:
            # The rows the budget left can hold, at the session's tokens per message: the walk's
            # second chunk reads about that many (one round trip more, not a doubling chain).
            self.expected_rows = int(remaining * total_messages / total_tokens)
        summaries = self._active_summaries() if stable is None else self._stable_summaries(stable)
        max_tool, max_message = policy.max_tool_tokens, policy.max_message_tokens
        cut = None if stable is None else stable.cut
        # Under cache_stable an open run's outputs are capped as they will stay: re-capping them
        # when the run closes would move the prefix. Otherwise they are shown whole unless the
        # policy caps them.
        whole_after = open_run if stable is None and not policy.cap_open_run else None
        for item in self._walk_back(retained_versions, summaries):
            if isinstance(item, SummaryRow):
                if cut is not None and item.first < cut:
                    exhausted = False  # the history starts at the cut
                    break
                shown = self._summary_message(item)
                if shown.tokens > remaining:
                    if stable is not None:
                        raise CacheOverflow
                    exhausted = False
                    break
                kept.append((item.first, [shown]))
                kept_tokens += shown.tokens
                remaining -= shown.tokens
                continue
            row = item
            if cut is not None and row.version < cut:
                exhausted = False  # the history starts at the cut
                break
            if row.role == "tool":
                if row.call_version is not None and row.call_version not in retained_versions:
                    pending.setdefault(row.call_version, []).append(row)
                continue
            returns = pending.pop(row.version, [])
            tool_cap = None if whole_after is not None and row.version > whole_after else max_tool
            unit = self._unit(row, returns, category=None, tool_cap=tool_cap, message_cap=max_message)
            cost = unit[0].tokens if len(unit) == 1 else sum(m.tokens for m in unit)
            if cost > remaining and tool_cap is None and (returns or row.n_calls):
                unit = self._unit(
                    row,
                    returns,
                    category=None,
                    tool_cap=policy.max_tool_tokens,
                    message_cap=policy.max_message_tokens,
                )
                cost = sum(m.tokens for m in unit)
            if cost > remaining:
                if stable is not None:
                    raise CacheOverflow
                exhausted = False
                squeezed = self._squeeze(row, returns, remaining) if policy.fill else None
                if squeezed is not None:
                    kept.append((row.version, squeezed))
                    kept_tokens += sum(m.tokens for m in squeezed)
                break
            kept.append((row.version, unit))
            kept_tokens += cost
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
            room = policy.budget - used - kept_tokens
            notice = self._notice_message(omitted_messages, omitted_tokens, oldest_kept, room)
            if notice is not None:
                break
            if stable is not None:
                raise CacheOverflow
            if not kept:
                raise ContextBudgetError(
                    f"the messages that are always kept (system, first user message, pinned) leave "
                    f"{room:,} tokens of the budget of {policy.budget:,}: too few for the notice "
                    "that says what was left out; raise the budget"
                )
            # Make room for the notice at the cost of the oldest kept message.
            kept_tokens -= sum(m.tokens for m in kept.pop()[1])
        self.start = kept[-1][0] if kept else self.head_version + 1
        for _, unit in kept:
            messages += unit
        if notice is not None:
            messages.append(notice)
        messages.sort(key=_ORDER)
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
            cut=None if stable is None else stable.cut,
        )
        head = None
        if stable is not None:
            # The head: the leading messages that stay when the cut moves (those always kept).
            head = next(
                (i for i, m in enumerate(messages) if m.order[0] not in retained_versions), len(messages)
            )
        sent_before = None
        if stable is not None and self.previous_head is not None:
            limit = self.previous_head + 0.5  # a note sits half a version after its artifact
            sent_before = next((i for i, m in enumerate(messages) if m.order[0] > limit), len(messages))
        built.rendered = render(messages, policy.format, cache_head=head, cache_previous=sent_before)
        return built

    def timeline(self) -> list[Block]:
        retained_rows, _ = self._retained()
        retained = {r.version for r in retained_rows}
        blocks: list[Block] = []
        for row in retained_rows:
            blocks.append(Block("retained", row.version, row.version, self._estimate(row), 1))
        # The artifact index is kept before older messages too: a block of its own, at version 0.
        index = self._index(self.policy.budget - PRIME_TOKENS - sum(b.cost for b in blocks))
        if index is not None:
            blocks.append(Block("retained", 0, 0, index.tokens, 0))
        units: dict[int, list[Row]] = {}
        heads: dict[int, Row] = {}
        orphans = 0
        for item in self._walk_back(retained, self._active_summaries()):
            if isinstance(item, SummaryRow):
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
        blocks += [
            Block("gap", lo, min(hi, self.head_version), 0, 0)
            for lo, hi in self.dead
            if lo <= self.head_version
        ]
        blocks.sort(key=lambda b: (b.first, b.kind != "summary"))
        return blocks

    def _index(self, room: int) -> ContextMessage | None:
        """The artifact index preamble within ``room`` tokens (and half the budget), placed after the
        leading system messages; None when there is none to show."""

        def before() -> int:
            first = self._first_live("!= 'system'")
            return self.head_version + 1 if first is None else first

        return index_message(self, room, before)

    def _stable_index(self, stable: StableCut, room: int) -> ContextMessage | None:
        """The artifact index as of the cut's last move (none before the first): artifacts written
        since are told in notes near their turns (context_preamble.artifact_notes). It is placed
        after the head (system messages, first user message), right before the history: it changes
        at each move, and the head before it stays cached across moves."""
        if not stable.moved_at:
            return None
        then = copy.copy(self)
        then.at = stable.moved_at
        index = then._index(room)
        return None if index is None else dataclasses.replace(index, order=(stable.cut - 0.5, INDEX_ORDER))

    def _stable_summaries(self, stable: StableCut) -> list[SummaryRow]:
        """The summaries active at the cut's last move: a summary recorded since is shown from the
        next move on (one that a rewind undid since is not)."""
        if not stable.moved_at:
            return []
        then = copy.copy(self)
        then.at = stable.moved_at
        return then._active_summaries()

    def _estimate(self, row: Row) -> int:
        cap = self.policy.max_tool_tokens if row.role == "tool" else self.policy.max_message_tokens
        return (
            PER_MESSAGE
            + self.costs[row.role]
            + min(row.tokens, cap + 40)
            + (PER_NAME if row.has_name else 0)
            + row.n_calls * self.costs["function"]
        )

    def _pinned_ids(self, pinned: set[int]) -> set[str]:
        return {self.items[v].event_id for v in pinned if v in self.items}

    def _squeeze(self, row: Row, returns: list[Row], remaining: int) -> list[ContextMessage] | None:
        """The unit capped hard enough to fit ``remaining``, if that leaves anything worth showing."""
        if remaining < FILL_MIN:
            return None
        if not returns and row.n_calls == 0:
            cap = remaining - PER_MESSAGE - self.costs[row.role] - 8
            if cap < MIN_CAP:
                return None
            unit = self._unit(row, [], category=None, tool_cap=None, message_cap=cap)
        else:
            # The call stays (its arguments capped as the policy caps them); what is left is shared
            # by its outputs.
            policy = self.policy
            head = self._unit(
                row, [], category=None, tool_cap=policy.max_tool_tokens, message_cap=policy.max_message_tokens
            )
            head_cost = head[0].tokens
            per_output = PER_MESSAGE + self.costs["tool"] + 12
            outputs = max(1, row.n_calls)
            cap = min((remaining - head_cost) // outputs - per_output, self.policy.max_tool_tokens)
            if cap < MIN_CAP:
                return None
            unit = self._unit(
                row, returns, category=None, tool_cap=cap, message_cap=self.policy.max_message_tokens
            )
        if any(m.shown_tokens == 0 for m in unit):
            return None  # capped to its notice alone: a message with nothing of itself left
        return unit if sum(m.tokens for m in unit) <= remaining else None

    def _summary_message(self, summary: SummaryRow) -> ContextMessage:
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

    def _notice_cost(self, messages: int, tokens: int) -> int:
        return PER_MESSAGE + self.costs["system"] + count_short(self.tok, _omission_text(messages, tokens))

    def _notice_message(
        self, messages: int, tokens: int, before_version: int, room: int
    ) -> ContextMessage | None:
        """The omission notice, in full or in short, if either fits ``room``."""
        for text in (_omission_text(messages, tokens), f"[turnlog: {messages:,} earlier messages omitted]"):
            cost = PER_MESSAGE + self.costs["system"] + count_short(self.tok, text)
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
