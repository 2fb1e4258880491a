"""The usage an OpenHands event stream records, read once per model response.

A response that made tool calls carries its usage in ``tool_call_metadata.model_response.usage``
(read by :mod:`turnlog.importers.from_openhands`). A plain-text reply (an agent ``message``, a
``finish`` without ``tool_call_metadata``) has no model response: its usage is in the event's
``llm_metrics``, a snapshot of the agent's metrics as of that event. Older OpenHands releases write
the whole list of per-response ``token_usages`` (each with its ``response_id``) in every snapshot;
later ones write only the running ``accumulated_token_usage`` (and ``accumulated_cost``).

So: a ``token_usages`` entry is recorded once by its response id, never when a tool call's model
response with that id is in the stream (that usage is recorded from it, or from the entry when the
response lacks one). Without ``token_usages``, the usage of a snapshot's event is the change of the
running totals since the snapshot before, less the tool calls' usage recorded in between. Either
way it is attached to the plain-text reply whose usage has not come yet (the event's own, or an
earlier one whose event had no snapshot), never to a tool call's message, which has its own; the
change of ``accumulated_cost`` is its cost when that change is this one response's alone. Counts keep
litellm's meaning (prompt tokens include the cached ones); where the cache counts exceed the prompt
(Anthropic's way, through an older litellm) they are added to it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from turnlog.importers.base import fields_of, short_repr, token_count
from turnlog.store import InvalidEventError, UsageRecorded

SOURCE = "openhands"


@dataclass(frozen=True)
class Counts:
    """A response's (or a running total's) counts as OpenHands/litellm writes them."""

    prompt: int = 0
    completion: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(*(a + b for a, b in zip(self._values(), other._values(), strict=True)))

    def __sub__(self, other: Counts) -> Counts:
        return Counts(*(max(a - b, 0) for a, b in zip(self._values(), other._values(), strict=True)))

    def _values(self) -> tuple[int, ...]:
        return (self.prompt, self.completion, self.cache_read, self.cache_write, self.reasoning)

    def empty(self) -> bool:
        return not any(self._values())


def litellm_counts(usage: Any, where: str) -> Counts:
    """A litellm ``usage`` object (a model response's) as counts; errors name the field."""
    if not isinstance(usage, dict):
        raise InvalidEventError(f"{where}: must be an object, not {short_repr(usage)}")
    for name in ("prompt_tokens", "completion_tokens"):
        if name not in usage:
            raise InvalidEventError(f"{where}: '{name}' is missing")
    details = usage.get("prompt_tokens_details")
    cached_name, cached = "prompt_tokens_details.cached_tokens", None
    if isinstance(details, dict):
        cached = details.get("cached_tokens")
    if not cached:
        cached_name, cached = "cache_read_input_tokens", usage.get("cache_read_input_tokens")
    written = usage.get("cache_creation_input_tokens")
    completion = usage.get("completion_tokens_details")
    reasoning = completion.get("reasoning_tokens") if isinstance(completion, dict) else None
    return Counts(
        token_count(usage["prompt_tokens"], "prompt_tokens", where),
        token_count(usage["completion_tokens"], "completion_tokens", where),
        0 if cached is None else token_count(cached, cached_name, where),
        0 if written is None else token_count(written, "cache_creation_input_tokens", where),
        0 if reasoning is None else token_count(reasoning, "reasoning_tokens", where),
    )


def _metrics_counts(usage: Any, where: str) -> Counts:
    """An OpenHands ``TokenUsage`` (a ``token_usages`` entry or the accumulated one) as counts."""
    if not isinstance(usage, dict):
        raise InvalidEventError(f"{where}: must be an object, not {short_repr(usage)}")
    names = (
        "prompt_tokens",
        "completion_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
    )
    return Counts(*(0 if usage.get(n) is None else token_count(usage[n], n, where) for n in names))


def usage_event(
    counts: Counts,
    *,
    event_id: str,
    model: str,
    response_id: str | None,
    call_event_id: str | None,
    cost: float | None,
    where: str,
) -> UsageRecorded:
    """The usage in turnlog's meaning (input tokens include the cached ones)."""
    prompt = counts.prompt
    if counts.cache_read + counts.cache_write > prompt:
        prompt += counts.cache_read + counts.cache_write  # left out of prompt_tokens, as Anthropic counts
    with fields_of(where):
        return UsageRecorded(
            event_id=event_id,
            model=model,
            input_tokens=prompt,
            output_tokens=counts.completion,
            cache_read_tokens=counts.cache_read,
            cache_write_tokens=counts.cache_write,
            reasoning_tokens=counts.reasoning,
            response_id=response_id,
            call_event_id=call_event_id,
            cost_usd=cost,
            source=SOURCE,
        )


@dataclass(frozen=True)
class _Entry:
    response_id: str
    counts: Counts
    model: str | None
    where: str


@dataclass(frozen=True)
class _Snapshot:
    where: str
    entries: tuple[_Entry, ...]
    accumulated: Counts | None
    accumulated_model: str | None
    cost: float | None


def read_snapshot(metrics: Any, where: str) -> _Snapshot:
    """An event's ``llm_metrics``, checked; errors name the event and the field."""
    here = f"{where}, llm_metrics"
    if not isinstance(metrics, dict):
        raise InvalidEventError(f"{here}: must be an object, not {short_repr(metrics)}")
    raw = metrics.get("token_usages")
    raw = [] if raw is None else raw
    if not isinstance(raw, list):
        raise InvalidEventError(f"{here}.token_usages: must be a list, not {short_repr(raw)}")
    entries = []
    for number, usage in enumerate(raw):
        spot = f"{here}.token_usages[{number}]"
        counts = _metrics_counts(usage, spot)
        rid = usage.get("response_id") or ""
        if not isinstance(rid, str):
            raise InvalidEventError(f"{spot}.response_id: must be a string, not {short_repr(rid)}")
        entries.append(_Entry(rid or f"#{number}", counts, _model(usage.get("model")), spot))
    accumulated = metrics.get("accumulated_token_usage")
    total = None
    if accumulated is not None:
        total = _metrics_counts(accumulated, f"{here}.accumulated_token_usage")
    cost = metrics.get("accumulated_cost")
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0
    ):
        raise InvalidEventError(f"{here}.accumulated_cost: must be a cost in dollars, not {short_repr(cost)}")
    model = _model(accumulated.get("model")) if isinstance(accumulated, dict) else None
    return _Snapshot(here, tuple(entries), total, model, None if cost is None else float(cost))


def _model(value: Any) -> str | None:
    """A model name OpenHands wrote (``default`` is its placeholder for none)."""
    return value if isinstance(value, str) and value.strip() and value != "default" else None


class MetricsUsage:
    """The usage of the plain-text replies of one stream, from its events' ``llm_metrics``, in
    stream order (see the module's docstring). ``called`` holds the ids of the responses that made
    tool calls (their usage comes from the model response)."""

    def __init__(self, snapshots: dict[int, _Snapshot], called: set[str], model: str) -> None:
        self._snapshots = snapshots
        self._called = called
        self._model = model
        self._seen: set[str] = set()
        self._total = Counts()
        self._cost = 0.0
        self._since = Counts()
        self._since_calls = 0
        self.by_id: dict[str, _Entry] = {}
        for index in sorted(snapshots):
            for entry in snapshots[index].entries:
                self.by_id.setdefault(entry.response_id, entry)

    def called_response(self, counts: Counts) -> None:
        """A tool-calling response's usage was recorded (it is in the next running total)."""
        self._since = self._since + counts
        self._since_calls += 1

    def at(self, index: int, message_id: str | None, event_id: Callable[..., str]) -> list[UsageRecorded]:
        """The usage the index-th event's snapshot adds, its last response attached to
        ``message_id`` (the plain-text reply still without usage, if any); ``event_id(*parts)``
        makes the events' ids."""
        snapshot = self._snapshots.get(index)
        if snapshot is None:
            return []
        found: list[tuple[Counts, str | None, str | None, str]] = []
        if snapshot.entries:
            for entry in snapshot.entries:
                if entry.response_id in self._called or entry.response_id in self._seen:
                    continue
                self._seen.add(entry.response_id)
                rid = None if entry.response_id.startswith("#") else entry.response_id
                found.append((entry.counts, rid, entry.model, entry.where))
        elif snapshot.accumulated is not None:
            change = snapshot.accumulated - self._total - self._since
            if not change.empty():
                found.append(
                    (change, None, snapshot.accumulated_model, "llm_metrics.accumulated_token_usage")
                )
        cost = None
        if snapshot.cost is not None:
            if len(found) == 1 and not self._since_calls and snapshot.cost > self._cost:
                cost = snapshot.cost - self._cost
            self._cost = snapshot.cost
        if snapshot.accumulated is not None:
            self._total = snapshot.accumulated
        self._since, self._since_calls = Counts(), 0
        out = []
        for number, (counts, rid, model, where) in enumerate(found):
            last = number == len(found) - 1
            out.append(
                usage_event(
                    counts,
                    event_id=event_id("usage", rid) if rid else event_id("usage", "metrics", index, number),
                    model=model or self._model,
                    response_id=rid,
                    call_event_id=message_id if last else None,
                    cost=cost,
                    where=where,
                )
            )
        return out
