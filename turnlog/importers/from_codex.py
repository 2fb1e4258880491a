"""Reading OpenAI Codex CLI rollout files (``~/.codex/sessions/**/rollout-*.jsonl``) into sessions,
with the usage of each model call taken from the changes of the running token totals."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from turnlog.importers.agent_logs import (
    Record,
    compaction_summary,
    fill_times,
    first_file,
    head_objects,
    jsonl_files,
    line_id,
    line_time,
    object_field,
    read_records,
    session_names,
    text_field,
)
from turnlog.importers.base import Conversation, fields_of, is_id, short_repr, token_count
from turnlog.store import (
    DEFAULT_ENCODING,
    Event,
    InvalidEventError,
    MessageAppended,
    SessionStarted,
    SummaryRecorded,
    ToolCall,
    ToolReturned,
    UsageRecorded,
)

SOURCE = "codex"

_LINE_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
_ROLLOUT_ID = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl$")
_COUNTS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")


def looks_like_codex(path: Path) -> bool:
    """Whether ``path`` is a Codex rollout file, or a folder holding some (cheap: the first lines of
    one file)."""
    file = path if path.is_file() else first_file(path, "rollout-*.jsonl") if path.is_dir() else None
    if file is None:
        return False
    return any(
        d.get("type") in _LINE_TYPES and isinstance(d.get("payload"), dict) for d in head_objects(file)
    )


def read_codex(path: Path, *, session: str | None = None, model: str | None = None) -> list[Conversation]:
    """Read Codex rollouts: one rollout file, or a folder (``~/.codex/sessions``) with
    ``rollout-*.jsonl`` files anywhere below it. One session per rollout, named by its id
    (``session_meta``'s, else the one in the file name); ``session`` renames it (``NAME``, or
    ``NAME-1``, ``NAME-2``... for several).

    Events: ``response_item`` messages become messages (``developer`` and ``system`` ones system
    messages), ``function_call``, ``custom_tool_call`` and ``local_shell_call`` items assistant
    messages with one tool call each, and their outputs ``tool_returned`` events. Reasoning is left
    out (encrypted, billed in the output tokens, not resent as conversation), and so are the
    ``event_msg`` copies of the messages. A ``compacted`` line becomes a ``summary_recorded`` of
    every earlier version.

    Usage: Codex writes a ``token_count`` event after each model call, and again whenever only its
    rate limits change, so summing every ``last_token_usage`` over-counts; the usage of a call is
    the change of ``total_token_usage`` since the previous count (a total that went down started
    over: that count's ``last_token_usage`` is the call's). Codex's ``input_tokens`` include the
    cached ones, as turnlog's do; ``cached_input_tokens`` is kept as cache reads and
    ``reasoning_output_tokens`` as reasoning (part of the output). Each usage is tied to the first
    assistant item since the one before (its ``call_event_id``), with the model of the latest
    ``turn_context`` (else ``model``). A rollout without any token count has unknown usage: no
    ``usage_recorded`` at all, never a zero.

    Event ids derive from the session, each line's number and its text (rollouts only grow at the
    end), so importing a folder again appends only what is new."""
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = jsonl_files(path, "rollout-*.jsonl")
        if not files:
            raise InvalidEventError(f"{path}: holds no Codex rollout (rollout-*.jsonl)")
    else:
        raise InvalidEventError(f"{path}: no such file or folder")
    parsed = [(file, read_records(file)) for file in files]
    ids = [_rollout_id(file, records) for file, records in parsed]
    names = session_names(session, ids)
    conversations = []
    for (file, records), rollout in zip(parsed, ids, strict=True):
        built = _build(names[rollout], rollout, file, records, model)
        if built is not None:
            conversations.append(built)
    if not conversations:
        raise InvalidEventError(f"{path}: holds no Codex conversation")
    return conversations


def _rollout_id(file: Path, records: list[Record]) -> str:
    for record in records:
        if record.data.get("type") == "session_meta":
            payload = object_field(record, record.data, "payload")
            rollout = payload.get("id")
            if not is_id(rollout):
                raise InvalidEventError(
                    f"{record.where}: payload.id {short_repr(rollout)} is not a session id"
                )
            return str(rollout)
    match = _ROLLOUT_ID.search(file.name)
    if match is None:
        raise InvalidEventError(f"{file}: no session_meta line and no rollout id in the file name")
    return match.group(1)


def _build(
    tid: str, rollout: str, file: Path, records: list[Record], model: str | None
) -> Conversation | None:
    events: list[Event] = []
    times: list[str | None] = []
    call_names: dict[str, str] = {}
    current_model: str | None = None
    first_model: str | None = None
    title: str | None = None
    metadata: dict[str, Any] = {"imported_from": SOURCE, "source_session_id": rollout}
    total = dict.fromkeys(_COUNTS, 0)
    call_event: str | None = None  # the first assistant item since the last usage

    def add(event: Event, record: Record) -> None:
        events.append(event)
        times.append(line_time(record))

    for number, record in enumerate(records):
        data = record.data
        kind = data.get("type")
        if not isinstance(kind, str):
            raise InvalidEventError(
                f"{record.where}: type: required field is missing (a rollout line has one)"
            )
        if kind not in _LINE_TYPES:
            continue
        payload = object_field(record, data, "payload")
        event_id = line_id(tid, number, json.dumps(data, sort_keys=True, ensure_ascii=False))
        if kind == "session_meta":
            for name in ("cwd", "cli_version", "originator", "model_provider"):
                value = text_field(record, payload, name)
                if value is not None:
                    metadata.setdefault(name, value)
        elif kind == "turn_context":
            current_model = text_field(record, payload, "model") or current_model
            first_model = first_model or current_model
        elif kind == "compacted":
            text = text_field(record, payload, "message")
            if text and events:
                with fields_of(record.where):
                    add(compaction_summary(event_id, SOURCE, event_id, len(events) + 1, text, None), record)
        elif kind == "response_item":
            made = _item(record, payload, event_id, call_names)
            if made is None:
                continue
            add(made, record)
            if isinstance(made, MessageAppended):
                if made.role == "assistant" and call_event is None:
                    call_event = made.event_id
                if made.role == "user" and title is None and not made.content.startswith("<"):
                    title = " ".join(made.content.split())[:80] or None
        elif kind == "event_msg" and payload.get("type") == "token_count":
            usage = _usage(record, payload, total)
            if usage is None:
                continue
            with fields_of(record.where):
                add(
                    UsageRecorded(
                        event_id=event_id,
                        model=current_model or model or "unknown",
                        input_tokens=usage["input_tokens"],
                        output_tokens=usage["output_tokens"],
                        cache_read_tokens=usage["cached_input_tokens"],
                        reasoning_tokens=usage["reasoning_output_tokens"],
                        call_event_id=call_event,
                        source=SOURCE,
                    ),
                    record,
                )
            call_event = None
    if not events:
        return None
    summaries = any(isinstance(e, SummaryRecorded) for e in events)
    started = SessionStarted(
        event_id=line_id(tid, "session_started"),
        title=title,
        model=first_model or model,
        tokenizer=DEFAULT_ENCODING if summaries else None,
        metadata=metadata,
    )
    first_time = next((line_time(r) for r in records if r.data.get("timestamp") is not None), None)
    return Conversation(tid, (started, *events), fill_times([first_time, *times]))


def _usage(record: Record, payload: dict[str, Any], total: dict[str, int]) -> dict[str, int] | None:
    """The usage of the calls since the previous count (updating ``total``), None when the totals
    did not change (a rate-limit update) or the count carries none."""
    info = payload.get("info")
    if info is None:
        return None
    if not isinstance(info, dict):
        raise InvalidEventError(f"{record.where}: payload.info must be an object, not {short_repr(info)}")
    now = _counts(record, info, "total_token_usage")
    if now == total:
        return None
    change = {name: now[name] - total[name] for name in _COUNTS}
    if any(value < 0 for value in change.values()):
        change = _counts(record, info, "last_token_usage")
    total.update(now)
    return change


def _counts(record: Record, info: dict[str, Any], name: str) -> dict[str, int]:
    where = f"{record.where}, payload.info.{name}"
    usage = info.get(name)
    if not isinstance(usage, dict):
        raise InvalidEventError(f"{where}: must be an object, not {short_repr(usage)}")
    return {n: 0 if usage.get(n) is None else token_count(usage[n], n, where) for n in _COUNTS}


def _item(record: Record, item: dict[str, Any], event_id: str, call_names: dict[str, str]) -> Event | None:
    """The event of one ``response_item``; None for items that are not conversation (reasoning...)."""
    kind = item.get("type")
    where = f"{record.where}, payload"
    with fields_of(where):
        if kind == "message":
            role = item.get("role")
            text = _text(item.get("content"), where)
            if role == "assistant":
                return MessageAppended(event_id=event_id, role="assistant", content=text)
            if role == "user":
                return MessageAppended(event_id=event_id, role="user", content=text)
            if role in ("developer", "system"):
                return MessageAppended(event_id=event_id, role="system", content=text)
            raise InvalidEventError(
                f"{where}: role {short_repr(role)} is not user, assistant, developer or system"
            )
        if kind in ("function_call", "custom_tool_call", "local_shell_call"):
            call_id = item.get("call_id") or item.get("id")
            name: Any
            arguments: Any
            if kind == "local_shell_call":
                name, arguments = "local_shell", json.dumps(item.get("action"), ensure_ascii=False)
            else:
                name = item.get("name")
                arguments = item.get("arguments" if kind == "function_call" else "input")
                if not isinstance(arguments, str):
                    arguments = json.dumps(arguments, ensure_ascii=False)
            call = ToolCall(id=call_id, name=name, arguments=arguments)
            call_names[call.id] = call.name
            return MessageAppended(event_id=event_id, role="assistant", tool_calls=(call,))
        if kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidEventError(f"{where}: call_id: required field is missing")
            output = item.get("output")
            if isinstance(output, dict):  # an older payload: {"content": ..., "success": ...}
                failed = output.get("success") is False
                output = output.get("content")
            else:
                failed = False
            return ToolReturned(
                event_id=event_id,
                tool_call_id=call_id,
                tool_name=call_names.get(call_id),
                content=_text(output, where),
                is_error=failed,
            )
    return None


def _text(content: Any, where: str) -> str:
    """A message's or an output's content: a string, or a list of parts (text kept, others noted)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidEventError(
            f"{where}: content must be a string or a list of parts, not {short_repr(content)}"
        )
    parts = []
    for index, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InvalidEventError(f"{where}, content[{index}]: a part must be an object with a 'type'")
        if "text" in part:
            if not isinstance(part["text"], str):
                raise InvalidEventError(f"{where}, content[{index}]: text must be a string")
            parts.append(part["text"])
        else:
            parts.append(f"[{part['type']} omitted]")
    return "\n".join(parts)
