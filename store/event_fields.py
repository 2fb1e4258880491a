"""A stored event's fields read back without the event models (no pydantic), for display only: what
``turnlog log`` prints must start at once. The log was validated when it was written, so a row at its
type's current schema version is trusted; its fields come out exactly as the event's
``model_dump(mode="json", exclude_none=True)`` would give them (in field order, unset defaults filled
in). Anything else (an older schema version, an unknown field, a required field missing) is left to
the full mapper (store.rows), which upcasts or says what is wrong.

FIELDS mirrors the event models; tests/test_quick_read.py rebuilds it from them and fails when the
two differ (its message prints the table to paste here)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

FIELDS: dict[str, tuple[int, tuple[tuple[str, str | None], ...]]] = {
    "session_started": (
        1,
        (
            ("title", "null"),
            ("model", "null"),
            ("tokenizer", "null"),
            ("metadata", "null"),
            ("parent", "null"),
        ),
    ),
    "message_appended": (
        1,
        (
            ("role", None),
            ("content", '""'),
            ("name", "null"),
            ("tool_calls", "null"),
            ("pinned", "null"),
            ("origin", "null"),
        ),
    ),
    "tool_returned": (
        1,
        (
            ("tool_call_id", None),
            ("tool_name", "null"),
            ("content", None),
            ("is_error", "false"),
            ("artifact_id", "null"),
            ("origin", "null"),
        ),
    ),
    "todos_updated": (1, (("todos", None),)),
    "artifact_written": (
        1,
        (
            ("name", None),
            ("content", None),
            ("media_type", '"text/plain"'),
            ("tool_call_id", "null"),
            ("artifact_id", "null"),
            ("size", "null"),
        ),
    ),
    "usage_recorded": (
        2,
        (
            ("model", None),
            ("input_tokens", None),
            ("output_tokens", None),
            ("cache_read_tokens", "0"),
            ("cache_write_tokens", "0"),
            ("reasoning_tokens", "0"),
            ("run_id", "null"),
            ("response_id", "null"),
            ("call_event_id", "null"),
            ("scope", '"call"'),
            ("calls", "null"),
            ("cost_usd", "null"),
            ("output_lower_bound", "false"),
            ("source", "null"),
        ),
    ),
    "run_started": (1, (("run_id", None),)),
    "run_finished": (1, (("run_id", None), ("status", '"completed"'))),
    "message_pinned": (1, (("target_event_id", None), ("reason", "null"))),
    "message_unpinned": (1, (("target_event_id", None), ("reason", "null"))),
    "context_built": (
        1,
        (
            ("at_position", None),
            ("head_version", None),
            ("format", None),
            ("tokenizer", None),
            ("budget", None),
            ("total_tokens", None),
            ("policy", None),
            ("entries", None),
            ("run_id", "null"),
            ("model", "null"),
            ("cut", "null"),
        ),
    ),
    "summary_recorded": (
        1,
        (
            ("first_version", None),
            ("last_version", None),
            ("level", None),
            ("text", None),
            ("tokens", None),
            ("summarizer", None),
            ("usage", "null"),
            ("key", None),
            ("covers", "[]"),
            ("reused_from", "null"),
        ),
    ),
    "session_rewound": (
        1,
        (("to_version", None), ("reason", '"rewind"'), ("source", "null"), ("note", "null")),
    ),
    "message_removed": (1, (("target_event_ids", None), ("reason", "null"), ("source", "null"))),
    "state_recorded": (
        1,
        (
            ("framework", None),
            ("namespace", None),
            ("key", None),
            ("parent_key", "null"),
            ("media_type", None),
            ("content", None),
            ("metadata", "null"),
            ("state_id", "null"),
            ("size", "null"),
        ),
    ),
    "policy_set": (1, (("policy", None),)),
    "output_condensed": (
        1,
        (
            ("target_event_id", None),
            ("condenser", None),
            ("text", None),
            ("source_tokens", None),
            ("input_tokens", "0"),
            ("output_tokens", "0"),
            ("key", None),
        ),
    ),
    "compaction_failed": (
        1,
        (
            ("stage", None),
            ("run_id", "null"),
            ("target_event_id", "null"),
            ("handler", None),
            ("error", None),
        ),
    ),
}
"""Per event type: its current schema version, and its fields after the envelope (type, event_id,
schema_version) in model order, each with its default as JSON text (None: required)."""

_NAMES = {etype: frozenset(name for name, _ in fields) for etype, (_, fields) in FIELDS.items()}


def stored_fields(
    etype: str, schema_version: int, payload: str, content: str | None
) -> dict[str, Any] | None:
    """The fields of a stored event (its payload's JSON text, and its content when a blob holds it),
    as the event's JSON dump without None values; None when this row needs the full mapper."""
    shape = FIELDS.get(etype)
    if shape is None or shape[0] != schema_version or payload[:1] != "{":
        return None
    body = json.loads(payload)
    if not isinstance(body, dict):
        return None
    if content is not None:
        body["content"] = content
    if not body.keys() <= _NAMES[etype]:
        return None
    fields: dict[str, Any] = {}
    for name, default in shape[1]:
        if name in body:
            value = body[name]
        elif default is None:
            return None  # a required field missing: the full mapper says so
        else:
            value = json.loads(default)
        if value is not None:
            fields[name] = value
    return fields


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """A stored event for display: the record's columns and the event's fields as plain JSON data
    (what :class:`turnlog.store.RecordedEvent` holds, without the event model)."""

    position: int
    """Global position in the log."""
    session_id: str
    """The session it belongs to."""
    version: int
    """Its version within the session."""
    event_id: str
    """The event's id."""
    type: str
    """The event's type."""
    schema_version: int
    """Its schema version (the type's current one)."""
    tokens: int
    """Tokens of its text with the store's tokenizer."""
    recorded_at: str
    """When the store committed it (UTC, ISO 8601)."""
    prev_hash: str
    """Hash of the session's previous event."""
    hash: str
    """This event's hash."""
    fields: dict[str, Any]
    """The event's fields after the envelope, as :func:`stored_fields` gives them."""

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON data, as :meth:`turnlog.store.RecordedEvent.to_dict` gives it."""
        return {
            "position": self.position,
            "session_id": self.session_id,
            "version": self.version,
            "event_id": self.event_id,
            "type": self.type,
            "schema_version": self.schema_version,
            "tokens": self.tokens,
            "recorded_at": self.recorded_at,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
            "event": dict(self.fields),
        }
