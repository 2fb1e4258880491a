"""Reading turnlog's own JSON lines export back."""

from __future__ import annotations

import json
from typing import Any

from turnlog.importers.base import Conversation, json_lines, load_json
from turnlog.store import Event, InvalidEventError, SessionStarted, parse_event, recorded_time


def parse_jsonl(text: str, *, session: str | None = None) -> list[Conversation]:
    """Read turnlog's own export (``turnlog export --format jsonl``, see :mod:`turnlog.exporters`):
    one JSON object per event, sessions whole and in version order, possibly several interleaved.

    The events keep their ids, types, schema versions and fields; they are appended again through
    the normal append path, so the new store's hash chain is its own. A line whose ``digest`` does
    not match its content is refused. A forked session must come after its parent. ``session``
    renames the sessions (``NAME-1``, ``NAME-2``... when there are several; forks follow).

    Each event keeps its ``recorded_at`` (when every line of its session has one), so a restored
    store's per-day audit is the source's; positions, hashes and ``prev_hash`` are the new store's."""
    from turnlog.exporters import jsonl_digest  # the format is defined next to its writer

    groups: dict[str, list[Event]] = {}
    times: dict[str, list[str | None]] = {}
    bases: dict[str, int] = {}
    for number, line in enumerate(json_lines(text), 1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            data = load_json(line, where)
        except json.JSONDecodeError as exc:
            raise InvalidEventError(
                f"{where}: malformed JSON ({exc.msg}); a turnlog jsonl export has one JSON object per line"
            ) from None
        if not isinstance(data, dict):
            raise InvalidEventError(f"{where}: expected a JSON object, got {type(data).__name__}")
        missing = [key for key in _JSONL_REQUIRED if key not in data]
        if missing:
            raise InvalidEventError(
                f"{where}: missing {', '.join(missing)}: not a line of a turnlog jsonl export "
                "(`turnlog export --format jsonl` writes them)"
            )
        sid, version, body = data["session_id"], data["version"], data["event"]
        if not isinstance(sid, str) or not sid:
            raise InvalidEventError(f"{where}: session_id must be a non-empty string")
        if not isinstance(version, int) or isinstance(version, bool):
            raise InvalidEventError(f"{where}: version must be an integer")
        if not isinstance(body, dict):
            raise InvalidEventError(f"{where}: event must be a JSON object of the event's fields")
        digest = data.get("digest")
        if digest is not None and digest != jsonl_digest(data):
            raise InvalidEventError(
                f"{where}: the content does not match its digest: the line was edited or damaged"
            )
        events = groups.setdefault(sid, [])
        if not events:
            # A fork's own events continue its parent's versions.
            parent = body.get("parent") if data["type"] == "session_started" else None
            bases[sid] = (
                parent["version"]
                if isinstance(parent, dict) and isinstance(parent.get("version"), int)
                else 0
            )
        expected = bases[sid] + len(events) + 1
        if version != expected:
            raise InvalidEventError(
                f"{where}: session {sid!r} version {version} where {expected} was expected: "
                "an export holds whole sessions, each in version order"
            )
        fields = {**body, "type": data["type"], "event_id": data["event_id"]}
        if "schema_version" in data:
            fields["schema_version"] = data["schema_version"]
        events.append(parse_event(fields, where=f"{where} (session {sid!r} version {version})"))
        times.setdefault(sid, []).append(_recorded_at(data.get("recorded_at"), where))
    if not groups:
        raise InvalidEventError("the file holds no events")
    order = list(groups)
    for sid, events in groups.items():
        first = events[0]
        if isinstance(first, SessionStarted) and first.parent is not None:
            parent_id = first.parent.session_id
            if parent_id in groups and order.index(parent_id) > order.index(sid):
                raise InvalidEventError(
                    f"session {sid!r} is a fork of {parent_id!r}, which comes later in the file: "
                    "put the parent first (`turnlog export PARENT FORK` does)"
                )
    names = {sid: sid for sid in order}
    if session is not None:
        names = {sid: session if len(order) == 1 else f"{session}-{n}" for n, sid in enumerate(order, 1)}
    conversations = []
    for sid in order:
        events = groups[sid]
        first = events[0]
        fork = first.parent if isinstance(first, SessionStarted) else None
        if fork is not None and fork.session_id in names:
            renamed = fork.model_copy(update={"session_id": names[fork.session_id]})
            events = [first.model_copy(update={"parent": renamed}), *events[1:]]
        kept = times[sid]
        recorded_at = None if None in kept else tuple(t for t in kept if t is not None)
        conversations.append(Conversation(names[sid], tuple(events), recorded_at))
    return conversations


def _recorded_at(value: Any, where: str) -> str | None:
    """The line's time of recording, in the store's format (UTC, microseconds), if it has one."""
    return None if value is None else recorded_time(value, f"{where}: recorded_at")


_JSONL_REQUIRED = ("session_id", "version", "event_id", "type", "event")
