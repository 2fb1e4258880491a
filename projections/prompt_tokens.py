"""What each model call was sent, estimated from the log: the tokens of the messages before an
assistant message, counted by OpenAI's chat rule (the cookbook's ``num_tokens_from_messages``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from turnlog.projections.context_types import PER_MESSAGE, PER_NAME, PRIME_TOKENS, role_costs
from turnlog.store import MessageAppended, RecordedEvent, Tokenizer, ToolReturned


@dataclass(frozen=True)
class PromptMessage:
    """One message of a prompt, as the rule counts it."""

    role: str
    """Its role (``system``, ``user``, ``assistant``, ``tool``...)."""
    tokens: int
    """Tokens of its values other than the role (content, name, tool calls), as the store counts
    them at append time."""
    named: bool = False
    """Whether it carries a ``name`` (one token more)."""


def message_tokens(message: PromptMessage, tok: Tokenizer) -> int:
    """Tokens one message costs in a prompt: PER_MESSAGE, its role word, its values and PER_NAME
    when it is named."""
    costs = role_costs(tok)
    role = costs[message.role] if message.role in costs else tok.count(message.role)
    return PER_MESSAGE + role + message.tokens + (PER_NAME if message.named else 0)


def prompt_tokens(messages: Iterable[PromptMessage], tok: Tokenizer) -> int:
    """Tokens of a prompt made of ``messages``: each message's cost plus PRIME_TOKENS for the
    reply's priming."""
    return PRIME_TOKENS + sum(message_tokens(m, tok) for m in messages)


def call_estimates(messages: Iterable[PromptMessage], tok: Tokenizer) -> list[int]:
    """For each assistant message, in order, the prompt tokens of every message before it: the
    input of the model call that produced it, when the agent sends its whole history each time
    (as SWE-agent does). One pass, so a long session costs its length once."""
    estimates = []
    sent = PRIME_TOKENS
    for message in messages:
        if message.role == "assistant":
            estimates.append(sent)
        sent += message_tokens(message, tok)
    return estimates


def prompt_messages(records: Iterable[RecordedEvent]) -> list[PromptMessage]:
    """The messages and tool results among stored events, in log order, with the token counts
    stored with them; other events are not sent to a model and are left out. Tool results count
    as ``tool`` messages (their call id among their values, as the store counts them).

    Exact for text messages; tool calls and their results are counted by the store's own rule,
    which OpenAI's hidden tool-call format may not match token for token."""
    messages = []
    for record in records:
        event = record.event
        if not isinstance(event, (MessageAppended, ToolReturned)):
            continue
        if record.tokens is None:
            raise ValueError(
                f"event {record.event_id!r} has no token count yet: read the events back from the "
                "store (readers count them first)"
            )
        if isinstance(event, MessageAppended):
            messages.append(PromptMessage(event.role, record.tokens, named=event.name is not None))
        else:
            messages.append(PromptMessage("tool", record.tokens))
    return messages
