"""The events of the log: frozen pydantic models, one discriminated union on ``type``, and the one
place where stored payloads of older schema versions are upcast to the current ones."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, TypeAlias, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from turnlog.store.errors import InvalidEventError
from turnlog.store.event_base import EventModel, Identifier, Sha256, ValueModel
from turnlog.store.event_base import new_event_id as new_event_id  # re-exported: its public home stays here

# Re-exported: every event model can be imported from turnlog.store.events.
from turnlog.store.events_loop import MessageRemoved as MessageRemoved
from turnlog.store.events_loop import Origin as Origin
from turnlog.store.events_loop import SessionRewound as SessionRewound
from turnlog.store.events_loop import StateRecorded as StateRecorded
from turnlog.store.events_policy import CompactionFailed as CompactionFailed
from turnlog.store.events_policy import OutputCondensed as OutputCondensed
from turnlog.store.events_policy import PolicySet as PolicySet
from turnlog.store.events_usage import UsageRecorded as UsageRecorded
from turnlog.store.limits import (
    MAX_MANIFEST_ENTRIES,
    MAX_SIZE,
    MAX_TOKENS,
    JsonObject,
    NonNegative,
    Position,
    Version,
    depth_message,
    shallow_unless_stored,
)

# --- value objects ---------------------------------------------------------------------------


class ForkPoint(ValueModel):
    """Where a forked session branches off its parent."""

    session_id: Identifier
    """The parent session."""
    version: Version
    """The last version of the parent that the child shares."""


class Pin(ValueModel):
    """Marks a message as one that every projection keeps, whole."""

    reason: str | None = None
    """Why it must stay in the context (shown to operators, never to the model)."""


class ToolCall(ValueModel):
    """One tool call requested by an assistant message."""

    id: Identifier
    """The provider's call id; the tool's return names it in ``tool_call_id``."""
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    """The tool's name."""
    arguments: Annotated[str, AfterValidator(shallow_unless_stored)] = "{}"
    """The arguments exactly as the model produced them (usually JSON text, kept verbatim)."""


class TodoItem(ValueModel):
    """One entry of a todo list."""

    id: Identifier
    """Stable id of the entry across updates."""
    content: Annotated[str, StringConstraints(min_length=1)]
    """What is to be done."""
    status: Literal["pending", "in_progress", "completed"] = "pending"
    """Where it stands."""


# --- events ----------------------------------------------------------------------------------


class SessionStarted(EventModel):
    """A session begins; it is always the session's first event when present."""

    type: Literal["session_started"] = "session_started"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    title: str | None = None
    """A human title for the session."""
    model: str | None = None
    """The model the agent talks to, if known."""
    tokenizer: str | None = None
    """The encoding token counts use; filled in by the store (its own tokenizer) when omitted."""
    metadata: JsonObject | None = None
    """Free-form JSON metadata (agent name, user id, ...)."""
    parent: ForkPoint | None = None
    """For a fork: the parent session and the last version of it this session shares."""


class MessageAppended(EventModel):
    """A system, user or assistant message."""

    type: Literal["message_appended"] = "message_appended"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    role: Literal["system", "user", "assistant"]
    """Who speaks."""
    content: str = ""
    """The message text (may be empty for an assistant message that only calls tools)."""
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    """Optional participant name (OpenAI's ``name`` field)."""
    tool_calls: tuple[ToolCall, ...] | None = None
    """Tool calls requested by an assistant message."""
    pinned: Pin | None = None
    """Set when the message is pinned from the start (see also ``message_pinned``)."""
    origin: Origin | None = None
    """The framework item this message was mapped from, verbatim (absent on older rows)."""

    @model_validator(mode="after")
    def _check_tool_calls(self) -> MessageAppended:
        if self.tool_calls:
            if self.role != "assistant":
                raise ValueError(f"tool_calls are only allowed on assistant messages, not {self.role}")
            ids = [call.id for call in self.tool_calls]
            if len(set(ids)) != len(ids):
                raise ValueError("tool_calls: call ids must be unique within a message")
        return self

    def token_texts(self) -> tuple[str, ...]:
        texts = [self.content]
        if self.name:
            texts.append(self.name)
        for call in self.tool_calls or ():
            texts.extend((call.id, call.name, call.arguments))
        return tuple(texts)


class ToolReturned(EventModel):
    """The result of one tool call."""

    type: Literal["tool_returned"] = "tool_returned"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    tool_call_id: Identifier
    """The id of the call this answers."""
    tool_name: str | None = None
    """The tool's name (None when an imported transcript did not say)."""
    content: str
    """The full output of the tool."""
    is_error: bool = False
    """True when the tool failed and ``content`` is its error."""
    artifact_id: Sha256 | None = None
    """Set by the store when the output is larger than the inline limit and is kept as an artifact."""
    origin: Origin | None = None
    """The framework item this result was mapped from, verbatim (absent on older rows)."""

    def token_texts(self) -> tuple[str, ...]:
        return (self.content, self.tool_call_id)


class TodosUpdated(EventModel):
    """The whole todo list, as it is after this update."""

    type: Literal["todos_updated"] = "todos_updated"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    todos: tuple[TodoItem, ...]
    """Every entry, in order."""

    @model_validator(mode="after")
    def _check_ids(self) -> TodosUpdated:
        ids = [item.id for item in self.todos]
        if len(set(ids)) != len(ids):
            raise ValueError("todos: ids must be unique")
        return self


class ArtifactWritten(EventModel):
    """A file or document produced in the session, stored once by content."""

    type: Literal["artifact_written"] = "artifact_written"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    name: Annotated[str, StringConstraints(min_length=1, max_length=1000)]
    """The artifact's name, usually a path."""
    content: str
    """The artifact's text."""
    media_type: str = "text/plain"
    """Its media type."""
    tool_call_id: Identifier | None = None
    """The tool call that produced it; None when the user (or the agent directly) wrote it."""
    artifact_id: Sha256 | None = None
    """sha256 of the content; filled in (and checked when given) by the store."""
    size: Annotated[int, Field(ge=0, le=MAX_SIZE)] | None = None
    """Size of the content in UTF-8 bytes; filled in (and checked when given) by the store."""

    def token_texts(self) -> tuple[str, ...]:
        return (self.content,)


class RunStarted(EventModel):
    """An agent run (one user turn, usually several model calls) begins."""

    type: Literal["run_started"] = "run_started"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    run_id: Identifier
    """Id of the run."""


class RunFinished(EventModel):
    """An agent run ends."""

    type: Literal["run_finished"] = "run_finished"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    run_id: Identifier
    """Id of the run."""
    status: Literal["completed", "failed", "cancelled"] = "completed"
    """How it ended."""


class MessagePinned(EventModel):
    """A message is pinned: every projection keeps it, whole."""

    type: Literal["message_pinned"] = "message_pinned"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    target_event_id: Identifier
    """The event id of the message to keep."""
    reason: str | None = None
    """Why it must stay."""


class MessageUnpinned(EventModel):
    """A pin is lifted."""

    type: Literal["message_unpinned"] = "message_unpinned"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    target_event_id: Identifier
    """The event id of the message."""
    reason: str | None = None
    """Why it may go."""


class ManifestEntry(ValueModel):
    """One message of a built context, and where it came from."""

    event_ids: tuple[str, ...]
    """The events it was rendered from (empty for a notice)."""
    role: Literal["system", "user", "assistant", "tool"]
    """Its role in the chat format."""
    mode: Literal["full", "capped", "synthesized", "notice", "summary", "condensed"]
    """How it is shown: whole, capped by tokens, made up by the projection, a notice, a summary, a
    tool output condensed on the write path (``output_condensed``)."""
    category: Literal["system", "index", "pinned", "summary", "tool_output", "message", "notice"]
    """What kind of tokens it spends (the token audit groups by this); ``index`` is the artifact
    index a context shows after its system messages."""
    tokens: NonNegative
    """Its tokens, including the chat format's per-message overhead."""


class ContextBuilt(EventModel):
    """A record of exactly what a context builder sent to the model for one call."""

    type: Literal["context_built"] = "context_built"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    at_position: Position
    """The log position the context was built as of."""
    head_version: Position
    """The session's last version included."""
    format: Literal["openai", "anthropic", "text"]
    """The output format."""
    tokenizer: str
    """The encoding the token counts use."""
    budget: Annotated[int, Field(ge=1, le=MAX_TOKENS)]
    """The prompt budget in tokens."""
    total_tokens: NonNegative
    """Tokens of the whole context (chat-format overhead included)."""
    policy: JsonObject
    """The policy it was built with."""
    entries: Annotated[tuple[ManifestEntry, ...], Field(max_length=MAX_MANIFEST_ENTRIES)]
    """Each message sent, in order."""
    run_id: Identifier | None = None
    """The run the model call belongs to."""
    model: str | None = None
    """The model it was built for, if known."""
    cut: Position | None = None
    """Under a cache-stable policy: the oldest session version the history could start from."""


class SummarizerInfo(ValueModel):
    """Who wrote a summary."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    """The summarizer (``extractive``, ``openai``, ``command``, ``truncate``, or a caller's name)."""
    model: str | None = None
    """The model it used, if any."""
    prompt_version: str = "1"
    """Version of its prompt or rules: part of the reuse key."""


class SummarizerUsage(ValueModel):
    """Tokens the summarizer itself was billed."""

    input_tokens: NonNegative = 0
    """Prompt tokens."""
    output_tokens: NonNegative = 0
    """Completion tokens."""


class SummaryRecorded(EventModel):
    """A summary of a range of the session. The events it covers stay in the log; contexts built
    from this position on show the summary in their place."""

    type: Literal["summary_recorded"] = "summary_recorded"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    first_version: Version
    """The first session version it covers."""
    last_version: Version
    """The last session version it covers."""
    level: Annotated[int, Field(ge=0, le=32)]
    """0 for a summary of raw events, n+1 for a summary of level-n summaries."""
    text: Annotated[str, StringConstraints(min_length=1)]
    """The summary."""
    tokens: NonNegative
    """Tokens of the summary's context message (header included), counted once when written."""
    summarizer: SummarizerInfo
    """Who wrote it."""
    usage: SummarizerUsage | None = None
    """What the summarizer was billed (None when no model was called, e.g. a reused summary)."""
    key: Sha256
    """sha256 of the covered events' hashes, the summarizer's name and its prompt version: an
    identical range (a fork sharing the prefix) reuses the summary instead of paying again."""
    covers: tuple[str, ...] = ()
    """For a summary of summaries: the event ids of the summaries it condenses."""
    reused_from: Identifier | None = None
    """The event id of the summary whose text this one reuses (same key), if any."""

    @model_validator(mode="after")
    def _check_range(self) -> SummaryRecorded:
        if self.last_version < self.first_version:
            raise ValueError("last_version must not be before first_version")
        return self

    def context_text(self) -> str:
        """The message a context shows in place of the covered events."""
        return summary_context_text(self.first_version, self.last_version, self.text)

    def token_texts(self) -> tuple[str, ...]:
        return (self.context_text(),)


def summary_context_text(first_version: int, last_version: int, text: str) -> str:
    """How a summary reads in a context (its ``tokens`` count this whole text)."""
    return f"[Summary of the conversation so far, versions {first_version}–{last_version}]\n{text}"


Event: TypeAlias = Annotated[
    SessionStarted
    | MessageAppended
    | ToolReturned
    | TodosUpdated
    | ArtifactWritten
    | UsageRecorded
    | RunStarted
    | RunFinished
    | MessagePinned
    | MessageUnpinned
    | ContextBuilt
    | SummaryRecorded
    | SessionRewound
    | MessageRemoved
    | StateRecorded
    | PolicySet
    | OutputCondensed
    | CompactionFailed,
    Field(discriminator="type"),
]
"""Any event of the log."""


class _LazyAdapter:
    """``TypeAdapter(Event)``, made on first use: building the validator of the whole union costs a
    tenth of a second, which a command that decodes no event (or only a few types, each through
    its own class) never pays."""

    _adapter: TypeAdapter[Event] | None = None

    def __getattr__(self, name: str) -> Any:
        adapter = _LazyAdapter._adapter
        if adapter is None:
            # Each class is built on its own first, with its own config, as when it is validated
            # directly: a deferred model built inside the union's adapter would take the adapter's
            # defaults (it accepted inf in a JSON field).
            for cls in EVENT_CLASSES.values():
                if not cls.__pydantic_complete__:
                    cls.model_rebuild()
            adapter = _LazyAdapter._adapter = TypeAdapter(Event)
        return getattr(adapter, name)


EVENT_ADAPTER: TypeAdapter[Event] = cast("TypeAdapter[Event]", _LazyAdapter())
"""Validates any event (a dict or JSON) into its class, by its ``type``."""

EVENT_CLASSES: dict[str, type[EventModel]] = {
    cls.model_fields["type"].default: cls
    for cls in (
        SessionStarted,
        MessageAppended,
        ToolReturned,
        TodosUpdated,
        ArtifactWritten,
        UsageRecorded,
        RunStarted,
        RunFinished,
        MessagePinned,
        MessageUnpinned,
        ContextBuilt,
        SummaryRecorded,
        SessionRewound,
        MessageRemoved,
        StateRecorded,
        PolicySet,
        OutputCondensed,
        CompactionFailed,
    )
}
"""Event type name -> model class."""

CURRENT_VERSIONS: dict[str, int] = {
    name: cls.model_fields["schema_version"].default for name, cls in EVENT_CLASSES.items()
}
"""Event type name -> the schema version this code writes."""

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

# (type, from_version) -> function turning a payload of that version into one of from_version + 1.
# Every old version stays loadable: add a function here and a fixture under tests/fixtures/ when a
# schema changes, never edit stored rows.
UPCASTERS: dict[tuple[str, int], Upcaster] = {
    # usage_recorded 2 adds optional fields only: a version-1 payload is read as their defaults.
    ("usage_recorded", 1): lambda payload: payload,
}

# Columns of the log, never part of the stored payload.
ENVELOPE_FIELDS = frozenset({"type", "schema_version", "event_id"})


def upcast(event_type: str, schema_version: int, payload: dict[str, Any]) -> dict[str, Any]:
    """Bring a payload of an older schema version up to the current one."""
    current = CURRENT_VERSIONS.get(event_type)
    if current is None:
        raise InvalidEventError(_unknown_type_message(event_type))
    if not isinstance(schema_version, int) or isinstance(schema_version, bool):
        raise InvalidEventError(f"{event_type}: schema_version must be an integer")
    if schema_version > current:
        raise InvalidEventError(
            f"{event_type}: schema_version {schema_version} is newer than this turnlog reads "
            f"(up to {current}); upgrade turnlog"
        )
    if schema_version < 1:
        raise InvalidEventError(f"{event_type}: schema_version must be 1 or more")
    while schema_version < current:
        step = UPCASTERS.get((event_type, schema_version))
        if step is None:
            raise InvalidEventError(f"{event_type}: no upcaster from schema_version {schema_version}")
        payload = step(payload)
        schema_version += 1
    return payload


def parse_event(data: object, *, where: str = "event") -> Event:
    """Validate one event given as a JSON-like dict (``type`` required, ``schema_version`` optional:
    older versions are upcast). Raises InvalidEventError naming the offending field."""
    if isinstance(data, BaseModel):
        data = data.model_dump()
    if not isinstance(data, dict):
        raise InvalidEventError(f"{where}: expected a JSON object, got {type(data).__name__}")
    event_type = data.get("type")
    if not isinstance(event_type, str):
        raise InvalidEventError(f"{where}: missing 'type' (one of {', '.join(EVENT_CLASSES)})")
    if event_type not in EVENT_CLASSES:
        raise InvalidEventError(f"{where}: {_unknown_type_message(event_type)}")
    body = {k: v for k, v in data.items() if k not in ENVELOPE_FIELDS}
    version = data.get("schema_version", CURRENT_VERSIONS[event_type])
    try:
        body = upcast(event_type, version, body)
    except InvalidEventError as exc:
        raise InvalidEventError(f"{where}: {exc}") from None
    body["type"] = event_type
    if "event_id" in data:
        body["event_id"] = data["event_id"]
    try:
        return EVENT_ADAPTER.validate_python(body)
    except ValidationError as exc:
        raise InvalidEventError(f"{where} ({event_type}): {describe_validation_error(exc)}") from None


def parse_events_json(text: str) -> list[Event]:
    """Parse events given as one JSON object, a JSON list of objects, or JSON lines."""
    stripped = text.strip()
    if not stripped:
        raise InvalidEventError("no events given: expected a JSON object, a JSON list or JSON lines")
    items: list[tuple[str, object]] = []
    try:
        document = json.loads(stripped)
    except RecursionError:  # json.loads recurses: a deep document is refused, not a crash
        raise InvalidEventError(depth_message("events")) from None
    except json.JSONDecodeError:
        document = None
        for number, line in enumerate(stripped.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append((f"line {number}", json.loads(line)))
            except RecursionError:
                raise InvalidEventError(depth_message(f"line {number}")) from None
            except json.JSONDecodeError as exc:
                raise InvalidEventError(f"line {number}: malformed JSON: {exc.msg}") from None
    else:
        if isinstance(document, list):
            items = [(f"event {i}", item) for i, item in enumerate(document, 1)]
        else:
            items = [("event", document)]
    return [parse_event(item, where=where) for where, item in items]


def load_stored(event_type: str, schema_version: int, event_id: str, payload: dict[str, Any]) -> Event:
    """Turn a stored row back into an event, upcasting old versions (the one mapper for rows)."""
    body = upcast(event_type, schema_version, payload)
    body["type"] = event_type
    body["event_id"] = event_id
    return EVENT_ADAPTER.validate_python(body)


def dump_payload(event: EventModel) -> dict[str, Any]:
    """The stored payload of an event: its fields minus the envelope columns and unset optionals."""
    return event.model_dump(mode="json", exclude=set(ENVELOPE_FIELDS), exclude_none=True)


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem, each naming the field: readable by people and by models."""
    parts = []
    for error in exc.errors(include_url=False):
        location = ".".join(_loc_part(part) for part in error["loc"] if not _is_union_tag(part))
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        elif error["type"] == "missing":
            message = "required field is missing"
        parts.append(f"{location or 'event'}: {message}" if location else message)
    return "; ".join(parts)


def event_types() -> Iterable[str]:
    """Names of every event type this turnlog knows."""
    return EVENT_CLASSES.keys()


def _loc_part(part: object) -> str:
    """A field name as an error names it: quoted when it is not a plain name (a key holding a line
    break or control characters must not break the one-line message)."""
    text = str(part)
    return text if text.isprintable() and text.strip() == text and text else repr(text)


def _is_union_tag(part: object) -> bool:
    return isinstance(part, str) and part in EVENT_CLASSES


def _unknown_type_message(event_type: str) -> str:
    return f"unknown event type {event_type!r} (known: {', '.join(EVENT_CLASSES)})"
