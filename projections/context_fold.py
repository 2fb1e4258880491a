"""One step of the cache-stable fold (projections.context_cache): at a model call, keep the cut if
the context from it fits the budget, else move it once to where ``refill_to`` of the budget would
start. Shared by the on-the-fly fold and the materialized one (projections.stable_cuts), so both
give the same cuts, and the same bytes, by construction."""

from __future__ import annotations

from typing import Any

from turnlog.projections.context_builder import ContextBuilder
from turnlog.projections.context_types import (
    BuiltContext,
    CacheOverflow,
    ContextBudgetError,
    ContextPolicy,
    StableCut,
)
from turnlog.store import RecordedEvent, Store, StoreError

CALL_POINTS = (
    "SELECT position, version FROM ctx_messages WHERE session_id = ? AND role = 'assistant' "
    "AND position > ? AND position <= ? ORDER BY version"
)


REFILL_STEP = 0.05
"""When ``refill_to`` of the budget cannot hold what is always kept, the share is raised by this
much until it can."""


def call_points_on(conn: Any, session_id: str, after: int, through: int) -> list[tuple[int, int]]:
    """The session's model calls in (``after``, ``through``] as the context index on ``conn`` has
    them: (position, head version) of the position just before each assistant message, ascending;
    none before the session's second version (an answer that opens the session was sent nothing
    of it)."""
    rows = conn.execute(CALL_POINTS, (session_id, after + 1, through + 1)).fetchall()
    return [(int(p) - 1, int(v) - 1) for p, v in rows if int(v) > 1]


def step(
    store: Store,
    session_id: str,
    policy: ContextPolicy,
    at: int,
    head: int,
    cut: StableCut,
    events: dict[int, RecordedEvent],
    previous: int | None = None,
) -> tuple[StableCut, BuiltContext]:
    """One step of the fold at ``at``: the cut kept if the context from it fits, else moved; and
    the context built from it (``previous``: the head version of the call before, when the cut has
    not moved since)."""
    try:
        return cut, _build(store, session_id, policy, at, head, cut, events, previous)
    except CacheOverflow:
        pass
    moved = StableCut(_refill_start(store, session_id, policy, at, head, policy.refill_to), at, head)
    try:
        return moved, _build(store, session_id, policy, at, head, moved, events)
    except CacheOverflow:
        # What fills refill_to of the budget did not fit the whole of it as a cache-stable build
        # shows it (its index is cut by another rule): start where the default policy would.
        moved = StableCut(_refill_start(store, session_id, policy, at, head, 1.0), at, head)
    try:
        return moved, _build(store, session_id, policy, at, head, moved, events)
    except CacheOverflow:  # pragma: no cover - the default build fitted from there
        raise ContextBudgetError(
            f"session {session_id!r} at position {at}: no cache-stable context fits the budget of "
            f"{policy.budget:,}; raise the budget"
        ) from None


def calibrated(
    store: Store, session_id: str, policy: ContextPolicy, at: int, model: str | None
) -> ContextPolicy:
    """``policy`` with its budget divided by the model's calibration ratio as of ``at`` (unchanged
    when the policy is not calibrated, or the session's usage so far shows no ratio)."""
    if not policy.calibrate:
        return policy
    if model is None:
        raise StoreError("a calibrated budget needs the model the context is for (model=...)")
    from turnlog.projections.estimates import calibration, session_estimates

    calls, runs = session_estimates(store, session_id, at=at)
    ratio = calibration(calls, runs).get(model)
    if not ratio:
        return policy
    return policy.model_copy(update={"budget": max(1, int(policy.budget / ratio))})


def fold_key(policy: ContextPolicy) -> str:
    """What the cut depends on of a policy: all of it but the format (which changes the rendering,
    never the cut)."""
    return policy.model_copy(update={"format": "openai"}).model_dump_json()


def _build(
    store: Store,
    session_id: str,
    policy: ContextPolicy,
    at: int,
    head: int,
    cut: StableCut,
    events: dict[int, RecordedEvent],
    previous: int | None = None,
) -> BuiltContext:
    builder = ContextBuilder(store, session_id, policy, at, head)
    builder.events = events  # read-only use: a build only adds the events it loads
    builder.stable = cut
    builder.previous_head = previous
    return builder.build()


def _refill_start(
    store: Store, session_id: str, policy: ContextPolicy, at: int, head: int, share: float
) -> int:
    """Where the history of a default build with ``share`` of the budget starts (whole units: no
    message squeezed in at its oldest end; open runs capped as they will stay)."""
    refill = policy.model_copy(
        update={
            "budget": max(1, int(policy.budget * share)),
            "cache_stable": False,
            "fill": False,
            "cap_open_run": True,
        }
    )
    builder = ContextBuilder(store, session_id, refill, at, head)
    try:
        builder.build()
    except ContextBudgetError:
        if share >= 1:
            raise
        # What is always kept (system, first request, pins) needs more than ``share``: the least
        # share above it, so the context is left as small as it can be rather than full (which
        # would move the cut again at the next call).
        return _refill_start(store, session_id, policy, at, head, min(1.0, share + REFILL_STEP))
    return builder.start


__all__ = ["CALL_POINTS", "calibrated", "call_points_on", "fold_key", "step"]
