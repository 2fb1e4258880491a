"""Spend per billed call: each model call the ledger holds (``ledger_calls``) with its tokens, the cost
its source recorded and turnlog's price, in log order; and the same summed per day. The rows behind
``turnlog audit --plot``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from turnlog.projections.prices import CallTokens, Prices, load_prices
from turnlog.store import Store


@dataclass(frozen=True, slots=True)
class CallSpend:
    """One billed call (or a run's totals, ``calls`` > 1): tokens, billed and priced cost."""

    session_id: str
    """The session it was recorded in."""
    position: int
    """The log position of the event that recorded it."""
    recorded_at: str
    """When it was recorded (ISO 8601, UTC)."""
    run_id: str | None
    """Its run, None for none."""
    model: str
    """The model billed (a summarizer's name when it names none)."""
    category: str
    """``agent`` (``usage_recorded``) or ``summarization`` (turnlog's summarizers)."""
    calls: int
    """Model calls covered: 1, or a run's count when the source reports only totals."""
    input: int
    """Billed prompt tokens, cached ones included."""
    output: int
    """Billed completion tokens, reasoning included."""
    cache_read: int
    """Prompt tokens read from the provider's cache."""
    cache_write: int
    """Prompt tokens written to the provider's cache."""
    billed_cost: float | None
    """USD its source recorded (``cost_usd``); None when it recorded none."""
    cost: float | None
    """USD as turnlog prices it; None when its model has no price (unknown, never 0)."""
    estimated_input: int | None = None
    """turnlog's own estimate of the prompt it was sent; None until the per-call estimate fills it
    (the plot draws an estimated series as soon as any row has one)."""

    @property
    def day(self) -> str:
        """The UTC day it was recorded."""
        return self.recorded_at[:10]


@dataclass(frozen=True, slots=True)
class DaySpend:
    """The billed calls of one day, summed. A cost is None when one of the day's calls has none."""

    day: str
    """The UTC day."""
    calls: int
    """Model calls."""
    input: int
    """Billed prompt tokens, cached ones included."""
    output: int
    """Billed completion tokens."""
    billed_cost: float | None
    """USD the sources recorded, summed over the calls that carry one; None when none does."""
    cost: float | None
    """USD as turnlog prices them; None when a call's model has no price."""
    estimated_input: int | None
    """The per-call estimates summed; None unless every call of the day has one."""


def call_spend(
    store: Store, session_id: str | None = None, prices: Prices | None = None, *, estimates: bool = False
) -> list[CallSpend]:
    """The billed calls of one session (or of the store), in log order, each priced on its own
    (``prices`` defaults to genai-prices' data); with ``estimates``, each agent call's
    ``estimated_input`` filled in (projections.estimates: a call's own estimate, or for a run's
    totals the sum of its calls')."""
    table = prices if prices is not None else load_prices()
    if session_id is not None:
        store.require_session(session_id)
    from turnlog.projections.registry import materializer  # the registry imports the ledger

    materializer(store).catch_up()
    where, params = ("WHERE session_id = ?", (session_id,)) if session_id is not None else ("", ())
    with store.reading() as conn:
        rows = conn.execute(
            "SELECT session_id, position, recorded_at, run_id, model, category, calls, input, output, "
            f"cache_read, cache_write, billed_cost FROM ledger_calls {where} ORDER BY position",
            params,
        ).fetchall()
    spent = []
    for sid, position, at, run, model, category, calls, input, output, read, write, billed in rows:
        cost = table.cost(model, [CallTokens(at, input, output, read, write, calls)])
        spent.append(
            CallSpend(
                sid, position, at, run or None, model, category, calls, input, output, read, write,
                billed, cost,
            )
        )  # fmt: skip
    return _with_estimates(store, spent, session_id) if estimates else spent


def _with_estimates(store: Store, spent: list[CallSpend], session_id: str | None) -> list[CallSpend]:
    from dataclasses import replace

    from turnlog.projections.estimates import store_estimates

    calls, _ = store_estimates(store, [session_id] if session_id is not None else None)
    by_position = {c.position: c.estimated_input for c in calls if c.billed_input is not None}
    by_run: dict[tuple[str, str | None], int] = {}
    for call in calls:
        if call.billed_input is None:  # billed only as its run's totals
            key = (call.session_id, call.run_id)
            by_run[key] = by_run.get(key, 0) + call.estimated_input
    out = []
    for row in spent:
        estimate = None
        if row.category == "agent":
            estimate = by_position.get(row.position)
            if estimate is None:  # a run's totals: the sum of its calls' estimates
                estimate = by_run.get((row.session_id, row.run_id))
        out.append(replace(row, estimated_input=estimate))
    return out


def spend_per_day(calls: Sequence[CallSpend]) -> list[DaySpend]:
    """Per-call rows summed per UTC day, oldest first."""
    days: dict[str, list[CallSpend]] = {}
    for call in calls:
        days.setdefault(call.day, []).append(call)
    return [_day(day, days[day]) for day in sorted(days)]


def _day(day: str, calls: list[CallSpend]) -> DaySpend:
    billed = [c.billed_cost for c in calls if c.billed_cost is not None]
    priced = [c.cost for c in calls]
    estimates = [c.estimated_input for c in calls]
    return DaySpend(
        day=day,
        calls=sum(c.calls for c in calls),
        input=sum(c.input for c in calls),
        output=sum(c.output for c in calls),
        billed_cost=sum(billed) if billed else None,
        cost=None if None in priced else sum(c or 0.0 for c in priced),
        estimated_input=None if None in estimates else sum(e or 0 for e in estimates),
    )


__all__ = ["CallSpend", "DaySpend", "call_spend", "spend_per_day"]
