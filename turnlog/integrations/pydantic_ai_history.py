"""``TurnlogHistory(db=..., budget=...)``: a pydantic-ai capability that sends turnlog's budgeted
context of a conversation stored by :class:`~turnlog.integrations.pydantic_ai.TurnlogConversationStore`.

It replaces only what is sent (``request_context.messages``, before each attempt), never the run's
persistent history, so ``save`` still stores every message whole. What is sent: turnlog's context of the
stored conversation under the token budget (tool calls never split from their returns, the system prompt
and first user message kept, long tool outputs capped by tokens), followed by the run's messages not yet
saved.
"""

from __future__ import annotations

from typing import Any

from turnlog.integrations import StoreLike, open_for_adapter, require
from turnlog.projections.context import build_context
from turnlog.projections.context_types import ContextMessage
from turnlog.projections.stable_cuts import session_context_policy

require("pydantic_ai", "pydantic-ai")

from pydantic_ai import messages as _m  # noqa: E402
from pydantic_ai.capabilities.abstract import AbstractCapability  # noqa: E402
from pydantic_ai.models import ModelRequestContext  # noqa: E402
from pydantic_ai.tools import RunContext  # noqa: E402

from turnlog.integrations.pydantic_ai import TurnlogConversationStore  # noqa: E402

__all__ = ["TurnlogHistory", "to_model_messages"]


class TurnlogHistory(AbstractCapability[Any]):
    """Send turnlog's budgeted context instead of the whole stored history."""

    def __init__(self, db: StoreLike, budget: int, *, session_id: str | None = None) -> None:
        store, _ = open_for_adapter(db)
        self.conversations = TurnlogConversationStore(db=store)
        self.budget = budget
        self.session_id = session_id

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        session = self.session_id or ctx.conversation_id
        record = await self.conversations.read_record(session) if session else None
        if session is None or record is None or record.head_id is None:
            return request_context  # nothing stored yet: the run's own messages are the whole history
        stored = len(await self.conversations.read_history(record.head_id))
        # The budget with the session's stored policy (``turnlog policy``): a stored cache_stable
        # keeps each request's history a prefix of the next while the budget allows.
        store = self.conversations.store
        built = build_context(store, session, session_context_policy(store, session, self.budget))
        # pydantic-ai sends the run's instructions on their own; the system message turnlog keeps for
        # them (the conversation's first request's) would send them twice.
        instructions = {m.instructions for m in request_context.messages if isinstance(m, _m.ModelRequest)}
        shown = [m for m in built.messages if not (m.role == "system" and m.content in instructions)]
        context = to_model_messages(shown)
        request_context.messages = [*context, *request_context.messages[stored:]]
        return request_context


def to_model_messages(messages: list[ContextMessage]) -> list[_m.ModelMessage]:
    """turnlog context messages as pydantic-ai messages: consecutive prompts and tool returns form one
    request, each assistant message one response (its tool calls kept with their returns)."""
    out: list[_m.ModelMessage] = []
    parts: list[Any] = []
    for message in messages:
        if message.role == "assistant":
            if parts:
                out.append(_m.ModelRequest(parts=parts))
                parts = []
            response: list[Any] = [_m.TextPart(message.content)] if message.content else []
            response += [_m.ToolCallPart(c.name, c.arguments, tool_call_id=c.id) for c in message.tool_calls]
            out.append(_m.ModelResponse(parts=response))
        elif message.role == "tool":
            parts.append(
                _m.ToolReturnPart(
                    message.name or "tool", message.content, tool_call_id=message.tool_call_id or ""
                )
            )
        elif message.role == "system":
            parts.append(_m.SystemPromptPart(message.content))
        else:
            parts.append(_m.UserPromptPart(message.content))
    if parts:
        out.append(_m.ModelRequest(parts=parts))
    return out
