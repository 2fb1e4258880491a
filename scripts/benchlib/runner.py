"""A bench run's state and what every section uses: the workload's session at a size, fresh store
files, stores already written, a process for a cold measurement, and a profile of a missed target."""

from __future__ import annotations

import cProfile
import io
import itertools
import json
import pstats
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from benchlib.base import Peer
from benchlib.config import BENCH_SCRIPT, ROOT, SECTIONS, Config
from benchlib.peers import peer_class
from benchlib.workload import Msg, Workload


class Bench:
    """One run: its configuration, the stores and sections asked for, and the results so far."""

    def __init__(self, cfg: Config, names: list[str], sections: list[str], workdir: Path) -> None:
        self.cfg = cfg
        self.names = names
        self.sections = sections
        self.dir = workdir
        self.workload = Workload()
        self._session: list[Msg] = []
        self.stores: dict[tuple[str, int], Path] = {}
        self.results: dict[str, Any] = {"notes": []}

    def log(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

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

    def worker(self, task: str, *args: str) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, str(BENCH_SCRIPT), "--worker", task, *args],
            capture_output=True,
            text=True,
        )
        if out.returncode:
            raise RuntimeError(f"worker {task} {args} failed:\n{out.stderr[-3000:]}")
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))

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

    def run(self, sections: Mapping[str, Callable[[Bench], None]]) -> None:
        """Run the sections asked for, in the order of SECTIONS; ``sections`` maps each name to the
        function that measures it."""
        started = time.perf_counter()
        for section in SECTIONS:
            if section in self.sections:
                sections[section](self)
        self.results["elapsed"] = time.perf_counter() - started
