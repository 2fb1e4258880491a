"""The sections of the bench on a stored session: loading it whole, the file's size, and rebuilding
the projections from zero."""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING, Any

from benchlib import report as R
from benchlib.peers import FLOORS, PEERS

if TYPE_CHECKING:
    from benchlib.runner import Bench


def section_load(bench: Bench) -> None:
    size = bench.cfg.batch_total
    names = bench.want("turnlog", *FLOORS, *PEERS)
    bench.log(f"loading a whole {size:,}-message session")
    res = {}
    for n in names:
        path = bench.ensure_store(n, size)
        p = bench.peer(n, path)
        p.open()
        p.after_bulk()
        times = []
        items = 0
        for _ in range(bench.cfg.load_repeats):
            t = time.perf_counter()
            items = len(p.load())
            times.append(time.perf_counter() - t)
        p.close()
        res[n] = {"median": R.median(times), "p99": R.p99(times), "repeats": len(times), "items": items}
        bench.log(f"  {n}: {R.seconds(R.median(times))}")
    bench.results["load"] = res


def section_size(bench: Bench) -> None:
    size = bench.cfg.batch_total
    names = bench.want("turnlog", *FLOORS, *PEERS)
    bench.log(f"file size of a {size:,}-message session")
    res = {}
    for n in names:
        path = bench.ensure_store(n, size)
        p = bench.peer(n, path)
        p.open()
        p.after_bulk()  # turnlog: counts and materialized projections, as after its first build
        p.close()
        conn = sqlite3.connect(path)
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        split: dict[str, int] = {}
        if n == "turnlog":
            for name, pgsize in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
                split[name] = pgsize
        conn.close()
        total = p.size_bytes()
        res[n] = {"bytes": total, "per_message": total / size, "split": split, "journal_mode": mode}
    bench.results["size"] = res


def section_rebuild(bench: Bench) -> None:
    from benchlib.rebuild import generate, run_rebuild

    cfg = bench.cfg
    path = bench.fresh("rebuild", "turnlog")
    bench.log(f"4. rebuild: generating {cfg.rebuild_events:,} events with batch appends")
    pool = bench.session(max(cfg.sizes))
    gen = generate(path, pool, cfg.rebuild_events, cfg.rebuild_per_session, bench.log)
    bench.log("  rebuilding in a fresh process")
    res: dict[str, Any] = {"generated": gen, "rebuilt": run_rebuild(path)}
    for f in path.parent.glob("turnlog.db*"):
        f.unlink()
    big = bench.stores.get(("turnlog", max(bench.cfg.sizes)))
    if big is not None and big.exists():
        bench.log(f"  rebuilding the realistic {max(bench.cfg.sizes):,}-message store in a fresh process")
        res["realistic"] = run_rebuild(big)
        res["realistic_size"] = max(bench.cfg.sizes)
    bench.results["rebuild"] = res
