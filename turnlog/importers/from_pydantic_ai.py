"""Reading pydantic-ai message histories (as ``ModelMessagesTypeAdapter.dump_json`` writes them)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from turnlog.importers.base import (
    Conversation,
    arguments_text,
    derive_event_id,
    fields_of,
    is_id,
    json_lines,
    load_json,
    token_count,
    with_derived_ids,
)
from turnlog.store import (
    Event,
    InvalidEventError,
    MessageAppended,
    MessageRemoved,
    SessionStarted,
    ToolCall,
    ToolReturned,
    UsageRecorded,
)

# Request parts that hold no conversation: pydantic-ai's own bookkeeping of instructions, tools,
# capabilities and settings, and provider-side compaction summaries (the raw messages are kept).
# (An ``instruction-delta`` is sent to the model: it becomes a system message.)
_PAI_SKIPPED_REQUEST_PARTS = frozenset(
    {
        "instruction",
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

    Requests: system prompts become system messages, and so do the request's ``instructions``:
    pydantic-ai sends them with every request, as the system prompt that replaces the previous
    request's, so they are logged once, and when they change the new text is logged with a
    ``message_removed`` of the old (the log keeps both; every context holds the current one once).
    An ``instruction-delta`` (a block with ``on_change='append'``, whose changes pydantic-ai adds to
    the history instead of rewriting the prefix) becomes a system message as pydantic-ai renders a
    full replacement, ``<context id="ID">`` text ``</context>``. User prompts become user messages
    (text kept, other content noted as ``[image-url omitted: URL]``); tool returns
    ``tool_returned`` (non-text content as JSON; ``is_error`` for the ``failed`` and ``retried``
    outcomes); retry prompts answering a tool call a failed ``tool_returned``, other retry prompts
    and retry feedback a user message. Responses: text and tool calls become one assistant message;
    thinking is left out (it is the provider's hidden reasoning, counted in the usage, not
    conversation resent to the model); provider-side (builtin) tool calls and returns are kept as a
    call and its result; the usage becomes ``usage_recorded`` with the response's model and run.
    Both the current usage fields (``input_tokens``...) and the old ones (``request_tokens``,
    ``response_tokens``, ``details``) are read.

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
        yield "history", load_json(stripped, "the file")
        return
    except json.JSONDecodeError as exc:
        whole = InvalidEventError(f"malformed JSON: {exc.msg} at line {exc.lineno}; expected a {what}")
    lines = [(n, line) for n, line in enumerate(json_lines(stripped), 1) if line.strip()]
    for index, (number, line) in enumerate(lines):
        try:
            document = load_json(line, f"line {number}")
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
        self.instructions_at: int | None = None
        """Where in ``events`` the current instructions' system message is."""
        self.session_id = ""

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
        self.session_id = session_id
        model = next(
            (m["model_name"] for m in messages if isinstance(m.get("model_name"), str) and m["model_name"]),
            None,
        )
        metadata: dict[str, Any] = {"imported_from": "pydantic-ai"}
        conversation_id = next(
            (m["conversation_id"] for m in messages if is_id(m.get("conversation_id"))), None
        )
        if conversation_id is not None:
            metadata["conversation_id"] = conversation_id
        with fields_of(self.where):
            self.events.append(SessionStarted(title=_pai_title(messages), model=model, metadata=metadata))
        for index, message in enumerate(messages, 1):
            where = f"{self.where}, message {index}"
            if message["kind"] == "request":
                self._request(message, where)
            else:
                self._response(message, where, model)
        events = with_derived_ids(session_id, self.events)
        # The session's model is the first response's, which a shorter export of the same
        # conversation may not hold yet: the session_started id is derived without it, so the
        # re-import of the grown history recognises the stored prefix and appends only the rest.
        started = self.events[0].model_copy(update={"model": None})
        first = events[0].model_copy(update={"event_id": derive_event_id(session_id, 0, started)})
        return Conversation(session_id, (first, *events[1:]))

    def _request(self, message: dict[str, Any], where: str) -> None:
        instructions = message.get("instructions")
        changed = isinstance(instructions, str) and bool(instructions.strip())
        changed = changed and instructions != self.instructions
        for number, part in enumerate(message["parts"], 1):
            position = f"{where}, part {number}"
            kind = _part_kind(part, position)
            if changed and not _answers_a_call(kind, part):
                # After the request's tool results, so nothing comes between a call and its result.
                self._instructions(str(instructions))
                changed = False
            with fields_of(position):
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
                elif kind == "instruction-delta":
                    self.events.append(MessageAppended(role="system", content=_delta_text(part, position)))
                elif kind == "retry-feedback":
                    self.events.append(
                        MessageAppended(role="user", content=_feedback_text(part.get("content"), position))
                    )
                elif kind not in _PAI_SKIPPED_REQUEST_PARTS:
                    raise InvalidEventError(f"{position}: unknown request part_kind {kind!r}")
        if changed:
            self._instructions(str(instructions))

    def _instructions(self, instructions: str) -> None:
        """pydantic-ai sends the instructions with every request, each time as the whole system
        prompt: logged once, and on a change the old text is removed as the new one is added, so no
        context holds two versions (a dynamic part would otherwise repeat the static ones with it). A
        request without instructions changes nothing: older histories leave the field out."""
        if self.instructions_at is not None:
            old = derive_event_id(self.session_id, self.instructions_at, self.events[self.instructions_at])
            self.events.append(
                MessageRemoved(target_event_ids=(old,), reason="instructions replaced", source="pydantic-ai")
            )
        self.instructions = instructions
        self.instructions_at = len(self.events)
        self.events.append(MessageAppended(role="system", content=instructions))

    def _response(self, message: dict[str, Any], where: str, session_model: str | None) -> None:
        texts: list[str] = []
        calls: list[ToolCall] = []
        native_returns: list[Event] = []
        for number, part in enumerate(message["parts"], 1):
            position = f"{where}, part {number}"
            kind = _part_kind(part, position)
            with fields_of(position):
                if kind == "text":
                    texts.append(_pai_str(part, "content", position))
                elif kind in _PAI_TOOL_CALLS or kind in _PAI_NATIVE_CALLS:
                    name = _pai_str(part, "tool_name", position)
                    call_id = _pai_call_id(part, position)
                    calls.append(ToolCall(id=call_id, name=name, arguments=arguments_text(part.get("args"))))
                    self.call_names[call_id] = name
                elif kind in _PAI_NATIVE_RETURNS:
                    native_returns.append(self._tool_return(part, position))
                elif kind == "file":
                    content = part.get("content")
                    texts.append(_omitted({**(content if isinstance(content, dict) else {}), "kind": "file"}))
                elif kind not in ("thinking", "compaction", "speech"):
                    raise InvalidEventError(f"{position}: unknown response part_kind {kind!r}")
        answer: MessageAppended | None = None
        if texts or calls:
            with fields_of(where):
                answer = MessageAppended(
                    role="assistant", content="\n\n".join(texts), tool_calls=tuple(calls) or None
                )
                self.events.append(answer)
        self.events += native_returns
        usage = message.get("usage")
        if usage is not None and not isinstance(usage, dict):
            raise InvalidEventError(f"{where}: usage must be an object, not {type(usage).__name__}")
        if isinstance(usage, dict):
            model = message.get("model_name") if isinstance(message.get("model_name"), str) else None
            recorded = _pai_usage(usage, model or session_model, message, f"{where}, usage")
            if recorded is not None:
                # The call it belongs to: the assistant message this response became.
                call = {"call_event_id": answer.event_id} if answer is not None else {}
                self.events.append(recorded.model_copy(update={**call, "source": "pydantic-ai"}))

    def _tool_return(self, part: dict[str, Any], position: str) -> ToolReturned:
        call_id = _pai_call_id(part, position)
        name = part.get("tool_name") if isinstance(part.get("tool_name"), str) else None
        content = part.get("content")
        outcome = part.get("outcome", "success")
        if not isinstance(outcome, str):
            raise InvalidEventError(f"{position}: 'outcome' must be a string, not {type(outcome).__name__}")
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


def _answers_a_call(kind: str, part: dict[str, Any]) -> bool:
    return kind in _PAI_TOOL_RETURNS or (kind == "retry-prompt" and bool(part.get("tool_name")))


def _delta_text(part: dict[str, Any], position: str) -> str:
    """An instruction change as pydantic-ai sends a full replacement (or a withdrawal) to the model."""
    block = part.get("id")
    content = part.get("content")
    if block is not None and not isinstance(block, str):
        raise InvalidEventError(f"{position}: an instruction-delta's 'id' must be a string")
    if content is not None and not isinstance(content, str):
        raise InvalidEventError(f"{position}: an instruction-delta's 'content' must be a string or null")
    text = content if content is not None else "This context has been withdrawn."
    attribute = f' id="{block}"' if block else ""
    return f"<context{attribute}>\n{text}\n</context>"


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
            return token_count(value, key, where)
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
    with fields_of(where):
        return UsageRecorded(
            model=model or "unknown",
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            reasoning_tokens=reasoning,
            run_id=run_id if is_id(run_id) else None,
            response_id=response_id if isinstance(response_id, str) else None,
        )


def _pai_session_id(messages: list[Any]) -> str:
    found = next((m["conversation_id"] for m in messages if is_id(m.get("conversation_id"))), None)
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
