"""The PostgreSQL section of scripts/bench (issue 17): turnlog's PostgreSQL store against the plain
psycopg floor at the same durability (``synchronous_commit=on``) and against LangGraph's
PostgresSaver, in the same run on the same server. ``--only postgres`` runs it alone and splices it
into bench-results/RESULTS.md. The server is ``$TURNLOG_BENCH_PG``, else ``$TURNLOG_TEST_PG``, else
``postgresql://root@127.0.0.1:5432/test``; every store gets a schema of its own, dropped afterwards."""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

HEADING = "## PostgreSQL (issue 17)"
BUDGET = 8000


def server() -> str:
    return (
        os.environ.get("TURNLOG_BENCH_PG")
        or os.environ.get("TURNLOG_TEST_PG")
        or "postgresql://root@127.0.0.1:5432/test"
    )


@contextmanager
def schema() -> Iterator[str]:
    import psycopg

    name = f"tl_bench_{uuid.uuid4().hex[:10]}"
    try:
        yield name
    finally:
        with psycopg.connect(server(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def _message(i: int) -> dict[str, Any]:
    role = "user" if i % 2 == 0 else "assistant"
    text = (
        f"turn {i}: the invoice total for order {i * 7} is off by a cent; checking the rounding in money.py. "
        * 2
    )
    return {"type": "message_appended", "role": role, "content": text}


# --- the floor: plain psycopg ---------------------------------------------------------------------------


def _floor_table(conn: Any, name: str) -> None:
    conn.execute(f"CREATE SCHEMA {name}")
    conn.execute(
        f"CREATE TABLE {name}.msgs (position bigserial PRIMARY KEY, session text NOT NULL, "
        "msg text NOT NULL, tokens integer NOT NULL)"
    )
    conn.execute(f"CREATE INDEX msgs_by_session ON {name}.msgs (session, position)")


def floor_append(n: int, batch: int = 1, *, explicit: bool = False) -> float:
    """INSERT + COMMIT (``batch`` rows per commit, executemany) into the floor's table: events/s.
    One row per commit is one INSERT in autocommit mode, its own transaction: one round trip and
    one durable commit, the least the server allows; ``explicit``: BEGIN, INSERT, COMMIT instead
    (three round trips), as ``with conn.transaction():`` sends them."""
    import psycopg

    with schema() as name, psycopg.connect(server(), autocommit=True) as conn:
        _floor_table(conn, name)
        insert = f"INSERT INTO {name}.msgs (session, msg, tokens) VALUES (%s, %s, %s)"
        rows = [("s", json.dumps(_message(i)), 40) for i in range(n)]
        start = time.perf_counter()
        if batch == 1 and not explicit:
            for row in rows:
                conn.execute(insert, row)
        else:
            for first in range(0, n, batch):
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(insert, rows[first : first + batch])
        return n / (time.perf_counter() - start)


def turnlog_append(n: int, batch: int = 1, *, counting: str | None = None) -> float:
    """``store.append`` of ``batch`` events per call on a store opened with ``turnlog.open_store``:
    events/s (``counting``: its ``token_counting``, else PostgreSQL's default, inline)."""
    import turnlog

    with schema() as name:
        url = f"{server()}?schema={name}"
        store = turnlog.open_store(url, **({"token_counting": counting} if counting else {}))
        try:
            events = [_message(i) for i in range(n)]
            # The projections' tables are made at the first append: not timed (the floor's table
            # is made before its clock starts too).
            store.append("warm-up", [_message(0)])
            start = time.perf_counter()
            for first in range(0, n, batch):
                store.append("s", events[first : first + batch])
            return n / (time.perf_counter() - start)
        finally:
            store.close()


def turn_then_build(turns: int, counting: str) -> float:
    """Milliseconds of an agent's turn: two messages appended (two durable appends), then a context
    built, on a session of 400 messages, with ``token_counting=counting``."""
    import turnlog

    with schema() as name:
        store = turnlog.open_store(f"{server()}?schema={name}", token_counting=counting)
        try:
            policy = turnlog.ContextPolicy(budget=BUDGET)
            for i in range(200):
                store.append("s", [_message(2 * i), _message(2 * i + 1)])
            turnlog.build_context(store, "s", policy)
            start = time.perf_counter()
            for i in range(turns):
                store.append("s", [_message(1000 + 2 * i)])
                store.append("s", [_message(1001 + 2 * i)])
                turnlog.build_context(store, "s", policy)
            return (time.perf_counter() - start) * 1000 / turns
        finally:
            store.close()


def _writer(url: str, session: str, n: int, queue: Any, start_line: Any, floor: bool) -> None:
    """One writer process: ``n`` appends of one event to its own session; puts its (start, end)
    wall-clock times. Not timed: the store opened, one append to a session of its own (the
    tokenizer loaded, the statements prepared, as in a worker that has been running; the floor makes
    one insert too), then every writer waits at ``start_line`` so that they all start together."""
    events = [_message(i) for i in range(n)]
    if floor:
        import psycopg

        table, url = url.split("|")
        with psycopg.connect(url, autocommit=True) as conn:
            rows = [(session, json.dumps(event), 40) for event in events]
            insert = f"INSERT INTO {table}.msgs (session, msg, tokens) VALUES (%s, %s, %s)"
            conn.execute(insert, (f"{session}-warm-up", json.dumps(_message(0)), 40))
            start_line.wait()
            start = time.time()
            for row in rows:
                conn.execute(insert, row)  # autocommit: its own transaction, one round trip
            queue.put((start, time.time()))
        return
    import turnlog

    store = turnlog.open_store(url)
    try:
        store.append(f"{session}-warm-up", [_message(0)])
        start_line.wait()
        start = time.time()
        for event in events:
            store.append(session, [event])
        queue.put((start, time.time()))
    finally:
        store.close()


def writers(processes: int, n: int, *, floor: bool = False) -> float:
    """``processes`` writer processes, each appending ``n`` events (one per commit) to a session of
    its own in one store (``floor``: plain psycopg INSERT + COMMIT into the floor's table): events/s
    in aggregate, from the first writer's first append to the last one's last. The processes are
    spawned, not forked: a fork would hand each writer this process's heap (every figure measured
    so far), which its garbage collections would then walk, where a worker has only its own."""
    import psycopg

    import turnlog

    context = multiprocessing.get_context("spawn")
    with schema() as name:
        if floor:
            with psycopg.connect(server(), autocommit=True) as conn:
                _floor_table(conn, name)
            url = f"{name}|{server()}"
        else:
            url = f"{server()}?schema={name}"
            turnlog.open_store(url).close()  # the schema and the projections' tables, made once
        queue = context.Queue()
        start_line = context.Barrier(processes)
        procs = [
            context.Process(target=_writer, args=(url, f"w{i}", n, queue, start_line, floor))
            for i in range(processes)
        ]
        for proc in procs:
            proc.start()
        times = [queue.get(timeout=600) for _ in procs]
        for proc in procs:
            proc.join()
        return processes * n / (max(end for _, end in times) - min(start for start, _ in times))


def build(messages: int, repeat: int) -> tuple[float, float]:
    """A warm context build at ``messages`` (ms, median), and the floor: the tail read of the same
    messages from a plain table until the budget is full, decoded (ms, median). The two take turns,
    a block of builds each, ``BUILD_ROUNDS`` times: each side's figure is the median of all its
    builds, so the server's and the machine's drift falls on both alike (one side timed after the
    other read 1.5× in one run and 2.5× in the next on the same code)."""
    import psycopg

    import turnlog

    events = [_message(i) for i in range(messages)]
    with schema() as ours_name, schema() as floor_name:
        store = turnlog.open_store(f"{server()}?schema={ours_name}")
        conn = psycopg.connect(server(), autocommit=True)
        try:
            for first in range(0, messages, 1000):
                store.append("s", events[first : first + 1000])
            _floor_table(conn, floor_name)
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {floor_name}.msgs (session, msg, tokens) VALUES (%s, %s, %s)",
                    [("s", json.dumps(e), 45) for e in events],
                )
            policy = turnlog.ContextPolicy(budget=BUDGET)
            # The first build applies the projections (appends leave them to the next read): the
            # statistics are taken after it, as autovacuum would on a store that grew by this much.
            turnlog.build_context(store, "s", policy)
            _analyze(ours_name)
            _analyze(floor_name)

            def ours() -> None:
                turnlog.build_context(store, "s", policy)

            def tail() -> None:
                used, rows = 0, []
                for msg, tokens in conn.execute(
                    f"SELECT msg, tokens FROM {floor_name}.msgs WHERE session = %s "
                    "ORDER BY position DESC LIMIT 400",
                    ("s",),
                ):
                    if used + tokens > BUDGET:
                        break
                    used += tokens
                    rows.append(json.loads(msg))

            ours()
            tail()
            times: dict[str, list[float]] = {"ours": [], "floor": []}
            block = max(1, repeat // BUILD_ROUNDS)
            for _ in range(BUILD_ROUNDS):
                times["ours"] += _times(ours, block)
                times["floor"] += _times(tail, block)
        finally:
            store.close()
            conn.close()
    return statistics.median(times["ours"]), statistics.median(times["floor"])


BUILD_ROUNDS = 10
"""Turns the two sides of the build figure take (a block of builds each)."""


def _analyze(name: str) -> None:
    """Statistics for the planner on every table of a schema, as autovacuum keeps them on a store in
    use: both sides are measured as a long-lived store runs, not as a table just filled."""
    import psycopg

    with psycopg.connect(server(), autocommit=True) as conn:
        for (table,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (name,)
        ).fetchall():
            conn.execute(f"ANALYZE {name}.{table}")


SAVER_ROUNDS = 8
"""Rounds of the saver figure: each side's turns/s is the median of its rounds."""
LONG_THREAD = 500
"""Messages a long thread holds before the long-thread LangGraph row is timed."""
SAVER_WARM = 5
"""Turns each side runs before it is timed (a fresh graph and thread pay one-time costs: the
graph's first run, the server's first plans, psycopg's statements prepared at their fifth use)."""


@contextmanager
def saver_pair() -> Iterator[tuple[Any, Any]]:
    """LangGraph's PostgresSaver and TurnlogSaver, each in a fresh schema of the bench's server."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    from turnlog.integrations.langgraph import TurnlogSaver

    with schema() as theirs_schema, schema() as ours_schema:
        with psycopg.connect(server(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {theirs_schema}")
        theirs_url = f"{server()}?options=-csearch_path%3D{theirs_schema}"
        with (
            PostgresSaver.from_conn_string(theirs_url) as theirs,
            TurnlogSaver(f"{server()}?schema={ours_schema}") as ours,
        ):
            theirs.setup()
            yield theirs, ours


def saver_turns(turns: int, rounds: int = SAVER_ROUNDS, warm: int = SAVER_WARM) -> tuple[float, float]:
    """A one-node LangGraph graph invoked ``turns`` times on one thread, checkpointed by LangGraph's
    PostgresSaver and by TurnlogSaver on the same server, in ``rounds`` rounds that take turns (after
    ``warm`` turns each, two messages a turn: a long thread is a thread warmed long; the side that
    goes first alternates, so a load that rises or falls during the run falls on both alike):
    turns/s of each, the median of its rounds."""
    from benchlib.saver_append import one_node_graph

    builder = one_node_graph()
    per_round = max(1, turns // rounds)

    def runner(saver: Any) -> Callable[[], float]:
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:6]}"}}
        for i in range(warm):
            graph.invoke({"messages": [("user", f"warm {i}")]}, config)

        def rate() -> float:
            start = time.perf_counter()
            for i in range(per_round):
                graph.invoke({"messages": [("user", f"turn {i}")]}, config)
            return per_round / (time.perf_counter() - start)

        return rate

    with saver_pair() as (theirs, ours):
        peer_round, ours_round = runner(theirs), runner(ours)
        peer, mine = [], []
        for round_ in range(rounds):
            if round_ % 2:
                mine.append(ours_round())
                peer.append(peer_round())
            else:
                peer.append(peer_round())
                mine.append(ours_round())
    return statistics.median(peer), statistics.median(mine)


ROUNDS = 5
"""Rounds of the append figures: the floor and turnlog take turns, each round a fresh table or
store, and each figure is the median of its rounds (the machine's load falls on both alike)."""


def _interleaved(measures: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Each measure run ``ROUNDS`` times, in turns with the others; the median rate of each."""
    rates: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(ROUNDS):
        for name, measure in measures.items():
            rates[name].append(measure())
    return {name: statistics.median(found) for name, found in rates.items()}


def _times(fn: Callable[[], Any], repeat: int) -> list[float]:
    """Milliseconds of each of ``repeat`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return times


def run(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    n = 300 if quick else 2000
    result: dict[str, Any] = {"quick": quick, "server": server().split("@")[-1].split("?")[0]}
    from benchlib.pg_rows import least_append, rows_append

    log("postgres: durable appends, one event per commit")
    result.update(
        _interleaved(
            {
                "floor_append": lambda: floor_append(n // ROUNDS),
                "floor_append_explicit": lambda: floor_append(n // ROUNDS, explicit=True),
                "rows_append": lambda: rows_append(n // ROUNDS),
                "least_append": lambda: least_append(n // ROUNDS),
                "turnlog_append_deferred": lambda: turnlog_append(n // ROUNDS, counting="deferred"),
                "turnlog_append": lambda: turnlog_append(n // ROUNDS),
            }
        )
    )
    log("postgres: batches of 1,000")
    result.update(
        _interleaved(
            {
                "floor_batch": lambda: floor_append(max(1000, n * 5 // ROUNDS), batch=1000),
                "turnlog_batch": lambda: turnlog_append(max(1000, n * 5 // ROUNDS), batch=1000),
                "turnlog_batch_deferred": lambda: turnlog_append(
                    max(1000, n * 5 // ROUNDS), batch=1000, counting="deferred"
                ),
            }
        )
    )
    log("postgres: a turn (two appends), then a build, token counts made inline and deferred")
    turns = 20 if quick else 100
    result["turn_inline"], result["turn_deferred"] = (
        1000 / rate
        for rate in _interleaved(
            {
                "inline": lambda: 1000 / turn_then_build(turns, "inline"),
                "deferred": lambda: 1000 / turn_then_build(turns, "deferred"),
            }
        ).values()
    )
    log("postgres: writer processes on sessions of their own")
    per_writer = n // 4 if quick else 500
    result["writers"], result["floor_writers"] = {}, {}
    for p in (1, 2, 4, 8):  # the two sides in turns, at each number of writers
        result["writers"][p] = writers(p, per_writer)
        result["floor_writers"][p] = writers(p, per_writer, floor=True)
    log("postgres: context builds")
    sizes = (2000,) if quick else (2000, 20000, 200000)
    result["build"] = {m: build(m, 20 if quick else 100) for m in sizes}
    log("postgres: LangGraph PostgresSaver and TurnlogSaver")
    result["saver"] = saver_turns(30 if quick else 200)
    log("postgres: the same on a short thread and on a long one")
    result["saver_timed"] = timed = 8 if quick else 40
    result["saver_short"] = saver_turns(timed, 4)
    result["saver_long"] = saver_turns(timed, 4, warm=LONG_THREAD // 2)
    from benchlib.saver_append import saver_appends

    log("postgres: the savers' own calls, a graph's get_tuple/put/put_writes replayed")
    result["saver_appends"] = saver_appends(30 if quick else 200, 3 if quick else SAVER_ROUNDS, saver_pair)
    return result


def _least_row(result: dict[str, Any]) -> list[str]:
    """The most a durable append of this design can reach: those statements plus the least client
    work of their events (benchlib/floor_rows.py ``LeastWork``), nothing else."""
    if "least_append" not in result:
        return []
    best = (1 / result["floor_append"]) / (1 / result["rows_append"] + 1 / result["least_append"])
    return [
        "| the least client work of those appends' events, timed alone (the event object made from the "
        "message, its payload JSON, its chain's three hashes; benchlib/floor_rows.py `LeastWork`): those "
        "statements plus this are the most a durable append of this design reaches (events/s) | "
        f"{1 / (1 / result['rows_append'] + 1 / result['least_append']):,.0f} | "
        f"{result['floor_append']:,.0f} | at best {best:.2f}× | "
        f"≥ 0.8×: {'out of reach of this design' if best < 0.8 else 'within reach'} |"
    ]


def render(result: dict[str, Any], command: str) -> str:
    writers_ = result["writers"]
    scale = writers_[8] / writers_[1]
    one = result["turnlog_append"] / result["floor_append"]
    peer, ours = result["saver"]
    lines = [
        HEADING,
        "",
        f"Measured by `{command}` against PostgreSQL at {result['server']}, in one run: turnlog's "
        "PostgreSQL store, the plain psycopg floor at the same durability (`synchronous_commit=on`: "
        "INSERT + COMMIT into a table with a session index; one event per commit is a lone INSERT in "
        "autocommit mode, one round trip), and LangGraph's PostgresSaver. The append "
        f"figures are the medians of {ROUNDS} rounds in which the floor and turnlog take turns; the "
        f"LangGraph figures, of {SAVER_ROUNDS} rounds in which the two savers take turns (the one "
        f"going first alternating), each after {SAVER_WARM} warm turns on its thread; the builds, the "
        f"medians of every build of {BUILD_ROUNDS} rounds in which a block of turnlog's builds and a "
        "block of the floor's tail reads take turns; the writer figures, turnlog then the floor at "
        "each number of writers.",
        "",
        "| figure | turnlog | floor / peer | ratio | target |",
        "|---|---:|---:|---:|---|",
        f"| durable append, 1 event per commit (events/s) | {result['turnlog_append']:,.0f} | "
        f"{result['floor_append']:,.0f} | {one:.2f}× | ≥ 0.8× floor: {_met(one >= 0.8)} |",
        '| the same, token counts made after the commit (`token_counting="deferred"`) | '
        f"{result['turnlog_append_deferred']:,.0f} | {result['floor_append']:,.0f} | "
        f"{result['turnlog_append_deferred'] / result['floor_append']:.2f}× | |",
        "| the same against the floor's INSERT sent as BEGIN, INSERT, COMMIT (three round trips) | "
        f"{result['turnlog_append']:,.0f} | {result['floor_append_explicit']:,.0f} | "
        f"{result['turnlog_append'] / result['floor_append_explicit']:.2f}× | |",
        "| turnlog's own statements of those appends, sent again by plain psycopg into a copy of the log "
        "(the schema's and the statement's cost on the server, without turnlog's Python) | "
        f"{result['rows_append']:,.0f} | {result['floor_append']:,.0f} | "
        f"{result['rows_append'] / result['floor_append']:.2f}× (turnlog ÷ them: "
        f"{result['turnlog_append'] / result['rows_append']:.2f}×) | |",
        *_least_row(result),
        f"| batch append, 1,000 per commit (events/s) | {result['turnlog_batch']:,.0f} | "
        f"{result['floor_batch']:,.0f} | {result['turnlog_batch'] / result['floor_batch']:.2f}× | |",
        "| the same, token counts made after the commit | "
        f"{result['turnlog_batch_deferred']:,.0f} | {result['floor_batch']:,.0f} | "
        f"{result['turnlog_batch_deferred'] / result['floor_batch']:.2f}× | |",
        "| an agent's turn: two durable appends, then a build (ms; inline counts, the default, against "
        "deferred ones) | "
        f"{result['turn_inline']:.2f} | {result['turn_deferred']:.2f} (deferred) | "
        f"{result['turn_deferred'] / result['turn_inline']:.2f}× as long deferred | |",
    ]
    floors = result["floor_writers"]
    floor_scale = floors[8] / floors[1]
    for processes, rate in writers_.items():
        lines.append(
            f"| {processes} writer process{'es' if processes > 1 else ''}, a session each "
            f"(events/s, total; ratio: to one writer, and to the floor with as many writers) | "
            f"{rate:,.0f} | {floors[processes]:,.0f} | {rate / writers_[1]:.2f}× one; "
            f"{rate / floors[processes]:.2f}× floor | "
            + (
                f"≥ 4× one writer: {_met(scale >= 4)} (the floor itself: {floor_scale:.2f}×) |"
                if processes == 8
                else "|"
            )
        )
    for messages, (ms, floor) in result["build"].items():
        ratio = ms / floor
        target = f"≤ 2× tail read: {_met(ratio <= 2)}" if messages >= 20000 else ""
        lines.append(
            f"| warm context build at {messages:,} messages, budget {BUDGET:,} (ms) | {ms:.2f} | "
            f"{floor:.2f} | {ratio:.1f}× | {target} |"
        )
    lines.append(
        f"| LangGraph graph turns checkpointed (turns/s) | {ours:,.0f} | {peer:,.0f} (PostgresSaver) | "
        f"{ours / peer:.2f}× | ≥ 1.2× PostgresSaver: {_met(ours / peer >= 1.2)} |"
    )
    grown = 2 * result.get("saver_timed", 0)  # two messages a turn
    for key, label in (
        ("saver_short", f"a short thread (its messages {2 * SAVER_WARM}–{2 * SAVER_WARM + grown})"),
        ("saver_long", f"a long thread (its messages {LONG_THREAD}–{LONG_THREAD + grown})"),
    ):
        if key in result:
            theirs, mine = result[key]
            lines.append(
                f"| the same on {label} | {mine:,.0f} | {theirs:,.0f} (PostgresSaver) | "
                f"{mine / theirs:.2f}× | |"
            )
    replayed = result["saver_appends"]
    alone = replayed["turnlog_saver"] / replayed["postgres_saver"]
    lines.append(
        f"| the savers' own calls of a turn ({replayed['calls_per_turn']:.0f}: a read, then put/put_writes; "
        f"replayed one after another; turns/s) | {replayed['turnlog_saver']:,.0f} | "
        f"{replayed['postgres_saver']:,.0f} (PostgresSaver) | {alone:.2f}× | |"
    )
    lines += [
        "",
        f"Writer processes: each session has its own hash chain and the global order is placed after "
        f"commit (docs/backends.md), so writers of different sessions share no lock through their "
        f"commits. Eight writers reach {scale:.2f}× one writer; the plain psycopg floor, with nothing "
        f"shared at all, reaches {floor_scale:.2f}× on this machine ({os.cpu_count()} cores for the "
        "server and every writer)"
        + (
            ": the 4× target assumes cores that are not here"
            if floor_scale < 4
            else ", because its writers' commits share the disk's flushes (PostgreSQL's group commit), "
            "which a slow disk rewards; turnlog's contended writers commit their rows unplaced without a "
            "flush, place every waiting writer's rows under the placing lock (held for CPU time only) and "
            "then wait for one shared flush, so what is left between them is CPU: about 1.2 ms of client "
            "and 1.4 ms of server per contended append on these 2 cores"
        )
        + f", so the figure to read is turnlog against the floor with as many writers, "
        f"{writers_[8] / floors[8]:.2f}× at 8. "
        "A writer alone appends in one round trip and one commit, as the floor's lone INSERT: the "
        "store object remembers the heads its last "
        "append left, and the locks, the server's check of those heads and the inserts go as one "
        "statement prepared on the server, its own transaction (store/pg_fast.py; the values are "
        "parameters, not SQL text); the projections' rows are applied at the writer's next "
        "read or close, as on SQLite. Its tokens are counted before the transaction (PostgreSQL's "
        "default): counted after the commit instead, as on SQLite, the append is a little faster, "
        "but an agent's turn, which appends and then builds, pays more: each count filled in after "
        "the commit is a new row version on the server (see the turn row). "
        "turnlog's own statements of those appends, sent again by plain "
        f"psycopg with their values ready (scripts/benchlib/pg_rows.py), run at "
        f"{result['rows_append'] / result['floor_append']:.2f}× the floor: that is the server's cost "
        "of the schema and the statement (the session's lock and heads checked, the row's unique "
        "keys); what turnlog costs beyond them "
        f"(turnlog ÷ them {result['turnlog_append'] / result['rows_append']:.2f}×) is its client: the "
        "event checked and its tokens counted, its hashes, the pool. A batch of 1,000 copies its rows "
        "(binary COPY) after its checks; checking, hashing and (inline) tokenizing each event is most "
        "of the rest. "
        "A warm build is one prepared statement (the "
        "projections' freshness, the header, the retained rows and the tail, projections/context_start.py) "
        "where the floor reads one query; it joins to their events only the rows whose decoded "
        "texts the store does not remember (a turn's new messages: the rows of the last build are "
        "remembered), answers in binary and leaves the sort to the client; the rest is the "
        "builder's Python.",
        "",
        "The savers' own calls: a graph's `get_tuple`, `put` and `put_writes` calls, recorded once and "
        "replayed into each saver one after another with nothing between them "
        "(scripts/benchlib/saver_append.py; a turn's checkpoints carry the messages the replaying saver "
        "read itself, as in a graph), so each write is a commit of its own on both sides; this row has no "
        "target and shows the saver without LangGraph's engine. In a graph turn, LangGraph hands a step's "
        "writes to the saver from its executor's threads while the step's checkpoint is still being "
        "committed, and TurnlogSaver appends a turn's writes together with the checkpoint that follows "
        "them, one commit where PostgresSaver makes two (turnlog/integrations/langgraph_queue.py): the turns "
        "row is the one the target is read on, as users run the saver. The two rows after it run "
        "the same graph on a short thread and on a long one: PostgresSaver writes a changed "
        "channel's whole value at each checkpoint (the whole message list) and reads it back whole, "
        "where TurnlogSaver writes a checkpoint's new messages and refers to earlier events for the "
        "rest, so PostgresSaver's turn grows faster with the thread; on a short thread TurnlogSaver's "
        "fixed cost a turn shows (its three appends' Python, each a durable commit of its own).",
    ]
    return "\n".join(lines)


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


__all__ = ["HEADING", "render", "run"]
