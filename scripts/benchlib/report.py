"""Formatting of the results: figures, ratios, Markdown tables, and the machine they were measured on."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import sqlite3
import statistics
from collections.abc import Sequence
from typing import Any


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def p99(values: Sequence[float]) -> float:
    """Nearest-rank 99th percentile (the maximum when there are fewer than 100 values)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, -(-99 * len(ordered) // 100) - 1))
    return ordered[rank]


def seconds(value: float | None) -> str:
    if value is None or value != value:
        return "—"
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1e3:.{1 if value < 0.1 else 0}f} ms"
    return f"{value:.2f} s"


def rate(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}/s"


def size(value: float | None) -> str:
    if value is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover


_WORDS = {"rate": ("faster", "slower"), "time": ("faster", "slower"), "size": ("smaller", "larger")}


def ratio(turnlog: float | None, peer: float | None, kind: str) -> str:
    """turnlog ÷ peer, and what it means: ``kind`` is rate (higher is better), time or size."""
    if turnlog is None or peer is None or not peer or turnlog != turnlog or peer != peer:
        return "—"
    r = turnlog / peer
    better = r >= 1 if kind == "rate" else r <= 1
    factor = r if r >= 1 else 1 / r
    if factor < 1.005:
        return f"{r:.2f} (same)"
    good, bad = _WORDS[kind]
    return f"{r:.3g} ({factor:.3g}× {good if better else bad})"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells]
    return "\n".join(lines)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        import psutil

        return size(psutil.virtual_memory().total)
    except ImportError:  # pragma: no cover
        return "unknown"


def _disk(path: str) -> str:
    try:
        with open("/proc/mounts") as f:
            mounts = [line.split() for line in f]
        best = max((m for m in mounts if path.startswith(m[1])), key=lambda m: len(m[1]))
        return f"{best[0]} ({best[2]}) mounted at {best[1]}"
    except (OSError, ValueError):
        return "unknown"


def machine(workdir: str) -> list[tuple[str, str]]:
    return [
        ("CPU", f"{_cpu_model()}, {os.cpu_count()} cores"),
        ("memory", _memory()),
        ("OS", f"{platform.system()} {platform.release()} ({platform.machine()})"),
        ("disk of the stores", _disk(workdir)),
        ("Python", platform.python_version()),
        ("SQLite", sqlite3.sqlite_version),
        ("date", dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")),
    ]


def versions(packages: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for name in packages:
        try:
            out.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            out.append((name, "not installed"))
    return out
