"""Rendering a built context in a provider's format: OpenAI chat-completions messages, Anthropic
messages (system apart, tool_use / tool_result blocks, same-role turns merged), or text for people."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from turnlog.projections.context_types import ContextMessage


def render(messages: Sequence[ContextMessage], fmt: str) -> Any:
    """The messages in format ``fmt`` (``openai``, ``anthropic`` or ``text``)."""
    if fmt == "openai":
        return [to_openai(m) for m in messages]
    if fmt == "anthropic":
        return to_anthropic(messages)
    if fmt == "text":
        return to_text(messages)
    raise ValueError(f"unknown format {fmt!r}")


def to_openai(message: ContextMessage) -> dict[str, Any]:
    """One OpenAI chat-completions message."""
    out: dict[str, Any] = {"role": message.role}
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
        out["content"] = message.content
        if message.name:  # set by a transcript export (the tool's name), not by built contexts
            out["name"] = message.name
        return out
    if message.role == "assistant" and message.tool_calls:
        out["content"] = message.content or None
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    else:
        out["content"] = message.content
    if message.name:
        out["name"] = message.name
    return out


def to_anthropic(messages: Sequence[ContextMessage]) -> dict[str, Any]:
    """An Anthropic Messages API request body's ``system`` and ``messages``."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, block: dict[str, Any]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].append(block)
        else:
            turns.append({"role": role, "content": [block]})

    for message in messages:
        if message.role == "system" and message.mode != "notice" and not turns:
            system.append(message.content)
        elif message.role == "system":
            # Anthropic has no system turns after the first message: say it as the user.
            add("user", {"type": "text", "text": message.content})
        elif message.role == "user":
            add("user", {"type": "text", "text": message.content})
        elif message.role == "assistant":
            if message.content:
                add("assistant", {"type": "text", "text": message.content})
            for call in message.tool_calls:
                add(
                    "assistant",
                    {"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call.arguments)},
                )
            if not message.content and not message.tool_calls:
                add("assistant", {"type": "text", "text": ""})
        else:
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
            if message.is_error:
                block["is_error"] = True
            add("user", block)
    return {"system": "\n\n".join(system), "messages": turns}


def to_text(messages: Sequence[ContextMessage]) -> str:
    """The context as people read it."""
    parts = []
    for message in messages:
        label: str = message.role
        if message.name:
            label += f" ({message.name})"
        if message.role == "tool":
            label += f" [{message.tool_call_id}]" + (" error" if message.is_error else "")
        if message.mode != "full":
            label += f" · {message.mode}"
        body = message.content
        for call in message.tool_calls:
            body += ("\n" if body else "") + f"→ {call.name}({call.arguments})"
        parts.append(f"── {label} · {message.tokens} tokens\n{body}")
    return "\n\n".join(parts)


def _input(arguments: str) -> Any:
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}
