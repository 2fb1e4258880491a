"""OpenAI Agents SDK ``SQLiteSession`` (async ``add_items`` / ``get_items``, run with asyncio):
Responses-API input items, then "load, then trim the tail" with the shared tiktoken counter."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from agents import SQLiteSession

from benchlib.base import SESSION, Peer
from benchlib.counting import trim_tail
from benchlib.workload import Msg


def to_items(msg: Msg, index: int) -> list[dict[str, Any]]:
    """A workload message as the SDK stores a run's items (a call's text is its own message item)."""
    if msg.kind in ("system", "user"):
        return [{"role": msg.kind, "content": msg.content}]
    text = {
        "id": f"msg_{index:08d}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": msg.content, "annotations": []}],
    }
    if msg.kind == "assistant":
        return [text]
    if msg.kind == "call":
        call = {
            "id": f"fc_{index:08d}",
            "type": "function_call",
            "call_id": msg.call_id,
            "name": msg.tool_name,
            "arguments": msg.arguments,
            "status": "completed",
        }
        return [text, call] if msg.content else [call]
    return [{"type": "function_call_output", "call_id": msg.call_id, "output": msg.content}]


def to_chat_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items as chat messages for counting: an assistant text and the calls right after it are one
    message, as the model sees them."""
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            if out and out[-1]["role"] == "assistant" and "tool_calls" not in out[-1]:
                out[-1]["tool_calls"] = [call]
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
        elif kind == "message":
            text = "".join(part.get("text", "") for part in item["content"])
            out.append({"role": item["role"], "content": text})
        else:
            out.append({"role": item["role"], "content": item["content"]})
    return out


class OpenAIAgentsPeer(Peer):
    name: ClassVar[str] = "openai-agents"
    label: ClassVar[str] = "OpenAI Agents SDK SQLiteSession"
    packages: ClassVar[tuple[str, ...]] = ("openai-agents", "openai")
    durability: ClassVar[str] = (
        "WAL set by the SDK; synchronous=FULL is SQLite's compiled default here (the SDK opens its own "
        "per-thread connections, no hook to set it)"
    )
    strategy: ClassVar[str] = "get_items() (whole session), then the newest items while they fit"

    def open(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.session = SQLiteSession(SESSION, self.path)
        self.count = 0

    def close(self) -> None:
        self.session.close()
        self.loop.close()

    def append_one(self, msg: Msg) -> None:
        self.count += 1
        self.loop.run_until_complete(self.session.add_items(to_items(msg, self.count)))

    def append_batch(self, msgs: list[Msg]) -> None:
        items = []
        for msg in msgs:
            self.count += 1
            items += to_items(msg, self.count)
        self.loop.run_until_complete(self.session.add_items(items))

    def load(self) -> list[Any]:
        return self.loop.run_until_complete(self.session.get_items())

    def build(self, budget: int) -> tuple[list[dict[str, Any]], int]:
        return trim_tail(to_chat_messages(self.load()), budget)
