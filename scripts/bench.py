"""turnlog against what users would pick instead, in one run on one machine: durable and batch
appends, building the next model context under a budget as sessions grow, what that context
holds, rebuilding the projections, loading a session, file size, and each framework adapter against
its framework's own backend (``--only integrations`` runs that section alone and splices it into
``bench-results/RESULTS.md``). Run it with ``scripts/bench``
(``--help`` lists the options); it prints Markdown tables and writes ``bench-results/RESULTS.md``."""

from __future__ import annotations

import argparse
import cProfile
import io
import itertools
import json
import os
import pstats
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import report as R
from benchlib.base import Peer
from benchlib.counting import encoding, orphans, system_only, to_chat, trim_tail
from benchlib.peers import FLOORS, NAMES, PEERS, peer_class
from benchlib.workload import Msg, Workload

ROOT = Path(__file__).resolve().parent.parent
BUDGET = 8000
SECTIONS = ("append", "batch", "load", "size", "quality", "build", "rebuild", "integrations")
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


class Bench:
    def __init__(self, cfg: Config, names: list[str], sections: list[str], workdir: Path) -> None:
        self.cfg = cfg
        self.names = names
        self.sections = sections
        self.dir = workdir
        self.workload = Workload()
        self._session: list[Msg] = []
        self.stores: dict[tuple[str, int], Path] = {}
        self.results: dict[str, Any] = {"notes": []}
        self.out: list[str] = []

    # -- helpers --------------------------------------------------------------------------------

    def log(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def emit(self, text: str = "") -> None:
        print(text, flush=True)
        self.out.append(text)

    def session(self, n: int) -> list[Msg]:
        if len(self._session) < n + 1:
            self.log(f"generating the workload: {n:,} messages")
            self._session = list(itertools.islice(self.workload.stream(), n + 1))
        msgs = self._session[:n]
        if msgs[-1].kind == "call":
            msgs = self._session[: n + 1]
        return msgs

    def peer(self, name: str, path: Path) -> Peer:
        return peer_class(name)(path)

    def fresh(self, sub: str, name: str) -> Path:
        folder = self.dir / sub
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.db"
        for p in folder.glob(f"{name}.db*"):
            p.unlink()
        return path

    def want(self, *names: str) -> list[str]:
        return [n for n in names if n in self.names]

    def ensure_store(self, name: str, size: int) -> Path:
        """A store holding the first ``size`` messages, written with batch appends if no earlier
        section left one."""
        found = self.stores.get((name, size))
        if found is not None:
            return found
        msgs = self.session(size)
        path = self.fresh(f"build-{size}", name)
        peer = self.peer(name, path)
        peer.open()
        chunk = max(1, size // 10) if name == "langgraph" else 2000
        started = time.perf_counter()
        for i in range(0, len(msgs), chunk):
            peer.append_batch(msgs[i : i + chunk])
        elapsed = time.perf_counter() - started
        peer.close()
        self.log(f"  wrote {len(msgs):,} messages to {name} in {elapsed:.1f} s (batches of {chunk})")
        self.stores[(name, size)] = path
        return path

    # -- 1. appends -----------------------------------------------------------------------------

    def interleaved(
        self,
        sub: str,
        names: list[str],
        units: list[Any],
        alone: list[Any],
        round_: int,
        call: Callable[..., None],
    ) -> tuple[dict[str, Peer], dict[str, list[float]]]:
        """One round on fresh stores: each unit (a message, a batch) goes to every store in turn, in an
        order that rotates, so the disk's changing speed hits every store alike. LangGraph goes alone
        afterwards, with ``alone``: each of its checkpoints rewrites the whole session, and that much
        writing would slow the others' fsyncs. Returns the stores, still open, and each one's times of
        ``call(store, unit)``."""
        peers = {n: self.peer(n, self.fresh(sub, n)) for n in names}
        for p in peers.values():
            p.open()
        times: dict[str, list[float]] = {n: [] for n in names}
        together = [n for n in names if n != "langgraph"]
        for i, unit in enumerate(units):
            k = (i + round_) % max(1, len(together))
            for n in together[k:] + together[:k]:
                t = time.perf_counter()
                call(peers[n], unit)
                times[n].append(time.perf_counter() - t)
        if "langgraph" in peers:
            for unit in alone:
                t = time.perf_counter()
                call(peers["langgraph"], unit)
                times["langgraph"].append(time.perf_counter() - t)
        return peers, times

    def section_append(self) -> None:
        cfg = self.cfg
        names = self.want(*TURNLOG_VARIANTS, *FLOORS, *PEERS)
        msgs = self.session(cfg.append_n)
        lg_msgs = msgs[: cfg.langgraph_append_n]
        self.log(
            f"1. durable append, one message per transaction: {len(msgs):,} messages, "
            f"{cfg.repeats} rounds on fresh stores"
        )
        lat: dict[str, list[float]] = {n: [] for n in names}
        rates: dict[str, list[float]] = {n: [] for n in names}
        for round_ in range(cfg.repeats):
            peers, times = self.interleaved(
                "append", names, msgs, lg_msgs, round_, lambda peer, msg: peer.append_one(msg)
            )
            for n, p in peers.items():
                p.close()
                lat[n] += times[n]
                rates[n].append(len(times[n]) / sum(times[n]))
                self.stores[(n, len(times[n]) if n == "langgraph" else cfg.append_n)] = p.path
            self.log(f"  round {round_ + 1} of {cfg.repeats}")
        self.results["append"] = {
            n: {
                "messages": len(v) // cfg.repeats,
                "rate": R.median(rates[n]),
                "rates": rates[n],
                "p50": R.median(v),
                "p99": R.p99(v),
            }
            for n, v in lat.items()
        }

    def section_batch(self) -> None:
        cfg = self.cfg
        names = self.want("turnlog", "turnlog-inline", *FLOORS, *PEERS)
        msgs = self.session(cfg.batch_total)
        self.log(
            f"1b. batch append: {len(msgs):,} messages in batches of {cfg.batch_size:,}, "
            f"{cfg.repeats} rounds on fresh stores"
        )
        batches = [msgs[i : i + cfg.batch_size] for i in range(0, len(msgs), cfg.batch_size)]
        rates: dict[str, list[float]] = {n: [] for n in [*names, "turnlog+count"]}
        counting: list[float] = []
        for round_ in range(cfg.repeats):
            peers, times = self.interleaved(
                "batch", names, batches, batches, round_, lambda peer, batch: peer.append_batch(batch)
            )
            for n in names:
                rates[n].append(len(msgs) / sum(times[n]))
            if "turnlog" in peers:
                store = peers["turnlog"].store  # type: ignore[attr-defined]
                t = time.perf_counter()
                store.catch_up_tokens()
                counting.append(time.perf_counter() - t)
                rates["turnlog+count"].append(len(msgs) / (sum(times["turnlog"]) + counting[-1]))
            for n, p in peers.items():
                p.close()
                self.stores[(n, cfg.batch_total)] = p.path
            self.log(f"  round {round_ + 1} of {cfg.repeats}")
        res: dict[str, Any] = {
            n: {"messages": len(msgs), "rate": R.median(v), "rates": v} for n, v in rates.items() if v
        }
        if counting:
            res["turnlog+count"]["count_s"] = R.median(counting)
        self.results["batch"] = res

    # -- loading and size -----------------------------------------------------------------------

    def section_load(self) -> None:
        size = self.cfg.batch_total
        names = self.want("turnlog", *FLOORS, *PEERS)
        self.log(f"loading a whole {size:,}-message session")
        res = {}
        for n in names:
            path = self.ensure_store(n, size)
            p = self.peer(n, path)
            p.open()
            p.after_bulk()
            times = []
            items = 0
            for _ in range(self.cfg.load_repeats):
                t = time.perf_counter()
                items = len(p.load())
                times.append(time.perf_counter() - t)
            p.close()
            res[n] = {"median": R.median(times), "p99": R.p99(times), "repeats": len(times), "items": items}
            self.log(f"  {n}: {R.seconds(R.median(times))}")
        self.results["load"] = res

    def section_size(self) -> None:
        size = self.cfg.batch_total
        names = self.want("turnlog", *FLOORS, *PEERS)
        self.log(f"file size of a {size:,}-message session")
        res = {}
        for n in names:
            path = self.ensure_store(n, size)
            p = self.peer(n, path)
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
        self.results["size"] = res

    # -- 3. quality -----------------------------------------------------------------------------

    def section_quality(self) -> None:
        size = self.cfg.batch_total
        step = self.cfg.quality_step
        msgs = self.session(size)
        points = []
        for p in range(step, len(msgs) + 1, step):
            if msgs[p - 1].kind == "call":
                p += 1  # build after the return, never with a call still open
            points.append(p)
        self.log(f"3. budget quality: {len(points)} contexts along the {size:,}-message session")
        res: dict[str, Any] = {}
        if "turnlog" in self.names:
            from benchlib.counting import count_context as independent

            path = self.ensure_store("turnlog", size)
            peer = self.peer("turnlog", path)
            peer.open()
            peer.after_bulk()
            used, orph, only, mismatch = [], 0, 0, 0
            for pos in points:
                rendered, total = peer.build_at(BUDGET, pos)  # type: ignore[attr-defined]
                used.append(total / BUDGET)
                orph += orphans(rendered) > 0
                only += system_only(rendered)
                mismatch += independent(rendered) != total
            peer.close()
            res["turnlog"] = {
                "contexts": len(points),
                "median_used": R.median(used),
                "orphans": orph,
                "system_only": only,
                "count_mismatch": mismatch,
            }
        chats = [to_chat(m) for m in msgs]
        from benchlib.counting import count_message

        started = time.perf_counter()
        counts = [count_message(c) for c in chats]
        self.results["count_per_message"] = (time.perf_counter() - started) / len(chats)
        used, orph, only = [], 0, 0
        for pos in points:
            context, total = trim_tail(chats[:pos], BUDGET, counts[:pos])
            used.append(total / BUDGET)
            orph += orphans(context) > 0
            only += system_only(context)
        res["tail"] = {
            "contexts": len(points),
            "median_used": R.median(used),
            "orphans": orph,
            "system_only": only,
        }
        if self.want("langchain", "langgraph"):
            from benchlib.peer_langchain import lc_to_chat, to_lc, trim

            lc = [to_lc(m) for m in msgs]
            by_id = {id(m): c for m, c in zip(lc, counts, strict=True)}

            def cached(messages: list[Any]) -> int:
                return 3 + sum(by_id[id(m)] for m in messages)

            used, orph, only = [], 0, 0
            for pos in points:
                # The system message and the newest 2,000 messages: far more than 8,000 tokens, so
                # trimming gives what it gives on the whole prefix, without counting it all again.
                window = lc[:1] + lc[max(1, pos - 2000) : pos]
                kept = trim(window, BUDGET, cached)
                context = [lc_to_chat(m) for m in kept]
                used.append(cached(kept) / BUDGET)
                orph += orphans(context) > 0
                only += system_only(context)
            res["langchain"] = {
                "contexts": len(points),
                "median_used": R.median(used),
                "orphans": orph,
                "system_only": only,
            }
        self.results["quality"] = res

    # -- 2. context builds ------------------------------------------------------------------------

    def section_build(self) -> None:
        cfg = self.cfg
        names = self.want("turnlog", "sqlite-tiktoken", *PEERS)
        res: dict[str, dict[int, Any]] = {}
        probes = self.workload.probe_turns(cfg.probe_turns)
        self.results["probe_events"] = sum(len(t) for t in probes) / len(probes)
        for size in cfg.sizes:
            for n in names:
                if size > cfg.peer_max_size.get(n, size):
                    continue
                self.log(f"2. context build: {n} at {size:,} messages")
                res.setdefault(n, {})[size] = self._measure_build(n, size, probes)
            # The stores of this size are no longer needed: keep the disk free.
            if size >= 200_000:
                for n in names:
                    if n != "turnlog" and (n, size) in self.stores:
                        for f in self.stores[(n, size)].parent.glob(f"{n}.db*"):
                            f.unlink()
        self.results["build"] = res

    def _measure_build(self, name: str, size: int, probes: list[list[Msg]]) -> dict[str, Any]:
        cfg = self.cfg
        path = self.ensure_store(name, size)
        peer = self.peer(name, path)
        peer.open()
        t = time.perf_counter()
        peer.after_bulk()
        prepare = time.perf_counter() - t
        # The same typical turns go to every store and size first, so the tail every later build
        # reads is the same at 2,000 and at 200,000 messages: only the session's length differs.
        after: list[float] = []
        for turn in probes:
            for m in turn:
                peer.append_one(m)
            if peer.counts_at_append:
                t = time.perf_counter()
                peer.build(BUDGET)
                after.append(time.perf_counter() - t)
        t = time.perf_counter()
        _, tokens = peer.build(BUDGET)
        first = time.perf_counter() - t
        warm: list[float] = []
        deadline = time.perf_counter() + cfg.warm_seconds
        while len(warm) < cfg.warm_min or (len(warm) < cfg.warm_max and time.perf_counter() < deadline):
            t = time.perf_counter()
            peer.build(BUDGET)
            warm.append(time.perf_counter() - t)
        peer.close()
        slow = R.median(warm) > 1.0
        reopen = []
        for _ in range(cfg.reopen_slow if slow else cfg.reopen):
            reopen.append(self.worker("build", name, str(path)))
        return {
            "prepare": prepare,
            "first": first,
            "tokens": tokens,
            "warm_median": R.median(warm),
            "warm_p99": R.p99(warm),
            "warm_n": len(warm),
            "reopen_median": R.median([r["build_s"] for r in reopen]),
            "reopen_open": R.median([r["open_s"] for r in reopen]),
            "reopen_n": len(reopen),
            "after_median": R.median(after) if after else None,
            "after_p99": R.p99(after) if after else None,
            "after_n": len(after),
        }

    def worker(self, task: str, *args: str) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--worker", task, *args],
            capture_output=True,
            text=True,
        )
        if out.returncode:
            raise RuntimeError(f"worker {task} {args} failed:\n{out.stderr[-3000:]}")
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))

    # -- 4. rebuild -----------------------------------------------------------------------------

    def section_rebuild(self) -> None:
        from benchlib.rebuild import generate, run_rebuild

        cfg = self.cfg
        path = self.fresh("rebuild", "turnlog")
        self.log(f"4. rebuild: generating {cfg.rebuild_events:,} events with batch appends")
        pool = self.session(max(cfg.sizes))
        gen = generate(path, pool, cfg.rebuild_events, cfg.rebuild_per_session, self.log)
        self.log("  rebuilding in a fresh process")
        res: dict[str, Any] = {"generated": gen, "rebuilt": run_rebuild(path)}
        for f in path.parent.glob("turnlog.db*"):
            f.unlink()
        big = self.stores.get(("turnlog", max(self.cfg.sizes)))
        if big is not None and big.exists():
            self.log(f"  rebuilding the realistic {max(self.cfg.sizes):,}-message store in a fresh process")
            res["realistic"] = run_rebuild(big)
            res["realistic_size"] = max(self.cfg.sizes)
        self.results["rebuild"] = res

    # -- 6. framework adapters --------------------------------------------------------------------

    def section_integrations(self) -> None:
        from benchlib import integrations

        cfg = self.cfg
        self.results["integrations"] = integrations.run(
            cfg.integration_sizes, cfg.integration_durabilities, self.dir, self.log
        )

    # -- profiles of missed targets ---------------------------------------------------------------

    def profile(self, label: str, fn: Callable[[], Any], lines: int = 14) -> str:
        prof = cProfile.Profile()
        prof.enable()
        fn()
        prof.disable()
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        stats.sort_stats("tottime").print_stats(lines)
        text = buf.getvalue()
        body = text[text.find("ncalls") :] if "ncalls" in text else text
        body = body.replace(str(ROOT) + "/", "").replace(sys.prefix + "/", "")
        return f"cProfile of {label} (sorted by own time):\n\n```\n{body.rstrip()}\n```"

    def run(self) -> None:
        started = time.perf_counter()
        for section in SECTIONS:
            if section in self.sections:
                getattr(self, f"section_{section}")()
        self.results["elapsed"] = time.perf_counter() - started


# --- the report ----------------------------------------------------------------------------------


def label(name: str) -> str:
    if name == "turnlog+count":
        return "turnlog, batch + deferred counts caught up"
    return peer_class(name).label


def render(bench: Bench, command: str) -> str:
    from benchlib import integrations
    from benchlib.targets import render_report

    adapters = bench.results.get("integrations")
    section = integrations.render(adapters, command) if adapters is not None else ""
    if bench.sections == ["integrations"]:
        return section
    return render_report(bench, command) + (f"\n\n{section}" if section else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/bench",
        description="Benchmark turnlog against the stores users would pick instead (same run, same machine).",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of about two minutes")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only these stores or sections (repeat or comma-separate); stores: {', '.join(NAMES)}; "
        f"sections: {', '.join(SECTIONS)}",
    )
    parser.add_argument("--out", help="results file (default: bench-results/RESULTS.md for a full run)")
    parser.add_argument("--workdir", help="where the stores are written (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the stores after the run")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args.worker)
    only = [w for item in args.only for w in item.split(",") if w]
    unknown = [w for w in only if w not in NAMES and w not in SECTIONS]
    if unknown:
        parser.error(f"unknown --only name(s): {', '.join(unknown)}")
    names = [n for n in NAMES if n in only] or list(NAMES)
    if "turnlog" in only:
        names = [n for n in NAMES if n in only or n in TURNLOG_VARIANTS]
    sections = [s for s in SECTIONS if s in only] or list(SECTIONS)
    cfg = Config.make(args.quick)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="turnlog-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    command = "scripts/bench" + "".join(
        f" {shlex.quote(a)}" for a in (argv if argv is not None else sys.argv[1:])
    )
    bench = Bench(cfg, names, sections, workdir)
    bench.log(f"stores in {workdir}")
    try:
        bench.run()
        text = render(bench, command)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(text)
    if sections == ["integrations"] and not args.quick and not args.out:
        # This section alone updates its own part of the results, never the whole file.
        from benchlib import integrations

        integrations.splice(ROOT / "bench-results" / "RESULTS.md", text)
        bench.log("section spliced into bench-results/RESULTS.md")
        return 0
    out = args.out or (None if (args.quick or only) else str(ROOT / "bench-results" / "RESULTS.md"))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
        bench.log(f"results written to {out}")
    return 0


def worker_main(argv: list[str]) -> int:
    """Tasks run in a fresh process: a build right after opening a store, and a rebuild."""
    task = argv[0]
    if task == "build":
        name, path = argv[1], argv[2]
        cls = peer_class(name)
        encoding()  # the shared counter's encoding is loaded before the clock starts, as turnlog's is
        t = time.perf_counter()
        peer = cls(Path(path))
        peer.open()
        opened = time.perf_counter() - t
        t = time.perf_counter()
        _, tokens = peer.build(BUDGET)
        built = time.perf_counter() - t
        peer.close()
        print(json.dumps({"open_s": opened, "build_s": built, "tokens": tokens}))
        return 0
    if task == "rebuild":
        from benchlib.rebuild import worker_rebuild

        print(json.dumps(worker_rebuild(argv[1])))
        return 0
    raise SystemExit(f"unknown worker task {task!r}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
