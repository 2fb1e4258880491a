"""TurnlogSession against the SDK's own SQLiteSession: ``add_items`` throughput (one item per call,
the per-turn pattern), a full ``get_items()`` and a bounded ``get_items(limit=50)`` at N items.

Not wired into ``scripts/bench.py`` yet. Run: ``python -m scripts.benchlib.integration_openai_agents
[N]`` from the repository root, or call :func:`bench_openai_agents` (returns one dict per backend).
Both backends are at their default durability (SQLite WAL with synchronous=FULL for SQLiteSession;
turnlog's own default for its store).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _item(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"message {i}: " + "x" * 200}


async def _measure(session: Any, n: int) -> dict[str, float]:
    start = time.perf_counter()
    for i in range(n):
        await session.add_items([_item(i)])
    writes = n / (time.perf_counter() - start)
    start = time.perf_counter()
    full = await session.get_items()
    full_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    bounded = await session.get_items(limit=50)
    bounded_ms = (time.perf_counter() - start) * 1000
    assert len(full) == n and bounded == full[-50:]  # the same answer from both, or no figure
    return {
        "writes_per_s": round(writes, 1),
        "full_read_ms": round(full_ms, 2),
        "limit50_read_ms": round(bounded_ms, 2),
    }


def bench_openai_agents(n: int = 2000, workdir: Path | None = None) -> list[dict[str, Any]]:
    """Measure both backends at ``n`` items, each in a fresh file under ``workdir`` (a temp dir)."""
    from agents import SQLiteSession

    from turnlog.integrations.openai_agents import TurnlogSession

    root = workdir or Path(tempfile.mkdtemp(prefix="bench-oai-"))
    rows: list[dict[str, Any]] = []
    sqlite = SQLiteSession("bench", str(root / "agent.db"))
    rows.append({"backend": "SQLiteSession", "items": n, **asyncio.run(_measure(sqlite, n))})
    sqlite.close()
    turnlog = TurnlogSession("bench", db=root / "turnlog.db")
    rows.append({"backend": "TurnlogSession", "items": n, **asyncio.run(_measure(turnlog, n))})
    turnlog.close()
    return rows


if __name__ == "__main__":
    for row in bench_openai_agents(int(sys.argv[1]) if len(sys.argv) > 1 else 2000):
        print(row)
