"""The framework adapters section of the bench: each adapter against its framework's own backend,
in the same run, at each size and durability, and the issue's targets checked on the figures.

``scripts/bench --only integrations`` runs just this section and splices its Markdown into
bench-results/RESULTS.md (replacing the section of the same heading, the rest left as it was)."""

from __future__ import annotations

import importlib
import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchlib import report as R

if TYPE_CHECKING:
    from benchlib.runner import Bench

HEADING = "## Framework adapters (issue 15)"
ADAPTERS = (
    ("openai-agents", "integration_openai_agents", "bench_openai_agents"),
    ("langchain", "integration_langchain", "bench_langchain"),
    ("pydantic-ai", "integration_pydantic_ai", "bench_pydantic_ai"),
    ("langgraph", "integration_langgraph", "bench_langgraph"),
)
BOUNDED_TARGET = 10.0


def run(
    sizes: tuple[int, ...], durabilities: tuple[str, ...], workdir: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    """Every adapter at every size and durability: {"rows": [...], "missing": {adapter: why}}."""
    rows: list[dict[str, Any]] = []
    missing: dict[str, str] = {}
    benches = []
    for name, module, function in ADAPTERS:
        try:
            bench = getattr(importlib.import_module(f"benchlib.{module}"), function)
        except (ImportError, AttributeError):
            missing[name] = "not measured (adapter missing)"
            log(f"{name}: not measured (adapter missing)")
            continue
        benches.append((name, bench, "synchronous" in inspect.signature(bench).parameters))
    for n in sizes:  # the small size of every adapter first: its figures come soonest
        for level in durabilities:
            for name, bench, takes_level in benches:
                if not takes_level and level != durabilities[0]:
                    continue
                log(f"integrations: {name} at {n:,} items, synchronous={level}")
                folder = workdir / "integrations" / f"{name}-{n}-{level}"
                folder.mkdir(parents=True, exist_ok=True)
                got = bench(n, folder, synchronous=level) if takes_level else bench(n, folder)
                for r in got:
                    log("  " + json.dumps(r))
                rows += [{"adapter": name, **r} for r in got]
    return {"rows": rows, "missing": missing}


def section(bench: Bench) -> None:
    """The bench's section 6: every adapter at the run's sizes and durabilities."""
    cfg = bench.cfg
    bench.results["integrations"] = run(
        cfg.integration_sizes, cfg.integration_durabilities, bench.dir, bench.log
    )


def _is_ours(row: dict[str, Any]) -> bool:
    return row.get("side") == "turnlog" or "turnlog" in str(row.get("backend", "")).lower()


def _bounded(row: dict[str, Any]) -> float | None:
    value = row.get("bounded_read_ms", row.get("limit50_read_ms"))
    return None if value is None else float(value)


def _pairs(result: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(peer, turnlog) rows measured together (same adapter, size and call)."""
    pairs = []
    rows = result["rows"]
    for i, ours in enumerate(rows):
        if not _is_ours(ours):
            continue
        peer = next(
            (
                r
                for r in reversed(rows[:i])
                if not _is_ours(r) and r["adapter"] == ours["adapter"] and r["items"] == ours["items"]
            ),
            None,
        )
        if peer is not None:
            pairs.append((peer, ours))
    return pairs


def render(result: dict[str, Any], command: str) -> str:
    out = [HEADING, ""]
    out.append(
        f"Measured by `{command}` ({R.machine('.')[-1][1]}). Each adapter against its framework's own "
        "backend in the same run: writes one item per call (the per-turn pattern), the two sides "
        "interleaved in chunks of 50 so a busy machine slows both alike; reads are the best of 5, "
        "alternating. Both sides run at the same durability (the column says how each was set). "
        "Ratios are turnlog ÷ framework."
    )
    out.append("")
    headers = [
        "adapter",
        "items",
        "durability (framework / turnlog)",
        "writes/s framework",
        "writes/s turnlog",
        "writes",
        "full read framework",
        "full read turnlog",
        "full read",
        "bounded read (turnlog)",
        "framework full read + trim",
        "bounded speed-up",
    ]
    table = []
    targets = []
    for peer, ours in _pairs(result):
        bounded = _bounded(ours)
        trimmed = peer.get("trimmed_read_ms", peer.get("full_read_ms"))
        speedup = trimmed / bounded if bounded and trimmed else None
        table.append(
            [
                ours["adapter"],
                f"{ours['items']:,}",
                f"{peer.get('durability', '?')} / {ours.get('durability', '?')}",
                R.rate(peer["writes_per_s"]),
                R.rate(ours["writes_per_s"]),
                R.ratio(ours["writes_per_s"], peer["writes_per_s"], "rate"),
                R.seconds(peer["full_read_ms"] / 1000),
                R.seconds(ours["full_read_ms"] / 1000),
                R.ratio(ours["full_read_ms"], peer["full_read_ms"], "time"),
                f"{R.seconds(bounded / 1000) if bounded is not None else '—'} ({ours.get('bounded', '?')})"
                + (
                    f"; framework's own: {R.seconds(_bounded(peer) / 1000)}"  # type: ignore[operator]
                    if _bounded(peer) is not None
                    else ""
                ),
                f"{R.seconds(trimmed / 1000)} ({peer.get('bounded', 'full read')})",
                f"{speedup:,.1f}×" if speedup else "—",
            ]
        )
        where = f"{ours['adapter']} at {ours['items']:,}, {ours.get('durability', '')}"
        writes_ok = ours["writes_per_s"] >= peer["writes_per_s"]
        reads_ok = ours["full_read_ms"] <= peer["full_read_ms"]
        line = f"- {where}: writes {_met(writes_ok)}, full read {_met(reads_ok)}"
        if ours["items"] >= 20_000:
            line += (
                f", bounded read ≥ {BOUNDED_TARGET:.0f}× {_met(bool(speedup and speedup >= BOUNDED_TARGET))}"
            )
        targets.append(line)
    out.append(R.table(headers, table))
    out.append("")
    for name, why in result.get("missing", {}).items():
        out.append(f"- {name}: {why}")
    if result.get("missing"):
        out.append("")
    out.append(
        "Targets: no adapter slower than its framework's backend on writes at equal durability nor on a "
        f"full read; a bounded read at 20,000 items ≥ {BOUNDED_TARGET:.0f}× faster than the framework's "
        "full read plus its own trimming."
    )
    out.append("")
    out += targets
    out.append("")
    out.append(
        "What each turnlog write does that the framework's does not: it counts the item's tokens with "
        "tiktoken, hash-chains the event, and commits, in the same transaction and fsync, the event "
        "row with its unique indexes and the six materialized projections (about ten WAL pages, where "
        "SQLiteSession commits about three). A full read parses each stored event's origin (the "
        "framework's item, verbatim) and checks it against the live index (rewinds, clears); "
        "pydantic-ai's load then validates every entry, as its file load does."
    )
    return "\n".join(out)


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def splice(path: Path, section: str, heading: str = HEADING) -> None:
    """Put ``section`` (starting with ``heading``) into the results file in place of the section of
    the same heading, or at its end; every other section is left as it was."""
    text = path.read_text() if path.exists() else ""
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    block = section.rstrip() + "\n\n"
    text = (
        pattern.sub(lambda _: block, text, count=1)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + block
    )
    path.write_text(text.rstrip() + "\n")
