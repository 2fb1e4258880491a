"""The usage event: what a provider billed for one model call, or a run's totals (schema 2).
Re-exported by store.events, where every event model can be imported from."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from turnlog.store.event_base import EventModel, Identifier
from turnlog.store.limits import MAX_TOKENS, NonNegative


class UsageRecorded(EventModel):
    """Token usage of one model call (or, with ``scope="run"``, the totals of a run whose source
    reports only those), as the provider billed it.

    Tokens keep turnlog's meaning whatever the source's: ``input_tokens`` is every prompt token of
    the call, cached ones included (OpenAI and Codex count them in; an Anthropic importer adds its
    cache read and write tokens to its ``input_tokens``), and ``cache_read_tokens`` /
    ``cache_write_tokens`` say how many of them were read from or written to the cache."""

    type: Literal["usage_recorded"] = "usage_recorded"
    """Discriminator."""
    schema_version: Literal[2] = 2
    """Version of this event's schema (1: without call_event_id, scope, calls, cost_usd,
    output_lower_bound, source; read as their defaults)."""
    model: Annotated[str, StringConstraints(min_length=1)]
    """The model that was billed."""
    input_tokens: NonNegative
    """Prompt tokens billed, cached ones included."""
    output_tokens: NonNegative
    """Completion tokens billed."""
    cache_read_tokens: NonNegative = 0
    """Prompt tokens served from the provider's cache (a part of input_tokens)."""
    cache_write_tokens: NonNegative = 0
    """Prompt tokens written to the provider's cache (a part of input_tokens)."""
    reasoning_tokens: NonNegative = 0
    """Hidden reasoning tokens (a part of the output tokens for most providers)."""
    run_id: Identifier | None = None
    """The run this call belongs to."""
    response_id: str | None = None
    """The provider's response id."""
    call_event_id: Identifier | None = None
    """The event id of the assistant message this call produced (an event of the same session),
    when the source ties usage to its response: the model call it belongs to."""
    scope: Literal["call", "run"] = "call"
    """``call``: one model call; ``run``: the totals of several calls (of ``run_id``, or of the
    whole session) from a source that reports only those."""
    calls: Annotated[int, Field(ge=1, le=MAX_TOKENS)] | None = None
    """With ``scope="run"``: how many model calls the totals cover, when the source says."""
    cost_usd: Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)] | None = None
    """The cost the source recorded for this usage (its own bill or estimate), in US dollars."""
    output_lower_bound: bool = False
    """The source's final output count never arrived: output_tokens is the largest value seen, a
    lower bound."""
    source: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = None
    """Where the figures come from (an importer's format name), when not appended live."""

    @model_validator(mode="after")
    def _scope_fields(self) -> UsageRecorded:
        if self.scope == "call" and self.calls is not None:
            raise ValueError("calls counts the model calls of a run's totals: give it with scope 'run' only")
        if self.scope == "run" and self.call_event_id is not None:
            raise ValueError("call_event_id names one call's message: a run's totals (scope 'run') have none")
        return self
