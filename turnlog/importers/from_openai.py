"""Reading OpenAI chat-completions transcripts."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from turnlog.importers.base import (
    Conversation,
    arguments_text,
    fields_of,
    json_lines,
    load_json,
    short_repr,
    token_count,
    with_derived_ids,
)
from turnlog.projections.context import INTERRUPTED
from turnlog.store import (
    Event,
    InvalidEventError,
    MessageAppended,
    SessionStarted,
    ToolCall,
    ToolReturned,
    UsageRecorded,
)


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
        document = load_json(stripped, "the file")
    except json.JSONDecodeError as exc:
        if "\n" not in stripped:
            raise InvalidEventError(f"malformed JSON: {exc.msg} at line {exc.lineno}") from None
        for number, line in enumerate(json_lines(stripped), 1):
            if not line.strip():
                continue
            try:
                yield f"line {number}", load_json(line, f"line {number}")
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
    where = f"{where} (session {short_repr(session_id)})"
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
    with fields_of(where):
        events.append(
            SessionStarted(event_id=next_id(), title=title, model=model, metadata={"imported_from": "openai"})
        )
    call_names: dict[str, str] = {}
    legacy_calls: list[tuple[str, str]] = []  # (call id, function name) awaiting a result
    for index, message in enumerate(messages, 1):
        position = f"{where}, message {index}"
        if not isinstance(message, dict):
            raise InvalidEventError(f"{position}: expected an object, got {type(message).__name__}")
        if _synthesized(message):
            continue
        with fields_of(position):
            events.append(_openai_message(message, position, next_id(), call_names, legacy_calls))
    usage = meta.get("usage")
    if usage is not None:
        if not isinstance(usage, dict):
            raise InvalidEventError(f"{where}: usage must be an object, not {type(usage).__name__}")
        with fields_of(f"{where}, usage"):
            events.append(_usage(next_id(), usage, model, f"{where}, usage"))
    return Conversation(session_id, with_derived_ids(session_id, events))


def _synthesized(message: dict[str, Any]) -> bool:
    """Whether the message is a result turnlog made up for a call that got none (an export's or a
    built context's, listed under SYNTHESIZED_KEY in an export): read back, it would become a
    tool_returned that never happened."""
    return message.get("role") == "tool" and message.get("content") == INTERRUPTED


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
                    id=call_id, name=function.get("name"), arguments=arguments_text(function.get("arguments"))
                )
            )
            call_names[call_id] = str(function.get("name"))
        legacy = message.get("function_call")
        if isinstance(legacy, dict):
            call_id = f"call_{hashlib.sha256(event_id.encode()).hexdigest()[:12]}"
            calls.append(
                ToolCall(
                    id=call_id, name=legacy.get("name"), arguments=arguments_text(legacy.get("arguments"))
                )
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
            event_id=event_id,
            tool_call_id=call_id,
            tool_name=name or call_names.get(call_id),
            content=content,
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


def _usage(event_id: str, usage: dict[str, Any], model: str | None, where: str) -> UsageRecorded:
    """The conversation's usage; every count must be a token count (see token_count)."""

    def section(name: str) -> dict[str, Any]:
        value = usage.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise InvalidEventError(f"{where}: {name} must be an object, not {type(value).__name__}")
        return value

    def count(source: dict[str, Any], *names: str) -> int:
        for name in names:
            if source.get(name) is not None:
                return token_count(source[name], name, where)
        return 0

    prompt_details = section("prompt_tokens_details")
    completion_details = section("completion_tokens_details")
    return UsageRecorded(
        event_id=event_id,
        scope="run",  # a transcript's usage covers its whole conversation, not one call
        source="openai",
        model=model or "unknown",
        input_tokens=count(usage, "prompt_tokens", "input_tokens"),
        output_tokens=count(usage, "completion_tokens", "output_tokens"),
        cache_read_tokens=count(prompt_details, "cached_tokens"),
        reasoning_tokens=count(completion_details, "reasoning_tokens"),
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
