"""pydantic-ai 2 ``ConversationStore`` on turnlog: ``TurnlogConversationStore(db="turnlog.db")``.

A conversation is a turnlog session. Each stored ``ConversationEntry`` (one ``ModelRequest`` or
``ModelResponse``) becomes ordinary turnlog events, once each: prompts as ``message_appended``, a
response as one assistant ``message_appended`` with its ``tool_calls``, tool outputs as
``tool_returned``, and the response's usage as ``usage_recorded``. The entry itself, verbatim (pydantic-ai's
own serialisation), rides in the ``origin`` of its first event, whose event id is the entry's id, so
``read_entry`` is one lookup and returns a message ``==`` to the one written. The framework's
``ConversationRecord`` (head, usage, revision, scope, branches) is a ``state_recorded`` event written in
the same atomic batch, with, when the run's usage holds more than its responses report (a delegate
agent run with ``usage=ctx.usage``), one more ``usage_recorded`` for the rest, so the session's
``usage_recorded`` events sum to ``result.usage``; a head that moves back (``branch``, a rewritten
history) is a ``session_rewound`` and ``delete`` a ``session_rewound`` to 0 with reason ``delete``:
nothing is ever deleted, so entries stay readable for the forks and branches that share them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from turnlog.integrations import StoreLike, open_for_adapter, require
from turnlog.store import Store
from turnlog.store.errors import UnknownEventError, VersionConflictError
from turnlog.store.events import (
    Event,
    ForkPoint,
    MessageAppended,
    SessionStarted,
    ToolCall,
    ToolReturned,
    UsageRecorded,
)
from turnlog.store.events_loop import Origin, SessionRewound, StateRecorded

require("pydantic_ai", "pydantic-ai")

from pydantic import TypeAdapter  # noqa: E402
from pydantic_ai import messages as _m  # noqa: E402
from pydantic_ai.conversation_store import (  # noqa: E402
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.usage import RunUsage  # noqa: E402

if TYPE_CHECKING:
    from turnlog.store.base import RecordedEvent

__all__ = ["FRAMEWORK", "TurnlogConversationStore"]

FRAMEWORK = "pydantic-ai"
_RECORD = "conversation_record"
_ENTRY = "conversation_entry"
_RECORDS: TypeAdapter[ConversationRecord] = TypeAdapter(ConversationRecord)
_ENTRIES: TypeAdapter[ConversationEntry] = TypeAdapter(ConversationEntry)
_ENTRY_LIST: TypeAdapter[list[ConversationEntry]] = TypeAdapter(list[ConversationEntry])


class TurnlogConversationStore(ConversationStore):
    """A pydantic-ai ``ConversationStore`` whose conversations are turnlog sessions.

    ``db`` is a store path (opened, and closed by :meth:`close`) or an open ``SQLiteStore`` (left open).
    """

    def __init__(self, db: StoreLike) -> None:
        self.store, self._owned = open_for_adapter(db)

    def close(self) -> None:
        """Close the store if this adapter opened it."""
        if self._owned:
            self.store.close()

    # --- the five primitives ------------------------------------------------------------------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        return _latest_record(self.store, conversation_id)[0]

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        # One scan of the record events of the whole log; the last one of each session wins.
        latest: dict[str, StateRecorded] = {}
        for recorded in self.store.iter_after(0, types=["state_recorded"]):
            event = recorded.event
            if isinstance(event, StateRecorded) and _is_record(event):
                latest[recorded.session_id] = event
        parsed = [_parse_record(event) for event in latest.values()]  # only each session's newest
        records = [r for r in parsed if r is not None and (scope is None or r.scope == scope)]
        records.sort(key=lambda record: record.updated_at, reverse=True)
        return records[:limit]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        session = record.conversation_id
        stored, head = _latest_record(self.store, session)
        if (stored.revision if stored is not None else None) != expected_revision:
            raise ConversationConflict(session)
        new_ids = {entry.id for entry in new_entries}
        events: list[Event] = []
        if head == 0:
            events.append(self._session_start(record))
        elif stored is None:
            # Re-created after a delete (the delete already rewound the session to empty).
            pass
        # Where the new entries (or, with none, the new head) hang: when that is not the stored head,
        # the history was rewritten or the head moved back, which is a rewind, never a deletion.
        anchor = new_entries[0].parent_id if new_entries else record.head_id
        if (
            record.head_id is not None
            and record.head_id not in new_ids
            and not self._has_entry(record.head_id)
        ):
            raise ConversationConflict(session)
        current = stored.head_id if stored is not None else None
        if head > 0 and anchor != current:
            events.append(
                SessionRewound(
                    to_version=self._version_of(session, anchor), reason="rewind", source=FRAMEWORK
                )
            )
        for entry in new_entries:
            events.extend(_entry_events(entry))
        unattributed = _unattributed_usage(record, stored, new_entries)
        if unattributed is not None:
            events.append(unattributed)
        events.append(_record_event(record, stored))
        try:
            records = self.store.append(session, events, expected_version=head)
        except VersionConflictError as exc:
            # Another writer saved this conversation between our read and our append.
            raise ConversationConflict(session) from exc
        if any(isinstance(e, ToolReturned) for e in events):
            from turnlog.loop import after_adapter_commit  # the session policy's output views

            after_adapter_commit(self.store, session, records)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        stored, head = _latest_record(self.store, conversation_id)
        if stored is None or stored.revision != expected_revision:
            raise ConversationConflict(conversation_id)
        events: list[Event] = [
            SessionRewound(to_version=0, reason="delete", source=FRAMEWORK),
            _record_event(None, stored),
        ]
        try:
            self.store.append(conversation_id, events, expected_version=head)
        except VersionConflictError as exc:
            raise ConversationConflict(conversation_id) from exc

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        try:
            recorded = self.store.get_event(entry_id)
        except UnknownEventError as exc:
            raise KeyError(entry_id) from exc
        entry = _entry_of(recorded)
        if entry is None:
            raise KeyError(entry_id)
        return entry

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        """The entries up to ``head_id`` (the last ``limit`` of them), as pydantic-ai's own walk of
        parent ids finds them, but with the entries of the head's session read in one pass (their
        place and origin only, validated in one call) instead of one lookup per entry; an entry
        found elsewhere (a branch, a fork's parent, a state-kept entry) is looked up alone."""
        if head_id is None or limit == 0:
            return []
        try:
            session = self.store.get_event(head_id).session_id
        except UnknownEventError as exc:
            raise KeyError(head_id) from exc
        window = None if limit is None else 4 * limit + 16
        found: dict[str, Any] = {}
        for row in self.store.read_origins(session, newest=window):
            item = row.item
            if row.framework == FRAMEWORK and isinstance(item, dict) and isinstance(item.get("entry"), dict):
                found[str(item["entry"].get("id"))] = item["entry"]
        chain: list[Any] = []
        entry_id: str | None = head_id
        while entry_id is not None and (limit is None or len(chain) < limit):
            raw = found.get(entry_id)
            entry: Any = raw if raw is not None else await self.read_entry(entry_id)
            chain.append(entry)
            entry_id = entry["parent_id"] if raw is not None else entry.parent_id
        chain.reverse()
        return _validated(chain)

    # --- helpers ------------------------------------------------------------------------------

    def _has_entry(self, entry_id: str) -> bool:
        try:
            return _entry_of(self.store.get_event(entry_id)) is not None
        except UnknownEventError:
            return False

    def _version_of(self, session: str, entry_id: str | None) -> int:
        """The session version at which ``entry_id`` is the newest entry of the history (0: none)."""
        if entry_id is None:
            return 0
        recorded = self.store.get_event(entry_id)
        origin = _origin_item(recorded)
        count = int(origin.get("events", 1)) if origin else 1
        if recorded.session_id != session and not self._shares(session, recorded):
            # An entry of another conversation's own history (a fork taken from a branch): the turnlog
            # view falls back to empty; pydantic-ai's own view (entries by parent id) stays exact.
            return 0
        return recorded.version + count - 1

    def _shares(self, session: str, recorded: RecordedEvent) -> bool:
        first = self.store.first_event(session)
        event = first.event if first is not None else None
        parent = event.parent if isinstance(event, SessionStarted) else None
        return (
            parent is not None
            and parent.session_id == recorded.session_id
            and recorded.version <= parent.version
        )

    def _session_start(self, record: ConversationRecord) -> SessionStarted:
        parent: ForkPoint | None = None
        if record.forked_from is not None and record.head_id is not None:
            # A fork shares its parent's events up to the fork entry, as a turnlog fork.
            try:
                recorded = self.store.get_event(record.head_id)
            except UnknownEventError:
                recorded = None
            if recorded is not None and recorded.session_id == record.forked_from:
                parent = ForkPoint(
                    session_id=record.forked_from,
                    version=self._version_of(record.forked_from, record.head_id),
                )
        return SessionStarted(metadata={"framework": FRAMEWORK}, parent=parent)


def _latest_record(store: Store, session: str) -> tuple[ConversationRecord | None, int]:
    """The session's current record (None if never written or deleted) and its head version."""
    head = store.head_version(session)
    if head == 0:
        return None, 0
    # The record is normally the session's last event (every write ends with it); look further back
    # only when something else was appended after it.
    size = 8
    while True:
        tail = store.read_tail(session, size)
        for recorded in reversed(tail):
            event = recorded.event
            if recorded.session_id == session and isinstance(event, StateRecorded) and _is_record(event):
                return _parse_record(event), head
        if len(tail) < size:
            return None, head
        size *= 4


def _is_record(event: StateRecorded) -> bool:
    return event.framework == FRAMEWORK and event.namespace == _RECORD


def _parse_record(event: StateRecorded) -> ConversationRecord | None:
    if event.content == "null":
        return None
    return _RECORDS.validate_json(event.content)


def _record_event(record: ConversationRecord | None, previous: ConversationRecord | None) -> StateRecorded:
    return StateRecorded(
        framework=FRAMEWORK,
        namespace=_RECORD,
        key=record.revision if record is not None else f"deleted-{previous.revision if previous else 'none'}",
        parent_key=previous.revision if previous is not None else None,
        media_type="application/json",
        content=_RECORDS.dump_json(record).decode() if record is not None else "null",
    )


def _origin_item(recorded: RecordedEvent) -> dict[str, Any] | None:
    origin = getattr(recorded.event, "origin", None)
    if isinstance(origin, Origin) and origin.framework == FRAMEWORK and isinstance(origin.item, dict):
        return origin.item
    if isinstance(recorded.event, StateRecorded) and recorded.event.namespace == _ENTRY:
        item = json.loads(recorded.event.content)
        return item if isinstance(item, dict) else None
    return None


def _entry_of(recorded: RecordedEvent) -> ConversationEntry | None:
    item = _origin_item(recorded)
    if item is None or "entry" not in item:
        return None
    return _ENTRIES.validate_python(item["entry"])


def _validated(chain: list[Any]) -> list[ConversationEntry]:
    """Entries from a mix of stored dicts and entries already read, in order, the dicts validated
    in one call."""
    raw = [e for e in chain if not isinstance(e, ConversationEntry)]
    parsed = iter(_ENTRY_LIST.validate_python(raw)) if raw else iter(())
    return [e if isinstance(e, ConversationEntry) else next(parsed) for e in chain]


def _entry_events(entry: ConversationEntry) -> list[Event]:
    """The turnlog events of one entry; the first carries the entry verbatim and the entry's id."""
    message = entry.message
    events: list[Event] = (
        _request_events(message, first=entry.parent_id is None)
        if isinstance(message, _m.ModelRequest)
        else _response_events(message)
    )
    whole = {"entry": _ENTRIES.dump_python(entry, mode="json"), "events": 0}
    if not events:
        # Nothing turnlog shows (an empty request): the entry is still kept, as framework state.
        return [
            StateRecorded(
                event_id=entry.id,
                framework=FRAMEWORK,
                namespace=_ENTRY,
                key=entry.id,
                media_type="application/json",
                content=json.dumps({**whole, "events": 1}),
            )
        ]
    whole["events"] = len(events)
    out: list[Event] = []
    for index, event in enumerate(events):
        item: dict[str, Any] = whole if index == 0 else {"entry_id": entry.id, "part": index}
        update: dict[str, Any] = {"event_id": entry.id if index == 0 else f"{entry.id}.{index}"}
        if not isinstance(event, UsageRecorded):
            update["origin"] = Origin(framework=FRAMEWORK, item=item)
        out.append(event.model_copy(update=update))
    return out


def _request_events(request: _m.ModelRequest, *, first: bool) -> list[Event]:
    events: list[Event] = []
    if first and request.instructions:
        # The run's instructions are the conversation's system prompt; pydantic-ai repeats them on
        # every request, turnlog shows them once.
        events.append(MessageAppended(role="system", content=request.instructions))
    for part in request.parts:
        if isinstance(part, _m.SystemPromptPart):
            events.append(MessageAppended(role="system", content=part.content))
        elif isinstance(part, _m.UserPromptPart):
            content = part.content if isinstance(part.content, str) else _user_text(part.content)
            events.append(MessageAppended(role="user", content=content))
        elif isinstance(part, _m.ToolReturnPart):
            events.append(
                ToolReturned(
                    tool_call_id=part.tool_call_id,
                    tool_name=part.tool_name,
                    content=part.model_response_str(),
                )
            )
        elif isinstance(part, _m.RetryPromptPart):
            if part.tool_name is not None:
                events.append(
                    ToolReturned(
                        tool_call_id=part.tool_call_id,
                        tool_name=part.tool_name,
                        content=part.model_response(),
                        is_error=True,
                    )
                )
            else:
                events.append(MessageAppended(role="user", content=part.model_response()))
    return events


def _user_text(content: Sequence[Any]) -> str:
    return "\n".join(item if isinstance(item, str) else f"[{type(item).__name__}]" for item in content)


_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def _unattributed_usage(
    record: ConversationRecord, stored: ConversationRecord | None, new_entries: Sequence[ConversationEntry]
) -> UsageRecorded | None:
    """The usage this save adds to the conversation beyond its new responses' own (each already a
    ``usage_recorded``): what a run counted without a response in the history, such as a delegate
    agent's calls made with ``usage=ctx.usage``. None when there is none.

    Its event id is derived from the record's revision, which is minted once per save and written in
    the same batch, so a save is applied once. A fork starts with a copy of its parent's usage, which
    was billed in the parent: that is no new usage. A component that went down (a usage rewritten by
    hand) is not recorded: the log records what was billed, never a refund.
    """
    if stored is not None:
        before = stored.usage
    elif record.forked_from is not None and not new_entries:
        before = record.usage
    else:
        before = RunUsage()
    counted = {name: getattr(before, name) for name in _USAGE_FIELDS}
    for entry in new_entries:
        if isinstance(entry.message, _m.ModelResponse):
            for name in _USAGE_FIELDS:
                counted[name] += getattr(entry.message.usage, name)
    rest = {name: max(getattr(record.usage, name) - counted[name], 0) for name in _USAGE_FIELDS}
    if not any(rest.values()):
        return None
    return UsageRecorded(event_id=f"{record.revision}.usage", model="unknown", **rest)


def _response_events(response: _m.ModelResponse) -> list[Event]:
    text = "".join(part.content for part in response.parts if isinstance(part, _m.TextPart))
    calls = tuple(
        ToolCall(id=part.tool_call_id, name=part.tool_name, arguments=part.args_as_json_str())
        for part in response.parts
        if isinstance(part, _m.ToolCallPart)
    )
    events: list[Event] = [MessageAppended(role="assistant", content=text, tool_calls=calls or None)]
    usage = response.usage
    events.append(
        UsageRecorded(
            model=response.model_name or "unknown",
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            response_id=response.provider_response_id,
        )
    )
    return events
