"""Compaction: when a session's context would outgrow its budget, summarize its oldest unsummarized
span, condense adjacent summaries into higher levels, and as a last, deterministic tier truncate.
Summaries are events appended to the log; nothing is deleted, and contexts built before them are
unchanged. All summaries of one compaction are appended in one batch, or none are."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from turnlog.projections.capping import cap_text
from turnlog.projections.context import (
    PER_MESSAGE,
    PRIME_TOKENS,
    Block,
    ContextBudgetError,
    ContextPolicy,
    build_context,
    open_run,
    timeline,
)
from turnlog.projections.summaries import find_summary_by_key
from turnlog.store import (
    MessageAppended,
    RecordedEvent,
    Store,
    SummarizerInfo,
    SummaryRecorded,
    ToolReturned,
)
from turnlog.store.events import summary_context_text
from turnlog.summarizers import (
    ExtractiveSummarizer,
    Summarizer,
    SummarizerError,
    SummaryRequest,
    SummaryResult,
    TranscriptItem,
    as_summarizer,
)

TRUNCATED = SummarizerInfo(name="truncate", model=None, prompt_version="1")
"""The last tier: no model, a fixed text."""


class CompactionOptions(BaseModel):
    """When and how much to compact."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    trigger: float = Field(default=0.85, gt=0, le=1)
    """Compact when the whole context would need more than this share of the budget."""
    keep_last: int = Field(default=20, ge=0)
    """The newest messages that always stay raw."""
    keep_tokens: int | None = Field(default=None, ge=0)
    """Also keep at least this many of the newest tokens raw."""
    max_input_tokens: int = Field(default=4000, ge=200)
    """Cap on what one summarizer call reads (long tool outputs are shortened first)."""
    summary_tokens: int = Field(default=400, ge=32)
    """Target size of one summary."""
    fanout: int = Field(default=4, ge=2)
    """How many adjacent summaries of one level are condensed into one of the next."""
    allow_open_run: bool = False
    """Compact while a run is open (by default compaction waits until the run has finished)."""


@dataclass
class PlannedStep:
    """One summary compaction will write."""

    kind: Literal["summarize", "condense", "truncate"]
    first: int
    last: int
    level: int
    messages: int
    covered_tokens: int
    """Context tokens of what it replaces (estimated)."""
    versions: tuple[int, ...] = ()
    """Raw message versions it summarizes."""
    covers: tuple[str, ...] = ()
    """Summary event ids it condenses."""


@dataclass
class CompactionResult:
    """What a compaction did (or, with ``dry_run``, would do), and whether the budget is met."""

    session_id: str
    budget: int
    before_tokens: int
    """Tokens of the whole context before (nothing left out), measured by building it."""
    after_tokens: int
    """... and after: measured by building it again once the summaries are written; for a dry run
    an estimate (never below an empty context's tokens)."""
    steps: list[PlannedStep] = field(default_factory=list)
    appended: list[RecordedEvent] = field(default_factory=list)
    """The summaries written, in order (empty for a dry run)."""
    dry_run: bool = False
    reason: str = ""
    """Why nothing (more) was done, when that is the case."""
    over_budget: str = ""
    """Why the budget is not met, when it is not (empty when :attr:`met`)."""

    @property
    def estimated(self) -> bool:
        """True when ``after_tokens`` is an estimate (a dry run that would write summaries)."""
        return self.dry_run and bool(self.steps)

    @property
    def met(self) -> bool:
        """True when the whole context (after) fits the budget: nothing needs to be left out."""
        return self.after_tokens <= self.budget

    @property
    def fits(self) -> bool:
        """Same as :attr:`met` (the older name)."""
        return self.met

    @property
    def summaries(self) -> list[SummaryRecorded]:
        """The summary events written."""
        return [r.event for r in self.appended if isinstance(r.event, SummaryRecorded)]


def compact(
    store: Store,
    session_id: str,
    policy: ContextPolicy,
    summarizer: Summarizer | object | None = None,
    *,
    options: CompactionOptions | None = None,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> CompactionResult:
    """Compact ``session_id`` for contexts built with ``policy``. Summarizer errors raise
    SummarizerError and append nothing. ``progress(done, total)`` is called after each summary is
    made (a summarizer call can take seconds)."""
    options = options or CompactionOptions()
    chosen: Summarizer = ExtractiveSummarizer() if summarizer is None else as_summarizer(summarizer)
    head = store.require_session(session_id)
    blocks = timeline(store, session_id, policy)
    estimate = PRIME_TOKENS + sum(b.cost for b in blocks)
    before = whole_context_tokens(store, session_id, policy, estimate)
    result = CompactionResult(session_id, policy.budget, before, before, dry_run=dry_run)
    running = open_run(store, session_id)
    if running is not None and not options.allow_open_run:
        result.reason = f"run {running!r} is still open: compaction waits until it has finished"
        return _explained(result, options)
    steps, planned = _plan(blocks, policy.budget * options.trigger, options)
    result.steps = steps
    if not steps:
        result.reason = (
            "the context fits" if before <= policy.budget * options.trigger else "nothing left to summarize"
        )
        return _explained(result, options)
    if dry_run:
        # The plan's saving applied to the measured size; a summary costs at least its overhead,
        # so the estimate never falls below an empty context.
        result.after_tokens = max(PRIME_TOKENS, before - max(0, estimate - planned))
        return _explained(result, options)
    events = _write(store, session_id, steps, chosen, options, progress)
    result.appended = store.append(session_id, events, expected_version=head)
    after = PRIME_TOKENS + sum(b.cost for b in timeline(store, session_id, policy))
    result.after_tokens = whole_context_tokens(store, session_id, policy, after)
    return _explained(result, options)


def whole_context_tokens(store: Store, session_id: str, policy: ContextPolicy, estimate: int) -> int:
    """The real tokens of the session's context with nothing left out (tool outputs and long
    messages capped as ``policy`` caps them): the context is built, not estimated, with a budget
    large enough for all of it (``estimate``, the timeline's sum, is where the search starts)."""
    budget = max(policy.budget, estimate + estimate // 4 + 1000)
    built = None
    for _ in range(8):
        try:
            # The whole context, however it is cut: a cache-stable build would fold its cut for a
            # budget no call is made with.
            whole = policy.model_copy(update={"budget": budget, "cache_stable": False})
            built = build_context(store, session_id, whole)
        except ContextBudgetError:
            built = None
        else:
            if built.omitted_messages == 0:
                return built.total_tokens
        budget *= 4
    # Unreachable for a consistent store (the estimate is an upper bound); never report less than
    # what is known.
    return max(estimate, built.total_tokens + built.omitted_tokens if built else estimate)


def _explained(result: CompactionResult, options: CompactionOptions) -> CompactionResult:
    if not result.met:
        result.over_budget = (
            "what is left cannot be summarized: the messages always kept (system, the first user "
            f"message, pinned ones), the newest {options.keep_last} messages (keep_last) and "
            "summaries that cannot be condensed further"
        )
        if result.reason.startswith("run "):
            result.over_budget = result.reason
    return result


# --- planning ------------------------------------------------------------------------------------


def _summary_cost(tokens: int) -> int:
    return PER_MESSAGE + 1 + tokens + 20  # message overhead, role, header


def _plan(blocks: list[Block], threshold: float, options: CompactionOptions) -> tuple[list[PlannedStep], int]:
    """The steps that bring the estimated context under ``threshold``, oldest first, and the
    estimated tokens of the context they leave."""
    tail = _tail_start(blocks, options)
    head_part: list[Block | PlannedStep] = list(blocks[:tail])
    tail_total = PRIME_TOKENS + sum(b.cost for b in blocks[tail:])

    def total() -> int:
        # Summed from what the context is made of after each step, not adjusted step by step: a
        # condensed or truncated summary replaces earlier steps, which must not be subtracted twice.
        return tail_total + sum(_cost(item, options) for item in head_part)

    steps: list[PlannedStep] = []
    while total() > threshold:
        step = _next_span(head_part, options) or _next_condense(head_part, options) or _truncate(head_part)
        if step is None:
            break
        steps.append(step)
    return steps, total()


def _tail_start(blocks: list[Block], options: CompactionOptions) -> int:
    """Index of the first block of the raw tail (the newest messages that stay raw)."""
    messages = tokens = 0
    index = len(blocks)
    for i in range(len(blocks) - 1, -1, -1):
        block = blocks[i]
        if block.kind == "summary":
            break
        enough_tokens = options.keep_tokens is None or tokens >= options.keep_tokens
        if messages >= options.keep_last and enough_tokens:
            break
        if block.kind == "unit":
            messages += block.messages
            tokens += block.cost
        index = i
    return index


def _cost(item: Block | PlannedStep, options: CompactionOptions) -> int:
    return item.cost if isinstance(item, Block) else _summary_cost(options.summary_tokens)


def _replace(part: list[Block | PlannedStep], start: int, end: int, step: PlannedStep) -> PlannedStep:
    part[start:end] = [step]
    return step


def _next_span(part: list[Block | PlannedStep], options: CompactionOptions) -> PlannedStep | None:
    """The oldest run of raw units (no retained message or summary inside) worth summarizing."""
    i = 0
    while i < len(part):
        first = part[i]
        if not (isinstance(first, Block) and first.kind == "unit"):
            i += 1
            continue
        j = i
        covered = 0
        while j < len(part):
            item = part[j]
            if not (isinstance(item, Block) and item.kind == "unit"):
                break
            if j > i and covered + item.cost > options.max_input_tokens:
                break
            covered += item.cost
            j += 1
        units = [b for b in part[i:j] if isinstance(b, Block)]
        if covered > _summary_cost(options.summary_tokens):
            step = PlannedStep(
                "summarize",
                units[0].first,
                units[-1].last,
                0,
                sum(u.messages for u in units),
                covered,
                versions=tuple(v for u in units for v in u.versions),
            )
            return _replace(part, i, j, step)
        i = j
    return None


def _next_condense(part: list[Block | PlannedStep], options: CompactionOptions) -> PlannedStep | None:
    """``fanout`` adjacent summaries of one level (lowest level first) → one of the next level."""
    summaries = [
        (i, item) for i, item in enumerate(part) if isinstance(item, PlannedStep) or item.kind == "summary"
    ]
    for level in sorted({_level(item) for _, item in summaries}):
        run: list[int] = []
        for i, item in enumerate(part):
            is_summary = isinstance(item, PlannedStep) or item.kind == "summary"
            if is_summary and _level(item) == level:
                run.append(i)
                if len(run) == options.fanout:
                    chosen = [part[k] for k in run]
                    step = PlannedStep(
                        "condense",
                        chosen[0].first,
                        chosen[-1].last,
                        level + 1,
                        sum(c.messages for c in chosen),
                        sum(_cost(c, options) for c in chosen),
                        covers=tuple(_ref(c) for c in chosen),
                    )
                    return _replace(part, run[0], run[-1] + 1, step)
            elif is_summary or (isinstance(item, Block) and item.kind in ("unit", "gap")):
                # Another level, raw messages or a range that is not live in between: not adjacent.
                run = []
    return None


def _truncate(part: list[Block | PlannedStep]) -> PlannedStep | None:
    """The last tier: everything before the raw tail but the retained messages, in one short,
    fixed text. Only when it merges two or more pieces, so it always ends."""
    # A summary must not span a range that is not live (it would never be shown): the pieces are
    # taken from the oldest stretch between such ranges that has two or more.
    stretches: list[list[tuple[int, Block | PlannedStep]]] = [[]]
    for i, item in enumerate(part):
        if isinstance(item, Block) and item.kind == "gap":
            stretches.append([])
        elif isinstance(item, PlannedStep) or item.kind != "retained":
            stretches[-1].append((i, item))
    pieces = next((stretch for stretch in stretches if len(stretch) >= 2), [])
    if len(pieces) < 2:
        return None
    chosen = [item for _, item in pieces]
    step = PlannedStep(
        "truncate",
        min(c.first for c in chosen),
        max(c.last for c in chosen),
        max((_level(c) for c in chosen if _is_summary(c)), default=-1) + 1,
        sum(c.messages for c in chosen),
        sum(c.cost if isinstance(c, Block) else 0 for c in chosen),
        versions=tuple(v for c in chosen if isinstance(c, Block) and c.kind == "unit" for v in c.versions),
        covers=tuple(_ref(c) for c in chosen if _is_summary(c)),
    )
    first, last = pieces[0][0], pieces[-1][0]
    kept = [item for item in part[first : last + 1] if isinstance(item, Block) and item.kind == "retained"]
    part[first : last + 1] = [step, *kept]
    return step


def _is_summary(item: Block | PlannedStep) -> bool:
    return isinstance(item, PlannedStep) or item.kind == "summary"


def _level(item: Block | PlannedStep) -> int:
    return item.level


def _ref(item: Block | PlannedStep) -> str:
    """A summary's event id, or for a step of this same compaction a placeholder resolved later."""
    return item.event_id if isinstance(item, Block) else f"step:{id(item)}"


# --- writing -------------------------------------------------------------------------------------


def _write(
    store: Store,
    session_id: str,
    steps: list[PlannedStep],
    summarizer: Summarizer,
    options: CompactionOptions,
    progress: Callable[[int, int], None] | None = None,
) -> list[SummaryRecorded]:
    """The summary events of the plan, in order; raises SummarizerError (and writes nothing)."""
    made: dict[str, SummaryRecorded] = {}
    events: list[SummaryRecorded] = []
    count = store.tokenizer.count
    for step in steps:
        children = [_child(store, ref, made) for ref in step.covers]
        # Every event of the range, not only its messages: the key is the hash of what it covers.
        covered = (
            store.read_session(session_id, from_version=step.first, to_version=step.last)
            if step.versions
            else []
        )
        wanted = set(step.versions)
        raw = [r for r in covered if r.version in wanted]
        covered_hashes = [r.hash for r in covered]
        info = TRUNCATED if step.kind == "truncate" else summarizer.info
        material = "\n".join(
            [
                *covered_hashes,
                *(c.key for c in children),
                info.name,
                info.prompt_version,
                str(step.level),
                step.kind,
            ]
        )
        key = hashlib.sha256(material.encode()).hexdigest()
        reused = find_summary_by_key(store, key)
        usage = None
        if reused is not None:
            text, reused_from = reused.text, reused.event_id
        elif step.kind == "truncate":
            text = (
                f"{step.messages:,} earlier messages (versions {step.first}–{step.last}) were truncated "
                "to fit the context; the full history remains in the session's log."
            )
            reused_from = None
        else:
            request = _request(session_id, step, raw, children, options, store)
            try:
                answer: SummaryResult = summarizer.summarize(request)
            except SummarizerError:
                raise
            except Exception as exc:  # a caller's summarizer may raise anything
                raise SummarizerError(
                    f"summarizer {info.name!r} failed: {type(exc).__name__}: {exc}"
                ) from exc
            text = answer.text.strip()
            if not text:
                raise SummarizerError(
                    f"summarizer {info.name!r} returned an empty summary; nothing was appended"
                )
            limit = options.summary_tokens + options.summary_tokens // 2
            text = cap_text(text, limit, store.tokenizer, _summary_notice).text
            usage, reused_from = answer.usage, None
        event = SummaryRecorded(
            first_version=step.first,
            last_version=step.last,
            level=step.level,
            text=text,
            tokens=count(summary_context_text(step.first, step.last, text)),
            summarizer=info,
            usage=usage,
            key=key,
            covers=tuple(c.event_id for c in children),
            reused_from=reused_from,
        )
        made[f"step:{id(step)}"] = event
        events.append(event)
        if progress is not None:
            progress(len(events), len(steps))
    return events


def _summary_notice(shown: int, total: int) -> str:
    return f"[turnlog: summary cut to {shown:,} of {total:,} tokens]"


def _child(store: Store, ref: str, made: dict[str, SummaryRecorded]) -> SummaryRecorded:
    if ref in made:
        return made[ref]
    event = store.get_event(ref).event
    assert isinstance(event, SummaryRecorded)
    return event


def _request(
    session_id: str,
    step: PlannedStep,
    raw: list[RecordedEvent],
    children: list[SummaryRecorded],
    options: CompactionOptions,
    store: Store,
) -> SummaryRequest:
    items: list[TranscriptItem] = []
    for child in children:
        items.append(TranscriptItem(child.first_version, "summary", child.text))
    for record in raw:
        event = record.event
        if isinstance(event, MessageAppended):
            calls = tuple(f"{c.name}({c.arguments})" for c in event.tool_calls or ())
            items.append(TranscriptItem(record.version, event.role, event.content, tool_calls=calls))
        elif isinstance(event, ToolReturned):
            items.append(
                TranscriptItem(
                    record.version, "tool", event.content, tool_name=event.tool_name, is_error=event.is_error
                )
            )
    transcript = _transcript(items, options, store)
    return SummaryRequest(
        session_id=session_id,
        first_version=step.first,
        last_version=step.last,
        level=step.level,
        items=tuple(items),
        transcript=transcript,
        target_tokens=options.summary_tokens,
        count=store.tokenizer.count,
    )


def _transcript(items: list[TranscriptItem], options: CompactionOptions, store: Store) -> str:
    """The items as text for a model, long tool outputs shortened first, the whole capped."""
    tokenizer = store.tokenizer
    per_output = max(64, options.max_input_tokens // 8)
    lines = []
    for item in items:
        text = item.text
        if item.role == "tool":
            text = cap_text(text, per_output, tokenizer, _shortened).text
            label = f"tool {item.tool_name or '?'}" + (" (error)" if item.is_error else "")
        else:
            label = item.role
        calls = "".join(f"\n  -> {call}" for call in item.tool_calls)
        lines.append(f"[v{item.version}] {label}: {text}{calls}")
    whole = "\n".join(lines)
    return cap_text(whole, options.max_input_tokens, tokenizer, _shortened).text


def _shortened(shown: int, total: int) -> str:
    return f"[... shortened: {shown:,} of {total:,} tokens shown ...]"
