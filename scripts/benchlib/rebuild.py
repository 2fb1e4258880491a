"""The rebuild measurement: a turnlog store of many events written with batch appends, then
``materializer(store).rebuild()`` in a fresh process that does nothing else, with its peak memory."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from benchlib.peer_turnlog import to_event
from benchlib.workload import Msg
from turnlog.projections.registry import materializer
from turnlog.store import tokenizer as tokenizer_module
from turnlog.store.sqlite import SQLiteStore


def sessions_of(messages: Iterable[Msg], per_session: int) -> Iterator[list[Msg]]:
    """Cut a message stream into sessions of about ``per_session`` messages, each starting at a
    user message, so no tool call or return is parted from its other half."""
    current: list[Msg] = []
    for msg in messages:
        if msg.kind == "user" and len(current) >= per_session:
            yield current
            current = []
        current.append(msg)
    if current:
        yield current


def generate(
    path: Path, pool: Sequence[Msg], events: int, per_session: int, progress: Any = None
) -> dict[str, Any]:
    """Write ``events`` full-size events as sessions of about ``per_session`` messages (each opening
    with the pool's system message), one batch append per session, then count their tokens and
    catch the projections up. The messages come from ``pool`` (the build section's long session),
    passed over as often as needed: a tool output met again is stored once (its blob is shared), as
    when an agent reads a file twice."""
    store = SQLiteStore.open(path)
    started = time.perf_counter()
    written = 0
    sessions = 0
    system = [pool[0]] if pool[0].kind == "system" else []
    stream = itertools.chain.from_iterable(itertools.repeat(pool[len(system) :]))
    for msgs in sessions_of(stream, per_session):
        whole = system + msgs
        msgs = whole[: events - written]
        if msgs[-1].kind == "call":  # the last session: never leave a call without its return
            msgs = whole[: len(msgs) + 1]
        store.append(f"s{sessions:05d}", [to_event(m) for m in msgs])
        written += len(msgs)
        sessions += 1
        if progress and sessions % 50 == 0:
            progress(f"  generated {written:,} of {events:,} events")
        if written >= events:
            break
    append_s = time.perf_counter() - started
    started = time.perf_counter()
    # The pool is passed over several times, so most texts come back: the tokenizer's remembered
    # counts are widened to hold every text of one pass (four a message at most), and each distinct
    # text is tokenized once instead of once a pass. The counts stored are the same: a count
    # depends only on the encoding and the text.
    kept = tokenizer_module.COUNTS_KEPT
    tokenizer_module.COUNTS_KEPT = max(kept, 4 * len(pool) + 16)
    try:
        store.catch_up_tokens()
    finally:
        tokenizer_module.COUNTS_KEPT = kept
        tokenizer_module.forget_counts()
    count_s = time.perf_counter() - started
    started = time.perf_counter()
    materializer(store).catch_up()
    catch_up_s = time.perf_counter() - started
    store.close()
    return {
        "events": written,
        "sessions": sessions,
        "per_session": per_session,
        "append_s": append_s,
        "count_s": count_s,
        "catch_up_s": catch_up_s,
        "bytes": sum(p.stat().st_size for p in path.parent.glob(path.name + "*")),
    }


def run_rebuild(path: Path) -> dict[str, Any]:
    """Rebuild every projection of the store at ``path`` in a fresh process. The process imports
    this module and turnlog alone, not bench.py: bench.py imports every peer (the OpenAI Agents SDK
    among them, about 80 MiB resident), which a rebuild's peak memory must not be charged for."""
    out = subprocess.run(
        [sys.executable, "-c", _WORKER, str(Path(__file__).resolve().parent.parent), str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


_WORKER = (
    "import json, sys; sys.path.insert(0, sys.argv[1]); "
    "from benchlib.rebuild import worker_rebuild; print(json.dumps(worker_rebuild(sys.argv[2])))"
)
"""The rebuild process's whole program: ``python -c _WORKER SCRIPTS_DIR STORE``."""


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
