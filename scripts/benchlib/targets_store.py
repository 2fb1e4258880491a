"""The results document's tables of rebuilding the projections and of the file's size, with the
targets they judge."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

from benchlib import report as R
from benchlib.config import Config
from benchlib.targets_base import Targets, label


def store_tables(res: dict[str, Any], cfg: Config, targets: Targets) -> Iterator[str]:
    """Sections 4 and 5: a table each, in that order, for those measured."""
    # -- 4. rebuild ------------------------------------------------------------------------------
    if "rebuild" in res:
        rb = res["rebuild"]
        g, s = rb["generated"], rb["rebuilt"]
        rows = [
            [
                f"{g['events']:,} events, {g['sessions']:,} sessions, full-size workload texts",
                R.size(g["bytes"]),
                R.seconds(s["seconds"]),
                R.size(s["peak_bytes"]),
                f"{s['events'] / s['seconds']:,.0f} events/s",
            ]
        ]
        if "realistic" in rb:
            rr = rb["realistic"]
            rows.append(
                [
                    f"{rr['events']:,} events, one session (the build section's store)",
                    "",
                    R.seconds(rr["seconds"]),
                    R.size(rr["peak_bytes"]),
                    f"{rr['events'] / rr['seconds']:,.0f} events/s",
                ]
            )
        yield (
            "### 4. Rebuilding every materialized projection from zero\n\n"
            "`materializer(store).rebuild()` in a fresh process that does only that; peak memory is that "
            "process's peak resident set (`VmHWM`), imports included. The store is written with "
            f"batch appends of one session each (about {g['per_session']:,} messages, each opening with "
            "the system message), full-size messages taken from the build section's long session, "
            "passed over as often as needed (a tool output met again shares its blob). Making it took "
            f"{g['append_s']:.0f} s of appends, {g['count_s']:.0f} s of token counting and "
            f"{g['catch_up_s']:.0f} s of projection catch-up. The build section's store is rebuilt too.\n\n"
            + R.table(["store", "file", "rebuild", "peak memory", "speed"], rows)
        )
        targets.add(
            "rebuild",
            f"rebuild of {g['events']:,} events: time",
            "< 60 s",
            R.seconds(s["seconds"]),
            s["seconds"] < 60 if g["events"] >= 1_000_000 else None,
        )
        targets.add(
            "rebuild",
            f"rebuild of {g['events']:,} events: peak memory",
            "< 1 GiB",
            R.size(s["peak_bytes"]),
            s["peak_bytes"] < 2**30 if g["events"] >= 1_000_000 else None,
        )

    # -- 5. size ---------------------------------------------------------------------------------
    if "size" in res:
        sz = res["size"]
        t = sz.get("turnlog")
        rows = [
            [
                label(n),
                v.get("journal_mode", "?"),
                R.size(v["bytes"]),
                f"{v['per_message']:,.0f} B",
                R.ratio(t["bytes"], v["bytes"], "size") if t and n != "turnlog" else "",
            ]
            for n, v in sz.items()
        ]
        split = ""
        if t and t["split"]:
            groups: dict[str, int] = collections.Counter()
            for name, b in t["split"].items():
                if name.startswith(("events", "sqlite_autoindex_events")):
                    groups["events table and its indexes"] += b
                elif name.startswith(("blobs", "sqlite_autoindex_blobs")):
                    groups["content blobs (tool outputs over 1 KiB; zstd from 32 KiB)"] += b
                elif name.startswith("ctx_"):
                    groups["context index projection"] += b
                else:
                    groups["other projections and metadata"] += b
            split = "\n\nturnlog's file by part (SQLite `dbstat`):\n\n" + R.table(
                ["part", "bytes", "per message"],
                [[k, R.size(v), f"{v / cfg.batch_total:,.0f} B"] for k, v in groups.most_common()],
            )
        yield (
            f"### 5. File size of a {cfg.batch_total:,}-message session\n\n"
            "After the WAL is checkpointed into the main file. turnlog's includes its materialized "
            "projections and token counts.\n\n"
            + R.table(
                ["store", "journal mode in the file", "file", "per message", "turnlog ÷ store (size)"], rows
            )
            + split
        )
        if t and "sqlite" in sz:
            r = t["bytes"] / sz["sqlite"]["bytes"]
            targets.add(
                "size",
                "file size vs the plain sqlite3 floor",
                "≤ 1.15×",
                f"{r:.2f}× ({t['per_message']:,.0f} vs {sz['sqlite']['per_message']:,.0f} B per message)",
                r <= 1.15,
            )
