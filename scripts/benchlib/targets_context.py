"""The results document's tables of context builds as the session grows and of what the contexts
hold, with the targets they judge."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from benchlib import report as R
from benchlib.config import Config
from benchlib.peers import PEERS
from benchlib.targets_base import Targets, label


def context_tables(res: dict[str, Any], cfg: Config, names: list[str], targets: Targets) -> Iterator[str]:
    """Sections 2 and 3: a table each, in that order, for those measured."""
    # -- 2. builds -------------------------------------------------------------------------------
    if "build" in res:
        bd = res["build"]
        t_all = bd.get("turnlog", {})
        rows = []
        for size in cfg.sizes:
            for n in ("turnlog", "sqlite-tiktoken", *PEERS):
                v = bd.get(n, {}).get(size)
                if v is None:
                    continue
                tv = t_all.get(size)
                rows.append(
                    [
                        f"{size:,}",
                        label(n),
                        R.seconds(v["warm_median"]),
                        R.seconds(v["warm_p99"]),
                        v["warm_n"],
                        f"{R.seconds(v['reopen_median'])} ({v['reopen_n']})",
                        (
                            f"{R.seconds(v['after_median'])} / {R.seconds(v['after_p99'])} ({v['after_n']})"
                            if v["after_n"]
                            else "—"
                        ),
                        f"{v['tokens']:,}",
                        R.ratio(tv["warm_median"], v["warm_median"], "time") if tv and n != "turnlog" else "",
                    ]
                )
        skipped = [
            f"{label(n)} above {m:,} messages"
            for n, m in cfg.peer_max_size.items()
            if n in names and any(s > m for s in cfg.sizes)
        ]
        yield (
            f"### 2. Building the next model context under an {8000:,}-token budget\n\n"
            f"Every store and size first gets the same {cfg.probe_turns} typical turns appended (a turn: "
            "the messages between two model calls, "
            f"{res.get('probe_events', 0):.1f} messages on average, one durable append each), so every "
            "later build reads the same tail and only the session's length differs. "
            "after a turn: the build right after each of those turns, for the stores that keep counts — "
            "for turnlog it includes counting the new messages' tokens (deferred counting) and "
            "advancing the materialized projections (median / p99). Stores that keep no counts count "
            "at every build, so for them a build after a turn is a warm build. "
            "warm: the same open store, repeated builds (median and p99; fewer repeats for slow stores, "
            f"at least {cfg.warm_min}, about {cfg.warm_seconds:.0f} s per store and size). after reopen: "
            "a fresh process opens the store and builds once (median of n; the OS file cache is warm; "
            "the tokenizer is loaded before the clock starts)."
            + (f" Not measured: {'; '.join(skipped)} (a build there takes minutes)." if skipped else "")
            + "\n\n"
            + R.table(
                [
                    "messages",
                    "store",
                    "warm median",
                    "warm p99",
                    "builds",
                    "after reopen (n)",
                    "after a turn: median / p99 (n)",
                    "tokens",
                    "turnlog ÷ store (warm median)",
                ],
                rows,
            )
        )
        mid = 20_000 if 20_000 in cfg.sizes else cfg.sizes[-1]
        tv = t_all.get(mid)
        if tv:
            targets.add(
                "build",
                f"context build at {mid:,} messages (warm median)",
                "≤ 5 ms",
                R.seconds(tv["warm_median"]),
                tv["warm_median"] <= 0.005,
            )
            sdk = bd.get("openai-agents", {}).get(mid)
            if sdk:
                r = sdk["warm_median"] / tv["warm_median"]
                targets.add(
                    "build",
                    f"context build at {mid:,} vs OpenAI Agents SDK session",
                    "≥ 100× faster",
                    f"{r:,.0f}× ({R.seconds(tv['warm_median'])} vs {R.seconds(sdk['warm_median'])})",
                    r >= 100,
                )
        small, large = cfg.sizes[0], cfg.sizes[-1]
        if small in t_all and large in t_all and small != large:
            ts, tl = t_all[small], t_all[large]
            r = tl["after_median"] / ts["after_median"]
            targets.add(
                "flat",
                f"build after a turn at {large:,} ÷ at {small:,} messages (median; includes the catch-up)",
                "≤ 1.5×",
                f"{r:.2f}× ({R.seconds(tl['after_median'])} vs {R.seconds(ts['after_median'])})",
                r <= 1.5,
            )
            rw = tl["warm_median"] / ts["warm_median"]
            targets.add(
                "flat",
                f"warm build at {large:,} ÷ at {small:,} messages (median)",
                "(for the record)",
                f"{rw:.2f}× ({R.seconds(tl['warm_median'])} vs {R.seconds(ts['warm_median'])})",
                None,
            )

    # -- 3. quality ------------------------------------------------------------------------------
    if "quality" in res:
        q = res["quality"]
        names = {
            "turnlog": "turnlog `build_context`",
            "tail": "load, then trim the tail: OpenAI Agents SDK, eventsourcing, sqlite3 floors",
            "langchain": 'LangChain / LangGraph `trim_messages(strategy="last", include_system=True, '
            'start_on="human")`',
        }
        rows = [
            [
                names[k],
                v["contexts"],
                f"{100 * v['median_used']:.1f}%",
                v["orphans"],
                v["system_only"],
                v.get("count_mismatch", "—"),
            ]
            for k, v in q.items()
        ]
        yield (
            "### 3. What the context holds\n\n"
            f"Contexts built along the {cfg.batch_total:,}-message session, every {cfg.quality_step}th "
            "message (one later when that message is a tool call, so no call is open): median share of "
            "the 8,000-token budget used, contexts holding a tool result whose call is not in them "
            "(the provider answers 400), contexts holding nothing but the system message. For turnlog "
            "(built with `at=position`), each context is also counted independently with tiktoken "
            "(OpenAI's rule: 3 per message, every string value, 1 per name, 3 to prime) and compared "
            "with `total_tokens`. The peers' strategies are applied to the same messages with the same "
            "counter.\n\n"
            + R.table(
                [
                    "strategy",
                    "contexts",
                    "median budget used",
                    "with an orphan",
                    "system only",
                    "count ≠ total",
                ],
                rows,
            )
        )
        tq = q.get("turnlog")
        if tq:
            targets.add(
                "quality",
                "budget used (median)",
                "≥ 90%",
                f"{100 * tq['median_used']:.1f}%",
                tq["median_used"] >= 0.9,
            )
            targets.add(
                "quality", "contexts with an orphan tool result", "0", str(tq["orphans"]), tq["orphans"] == 0
            )
            targets.add(
                "quality",
                "contexts with only the system message",
                "0",
                str(tq["system_only"]),
                tq["system_only"] == 0,
            )
            targets.add(
                "quality",
                "total_tokens equals an independent tiktoken count",
                "every context",
                f"{tq['contexts'] - tq['count_mismatch']} of {tq['contexts']}",
                tq["count_mismatch"] == 0,
            )
