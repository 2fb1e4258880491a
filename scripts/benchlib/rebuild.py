"""The rebuild measurement: a turnlog store of many events written with batch appends, then
``materializer(store).rebuild()`` in a fresh process that does nothing else, with its peak memory."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchlib.peer_turnlog import to_event
from benchlib.workload import Msg, Workload
from projections.registry import materializer
from store.sqlite import SQLiteStore

SHORT = 240
"""Characters kept of each message in the generated store (see ``generate``)."""


def _short(msg: Msg) -> Msg:
    return replace(msg, content=msg.content[:SHORT])


def generate(
    path: Path, workload: Workload, events: int, per_session: int, progress: Any = None
) -> dict[str, Any]:
    """Write ``events`` events as sessions of ``per_session`` messages, one batch append per
    session. The workload's mix and tool calls are kept but every text is cut to SHORT characters:
    counting the tokens of a million full-size messages would take longer than the whole benchmark."""
    store = SQLiteStore.open(path)
    started = time.perf_counter()
    template = [_short(m) for m in itertools.islice(workload.stream(salt=7, call_prefix="r"), per_session)]
    written = 0
    session = 0
    while written < events:
        n = min(per_session, events - written)
        store.append(f"s{session:05d}", [to_event(m) for m in template[:n]])
        written += n
        session += 1
        if progress and session % 50 == 0:
            progress(f"  generated {written:,} of {events:,} events")
    append_s = time.perf_counter() - started
    started = time.perf_counter()
    store.catch_up_tokens()
    count_s = time.perf_counter() - started
    started = time.perf_counter()
    materializer(store).catch_up()
    catch_up_s = time.perf_counter() - started
    store.close()
    return {
        "events": written,
        "sessions": session,
        "append_s": append_s,
        "count_s": count_s,
        "catch_up_s": catch_up_s,
        "bytes": sum(p.stat().st_size for p in path.parent.glob(path.name + "*")),
    }


def run_rebuild(path: Path) -> dict[str, Any]:
    """Rebuild every projection of the store at ``path`` in a fresh process."""
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve().parent.parent / "bench.py"),
            "--worker",
            "rebuild",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _high_water() -> int:
    """This process's peak resident memory (VmHWM). Not ``getrusage``'s ru_maxrss: Linux carries
    the forked parent's resident size across exec into it."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker_rebuild(path: str) -> dict[str, Any]:
    before = _high_water()
    store = SQLiteStore.open(path)
    started = time.perf_counter()
    materializer(store).rebuild()
    elapsed = time.perf_counter() - started
    events = store.count_events()
    store.close()
    return {"seconds": elapsed, "peak_bytes": _high_water(), "before_bytes": before, "events": events}
