"""The events the agent loop adds (docs/events.md): compensating events that undo without deleting
(``session_rewound``, ``message_removed``), a framework's opaque state (``state_recorded``), and the
``origin`` a framework's own item leaves on the event it was mapped to."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, JsonValue, StringConstraints, model_validator

from turnlog.store.event_base import EventModel, Identifier, Sha256, ValueModel
from turnlog.store.limits import MAX_REMOVED_TARGETS, MAX_SIZE, JsonObject, Position, shallow_unless_stored

Name = Annotated[str, StringConstraints(min_length=1, max_length=200)]
"""A short non-empty name (a framework, a caller)."""

Key = Annotated[str, StringConstraints(max_length=1000)]
"""A framework's own key; may be empty (LangGraph's root checkpoint namespace is ``""``)."""

RewindReason = Literal["pop", "clear", "delete", "time_travel", "rewind"]
"""What a rewind stands for in the framework that asked for it."""


class Origin(ValueModel):
    """The framework's own item an event was mapped from, kept verbatim so it reads back as written."""

    framework: Name
    """The framework that wrote it (``openai-agents``, ``langchain``, ``langgraph``, ``pydantic-ai``)."""
    # Before pydantic walks the value (it recurses): a too-deep item gets one clear error.
    item: Annotated[JsonValue, BeforeValidator(shallow_unless_stored)] = None
    """The item exactly as the framework gave it (any JSON, at most MAX_JSON_DEPTH levels deep)."""


class SessionRewound(EventModel):
    """The session returns to the state it had at session version ``to_version``; nothing is deleted."""

    type: Literal["session_rewound"] = "session_rewound"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    to_version: Position
    """The session version whose live set becomes the live set again (0: the empty session)."""
    reason: RewindReason = "rewind"
    """Why: a framework's pop, clear, delete or time travel, or a plain rewind."""
    source: Name | None = None
    """Who asked for it (e.g. ``openai-agents``, ``cli``)."""
    note: str | None = None
    """Free text for operators."""


class MessageRemoved(EventModel):
    """Messages (with an assistant message's tool results) stop counting in every projection."""

    type: Literal["message_removed"] = "message_removed"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    target_event_ids: Annotated[tuple[Identifier, ...], Field(min_length=1, max_length=MAX_REMOVED_TARGETS)]
    """The event ids of the messages to remove (events of this session or of its fork parents)."""
    reason: str | None = None
    """Why they are removed."""
    source: Name | None = None
    """Who asked for it (e.g. ``langgraph`` for a RemoveMessage)."""

    @model_validator(mode="after")
    def _check_unique(self) -> MessageRemoved:
        if len(set(self.target_event_ids)) != len(self.target_event_ids):
            raise ValueError("target_event_ids: each event id may be named once")
        return self


class StateRecorded(EventModel):
    """One snapshot of a framework's opaque state, stored once by content like an artifact."""

    type: Literal["state_recorded"] = "state_recorded"
    """Discriminator."""
    schema_version: Literal[1] = 1
    """Version of this event's schema."""
    framework: Name
    """The framework whose state this is."""
    namespace: Key
    """The framework's namespace for it (a LangGraph checkpoint namespace; may be empty)."""
    key: Annotated[str, StringConstraints(min_length=1, max_length=1000)]
    """The framework's id of this snapshot (a LangGraph checkpoint id)."""
    parent_key: Annotated[str, StringConstraints(min_length=1, max_length=1000)] | None = None
    """The snapshot this one follows, if any."""
    media_type: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    """The media type of ``content`` (e.g. ``application/json``)."""
    content: str
    """The state itself, opaque to turnlog (stored as a content-addressed blob)."""
    metadata: JsonObject | None = None
    """The framework's metadata for the snapshot, as JSON."""
    state_id: Sha256 | None = None
    """sha256 of the content; filled in (and checked when given) by the store."""
    size: Annotated[int, Field(ge=0, le=MAX_SIZE)] | None = None
    """Size of the content in UTF-8 bytes; filled in (and checked when given) by the store."""
