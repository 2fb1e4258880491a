"""The prompt cache in the audit: per session, run or model, the input tokens the provider billed as
cache reads and cache writes (the ledger's agent calls) beside turnlog's prediction of the share a
cache can reuse (from the recorded manifests: the leading run of entries each context shares with
the session's previous one), and the money the cache saved at the model's prices (what the calls
would have cost uncached, less what they cost)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from turnlog.projections.prices import CallTokens, Prices, load_prices
from turnlog.store import ContextBuilt, ManifestEntry, Store, StoreError
from turnlog.store.log_ops import records_between

CacheGrouping = Literal["session", "run", "model"]

_COLUMNS: dict[str, str] = {"session": "session_id", "run": "run_id", "model": "model"}


@dataclass(frozen=True, slots=True)
class CacheRow:
    """The prompt cache of one group of model calls."""

    key: str | None
    """The session, run or model; None for "no run" or "no model" (and for totals)."""
    calls: int
    """The agent's billed model calls."""
    input: int
    """Billed prompt tokens, cached ones included."""
    cache_read: int
    """Prompt tokens billed as read from the provider's cache."""
    cache_write: int
    """Prompt tokens billed as written to the provider's cache."""
    billed_share: float | None
    """``cache_read / input``: the share of the billed input read from the cache (None: no input)."""
    contexts: int
    """Recorded manifests (``context_built``) of the group."""
    sent: int
    """Their tokens."""
    predicted: int
    """Tokens of each manifest's leading run of entries that the session's previous manifest had too:
    what a prompt cache can reuse, as turnlog predicts it."""
    predicted_share: float | None
    """``predicted / sent`` (None: no manifest)."""
    saved: float | None
    """USD the cache saved: the calls priced without cache reads and writes, less as billed (a
    write premium can make it negative); None when a model of the group has no price."""


@dataclass(frozen=True, slots=True)
class CacheAudit:
    """The prompt cache of a store's (or one session's) calls, grouped one way."""

    by: CacheGrouping
    """How the rows are grouped."""
    rows: tuple[CacheRow, ...]
    """One per group, ordered by key (None last)."""
    totals: CacheRow
    """Every column over all the groups (key None)."""
    cache_stable: int
    """Manifests built under a cache-stable policy."""


def cache_audit(
    store: Store, session_id: str | None = None, by: CacheGrouping = "session", prices: Prices | None = None
) -> CacheAudit:
    """The prompt cache of the store's (or one session's) agent calls, one row per group and the
    totals. Reads the ledger's calls and the ``context_built`` events."""
    if by not in _COLUMNS:
        raise StoreError(f"cannot group the cache audit by {by!r}; use session, run or model")
    table = prices if prices is not None else load_prices()
    if session_id is not None:
        store.require_session(session_id)
    from turnlog.projections.registry import materializer  # the registry imports the projections

    materializer(store).catch_up()
    where, params = ("AND session_id = ?", (session_id,)) if session_id is not None else ("", ())
    billed: dict[str | None, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    calls: dict[tuple[str | None, str], list[CallTokens]] = defaultdict(list)
    manifests: dict[str, list[ContextBuilt]] = defaultdict(list)
    head = store.head_position()
    with store.reading() as conn:
        column = _COLUMNS[by]
        for key, model, at, covered, input, output, cache_read, cache_write in conn.execute(
            f"SELECT {column}, model, recorded_at, calls, input, output, cache_read, cache_write "
            f"FROM ledger_calls WHERE category = 'agent' {where} ORDER BY session_id, position",
            params,
        ):
            group = key or None
            sums = billed[group]
            sums[0] += covered
            sums[1] += max(input, cache_read + cache_write)
            sums[2] += cache_read
            sums[3] += cache_write
            calls[group, model].append(CallTokens(at, input, output, cache_read, cache_write, covered))
        for record in records_between(conn, 0, head, ("context_built",)):
            if session_id is None or record.session_id == session_id:
                event = record.event
                assert isinstance(event, ContextBuilt)
                manifests[record.session_id].append(event)
    sent: dict[str | None, list[int]] = defaultdict(lambda: [0, 0, 0])
    stable = sum(bool(e.policy.get("cache_stable")) for built in manifests.values() for e in built)
    for sid, built in manifests.items():
        previous: tuple[ManifestEntry, ...] = ()
        for event in built:
            group = {"session": sid, "run": event.run_id, "model": event.model}[by]
            sums = sent[group]
            sums[0] += 1
            sums[1] += event.total_tokens
            sums[2] += shared_tokens(previous, event.entries)
            previous = event.entries
    saved: dict[str | None, float | None] = {}
    for (group, model), group_calls in calls.items():
        uncached = [
            CallTokens(c.at, max(c.input, c.cache_read + c.cache_write), c.output, 0, 0, c.calls)
            for c in group_calls
        ]
        actual, without = table.cost(model, group_calls), table.cost(model, uncached)
        if actual is None or without is None:
            saved[group] = None  # unknown, never 0
        elif saved.get(group, 0.0) is not None:
            saved[group] = (saved.get(group) or 0.0) + without - actual
    keys = sorted(set(billed) | set(sent), key=lambda k: (k is None, k or ""))
    rows = [_row(k, billed.get(k), sent.get(k), saved.get(k, 0.0)) for k in keys]
    unpriced = any(saved.get(k, 0.0) is None for k in keys)
    total_saved = None if unpriced else sum(s or 0.0 for s in saved.values())
    totals = _row(
        None,
        [sum(v[i] for v in billed.values()) for i in range(4)],
        [sum(v[i] for v in sent.values()) for i in range(3)],
        total_saved,
    )
    return CacheAudit(by, tuple(rows), totals, stable)


def shared_tokens(before: tuple[ManifestEntry, ...], after: tuple[ManifestEntry, ...]) -> int:
    """Tokens of the leading entries of ``after`` that ``before`` has in the same places (the same
    events, shown the same way)."""
    tokens = 0
    for old, new in zip(before, after, strict=False):
        if old != new:
            break
        tokens += new.tokens
    return tokens


def _row(key: str | None, billed: list[int] | None, sent: list[int] | None, saved: float | None) -> CacheRow:
    calls, input, cache_read, cache_write = billed or (0, 0, 0, 0)
    contexts, tokens, predicted = sent or (0, 0, 0)
    return CacheRow(
        key=key,
        calls=calls,
        input=input,
        cache_read=cache_read,
        cache_write=cache_write,
        billed_share=cache_read / input if input else None,
        contexts=contexts,
        sent=tokens,
        predicted=predicted,
        predicted_share=predicted / tokens if tokens else None,
        saved=saved if calls else None,
    )


__all__ = ["CacheAudit", "CacheGrouping", "CacheRow", "cache_audit", "shared_tokens"]
