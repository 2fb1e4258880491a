"""Serving one call of the agent-facing tool: parse the envelope, validate the method's input, run
the method, cap the result by tokens, and record the call and its result in the session's log."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from turnlog.projections.artifacts import InvalidArgumentError
from turnlog.projections.capping import cap_text
from turnlog.store import (
    ANY,
    DuplicateEventError,
    Event,
    Expected,
    InvalidEventError,
    MessageAppended,
    RecordedEvent,
    Store,
    Tokenizer,
    ToolCall,
    ToolReturned,
    UnknownArtifactError,
    UnknownEventError,
    determinism,
)
from turnlog.tool import errors
from turnlog.tool.cards import TOOL_NAME
from turnlog.tool.inputs import INPUTS, METHODS, MODULES
from turnlog.tool.methods import HANDLERS, Call

_CALL_ID = re.compile(r"\S{1,200}")

DEFAULT_MAX_TOKENS = 2000
"""Tokens a result may have unless the caller says otherwise (``artifacts.index`` is bounded by its
own cap instead, INDEX_MAX_CHARS characters, so that it lists every artifact of a real session)."""

MIN_MAX_TOKENS = 100
"""The smallest result budget: room for an error message or a short page."""

Envelope = dict[str, Any] | str | bytes
"""A call as the model produced it: the decoded JSON object, or its JSON text."""

# Errors the agent's input can cause (an id that names nothing, an offset past the end, a todo list
# with duplicate ids): they become the tool's answer. Any other StoreError (a closed, busy or
# corrupt store) is the caller's to handle and propagates.
_AGENT_ERRORS = (
    errors.ToolInputError,
    UnknownEventError,
    UnknownArtifactError,
    InvalidArgumentError,
    InvalidEventError,
)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The outcome of one call."""

    text: str
    """What to give back to the model: the result, or a short error message. At most max_tokens
    (by default DEFAULT_MAX_TOKENS; ``artifacts.index``: its own character cap)."""
    is_error: bool
    """True when the call was refused (malformed envelope, invalid input, an id that names nothing)."""
    method: str | None
    """The ``module.method`` called, when the envelope named a known one."""
    arguments: str
    """The envelope as JSON text (verbatim when it was given as text): what the log records."""
    effects: tuple[Event, ...]
    """The events the call writes (a todo list, a pin); empty for reads and for refused calls."""
    recorded: tuple[RecordedEvent, ...] = ()
    """What was appended to the log for this call (see :func:`invoke`)."""
    retried: bool = False
    """True for a retry of a call already answered (same ``tool_call_id``, same input): the first
    result, and nothing written."""

    def as_json(self) -> dict[str, Any]:
        """The result as ``turnlog tool call --json`` prints it (and MCP's structured content)."""
        return {
            "result": self.text,
            "is_error": self.is_error,
            "method": self.method,
            "retried": self.retried,
            "recorded": [
                {"position": r.position, "version": r.version, "type": r.type, "event_id": r.event_id}
                for r in self.recorded
            ],
        }


def invoke(
    store: Store,
    session_id: str,
    envelope: Envelope,
    *,
    max_tokens: int | None = None,
    record: bool = True,
    tool_call_id: str | None = None,
    expected_version: Expected = ANY,
) -> ToolResult:
    """Serve one call of the tool for ``session_id`` and say what was written.

    ``max_tokens`` caps the result; without it, DEFAULT_MAX_TOKENS, except for ``artifacts.index``,
    which then lists every artifact within its own cap of INDEX_MAX_CHARS characters.

    What is appended, always as one atomic batch:

    - ``tool_call_id`` given (the agent framework already appended the assistant message holding
      that call): the call's effects, then a ``tool_returned`` answering it — also for a refused
      call (``is_error``), because a call left without a result is what the context builder would
      otherwise have to mark as interrupted. The effects are still never written for invalid input.
      The call id is a retry key, scoped to the session: the same id sent again with the same
      input (equal JSON) returns the first result (``retried``) and writes nothing, so a todo
      list or pin is never applied twice; the same id with another input raises
      DuplicateEventError.
    - else with ``record`` (the default): for a call that succeeds, an assistant message holding one
      ``turnlog`` tool call (the envelope as its arguments, a fresh call id), the effects, and the
      ``tool_returned`` with the result text — the log shows the agent's use of its own log like
      any other tool call. A refused call writes nothing at all: the store is left exactly as it
      was, so an invalid call can never half-happen (the returned text still tells the agent).
    - ``record=False`` (the caller records its agent's tool calls itself): only the effects of a
      call that succeeds.

    ``expected_version`` is checked by the append like any other (optimistic concurrency: a writer
    that appended meanwhile makes it raise VersionConflictError, and nothing is written).

    The envelope's content never makes this raise: malformed JSON, unknown methods and invalid
    input come back as a short error message in ``text``. It raises StoreError only for what the
    agent cannot cause: an unknown session, a closed, busy or damaged store, an invalid
    ``tool_call_id`` or ``max_tokens``.
    """
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < MIN_MAX_TOKENS
    ):
        raise InvalidArgumentError(
            f"max_tokens must be an integer of at least {MIN_MAX_TOKENS}, not {max_tokens!r}"
        )
    if tool_call_id is not None and not _CALL_ID.fullmatch(str(tool_call_id)):
        raise InvalidEventError(
            f"tool_call_id {tool_call_id!r} is invalid: use 1 to 200 characters without whitespace"
        )
    store.require_session(session_id)
    if tool_call_id is not None:
        return _invoke_once(store, session_id, envelope, max_tokens, tool_call_id, expected_version)
    result = _serve(store, session_id, envelope, max_tokens)
    batch: list[Event] = []
    if result.is_error:
        return result
    elif record:
        call_id = f"turnlog_{determinism.token_hex(12)}"
        batch = [
            MessageAppended(
                role="assistant",
                tool_calls=(ToolCall(id=call_id, name=TOOL_NAME, arguments=result.arguments),),
            ),
            *result.effects,
            _returned(call_id, result),
        ]
    else:
        batch = list(result.effects)
    if not batch:
        return result
    recorded = store.append(session_id, batch, expected_version=expected_version)
    return ToolResult(
        result.text, result.is_error, result.method, result.arguments, result.effects, tuple(recorded)
    )


def _invoke_once(
    store: Store,
    session_id: str,
    envelope: Envelope,
    max_tokens: int | None,
    tool_call_id: str,
    expected_version: Expected,
) -> ToolResult:
    """Serve a call the log already holds, exactly once per (session, call id): the first time,
    append its effects and result under ids derived from the key and the input; a retry with the
    same input finds them and returns the first result, writing nothing; a retry with another
    input is refused."""
    key = _retry_key(session_id, tool_call_id)
    fingerprint = _fingerprint(envelope)
    answered = _answered(store, session_id, key)
    if answered is None:
        result = _serve(store, session_id, envelope, max_tokens)
        # Derived ids make a concurrent or repeated first call the same batch, which the store
        # stores once (DuplicateEventError when the two differ: then the other one won).
        effects = [
            e.model_copy(update={"event_id": f"{key}e{i}{fingerprint}"}) for i, e in enumerate(result.effects)
        ]
        returned = _returned(tool_call_id, result).model_copy(update={"event_id": f"{key}r{fingerprint}"})
        try:
            recorded = store.append(session_id, [*effects, returned], expected_version=expected_version)
        except DuplicateEventError:
            answered = _answered(store, session_id, key)
            if answered is None:
                raise
        else:
            return dataclasses.replace(result, effects=tuple(effects), recorded=tuple(recorded))
    if answered.event_id != f"{key}r{fingerprint}":
        raise DuplicateEventError(
            f"tool call {tool_call_id!r} of session {session_id!r} was already answered for another "
            "input: a retry must send the same envelope; a new call needs a new tool_call_id"
        )
    event = answered.event
    assert isinstance(event, ToolReturned)
    parsed = _parse(envelope)
    method = None if isinstance(parsed, _Refused) else parsed[0]
    arguments = parsed.arguments if isinstance(parsed, _Refused) else parsed[2]
    return ToolResult(event.content, event.is_error, method, arguments, (), (), retried=True)


def _retry_key(session_id: str, tool_call_id: str) -> str:
    """The stem of the ids a call's events get: one per session and call id (the same id in
    another session is another call)."""
    digest = hashlib.sha256(f"turnlog-tool\0{session_id}\0{tool_call_id}".encode()).hexdigest()
    return f"tlc{digest[:40]}"


def _fingerprint(envelope: Envelope) -> str:
    """A digest of the call's input, the same for equal JSON however it is spaced or ordered."""
    text: str | bytes = envelope if isinstance(envelope, (str, bytes)) else ""
    try:
        data = json.loads(envelope) if isinstance(envelope, (str, bytes)) else envelope
        text = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        pass  # not JSON: its exact text (or bytes) is the input
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()[:24]


def _answered(store: Store, session_id: str, key: str) -> RecordedEvent | None:
    """The result already recorded for this key in the session, if any."""
    try:
        return store.find_event(session_id, f"{key}r")
    except UnknownEventError:
        return None


def call(
    store: Store,
    session_id: str,
    envelope: Envelope,
    *,
    max_tokens: int | None = None,
    record: bool = True,
) -> str:
    """Serve one call of the tool and return the text to give the model.

    ``envelope`` is ``{"module": ..., "method": ..., "input": {...}}``, as a dict or as JSON text.
    With ``record`` (the default) a successful call is recorded in the session's log as an assistant
    tool call of ``turnlog`` and its return, in the same batch as what it writes; a refused call
    writes nothing. ``record=False`` is for callers that record their agent's tool calls themselves
    (only the call's effects, a todo list or a pin, are appended). See :func:`invoke` for the details
    and :func:`call_recorded` for a call that is already in the log."""
    return invoke(store, session_id, envelope, max_tokens=max_tokens, record=record).text


def call_recorded(
    store: Store,
    session_id: str,
    tool_call_id: str,
    envelope: Envelope,
    *,
    max_tokens: int | None = None,
) -> str:
    """Serve a call that the agent framework has already appended (an assistant message with a
    ``turnlog`` tool call of id ``tool_call_id``): append its effects and a ``tool_returned``
    answering that id, in one batch, and return the text. A refused call gets its error message
    recorded as an error result (and no effects), so the call is never left unanswered."""
    return invoke(store, session_id, envelope, max_tokens=max_tokens, tool_call_id=tool_call_id).text


def _returned(call_id: str, result: ToolResult) -> ToolReturned:
    return ToolReturned(
        tool_call_id=call_id, tool_name=TOOL_NAME, content=result.text, is_error=result.is_error
    )


def _serve(store: Store, session_id: str, envelope: object, max_tokens: int | None) -> ToolResult:
    tok = store.tokenizer
    limit = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    parsed = _parse(envelope)
    if isinstance(parsed, _Refused):
        return _refused(tok, limit, parsed.message, None, parsed.arguments)
    method, data, arguments = parsed
    try:
        query = INPUTS[method].validate_python(data)
    except ValidationError as exc:
        return _refused(tok, limit, errors.validation_error(method, data, exc), method, arguments)
    context = Call(store, session_id, tok, limit, explicit=max_tokens is not None)
    try:
        outcome = HANDLERS[method](context, query)
    except _AGENT_ERRORS as exc:
        return _refused(tok, limit, f"error: {exc}\n{errors.NOTHING_WRITTEN}", method, arguments)
    # A method that bounds its result by its own cap when the caller gives none is not cut again.
    text = outcome.text if outcome.bounded and max_tokens is None else _cap(tok, outcome.text, limit)
    return ToolResult(text, False, method, arguments, outcome.effects)


def _refused(tok: Tokenizer, max_tokens: int, message: str, method: str | None, arguments: str) -> ToolResult:
    return ToolResult(_cap(tok, message, max_tokens), True, method, arguments, ())


def _cap(tok: Tokenizer, text: str, max_tokens: int) -> str:
    """Every result within ``max_tokens``, capped the way the context builder caps tool outputs
    (head and tail around a notice that counts). Methods page to fit already; this is the guard."""

    def notice(shown: int, total: int) -> str:
        return (
            f"[turnlog: result capped: {shown:,} of {total:,} tokens shown; "
            "ask for less (a smaller limit or n, a narrower range) to see it whole]"
        )

    return cap_text(text, max_tokens, tok, notice).text


@dataclass(frozen=True, slots=True)
class _Refused:
    message: str
    arguments: str


def _parse(envelope: object) -> tuple[str, dict[str, Any], str] | _Refused:
    """``(module.method, input, arguments)`` from the envelope, or why it is refused."""
    if isinstance(envelope, (bytes, bytearray)):
        try:
            envelope = bytes(envelope).decode("utf-8")
        except UnicodeDecodeError:
            return _Refused(errors.envelope_error("the call is not valid UTF-8 text."), "")
    if isinstance(envelope, str):
        arguments = envelope
        if not _is_unicode(arguments):
            return _Refused(errors.envelope_error("the call holds text that is not valid Unicode."), "")
        try:
            data = json.loads(arguments, parse_constant=_no_constant)
        except ValueError as exc:
            detail = (
                f"{exc.msg} at line {exc.lineno}, column {exc.colno}"
                if isinstance(exc, json.JSONDecodeError)
                else str(exc)
            )
            return _Refused(errors.envelope_error(f"the call is not valid JSON ({detail})."), arguments)
        except RecursionError:
            return _Refused(errors.envelope_error("the call is nested too deeply."), arguments)
    else:
        try:
            arguments = json.dumps(envelope, ensure_ascii=False, allow_nan=False)
            # Read back, so a dict and its JSON text are validated alike (tuples become lists, ...).
            data = json.loads(arguments)
        except (TypeError, ValueError, RecursionError):
            return _Refused(errors.envelope_error("the call is not JSON data."), "")
        if not _is_unicode(arguments):
            return _Refused(errors.envelope_error("the call holds text that is not valid Unicode."), "")
    # JSON escapes can still spell lone surrogates, which the log cannot store (and the result or an
    # error message may quote what was given).
    if not _is_unicode(json.dumps(data, ensure_ascii=False)):
        return _Refused(errors.envelope_error("the call holds text that is not valid Unicode."), arguments)
    if not isinstance(data, dict):
        return _Refused(
            errors.envelope_error(f"the call must be a JSON object, not {_kind(data)}."), arguments
        )
    unknown = [key for key in data if key not in ("module", "method", "input")]
    if unknown:
        keys = ", ".join(json.dumps(key, ensure_ascii=False) for key in unknown[:5])
        why = (
            f"{errors.OWN_SESSION}; leave it out."
            if errors.SESSION_KEYS & set(unknown)
            else "it has exactly module, method and input; a method's fields go inside input."
        )
        return _Refused(errors.envelope_error(f"unknown key {keys} in the call: {why}"), arguments)
    module, method = data.get("module"), data.get("method")
    for key, value in (("module", module), ("method", method)):
        if value is None:
            return _Refused(errors.envelope_error(f"the call has no {key}."), arguments)
        if not isinstance(value, str):
            return _Refused(errors.envelope_error(f"{key} must be a string, not {_kind(value)}."), arguments)
    assert isinstance(module, str) and isinstance(method, str)
    if module not in MODULES:
        return _Refused(errors.unknown_module(module), arguments)
    name = f"{module}.{method}"
    if name not in METHODS:
        return _Refused(errors.unknown_method(module, method), arguments)
    if "input" not in data:
        return _Refused(
            errors.input_error(name, "input is required (send {} when the method takes nothing)."), arguments
        )
    given = data["input"]
    if not isinstance(given, dict):
        return _Refused(
            errors.input_error(name, f"input must be a JSON object, not {_kind(given)}."), arguments
        )
    return name, given, arguments


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"
