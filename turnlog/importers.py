"""Importing into the log: turnlog's own lossless JSON lines export, OpenAI chat-completions
transcripts and pydantic-ai message histories, one session per conversation.

Imports are atomic per session and idempotent: the jsonl format keeps the original event ids, the
others derive them from the session id, the event's index and its content, so importing the same
file twice writes nothing the second time, and importing a transcript that has grown since appends
only the new events."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from store import (
    NO_SESSION,
    Event,
    EventStore,
    InvalidEventError,
    MessageAppended,
    SessionStarted,
    ToolCall,
    ToolReturned,
    UsageRecorded,
    parse_event,
)
from store.errors import DuplicateEventError
from store.events import describe_validation_error
from store.sqlite import MAX_BATCH


@dataclass(frozen=True)
class Conversation:
    """One conversation read from a transcript, ready to append as one session."""

    session_id: str
    events: tuple[Event, ...]


@dataclass
class ImportResult:
    """What an import did, per session."""

    sessions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def appended(self) -> int:
        return sum(s["appended"] for s in self.sessions)


def derive_event_id(session_id: str, index: int, event: Event) -> str:
    """A stable id for the index-th event of an imported session: the same transcript always gives
    the same ids (so re-imports are retries), a different one gives different ids."""
    content = event.model_dump_json(exclude={"event_id"})
    return hashlib.sha256(f"{session_id}\0{index}\0{content}".encode()).hexdigest()[:32]


def with_derived_ids(session_id: str, events: Sequence[Event]) -> tuple[Event, ...]:
    """The events with ids derived from the session, their index and their content."""
    return tuple(
        e.model_copy(update={"event_id": derive_event_id(session_id, i, e)}) for i, e in enumerate(events)
    )


def import_conversations(
    store: EventStore,
    conversations: Sequence[Conversation],
    *,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Append each conversation as one session, atomically. A session already imported is skipped;
    one imported from a shorter version of the transcript gets the new events appended.

    Every session is checked before anything is written (a name taken by another session, a fork
    whose parent is missing, a tokenizer that differs from the store's), so such a file changes
    nothing. ``progress(n)`` is called with the number of events handled after each batch."""
    plans = [
        _plan(store, conversation, conversations[:index]) for index, conversation in enumerate(conversations)
    ]
    result = ImportResult()
    for conversation, (head, rest) in zip(conversations, plans, strict=True):
        expected = NO_SESSION if head == 0 else head
        skipped = len(conversation.events) - len(rest)
        if progress is not None and skipped:
            progress(skipped)
        # A session larger than one append allows goes in several batches; were one of them to
        # fail, re-running the import appends the rest (the stored part is a prefix of the file's).
        for start in range(0, len(rest), MAX_BATCH):
            batch = rest[start : start + MAX_BATCH]
            records = store.append(conversation.session_id, batch, expected_version=expected)
            expected = records[-1].version
            if progress is not None:
                progress(len(batch))
        result.sessions.append(
            {
                "session_id": conversation.session_id,
                "events": len(conversation.events),
                "appended": len(rest),
                "skipped": skipped,
            }
        )
    return result


def _plan(
    store: EventStore, conversation: Conversation, earlier: Sequence[Conversation]
) -> tuple[int, list[Event]]:
    """The session's head version and the events still to append, or an error naming the problem."""
    sid = conversation.session_id
    events = list(conversation.events)
    first = events[0] if events else None
    if isinstance(first, SessionStarted):
        if first.tokenizer is not None and first.tokenizer != store.tokenizer.name:
            raise InvalidEventError(
                f"session {sid!r} counts tokens with {first.tokenizer!r}, this store with "
                f"{store.tokenizer.name!r}: import it into a store created with "
                f"`turnlog init --tokenizer {first.tokenizer}`"
            )
        parent = first.parent
        if parent is not None:
            in_file = [c for c in earlier if c.session_id == parent.session_id]
            parent_head = len(in_file[0].events) if in_file else store.head_version(parent.session_id)
            if parent_head < parent.version:
                raise InvalidEventError(
                    f"session {sid!r} is a fork of {parent.session_id!r} at version {parent.version}, "
                    f"which neither this store nor the file before it holds: import (or export) the "
                    "parent first"
                )
    head = store.head_version(sid)
    if head == 0:
        return 0, events
    own = store.read_session(sid, own=True)
    stored_ids = [r.event_id for r in own[: len(events)]]
    if stored_ids != [e.event_id for e in events[: len(stored_ids)]]:
        raise DuplicateEventError(
            f"session {sid!r} already exists and was not imported from this file; "
            "choose another name with --session"
        )
    rest = events[len(stored_ids) :]
    if rest and len(own) != len(stored_ids):
        raise DuplicateEventError(
            f"session {sid!r} has events appended after its import; "
            "import the grown file under another name with --session"
        )
    return head, rest


# --- OpenAI chat-completions transcripts ---------------------------------------------------------


def parse_openai(text: str, *, session: str | None = None) -> list[Conversation]:
    """Read OpenAI chat-completions transcripts: a JSON list of messages, an object with
    ``messages`` (optionally ``id``, ``title``, ``model``, ``usage``), a list of such objects, or
    JSON lines of such objects. ``session`` names the session (``NAME-1``, ``NAME-2``... when the
    file holds several conversations)."""
    documents = list(_documents(text))
    if not documents:
        raise InvalidEventError("the file holds no conversation")
    conversations = []
    for number, (where, document) in enumerate(documents, 1):
        if session is None:
            session_id = None
        elif len(documents) == 1:
            session_id = session
        else:
            session_id = f"{session}-{number}"
        conversations.append(_openai_conversation(document, where, session_id))
    return conversations


def _documents(text: str) -> Iterator[tuple[str, Any]]:
    stripped = text.strip()
    if not stripped:
        return
    try:
        document = json.loads(stripped)
    except json.JSONDecodeError as exc:
        if "\n" not in stripped:
            raise InvalidEventError(f"malformed JSON: {exc.msg} at line {exc.lineno}") from None
        for number, line in enumerate(_lines(stripped), 1):
            if not line.strip():
                continue
            try:
                yield f"line {number}", json.loads(line)
            except json.JSONDecodeError as line_exc:
                raise InvalidEventError(f"line {number}: malformed JSON: {line_exc.msg}") from None
        return
    if (
        isinstance(document, list)
        and document
        and all(isinstance(d, dict) and "messages" in d for d in document)
    ):
        for number, item in enumerate(document, 1):
            yield f"conversation {number}", item
    else:
        yield "conversation", document


def _lines(text: str) -> list[str]:
    """JSON lines: split at newlines only (str.splitlines() would also split at U+2028 and other
    characters that JSON text may hold raw inside a string)."""
    return text.replace("\r\n", "\n").split("\n")


def _openai_conversation(document: Any, where: str, session_id: str | None) -> Conversation:
    meta: dict[str, Any] = {}
    if isinstance(document, dict):
        if not isinstance(document.get("messages"), list):
            raise InvalidEventError(f"{where}: expected a 'messages' list")
        messages = document["messages"]
        meta = document
    elif isinstance(document, list):
        messages = document
    else:
        raise InvalidEventError(
            f"{where}: expected a list of messages or an object with 'messages', "
            f"got {type(document).__name__}"
        )
    if session_id is None:
        given = meta.get("id") if isinstance(meta.get("id"), str) else None
        canonical = json.dumps(messages, sort_keys=True, ensure_ascii=False)
        session_id = given or "openai-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]
    events: list[Event] = []

    def next_id() -> str:
        # Provisional; the final ids are derived from the content below.
        return f"{session_id[:150]}-{len(events)}"

    title = meta.get("title") if isinstance(meta.get("title"), str) else None
    model = meta.get("model") if isinstance(meta.get("model"), str) else None
    if title is None:
        first_user = next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"), None)
        if first_user is not None:
            title = " ".join(_text(first_user.get("content"), where).split())[:80] or None
    with _fields_of(where):
        events.append(
            SessionStarted(event_id=next_id(), title=title, model=model, metadata={"imported_from": "openai"})
        )
    call_names: dict[str, str] = {}
    legacy_calls: list[tuple[str, str]] = []  # (call id, function name) awaiting a result
    for index, message in enumerate(messages, 1):
        position = f"{where}, message {index}"
        if not isinstance(message, dict):
            raise InvalidEventError(f"{position}: expected an object, got {type(message).__name__}")
        with _fields_of(position):
            events.append(_openai_message(message, position, next_id(), call_names, legacy_calls))
    usage = meta.get("usage")
    if isinstance(usage, dict):
        with _fields_of(f"{where}, usage"):
            events.append(_usage(next_id(), usage, model))
    return Conversation(session_id, with_derived_ids(session_id, events))


def _openai_message(
    message: dict[str, Any],
    position: str,
    event_id: str,
    call_names: dict[str, str],
    legacy_calls: list[tuple[str, str]],
) -> Event:
    role = message.get("role")
    content = _text(message.get("content"), position)
    name = message.get("name") if isinstance(message.get("name"), str) and message["name"] else None
    if role in ("system", "developer", "user"):
        return MessageAppended(
            event_id=event_id, role="user" if role == "user" else "system", content=content, name=name
        )
    if role == "assistant":
        calls = []
        for raw in message.get("tool_calls") or []:
            if not isinstance(raw, dict) or not isinstance(raw.get("function"), dict):
                raise InvalidEventError(f"{position}: tool_calls entries need a 'function'")
            function = raw["function"]
            call_id = raw.get("id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidEventError(f"{position}: a tool call has no 'id'")
            calls.append(
                ToolCall(
                    id=call_id, name=function.get("name"), arguments=_arguments(function.get("arguments"))
                )
            )
            call_names[call_id] = str(function.get("name"))
        legacy = message.get("function_call")
        if isinstance(legacy, dict):
            call_id = f"call_{hashlib.sha256(event_id.encode()).hexdigest()[:12]}"
            calls.append(
                ToolCall(id=call_id, name=legacy.get("name"), arguments=_arguments(legacy.get("arguments")))
            )
            legacy_calls.append((call_id, str(legacy.get("name"))))
            call_names[call_id] = str(legacy.get("name"))
        if not content and isinstance(message.get("refusal"), str):
            content = message["refusal"]
        return MessageAppended(
            event_id=event_id,
            role="assistant",
            content=content,
            name=name,
            tool_calls=tuple(calls) or None,
        )
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidEventError(f"{position}: a tool message needs 'tool_call_id'")
        return ToolReturned(
            event_id=event_id, tool_call_id=call_id, tool_name=call_names.get(call_id), content=content
        )
    if role == "function":
        fn_name = name or ""
        match = next((c for c in reversed(legacy_calls) if c[1] == fn_name), None)
        if match is None:
            raise InvalidEventError(
                f"{position}: function result for {fn_name!r} without an earlier function_call"
            )
        legacy_calls.remove(match)
        return ToolReturned(event_id=event_id, tool_call_id=match[0], tool_name=fn_name, content=content)
    raise InvalidEventError(
        f"{position}: unknown role {role!r} (expected system, developer, user, assistant, tool or function)"
    )


@contextlib.contextmanager
def _fields_of(position: str) -> Iterator[None]:
    """Field errors of a model built from a transcript, as one line naming where they are."""
    try:
        yield
    except ValidationError as exc:
        raise InvalidEventError(f"{position}: {describe_validation_error(exc)}") from None


def _usage(event_id: str, usage: dict[str, Any], model: str | None) -> UsageRecorded:
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return UsageRecorded(
        event_id=event_id,
        model=model or "unknown",
        input_tokens=int(usage.get("prompt_tokens", usage.get("input_tokens", 0)) or 0),
        output_tokens=int(usage.get("completion_tokens", usage.get("output_tokens", 0)) or 0),
        cache_read_tokens=int(prompt_details.get("cached_tokens", 0) or 0),
        reasoning_tokens=int(completion_details.get("reasoning_tokens", 0) or 0),
    )


def _text(content: Any, position: str) -> str:
    """OpenAI content: a string, null, or a list of parts (text kept, other parts noted)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
                parts.append(str(part.get("text", "")))
            elif isinstance(part, dict) and "type" in part:
                parts.append(f"[{part['type']} omitted]")
            else:
                raise InvalidEventError(f"{position}: content parts must be objects with 'type'")
        return "\n".join(parts)
    raise InvalidEventError(f"{position}: content must be a string, null or a list of parts")


def _arguments(arguments: Any) -> str:
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


# --- turnlog's own JSON lines ----------------------------------------------------------------------


def parse_jsonl(text: str, *, session: str | None = None) -> list[Conversation]:
    """Read turnlog's own export (``turnlog export --format jsonl``, see :mod:`turnlog.exporters`):
    one JSON object per event, sessions whole and in version order, possibly several interleaved.

    The events keep their ids, types, schema versions and fields; they are appended again through
    the normal append path, so the new store's hash chain is its own. A line whose ``digest`` does
    not match its content is refused. A forked session must come after its parent. ``session``
    renames the sessions (``NAME-1``, ``NAME-2``... when there are several; forks follow)."""
    from turnlog.exporters import jsonl_digest  # the format is defined next to its writer

    groups: dict[str, list[Event]] = {}
    bases: dict[str, int] = {}
    for number, line in enumerate(_lines(text), 1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            data = json.loads(line)
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
        conversations.append(Conversation(names[sid], tuple(events)))
    return conversations


_JSONL_REQUIRED = ("session_id", "version", "event_id", "type", "event")


# --- pydantic-ai message histories -----------------------------------------------------------------

# Request parts that hold no conversation: pydantic-ai's own bookkeeping of instructions, tools,
# capabilities and settings, and provider-side compaction summaries (the raw messages are kept).
_PAI_SKIPPED_REQUEST_PARTS = frozenset(
    {
        "instruction",
        "instruction-delta",
        "instruction-baseline",
        "instruction-digest",
        "tool-availability-delta",
        "capability-load-delta",
        "model-settings-delta",
        "compaction",
    }
)
_PAI_TOOL_RETURNS = frozenset({"tool-return", "tool-search-return", "capability-load-return"})
_PAI_TOOL_CALLS = frozenset({"tool-call", "tool-search-call", "capability-load-call"})
_PAI_NATIVE_CALLS = frozenset({"builtin-tool-call", "builtin-tool-search-call"})
_PAI_NATIVE_RETURNS = frozenset({"builtin-tool-return", "builtin-tool-search-return"})
_PAI_ERROR_OUTCOMES = frozenset({"failed", "retried"})


def parse_pydantic_ai(text: str, *, session: str | None = None) -> list[Conversation]:
    """Read pydantic-ai message histories as ``ModelMessagesTypeAdapter.dump_json`` writes them: a
    JSON list of messages (one conversation), a list of such lists, or JSON lines of them.

    Requests: system prompts and the request's ``instructions`` (when they change) become system
    messages; user prompts user messages (text kept, other content noted as ``[image-url omitted:
    URL]``); tool returns ``tool_returned`` (non-text content as JSON; ``is_error`` for the
    ``failed`` and ``retried`` outcomes); retry prompts answering a tool call a failed
    ``tool_returned``, other retry prompts and retry feedback a user message. Responses: text and
    tool calls become one assistant message; thinking is left out (it is the provider's hidden
    reasoning, counted in the usage, not conversation resent to the model); provider-side (builtin)
    tool calls and returns are kept as a call and its result; the usage becomes ``usage_recorded``
    with the response's model and run. Both the current usage fields (``input_tokens``...) and the
    old ones (``request_tokens``, ``response_tokens``, ``details``) are read.

    ``session`` names the session (``NAME-1``, ``NAME-2``... for several); else the history's
    ``conversation_id`` is used, or an id derived from its first message, so a history that has
    grown since is recognised and only its new messages are appended."""
    histories = list(_json_documents(text, "pydantic-ai message history"))
    if not histories:
        raise InvalidEventError("the file holds no message history")
    if len(histories) == 1 and isinstance(histories[0][1], list):
        document = histories[0][1]
        if document and all(isinstance(item, list) for item in document):
            histories = [(f"history {n}", item) for n, item in enumerate(document, 1)]
    conversations = []
    for number, (where, messages) in enumerate(histories, 1):
        if session is None:
            session_id = None
        elif len(histories) == 1:
            session_id = session
        else:
            session_id = f"{session}-{number}"
        conversations.append(_PydanticAIReader(where).read(messages, session_id))
    return conversations


def _json_documents(text: str, what: str) -> Iterator[tuple[str, Any]]:
    """One JSON document, or JSON lines of them."""
    stripped = text.strip()
    if not stripped:
        return
    try:
        yield "history", json.loads(stripped)
        return
    except json.JSONDecodeError as exc:
        whole = InvalidEventError(f"malformed JSON: {exc.msg} at line {exc.lineno}; expected a {what}")
    lines = [(n, line) for n, line in enumerate(_lines(stripped), 1) if line.strip()]
    for index, (number, line) in enumerate(lines):
        try:
            document = json.loads(line)
        except json.JSONDecodeError as exc:
            if index == 0:
                raise whole from None
            raise InvalidEventError(f"line {number}: malformed JSON: {exc.msg}") from None
        yield f"line {number}", document


class _PydanticAIReader:
    """Turns one pydantic-ai message history into the events of one session."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.events: list[Event] = []
        self.call_names: dict[str, str] = {}
        self.instructions: str | None = None

    def read(self, messages: Any, session_id: str | None) -> Conversation:
        if not isinstance(messages, list):
            raise InvalidEventError(
                f"{self.where}: expected a JSON list of pydantic-ai messages (as "
                f"ModelMessagesTypeAdapter.dump_json writes them), got {type(messages).__name__}"
            )
        if not messages:
            raise InvalidEventError(f"{self.where}: the history holds no messages")
        for index, message in enumerate(messages, 1):
            where = f"{self.where}, message {index}"
            if not isinstance(message, dict) or message.get("kind") not in ("request", "response"):
                raise InvalidEventError(
                    f"{where}: expected a pydantic-ai message (an object with kind 'request' or 'response')"
                )
            if not isinstance(message.get("parts"), list):
                raise InvalidEventError(f"{where}: 'parts' must be a list")
        if session_id is None:
            session_id = _pai_session_id(messages)
        model = next(
            (m["model_name"] for m in messages if isinstance(m.get("model_name"), str) and m["model_name"]),
            None,
        )
        metadata: dict[str, Any] = {"imported_from": "pydantic-ai"}
        conversation_id = next(
            (m["conversation_id"] for m in messages if _is_id(m.get("conversation_id"))), None
        )
        if conversation_id is not None:
            metadata["conversation_id"] = conversation_id
        with _fields_of(self.where):
            self.events.append(SessionStarted(title=_pai_title(messages), model=model, metadata=metadata))
        for index, message in enumerate(messages, 1):
            where = f"{self.where}, message {index}"
            if message["kind"] == "request":
                self._request(message, where)
            else:
                self._response(message, where, model)
        return Conversation(session_id, with_derived_ids(session_id, self.events))

    def _request(self, message: dict[str, Any], where: str) -> None:
        instructions = message.get("instructions")
        if isinstance(instructions, str) and instructions.strip() and instructions != self.instructions:
            # pydantic-ai sends the instructions with every request: logged once, and again on change.
            self.instructions = instructions
            self.events.append(MessageAppended(role="system", content=instructions))
        for number, part in enumerate(message["parts"], 1):
            position = f"{where}, part {number}"
            kind = _part_kind(part, position)
            with _fields_of(position):
                if kind == "system-prompt":
                    self.events.append(
                        MessageAppended(role="system", content=_pai_str(part, "content", position))
                    )
                elif kind == "user-prompt":
                    self.events.append(
                        MessageAppended(role="user", content=_user_text(part.get("content"), position))
                    )
                elif kind in _PAI_TOOL_RETURNS:
                    self.events.append(self._tool_return(part, position))
                elif kind == "retry-prompt":
                    text = _feedback_text(part.get("content"), position)
                    if isinstance(part.get("tool_name"), str) and part["tool_name"]:
                        self.events.append(
                            ToolReturned(
                                tool_call_id=_pai_call_id(part, position),
                                tool_name=part["tool_name"],
                                content=text,
                                is_error=True,
                            )
                        )
                    else:
                        self.events.append(MessageAppended(role="user", content=text))
                elif kind == "retry-feedback":
                    self.events.append(
                        MessageAppended(role="user", content=_feedback_text(part.get("content"), position))
                    )
                elif kind not in _PAI_SKIPPED_REQUEST_PARTS:
                    raise InvalidEventError(f"{position}: unknown request part_kind {kind!r}")

    def _response(self, message: dict[str, Any], where: str, session_model: str | None) -> None:
        texts: list[str] = []
        calls: list[ToolCall] = []
        native_returns: list[Event] = []
        for number, part in enumerate(message["parts"], 1):
            position = f"{where}, part {number}"
            kind = _part_kind(part, position)
            with _fields_of(position):
                if kind == "text":
                    texts.append(_pai_str(part, "content", position))
                elif kind in _PAI_TOOL_CALLS or kind in _PAI_NATIVE_CALLS:
                    name = _pai_str(part, "tool_name", position)
                    call_id = _pai_call_id(part, position)
                    calls.append(ToolCall(id=call_id, name=name, arguments=_arguments(part.get("args"))))
                    self.call_names[call_id] = name
                elif kind in _PAI_NATIVE_RETURNS:
                    native_returns.append(self._tool_return(part, position))
                elif kind == "file":
                    content = part.get("content")
                    texts.append(_omitted({**(content if isinstance(content, dict) else {}), "kind": "file"}))
                elif kind not in ("thinking", "compaction", "speech"):
                    raise InvalidEventError(f"{position}: unknown response part_kind {kind!r}")
        if texts or calls:
            with _fields_of(where):
                self.events.append(
                    MessageAppended(
                        role="assistant", content="\n\n".join(texts), tool_calls=tuple(calls) or None
                    )
                )
        self.events += native_returns
        usage = message.get("usage")
        if isinstance(usage, dict):
            model = message.get("model_name") if isinstance(message.get("model_name"), str) else None
            recorded = _pai_usage(usage, model or session_model, message, f"{where}, usage")
            if recorded is not None:
                self.events.append(recorded)

    def _tool_return(self, part: dict[str, Any], position: str) -> ToolReturned:
        call_id = _pai_call_id(part, position)
        name = part.get("tool_name") if isinstance(part.get("tool_name"), str) else None
        content = part.get("content")
        outcome = part.get("outcome", "success")
        is_error = outcome in _PAI_ERROR_OUTCOMES
        text = _feedback_text(content, position) if is_error else _json_text(content)
        return ToolReturned(
            tool_call_id=call_id,
            tool_name=name or self.call_names.get(call_id),
            content=text,
            is_error=is_error,
        )


def _part_kind(part: Any, position: str) -> str:
    if not isinstance(part, dict) or not isinstance(part.get("part_kind"), str):
        raise InvalidEventError(f"{position}: expected a part (an object with 'part_kind')")
    return str(part["part_kind"])


def _pai_str(part: dict[str, Any], key: str, position: str) -> str:
    value = part.get(key)
    if not isinstance(value, str):
        raise InvalidEventError(f"{position}: '{key}' must be a string")
    return value


def _pai_call_id(part: dict[str, Any], position: str) -> str:
    call_id = part.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidEventError(f"{position}: a tool part needs 'tool_call_id'")
    return call_id


def _user_text(content: Any, position: str) -> str:
    """A user prompt's text: a string, or a list of items (text kept, cache points dropped, files,
    images and other media noted)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidEventError(f"{position}: user prompt content must be a string or a list")
    texts = []
    for item in content:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict) and item.get("kind") in ("text-content", "structured-content"):
            texts.append(str(item.get("content", "")))
        elif isinstance(item, dict) and item.get("kind") == "cache-point":
            continue
        elif isinstance(item, dict) and isinstance(item.get("kind"), str):
            texts.append(_omitted(item))
        else:
            raise InvalidEventError(f"{position}: user prompt items must be strings or objects with 'kind'")
    return "\n".join(texts)


def _omitted(item: dict[str, Any]) -> str:
    """The note that stands for non-text content: its kind and, when short, where it was."""
    kind = item.get("kind") or item.get("part_kind") or "content"
    url = item.get("url")
    detail = url if isinstance(url, str) and not url.startswith("data:") and len(url) <= 500 else None
    if detail is None and isinstance(item.get("media_type"), str):
        detail = item["media_type"]
    return f"[{kind} omitted: {detail}]" if detail else f"[{kind} omitted]"


def _json_text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def _feedback_text(content: Any, position: str) -> str:
    """Retry feedback as stored: the message, or the validation errors as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return json.dumps(content, ensure_ascii=False, indent=2)
    raise InvalidEventError(f"{position}: retry content must be a string or a list of errors")


def _pai_usage(
    usage: dict[str, Any], model: str | None, message: dict[str, Any], where: str
) -> UsageRecorded | None:
    """The response's usage (current or old field names); None when it reports nothing."""
    details: dict[str, Any] = usage["details"] if isinstance(usage.get("details"), dict) else {}

    def count(*keys: str, source: dict[str, Any] = usage) -> int:
        for key in keys:
            value = source.get(key)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidEventError(f"{where}: {key} must be a non-negative integer, not {value!r}")
            return value
        return 0

    input_tokens = count("input_tokens", "request_tokens")
    output_tokens = count("output_tokens", "response_tokens")
    cache_read = count("cache_read_tokens") or count(
        "cached_tokens", "cache_read_input_tokens", source=details
    )
    cache_write = count("cache_write_tokens") or count("cache_creation_input_tokens", source=details)
    reasoning = count("output_reasoning_tokens") or count("reasoning_tokens", source=details)
    if not (input_tokens or output_tokens or cache_read or cache_write or reasoning):
        return None
    response_id = message.get("provider_response_id") or message.get("vendor_id")
    run_id = message.get("run_id")
    with _fields_of(where):
        return UsageRecorded(
            model=model or "unknown",
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            reasoning_tokens=reasoning,
            run_id=run_id if _is_id(run_id) else None,
            response_id=response_id if isinstance(response_id, str) else None,
        )


def _pai_session_id(messages: list[Any]) -> str:
    found = next((m["conversation_id"] for m in messages if _is_id(m.get("conversation_id"))), None)
    if found is not None:
        return str(found)
    canonical = json.dumps(messages[0], sort_keys=True, ensure_ascii=False)
    return "pydantic-ai-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _pai_title(messages: list[Any]) -> str | None:
    for message in messages:
        if message.get("kind") != "request":
            continue
        for part in message["parts"]:
            if isinstance(part, dict) and part.get("part_kind") == "user-prompt":
                try:
                    text = _user_text(part.get("content"), "")
                except InvalidEventError:
                    return None
                return " ".join(text.split())[:80] or None
    return None


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 200 and not any(c.isspace() for c in value)


# --- the registry ----------------------------------------------------------------------------------

Parser = Callable[..., list[Conversation]]

IMPORT_FORMATS: dict[str, Parser] = {
    "jsonl": parse_jsonl,
    "openai": parse_openai,
    "pydantic-ai": parse_pydantic_ai,
}
"""Format name -> parser of a file's text into conversations (``parse(text, session=...)``)."""


def import_file(
    store: EventStore,
    text: str,
    fmt: str,
    *,
    session: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ImportResult:
    """Parse ``text`` in format ``fmt`` and import its conversations (see import_conversations).
    The whole file is parsed before anything is written. ``progress(done, total)`` counts events,
    called after each batch."""
    parser = IMPORT_FORMATS.get(fmt)
    if parser is None:
        raise InvalidEventError(f"unknown import format {fmt!r} (known: {', '.join(IMPORT_FORMATS)})")
    conversations = parser(text, session=session)
    total = sum(len(c.events) for c in conversations)
    done = 0

    def step(count: int) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress(done, total)

    return import_conversations(store, conversations, progress=step)
