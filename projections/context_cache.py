"""Cache-stable contexts: where the history of a ``ContextPolicy(cache_stable=True)`` build starts.

The start (the cut) is a fold over the session's model calls, as replay defines them (the position
before each assistant message): it begins at the session's first version; at each call, if the
context from the cut (everything from it, capped as the policy caps, with the summaries, index and
condensed views of the cut's last move) fits the budget, it stays; otherwise it moves, once, to
where a build with ``refill_to`` of the budget would start, and stays there until the budget is
exceeded again. So each call's context starts with the previous call's context, byte for byte,
except at a move (or where a pin, an unpin, a rewind or a policy change says otherwise), and the
cut is a pure function of the log and the policy: a build as of any position, a replay and a second
build give the same bytes. A build at a position between calls uses the cut of the last call before
it, checked (and moved if need be) the same way, so that no context exceeds its budget.

The fold is remembered per store object, policy and session, and resumed from the last call it
reached: a warm build folds only the calls made since."""

from __future__ import annotations

import bisect
import contextlib
import threading
from dataclasses import dataclass, field

from turnlog.projections.context_builder import ContextBuilder
from turnlog.projections.context_types import (
    BuiltContext,
    CacheOverflow,
    ContextBudgetError,
    ContextPolicy,
    StableCut,
)
from turnlog.projections.registry import materializer
from turnlog.projections.store_cache import StoreCache
from turnlog.store import RecordedEvent, Store


@dataclass
class _Fold:
    """The fold of one session under one policy, as far as it went."""

    through: int = 0
    """The log position up to which the session's calls were folded."""
    points: list[int] = field(default_factory=list)
    heads: list[int] = field(default_factory=list)
    """The session's head version at each of them."""
    """The positions of the calls folded (the position before each assistant message), ascending."""
    cuts: list[StableCut] = field(default_factory=list)
    """The cut after each of them."""
    events: dict[int, RecordedEvent] = field(default_factory=dict)
    """The session's events its builds read, by version (a version's event never changes): each is
    parsed once for the whole fold rather than once a build. Those below the cut are dropped when
    it moves."""
    lock: threading.Lock = field(default_factory=threading.Lock)


_FOLDS: StoreCache[tuple[str, str], _Fold] = StoreCache(64)


def stable_cut(store: Store, session_id: str, policy: ContextPolicy, at: int) -> StableCut:
    """The cut after the session's last call at or before position ``at`` (the start when none)."""
    fold = _fold_for(store, session_id, policy)
    with fold.lock:
        return _cut_at(store, session_id, policy, fold, at)


def _cut_at(store: Store, session_id: str, policy: ContextPolicy, fold: _Fold, at: int) -> StableCut:
    _advance(store, session_id, policy, fold, at)
    i = bisect.bisect_right(fold.points, at)
    return fold.cuts[i - 1] if i else StableCut()


def build_stable(
    store: Store, session_id: str, policy: ContextPolicy, at: int, head_version: int
) -> BuiltContext:
    """The cache-stable context as of ``at``: from the cut of the last call at or before it, moved
    if the context from there does not fit (as the fold moves it at a call)."""
    fold = _fold_for(store, session_id, policy)
    with fold.lock:
        before = _cut_at(store, session_id, policy, fold, at)
        # The call before this one, if the cut has not moved since: the end of what it sent is
        # marked too (a cache lookup walks back a limited number of blocks from a breakpoint).
        j = bisect.bisect_left(fold.points, at) - 1
        previous = fold.heads[j] if j >= 0 else None
        if j >= 0 and fold.cuts[j] != before:
            previous = None
        return _step(store, session_id, policy, at, head_version, before, fold.events, previous)[1]


def call_points(store: Store, session_id: str, after: int, through: int) -> list[tuple[int, int]]:
    """The session's model calls in (``after``, ``through``]: (position, head version) of the
    position just before each assistant message, ascending; none before the session's second
    version (an answer that opens the session was sent nothing of it)."""
    materializer(store).catch_up()
    with store.reading() as conn:
        rows = conn.execute(
            "SELECT position, version FROM ctx_messages WHERE session_id = ? AND role = 'assistant' "
            "AND position > ? AND position <= ? ORDER BY version",
            (session_id, after + 1, through + 1),
        ).fetchall()
    return [(int(p) - 1, int(v) - 1) for p, v in rows if int(v) > 1]


def _fold_for(store: Store, session_id: str, policy: ContextPolicy) -> _Fold:
    # The format changes the rendering, never the cut: one fold for all formats.
    key = (session_id, policy.model_copy(update={"format": "openai"}).model_dump_json())
    found = _FOLDS.get(store, key)
    return found if found is not None else _FOLDS.put(store, key, _Fold())


def _advance(store: Store, session_id: str, policy: ContextPolicy, fold: _Fold, at: int) -> None:
    """Fold the calls up to ``at`` not folded yet. The log is append-only, so the calls before a
    position never change once it is folded; the position ``at`` itself is a call only if the
    next event is an assistant message, which may not be appended yet: it is looked at again."""
    if at <= fold.through:
        return
    cut = fold.cuts[-1] if fold.cuts else StableCut()
    for position, head in call_points(store, session_id, fold.through, at):
        before = cut
        # A call no context fitted (its kept messages alone are over the budget) leaves the cut.
        with contextlib.suppress(ContextBudgetError):
            cut = _step(store, session_id, policy, position, head, cut, fold.events)[0]
        if cut.cut != before.cut:
            retained = {v: e for v, e in fold.events.items() if v >= cut.cut}
            fold.events.clear()
            fold.events.update(retained)
        fold.points.append(position)
        fold.heads.append(head)
        fold.cuts.append(cut)
    fold.through = at if fold.points and fold.points[-1] == at else at - 1


def _step(
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
        return _refill_start(store, session_id, policy, at, head, 1.0)
    return builder.start


__all__ = ["build_stable", "call_points", "stable_cut"]
