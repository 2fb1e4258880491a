"""The context builder's vocabulary: the policy, the messages of a built context, the manifest it
records, the blocks compaction plans with, and the chat-format constants every cost is made of."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic._internal._model_construction import ModelMetaclass

from turnlog.projections.capping import MIN_CAP
from turnlog.store import ContextBuilt, ManifestEntry, StoreError, Tokenizer, ToolCall
from turnlog.store.events_policy import OutputMode, ToolKey

PRIME_TOKENS = 3
"""Tokens every reply is primed with (OpenAI's rule)."""
PER_MESSAGE = 3
"""Tokens of chat-format overhead per message."""
PER_NAME = 1
"""Extra token when a message has a ``name``."""

INTERRUPTED = "[turnlog: no result was recorded for this call: it was interrupted]"
"""The synthesized result of a call that never got one (shown in contexts, never logged)."""

FILL_MIN = 48
"""The least room worth filling with a capped message at the oldest end of the context."""

Format = Literal["openai", "anthropic", "text"]
Mode = Literal["full", "capped", "synthesized", "notice", "summary", "condensed"]
Category = Literal["system", "index", "pinned", "summary", "tool_output", "message", "notice"]


class ContextBudgetError(StoreError):
    """The messages that must always be kept do not fit the budget."""


class CacheOverflow(Exception):
    """Internal: under a cache-stable policy, the context from the current cut does not fit."""


@dataclass(frozen=True, slots=True)
class StableCut:
    """Where a cache-stable build's history starts, as the fold over the session's calls left it
    (projections.context_cache)."""

    cut: int = 1
    """The oldest session version the history may start from."""
    moved_at: int = 0
    """The log position of the call at which the cut last moved (0: never). Summaries, the
    artifact index and condensed views are as of then: they change only when the cut moves."""
    moved_head: int = 0
    """The session's head version at ``moved_at``."""


_POLICIES: dict[tuple[Any, ...], Any] = {}
"""Policies made from keyword arguments, by the arguments (and their types)."""
_POLICIES_KEPT = 256


class _Interned(ModelMetaclass):
    """ContextPolicy's metaclass: a policy made again from the same keyword arguments is the one
    made first. A policy is frozen and the same arguments validate to the same fields, and agents
    make their policy on each call (``build_context(store, sid, ContextPolicy(budget=...))``):
    pydantic's validation was a tenth of a warm build's own work (issue 20)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if args:
            return super().__call__(*args, **kwargs)
        # The types too: True == 1 and 1 == 1.0, but a field may take one and refuse the other.
        key = (cls, tuple(kwargs.items()), tuple(map(type, kwargs.values())))
        try:
            found = _POLICIES.get(key)
        except TypeError:  # an argument that cannot be a key (a dict of modes): validated each time
            return super().__call__(**kwargs)
        if found is None:
            found = super().__call__(**kwargs)
            if len(_POLICIES) >= _POLICIES_KEPT:
                _POLICIES.clear()
            _POLICIES[key] = found
        return found


class ContextPolicy(BaseModel, metaclass=_Interned):
    """How a context is built."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    budget: int = Field(ge=1)
    """Prompt tokens, everything included (messages, chat-format overhead, notices)."""
    max_tool_tokens: int = Field(default=1000, ge=MIN_CAP)
    """Inline cap for a tool output, and for each tool call's arguments (the whole stays fetchable)."""
    max_message_tokens: int = Field(default=4000, ge=MIN_CAP)
    """Cap for an over-long user or assistant message's content."""
    format: Format = "openai"
    """Output format: OpenAI chat-completions messages, Anthropic messages, or plain text."""
    cap_open_run: bool = False
    """Cap tool outputs of the run still open too (by default they are shown whole if they fit)."""
    fill: bool = True
    """Use leftover budget for the next older message, capped to fit."""
    tool_output_modes: dict[ToolKey, OutputMode] | None = None
    """Which stored view of a tool output over the cap to show, per tool name (``default``: the
    rest), over the session's policy: ``simple`` (the cap), ``auto`` (its summary) or
    ``custom:NAME``. A view that was not made yet shows the simple cap: a build never makes one."""
    index: bool = True
    """When the session has artifacts, show their index (one line each, full contents fetched on
    demand) right after the system messages: within 32,768 characters and half the budget, kept
    before older messages."""
    calibrate: bool = False
    """Correct the budget for a model whose tokenizer is not the store's: divide it by the ratio
    billed ÷ estimated that the session's usage at or before the build's position shows for the
    build's ``model`` (projections.estimates), so that what is sent stays within ``budget`` real
    tokens. The same position gives the same ratio: a replay builds the same context. Without such
    usage (or for a model counted exactly) the budget is used as it is."""
    cache_stable: bool = False
    """Keep the provider's prompt cache warm: each call's context starts with the previous call's
    context unchanged while the budget allows; when it does not, the history's start (the cut)
    moves once, far enough to leave the context at about ``refill_to`` of the budget, and stays
    there until the budget is exceeded again (projections.context_cache)."""
    refill_to: float = Field(default=0.4, gt=0, le=1)
    """Under ``cache_stable``: the share of the budget a context is left at when the cut moves."""


@dataclass(slots=True)
class ContextMessage:
    """A message of the context, before it is rendered in a format."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tokens: int
    mode: Mode
    category: Category
    event_ids: tuple[str, ...]
    order: tuple[float, int]
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False
    shown_tokens: int | None = None
    """For a capped message: the tokens of its own text still shown (0: only the notice)."""


@dataclass
class BuiltContext:
    """The result of a build: the rendered messages and the manifest of what went in."""

    session_id: str
    at_position: int
    head_version: int
    policy: ContextPolicy
    tokenizer: str
    total_tokens: int
    messages: list[ContextMessage]
    omitted_messages: int
    omitted_tokens: int
    rendered: Any = field(default=None)
    cut: int | None = None
    """Under a cache-stable policy: the oldest session version the history may start from."""

    @functools.cached_property
    def entries(self) -> tuple[ManifestEntry, ...]:
        """One manifest entry per message, in order (computed once)."""
        return tuple(
            ManifestEntry(
                event_ids=m.event_ids,
                role=m.role,
                mode=m.mode,
                category=m.category,
                tokens=m.tokens,
            )
            for m in self.messages
        )

    def manifest(self) -> dict[str, Any]:
        """What went into the context, as JSON data."""
        return {
            "session_id": self.session_id,
            "at_position": self.at_position,
            "head_version": self.head_version,
            "tokenizer": self.tokenizer,
            "budget": self.policy.budget,
            "total_tokens": self.total_tokens,
            "omitted_messages": self.omitted_messages,
            "omitted_tokens": self.omitted_tokens,
            "policy": _policy_dump(self.policy),
            "entries": [e.model_dump() for e in self.entries],
        } | ({} if self.cut is None else {"cut": self.cut})

    def to_event(self, *, run_id: str | None = None, model: str | None = None) -> ContextBuilt:
        """The ``context_built`` event recording this build."""
        return ContextBuilt(
            at_position=self.at_position,
            head_version=self.head_version,
            format=self.policy.format,
            tokenizer=self.tokenizer,
            budget=self.policy.budget,
            total_tokens=self.total_tokens,
            policy=_policy_payload(self.policy),
            entries=self.entries,
            run_id=run_id,
            model=model,
            cut=self.cut,
        )


@dataclass(frozen=True, slots=True)
class Block:
    """A piece of a session's timeline, as compaction plans with it."""

    kind: Literal["retained", "summary", "unit", "gap"]
    """A message that is always kept (or the artifact index, kept before older messages: version
    0, no messages), an active summary, a message with its tool results, or a
    range a rewind or a removal took out (no cost: a summary must not span it, or it would cover
    versions that are not live and never be shown)."""
    first: int
    """First version it spans."""
    last: int
    """Last version it spans (a call's last result)."""
    cost: int
    """Tokens it adds to a context (estimated for units: capped as the policy caps them)."""
    messages: int
    """Messages it stands for."""
    level: int = -1
    """A summary's level (-1 for others)."""
    event_id: str = ""
    """A summary's event id."""
    versions: tuple[int, ...] = ()
    """A unit's message versions."""


@functools.lru_cache(maxsize=8)
def _costs_for(name: str, tok: Tokenizer) -> dict[str, int]:
    return {word: tok.count(word) for word in ("system", "user", "assistant", "tool", "function")}


def message_cost(costs: dict[str, int], role: str, tokens: int, named: bool, calls: int) -> int:
    """A whole message's tokens in a context (the OpenAI chat rule: 3 per message, its role, its
    event's own tokens — content, name, tool calls —, 1 more for a name, and a call's type word)."""
    return PER_MESSAGE + costs[role] + tokens + (PER_NAME if named else 0) + calls * costs["function"]


def tool_output_cost(costs: dict[str, int], tokens: int) -> int:
    """A whole tool output's tokens in a context (its event's tokens hold its call id and text)."""
    return PER_MESSAGE + costs["tool"] + tokens


def role_costs(tok: Tokenizer) -> dict[str, int]:
    """Tokens of each role word (and of a function call's type), counted once per tokenizer."""
    return _costs_for(tok.name, tok)


def _policy_dump(policy: ContextPolicy) -> dict[str, Any]:
    """A policy as JSON data (the cache-stable fields only when set: the default policy's output
    reads as before)."""
    data = policy.model_dump()
    if not data.get("cache_stable"):
        data.pop("cache_stable", None)
        data.pop("refill_to", None)
    return data


def _policy_payload(policy: ContextPolicy) -> dict[str, Any]:
    """A policy as a manifest records it (``calibrate`` and the cache-stable fields only when set,
    so manifests of builds without them read as before)."""
    data = _policy_dump(policy)
    if not data.get("calibrate"):
        data.pop("calibrate", None)
    return data
