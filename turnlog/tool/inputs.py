"""The input of every method of the agent-facing tool: strict pydantic models (unknown fields refused,
no type coercion, bounded integers, enums as literals), one per method, named ``module.method``."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, model_validator

MethodName: TypeAlias = Literal[
    "artifacts.list",
    "artifacts.index",
    "artifacts.read",
    "history.read",
    "history.search",
    "todos.read",
    "todos.write",
    "context.pin",
    "context.unpin",
    "tool.help",
]
"""Every method of the tool, as ``module.method``."""

EventRef = Annotated[str, StringConstraints(min_length=6, max_length=200, pattern=r"^\S+$")]
"""An event id, or a unique prefix of at least 6 characters of one (as results show them)."""

ArtifactRef = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{8,64}$")]
"""An artifact id: its sha256 in lowercase hex, or a unique prefix of at least 8 characters."""

Version = Annotated[int, Field(ge=1, le=10**12)]
"""A version of the session: 1 for its first event, 2 for the next, ..."""

Reason = Annotated[str, StringConstraints(min_length=1, max_length=500, pattern=r"\S")]
"""Why, in a few words."""


class _Input(BaseModel):
    # strict: a model sending "5" for an integer, or 5.0, is told so instead of guessed at; frozen
    # and extra="forbid" like every model of the log. Field docstrings become schema descriptions.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _no_nulls(cls, data: Any) -> Any:
        # Optional fields are left out, never null: the exported schemas say so (they do not allow
        # null), and one accepted shape per field keeps models from guessing.
        if isinstance(data, dict):
            for key, value in data.items():
                if value is None and key in cls.model_fields:
                    raise ValueError(f"{key}: null is not accepted; leave the field out to use its default")
        return data


class ArtifactsList(_Input):
    """``artifacts.list``: the session's artifacts, a page at a time."""

    offset: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    """Index (0-based, in log order) of the first artifact to list."""
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    """How many artifacts to list at most."""


class ArtifactsIndex(_Input):
    """``artifacts.index``: takes nothing."""


class ArtifactsRead(_Input):
    """``artifacts.read``: a page of an artifact's lines."""

    id: ArtifactRef
    """The artifact's id (lowercase hex; the first 12 characters, as listed, are enough)."""
    offset: Annotated[int, Field(ge=0, le=10**9)] = 0
    """0-based line to start from (the previous page's notice gives the next one)."""
    limit: Annotated[int, Field(ge=1, le=2000)] = 200
    """Lines at most (fewer are returned when the page would exceed the result's token cap)."""


class HistoryTail(_Input):
    """``history.read`` in mode ``tail``."""

    mode: Literal["tail"]
    """The last n messages (tool returns count as messages)."""
    n: Annotated[int, Field(ge=1, le=200)] = 20
    """How many messages."""


class HistoryRange(_Input):
    """``history.read`` in mode ``range``."""

    mode: Literal["range"]
    """The events with from_version <= version <= to_version."""
    from_version: Version
    """First version to show."""
    to_version: Version
    """Last version to show (at most 500 after from_version)."""

    @model_validator(mode="after")
    def _check_span(self) -> HistoryRange:
        if self.to_version < self.from_version:
            raise ValueError(
                f"to_version ({self.to_version}) is below from_version ({self.from_version}); "
                "give the lower version first"
            )
        if self.to_version - self.from_version >= MAX_RANGE:
            raise ValueError(
                f"a range covers at most {MAX_RANGE} versions; to_version may be at most "
                f"{self.from_version + MAX_RANGE - 1}"
            )
        return self


class HistoryEvent(_Input):
    """``history.read`` in mode ``event``."""

    mode: Literal["event"]
    """One event, whole (or its first page, with how to read on)."""
    event_id: EventRef
    """The event's id, or a unique prefix of at least 6 characters."""


HistoryRead: TypeAlias = Annotated[HistoryTail | HistoryRange | HistoryEvent, Field(discriminator="mode")]
"""``history.read``: one of three modes, told apart by ``mode``."""

MAX_RANGE = 500
"""The most versions one ``history.read`` range may cover."""


class HistorySearch(_Input):
    """``history.search``: text in the session's messages and tool returns, newest first."""

    query: Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"\S")]
    """The text to find (case-insensitive)."""
    match: Literal["phrase", "all_words"] = "phrase"
    """phrase: the query as one substring; all_words: every word of it, anywhere in the text."""
    role: Literal["any", "system", "user", "assistant", "tool"] = "any"
    """Only messages of this role (tool: tool returns)."""
    limit: Annotated[int, Field(ge=1, le=50)] = 10
    """Matches at most."""
    before_version: Version | None = None
    """Only versions below this one (to page on: the previous result gives it); leave out for the newest."""


class TodosRead(_Input):
    """``todos.read``: takes nothing."""


class TodoEntry(_Input):
    """One item of the todo list."""

    content: Annotated[str, StringConstraints(min_length=1, max_length=2000)]
    """What is to be done."""
    status: Literal["pending", "in_progress", "completed"] = "pending"
    """Where it stands."""
    id: Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^\S+$")] | None = None
    """The item's id (keep the ids todos.read shows); leave out to have items numbered."""


class TodosWrite(_Input):
    """``todos.write``: the whole new list."""

    todos: Annotated[list[TodoEntry], Field(max_length=100)]
    """Every item, in order (an empty list clears it)."""


class ContextPin(_Input):
    """``context.pin``."""

    event_id: EventRef
    """The message's event id, or a unique prefix of at least 6 characters."""
    reason: Reason
    """Why it must stay in every context."""


class ContextUnpin(_Input):
    """``context.unpin``."""

    event_id: EventRef
    """The message's event id, or a unique prefix of at least 6 characters."""
    reason: Reason
    """Why it may go."""


class ToolHelp(_Input):
    """``tool.help``."""

    method: MethodName | None = None
    """The method, as module.method; leave out for the index of all methods."""


INPUTS: dict[str, TypeAdapter[Any]] = {
    "artifacts.list": TypeAdapter(ArtifactsList),
    "artifacts.index": TypeAdapter(ArtifactsIndex),
    "artifacts.read": TypeAdapter(ArtifactsRead),
    "history.read": TypeAdapter(HistoryRead),
    "history.search": TypeAdapter(HistorySearch),
    "todos.read": TypeAdapter(TodosRead),
    "todos.write": TypeAdapter(TodosWrite),
    "context.pin": TypeAdapter(ContextPin),
    "context.unpin": TypeAdapter(ContextUnpin),
    "tool.help": TypeAdapter(ToolHelp),
}
"""``module.method`` -> the validator of its input."""

METHODS: tuple[str, ...] = tuple(INPUTS)
"""Every method, as ``module.method``, in the order the tool's description lists them."""

MODULES: tuple[str, ...] = tuple(dict.fromkeys(name.split(".")[0] for name in METHODS))
"""The modules, in order."""


def fields_of(method: str) -> frozenset[str]:
    """The input fields a method accepts (for ``history.read``, those of every mode)."""
    schema = INPUTS[method].json_schema()
    definitions = schema.get("$defs", {})
    found: set[str] = set()
    for variant in schema.get("oneOf", [schema]):
        if "$ref" in variant:
            variant = definitions[variant["$ref"].rsplit("/", 1)[-1]]
        found |= set(variant.get("properties", {}))
    return frozenset(found)
