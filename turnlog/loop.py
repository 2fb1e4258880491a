"""The seeds in the agent loop: a session's policy, tool outputs condensed on the write path, and
compaction when a run finishes.

Everything here runs *after* the events that trigger it have committed, never inside the store's
own append and never for an import: the run saw full outputs, the next run's context starts from
summaries, and a failing summarizer never loses the run (the failure is appended as a
``compaction_failed`` event and reported). The policy only names summarizers and custom handlers;
what they are comes from the local configuration (turnlog.config) or from callables the API caller
passes."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnlog.compaction import CompactionOptions, CompactionResult, compact
from turnlog.config import BUILT_IN, Config, CustomHandler, custom_named, load_config, summarizer_named
from turnlog.projections.capping import cap_text
from turnlog.projections.context import ContextPolicy, open_run, run_start_version
from turnlog.projections.runtime import condensed_outputs, session_policy
from turnlog.projections.stable_cuts import policy_of
from turnlog.store import (
    CompactionFailed,
    CondenserInfo,
    OutputCondensed,
    PolicySet,
    RecordedEvent,
    RunFinished,
    SessionPolicy,
    Store,
    StoreError,
    ToolReturned,
)
from turnlog.summarizers import Summarizer, SummaryRequest, TranscriptItem, as_summarizer

log = logging.getLogger("turnlog")

DEFAULT_TOOL_CAP = ContextPolicy.model_fields["max_tool_tokens"].default
"""The threshold of an output when the policy sets none (the context's default cap)."""
MAX_SUMMARIZED_TOKENS = 8000
"""What one summarizer call reads of an output (its head and tail beyond that)."""


@dataclass
class LoopReport:
    """What the loop did after a commit: the events it appended and what failed."""

    appended: list[RecordedEvent] = field(default_factory=list)
    """Condensed outputs, summaries and failure records, in order."""
    compaction: CompactionResult | None = None
    """The run-end compaction, when one ran."""
    errors: list[str] = field(default_factory=list)
    """One line per failure (each also appended as ``compaction_failed`` when the store allowed)."""

    @property
    def condensed(self) -> list[OutputCondensed]:
        return [r.event for r in self.appended if isinstance(r.event, OutputCondensed)]

    @property
    def failures(self) -> list[CompactionFailed]:
        return [r.event for r in self.appended if isinstance(r.event, CompactionFailed)]


@dataclass
class Handlers:
    """Where the names of a policy are looked up: explicit objects first, then the configuration."""

    config: Config | None = None
    summarizer: Summarizer | None = None
    """Used for ``auto`` outputs and run-end compaction instead of the policy's named summarizer."""
    custom: Mapping[str, CustomHandler] | None = None
    """Custom handlers by name (the API's ``custom`` mode)."""

    def the_config(self) -> Config:
        if self.config is None:
            self.config = load_config()
        return self.config

    def summarizer_for(self, policy: SessionPolicy) -> Summarizer:
        if self.summarizer is not None:
            return self.summarizer
        return summarizer_named(policy.summarizer or BUILT_IN, self.the_config())


# --- the policy --------------------------------------------------------------------------------


def set_policy(
    store: Store, session_id: str, policy: SessionPolicy, *, replace: bool = False
) -> RecordedEvent:
    """Store the session's policy: ``policy``'s fields over the current ones (``replace``: exactly
    ``policy``). Names are checked for form only: what they stand for is looked up where the loop runs."""
    store.require_session(session_id)
    current = SessionPolicy() if replace else session_policy(store, session_id)
    return store.append(session_id, [PolicySet(policy=current.merged(policy))])[0]


def get_policy(store: Store, session_id: str, at: int | None = None) -> SessionPolicy:
    """The session's stored policy (all fields unset when none was set)."""
    store.require_session(session_id)
    return session_policy(store, session_id, at)


# --- after a commit ------------------------------------------------------------------------------


def after_commit(
    store: Store,
    session_id: str,
    records: Sequence[RecordedEvent],
    *,
    handlers: Handlers | None = None,
    policy: SessionPolicy | None = None,
) -> LoopReport:
    """What the loop does once ``records`` (just appended to ``session_id``) have committed: condense
    the new long tool outputs the policy gives an ``auto`` or ``custom`` mode, and when a run
    finished, run the run-end work. ``policy`` overrides the stored policy field by field."""
    report = LoopReport()
    outputs = [r for r in records if isinstance(r.event, ToolReturned)]
    finished = [r for r in records if isinstance(r.event, RunFinished)]
    if not outputs and not finished:
        return report
    handlers = handlers or Handlers()
    effective = session_policy(store, session_id).merged(policy or SessionPolicy())
    if outputs and effective.condense_at != "run_end" and _condensing(effective):
        condense_outputs(store, session_id, outputs, effective, handlers, report)
    for record in finished:
        event = record.event
        assert isinstance(event, RunFinished)
        finish(store, session_id, event.run_id, handlers=handlers, policy=policy, report=report)
    return report


def after_adapter_commit(store: Store, session_id: str, records: Sequence[RecordedEvent]) -> LoopReport:
    """:func:`after_commit` for a framework adapter: it never raises into the framework (whose own
    writes are committed); what failed is recorded and logged."""
    try:
        return after_commit(store, session_id, records)
    except StoreError as exc:
        log.warning("turnlog: session %s: the run-time loop could not run: %s", session_id, exc)
        return LoopReport(errors=[f"the run-time loop could not run: {exc}"])


def finish(
    store: Store,
    session_id: str,
    run_id: str | None,
    *,
    handlers: Handlers | None = None,
    policy: SessionPolicy | None = None,
    report: LoopReport | None = None,
) -> LoopReport:
    """The run-end work for a run that finished: condense the run's long outputs that still have no
    view in their mode, then, with ``compact_on_run_end``, compact to the policy's budget."""
    report = report if report is not None else LoopReport()
    handlers = handlers or Handlers()
    effective = session_policy(store, session_id).merged(policy or SessionPolicy())
    if _condensing(effective):
        outputs = [r for r in _run_records(store, session_id, run_id) if isinstance(r.event, ToolReturned)]
        condense_outputs(store, session_id, outputs, effective, handlers, report)
    if not effective.compact_on_run_end:
        return report
    name = effective.summarizer or BUILT_IN
    if effective.budget is None:
        _fail(
            store,
            session_id,
            report,
            "run_end",
            name,
            "the policy compacts on run end but sets no budget",
            run_id,
        )
        return report
    if open_run(store, session_id) is not None:
        return report  # another run began meanwhile: the next run end compacts
    try:
        summarizer = handlers.summarizer_for(effective)
        # The contexts' own policy: the stored tool cap (below the builder's least read as that
        # least), cache_stable and refill share.
        context_policy = policy_of(effective, effective.budget)
        options = (
            CompactionOptions()
            if effective.keep_last is None
            else CompactionOptions(keep_last=effective.keep_last)
        )
        report.compaction = compact(store, session_id, context_policy, summarizer, options=options)
        report.appended += report.compaction.appended
    except Exception as exc:  # a summarizer (a user's callable too) must not lose the run
        _fail(store, session_id, report, "run_end", name, _one_line(exc), run_id)
    return report


def condense_outputs(
    store: Store,
    session_id: str,
    outputs: Sequence[RecordedEvent],
    policy: SessionPolicy,
    handlers: Handlers,
    report: LoopReport,
) -> None:
    """Make the view each long output's mode asks for, unless it exists; append them in one batch."""
    threshold = policy.max_tool_tokens or DEFAULT_TOOL_CAP
    done = condensed_outputs(store, session_id)
    made: list[OutputCondensed] = []
    for record in outputs:
        event = record.event
        assert isinstance(event, ToolReturned)
        mode = policy.mode_for(event.tool_name)
        # UTF-8 bytes bound the tokens from above: most outputs are never counted.
        if mode == "simple" or len(event.content.encode("utf-8")) <= threshold:
            continue
        tokens = record.tokens if record.tokens is not None else store.tokenizer.count(event.content)
        if tokens <= threshold:
            continue
        kind, _, custom_name = mode.partition(":")
        name = custom_name or (policy.summarizer or BUILT_IN)
        if handlers.summarizer is not None and kind == "auto":
            name = handlers.summarizer.info.name
        if any(v.mode == kind and v.name == name for v in done.get(record.event_id, ())):
            continue  # made before (by this run's append, or an earlier attempt)
        if any(f.target_event_id == record.event_id for f in report.failures):
            continue  # failed a moment ago, in this same pass: recorded once
        try:
            made.append(_condense(store, session_id, record, event, kind, name, tokens, handlers, policy))
        except Exception as exc:  # a user's callable may raise anything: it must not lose the run
            _fail(store, session_id, report, "output", name, _one_line(exc), None, record.event_id)
    if made:
        try:
            report.appended += store.append(session_id, list(made))
        except StoreError as exc:
            report.errors.append(f"could not record condensed outputs: {exc}")


def _condense(
    store: Store,
    session_id: str,
    record: RecordedEvent,
    event: ToolReturned,
    kind: str,
    name: str,
    tokens: int,
    handlers: Handlers,
    policy: SessionPolicy,
) -> OutputCondensed:
    tok = store.tokenizer
    if kind == "custom":
        handler = custom_named(name, handlers.the_config(), handlers.custom)
        info = CondenserInfo(mode="custom", name=name, prompt_version=handler.version)
        text, usage = handler.run(event.content), None
    else:
        summarizer = (
            handlers.summarizer_for(policy)
            if handlers.summarizer is None
            else as_summarizer(handlers.summarizer)
        )
        info = CondenserInfo(
            mode="auto", name=name, model=summarizer.info.model, prompt_version=summarizer.info.prompt_version
        )
        shown = cap_text(event.content, MAX_SUMMARIZED_TOKENS, tok, _shortened).text
        label = event.tool_name or "a tool"
        item = TranscriptItem(
            record.version, "tool", shown, tool_name=event.tool_name, is_error=event.is_error
        )
        request = SummaryRequest(
            session_id=session_id,
            first_version=record.version,
            last_version=record.version,
            level=0,
            items=(item,),
            transcript=f"Output of {label}{' (an error)' if event.is_error else ''}:\n{shown}",
            target_tokens=max(32, min(400, (policy.max_tool_tokens or DEFAULT_TOOL_CAP) // 2)),
            count=tok.count,
        )
        result = summarizer.summarize(request)
        text, usage = result.text, result.usage
    if not isinstance(text, str) or not text.strip():
        raise StoreError(f"{kind} handler {name!r} returned no text")
    content_hash = hashlib.sha256(event.content.encode("utf-8")).hexdigest()
    key = hashlib.sha256(
        f"{content_hash}\0{info.mode}\0{info.name}\0{info.prompt_version}".encode()
    ).hexdigest()
    return OutputCondensed(
        target_event_id=record.event_id,
        condenser=info,
        text=text.strip(),
        source_tokens=tokens,
        input_tokens=usage.input_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0,
        key=key,
    )


def _condensing(policy: SessionPolicy) -> bool:
    return any(mode != "simple" for mode in (policy.tool_output_modes or {}).values())


def _run_records(store: Store, session_id: str, run_id: str | None) -> list[RecordedEvent]:
    """The session's events from the start of run ``run_id`` (its newest ``run_started``), read from
    that version on: a run end costs the run, not the session."""
    start = run_start_version(store, session_id, run_id)
    return store.read_session(session_id, from_version=start or 1)


def _fail(
    store: Store,
    session_id: str,
    report: LoopReport,
    stage: Any,
    handler: str,
    error: str,
    run_id: str | None,
    target: str | None = None,
) -> None:
    line = f"{'run-end compaction' if stage == 'run_end' else 'condensing an output'} failed: {error}"
    report.errors.append(line)
    log.warning("turnlog: session %s: %s", session_id, line)
    try:
        failed = CompactionFailed(
            stage=stage, run_id=run_id, target_event_id=target, handler=handler, error=error[:4000]
        )
        report.appended += store.append(session_id, [failed])
    except (StoreError, ValueError) as exc:
        report.errors.append(f"could not record the failure: {exc}")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return (
        f"{type(exc).__name__}: {first}" if not isinstance(exc, StoreError) else first or type(exc).__name__
    )


def _shortened(shown: int, total: int) -> str:
    return f"[... {total - shown:,} of {total:,} tokens of this output left out here ...]"


__all__ = [
    "Handlers",
    "LoopReport",
    "after_adapter_commit",
    "after_commit",
    "finish",
    "get_policy",
    "set_policy",
]
