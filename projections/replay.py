"""Replay: the model calls of a session, each with the context as it was built then — from the
recorded manifest when there is one, otherwise rebuilt as of that position — and what changed since
the previous call (added, capped, summarized, dropped)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from turnlog.projections.context import PRIME_TOKENS, BuiltContext, ContextPolicy, build_context
from turnlog.projections.formats import render
from turnlog.store import (
    ContextBuilt,
    ManifestEntry,
    MessageAppended,
    RecordedEvent,
    Store,
    StoreError,
    UsageRecorded,
)


@dataclass
class ModelCall:
    """One model call and the context it was sent."""

    number: int
    """1, 2, 3, ... in the session."""
    at_position: int
    """The log position the context is as of (just before the call's answer)."""
    session_id: str
    """The session whose context it was (a fork's shared prefix belongs to its parent)."""
    run_id: str | None
    model: str | None
    billed_input: int | None
    """Input tokens the provider billed for the call, when usage was recorded."""
    source: Literal["manifest", "rebuilt"]
    """Read from a recorded ``context_built`` event, or rebuilt with the given policy."""
    total_tokens: int
    budget: int
    """The budget the context was built with: the recorded manifest's, or the given policy's."""
    entries: tuple[ManifestEntry, ...]
    added: list[str] = field(default_factory=list)
    """Events shown now and not on the previous call."""
    capped: list[str] = field(default_factory=list)
    """Events shown capped now but whole (or not at all) before."""
    summarized: list[str] = field(default_factory=list)
    """Summaries shown for the first time."""
    dropped: list[str] = field(default_factory=list)
    """Events shown on the previous call and not now (left out, or replaced by a summary)."""
    context: BuiltContext | None = None
    """The rebuilt context (None when read from a manifest: :func:`sent_context` rebuilds it)."""
    manifest: ContextBuilt | None = None
    """The recorded ``context_built`` event, for a call read from one."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "at_position": self.at_position,
            "session_id": self.session_id,
            "run_id": self.run_id,
            "model": self.model,
            "billed_input": self.billed_input,
            "source": self.source,
            "total_tokens": self.total_tokens,
            "budget": self.budget,
            "added": self.added,
            "capped": self.capped,
            "summarized": self.summarized,
            "dropped": self.dropped,
            "entries": [e.model_dump() for e in self.entries],
        }


def replay(
    store: Store, session_id: str, policy: ContextPolicy, at: int | None = None, *, only: int | None = None
) -> list[ModelCall]:
    """The session's model calls up to position ``at``: each ``usage_recorded`` is a call (its
    context is as of just before the assistant message it answered with); a session without usage
    records counts each assistant message as a call. ``only``: just call number ``only`` (empty when
    there is none), with what changed since the call before it; no other context is built."""
    store.require_session(session_id)
    records = store.read_session(session_id)
    if at is not None:
        records = [r for r in records if r.position <= at]
    has_usage = any(isinstance(r.event, UsageRecorded) for r in records)
    # First the calls' places (cheap), then the contexts of the calls asked for (a build each).
    points: list[tuple[RecordedEvent, UsageRecorded | None, RecordedEvent | None]] = []
    answer: RecordedEvent | None = None  # the assistant message of the call in progress
    manifest: RecordedEvent | None = None  # a context_built recorded for it
    for record in records:
        event = record.event
        if isinstance(event, ContextBuilt):
            manifest = record
        elif isinstance(event, MessageAppended) and event.role == "assistant":
            if has_usage:
                answer = answer or record
            else:
                points.append((record, None, manifest))
                manifest = None
        elif isinstance(event, UsageRecorded):
            points.append((answer or record, event, manifest))
            answer = manifest = None
    first = 1 if only is None else max(1, only - 1)
    last = len(points) if only is None else min(only, len(points))
    calls = [_call(store, n, *points[n - 1], policy) for n in range(first, last + 1)]
    previous: ModelCall | None = None
    for call in calls:
        _diff(previous, call)
        previous = call
    return calls if only is None else [c for c in calls if c.number == only]


def _call(
    store: Store,
    number: int,
    answer: RecordedEvent,
    usage: UsageRecorded | None,
    manifest: RecordedEvent | None,
    policy: ContextPolicy,
) -> ModelCall:
    at = answer.position - 1
    run_id = usage.run_id if usage else None
    model = usage.model if usage else None
    billed = usage.input_tokens if usage else None
    if manifest is not None and isinstance(manifest.event, ContextBuilt):
        built_event = manifest.event
        return ModelCall(number, built_event.at_position, manifest.session_id, run_id or built_event.run_id,
                         model or built_event.model, billed, "manifest", built_event.total_tokens,
                         built_event.budget, built_event.entries, manifest=built_event)  # fmt: skip
    if store.version_at(answer.session_id, at) == 0:
        # The answer is the session's first event: the model was sent nothing of it (a greeting
        # the agent opens with). That call is replayed with an empty context, not refused.
        built = _empty(store, answer.session_id, policy, at)
        return ModelCall(number, at, answer.session_id, run_id, model, billed, "rebuilt", built.total_tokens,
                         policy.budget, built.entries, context=built)  # fmt: skip
    try:
        built = build_context(store, answer.session_id, policy, at=at)
    except StoreError as exc:
        raise StoreError(f"call {number} (position {answer.position}): {exc}") from exc
    return ModelCall(number, at, answer.session_id, run_id, model, billed, "rebuilt", built.total_tokens,
                     policy.budget, built.entries, context=built)  # fmt: skip


def sent_context(store: Store, call: ModelCall, fmt: str | None = None) -> BuiltContext | None:
    """The messages ``call`` was sent, with their exact token counts. A rebuilt call has them
    already. For a call read from a recorded manifest, the context is built again as of the
    manifest's position with the manifest's own policy (and model, for a calibrated budget): a
    projection gives the same result for the same events, and the rebuild is checked against the
    manifest entry by entry (events, role, mode, tokens). None when it differs (a manifest written by
    another version of the builder, or a policy this version cannot read): then only the manifest
    says what was sent. ``fmt`` renders it in another format (``text`` for a terminal)."""
    if call.manifest is None:
        built = call.context
    else:
        try:
            policy = ContextPolicy.model_validate(call.manifest.policy)
        except ValidationError:
            return None
        try:
            built = build_context(store, call.session_id, policy, at=call.manifest.at_position,
                                  model=call.manifest.model)  # fmt: skip
        except StoreError:
            return None
        if built.entries != call.manifest.entries or built.total_tokens != call.manifest.total_tokens:
            return None
    if built is not None and fmt is not None and fmt != built.policy.format:
        built = copy.copy(built)  # the call's own context keeps its format
        built.rendered = render(built.messages, fmt)
    return built


def _empty(store: Store, session_id: str, policy: ContextPolicy, at: int) -> BuiltContext:
    built = BuiltContext(
        session_id=session_id,
        at_position=at,
        head_version=0,
        policy=policy,
        tokenizer=store.tokenizer.name,
        total_tokens=PRIME_TOKENS,
        messages=[],
        omitted_messages=0,
        omitted_tokens=0,
    )
    built.rendered = render([], policy.format)
    return built


def _keys(entries: tuple[ManifestEntry, ...], modes: tuple[str, ...] | None = None) -> dict[str, str]:
    return {e.event_ids[0]: e.mode for e in entries if e.event_ids and (modes is None or e.mode in modes)}


def _diff(previous: ModelCall | None, call: ModelCall) -> None:
    now = _keys(call.entries)
    before = _keys(previous.entries) if previous else {}
    call.added = [k for k, mode in now.items() if k not in before and mode != "summary"]
    call.summarized = [k for k, mode in now.items() if mode == "summary" and k not in before]
    call.capped = [k for k, mode in now.items() if mode == "capped" and before.get(k) != "capped"]
    call.dropped = [k for k in before if k not in now]
