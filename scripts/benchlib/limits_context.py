"""Profiles of a missed context build, rebuild or size target for the results document: cProfile in
the same run, and the build measured with an index the builder could use."""

from __future__ import annotations

import os
import shutil
import time
from typing import TYPE_CHECKING, Any

from benchlib import report as R
from benchlib.limits_append import Timed

if TYPE_CHECKING:
    from benchlib.runner import Bench


class _UseRetainedIndex(Timed):
    """An experiment, not a change to turnlog: rewrites on the fly the two statements that read a
    session's first user message and system messages so SQLite uses the partial index
    ``ctx_messages_retained`` that the context index already keeps for them."""

    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        self.rewritten = 0

    def execute(self, sql: str, *args: Any) -> Any:
        plain = "FROM ctx_messages WHERE session_id = ? AND first_user = 1"
        if plain in sql:
            sql = sql.replace(
                plain,
                "FROM ctx_messages INDEXED BY ctx_messages_retained WHERE session_id = ? "
                "AND (role = 'system' OR first_user = 1) AND first_user = 1",
            )
            self.rewritten += 1
        elif "(role = 'system' OR first_user = 1)" in sql and "FROM ctx_messages WHERE" in sql:
            sql = sql.replace(
                "FROM ctx_messages WHERE", "FROM ctx_messages INDEXED BY ctx_messages_retained WHERE"
            )
            self.rewritten += 1
        return self.conn.execute(sql, *args)


def _copy_store(bench: Bench, path: Any, name: str) -> Any:
    folder = bench.dir / "profile"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.db"
    for suffix in ("", "-wal"):
        for f in folder.glob(f"{name}.db{suffix}"):
            f.unlink()
        if os.path.exists(str(path) + suffix):
            shutil.copy(str(path) + suffix, str(target) + suffix)
    return target


def _after_turns(bench: Bench, path: Any, wrap: bool) -> tuple[float, float, int]:
    """Median build after each of 30 typical turns, median warm build, statements rewritten."""
    from benchlib.peer_turnlog import TurnlogPeer

    peer = TurnlogPeer(path)
    peer.open()
    wrapper = _UseRetainedIndex(peer.store._conn) if wrap else None
    if wrapper is not None:
        peer.store._conn = wrapper
    peer.build(8000)
    after, warm = [], []
    for turn in bench.workload.probe_turns(30, salt=2):
        for m in turn:
            peer.append_one(m)
        t = time.perf_counter()
        peer.build(8000)
        after.append(time.perf_counter() - t)
    for _ in range(30):
        t = time.perf_counter()
        peer.build(8000)
        warm.append(time.perf_counter() - t)
    if wrapper is not None:
        peer.store._conn = wrapper.conn
    peer.close()
    return R.median(after), R.median(warm), wrapper.rewritten if wrapper else 0


def limit_build(bench: Bench) -> str:
    from benchlib.peer_turnlog import to_event
    from turnlog.projections.context import ContextPolicy, build_context
    from turnlog.store.sqlite import SQLiteStore

    sizes = [
        s for s in bench.cfg.sizes if ("turnlog", s) in bench.stores and bench.stores[("turnlog", s)].exists()
    ]
    size = max(sizes)
    copy = _copy_store(bench, bench.stores[("turnlog", size)], "build-prof")
    store = SQLiteStore.open(copy)
    policy = ContextPolicy(budget=8000)
    build_context(store, "bench-session", policy)
    probes = bench.workload.probe_turns(10, salt=3)

    def after_turns() -> None:
        for turn in probes:
            for m in turn:
                store.append("bench-session", [to_event(m)])
            build_context(store, "bench-session", policy)

    parts = ["### Context build", ""]
    parts.append(
        bench.profile(f"10 builds at {size:,} messages, each after appending a typical turn", after_turns, 16)
    )
    store.close()
    rows = []
    rewritten = 0
    for s in sizes:
        path = bench.stores[("turnlog", s)]
        base = _after_turns(bench, _copy_store(bench, path, f"as-is-{s}"), False)
        fixed = _after_turns(bench, _copy_store(bench, path, f"fixed-{s}"), True)
        rows.append(
            [
                f"{s:,}",
                R.seconds(base[0]),
                R.seconds(base[1]),
                R.seconds(fixed[0]),
                R.seconds(fixed[1]),
                fixed[2],
            ]
        )
        rewritten += fixed[2]
    if not rewritten:
        # The code measured already reads those rows through the index: the experiment is moot.
        rows = [[r[0], r[1], r[2]] for r in rows]
        parts.append("")
        parts.append(
            "Builds on copies of the stores after 30 more typical turns (median; the statements that an "
            "earlier turnlog answered with a scan of the whole session now use their index):\n\n"
            + R.table(["messages", "after a turn", "warm"], rows)
        )
        return "\n".join(parts)
    parts.append("")
    parts.append(
        "The same measurement on copies of the stores, once as turnlog is and once with the two "
        "statements that look up a session's retained messages (`_Builder._retained` in "
        "projections/context.py) and its first user message (`ContextIndex.apply` in "
        "projections/context_index.py) rewritten on the fly through a connection wrapper to use the "
        "partial index `ctx_messages_retained` (`INDEXED BY`). Without it SQLite answers both with "
        "a range scan of the session's whole primary key, so they grow with the session. This is an "
        "experiment in the benchmark only; turnlog's code is unchanged.\n\n"
        "Proposed: in `_Builder._retained`, query `ctx_messages INDEXED BY ctx_messages_retained` for "
        "`(role = 'system' OR first_user = 1)` (a dedicated statement rather than `_rows`); in "
        "`ContextIndex.apply`'s `state()`, look the first user message up with `AND (role = 'system' OR "
        "first_user = 1) AND first_user = 1` through the same index (a partial index whose WHERE is an "
        "OR serves only queries that repeat that OR), or keep `has_first_user` in a per-session row. "
        "What remains after a turn is flat: counting the new messages' tokens, capping new tool "
        "outputs, and two small commits (the deferred counts, the projections' checkpoint), each "
        "waiting for an fsync at synchronous=FULL.\n\n"
        + R.table(
            [
                "messages",
                "after a turn, as is",
                "warm, as is",
                "after a turn, index used",
                "warm, index used",
                "statements rewritten",
            ],
            rows,
        )
    )
    return "\n".join(parts)


def limit_rebuild(bench: Bench) -> str:
    from turnlog.projections.registry import materializer
    from turnlog.store.sqlite import SQLiteStore

    path = bench.ensure_store("turnlog", bench.cfg.batch_total)
    copy = bench.dir / "profile" / "rebuild.db"
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, copy)
    if os.path.exists(str(path) + "-wal"):
        shutil.copy(str(path) + "-wal", str(copy) + "-wal")
    store = SQLiteStore.open(copy)
    text = bench.profile(
        f"rebuild() of the {bench.cfg.batch_total:,}-message store", lambda: materializer(store).rebuild()
    )
    store.close()
    return "### Rebuild\n\n" + text


def limit_size(bench: Bench) -> str:
    return "### File size\n\nSee turnlog's file by part under the size table."
