"""What the context index keeps of each message for a build: the event's id and a compact body (its
text, its name, tool calls or call id), so that a build renders the tail from the rows it reads
anyway, with one ``json.loads`` a row, instead of reading and validating each event again. A long
text that the default policy caps is left out of the body (its capped form is remembered per store:
see context_capping): a build that needs it whole, or capped in a way not made before, reads its
event."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic_core import from_json

from turnlog.projections.context_types import ContextPolicy
from turnlog.store import MessageAppended, ToolCall, ToolReturned

INLINE_CHARS = 8192
"""Texts up to this many characters are always kept in the body."""

_DEFAULT_CAPS = {
    "tool": ContextPolicy.model_fields["max_tool_tokens"].default,
    "message": ContextPolicy.model_fields["max_message_tokens"].default,
}
"""Longer texts are kept when the default policy shows them whole: within its caps."""


@dataclass(slots=True)
class Item:
    """A message of the index as a build shows it: what its event says, decoded from the body."""

    event_id: str
    content: str | None
    """The text; None when it is longer than ``INLINE_CHARS`` (read from the event when needed)."""
    length: int
    """Characters of the text."""
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    tool_call_id: str = ""
    tool_name: str | None = None
    is_error: bool = False
    artifact_id: str | None = None


def body_of(event: MessageAppended | ToolReturned, tokens: int, *, always_kept: bool = False) -> str:
    """The body the context index stores for a message or a tool return of ``tokens`` stored
    tokens (``always_kept``: a system message or the first user message, shown whole)."""
    kind = "tool" if isinstance(event, ToolReturned) else "message"
    inline = always_kept or len(event.content) <= INLINE_CHARS or tokens <= _DEFAULT_CAPS[kind]
    content = event.content if inline else None
    if isinstance(event, ToolReturned):
        body: list[object] = [
            "t",
            content,
            len(event.content),
            event.tool_call_id,
            event.tool_name,
            int(event.is_error),
            event.artifact_id,
        ]
    else:
        calls = None if event.tool_calls is None else [[c.id, c.name, c.arguments] for c in event.tool_calls]
        body = ["m", content, len(event.content), event.name, calls]
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def item_of(event_id: str, body: str) -> Item:
    """The item a stored body describes (trusted: the index wrote it from a validated event; pydantic's
    own JSON parser, a few times as fast as ``json.loads`` on these texts)."""
    data = from_json(body)
    if data[0] == "t":
        _, content, length, call_id, tool_name, is_error, artifact_id = data
        return Item(event_id, content, length, None, None, call_id, tool_name, bool(is_error), artifact_id)
    _, content, length, name, calls = data
    tool_calls = (
        None
        if calls is None
        else tuple(ToolCall.model_construct(id=i, name=n, arguments=a) for i, n, a in calls)
    )
    return Item(event_id, content, length, name, tool_calls)


def other_texts(item: Item) -> list[str]:
    """The texts of a message, other than its content, that its stored token count includes."""
    texts = [item.name] if item.name else []
    for call in item.tool_calls or ():
        texts += [call.id, call.name, call.arguments]
    return texts
