"""The results document's tables of appends (one message per transaction, batches) and of loading a
whole session, with the targets they judge."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from benchlib import report as R
from benchlib.config import Config
from benchlib.peers import NAMES, PEERS
from benchlib.targets_base import Targets, label, spread


def append_tables(res: dict[str, Any], cfg: Config, targets: Targets) -> Iterator[str]:
    """Sections 1 and 1b, and loading a whole session: a table each, in that order, for those measured."""
    # -- 1. appends ----------------------------------------------------------------------------
    peers_present = [n for n in PEERS if n in res.get("append", {})]
    if "append" in res:
        a = res["append"]
        t = a.get("turnlog")
        rows = []
        for n in NAMES:
            if n not in a:
                continue
            v = a[n]
            rows.append(
                [
                    label(n),
                    f"{v['messages']:,}",
                    R.rate(v["rate"]),
                    spread(v),
                    R.seconds(v["p50"]),
                    R.seconds(v["p99"]),
                    R.ratio(t["rate"], v["rate"], "rate") if t and n != "turnlog" else "",
                ]
            )
        yield (
            "### 1. Durable append, one message per transaction\n\n"
            f"{cfg.repeats} rounds, each on fresh stores. In a round every store gets the same messages in "
            "the same order, interleaved message by message (each message goes to every store in turn, "
            "in a rotating order) so the disk's changing speed hits every store alike; LangGraph runs "
            "alone afterwards, on fewer messages. Rate = messages ÷ time inside the append calls, the "
            "median of the rounds (the rounds' lowest and highest beside it); the latencies are of "
            "single appends, over all rounds. turnlog's default (the first row) counts an event's tokens "
            "after its commit, on the next read that needs them, so no writer waits for tiktoken; "
            '`token_counting="inline"` counts them before each append, and the catch-up row counts them '
            "right after each append, as that read would.\n\n"
            + R.table(
                [
                    "store",
                    "messages",
                    "rate",
                    "rounds: lowest – highest",
                    "p50 latency",
                    "p99 latency",
                    "turnlog ÷ store (rate)",
                ],
                rows,
            )
        )
        if t and peers_present:
            fastest = max(peers_present, key=lambda n: a[n]["rate"])
            r1 = t["rate"] / a[fastest]["rate"]
            targets.add(
                "append",
                f"durable append vs the fastest peer ({label(fastest)})",
                "≥ 1.2×",
                f"{r1:.2f}× ({R.rate(t['rate'])} vs {R.rate(a[fastest]['rate'])})",
                r1 >= 1.2,
            )
        if t and "sqlite" in a:
            r2 = t["rate"] / a["sqlite"]["rate"]
            targets.add(
                "append",
                "durable append vs plain sqlite3, same durability",
                "≥ 0.7×",
                f"{r2:.2f}× ({R.rate(t['rate'])} vs {R.rate(a['sqlite']['rate'])})",
                r2 >= 0.7,
            )
    if "batch" in res:
        b = res["batch"]
        t = b.get("turnlog")
        rows = []
        for n in [*NAMES, "turnlog+count"]:
            if n not in b:
                continue
            v = b[n]
            rows.append(
                [
                    label(n),
                    f"{v['messages']:,}",
                    R.rate(v["rate"]),
                    spread(v),
                    R.ratio(t["rate"], v["rate"], "rate") if t and n != "turnlog" else "",
                ]
            )
        yield (
            "### 1b. Batch append\n\n"
            f"{cfg.batch_total:,} messages in transactions of {cfg.batch_size:,}, interleaved batch by batch "
            f"(LangGraph alone afterwards), in {cfg.repeats} rounds on fresh stores; rate = the median "
            "round's. "
            "turnlog's default defers token counting to just after the commit; the row "
            "“batch + deferred counts caught up” adds the time `catch_up_tokens()` then took to count "
            "them all.\n\n"
            + R.table(
                ["store", "messages", "rate", "rounds: lowest – highest", "turnlog ÷ store (rate)"], rows
            )
        )
        if t and "sqlite" in b:
            r = t["rate"] / b["sqlite"]["rate"]
            targets.add(
                "batch",
                "batch append vs plain sqlite3's single transaction",
                "≥ 0.8×",
                f"{r:.2f}× ({R.rate(t['rate'])} vs {R.rate(b['sqlite']['rate'])})",
                r >= 0.8,
            )

    # -- load ------------------------------------------------------------------------------------
    if "load" in res:
        ld = res["load"]
        t = ld.get("turnlog")
        rows = [
            [
                label(n),
                f"{v['items']:,}",
                R.seconds(v["median"]),
                R.seconds(v["p99"]),
                v["repeats"],
                R.ratio(t["median"], v["median"], "time") if t and n != "turnlog" else "",
            ]
            for n, v in ld.items()
        ]
        yield (
            f"### Loading a whole {cfg.batch_total:,}-message session\n\n"
            "Each store's own read of the whole session, decoded into its message objects "
            "(turnlog: `read_session`, validated events; plain sqlite3: `json.loads` of each row).\n\n"
            + R.table(["store", "items", "median", "max", "repeats", "turnlog ÷ store (time)"], rows)
        )
        if t and "sqlite" in ld:
            r = t["median"] / ld["sqlite"]["median"]
            targets.add(
                "load",
                f"loading a whole {cfg.batch_total:,}-message session vs plain sqlite3",
                "≤ 1.5×",
                f"{r:.2f}× ({R.seconds(t['median'])} vs {R.seconds(ld['sqlite']['median'])})",
                r <= 1.5,
            )
