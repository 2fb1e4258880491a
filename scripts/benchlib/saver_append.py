"""The checkpointer's own append, apart from LangGraph's engine (issue 17's "≥ 1.2× PostgresSaver on
append"): the ``put`` and ``put_writes`` calls a one-node graph makes over its turns are recorded
once (in memory, by a recording InMemorySaver), then replayed, call after call on one thread, into
LangGraph's PostgresSaver and into TurnlogSaver on the same server, in alternating rounds (a thread
of its own each round). Both savers return from each call once it is committed (PostgresSaver on an
autocommit connection, TurnlogSaver after its append's commit), so a round ends with everything
durable on both sides. A graph turn (``postgres_bench.saver_turns``) adds LangGraph's engine, the
same for both, around these calls: the figure here is the savers' part alone.

The calls are copied with one memo, so a message passed again in a later checkpoint is the same
object there, as LangGraph passes it (TurnlogSaver then stores only the messages a checkpoint
adds). One difference from a graph stays, against TurnlogSaver: a turn's first checkpoint carries
the messages the graph read back at the turn's start (from the recording saver), which TurnlogSaver
has not seen, so it stores that list whole where, in a graph, it knows them from its own read."""

from __future__ import annotations

import copy
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

Call = tuple[str, tuple[Any, ...]]
"""A recorded call: ``"put"`` or ``"put_writes"`` and its arguments, its config reduced to what a
saver reads of it (the thread, namespace and parent checkpoint, and the run's metadata)."""


def _plain(config: Any) -> dict[str, Any]:
    conf = config.get("configurable", {})
    kept = {k: conf[k] for k in ("thread_id", "checkpoint_ns", "checkpoint_id") if k in conf}
    return {"configurable": kept, "metadata": dict(config.get("metadata") or {})}


def one_node_graph() -> Any:
    """The bench's graph (uncompiled): one node that answers each user message."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [("ai", f"noted {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder


def record(turns: int) -> list[Call]:
    """The appends of ``turns`` turns of the bench's one-node graph (as saver_turns runs it)."""
    from langgraph.checkpoint.memory import InMemorySaver

    calls: list[Call] = []
    memo: dict[int, Any] = {}  # one memo for every call: an object passed again is the same copy

    class Recording(InMemorySaver):
        def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            calls.append(("put", copy.deepcopy((_plain(config), checkpoint, metadata, new_versions), memo)))
            return super().put(config, checkpoint, metadata, new_versions)

        def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            calls.append(("put_writes", copy.deepcopy((_plain(config), writes, task_id, task_path), memo)))
            super().put_writes(config, writes, task_id, task_path)

    builder = one_node_graph()
    graph = builder.compile(checkpointer=Recording())
    config: Any = {"configurable": {"thread_id": "recorded"}}
    for i in range(turns):
        graph.invoke({"messages": [("user", f"turn {i}")]}, config)
    return calls


def _on_thread(calls: list[Call], thread_id: str) -> list[Call]:
    """``calls`` moved to another thread (a fresh one for each round, so no round meets stored ids)."""
    moved: list[Call] = []
    for name, args in calls:
        config = copy.deepcopy(args[0])
        config["configurable"]["thread_id"] = thread_id
        config["metadata"]["thread_id"] = thread_id
        moved.append((name, (config, *args[1:])))
    return moved


def replay(saver: Any, calls: list[Call]) -> float:
    """Seconds to make ``calls`` on ``saver``, one after the other."""
    start = time.perf_counter()
    for name, args in calls:
        getattr(saver, name)(*args)
    return time.perf_counter() - start


def saver_appends(turns: int, rounds: int, savers: Callable[[], Any]) -> dict[str, Any]:
    """Turns' worth of appends per second on each saver, the median of ``rounds`` alternating rounds
    (after a warm round each; the side that goes first alternates). ``savers()`` is a context manager
    giving (PostgresSaver, TurnlogSaver)."""
    calls = record(turns)
    rates: dict[str, list[float]] = {"postgres_saver": [], "turnlog_saver": []}
    with savers() as pair:
        for round_ in range(rounds + 1):
            sides = list(zip(rates, pair, strict=True))
            for name, saver in sides[:: -1 if round_ % 2 else 1]:
                elapsed = replay(saver, _on_thread(calls, f"r{round_}-{uuid.uuid4().hex[:8]}"))
                if round_:  # the first round warms both (connections, statements, caches)
                    rates[name].append(turns / elapsed)
    return {
        "calls_per_turn": len(calls) / turns,
        **{name: statistics.median(found) for name, found in rates.items()},
    }
