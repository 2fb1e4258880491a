"""What a bench run measures and at what sizes: its sections, the context budget, and the sizes of
a full run and of a ``--quick`` smoke run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
BENCH_SCRIPT = ROOT / "scripts" / "bench.py"
BUDGET = 8000
SECTIONS = (
    "append",
    "batch",
    "load",
    "size",
    "quality",
    "build",
    "rebuild",
    "integrations",
    "postgres",
    "startup",
    "cache",
    "floor",
)
TURNLOG_VARIANTS = ("turnlog", "turnlog-inline", "turnlog-catchup")


@dataclass
class Config:
    quick: bool
    append_n: int = 2000
    langgraph_append_n: int = 500
    repeats: int = 5
    batch_total: int = 20_000
    batch_size: int = 1000
    sizes: tuple[int, ...] = (2000, 20_000, 200_000)
    peer_max_size: dict[str, int] = field(default_factory=lambda: {"langchain": 20_000, "langgraph": 20_000})
    warm_seconds: float = 10.0
    warm_max: int = 200
    warm_min: int = 3
    reopen: int = 5
    reopen_slow: int = 2
    probe_turns: int = 30
    quality_step: int = 50
    rebuild_events: int = 1_000_000
    rebuild_per_session: int = 2000
    load_repeats: int = 7
    integration_sizes: tuple[int, ...] = (2000, 20_000)
    integration_durabilities: tuple[str, ...] = ("FULL", "NORMAL")

    @classmethod
    def make(cls, quick: bool) -> Config:
        if not quick:
            return cls(quick=False)
        return cls(
            quick=True,
            append_n=300,
            langgraph_append_n=100,
            repeats=2,
            batch_total=2000,
            batch_size=500,
            sizes=(300, 2000),
            warm_seconds=2.0,
            warm_max=50,
            reopen=2,
            reopen_slow=1,
            probe_turns=10,
            quality_step=10,
            rebuild_events=20_000,
            rebuild_per_session=1000,
            load_repeats=3,
            integration_sizes=(300, 2000),
            integration_durabilities=("FULL",),
        )
