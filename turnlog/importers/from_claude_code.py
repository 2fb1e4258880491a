"""Reading Claude Code's session transcripts (``~/.claude/projects/<project>/<session>.jsonl`` and
their subagents' ``<session>/subagents/agent-*.jsonl``) into sessions, each API response's usage
recorded once."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
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

SOURCE = "claude-code"

_LINE_TYPES = frozenset({"user", "assistant", "system", "summary", "progress", "file-history-snapshot"})
SYNTHETIC_MODEL = "<synthetic>"
"""The model Claude Code names on messages it made up itself (API errors, "No response requested."):
never a model call, never billed."""


def looks_like_claude_code(path: Path) -> bool:
    """Whether ``path`` is a Claude Code transcript, or a folder holding some (cheap: the first
    lines of one file)."""
    file = path if path.is_file() else first_file(path, "*.jsonl") if path.is_dir() else None
    if file is None or file.suffix != ".jsonl":
        return False
    return any(
        isinstance(d.get("sessionId"), str) and d.get("type") in _LINE_TYPES and "payload" not in d
        for d in head_objects(file)
    )


def read_claude_code(
    path: Path, *, session: str | None = None, model: str | None = None
) -> list[Conversation]:
    """Read Claude Code transcripts: one session file (with its subagents' files, when the folder
    beside it holds some), a project folder, or the whole ``~/.claude/projects`` folder.

    Sessions: one per session file, named by its ``sessionId`` (``session`` renames it: ``NAME``,
    or ``NAME-1``, ``NAME-2``... for several); a subagent's transcript (``agent-*.jsonl``, or the
    ``isSidechain`` lines of an older session file) is a child session ``SESSION/agent-ID``, linked
    to its parent by ``parent_session_id`` and ``agent_id`` in its metadata (not a fork: it shares
    none of the parent's history).

    Events: user prompts become user messages (text kept, images noted), ``tool_result`` blocks
    ``tool_returned`` events paired by call id; each assistant line (Claude Code writes one per
    content block) an assistant message of its text and ``tool_use`` calls. Thinking is left out
    (the provider's hidden reasoning: billed in the output tokens, and not resent as conversation),
    and so are the messages Claude Code makes up itself (model ``<synthetic>``, API errors). A
    ``compact_boundary`` and the summary that follows it become a ``summary_recorded`` covering
    every earlier version. Progress lines are not read: what they repeat of a subagent is in its own
    file.

    Usage: one ``usage_recorded`` per API response, however many lines repeat it (lines of one
    response share ``message.id`` and ``requestId``, or, behind gateways that send no request id,
    ``message.id`` and the same prompt counts). ``input_tokens`` is Anthropic's input plus its cache
    reads and writes (turnlog counts cached tokens in); output is the largest count seen, marked a
    lower bound when no line of the response carries its stop reason (the final count never
    arrived). It follows the response's first message, whose event id is its ``call_event_id``. A
    response is billed once in a session and its subagents; lines copied from another session (a
    resumed one's history) keep their messages but not their usage. ``model`` names the model when a
    response does not.

    Event ids derive from the session and each line's ``uuid``, so importing a folder again appends
    only what is new. A response still being written that holds only thinking so far gets its usage
    on the next import; one whose output was still growing keeps the count first imported."""
    files = _transcripts(path)
    parsed = [(file, read_records(file)) for file in files]
    mains = [(file, records) for file, records in parsed if not file.name.startswith("agent-")]
    agents = [(file, records) for file, records in parsed if file.name.startswith("agent-")]
    own_ids = [_own_session(file, records) for file, records in mains]
    main_ids = [sid for sid in own_ids if sid is not None]
    names = session_names(session, main_ids)
    if session is not None and not main_ids and agents:
        names = {sid: session for sid in {_own_session(f, r) for f, r in agents} if sid is not None}
    targets: dict[str, _Target] = {}
    for (file, records), sid in zip(mains, own_ids, strict=True):
        if sid is None:
            continue
        for record in records:
            data = record.data
            if data.get("isSidechain") is True and data.get("type") in ("user", "assistant", "system"):
                agent = text_field(record, data, "agentId") or "sidechain"
                _target(targets, names[sid], sid, agent, file).records.append(record)
            else:
                _target(targets, names[sid], sid, None, file).records.append(record)
    for file, records in agents:
        sid = _own_session(file, records)
        if sid is None:
            continue
        named = (r.data["agentId"] for r in records if isinstance(r.data.get("agentId"), str))
        agent = next(named, None) or file.stem.removeprefix("agent-")
        _target(targets, names.get(sid, sid), sid, agent, file).records.extend(records)
    billed: dict[str, set[tuple[str, str]]] = {}
    conversations = []
    for target in targets.values():
        built = _build(target, billed.setdefault(target.source_session, set()), model)
        if built is not None:
            conversations.append(built)
    if not conversations:
        raise InvalidEventError(f"{path}: holds no Claude Code conversation (no user or assistant line)")
    return conversations


@dataclass
class _Target:
    """The lines that make one turnlog session."""

    session_id: str
    source_session: str
    agent_id: str | None
    parent: str | None
    records: list[Record] = field(default_factory=list)


def _target(targets: dict[str, _Target], name: str, sid: str, agent: str | None, file: Path) -> _Target:
    tid = name if agent is None else f"{name}/agent-{agent}"
    if not is_id(tid):
        raise InvalidEventError(f"{file}: agentId {short_repr(agent)} cannot be part of a session id")
    found = targets.get(tid)
    if found is None:
        found = targets[tid] = _Target(tid, sid, agent, None if agent is None else name)
    return found


def _transcripts(path: Path) -> list[Path]:
    if path.is_file():
        beside = path.with_suffix("") / "subagents"
        return [path, *(jsonl_files(beside, "agent-*.jsonl") if beside.is_dir() else [])]
    if path.is_dir():
        files = jsonl_files(path, "*.jsonl")
        if not files:
            raise InvalidEventError(f"{path}: holds no Claude Code transcript (*.jsonl)")
        return files
    raise InvalidEventError(f"{path}: no such file or folder")


def _own_session(file: Path, records: list[Record]) -> str | None:
    """The session a file belongs to: the ``sessionId`` of its first line that has one (a subagent's
    file names its parent's), None for a file with no conversation."""
    for record in records:
        sid = record.data.get("sessionId")
        if sid is None:
            continue
        if not is_id(sid):
            raise InvalidEventError(f"{record.where}: sessionId {short_repr(sid)} is not a session id")
        return str(sid)
    return None


@dataclass
class _Response:
    """One API response, gathered from every line that repeats it."""

    key: tuple[str, ...]
    message_id: str | None
    model: str | None
    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    final: bool = False
    billed: bool = False
    emitted: bool = False


def _build(target: _Target, billed: set[tuple[str, str]], model: str | None) -> Conversation | None:
    """The conversation of one target; None when it holds no user or assistant line."""
    records = target.records
    if not any(r.data.get("type") in ("user", "assistant") for r in records):
        return None
    responses = _responses(target, billed)
    tid = target.session_id
    events: list[Event] = []
    times: list[str | None] = []
    title: str | None = None
    first_model: str | None = None
    open_responses: list[_Response] = []
    call_names: dict[str, str] = {}

    def add(event: Event, record: Record) -> None:
        events.append(event)
        times.append(line_time(record))
        if isinstance(event, MessageAppended):
            call_names.update((call.id, call.name) for call in event.tool_calls or ())

    def usage(response: _Response, call_event_id: str | None, record: Record) -> None:
        response.emitted = True
        with fields_of(record.where):
            add(
                UsageRecorded(
                    event_id=line_id(tid, "usage", *response.key),
                    model=response.model or model or "unknown",
                    input_tokens=response.input + response.cache_read + response.cache_write,
                    output_tokens=response.output,
                    cache_read_tokens=response.cache_read,
                    cache_write_tokens=response.cache_write,
                    response_id=response.message_id,
                    call_event_id=call_event_id,
                    output_lower_bound=not response.final,
                    source=SOURCE,
                ),
                record,
            )

    for record in records:
        data = record.data
        kind = data.get("type")
        if not isinstance(kind, str):
            raise InvalidEventError(
                f"{record.where}: type: required field is missing (a Claude Code line has one)"
            )
        if kind not in ("user", "assistant"):
            continue
        if data.get("sessionId") is not None and not is_id(data["sessionId"]):
            raise InvalidEventError(
                f"{record.where}: sessionId {short_repr(data['sessionId'])} is not a session id"
            )
        uuid = text_field(record, data, "uuid")
        if not uuid:
            raise InvalidEventError(f"{record.where}: uuid: required field is missing")
        message = object_field(record, data, "message")
        response = responses.get(id(record))
        # A response that wrote only thinking is over when another response or a user line comes.
        for waiting in [r for r in open_responses if r is not response]:
            open_responses.remove(waiting)
            if not waiting.emitted:
                usage(waiting, None, record)
        if kind == "user":
            title = _user_line(tid, record, message, len(events), call_names, add, title)
            continue
        if response is None:
            continue  # made up by Claude Code: not a model call
        if first_model is None:
            first_model = response.model
        made = _assistant_line(tid, record, uuid, message)
        if made is not None:
            add(made, record)
        if response.billed and not response.emitted:
            if made is not None:
                usage(response, made.event_id, record)
            elif response not in open_responses:
                open_responses.append(response)
    if not events:
        return None
    metadata: dict[str, Any] = {"imported_from": SOURCE, "source_session_id": target.source_session}
    if target.parent is not None:
        metadata |= {"parent_session_id": target.parent, "agent_id": target.agent_id}
    cwd = next((r.data["cwd"] for r in records if isinstance(r.data.get("cwd"), str)), None)
    if cwd is not None:
        metadata["cwd"] = cwd
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


def _responses(target: _Target, billed: set[tuple[str, str]]) -> dict[int, _Response]:
    """Each assistant line's response (by the line object's id), with its usage gathered from every
    line that repeats it; lines Claude Code made up itself have none."""
    found: dict[tuple[str, ...], _Response] = {}
    by_line: dict[int, _Response] = {}
    for record in target.records:
        data = record.data
        if data.get("type") != "assistant" or data.get("isApiErrorMessage") is True:
            continue
        message = object_field(record, data, "message")
        name = text_field(record, message, "model")
        if name == SYNTHETIC_MODEL:
            continue
        message_id = text_field(record, message, "id")
        request_id = text_field(record, data, "requestId")
        raw = message.get("usage")
        if raw is not None and not isinstance(raw, dict):
            raise InvalidEventError(f"{record.where}: message.usage must be an object, not {short_repr(raw)}")
        counts = _counts(record, raw or {})
        if message_id is None:
            key: tuple[str, ...] = ("line", str(data.get("uuid")))
        elif request_id is not None:
            key = ("response", message_id, request_id)
        else:
            # Gateways may give every response the same id: the prompt counts tell them apart.
            key = ("response", message_id, *(str(c) for c in counts[:3]))
        response = found.get(key)
        if response is None:
            response = found[key] = _Response(key, message_id, name)
            copied = data.get("sessionId") not in (None, target.source_session)
            shared = (message_id, request_id) if message_id and request_id else None
            response.billed = raw is not None and not copied and (shared is None or shared not in billed)
            if response.billed and shared is not None:
                billed.add(shared)
            response.input, response.cache_read, response.cache_write = counts[:3]
        response.output = max(response.output, counts[3])
        response.final = response.final or message.get("stop_reason") is not None
        by_line[id(record)] = response
    return by_line


def _counts(record: Record, usage: dict[str, Any]) -> tuple[int, int, int, int]:
    """Anthropic's input, cache read, cache write and output tokens of a line's usage."""
    where = f"{record.where}, message.usage"
    names = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens")
    values = [usage.get(n) for n in names]
    inp, read, write, out = (
        0 if v is None else token_count(v, n, where) for v, n in zip(values, names, strict=True)
    )
    return inp, read, write, out


def _user_line(
    tid: str,
    record: Record,
    message: dict[str, Any],
    count: int,
    call_names: dict[str, str],
    add: Callable[[Event, Record], None],
    title: str | None,
) -> str | None:
    """The events of a user line (tool results, a prompt, a compaction summary) after ``count``
    events; the session's title, from its first prompt."""
    uuid = record.data["uuid"]
    content = message.get("content")
    blocks: list[Any]
    if isinstance(content, str):
        blocks = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        blocks = content
    else:
        raise InvalidEventError(f"{record.where}: message.content must be a string or a list of blocks")
    texts = []
    for index, block in enumerate(blocks):
        where = f"{record.where}, message.content[{index}]"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise InvalidEventError(f"{where}: a content block must be an object with a 'type'")
        if block["type"] == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidEventError(f"{where}: tool_use_id: required field is missing")
            with fields_of(where):
                add(
                    ToolReturned(
                        event_id=line_id(tid, uuid, "result", index),
                        tool_call_id=call_id,
                        tool_name=call_names.get(call_id),
                        content=_result_text(block.get("content"), where),
                        is_error=block.get("is_error") is True,
                    ),
                    record,
                )
        else:
            texts.append(_block_text(block, where))
    text = "\n".join(t for t in texts if t)
    if not text:
        return title
    if record.data.get("isCompactSummary") is True and count >= 1:
        # The summary covers every event before it (versions 2 to count + 1).
        summary_id = line_id(tid, uuid, "summary")
        with fields_of(record.where):
            add(compaction_summary(summary_id, SOURCE, f"{tid}\0{uuid}", count + 1, text, None), record)
        return title
    with fields_of(record.where):
        add(MessageAppended(event_id=line_id(tid, uuid, "user"), role="user", content=text), record)
    if title is None and record.data.get("isMeta") is not True and not text.startswith("<"):
        title = " ".join(text.split())[:80] or None
    return title


def _assistant_line(tid: str, record: Record, uuid: str, message: dict[str, Any]) -> MessageAppended | None:
    """The assistant message of one line: its text and tool calls (None when it holds only thinking)."""
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise InvalidEventError(f"{record.where}: message.content must be a string or a list of blocks")
    texts, calls = [], []
    for index, block in enumerate(content):
        where = f"{record.where}, message.content[{index}]"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise InvalidEventError(f"{where}: a content block must be an object with a 'type'")
        if block["type"] == "text":
            texts.append(_block_text(block, where))
        elif block["type"] == "tool_use":
            with fields_of(where):
                calls.append(
                    ToolCall(
                        id=block.get("id"),
                        name=block.get("name"),
                        arguments=json.dumps(block.get("input", {}), ensure_ascii=False),
                    )
                )
    text = "\n".join(t for t in texts if t)
    if not text and not calls:
        return None
    with fields_of(record.where):
        return MessageAppended(
            event_id=line_id(tid, uuid, "assistant"),
            role="assistant",
            content=text,
            tool_calls=tuple(calls) or None,
        )


def _block_text(block: dict[str, Any], where: str) -> str:
    kind = block["type"]
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            raise InvalidEventError(f"{where}: text must be a string, not {short_repr(text)}")
        return text
    if kind in ("thinking", "redacted_thinking"):
        return ""
    return f"[{kind} omitted]"


def _result_text(content: Any, where: str) -> str:
    """A tool result's content: a string, or a list of blocks (text kept, others noted)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for index, block in enumerate(content):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise InvalidEventError(
                    f"{where}, content[{index}]: a content block must be an object with a 'type'"
                )
            parts.append(_block_text(block, f"{where}, content[{index}]"))
        return "\n".join(parts)
    raise InvalidEventError(
        f"{where}: content must be a string or a list of blocks, not {short_repr(content)}"
    )
