"""Sections 2 and 3 of the bench: building the next model context under the budget as the session
grows, and what that context holds."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from benchlib import report as R
from benchlib.config import BUDGET
from benchlib.counting import orphans, system_only, to_chat, trim_tail
from benchlib.peers import PEERS
from benchlib.workload import Msg

if TYPE_CHECKING:
    from benchlib.runner import Bench


def section_quality(bench: Bench) -> None:
    size = bench.cfg.batch_total
    step = bench.cfg.quality_step
    msgs = bench.session(size)
    points = []
    for p in range(step, len(msgs) + 1, step):
        if msgs[p - 1].kind == "call":
            p += 1  # build after the return, never with a call still open
        points.append(p)
    bench.log(f"3. budget quality: {len(points)} contexts along the {size:,}-message session")
    res: dict[str, Any] = {}
    if "turnlog" in bench.names:
        from benchlib.counting import count_context as independent

        path = bench.ensure_store("turnlog", size)
        peer = bench.peer("turnlog", path)
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
    bench.results["count_per_message"] = (time.perf_counter() - started) / len(chats)
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
    if bench.want("langchain", "langgraph"):
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
    bench.results["quality"] = res


def section_build(bench: Bench) -> None:
    cfg = bench.cfg
    names = bench.want("turnlog", "sqlite-tiktoken", *PEERS)
    res: dict[str, dict[int, Any]] = {}
    probes = bench.workload.probe_turns(cfg.probe_turns)
    bench.results["probe_events"] = sum(len(t) for t in probes) / len(probes)
    for size in cfg.sizes:
        for n in names:
            if size > cfg.peer_max_size.get(n, size):
                continue
            bench.log(f"2. context build: {n} at {size:,} messages")
            res.setdefault(n, {})[size] = _measure_build(bench, n, size, probes)
        # The stores of this size are no longer needed: keep the disk free.
        if size >= 200_000:
            for n in names:
                if n != "turnlog" and (n, size) in bench.stores:
                    for f in bench.stores[(n, size)].parent.glob(f"{n}.db*"):
                        f.unlink()
    bench.results["build"] = res


def _measure_build(bench: Bench, name: str, size: int, probes: list[list[Msg]]) -> dict[str, Any]:
    cfg = bench.cfg
    path = bench.ensure_store(name, size)
    peer = bench.peer(name, path)
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
        reopen.append(bench.worker("build", name, str(path)))
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
