"""TurnlogSaver against LangGraph's own SqliteSaver: ``put`` throughput (one checkpoint and one
``put_writes`` per step, the per-step pattern of a graph), the latest checkpoint's ``get_tuple``
latency, a checkpoint by id, and SqliteSaver's full read (``list()`` of the thread) at N steps.

Not wired into ``scripts/bench.py`` yet. Run: ``python -m scripts.benchlib.integration_langgraph [N]``
from the repository root, or call :func:`bench_langgraph` (returns one dict per backend). Both are at
equal durability: SqliteSaver's connection in WAL with synchronous=FULL, turnlog at its default (WAL,
synchronous=FULL). The checkpoints hold a small state (no ``messages`` channel), so both measure the
checkpoint path itself, not the serialization of a growing message list, which both pay alike.
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _checkpoint(step: int) -> Any:
    from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

    checkpoint = create_checkpoint(empty_checkpoint(), None, step)
    checkpoint["channel_values"] = {"step": step, "note": f"step {step}: " + "x" * 200}
    checkpoint["channel_versions"] = {"step": f"{step:032}.0", "note": f"{step:032}.0"}
    return checkpoint


def _ms(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _measure(saver: Any, n: int, reopen: Any) -> dict[str, float]:
    config: Any = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
    thread: Any = {"configurable": {"thread_id": "bench"}}
    first = None
    start = time.perf_counter()
    for step in range(n):
        config = saver.put(config, _checkpoint(step), {"source": "loop", "step": step}, {})
        saver.put_writes(config, [("step", step + 1)], task_id=f"task-{step}")
        first = first or config
    puts = n / (time.perf_counter() - start)
    latest = saver.get_tuple(thread)
    assert latest is not None and latest.config == config  # the same answer from both, or no figure
    latest_ms = _ms(lambda: saver.get_tuple(thread), 20)
    by_id_ms = _ms(lambda: saver.get_tuple(first), 20)
    start = time.perf_counter()
    listed = list(saver.list(thread))
    newest = listed[0]  # the full read, trimmed to the newest
    full_ms = (time.perf_counter() - start) * 1000
    assert len(listed) == n and newest.config == config
    fresh = reopen()
    start = time.perf_counter()
    fresh.get_tuple(thread)
    cold_ms = (time.perf_counter() - start) * 1000
    return {
        "puts_per_s": round(puts, 1),
        "latest_get_ms": round(latest_ms, 3),
        "by_id_get_ms": round(by_id_ms, 3),
        "full_list_ms": round(full_ms, 1),
        "cold_latest_get_ms": round(cold_ms, 2),
    }


def bench_langgraph(n: int = 2000, workdir: Path | None = None) -> list[dict[str, Any]]:
    """Measure both backends at ``n`` steps, each in a fresh file under ``workdir`` (a temp dir)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from turnlog.integrations.langgraph import TurnlogSaver

    root = workdir or Path(tempfile.mkdtemp(prefix="bench-lg-"))
    rows: list[dict[str, Any]] = []
    connections: list[sqlite3.Connection] = []

    def sqlite_saver() -> Any:
        conn = sqlite3.connect(root / "langgraph.db", check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        connections.append(conn)
        return SqliteSaver(conn)

    rows.append({"backend": "SqliteSaver", "steps": n, **_measure(sqlite_saver(), n, sqlite_saver)})
    savers: list[Any] = []

    def turnlog_saver() -> Any:
        savers.append(TurnlogSaver(db=root / "turnlog.db"))
        return savers[-1]

    rows.append({"backend": "TurnlogSaver", "steps": n, **_measure(turnlog_saver(), n, turnlog_saver)})
    for conn in connections:
        conn.close()
    for saver in savers:
        saver.close()
    sqlite_row, turnlog_row = rows
    turnlog_row["put_ratio"] = round(turnlog_row["puts_per_s"] / sqlite_row["puts_per_s"], 2)
    turnlog_row["latest_vs_full_list"] = round(sqlite_row["full_list_ms"] / turnlog_row["latest_get_ms"], 1)
    return rows


if __name__ == "__main__":
    for row in bench_langgraph(int(sys.argv[1]) if len(sys.argv) > 1 else 2000):
        print(row)
