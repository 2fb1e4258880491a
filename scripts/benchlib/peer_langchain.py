"""LangChain ``SQLChatMessageHistory`` (SQLAlchemy engine on SQLite) and ``trim_messages(
strategy="last", include_system=True, start_on="human")`` with the shared tiktoken counter."""

from __future__ import annotations

import json
import warnings
from typing import Any, ClassVar

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)
from sqlalchemy import create_engine, event

from benchlib.base import SESSION, Peer
from benchlib.counting import PRIME, count_message
from benchlib.workload import Msg


def to_lc(msg: Msg) -> BaseMessage:
    if msg.kind == "system":
        return SystemMessage(msg.content)
    if msg.kind == "user":
        return HumanMessage(msg.content)
    if msg.kind == "assistant":
        return AIMessage(msg.content)
    if msg.kind == "call":
        args = json.loads(msg.arguments or "{}")
        return AIMessage(msg.content, tool_calls=[{"name": msg.tool_name, "args": args, "id": msg.call_id}])
    return ToolMessage(msg.content, tool_call_id=msg.call_id, name=msg.tool_name)


def lc_to_chat(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message as the OpenAI chat message it is sent as."""
    content = message.content if isinstance(message.content, str) else json.dumps(message.content)
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
    if isinstance(message, AIMessage):
        out: dict[str, Any] = {"role": "assistant", "content": content}
        if message.tool_calls:
            out["content"] = content or None
            out["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": json.dumps(call["args"])},
                }
                for call in message.tool_calls
            ]
        return out
    role = "system" if isinstance(message, SystemMessage) else "user"
    return {"role": role, "content": content}


def token_counter(messages: list[BaseMessage]) -> int:
    """The shared counter, as LangChain calls it: on a list of messages, every time."""
    return PRIME + sum(count_message(lc_to_chat(m)) for m in messages)


def trim(messages: list[BaseMessage], budget: int, counter: Any = token_counter) -> list[BaseMessage]:
    return trim_messages(
        messages,
        max_tokens=budget,
        token_counter=counter,
        strategy="last",
        include_system=True,
        start_on="human",
    )


class LangChainPeer(Peer):
    name: ClassVar[str] = "langchain"
    label: ClassVar[str] = "LangChain SQLChatMessageHistory"
    packages: ClassVar[tuple[str, ...]] = ("langchain-community", "langchain-core", "SQLAlchemy")
    durability: ClassVar[str] = (
        "WAL and synchronous=FULL set by the benchmark on every SQLAlchemy connection (connect event)"
    )
    strategy: ClassVar[str] = (
        'messages (whole session), then trim_messages(strategy="last", include_system=True, start_on="human")'
    )

    def open(self) -> None:
        self.engine = create_engine(f"sqlite:///{self.path}")

        @event.listens_for(self.engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = FULL")
            cursor.close()

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from langchain_community.chat_message_histories import SQLChatMessageHistory

            self.history = SQLChatMessageHistory(session_id=SESSION, connection=self.engine)

    def close(self) -> None:
        self.history.session_maker.remove()
        self.engine.dispose()

    def append_one(self, msg: Msg) -> None:
        self.history.add_message(to_lc(msg))

    def append_batch(self, msgs: list[Msg]) -> None:
        self.history.add_messages([to_lc(m) for m in msgs])

    def load(self) -> list[Any]:
        return self.history.messages

    def build(self, budget: int) -> tuple[list[dict[str, Any]], int]:
        kept = trim(self.history.messages, budget)
        return [lc_to_chat(m) for m in kept], token_counter(kept)
