"""TurnlogSaver against LangGraph's own SqliteSaver: ``put`` throughput (one checkpoint and one
``put_writes`` per step, the pattern of a graph step; ``puts_per_s`` counts steps), the latest
checkpoint's ``get_tuple`` latency, a checkpoint by id, and the full read (``list()`` of the
thread, then its newest) at N steps.

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


class _Run:
    """One backend's thread: puts step by step, and the reads measured at the end."""

    def __init__(self, saver: Any, reopen: Any) -> None:
        self.saver, self.reopen = saver, reopen
        self.config: Any = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
        self.first: Any = None
        self.seconds = 0.0
        self.steps = 0

    def put(self, steps: range) -> None:
        start = time.perf_counter()
        for step in steps:
            self.config = self.saver.put(self.config, _checkpoint(step), {"source": "loop", "step": step}, {})
            self.saver.put_writes(self.config, [("step", step + 1)], task_id=f"task-{step}")
            self.first = self.first or self.config
        self.seconds += time.perf_counter() - start
        self.steps += len(steps)

    def reads(self) -> dict[str, float]:
        thread: Any = {"configurable": {"thread_id": "bench"}}
        latest = self.saver.get_tuple(thread)
        assert latest is not None and latest.config == self.config  # the same answer from both, or no figure
        latest_ms = _ms(lambda: self.saver.get_tuple(thread), 20)
        by_id_ms = _ms(lambda: self.saver.get_tuple(self.first), 20)
        start = time.perf_counter()
        listed = list(self.saver.list(thread))
        newest = listed[0]  # the full read, trimmed to the newest
        full_ms = (time.perf_counter() - start) * 1000
        assert len(listed) == self.steps and newest.config == self.config
        fresh = self.reopen()
        start = time.perf_counter()
        fresh.get_tuple(thread)
        cold_ms = (time.perf_counter() - start) * 1000
        return {
            "puts_per_s": round(self.steps / self.seconds, 1),
            "latest_get_ms": round(latest_ms, 3),
            "by_id_get_ms": round(by_id_ms, 3),
            "full_list_ms": round(full_ms, 1),
            "cold_latest_get_ms": round(cold_ms, 2),
        }


def bench_langgraph(n: int = 2000, workdir: Path | None = None) -> list[dict[str, Any]]:
    """Measure both backends at ``n`` steps, each in a fresh file under ``workdir`` (a temp dir).
    The puts alternate between the two in rounds of 100 steps, so a machine whose disk is busier
    in one phase than in another does not favour either."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from turnlog.integrations.langgraph import TurnlogSaver

    root = workdir or Path(tempfile.mkdtemp(prefix="bench-lg-"))
    connections: list[sqlite3.Connection] = []
    savers: list[Any] = []

    def sqlite_saver() -> Any:
        conn = sqlite3.connect(root / "langgraph.db", check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        connections.append(conn)
        return SqliteSaver(conn)

    def turnlog_saver() -> Any:
        savers.append(TurnlogSaver(db=root / "turnlog.db"))
        return savers[-1]

    runs = {
        "SqliteSaver": _Run(sqlite_saver(), sqlite_saver),
        "TurnlogSaver": _Run(turnlog_saver(), turnlog_saver),
    }
    for start in range(0, n, 100):
        for run in runs.values():
            run.put(range(start, min(n, start + 100)))
    rows = [{"backend": name, "steps": n, **run.reads()} for name, run in runs.items()]
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
