"""TurnlogSaver against LangGraph's own SqliteSaver, in the same run: ``put`` throughput (one
checkpoint and one ``put_writes`` per step, the pattern of a graph step; a write is a step), the
full read (``list()`` of the thread, then its newest: the framework's own trimming) and the bounded
read (``get_tuple`` of the latest checkpoint) on both, plus a checkpoint by id and the latest
checkpoint from a freshly opened saver (logged, not in the table).

Both are at equal durability: SqliteSaver's connection in WAL with synchronous=FULL, turnlog at its
default (WAL, synchronous=FULL); the bench runs it at FULL only, since ``TurnlogSaver`` opened from a
path has no durability knob. The checkpoints hold a small state (no ``messages`` channel), so both
measure the checkpoint path itself, not the serialization of a growing message list, which both pay
alike. Run from the repository root:
``PYTHONPATH=.:scripts .venv/bin/python -m benchlib.integration_langgraph [N]``.
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib.integration_common import best_of, interleaved_writes, row

DURABILITY = "WAL, synchronous=FULL"
_THREAD: Any = {"configurable": {"thread_id": "bench"}}


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
        self.steps = 0

    def put(self, lo: int, hi: int) -> None:
        for step in range(lo, hi):
            self.config = self.saver.put(self.config, _checkpoint(step), {"source": "loop", "step": step}, {})
            self.saver.put_writes(self.config, [("step", step + 1)], task_id=f"task-{step}")
            self.first = self.first or self.config
        self.steps += hi - lo

    def full(self) -> Any:
        listed = list(self.saver.list(_THREAD))  # the full read
        return listed[0]  # trimmed to the newest

    def latest(self) -> Any:
        return self.saver.get_tuple(_THREAD)

    def check(self) -> None:
        """The same answer from both, or no figure."""
        latest = self.latest()
        assert latest is not None and latest.config == self.config
        listed = list(self.saver.list(_THREAD))
        assert len(listed) == self.steps and listed[0].config == self.config

    def extra(self) -> dict[str, float]:
        """A checkpoint by id, and the latest one from a freshly opened saver."""
        by_id_ms = _ms(lambda: self.saver.get_tuple(self.first), 20)
        fresh = self.reopen()
        start = time.perf_counter()
        fresh.get_tuple(_THREAD)
        cold_ms = (time.perf_counter() - start) * 1000
        return {"by_id_get_ms": round(by_id_ms, 3), "cold_latest_get_ms": round(cold_ms, 2)}


def bench_langgraph(n: int = 2000, workdir: Path | None = None) -> list[dict[str, Any]]:
    """Measure both backends at ``n`` steps, each in a fresh file under ``workdir`` (a temp dir)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from turnlog.integrations.langgraph import TurnlogSaver

    root = workdir or Path(tempfile.mkdtemp(prefix="bench-lg-"))
    root.mkdir(parents=True, exist_ok=True)
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

    peer, ours = _Run(sqlite_saver(), sqlite_saver), _Run(turnlog_saver(), turnlog_saver)
    try:
        peer_w, ours_w = interleaved_writes([peer.put, ours.put], n)
        peer.check()
        ours.check()
        peer_full, ours_full, peer_bounded, ours_bounded = best_of(
            [peer.full, ours.full, peer.latest, ours.latest]
        )
        peer_extra, ours_extra = peer.extra(), ours.extra()
    finally:
        for conn in connections:
            conn.close()
        for saver in savers:
            saver.close()
    return [
        row(
            "SqliteSaver",
            "peer",
            n,
            DURABILITY,
            writes_per_s=peer_w,
            full_read_ms=peer_full,
            bounded_read_ms=peer_bounded,
            bounded="list() + newest",
            trimmed_read_ms=peer_full,
            **peer_extra,
        ),
        row(
            "TurnlogSaver",
            "turnlog",
            n,
            DURABILITY,
            writes_per_s=ours_w,
            full_read_ms=ours_full,
            bounded_read_ms=ours_bounded,
            bounded="get_tuple() of the latest",
            **ours_extra,
        ),
    ]


if __name__ == "__main__":
    for line in bench_langgraph(int(sys.argv[1]) if len(sys.argv) > 1 else 2000):
        print(line)
