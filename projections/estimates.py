"""turnlog's own estimate of what each model call was sent, to put beside what the provider billed.

A session's calls are the ones replay counts (projections.replay): each ``usage_recorded`` of one
call is a call, its answer the assistant message it names (``call_event_id``) or else the first
assistant message since the call before; a session without such usage counts each assistant
message as a call. A call's estimate is:

- the recorded manifest's total, when turnlog built the call's context (a ``context_built`` just
  before its answer): exactly what turnlog sent;
- otherwise the transcript: every live message and tool output before the answer, whole, counted by
  the OpenAI chat rule (3 tokens per message, its role, its text, 1 more per name, 3 for the reply's
  priming: projections.context_types), with the store's tokenizer. That is what an agent that sends
  its whole history (SWE-agent, most frameworks) was billed for.

An estimate is **exact** when the model's own tokenizer is the store's and its provider counts by
that rule (OpenAI's cl100k_base models with a cl100k_base store); otherwise it is **approximate**
(Claude and Gemini tokenizers are not public; OpenAI's o200k_base models are counted with the
store's encoding), and :func:`calibration` learns, per model, the ratio billed ÷ estimated from the
usage in the store. One linear pass over each session's events (rewinds and removals followed)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from turnlog.projections.context_types import PRIME_TOKENS, message_cost, role_costs, tool_output_cost
from turnlog.store import (
    ContextBuilt,
    MessageAppended,
    MessageRemoved,
    RecordedEvent,
    SessionRewound,
    SessionStarted,
    Store,
    ToolReturned,
    UsageRecorded,
)


@dataclass(frozen=True)
class CallEstimate:
    """One model call: what was billed beside what turnlog estimates it was sent."""

    session_id: str
    number: int
    """1, 2, 3, ... in the session, as replay numbers its calls."""
    position: int
    """The log position of the call's usage (of its answer when it has no usage)."""
    run_id: str | None
    model: str | None
    day: str
    """The UTC day of the call's usage (or answer), ``YYYY-MM-DD``."""
    billed_input: int | None
    """Input tokens the provider billed for this call (None: usage not recorded per call)."""
    billed_output: int | None
    estimated_input: int
    exact: bool
    """Counted with the model's own tokenizer and rule; False: approximate."""
    source: Literal["manifest", "transcript"]


@dataclass(frozen=True)
class RunTotal:
    """Usage a source reported only as totals (``scope="run"``), to compare with the sum of its
    calls' estimates."""

    session_id: str
    run_id: str | None
    model: str
    day: str
    billed_input: int
    billed_output: int
    calls: int | None


def is_exact(model: str | None, tokenizer: str) -> bool:
    """Whether ``model`` is counted exactly by a store whose tokenizer is ``tokenizer``: an OpenAI
    model whose encoding (tiktoken's own table, no download) is the store's."""
    if not model:
        return False
    import tiktoken.model

    with contextlib.suppress(KeyError):
        return tiktoken.model.encoding_name_for_model(model) == tokenizer.removesuffix("_offline")
    return False


def session_estimates(
    store: Store, session_id: str, *, at: int | None = None
) -> tuple[list[CallEstimate], list[RunTotal]]:
    """The session's calls with their estimates, and its run-level usage totals (as of position
    ``at``: only events at or before it)."""
    records = store.read_session(session_id)
    if at is not None:
        records = [r for r in records if r.position <= at]
    return _Walk(store, session_id).run(records)


def store_estimates(
    store: Store, sessions: Iterable[str] | None = None
) -> tuple[list[CallEstimate], list[RunTotal]]:
    """:func:`session_estimates` of every session (or of ``sessions``), in session order."""
    names = sessions if sessions is not None else [s.session_id for s in store.sessions()]
    calls: list[CallEstimate] = []
    runs: list[RunTotal] = []
    for name in names:
        found, totals = session_estimates(store, name)
        calls += found
        runs += totals
    return calls, runs


def calibration(calls: Sequence[CallEstimate], runs: Sequence[RunTotal] = ()) -> dict[str, float]:
    """Per model whose estimates are approximate: billed input ÷ estimated input, over the calls
    billed one by one and the runs billed as totals (a positive number; models with nothing to
    compare are left out)."""
    billed: dict[str, int] = {}
    estimated: dict[str, int] = {}
    for call in calls:
        if call.exact or call.model is None or call.billed_input is None:
            continue
        billed[call.model] = billed.get(call.model, 0) + call.billed_input
        estimated[call.model] = estimated.get(call.model, 0) + call.estimated_input
    by_run: dict[tuple[str, str | None], list[CallEstimate]] = {}
    for call in calls:
        if not call.exact:
            by_run.setdefault((call.session_id, call.run_id), []).append(call)
    for run in runs:
        mine = by_run.get((run.session_id, run.run_id), [])
        if mine and all(c.billed_input is None for c in mine):
            billed[run.model] = billed.get(run.model, 0) + run.billed_input
            estimated[run.model] = estimated.get(run.model, 0) + sum(c.estimated_input for c in mine)
    return {model: billed[model] / estimated[model] for model in sorted(billed) if estimated.get(model)}


@dataclass(frozen=True)
class EstimateRow:
    """The agent's calls of one group: billed input beside turnlog's estimate."""

    key: str | None
    """The session, run, model or day (``agent`` in the category view); None for "no run"/"no model"
    and for the totals."""
    calls: int
    """Calls estimated (a run billed as totals counts its estimated calls)."""
    billed_input: int | None
    """Input billed for the group's calls and runs; None when none of them has usage."""
    estimated_input: int
    difference: int | None
    """billed − estimated, where both are known for every call of the group."""
    exact: bool
    """Every estimate of the group is exact (see :func:`is_exact`)."""


@dataclass(frozen=True)
class EstimateReport:
    """:func:`audit_estimates`: the rows, their totals, and the calibration of approximate models."""

    by: str
    rows: tuple[EstimateRow, ...]
    totals: EstimateRow
    calibration: dict[str, float]
    """Per model counted approximately: billed ÷ estimated (see :func:`calibration`)."""


def audit_estimates(store: Store, session_id: str | None = None, by: str = "session") -> EstimateReport:
    """The estimates of the audited sessions grouped like ``turnlog audit --by`` (the category view
    has one row, the agent's calls); for the whole store, the sessions the ledger has the agent's
    billed usage for. A group's billed input counts only usage that can be compared: its calls
    billed one by one, and its runs billed as totals."""
    from turnlog.projections.registry import materializer  # the registry imports the ledger

    if session_id is not None:
        sessions = [session_id]
    else:
        # Only sessions with the agent's usage have a bill to compare with: the others are not read.
        materializer(store).catch_up()
        with store.reading() as conn:
            billed = {
                row[0]
                for row in conn.execute(
                    "SELECT DISTINCT session_id FROM ledger_usage WHERE category = 'agent'"
                )
            }
        sessions = [s.session_id for s in store.sessions() if s.session_id in billed]
    calls, runs = store_estimates(store, sessions)

    def key(item: CallEstimate | RunTotal) -> str | None:
        if by == "category":
            return "agent"
        value = {"session": item.session_id, "run": item.run_id, "model": item.model, "day": item.day}[by]
        return value or None

    groups: dict[str | None, list[CallEstimate]] = {}
    for call in calls:
        groups.setdefault(key(call), []).append(call)
    totals_by: dict[str | None, list[RunTotal]] = {}
    for run in runs:
        totals_by.setdefault(key(run), []).append(run)
    rows = tuple(
        _row(k, groups.get(k, []), totals_by.get(k, []))
        for k in sorted(set(groups) | set(totals_by), key=lambda k: (k is None, k or ""))
    )
    return EstimateReport(by, rows, _row(None, calls, runs), calibration(calls, runs))


def _row(key: str | None, calls: Sequence[CallEstimate], runs: Sequence[RunTotal]) -> EstimateRow:
    estimated = sum(c.estimated_input for c in calls)
    per_call = [c.billed_input for c in calls if c.billed_input is not None]
    billed = sum(per_call) + sum(r.billed_input for r in runs) if (per_call or runs) else None
    # Comparable when every call is billed itself, or none is and runs bill them as totals.
    whole = bool(calls) and (len(per_call) == len(calls) or (not per_call and bool(runs)))
    return EstimateRow(
        key=key,
        calls=len(calls),
        billed_input=billed,
        estimated_input=estimated,
        difference=billed - estimated if billed is not None and whole else None,
        exact=bool(calls) and all(c.exact for c in calls),
    )


class _Walk:
    """One pass over a session's records (see the module)."""

    def __init__(self, store: Store, session_id: str) -> None:
        self.session_id = session_id
        self.tokenizer = store.tokenizer.name
        self.costs = role_costs(store.tokenizer)
        self.count = store.count_event_tokens
        self.live: dict[str, tuple[int, int]] = {}  # event id -> (version, tokens in a context)
        self.total = 0
        self.ops: list[tuple[int, str, Any]] = []
        """Every change of the live set, in order: (version, "add" | "remove" | "rewind", its data),
        replayed to find the live set a rewind returns to."""
        self.before: dict[str, tuple[int, RecordedEvent, RecordedEvent | None]] = {}
        """An assistant message's id -> (the transcript's tokens before it, the message, its manifest)."""

    def _add(self, record: RecordedEvent, tokens: int) -> None:
        self.ops.append((record.version, "add", (record.event_id, tokens)))
        self._apply("add", record.version, (record.event_id, tokens))

    def _apply(self, kind: str, version: int, data: Any) -> None:
        if kind == "add":
            event_id, tokens = data
            self.live[event_id] = (version, tokens)
            self.total += tokens
        elif kind == "remove":
            for target in data:
                gone = self.live.pop(target, None)
                if gone is not None:
                    self.total -= gone[1]
        else:  # a rewind: the live set as it was at that version (later removals undone too)
            self.live, self.total = {}, 0
            for at, op, payload in self.ops:
                if at > data:
                    break
                self._apply(op, at, payload)

    def _tokens(self, record: RecordedEvent) -> int:
        return record.tokens if record.tokens is not None else self.count(record.event)

    def run(self, records: Sequence[RecordedEvent]) -> tuple[list[CallEstimate], list[RunTotal]]:
        has_calls = any(isinstance(r.event, UsageRecorded) and r.event.scope == "call" for r in records)
        session_model = None
        calls: list[CallEstimate] = []
        runs: list[RunTotal] = []
        pending: list[str] = []  # assistant messages since the last call
        manifest: RecordedEvent | None = None
        for record in records:
            event = record.event
            if isinstance(event, SessionStarted) and record.session_id == self.session_id:
                session_model = event.model or session_model
            elif isinstance(event, ContextBuilt):
                manifest = record
            elif isinstance(event, MessageAppended):
                if event.role == "assistant":
                    self.before[event.event_id] = (self.total, record, manifest)
                    manifest = None
                    if has_calls:
                        pending.append(event.event_id)
                    else:
                        calls.append(self._call(len(calls) + 1, record, None, session_model))
                cost = message_cost(
                    self.costs,
                    event.role,
                    self._tokens(record),
                    bool(event.name),
                    len(event.tool_calls or ()),
                )
                self._add(record, cost)
            elif isinstance(event, ToolReturned):
                self._add(record, tool_output_cost(self.costs, self._tokens(record)))
            elif isinstance(event, MessageRemoved):
                self.ops.append((record.version, "remove", event.target_event_ids))
                self._apply("remove", record.version, event.target_event_ids)
            elif isinstance(event, SessionRewound):
                self._apply("rewind", record.version, event.to_version)
                self.ops.append((record.version, "rewind", event.to_version))
            elif isinstance(event, UsageRecorded):
                if event.scope == "run":
                    runs.append(
                        RunTotal(record.session_id, event.run_id, event.model, record.recorded_at[:10],
                                 event.input_tokens, event.output_tokens, event.calls)
                    )  # fmt: skip
                    continue
                answer = event.call_event_id or (pending[0] if pending else None)
                if answer is not None and answer in pending:
                    pending.remove(answer)
                calls.append(self._call(len(calls) + 1, record, event, session_model, answer))
        if not has_calls and runs:
            # Calls billed only as a run's totals: each takes the run's model when it names none.
            only = runs[0].model if len({r.model for r in runs}) == 1 else None
            calls = [
                c if c.model is not None or only is None else _with_model(c, only, self.tokenizer)
                for c in calls
            ]
        return calls, runs

    def _call(
        self,
        number: int,
        record: RecordedEvent,
        usage: UsageRecorded | None,
        session_model: str | None,
        answer: str | None = None,
    ) -> CallEstimate:
        model = usage.model if usage is not None else session_model
        answered = self.before.get(answer or record.event_id)
        source: Literal["manifest", "transcript"] = "transcript"
        if answered is not None and answered[2] is not None and isinstance(answered[2].event, ContextBuilt):
            estimate, source = answered[2].event.total_tokens, "manifest"
        else:
            estimate = (answered[0] if answered is not None else self.total) + PRIME_TOKENS
        return CallEstimate(
            session_id=self.session_id,
            number=number,
            position=record.position,
            run_id=usage.run_id if usage is not None else None,
            model=model,
            day=record.recorded_at[:10],
            billed_input=usage.input_tokens if usage is not None else None,
            billed_output=usage.output_tokens if usage is not None else None,
            estimated_input=estimate,
            exact=is_exact(model, self.tokenizer),
            source=source,
        )


def _with_model(call: CallEstimate, model: str, tokenizer: str) -> CallEstimate:
    from dataclasses import replace

    return replace(call, model=model, exact=is_exact(model, tokenizer))


__all__ = [
    "CallEstimate",
    "EstimateReport",
    "EstimateRow",
    "RunTotal",
    "audit_estimates",
    "calibration",
    "is_exact",
    "session_estimates",
    "store_estimates",
]
