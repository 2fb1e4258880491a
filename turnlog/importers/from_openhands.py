"""Reading an OpenHands event stream (a saved trajectory: a JSON list of actions and observations)
into one session: messages, tool calls paired with their results, file edits as artifact writes,
and the usage of each model response once.

OpenHands turns one model response into one action per tool call, and writes the response (its
``tool_call_metadata.model_response``, usage included) on each of them and again on each
observation. Here a response becomes one assistant message holding every tool call it made (its
text, else the first action's ``thought``, as the content), followed by one ``usage_recorded`` for
the response (``response_id`` its id, ``call_event_id`` that message), however many events repeat
it. Usage is read as litellm normalizes it: ``prompt_tokens`` include the cached ones
(``prompt_tokens_details.cached_tokens`` or ``cache_read_input_tokens`` kept as cache reads,
``cache_creation_input_tokens`` as cache writes); where the cache counts exceed ``prompt_tokens``
(an older litellm that left them out, as Anthropic does) they are added to it.

The ``system`` action is the system message, ``message`` actions are the user's or the agent's
messages, an observation answering a tool call (by its ``tool_call_metadata``, else its
``cause``) is the call's ``tool_returned`` (an ``error`` observation an error), and an ``edit`` or
``write`` action whose observation is not an error is an ``artifact_written`` of its path holding
the text it wrote (``file_text`` of a create, ``new_str`` of a replace or an insert, ``content``
of a write). Other events (agent state changes, recalls, ...) are not conversation and are left
out. OpenHands writes its host's local time without an offset: such a time is read as UTC."""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnlog.importers.agent_logs import fill_times, line_id, session_names
from turnlog.importers.base import (
    Conversation,
    arguments_text,
    check_unicode,
    decode_text,
    fields_of,
    is_id,
    load_document,
    short_repr,
)
from turnlog.importers.openhands_usage import MetricsUsage, litellm_counts, read_snapshot, usage_event
from turnlog.store import (
    ArtifactWritten,
    Event,
    InvalidEventError,
    MessageAppended,
    SessionStarted,
    ToolCall,
    ToolReturned,
)
from turnlog.store.limits import recorded_time

SOURCE = "openhands"
"""The ``source`` of the usage."""

_HEAD = re.compile(r"\A\s*\[\s*\{")
_SOURCE_KEY = re.compile(r'"source"\s*:\s*"(agent|user|environment)"')
_KIND_KEY = re.compile(r'"(action|observation)"\s*:\s*"')
_SOURCES = frozenset({"agent", "user", "environment"})
_EDITS = frozenset({"edit", "write"})


def looks_like_openhands(text_head: str) -> bool:
    """Whether the start of a file looks like an OpenHands event stream: a JSON list of objects with
    a ``source`` of agent, user or environment and an ``action`` or an ``observation``."""
    head = text_head.removeprefix("\ufeff")
    return bool(_HEAD.match(head) and _SOURCE_KEY.search(head) and _KIND_KEY.search(head))


@dataclass
class _Response:
    """One model response, gathered from every event that carries it."""

    calls: list[ToolCall] = field(default_factory=list)
    text: str | None = None
    thought: str | None = None
    model: str | None = None
    usage: dict[str, Any] | None = None
    usage_where: str = ""
    message_id: str | None = None


def parse_openhands(
    text: str, *, session: str | None = None, model: str | None = None, name: str | None = None
) -> list[Conversation]:
    """Read an OpenHands event stream as one conversation (see the module's docstring).

    The session id is ``session``, else one derived from the stream's first events (a stream that
    has grown since maps to the same session); event ids derive from the session, each event's
    index and its text, so importing the grown file again appends only what is new. ``model`` is
    the model where a response names none."""
    document, where = load_document(text, name)
    if not isinstance(document, list):
        raise InvalidEventError(
            f"{where}: expected an OpenHands event stream (a JSON list of events), "
            f"got {type(document).__name__}"
        )
    entries = [_entry(item, f"{where}, event [{index}]") for index, item in enumerate(document)]
    session_id = session or _derived_id(document)
    responses = _responses(entries)
    return [_build(session_id, entries, responses, model)]


def read_openhands(path: Path, *, session: str | None = None, model: str | None = None) -> list[Conversation]:
    """Read a saved event stream (a file), or OpenHands' file store: a folder of
    ``sessions/<id>/events/<n>.json`` (one event per file), given as the store, its ``sessions``
    folder, one session's folder or its ``events`` folder. Each session found is one conversation,
    under its OpenHands id (``session`` names it instead: ``NAME``, or ``NAME-1``, ``NAME-2``...
    for several); events are read in the order of their numbers."""
    if not path.is_dir():
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InvalidEventError(f"{path}: cannot be read: {exc.strerror or exc}") from None
        return parse_openhands(decode_text(data, str(path)), session=session, model=model, name=str(path))
    folders = event_folders(path)
    if not folders:
        raise InvalidEventError(
            f"{path}: no OpenHands events in it (expected sessions/<id>/events/<n>.json, one event per file)"
        )
    names = session_names(session, [sid for sid, _ in folders])
    conversations = []
    for sid, folder in folders:
        if not is_id(names[sid]):
            raise InvalidEventError(f"{folder}: {short_repr(names[sid])} cannot be a session id")
        entries = []
        for file in _numbered(folder):
            try:
                text = decode_text(file.read_bytes(), str(file))
            except OSError as exc:
                raise InvalidEventError(f"{file}: cannot be read: {exc.strerror or exc}") from None
            entries.append(_entry(load_document(text, str(file))[0], str(file)))
        conversations.append(_build(names[sid], entries, _responses(entries), model))
    return conversations


def event_folders(path: Path) -> list[tuple[str, Path]]:
    """The ``events`` folders at or under ``path`` (an OpenHands file store, its ``sessions``
    folder, a session's folder or an events folder), each with its session's id, by id."""
    if path.name == "events" and _numbered(path):
        return [(path.parent.resolve().name, path)]
    if (path / "events").is_dir():
        return [(path.name, path / "events")] if _numbered(path / "events") else []
    root = path / "sessions" if (path / "sessions").is_dir() else path
    return [
        (child.name, child / "events")
        for child in sorted(root.iterdir())
        if (child / "events").is_dir() and _numbered(child / "events")
    ]


def looks_like_openhands_store(path: Path) -> bool:
    """Whether a folder holds OpenHands events (its first event file is an event object)."""
    folders = event_folders(path) if path.is_dir() else []
    if not folders:
        return False
    first = _numbered(folders[0][1])[0]
    return looks_like_openhands("[" + first.read_text(encoding="utf-8", errors="replace")[:4096])


def _numbered(folder: Path) -> list[Path]:
    """The ``<n>.json`` files of a folder, by number."""
    try:
        found = [p for p in folder.iterdir() if p.suffix == ".json" and p.stem.isdigit() and p.is_file()]
    except OSError:
        return []
    return sorted(found, key=lambda p: int(p.stem))


@dataclass(frozen=True)
class _Entry:
    where: str
    data: dict[str, Any]
    kind: str
    """``action`` or ``observation``."""
    name: str
    """The action's or the observation's type (``run``, ``edit``, ``message``...)."""
    call_id: str | None
    function: str | None
    response: dict[str, Any] | None


def _entry(item: Any, where: str) -> _Entry:
    """One event, its fields checked; errors name the event and the field."""
    if not isinstance(item, dict):
        raise InvalidEventError(f"{where}: expected an object, got {type(item).__name__}")
    if isinstance(item.get("id"), int) and not isinstance(item["id"], bool):
        where = f"{where} (id {item['id']})"
    source = item.get("source")
    if not isinstance(source, str) or source not in _SOURCES:
        raise InvalidEventError(
            f"{where}: source must be agent, user or environment, not {short_repr(source)}"
        )
    kinds = [k for k in ("action", "observation") if k in item]
    if len(kinds) != 1 or not isinstance(item[kinds[0]], str) or not item[kinds[0]]:
        raise InvalidEventError(f"{where}: an event has either an 'action' or an 'observation' (a name)")
    kind = kinds[0]
    call_id = function = None
    response = None
    metadata = item.get("tool_call_metadata")
    if metadata is not None:
        here = f"{where}, tool_call_metadata"
        if not isinstance(metadata, dict):
            raise InvalidEventError(f"{here}: must be an object, not {short_repr(metadata)}")
        call_id, function = metadata.get("tool_call_id"), metadata.get("function_name")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidEventError(
                f"{here}.tool_call_id: a tool call needs an id, not {short_repr(call_id)}"
            )
        if not isinstance(function, str) or not function:
            raise InvalidEventError(
                f"{here}.function_name: expected the tool's name, not {short_repr(function)}"
            )
        response = metadata.get("model_response")
        if response is not None and (
            not isinstance(response, dict) or not isinstance(response.get("id"), str) or not response["id"]
        ):
            raise InvalidEventError(f"{here}.model_response: must be an object with an 'id'")
    if kind == "action" and "args" in item and not isinstance(item["args"], dict):
        raise InvalidEventError(f"{where}: args must be an object, not {short_repr(item['args'])}")
    return _Entry(where, item, kind, item[kind], call_id, function, response)


def _responses(entries: list[_Entry]) -> dict[str, _Response]:
    """Every model response of the stream by id: the tool calls its actions made (in stream
    order), its text and its usage, read once whichever event carries it first."""
    responses: dict[str, _Response] = {}
    for entry in entries:
        if entry.response is None:
            continue
        rid = entry.response["id"]
        found = responses.setdefault(rid, _Response())
        if found.usage is None and entry.response.get("usage") is not None:
            found.usage, found.usage_where = entry.response["usage"], f"{entry.where}, model_response.usage"
        if found.model is None and isinstance(entry.response.get("model"), str) and entry.response["model"]:
            found.model = entry.response["model"]
        if entry.kind != "action" or entry.call_id is None or entry.function is None:
            continue
        message = _response_message(entry.response)
        if found.text is None and isinstance(message.get("content"), str):
            found.text = message["content"]
        args = entry.data.get("args") or {}
        if found.thought is None and isinstance(args.get("thought"), str):
            found.thought = args["thought"]
        if any(call.id == entry.call_id for call in found.calls):
            continue
        with fields_of(f"{entry.where}, tool_call_metadata"):
            found.calls.append(
                ToolCall(id=entry.call_id, name=entry.function, arguments=_arguments(entry, message, args))
            )
    return responses


def _response_message(response: dict[str, Any]) -> dict[str, Any]:
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict):
            return message
    return {}


def _arguments(entry: _Entry, message: dict[str, Any], args: dict[str, Any]) -> str:
    """The call's arguments as the model sent them (from the response), else the action's args."""
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if (
            isinstance(call, dict)
            and call.get("id") == entry.call_id
            and isinstance(call.get("function"), dict)
        ):
            arguments = call["function"].get("arguments")
            if arguments is not None:
                return arguments_text(arguments)
    return arguments_text(args)


def _build(
    session_id: str, entries: list[_Entry], responses: dict[str, _Response], model: str | None
) -> Conversation:
    events: list[Event] = []
    times: list[str | None] = []
    call_names: dict[str, str] = {}
    returned: set[str] = set()
    action_calls: dict[int, str] = {}  # an action's OpenHands id -> its tool call id
    edits: dict[str, ArtifactWritten] = {}  # a call id -> the artifact its edit wrote
    title: str | None = None
    first_model = next((r.model for r in responses.values() if r.model), None) or model
    snapshots = {
        index: read_snapshot(entry.data["llm_metrics"], entry.where)
        for index, entry in enumerate(entries)
        if entry.data.get("llm_metrics") is not None
    }
    metrics = MetricsUsage(snapshots, set(responses), first_model or "unknown")

    def add(event: Event, entry: _Entry) -> None:
        events.append(event)
        times.append(_time(entry))

    def response_usage(response: _Response, rid: str, entry: _Entry) -> bool:
        """Record the usage of a response that made tool calls: its own, else its llm_metrics
        entry; False when neither says."""
        where, counts = response.usage_where, None
        if response.usage is not None:
            counts = litellm_counts(response.usage, where)
        elif rid in metrics.by_id:
            where, counts = metrics.by_id[rid].where, metrics.by_id[rid].counts
        if counts is None:
            return False
        metrics.called_response(counts)
        usage = usage_event(
            counts,
            event_id=line_id(session_id, "usage", rid),
            model=response.model or model or "unknown",
            response_id=rid,
            call_event_id=response.message_id,
            cost=None,
            where=where,
        )
        add(usage, entry)
        return True

    def action(index: int, entry: _Entry, event_id: str) -> str | None:
        """Store an action; returns the id of the assistant message it made whose usage is still to
        come (from the event's llm_metrics), if any."""
        nonlocal title
        data = entry.data
        args: dict[str, Any] = data.get("args") or {}
        if entry.call_id is not None and entry.function is not None:
            if isinstance(data.get("id"), int):
                action_calls[data["id"]] = entry.call_id
            if entry.name in _EDITS and entry.call_id not in edits:
                artifact = _artifact(entry, args, line_id(session_id, "artifact", index))
                if artifact is not None:
                    edits[entry.call_id] = artifact
            if entry.call_id in call_names:
                return None
            rid = entry.response["id"] if entry.response is not None else None
            response = responses.get(rid) if rid is not None else None
            if response is not None and response.message_id is not None:
                return None  # an earlier action of the same response made the message
            calls = tuple(response.calls) if response is not None else ()
            if response is None:
                calls = (ToolCall(id=entry.call_id, name=entry.function, arguments=arguments_text(args)),)
            content = (response.text or response.thought or "") if response is not None else ""
            if response is None and isinstance(args.get("thought"), str):
                content = args["thought"]
            check_unicode(content, f"{entry.where}, content")
            add(
                MessageAppended(event_id=event_id, role="assistant", content=content, tool_calls=calls), entry
            )
            for call in calls:
                call_names[call.id] = call.name
            if response is not None and rid is not None:
                response.message_id = event_id
                if response_usage(response, rid, entry):
                    return None  # its usage is recorded: none of the snapshot's is this message's
            return event_id
        if entry.name == "system":
            add(
                MessageAppended(event_id=event_id, role="system", content=_text(entry, args, "content")),
                entry,
            )
        elif entry.name == "message":
            role = "user" if data["source"] == "user" else "assistant"
            content = _text(entry, args, "content")
            add(MessageAppended(event_id=event_id, role=role, content=content), entry)
            if role == "user" and title is None:
                title = " ".join(content.split())[:80] or None
            return event_id if role == "assistant" else None
        elif entry.name == "finish" and data["source"] == "agent":
            # A finish without a tool call (the model answered in plain text): its final words.
            content = _text(entry, args, "final_thought") or _text(entry, args, "thought")
            add(MessageAppended(event_id=event_id, role="assistant", content=content), entry)
            return event_id
        return None

    def observation(entry: _Entry, event_id: str) -> None:
        data = entry.data
        call_id = entry.call_id
        if call_id is None and isinstance(data.get("cause"), int):
            call_id = action_calls.get(data["cause"])
        if call_id is None:
            return  # not the result of a tool call
        if call_id not in call_names:
            raise InvalidEventError(
                f"{entry.where}: tool_call_metadata.tool_call_id {short_repr(call_id)} answers no tool "
                "call of an earlier action"
            )
        if call_id in returned:
            return  # OpenHands answers a call once; a second answer is not sent to the model
        returned.add(call_id)
        content = data.get("content", "")
        if not isinstance(content, str):
            raise InvalidEventError(f"{entry.where}: content must be a string, not {short_repr(content)}")
        check_unicode(content, f"{entry.where}, content")
        failed = entry.name == "error" or data.get("success") is False
        add(
            ToolReturned(
                event_id=event_id,
                tool_call_id=call_id,
                tool_name=call_names[call_id],
                content=content,
                is_error=failed,
            ),
            entry,
        )
        artifact = edits.pop(call_id, None)
        if artifact is not None and not failed:
            add(artifact, entry)

    unbilled: str | None = None  # the last assistant message whose usage is still to come
    for index, entry in enumerate(entries):
        event_id = line_id(session_id, index, json.dumps(entry.data, sort_keys=True, ensure_ascii=False))
        with fields_of(entry.where):
            if entry.kind == "action":
                unbilled = action(index, entry, event_id) or unbilled
            else:
                observation(entry, event_id)
            # A snapshot written after the reply's own event (or the reply's event had none) still
            # belongs to the reply it first counts.
            for usage in metrics.at(index, unbilled, lambda *parts: line_id(session_id, *parts)):
                add(usage, entry)
                if usage.call_event_id is not None:
                    unbilled = None
    if not events:
        raise InvalidEventError("the file holds no OpenHands message, tool call or result")
    started = SessionStarted(
        event_id=line_id(session_id, "session_started"),
        title=title,
        model=first_model,
        metadata={"imported_from": SOURCE},
    )
    first_time = next((t for t in times if t is not None), None)
    return Conversation(session_id, (started, *events), fill_times([first_time, *times]))


def _text(entry: _Entry, args: dict[str, Any], name: str) -> str:
    value = args.get(name, "")
    if not isinstance(value, str):
        raise InvalidEventError(f"{entry.where}: args.{name} must be a string, not {short_repr(value)}")
    check_unicode(value, f"{entry.where}, args.{name}")
    return value


def _artifact(entry: _Entry, args: dict[str, Any], event_id: str) -> ArtifactWritten | None:
    """What an edit or a write action wrote: its path and the text (None for a view or an undo)."""
    path = args.get("path")
    if not isinstance(path, str) or not path:
        raise InvalidEventError(f"{entry.where}: args.path must name the file edited, not {short_repr(path)}")
    command = args.get("command")
    if entry.name == "write":
        key = "content"
    elif command == "create":
        key = "file_text"
    elif command in ("str_replace", "insert"):
        key = "new_str"
    elif command in (None, "", "edit") and isinstance(args.get("content"), str):
        key = "content"  # the LLM-based editor
    else:
        return None
    text = args.get(key)
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise InvalidEventError(f"{entry.where}: args.{key} must be a string, not {short_repr(text)}")
    check_unicode(text, f"{entry.where}, args.{key}")
    check_unicode(path, f"{entry.where}, args.path")
    with fields_of(f"{entry.where}, args"):
        return ArtifactWritten(event_id=event_id, name=path, content=text, tool_call_id=entry.call_id)


def _time(entry: _Entry) -> str | None:
    value = entry.data.get("timestamp")
    if value is None:
        return None
    if isinstance(value, str):
        try:
            when = datetime.datetime.fromisoformat(value)
        except ValueError:
            when = None
        if when is not None and when.tzinfo is None:
            value = when.replace(tzinfo=datetime.UTC).isoformat()
    return recorded_time(value, f"{entry.where}: timestamp")


def _derived_id(document: list[Any]) -> str:
    """An id from the stream's first events (the system prompt and the task), which a grown file
    keeps."""
    canonical = json.dumps(document[:2], sort_keys=True, ensure_ascii=False)
    return "openhands-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]
