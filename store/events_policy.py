"""The events of the run-time loop (docs/events.md): a session's declarative policy
(``policy_set``), a condensed view of one long tool output made on the write path
(``output_condensed``), and a compaction or condensation that failed (``compaction_failed``).

A policy names things (a summarizer, a custom output handler) and never says how to reach them: the
command lines, URLs and keys behind a name come from the local configuration of the machine that
runs turnlog, so a log imported from elsewhere can never make turnlog run a program or send a
transcript to an address of its choosing."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from turnlog.store.event_base import EventModel, Identifier, Sha256, ValueModel
from turnlog.store.limits import MAX_TOKENS, NonNegative

HandlerName = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")]
"""The name of a summarizer or a custom output handler: a key of the local configuration."""

Name = Annotated[str, StringConstraints(min_length=1, max_length=200)]
"""Who made or failed to make something: a configured name, or an API caller's summarizer's name."""

_MODE = re.compile(r"^(simple|auto|custom:[A-Za-z0-9_.-]{1,100})$")

MAX_TOOL_MODES = 1000
"""Tool names one policy may give a mode."""


def check_output_mode(value: str) -> str:
    """``simple``, ``auto`` or ``custom:NAME`` (NAME: letters, digits, ``_.-``)."""
    if not isinstance(value, str) or not _MODE.match(value):
        raise ValueError(f"output mode must be simple, auto or custom:NAME, not {value!r}")
    return value


OutputMode = Annotated[str, AfterValidator(check_output_mode)]
"""How a tool output over the cap is shown: ``simple`` (capped), ``auto`` (the summarizer's summary
of it) or ``custom:NAME`` (what the custom handler NAME made of it)."""

ToolKey = Annotated[str, StringConstraints(min_length=1, max_length=200)]
"""A tool name, or ``default`` for every tool not named."""


class SessionPolicy(ValueModel):
    """A session's run-time policy: declarative settings only. Every field may be left unset (None:
    the built-in default applies, or what the caller passes)."""

    budget: Annotated[int, Field(ge=1, le=MAX_TOKENS)] | None = None
    """The context budget the session's contexts and run-end compaction aim at."""
    compact_on_run_end: bool | None = None
    """Compact the session after each run finishes (and make pending output summaries)."""
    summarizer: HandlerName | None = None
    """The summarizer's name: ``extractive`` (built in) or a ``[summarizers.NAME]`` entry of the
    local configuration."""
    max_tool_tokens: Annotated[int, Field(ge=16, le=MAX_TOKENS)] | None = None
    """The threshold (and inline cap) for tool outputs."""
    keep_last: Annotated[int, Field(ge=0, le=MAX_TOKENS)] | None = None
    """The newest messages run-end compaction keeps raw (default 20)."""
    tool_output_modes: Annotated[dict[ToolKey, OutputMode], Field(max_length=MAX_TOOL_MODES)] | None = None
    """Per tool name (``default`` for the rest): ``simple``, ``auto`` or ``custom:NAME``."""
    condense_at: Literal["append", "run_end"] | None = None
    """When auto and custom outputs are made: right after the output is appended (the default), or
    when the run finishes."""
    cache_stable: bool | None = None
    """Build the session's contexts cache-stable (``ContextPolicy(cache_stable=True)``): each call's
    context starts with the previous one's while the budget allows, for the provider's prompt cache."""
    refill_to: Annotated[float, Field(gt=0, le=1)] | None = None
    """Under ``cache_stable``: the share of the budget a context is left at when its start moves
    (default 0.4)."""

    def mode_for(self, tool_name: str | None) -> str:
        """The output mode of a tool (``simple`` unless the policy says otherwise)."""
        modes = self.tool_output_modes or {}
        if tool_name is not None and tool_name in modes:
            return modes[tool_name]
        return modes.get("default", "simple")

    def merged(self, other: SessionPolicy) -> SessionPolicy:
        """This policy with every field ``other`` sets replaced (tool modes merged by tool)."""
        update = other.model_dump(exclude_none=True)
        if self.tool_output_modes and other.tool_output_modes is not None:
            update["tool_output_modes"] = {**self.tool_output_modes, **other.tool_output_modes}
        return self.model_copy(update=update)


class PolicySet(EventModel):
    """The session's policy from here on (the whole policy: the newest ``policy_set`` wins)."""

    type: Literal["policy_set"] = "policy_set"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    policy: SessionPolicy
    """The settings."""


class CondenserInfo(ValueModel):
    """Who made a condensed output."""

    mode: Literal["auto", "custom"]
    """``auto``: a summarizer; ``custom``: a custom handler."""
    name: Name
    """The summarizer's or handler's name."""
    model: str | None = None
    """The model it used, if any."""
    prompt_version: str = "1"
    """Version of its prompt or rules: part of the reuse key."""


class OutputCondensed(EventModel):
    """What the context shows in place of one long tool output (the output stays in the log, whole)."""

    type: Literal["output_condensed"] = "output_condensed"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    target_event_id: Identifier
    """The ``tool_returned`` event it condenses."""
    condenser: CondenserInfo
    """Who made it."""
    text: Annotated[str, StringConstraints(min_length=1)]
    """The condensed text."""
    source_tokens: NonNegative
    """Tokens of the full output."""
    input_tokens: NonNegative = 0
    """Summarizer prompt tokens billed (0 when no model was called)."""
    output_tokens: NonNegative = 0
    """Summarizer completion tokens billed."""
    key: Sha256
    """sha256 of the output's hash, the condenser's mode, name and prompt version."""

    def token_texts(self) -> tuple[str, ...]:
        return (self.text,)


class CompactionFailed(EventModel):
    """A run-end compaction or an output condensation failed; the run's events were committed before
    it ran and stay as they are. The context shows simple caps until a later attempt succeeds."""

    type: Literal["compaction_failed"] = "compaction_failed"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    stage: Literal["run_end", "output"]
    """What failed: the run-end compaction, or the condensation of one output."""
    run_id: Identifier | None = None
    """The run whose end triggered it, if any."""
    target_event_id: Identifier | None = None
    """For ``output``: the output that could not be condensed."""
    handler: Name
    """The summarizer or custom handler that failed."""
    error: Annotated[str, StringConstraints(min_length=1, max_length=4000)]
    """What went wrong (one line)."""

    @model_validator(mode="after")
    def _check_target(self) -> CompactionFailed:
        if self.stage == "output" and self.target_event_id is None:
            raise ValueError("an output failure names its target_event_id")
        return self


__all__ = [
    "MAX_TOOL_MODES",
    "CompactionFailed",
    "CondenserInfo",
    "HandlerName",
    "OutputCondensed",
    "OutputMode",
    "PolicySet",
    "SessionPolicy",
    "check_output_mode",
]
