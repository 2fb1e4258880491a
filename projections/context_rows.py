"""What a build shows of each message of the context index, read from the log itself: the index
keeps a message's text length and whether a build reads its text with the row (``whole``); the rows
query joins each row to its event (and its content blob, when wanted) and the payload is decoded
without validation (store.rows.payload_fields), one parse a row. A long text that the default policy
caps is not read with the row (its capped form is remembered per store: see context_capping): a
build that needs it whole, or capped in a way not made before, reads its event."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from turnlog.projections.context_types import ContextPolicy
from turnlog.store import MessageAppended, ToolCall, ToolReturned

INLINE_CHARS = 8192
"""Texts up to this many characters are always read with their row."""

_DEFAULT_CAPS = {
    "tool": ContextPolicy.model_fields["max_tool_tokens"].default,
    "message": ContextPolicy.model_fields["max_message_tokens"].default,
}
"""Longer texts are read with their row when the default policy shows them whole: within its caps."""


@dataclass(slots=True)
class Item:
    """A message of the index as a build shows it: what its event says, decoded from its payload."""

    event_id: str
    content: str | None
    """The text; None when it is not read with the row (see whole_of; read from the event when needed)."""
    length: int
    """Characters of the text."""
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    tool_call_id: str = ""
    tool_name: str | None = None
    is_error: bool = False
    artifact_id: str | None = None


def whole_of(event: MessageAppended | ToolReturned, tokens: int, *, always_kept: bool = False) -> bool:
    """Whether a build reads the text of a message or a tool return of ``tokens`` stored tokens with
    its row (``always_kept``: a system message or the first user message, shown whole)."""
    kind = "tool" if isinstance(event, ToolReturned) else "message"
    return always_kept or len(event.content) <= INLINE_CHARS or tokens <= _DEFAULT_CAPS[kind]


def item_of(event_id: str, length: int, whole: bool, fields: dict[str, Any], *, tool: bool) -> Item:
    """The item an event's payload fields (store.rows.payload_fields) describe, a tool return's when
    ``tool``; its text only when ``whole`` (else a build reads its event when it needs the text)."""
    content = fields.get("content") if whole else None
    if tool:
        return Item(
            event_id,
            content,
            length,
            None,
            None,
            fields["tool_call_id"],
            fields.get("tool_name"),
            bool(fields.get("is_error", False)),
            fields.get("artifact_id"),
        )
    calls = fields.get("tool_calls")
    tool_calls = (
        None
        if calls is None
        else tuple(
            ToolCall.model_construct(id=c["id"], name=c["name"], arguments=c.get("arguments", "{}"))
            for c in calls
        )
    )
    return Item(event_id, content, length, fields.get("name"), tool_calls)


def item_of_event(event_id: str, event: MessageAppended | ToolReturned, whole: bool) -> Item:
    """The item a validated event describes (a payload of an older schema, upcast by the store)."""
    content = event.content if whole else None
    if isinstance(event, ToolReturned):
        return Item(
            event_id,
            content,
            len(event.content),
            None,
            None,
            event.tool_call_id,
            event.tool_name,
            event.is_error,
            event.artifact_id,
        )
    return Item(event_id, content, len(event.content), event.name, event.tool_calls)


def other_texts(item: Item) -> list[str]:
    """The texts of a message, other than its content, that its stored token count includes."""
    texts = [item.name] if item.name else []
    for call in item.tool_calls or ():
        texts += [call.id, call.name, call.arguments]
    return texts
