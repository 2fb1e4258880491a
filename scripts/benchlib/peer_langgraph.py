"""LangGraph ``SqliteSaver``: a compiled ``StateGraph(MessagesState)`` checkpointing its state on
every update, as an agent does each step (the state holds the whole growing message list); the
context is ``get_state()`` then LangChain's ``trim_messages``, as LangGraph's docs show."""

from __future__ import annotations

import sqlite3
from typing import Any, ClassVar

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph

from benchlib.base import SESSION, Peer
from benchlib.peer_langchain import lc_to_chat, to_lc, token_counter, trim
from benchlib.workload import Msg


def _agent(state: MessagesState) -> dict[str, Any]:
    return {}


class LangGraphPeer(Peer):
    name: ClassVar[str] = "langgraph"
    label: ClassVar[str] = "LangGraph SqliteSaver"
    packages: ClassVar[tuple[str, ...]] = ("langgraph", "langgraph-checkpoint-sqlite", "langgraph-checkpoint")
    durability: ClassVar[str] = (
        "WAL and synchronous=FULL set by the benchmark on the sqlite3 connection it hands to SqliteSaver"
    )
    strategy: ClassVar[str] = "get_state() (whole state), then trim_messages as for LangChain"

    def open(self) -> None:
        self.conn = sqlite3.connect(self.path, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        graph = StateGraph(MessagesState)
        graph.add_node("agent", _agent)
        graph.add_edge(START, "agent")
        graph.add_edge("agent", END)
        self.app = graph.compile(checkpointer=SqliteSaver(self.conn))
        self.config: Any = {"configurable": {"thread_id": SESSION}}
        self.count = len(self.app.get_state(self.config).values.get("messages", []))

    def close(self) -> None:
        self.conn.close()

    def _messages(self, msgs: list[Msg]) -> list[Any]:
        out = []
        for msg in msgs:
            self.count += 1
            lc = to_lc(msg)
            lc.id = f"m{self.count}"
            out.append(lc)
        return out

    def append_one(self, msg: Msg) -> None:
        self.app.update_state(self.config, {"messages": self._messages([msg])})

    def append_batch(self, msgs: list[Msg]) -> None:
        self.app.update_state(self.config, {"messages": self._messages(msgs)})

    def load(self) -> list[Any]:
        return list(self.app.get_state(self.config).values["messages"])

    def build(self, budget: int) -> tuple[list[dict[str, Any]], int]:
        kept = trim(self.load(), budget)
        return [lc_to_chat(m) for m in kept], token_counter(kept)
