"""Rendering a built context in a provider's format: OpenAI chat-completions messages, Anthropic
messages (system apart, tool_use / tool_result blocks, same-role turns merged), or text for people."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from turnlog.projections.context_types import ContextMessage


MAX_BREAKPOINTS = 4
"""Anthropic's limit on ``cache_control`` blocks per request."""

EPHEMERAL = {"type": "ephemeral"}
"""Anthropic's cache breakpoint marker (the default five-minute lifetime)."""


def render(
    messages: Sequence[ContextMessage],
    fmt: str,
    *,
    cache_head: int | None = None,
    cache_previous: int | None = None,
) -> Any:
    """The messages in format ``fmt`` (``openai``, ``anthropic`` or ``text``). ``cache_head`` (a
    cache-stable build: how many leading messages are its head) and ``cache_previous`` (how many
    the previous call sent, when this one starts with them): Anthropic's format marks its cache
    breakpoints (see :func:`mark_cache`)."""
    if fmt == "openai":
        return [to_openai(m) for m in messages]
    if fmt == "anthropic":
        body = to_anthropic(messages)
        return body if cache_head is None else mark_cache(body, messages, cache_head, cache_previous)
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


def mark_cache(
    body: dict[str, Any], messages: Sequence[ContextMessage], head: int, previous: int | None = None
) -> dict[str, Any]:
    """An Anthropic body with ``cache_control`` breakpoints for a cache-stable context: on the last
    block of the last message (the next call starts with all of this one unless the cut moves, so
    it reads it all from the cache) and at the end of the head (system, the artifact index, the
    first user message and what else comes before the history: it stays when the cut moves, so a
    call after a move still reads it from the cache); and, given ``previous`` (how many leading
    messages the previous call sent, this one starting with them), at the end of those: Anthropic
    looks for a cached prefix only a limited number of blocks (20) back from a breakpoint, and one
    turn of many parallel tool calls adds more. At most three of Anthropic's four; never on an empty
    text block, which cannot carry one. A prefix shorter than the model's minimum (1,024 tokens on
    most models) is simply not cached: the marker costs nothing then."""
    if body["system"]:
        # Always a list of blocks here (a block can carry a marker; a string cannot): the same
        # form on every call, so the prefix's bytes never depend on where the markers are.
        body["system"] = [{"type": "text", "text": body["system"]}]
    turns: list[dict[str, Any]] = body["messages"]
    marks: list[dict[str, Any]] = []
    last = _last_markable(turns, len(turns))
    if last is not None:
        marks.append(last)
    for end in (_head_end(body, messages, head), _head_end(body, messages, previous or 0)):
        if end is not None and all(end is not m for m in marks):
            marks.append(end)
    if not marks:
        return body
    for block in marks[:MAX_BREAKPOINTS]:
        block["cache_control"] = dict(EPHEMERAL)
    return body


def _last_markable(turns: list[dict[str, Any]], end: int) -> dict[str, Any] | None:
    """The last block, of the turns before ``end``, that may carry a breakpoint."""
    blocks: list[dict[str, Any]] = [b for turn in turns[:end] for b in turn["content"] if _markable(b)]
    return blocks[-1] if blocks else None


def _markable(block: dict[str, Any]) -> bool:
    """Whether a block may carry a breakpoint (an empty text block may not)."""
    return block["type"] != "text" or bool(block["text"])


def _head_end(body: dict[str, Any], messages: Sequence[ContextMessage], head: int) -> dict[str, Any] | None:
    """The block that ends the context's head (its first ``head`` messages): the last content block
    they make (the system prompt's own block when the head is the system prompt alone); None when
    the head is the whole context (the last-message mark covers it) or empty."""
    if head <= 0 or head >= len(messages):
        return None
    # Messages of the head that the Anthropic body holds as turns (system messages after the first
    # turn are said as the user, in turns of their own or merged): count the blocks they make.
    head_blocks = _blocks(messages[:head])
    turn_blocks = [(t, block) for t in body["messages"] for block in t["content"]]
    if head_blocks == 0:
        # The head is the system prompt alone: its block carries the marker.
        system: list[dict[str, Any]] = body["system"] or []
        return system[-1] if system else None
    if head_blocks > len(turn_blocks):
        return None
    candidates = [b for _, b in turn_blocks[:head_blocks] if _markable(b)]
    return candidates[-1] if candidates else None


def _blocks(messages: Sequence[ContextMessage]) -> int:
    """Content blocks of the turns these leading messages make in an Anthropic body."""
    count = 0
    turns_started = False
    for message in messages:
        if message.role == "system" and message.mode != "notice" and not turns_started:
            continue  # part of the body's system text
        turns_started = True
        if message.role == "assistant":
            count += (1 if message.content else 0) + len(message.tool_calls)
            if not message.content and not message.tool_calls:
                count += 1
        else:
            count += 1
    return count


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
