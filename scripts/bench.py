"""turnlog against what users would pick instead, in one run on one machine: durable and batch
appends, building the next model context under a budget as sessions grow, what that context
holds, rebuilding the projections, loading a session, file size, and each framework adapter against
its framework's own backend (``--only integrations`` runs that section alone and splices it into
``bench-results/RESULTS.md``). Run it with ``scripts/bench``
(``--help`` lists the options); it prints Markdown tables and writes ``bench-results/RESULTS.md``."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import cache_bench, floor_bench, integrations, postgres_bench, startup
from benchlib.config import BUDGET, ROOT, SECTIONS, TURNLOG_VARIANTS, Config
from benchlib.counting import encoding
from benchlib.peers import NAMES, peer_class
from benchlib.runner import Bench
from benchlib.sections_append import section_append, section_batch
from benchlib.sections_context import section_build, section_quality
from benchlib.sections_store import section_load, section_rebuild, section_size

MEASURE = {
    "append": section_append,
    "batch": section_batch,
    "load": section_load,
    "size": section_size,
    "quality": section_quality,
    "build": section_build,
    "rebuild": section_rebuild,
    "integrations": integrations.section,
    "postgres": lambda bench: bench.results.__setitem__(
        "postgres", postgres_bench.run(bench.cfg.quick, bench.log)
    ),
    "startup": lambda bench: bench.results.__setitem__("startup", startup.run(bench.cfg.quick, bench.log)),
    "cache": lambda bench: bench.results.__setitem__("cache", cache_bench.run(bench.cfg.quick, bench.log)),
    "floor": lambda bench: bench.results.__setitem__("floor", floor_bench.run(bench.cfg.quick, bench.log)),
}
"""Each section's function, by the name ``--only`` takes."""


def render(bench: Bench, command: str) -> str:
    from benchlib.targets import render_report

    adapters = bench.results.get("integrations")
    section = integrations.render(adapters, command) if adapters is not None else ""
    server = bench.results.get("postgres")
    pg = postgres_bench.render(server, command) if server is not None else ""
    started = bench.results.get("startup")
    cli = startup.render(started, command) if started is not None else ""
    cache = bench.results.get("cache")
    prompt_cache = cache_bench.render(cache, command) if cache is not None else ""
    floor = bench.results.get("floor")
    at_floor = floor_bench.render(floor, command) if floor is not None else ""
    alone = [s for s in (section, pg, cli, prompt_cache, at_floor) if s]
    if set(bench.sections) <= {"integrations", "postgres", "startup", "cache", "floor"}:
        return "\n\n".join(alone)
    return "\n\n".join([render_report(bench, command), *alone])


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
        bench.run(MEASURE)
        text = render(bench, command)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(text)
    alone = (["integrations"], ["postgres"], ["startup"], ["cache"], ["floor"])
    if sections in alone and not args.quick and not args.out:
        # This section alone updates its own part of the results, never the whole file.
        heading = {
            "integrations": integrations.HEADING,
            "postgres": postgres_bench.HEADING,
            "startup": startup.HEADING,
            "cache": cache_bench.HEADING,
            "floor": floor_bench.HEADING,
        }[sections[0]]
        integrations.splice(ROOT / "bench-results" / "RESULTS.md", text, heading)
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
