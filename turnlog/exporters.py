"""Exporting sessions: turnlog's own lossless JSON lines, and whole-session transcripts in the
OpenAI chat-completions and Anthropic Messages formats.

The jsonl format has one JSON object per event, in the shape ``turnlog log --json`` prints plus a
``digest``::

    {"position": 7, "session_id": "chat-1", "version": 3, "event_id": "...", "type": "tool_returned",
     "schema_version": 1, "tokens": 21, "recorded_at": "2025-...", "prev_hash": "...", "hash": "...",
     "event": {<the event's fields>}, "digest": "<sha256>"}

``event`` holds every field of the event but the envelope (``type``, ``schema_version``,
``event_id``), large contents included, so the file stands alone. ``position``, ``tokens``,
``recorded_at``, ``prev_hash`` and ``hash`` are the source store's, for reference: an import appends
the events again, so the new store assigns its own. ``digest`` is the sha256 of the canonical JSON of
the fields an import reads (session id, version, event id, type, schema version, event): an edited
or damaged line is refused. Sessions are whole, in version order, a fork after its parent."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from turnlog.projections.context import INTERRUPTED, ContextMessage
from turnlog.projections.formats import to_anthropic, to_openai
from turnlog.store import (
    EventStore,
    InvalidEventError,
    MessageAppended,
    RecordedEvent,
    SessionStarted,
    Store,
    ToolReturned,
    UsageRecorded,
    determinism,
)

ExportFormat = Literal["jsonl", "openai", "anthropic"]

EXPORT_FORMATS: tuple[ExportFormat, ...] = ("jsonl", "openai", "anthropic")
"""The formats ``export_sessions`` writes."""

SYNTHESIZED_KEY = "turnlog_synthesized_results"
"""The key of an OpenAI export listing the call ids whose result turnlog synthesized."""

_DIGESTED = ("session_id", "version", "event_id", "type", "schema_version", "event")
_PAGE = 1000


def jsonl_digest(line: Mapping[str, Any]) -> str:
    """The ``digest`` of a jsonl line: sha256 of the canonical JSON of the fields an import reads."""
    canonical = json.dumps(
        {key: line.get(key) for key in _DIGESTED},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def export_jsonl(store: EventStore, session_id: str) -> Iterator[str]:
    """The session's events as jsonl lines (without newlines), oldest first, read a page at a time
    so a long session is never held in memory whole. Raises UnknownSessionError for an unknown session."""
    head = store.require_session(session_id)
    for start in range(1, head + 1, _PAGE):
        for record in store.read_session(
            session_id, from_version=start, to_version=start + _PAGE - 1, own=True
        ):
            line = record.to_dict()
            line["digest"] = jsonl_digest(line)
            yield _one_line(json.dumps(line, ensure_ascii=False, separators=(",", ":")))


def _one_line(text: str) -> str:
    # JSON escapes every control character but these three, which str.splitlines() and some JSON
    # lines readers take for line breaks; escaped, a line of the export is one line to any reader.
    return text.replace("\x85", "\\u0085").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def export_openai(store: EventStore, session_id: str) -> dict[str, Any]:
    """The whole session as an OpenAI chat-completions transcript, ``{"id", "title", "model",
    "messages"}``, plus ``usage`` (the sum of the session's recorded usage) when there is any.

    A tool call that never got a result (the agent was interrupted) gets the synthesized result
    the context builder gives it (INTERRUPTED, an error), since the API refuses a call without
    one; their call ids are listed under SYNTHESIZED_KEY, and turnlog's importer drops them.

    Messages and tool returns are kept in log order, whole (no budget, no capping); other events
    (todos, artifacts, runs, pins) have no place in the format and are left out. turnlog's OpenAI
    importer reads the result back."""
    records = _records(store, session_id)
    started = _started(records)
    paired = _with_interrupted_results(_messages(records))
    messages = [to_openai(m) for m in paired]
    usages = [r.event for r in records if isinstance(r.event, UsageRecorded)]
    model = started.model if started and started.model else (usages[-1].model if usages else None)
    out: dict[str, Any] = {
        "id": session_id,
        "title": started.title if started else None,
        "model": model,
        "messages": messages,
    }
    if usages:
        prompt = sum(u.input_tokens for u in usages)
        completion = sum(u.output_tokens for u in usages)
        out["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": sum(u.cache_read_tokens for u in usages)},
            "completion_tokens_details": {"reasoning_tokens": sum(u.reasoning_tokens for u in usages)},
        }
    synthesized = [m.tool_call_id for m in paired if m.mode == "synthesized"]
    if synthesized:
        out[SYNTHESIZED_KEY] = synthesized
    return out


def export_anthropic(store: EventStore, session_id: str) -> dict[str, Any]:
    """The whole session in the Anthropic Messages format, ``{"system", "messages"}``: the system
    messages before the first turn make ``system``; assistant tool calls are ``tool_use`` blocks,
    tool returns ``tool_result`` blocks (``is_error`` kept) in the next user turn; consecutive
    blocks of one role are merged into one turn, as the API requires. A call that never got a
    result gets the synthesized INTERRUPTED one, as in export_openai."""
    return to_anthropic(_with_interrupted_results(_messages(_records(store, session_id))))


def export_sessions(store: EventStore, session_ids: Sequence[str], fmt: str) -> Iterator[str]:
    """The export of ``session_ids`` in format ``fmt`` as chunks of text to write one after the
    other. jsonl takes several sessions (each fork after its parent, when both are given); the
    transcript formats take one. Every session is checked before the first chunk."""
    if fmt not in EXPORT_FORMATS:
        raise InvalidEventError(f"unknown export format {fmt!r} (known: {', '.join(EXPORT_FORMATS)})")
    if not session_ids:
        raise InvalidEventError("no session to export")
    if fmt != "jsonl" and len(session_ids) > 1:
        raise InvalidEventError(
            f"the {fmt} format holds one conversation: export the sessions one at a time, "
            "or all together with --format jsonl"
        )
    for session_id in session_ids:
        store.require_session(session_id)
    if fmt == "jsonl":
        return _jsonl_chunks(store, _parents_first(store, session_ids))
    document = (
        export_openai(store, session_ids[0]) if fmt == "openai" else export_anthropic(store, session_ids[0])
    )
    return iter([json.dumps(document, indent=2, ensure_ascii=False) + "\n"])


def export_to_file(
    store: EventStore, session_ids: Sequence[str], fmt: str, path: str | os.PathLike[str]
) -> int:
    """Write the export of ``session_ids`` (see export_sessions) to ``path``; return the bytes
    written. The file is written beside ``path`` and renamed over it only once complete, so a failed
    export never leaves a truncated file. A new file gets the user's normal mode (0666 less the
    umask), a replaced one keeps its own. A path that is the store's own file (or its -wal or -shm)
    under any name is refused: the rename would destroy the store."""
    target = Path(path)
    _refuse_store_file(store, target)
    chunks = export_sessions(store, session_ids, fmt)  # every session checked before writing
    return _write_atomically(target, chunks)


def _store_files(store: EventStore) -> list[Path]:
    if not isinstance(store, Store):
        return []
    name = store.path
    if name == ":memory:" or name.startswith("file::memory:"):
        return []
    if name.startswith("file:"):
        name = name[len("file:") :].split("?", 1)[0]
    return [Path(name + suffix) for suffix in ("", "-wal", "-shm", "-journal")]


def _refuse_store_file(store: EventStore, target: Path) -> None:
    # Compared by resolved path (symlinks, relative paths, "..") and by inode (hard links), since a
    # store file's -wal or -shm may not exist yet when the export starts.
    resolved = target.resolve()
    for own in _store_files(store):
        same = own.resolve() == resolved
        if not same and target.exists() and own.exists():
            same = os.path.samefile(target, own)
        if same:
            raise InvalidEventError(
                f"{target} is the store's own file ({own}): writing the export there would destroy "
                "the store; choose another --output path"
            )


def _write_atomically(path: Path, chunks: Iterable[str]) -> int:
    """Write the chunks to a temporary file in ``path``'s folder, then rename it into place."""
    written = 0
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = None
    temp = path.parent / f".{path.name}.{determinism.token_hex(6)}.tmp"
    # os.open applies the umask to 0o666, as creating the file directly would (mkstemp makes 0600).
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            for chunk in chunks:
                handle.write(chunk)
                written += len(chunk.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return written


def _jsonl_chunks(store: EventStore, session_ids: Sequence[str]) -> Iterator[str]:
    for session_id in session_ids:
        for line in export_jsonl(store, session_id):
            yield line + "\n"


def _parents_first(store: EventStore, session_ids: Sequence[str]) -> list[str]:
    """The sessions in the order given, except that a parent given too comes before its forks."""
    wanted = list(dict.fromkeys(session_ids))
    ordered: list[str] = []

    def place(session_id: str, seen: frozenset[str]) -> None:
        if session_id in ordered or session_id in seen:
            return
        first = store.first_event(session_id)
        event = first.event if first else None
        if isinstance(event, SessionStarted) and event.parent and event.parent.session_id in wanted:
            place(event.parent.session_id, seen | {session_id})
        ordered.append(session_id)

    for session_id in wanted:
        place(session_id, frozenset())
    return ordered


def _records(store: EventStore, session_id: str) -> list[RecordedEvent]:
    store.require_session(session_id)
    return store.read_session(session_id)


def _started(records: Sequence[RecordedEvent]) -> SessionStarted | None:
    event = records[0].event if records else None
    return event if isinstance(event, SessionStarted) else None


def _with_interrupted_results(messages: Sequence[ContextMessage]) -> list[ContextMessage]:
    """The messages with a synthesized INTERRUPTED result after the results of each assistant
    message whose calls got none in the session (the results the provider needs, never logged)."""
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    out: list[ContextMessage] = []
    pending: list[ContextMessage] = []
    for message in messages:
        if pending and message.role != "tool":
            out += pending
            pending = []
        out.append(message)
        if message.role == "assistant":
            pending = [
                ContextMessage(
                    role="tool",
                    content=INTERRUPTED,
                    tokens=0,
                    mode="synthesized",
                    category="tool_output",
                    event_ids=message.event_ids,
                    order=(message.order[0], 1000 + index),
                    tool_call_id=call.id,
                    is_error=True,
                )
                for index, call in enumerate(message.tool_calls)
                if call.id not in answered
            ]
    return out + pending


def _messages(records: Sequence[RecordedEvent]) -> list[ContextMessage]:
    """The conversation's messages in log order, as the renderers of built contexts take them
    (tokens are not needed for an export and are left at zero)."""
    out: list[ContextMessage] = []
    for record in records:
        event = record.event
        if isinstance(event, MessageAppended):
            out.append(
                ContextMessage(
                    role=event.role,
                    content=event.content,
                    tokens=0,
                    mode="full",
                    category="system" if event.role == "system" else "message",
                    event_ids=(event.event_id,),
                    order=(record.version, 0),
                    name=event.name,
                    tool_calls=event.tool_calls or (),
                )
            )
        elif isinstance(event, ToolReturned):
            out.append(
                ContextMessage(
                    role="tool",
                    content=event.content,
                    tokens=0,
                    mode="full",
                    category="tool_output",
                    event_ids=(event.event_id,),
                    order=(record.version, 0),
                    tool_call_id=event.tool_call_id,
                    is_error=event.is_error,
                    name=event.tool_name,  # kept by the openai format (a tool message's "name")
                )
            )
    return out


__all__ = [
    "EXPORT_FORMATS",
    "SYNTHESIZED_KEY",
    "ExportFormat",
    "export_anthropic",
    "export_jsonl",
    "export_openai",
    "export_sessions",
    "export_to_file",
    "jsonl_digest",
]
