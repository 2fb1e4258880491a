"""What the adapter benches share: writes timed interleaved with the peer's (so a noisy machine
slows both alike), reads timed best-of-N in alternation, and one row shape for every adapter.

A row: ``backend``, ``side`` (``peer`` or ``turnlog``), ``items``, ``durability`` (what the side
ran at), ``writes_per_s``, ``full_read_ms``, ``bounded_read_ms``, ``bounded`` (what the bounded
read is), ``trimmed_read_ms`` (peer only: its full read plus its own trimming to the same bound).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

CHUNK = 50
"""Items written by one side before the other side writes its next chunk."""


def interleaved_writes(writers: Sequence[Callable[[int, int], None]], n: int, start: int = 0) -> list[float]:
    """Call each ``writer(lo, hi)`` (write items lo..hi-1) chunk by chunk, alternating the sides;
    return each side's items per second over items ``start`` to ``n``."""
    spent = [0.0] * len(writers)
    for lo in range(start, n, CHUNK):
        hi = min(n, lo + CHUNK)
        order = range(len(writers)) if (lo // CHUNK) % 2 == 0 else reversed(range(len(writers)))
        for i in order:
            began = time.perf_counter()
            writers[i](lo, hi)
            spent[i] += time.perf_counter() - began
    return [(n - start) / s if s else float("nan") for s in spent]


def best_of(readers: Sequence[Callable[[], Any]], repeat: int = 5) -> list[float]:
    """Each reader's best time in milliseconds over ``repeat`` alternating rounds."""
    best = [float("inf")] * len(readers)
    for _ in range(repeat):
        for i, read in enumerate(readers):
            began = time.perf_counter()
            read()
            best[i] = min(best[i], time.perf_counter() - began)
    return [round(b * 1000, 2) for b in best]


def row(backend: str, side: str, items: int, durability: str, **figures: Any) -> dict[str, Any]:
    """One row of the section (figures rounded as the other benches print them)."""
    out: dict[str, Any] = {"backend": backend, "side": side, "items": items, "durability": durability}
    for key, value in figures.items():
        out[key] = round(value, 1) if key == "writes_per_s" and isinstance(value, float) else value
    return out
