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

For the session's stored policy the fold is materialized (projections.stable_cuts): a build reads
its cut. Any other policy's fold is remembered per store object, policy and session, and resumed
from the last call it reached: a warm build folds only the calls made since."""

from __future__ import annotations

import bisect
import contextlib
import threading
from dataclasses import dataclass, field

from turnlog.projections.context_fold import calibrated, call_points_on, fold_key, step
from turnlog.projections.context_types import BuiltContext, ContextBudgetError, ContextPolicy, StableCut
from turnlog.projections.registry import materializer
from turnlog.projections.stable_cuts import stored_cuts
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


def stable_cut(
    store: Store, session_id: str, policy: ContextPolicy, at: int, model: str | None = None
) -> StableCut:
    """The cut after the session's last call at or before position ``at`` (the start when none);
    ``model``: the model a calibrated policy is calibrated for."""
    fold = _fold_for(store, session_id, policy, model)
    with fold.lock:
        return _cut_at(store, session_id, policy, model, fold, at)


def _cut_at(
    store: Store, session_id: str, policy: ContextPolicy, model: str | None, fold: _Fold, at: int
) -> StableCut:
    _advance(store, session_id, policy, model, fold, at)
    i = bisect.bisect_right(fold.points, at)
    return fold.cuts[i - 1] if i else StableCut()


def build_stable(
    store: Store,
    session_id: str,
    policy: ContextPolicy,
    at: int,
    head_version: int,
    *,
    model: str | None = None,
    materialized: bool = True,
) -> BuiltContext:
    """The cache-stable context as of ``at``: from the cut of the last call at or before it, moved
    if the context from there does not fit (as the fold moves it at a call). The session's stored
    policy's cuts are read from their projection (projections.stable_cuts); any other policy's are
    folded here (and all are with ``materialized=False``: the tests compare the two).

    A calibrated policy (``calibrate``, for ``model``) is folded with the budget calibrated as of
    each call: the cut stays while the context from it fits that call's calibrated budget, and
    moves to ``refill_to`` of it, so what is sent stays within the budget in the model's tokens."""
    stored = stored_cuts(store, session_id, policy, at) if materialized else None
    if stored is not None:
        return step(store, session_id, policy, at, head_version, stored.before, {}, stored.previous)[1]
    fold = _fold_for(store, session_id, policy, model)
    with fold.lock:
        before = _cut_at(store, session_id, policy, model, fold, at)
        # The call before this one, if the cut has not moved since: the end of what it sent is
        # marked too (a cache lookup walks back a limited number of blocks from a breakpoint).
        j = bisect.bisect_left(fold.points, at) - 1
        previous = fold.heads[j] if j >= 0 else None
        if j >= 0 and fold.cuts[j] != before:
            previous = None
        shown = calibrated(store, session_id, policy, at, model)
        return step(store, session_id, shown, at, head_version, before, fold.events, previous)[1]


def call_points(store: Store, session_id: str, after: int, through: int) -> list[tuple[int, int]]:
    """The session's model calls in (``after``, ``through``]: (position, head version) of the
    position just before each assistant message, ascending; none before the session's second
    version (an answer that opens the session was sent nothing of it)."""
    materializer(store).catch_up()
    with store.reading() as conn:
        return call_points_on(conn, session_id, after, through)


def _fold_for(store: Store, session_id: str, policy: ContextPolicy, model: str | None) -> _Fold:
    # The format changes the rendering, never the cut: one fold for all formats.
    key = (session_id, fold_key(policy) + (f" for {model}" if policy.calibrate else ""))
    found = _FOLDS.get(store, key)
    return found if found is not None else _FOLDS.put(store, key, _Fold())


def _advance(
    store: Store, session_id: str, policy: ContextPolicy, model: str | None, fold: _Fold, at: int
) -> None:
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
            shown = calibrated(store, session_id, policy, position, model)
            cut = step(store, session_id, shown, position, head, cut, fold.events)[0]
        if cut.cut != before.cut:
            retained = {v: e for v, e in fold.events.items() if v >= cut.cut}
            fold.events.clear()
            fold.events.update(retained)
        fold.points.append(position)
        fold.heads.append(head)
        fold.cuts.append(cut)
    fold.through = at if fold.points and fold.points[-1] == at else at - 1


__all__ = ["build_stable", "call_points", "stable_cut"]
