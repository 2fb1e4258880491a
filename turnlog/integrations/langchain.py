"""LangChain: :class:`TurnlogChatMessageHistory`, a ``BaseChatMessageHistory`` kept in turnlog.

Each message is one ordinary turnlog event (system, human and AI messages as ``message_appended``, an
AI message's tool calls as its ``tool_calls``, a ``ToolMessage`` as ``tool_returned``) carrying
LangChain's own lossless form (``message_to_dict``) in its ``origin``, so what ``messages`` returns
compares equal to what was added, and ``turnlog log``/``context``/``audit`` work on the session.
``clear()`` is a compensating event (``session_rewound`` to version 0, reason ``clear``): the log keeps
what was cleared.

LangChain deprecated ``BaseChatMessageHistory`` memory (langchain-core 1.6.4) in favour of LangGraph
persistence: this adapter is for existing apps; new ones should use LangGraph with turnlog's saver.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from turnlog.integrations import StoreLike, open_for_adapter, require

require("langchain_core", "langchain")

from langchain_core.chat_history import BaseChatMessageHistory  # noqa: E402  (after the check)
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)

from turnlog.projections.live import live_marks  # noqa: E402
from turnlog.store import (  # noqa: E402
    NO_SESSION,
    Event,
    InvalidEventError,
    MessageAppended,
    Origin,
    RecordedEvent,
    SessionRewound,
    SessionStarted,
    ToolCall,
    ToolReturned,
    UsageRecorded,
    VersionConflictError,
)
from turnlog.store.rows import gc_paused  # noqa: E402

__all__ = ["FRAMEWORK", "TurnlogChatMessageHistory"]

FRAMEWORK = "langchain"
"""The ``origin.framework`` (and ``source``) this adapter writes."""

_MESSAGE_TYPES = ("message_appended", "tool_returned")
_ID = re.compile(r"\S{1,200}")
_CHAT_ROLES = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant"}
_CHAT_ROLES |= {"system": "system", "developer": "system"}


class TurnlogChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat message history stored in a turnlog session.

    ``session_id`` is the turnlog session (1 to 200 characters, no whitespace). ``db`` is a store's
    path or an open :class:`store.SQLiteStore` (left open by :meth:`close`). Unlike
    ``SQLChatMessageHistory``, one instance serves both the sync and the async methods.
    """

    def __init__(self, session_id: str, db: StoreLike = "turnlog.db") -> None:
        self.session_id = session_id
        self._store, self._owned = open_for_adapter(db)

    # --- reads ---------------------------------------------------------------------------------

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # a property, as documented
        """The session's live messages, oldest first, exactly as they were added."""
        with gc_paused():  # many objects that all survive (see store.rows.gc_paused)
            # Only each event's place and origin are read: this adapter's messages are their origins.
            rows = self._store.read_origins(self.session_id)
            # The materialized live index: the cost is the ranges a clear made dead, not a fold of the log.
            marks = live_marks(self._store, self.session_id, rows)
            live = [r for r, alive in zip(rows, marks, strict=True) if alive and r.type in _MESSAGE_TYPES]
            # Messages another writer put in the session carry no LangChain origin: read them whole.
            others = [r.version for r in live if r.framework != FRAMEWORK]
            read = self._store.read_versions(self.session_id, others) if others else []
            events = {r.version: r for r in read}
            found = (
                messages_from_dict([r.item])[0]
                if r.framework == FRAMEWORK
                else _to_message(events[r.version])
                for r in live
            )
            return [m for m in found if m is not None]

    async def aget_messages(self) -> list[BaseMessage]:
        return await asyncio.to_thread(lambda: self.messages)

    # --- writes --------------------------------------------------------------------------------

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append the messages in one atomic batch: all are stored when this returns, or none."""
        events: list[Event] = []
        for message in messages:
            events.append(_to_event(message))
            events.extend(_usage(message))
        if not events:
            return
        records: list[RecordedEvent] | None = None
        if self._store.head_version(self.session_id) == 0:
            try:
                started = SessionStarted(metadata={"framework": FRAMEWORK})
                records = self._store.append(self.session_id, [started, *events], expected_version=NO_SESSION)
            except VersionConflictError:
                pass  # another writer started the session first: append after it
        if records is None:
            records = self._store.append(self.session_id, events)
        if any(isinstance(e, ToolReturned) for e in events):
            from turnlog.loop import after_adapter_commit  # the session policy's output views

            after_adapter_commit(self._store, self.session_id, records)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await asyncio.to_thread(self.add_messages, list(messages))

    def clear(self) -> None:
        """Empty the history: a ``session_rewound`` to version 0 (reason ``clear``), never a delete.

        Messages added afterwards start a new generation of the same turnlog session."""
        if self._store.head_version(self.session_id) == 0:
            return  # nothing stored: like SQLChatMessageHistory, nothing to do (and no session made)
        self._store.append(self.session_id, [SessionRewound(to_version=0, reason="clear", source=FRAMEWORK)])

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)

    def close(self) -> None:
        """Close the store if this history opened it from a path."""
        if self._owned:
            self._store.close()


# --- mapping -------------------------------------------------------------------------------------


def _origin(message: BaseMessage) -> Origin:
    try:
        # Through JSON text: what is stored is exactly what reads back (tuples become lists, as in
        # SQLChatMessageHistory, which stores json.dumps(message_to_dict(m))).
        item = json.loads(json.dumps(message_to_dict(message)))
    except (TypeError, ValueError) as exc:
        raise InvalidEventError(
            f"a {type(message).__name__} (id {message.id!r}) holds a value that is not JSON ({exc}); "
            "keep only JSON values in its content, additional_kwargs, metadata and artifact"
        ) from exc
    return Origin(framework=FRAMEWORK, item=item)


def _call_id(raw: str) -> str:
    """The turnlog id of a LangChain tool call id: itself when it is a valid turnlog id, else a stable
    digest of it (the same for the call and its ToolMessage, so the pair stays a pair)."""
    if _ID.fullmatch(raw):
        return raw
    return "lc-" + hashlib.sha256(raw.encode()).hexdigest()[:40]


def _tool_calls(message: AIMessage) -> tuple[ToolCall, ...] | None:
    calls: dict[str, ToolCall] = {}
    for call in message.tool_calls:
        if call.get("id") is None:
            continue  # no ToolMessage can answer it; the origin keeps it
        call_id = _call_id(str(call["id"]))
        name = call["name"][:200] or "unknown"
        arguments = json.dumps(call.get("args", {}), ensure_ascii=False, default=str)
        calls.setdefault(call_id, ToolCall(id=call_id, name=name, arguments=arguments))
    return tuple(calls.values()) or None


def _to_event(message: BaseMessage) -> Event:
    if not isinstance(message, BaseMessage):
        raise InvalidEventError(
            f"add_messages takes LangChain messages (BaseMessage), not {type(message).__name__}"
        )
    origin = _origin(message)
    text = str(message.text)
    name = message.name[:200] if message.name else None
    if isinstance(message, ToolMessage):
        return ToolReturned(
            tool_call_id=_call_id(message.tool_call_id),
            tool_name=name,
            content=text,
            is_error=message.status == "error",
            origin=origin,
        )
    if isinstance(message, AIMessage):
        return MessageAppended(
            role="assistant", content=text, name=name, tool_calls=_tool_calls(message), origin=origin
        )
    if isinstance(message, SystemMessage):
        return MessageAppended(role="system", content=text, name=name, origin=origin)
    if isinstance(message, HumanMessage):
        return MessageAppended(role="user", content=text, name=name, origin=origin)
    if isinstance(message, ChatMessage):
        role = _CHAT_ROLES.get(message.role.lower(), "user")
        return MessageAppended(role=role, content=text, name=name or message.role[:200], origin=origin)
    # FunctionMessage and other kinds: shown as a user-side message named after its kind.
    return MessageAppended(role="user", content=text, name=name or message.type[:200], origin=origin)


def _usage(message: BaseMessage) -> list[Event]:
    """An AI message's ``usage_metadata`` as a ``usage_recorded`` event, so turnlog's cost ledger
    counts what the provider billed (a clear never takes it back: money stays spent)."""
    usage = getattr(message, "usage_metadata", None)
    if not isinstance(message, AIMessage) or not usage:
        return []
    meta = message.response_metadata
    model = str(meta.get("model_name") or meta.get("model") or "unknown") or "unknown"
    details_in = usage.get("input_token_details") or {}
    details_out = usage.get("output_token_details") or {}
    return [
        UsageRecorded(
            model=model,
            input_tokens=max(0, int(usage.get("input_tokens", 0))),
            output_tokens=max(0, int(usage.get("output_tokens", 0))),
            cache_read_tokens=max(0, int(details_in.get("cache_read", 0) or 0)),
            cache_write_tokens=max(0, int(details_in.get("cache_creation", 0) or 0)),
            reasoning_tokens=max(0, int(details_out.get("reasoning", 0) or 0)),
            response_id=meta.get("id") if isinstance(meta.get("id"), str) else None,
        )
    ]


def _to_message(record: RecordedEvent) -> BaseMessage | None:
    event = record.event
    if not isinstance(event, MessageAppended | ToolReturned):
        return None
    if event.origin is not None and event.origin.framework == FRAMEWORK:
        item: Any = event.origin.item
        return messages_from_dict([item])[0]
    # A message another writer (an importer, another adapter) put in the session: its LangChain form.
    if isinstance(event, ToolReturned):
        return ToolMessage(
            content=event.content,
            tool_call_id=event.tool_call_id,
            name=event.tool_name,
            status="error" if event.is_error else "success",
        )
    if event.role == "system":
        return SystemMessage(content=event.content, name=event.name)
    if event.role == "user":
        return HumanMessage(content=event.content, name=event.name)
    calls = [
        {"name": c.name, "args": _args(c.arguments), "id": c.id, "type": "tool_call"}
        for c in event.tool_calls or ()
    ]
    return AIMessage(content=event.content, name=event.name, tool_calls=calls)


def _args(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}
