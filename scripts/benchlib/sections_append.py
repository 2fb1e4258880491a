"""Sections 1 and 1b of the bench: durable appends, one message per transaction, and batch appends,
each store on fresh files in interleaved rounds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from benchlib import report as R
from benchlib.base import Peer
from benchlib.config import TURNLOG_VARIANTS
from benchlib.peers import FLOORS, PEERS

if TYPE_CHECKING:
    from benchlib.runner import Bench


def interleaved(
    bench: Bench,
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
    peers = {n: bench.peer(n, bench.fresh(sub, n)) for n in names}
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


def section_append(bench: Bench) -> None:
    cfg = bench.cfg
    names = bench.want(*TURNLOG_VARIANTS, *FLOORS, *PEERS)
    msgs = bench.session(cfg.append_n)
    lg_msgs = msgs[: cfg.langgraph_append_n]
    bench.log(
        f"1. durable append, one message per transaction: {len(msgs):,} messages, "
        f"{cfg.repeats} rounds on fresh stores"
    )
    lat: dict[str, list[float]] = {n: [] for n in names}
    rates: dict[str, list[float]] = {n: [] for n in names}
    for round_ in range(cfg.repeats):
        peers, times = interleaved(
            bench, "append", names, msgs, lg_msgs, round_, lambda peer, msg: peer.append_one(msg)
        )
        for n, p in peers.items():
            p.close()
            lat[n] += times[n]
            rates[n].append(len(times[n]) / sum(times[n]))
            bench.stores[(n, len(times[n]) if n == "langgraph" else cfg.append_n)] = p.path
        bench.log(f"  round {round_ + 1} of {cfg.repeats}")
    bench.results["append"] = {
        n: {
            "messages": len(v) // cfg.repeats,
            "rate": R.median(rates[n]),
            "rates": rates[n],
            "p50": R.median(v),
            "p99": R.p99(v),
        }
        for n, v in lat.items()
    }


def section_batch(bench: Bench) -> None:
    cfg = bench.cfg
    names = bench.want("turnlog", "turnlog-inline", *FLOORS, *PEERS)
    msgs = bench.session(cfg.batch_total)
    bench.log(
        f"1b. batch append: {len(msgs):,} messages in batches of {cfg.batch_size:,}, "
        f"{cfg.repeats} rounds on fresh stores"
    )
    batches = [msgs[i : i + cfg.batch_size] for i in range(0, len(msgs), cfg.batch_size)]
    rates: dict[str, list[float]] = {n: [] for n in [*names, "turnlog+count"]}
    counting: list[float] = []
    for round_ in range(cfg.repeats):
        peers, times = interleaved(
            bench, "batch", names, batches, batches, round_, lambda peer, batch: peer.append_batch(batch)
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
            bench.stores[(n, cfg.batch_total)] = p.path
        bench.log(f"  round {round_ + 1} of {cfg.repeats}")
    res: dict[str, Any] = {
        n: {"messages": len(msgs), "rate": R.median(v), "rates": v} for n, v in rates.items() if v
    }
    if counting:
        res["turnlog+count"]["count_s"] = R.median(counting)
    bench.results["batch"] = res
