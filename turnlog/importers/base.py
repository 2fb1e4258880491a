"""What every importer shares: the conversations a parser reads, how they are stored (each session
atomically, idempotently), and the small helpers for reading transcripts."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from turnlog.store import (
    MAX_TOKENS,
    NO_SESSION,
    Event,
    EventStore,
    InvalidEventError,
    SessionStarted,
    ToolCall,
    UnknownEventError,
    UsageRecorded,
)
from turnlog.store.errors import DuplicateEventError
from turnlog.store.events import describe_validation_error


@dataclass(frozen=True)
class Conversation:
    """One conversation read from a transcript, ready to append as one session."""

    session_id: str
    events: tuple[Event, ...]
    recorded_at: tuple[str, ...] | None = None
    """Each event's original time of recording, when the file keeps it (turnlog's jsonl does)."""


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
    """The events with ids derived from the session, their index and their content. A reference to
    an earlier event of the batch (a usage's ``call_event_id``, a pin's or removal's target) follows
    that event's new id, and is part of the content the referring event's id derives from."""
    renamed: dict[str, str] = {}
    out: list[Event] = []
    for index, event in enumerate(events):
        event = _renamed_references(event, renamed)
        new_id = derive_event_id(session_id, index, event)
        renamed[event.event_id] = new_id
        out.append(event.model_copy(update={"event_id": new_id}))
    return tuple(out)


_REFERENCES = ("call_event_id", "target_event_id", "target_event_ids")


def _renamed_references(event: Event, renamed: dict[str, str]) -> Event:
    update: dict[str, Any] = {}
    for name in _REFERENCES:
        value = getattr(event, name, None)
        if isinstance(value, str) and value in renamed:
            update[name] = renamed[value]
        elif isinstance(value, tuple) and any(v in renamed for v in value):
            update[name] = tuple(renamed.get(v, v) for v in value)
    return event.model_copy(update=update) if update else event


@dataclass(frozen=True)
class _Plan:
    """What to write for one conversation: the events after the session's stored head."""

    conversation: Conversation
    head: int
    rest: tuple[Event, ...]
    times: tuple[str, ...] | None


def import_conversations(
    store: EventStore,
    conversations: Sequence[Conversation],
    *,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Append each conversation as one session. A session already imported is skipped; one
    imported from a shorter version of the transcript gets the new events appended.

    The whole input is checked before anything is written: a session id given to two conversations
    of the file, an event id used twice or already stored in another session, a name taken by
    another session, a fork whose parent is missing, a tokenizer that differs from the store's. Then
    each session is stored in one transaction, whatever its size: a reader never sees part of one,
    and an import that is interrupted (killed, disk full) leaves whole sessions only, so running it
    again finishes it. The file as a whole is not one transaction: that would hold the store's write
    lock, and stop every other writer, for the length of the import. ``progress(n)`` is called with
    the number of events handled after each session."""
    _refuse_duplicates(conversations)
    plans = [
        _plan(store, conversation, conversations[:index]) for index, conversation in enumerate(conversations)
    ]
    _refuse_ids_stored_elsewhere(store, plans)
    result = ImportResult()
    for plan in plans:
        conversation = plan.conversation
        skipped = len(conversation.events) - len(plan.rest)
        if progress is not None and skipped:
            progress(skipped)
        if plan.rest:
            store.append(
                conversation.session_id,
                plan.rest,
                expected_version=NO_SESSION if plan.head == 0 else plan.head,
                recorded_at=plan.times,
                bounded=False,
            )
            if progress is not None:
                progress(len(plan.rest))
        result.sessions.append(
            {
                "session_id": conversation.session_id,
                "events": len(conversation.events),
                "appended": len(plan.rest),
                "skipped": skipped,
            }
        )
    return result


def _refuse_duplicates(conversations: Sequence[Conversation]) -> None:
    """A session id or an event id that the file gives twice: stored, the second would fail
    halfway through the import."""
    sessions: dict[str, int] = {}
    events: dict[str, str] = {}
    for number, conversation in enumerate(conversations, 1):
        sid = conversation.session_id
        if sid in sessions:
            raise InvalidEventError(
                f"conversations {sessions[sid]} and {number} of the file are both session {short_repr(sid)}: "
                "give each conversation its own id, or import them one at a time"
            )
        sessions[sid] = number
        for event in conversation.events:
            other = events.setdefault(event.event_id, sid)
            if other != sid:
                raise InvalidEventError(
                    f"event id {short_repr(event.event_id)} appears twice in the file (sessions "
                    f"{short_repr(other)} and {short_repr(sid)}): event ids are unique in a store"
                )


def _refuse_ids_stored_elsewhere(store: EventStore, plans: Sequence[_Plan]) -> None:
    """A file imported before under other names (``--session``) keeps its event ids, which the
    store holds already. The first and last new event of each session are looked up: every id
    would double the time of a large import, and an id the file shares with the store only in
    the middle of a session (an edited file) is still refused by the append, that session whole."""
    for plan in plans:
        for event in plan.rest[:1] + plan.rest[1:][-1:]:
            try:
                found = store.get_event(event.event_id)
            except UnknownEventError:
                continue
            sid = plan.conversation.session_id
            raise DuplicateEventError(
                f"event id {short_repr(event.event_id)} of session {short_repr(sid)} is already stored "
                f"in session {short_repr(found.session_id)}: this file (or part of it) "
                "was imported under another name; import it into another store"
            )


def _plan(store: EventStore, conversation: Conversation, earlier: Sequence[Conversation]) -> _Plan:
    """The session's head version and the events still to append, or an error naming the problem."""
    sid = conversation.session_id
    events = conversation.events
    times = conversation.recorded_at
    if times is not None and len(times) != len(events):
        raise InvalidEventError(f"session {short_repr(sid)}: {len(times)} times for {len(events)} events")
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
    for index, event in enumerate(events[1:], 2):
        if isinstance(event, SessionStarted):
            raise InvalidEventError(
                f"session {short_repr(sid)}: event {index} is a session_started; it can only be the first"
            )
    head = store.head_version(sid)
    if head == 0:
        return _Plan(conversation, 0, events, times)
    own = store.read_session(sid, own=True)
    stored_ids = [r.event_id for r in own[: len(events)]]
    rest = events[len(stored_ids) :]
    if stored_ids != [e.event_id for e in events[: len(stored_ids)]]:
        renamed = _earlier_release_ids([r.event for r in own[: len(events)]], events)
        if renamed is None:
            raise DuplicateEventError(
                f"session {sid!r} already exists and was not imported from this file; "
                "choose another name with --session"
            )
        # Imported by an earlier release (its usage events kept schema 1, and so other ids): the
        # stored events stay as they are, and what follows them refers to them by their ids.
        rest = tuple(_renamed_references(event, renamed) for event in rest)
    done = len(stored_ids)
    if done < len(events) and len(own) != done:
        raise DuplicateEventError(
            f"session {sid!r} has events appended after its import; "
            "import the grown file under another name with --session"
        )
    return _Plan(conversation, head, rest, None if times is None else times[done:])


_USAGE_SCHEMA_2 = ("call_event_id", "scope", "calls", "cost_usd", "output_lower_bound", "source")
"""The fields usage_recorded gained in schema 2: a usage an earlier release imported has their
defaults, and another event id (an id derives from the event's content)."""


def _earlier_release_ids(stored: Sequence[Event], events: Sequence[Event]) -> dict[str, str] | None:
    """Whether ``stored`` (a session's events) is an earlier release's import of ``events``' start:
    the same events, but for usage events stored with schema 1 (their schema-2 fields at their
    defaults; the new import may fill them in). Returns the new ids of the events whose stored id
    differs, mapped to the stored ids; None when the session is not such an import."""
    renamed: dict[str, str] = {}
    for old, new in zip(stored, events, strict=False):
        new = _renamed_references(new, renamed)
        if old.event_id == new.event_id:
            continue  # the same content (an id derives from it)
        if type(old) is not type(new):
            return None
        mine = old.model_dump(exclude={"event_id"})
        theirs = new.model_dump(exclude={"event_id"})
        if isinstance(old, UsageRecorded):
            defaults = UsageRecorded.model_fields
            if any(mine[name] != defaults[name].default for name in _USAGE_SCHEMA_2):
                return None
            for name in _USAGE_SCHEMA_2:
                del mine[name], theirs[name]
        if mine != theirs:
            return None
        renamed[new.event_id] = old.event_id
    return renamed


def json_lines(text: str) -> list[str]:
    """JSON lines: split at newlines only (str.splitlines() would also split at U+2028 and other
    characters that JSON text may hold raw inside a string)."""
    return text.replace("\r\n", "\n").split("\n")


@contextlib.contextmanager
def fields_of(position: str) -> Iterator[None]:
    """Field errors of a model built from a transcript, as one line naming where they are."""
    try:
        yield
    except ValidationError as exc:
        raise InvalidEventError(f"{position}: {describe_validation_error(exc)}") from None


def arguments_text(arguments: Any) -> str:
    """Tool-call arguments as the JSON text a ToolCall stores."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


MAX_JSON_DEPTH = 128
"""The deepest nesting of arrays and objects an import accepts. Deeper data could not be read back:
pydantic-core's JSON parser stops at about 200 levels and SQLite's JSON functions soon after."""

# A JSON escape of a UTF-16 surrogate: only text holding one can decode to a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def decode_text(data: str | bytes, what: str = "the file") -> str:
    """An import's input as text: bytes must be UTF-8 (a leading byte order mark is dropped), and
    text must be valid Unicode (no lone surrogates), or the error says where it is not."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise InvalidEventError(
                f"{what} is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                f"(line {line}) cannot be decoded; convert the file to UTF-8 (e.g. with iconv)"
            ) from None
        return text.removeprefix("\ufeff")
    check_unicode(data, what)
    return data.removeprefix("\ufeff")


def check_unicode(text: str, where: str) -> None:
    """Refuse a string holding a lone surrogate (UTF-8 cannot store it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEventError(
            f"{where}: the text {short_repr(text)} holds a lone surrogate "
            f"({text[exc.start : exc.end]!r}), which is not valid Unicode; fix the text (e.g. "
            "replace it with U+FFFD)"
        ) from None


def load_json(text: str, where: str) -> Any:
    """``json.loads`` for input from outside: malformed JSON raises json.JSONDecodeError (callers
    word it), nesting deeper than MAX_JSON_DEPTH and lone surrogates (``"\\ud800"``) raise
    InvalidEventError naming ``where``. Checked without recursion, so no input can exhaust the
    stack."""
    try:
        data = json.loads(text)
    except RecursionError:
        data = None
        too_deep = True
    else:
        too_deep = _too_deep(data, check_strings=_SURROGATE_ESCAPE.search(text) is not None, where=where)
    if too_deep:
        raise InvalidEventError(
            f"{where}: JSON nested more than {MAX_JSON_DEPTH} levels deep; turnlog refuses deeper "
            "nesting (it could not be read back): flatten the data"
        )
    return data


def _too_deep(data: Any, *, check_strings: bool, where: str) -> bool:
    """Whether ``data`` nests deeper than MAX_JSON_DEPTH; with ``check_strings``, every key and
    string is also checked for lone surrogates."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            if depth > MAX_JSON_DEPTH:
                return True
            for key, item in value.items():
                if check_strings:
                    check_unicode(key, where)
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            if depth > MAX_JSON_DEPTH:
                return True
            stack.extend((item, depth + 1) for item in value)
        elif check_strings and isinstance(value, str):
            check_unicode(value, where)
    return False


MAX_TOKEN_COUNT = MAX_TOKENS
"""The largest token count an import accepts: the event models' bound, so the error can name the
transcript's own field."""


def token_count(value: Any, name: str, where: str) -> int:
    """A token count read from a transcript: an integer from 0 to MAX_TOKEN_COUNT, or an error
    naming the field. No conversion: 1.5 or "12" is a damaged file, not a count to round."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKEN_COUNT:
        raise InvalidEventError(
            f"{where}: {name} must be a whole number of tokens from 0 to {MAX_TOKEN_COUNT}, "
            f"not {short_repr(value)}; fix the file's usage"
        )
    return value


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages about hostile input."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def is_id(value: Any) -> bool:
    """Whether ``value`` can serve as a session or run id."""
    return isinstance(value, str) and 0 < len(value) <= 200 and not any(c.isspace() for c in value)


def openai_tool_calls(raw: Any, position: str) -> tuple[ToolCall, ...]:
    """An assistant message's OpenAI-style ``tool_calls`` (null, or a list of ``{id, function:
    {name, arguments}}``), or an error naming the call and its field under ``position``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidEventError(f"{position}: expected a list of tool calls, not {type(raw).__name__}")
    calls = []
    for number, call in enumerate(raw):
        here = f"{position}[{number}]"
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            raise InvalidEventError(f"{here}: expected an object with a 'function' object")
        function = call["function"]
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise InvalidEventError(f"{here}.id: a tool call needs an id, not {short_repr(call.get('id'))}")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise InvalidEventError(f"{here}.function.name: expected the tool's name")
        with fields_of(here):
            calls.append(
                ToolCall(
                    id=call["id"], name=function["name"], arguments=arguments_text(function.get("arguments"))
                )
            )
    return tuple(calls)


def content_text(content: Any, position: str) -> str:
    """A message's content: a string, null, or a list of content parts (text kept, other parts
    noted as ``[TYPE omitted]``), or an error naming the field."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for number, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict) and isinstance(part.get("type"), str):
                parts.append(f"[{part['type']} omitted]")
            else:
                raise InvalidEventError(f"{position}[{number}]: expected a content part with a 'type'")
        return "\n".join(parts)
    raise InvalidEventError(
        f"{position}: expected a string or a list of content parts, not {type(content).__name__}"
    )


def load_document(text: str, name: str | None) -> tuple[Any, str]:
    """A file's JSON document, and how messages name the file (``name``, else "the file"):
    malformed JSON is an InvalidEventError naming its line and column."""
    where = short_repr(name, 200) if name else "the file"
    try:
        return load_json(text, where), where
    except json.JSONDecodeError as exc:
        raise InvalidEventError(
            f"{where}: malformed JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
