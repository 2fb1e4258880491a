"""The checkpointer's own work in a graph turn, apart from LangGraph's engine (beside issue 17's
"≥ 1.2× PostgresSaver on append"): the ``get_tuple``, ``put`` and ``put_writes`` calls a one-node
graph makes over its turns are recorded once (in memory, by a recording InMemorySaver), then replayed,
call after call on one thread, into LangGraph's PostgresSaver and into TurnlogSaver on the same
server, in alternating rounds (a thread of its own each round). Both savers return from each write
once it is committed (PostgresSaver on an autocommit connection, TurnlogSaver after its append's
commit), so a round ends with everything durable on both sides. A graph turn
(``postgres_bench.saver_turns``) adds LangGraph's engine, the same for both, around these calls.

The calls are copied with one memo, so a message passed again in a later checkpoint is the same
object there, as LangGraph passes it; and the messages a turn's read returned are, in the writes
that follow it, replaced by those the replaying saver's own read returned, as in a graph (TurnlogSaver
then stores only the messages a checkpoint adds, as it does under LangGraph)."""

from __future__ import annotations

import copy
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

Call = tuple[str, tuple[Any, ...]]
"""A recorded call: ``"get_tuple"``, ``"put"`` or ``"put_writes"`` and its arguments, its config
reduced to what a saver reads of it (the thread, namespace and parent checkpoint, and the run's
metadata); a ``get_tuple``'s are its config and the messages the read returned."""


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
    """The saver calls of ``turns`` turns of the bench's one-node graph (as saver_turns runs it)."""
    from langgraph.checkpoint.memory import InMemorySaver

    calls: list[Call] = []
    memo: dict[int, Any] = {}  # one memo for every call: an object passed again is the same copy

    class Recording(InMemorySaver):
        def get_tuple(self, config: Any) -> Any:
            found = super().get_tuple(config)
            calls.append(("get_tuple", copy.deepcopy((_plain(config), _messages(found)), memo)))
            return found

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


def _messages(found: Any) -> list[Any]:
    """The messages of a ``get_tuple``'s checkpoint ([] when there is none)."""
    if found is None:
        return []
    messages = (found.checkpoint.get("channel_values") or {}).get("messages")
    return list(messages) if isinstance(messages, list) else []


def _reading_own(args: tuple[Any, ...], own: dict[int, Any]) -> tuple[Any, ...]:
    """A ``put``'s arguments with the messages the turn's recorded read returned replaced by those
    the replaying saver's read returned (``own``: recorded object's id -> the saver's object)."""
    config, checkpoint, metadata, new_versions = args
    values = checkpoint.get("channel_values") or {}
    messages = values.get("messages")
    if not isinstance(messages, list):
        return args
    mine = [own.get(id(message), message) for message in messages]
    return config, {**checkpoint, "channel_values": {**values, "messages": mine}}, metadata, new_versions


def replay(saver: Any, calls: list[Call]) -> float:
    """Seconds to make ``calls`` on ``saver``, one after the other."""
    start = time.perf_counter()
    own: dict[int, Any] = {}
    for name, args in calls:
        if name == "get_tuple":
            config, recorded = args
            own = dict(zip(map(id, recorded), _messages(saver.get_tuple(config)), strict=False))
        elif name == "put" and own:
            saver.put(*_reading_own(args, own))
        else:
            getattr(saver, name)(*args)
    return time.perf_counter() - start


def saver_appends(turns: int, rounds: int, savers: Callable[[], Any]) -> dict[str, Any]:
    """Turns' worth of saver calls per second on each saver, the median of ``rounds`` alternating rounds
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
