"""What the viewer's pages and API show, read from the projections (sessions, replay, spend,
estimates, artifacts, todos, summaries, the live index): plain data, no HTML. Every function takes an
open (read-only) store and raises UnknownSessionError for a session that does not exist."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from turnlog.projections.artifacts import ArtifactInfo, list_artifacts, read_artifact
from turnlog.projections.context import BuiltContext, ContextMessage, ContextPolicy
from turnlog.projections.estimates import CallEstimate, session_estimates
from turnlog.projections.live import COMPENSATING_TYPES, live_marks
from turnlog.projections.replay import ModelCall, replay, sent_context
from turnlog.projections.sessions import SessionInfo, list_sessions
from turnlog.projections.spend import CallSpend, DaySpend, call_spend, spend_per_day
from turnlog.projections.summaries import SummaryInfo, list_summaries
from turnlog.store import (
    MessageAppended,
    RecordedEvent,
    Store,
    TodosUpdated,
    ToolReturned,
    UnknownArtifactError,
)

REPLAY_POLICY = ContextPolicy(budget=8000, max_tool_tokens=1000, format="openai")
"""The policy a call without a recorded manifest is rebuilt with (``turnlog replay``'s defaults)."""


# --- the session list ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionRow:
    """One session as the list and ``/api/sessions`` show it."""

    session_id: str
    title: str | None
    model: str | None
    parent: str | None
    """The session it was forked from, if any."""
    events: int
    messages: int
    """Live system, user and assistant messages and tool returns."""
    tokens: int
    """Stored tokens of its events."""
    calls: int
    """Billed model calls (the ledger's)."""
    billed_input: int
    billed_output: int
    cost: float | None
    """USD as turnlog prices the billed calls; None when a call's model has no price."""
    billed_cost: float | None
    """USD the sources recorded; None when none did."""
    first_recorded_at: str
    last_recorded_at: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def session_rows(store: Store) -> list[SessionRow]:
    """Every session, newest activity first, with its billed spend."""
    spent: dict[str, list[CallSpend]] = {}
    for row in call_spend(store):
        spent.setdefault(row.session_id, []).append(row)
    rows = [_session_row(info, spent.get(info.session_id, [])) for info in list_sessions(store)]
    rows.sort(key=lambda r: r.last_recorded_at, reverse=True)
    return rows


def _session_row(info: SessionInfo, spent: Sequence[CallSpend]) -> SessionRow:
    billed = [c.billed_cost for c in spent if c.billed_cost is not None]
    priced = [c.cost for c in spent]
    return SessionRow(
        session_id=info.session_id,
        title=info.title,
        model=info.model,
        parent=info.parent.session_id if info.parent else None,
        events=info.event_count,
        messages=info.system_messages + info.user_messages + info.assistant_messages + info.tool_returns,
        tokens=info.tokens,
        calls=sum(c.calls for c in spent),
        billed_input=sum(c.input for c in spent),
        billed_output=sum(c.output for c in spent),
        cost=None if None in priced else sum(c or 0.0 for c in priced),
        billed_cost=sum(billed) if billed else None,
        first_recorded_at=info.first_recorded_at,
        last_recorded_at=info.last_recorded_at,
    )


def search(rows: Sequence[SessionRow], query: str) -> list[SessionRow]:
    """The rows whose id or title holds ``query`` (case-insensitive)."""
    needle = query.strip().casefold()
    if not needle:
        return list(rows)
    return [r for r in rows if needle in r.session_id.casefold() or needle in (r.title or "").casefold()]


# --- the timeline --------------------------------------------------------------------------------


@dataclass
class Item:
    """One entry of a session's timeline: an event, with what the projections say about it."""

    record: RecordedEvent
    live: bool
    """False when a rewind or a removal undid it."""
    inherited: bool
    """An event of the parent session, shared by this fork."""
    returns: dict[str, RecordedEvent] = field(default_factory=dict)
    """For an assistant message: the returns of its tool calls, by call id."""
    return_artifacts: dict[str, ArtifactInfo] = field(default_factory=dict)
    """For an assistant message: the returns kept whole as artifacts, by call id."""
    call: CallEstimate | None = None
    """For a usage record (or the answer of a call without usage): the model call it closes."""
    artifact: ArtifactInfo | None = None
    """For an artifact write, or a tool return kept whole as an artifact."""
    summary: SummaryInfo | None = None
    todo_changes: list[tuple[str, str, str]] = field(default_factory=list)
    """For a todo update: (status before or ``new``, status now, content) of each entry that changed."""

    @property
    def kind(self) -> str:
        return self.record.type


@dataclass
class Timeline:
    """A session's events, in order, and what surrounds them."""

    info: SessionInfo
    items: list[Item]
    children: list[SessionInfo]
    """Sessions forked from this one."""
    calls: list[CallEstimate]
    artifacts: list[ArtifactInfo]
    summaries: list[SummaryInfo]

    def index_of(self, event_id: str) -> int | None:
        """Where the item showing ``event_id`` is (a tool return: its call's message), if any."""
        for index, item in enumerate(self.items):
            if item.record.event_id == event_id or any(r.event_id == event_id for r in item.returns.values()):
                return index
        return None


def timeline(store: Store, session_id: str) -> Timeline:
    """The session's events with tool calls paired to their returns, the model calls numbered as
    replay numbers them, todo updates as changes, artifacts and summaries with their projections'
    rows, and the sessions forked from it."""
    store.require_session(session_id)
    sessions = list_sessions(store)
    info = next(i for i in sessions if i.session_id == session_id)
    with store.reading():
        records = store.read_session(session_id)
        live = live_marks(store, session_id, records)
        calls, _ = session_estimates(store, session_id)
        artifacts = list_artifacts(store, session_id)
        summaries = list_summaries(store, session_id)
    by_call_position = {c.position: c for c in calls}
    artifact_of = {a.event_id: a for a in artifacts}
    summary_of = {s.event_id: s for s in summaries}
    items: list[Item] = []
    pending: dict[str, Item] = {}  # tool call id -> the assistant message that asked for it
    todos: dict[str, str] = {}
    for record, alive in zip(records, live, strict=True):
        event = record.event
        item = Item(record, alive or record.type in COMPENSATING_TYPES, record.session_id != session_id)
        item.call = by_call_position.get(record.position)
        item.artifact = artifact_of.get(record.event_id)
        item.summary = summary_of.get(record.event_id)
        if isinstance(event, ToolReturned) and event.tool_call_id in pending:
            owner = pending.pop(event.tool_call_id)
            if owner.live == item.live:
                owner.returns[event.tool_call_id] = record
                if item.artifact is not None:
                    owner.return_artifacts[event.tool_call_id] = item.artifact
                continue
        if isinstance(event, MessageAppended) and event.tool_calls:
            for call in event.tool_calls:
                pending[call.id] = item
        if isinstance(event, TodosUpdated) and item.live:
            item.todo_changes = _todo_changes(todos, event)
            todos = {t.id: t.status for t in event.todos}
        items.append(item)
    children = [i for i in sessions if i.parent is not None and i.parent.session_id == session_id]
    return Timeline(info, items, children, calls, artifacts, summaries)


def _todo_changes(before: dict[str, str], event: TodosUpdated) -> list[tuple[str, str, str]]:
    changes: list[tuple[str, str, str]] = [
        (before.get(t.id, "new"), t.status, t.content) for t in event.todos if before.get(t.id) != t.status
    ]
    now = {t.id for t in event.todos}
    changes += [(status, "dropped", key) for key, status in before.items() if key not in now]
    return changes


def events_data(store: Store, session_id: str) -> list[dict[str, Any]]:
    """``/api/sessions/<id>/events``: every event as ``turnlog log --json`` prints it."""
    store.require_session(session_id)
    with store.reading():
        records = store.read_session(session_id)
        live = live_marks(store, session_id, records)
    return [{**r.to_dict(), "live": alive} for r, alive in zip(records, live, strict=True)]


# --- one model call ------------------------------------------------------------------------------


@dataclass
class CallView:
    """One replayed model call: the messages it was sent and what it was billed."""

    call: ModelCall
    context: BuiltContext | None
    """The messages sent; None when a recorded manifest cannot be rebuilt exactly (its table is
    then all there is)."""
    estimate: CallEstimate | None
    spend: CallSpend | None
    calls: int
    """How many calls the session has (for the previous / next links)."""
    summaries: dict[str, SummaryInfo]
    """The summaries the context shows, by event id."""

    @property
    def messages(self) -> list[ContextMessage]:
        return self.context.messages if self.context is not None else []

    def to_dict(self) -> dict[str, Any]:
        data = self.call.to_dict()
        data["messages"] = None
        if self.context is not None:
            data["messages"] = [
                {
                    "role": m.role,
                    "content": m.content,
                    "tokens": m.tokens,
                    "mode": m.mode,
                    "category": m.category,
                    "event_ids": list(m.event_ids),
                    "name": m.name,
                    "tool_calls": [c.model_dump() for c in m.tool_calls],
                    "tool_call_id": m.tool_call_id,
                    "is_error": m.is_error,
                }
                for m in self.context.messages
            ]
            data["omitted_messages"] = self.context.omitted_messages
            data["omitted_tokens"] = self.context.omitted_tokens
        data["billed"] = (
            {"input": self.estimate.billed_input, "output": self.estimate.billed_output}
            if self.estimate is not None and self.estimate.billed_input is not None
            else None
        )
        data["estimated_input"] = self.estimate.estimated_input if self.estimate is not None else None
        data["estimate_exact"] = self.estimate.exact if self.estimate is not None else None
        data["cost"] = self.spend.cost if self.spend is not None else None
        data["billed_cost"] = self.spend.billed_cost if self.spend is not None else None
        return data


class UnknownCallError(LookupError):
    """A session has no model call of that number."""


def call_view(store: Store, session_id: str, number: int) -> CallView:
    """Model call ``number`` of the session: its context (from the recorded manifest when there is
    one, else rebuilt with :data:`REPLAY_POLICY`), what changed since the call before, and its billed
    and estimated usage."""
    store.require_session(session_id)
    with store.reading():
        estimates, _ = session_estimates(store, session_id)
        found = replay(store, session_id, REPLAY_POLICY, only=number) if number >= 1 else []
        if not found:
            raise UnknownCallError(
                f"{session_id} has {len(estimates)} model calls; there is no call {number}"
            )
        call = found[0]
        context = sent_context(store, call)
        estimate = next((e for e in estimates if e.number == number), None)
        spend = None
        if estimate is not None and estimate.billed_input is not None:
            spend = next((s for s in call_spend(store, session_id) if s.position == estimate.position), None)
        summaries = {s.event_id: s for s in list_summaries(store, session_id)}
    return CallView(call, context, estimate, spend, len(estimates), summaries)


# --- spend ---------------------------------------------------------------------------------------


@dataclass
class Spend:
    """Billed calls (with turnlog's estimate of each prompt) and the same per day."""

    calls: list[CallSpend]
    days: list[DaySpend]

    @property
    def totals(self) -> dict[str, Any]:
        priced = [c.cost for c in self.calls]
        billed = [c.billed_cost for c in self.calls if c.billed_cost is not None]
        estimates = [c.estimated_input for c in self.calls]
        return {
            "calls": sum(c.calls for c in self.calls),
            "input": sum(c.input for c in self.calls),
            "output": sum(c.output for c in self.calls),
            "cache_read": sum(c.cache_read for c in self.calls),
            "estimated_input": None if None in estimates else sum(e or 0 for e in estimates),
            "cost": None if None in priced else sum(c or 0.0 for c in priced),
            "billed_cost": sum(billed) if billed else None,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "totals": self.totals,
            "calls": [asdict(c) for c in self.calls],
            "days": [asdict(d) for d in self.days],
        }


def spend(store: Store, session_id: str | None = None) -> Spend:
    """The billed calls of one session (or of the whole store), with estimates, and per day."""
    calls = call_spend(store, session_id, estimates=True)
    return Spend(calls, spend_per_day(calls))


# --- artifacts -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArtifactView:
    info: ArtifactInfo
    text: str


def artifact_view(store: Store, session_id: str, artifact_id: str) -> ArtifactView:
    """The full content of an artifact the session wrote (or a tool output it kept whole)."""
    infos = [a for a in list_artifacts(store, session_id) if a.artifact_id == artifact_id]
    if not infos:
        raise UnknownArtifactError(f"session {session_id!r} has no artifact {artifact_id!r}")
    info = infos[-1]
    page = read_artifact(store, info.artifact_id, 0, limit=max(1, info.lines))
    return ArtifactView(info, page.text)
