"""turnlog as an OpenAI Agents SDK session: ``TurnlogSession(session_id, db=...)`` implements the SDK's
``Session`` protocol (``get_items``, ``add_items``, ``pop_item``, ``clear_session``), so
``Runner.run(agent, input, session=TurnlogSession("conv-1", db="turnlog.db"))`` keeps the conversation
in turnlog's log.

Mapping (one SDK item = one turnlog event, the item verbatim in the event's ``origin``, so
``get_items`` gives back exactly what was added):

- ``message`` of role user / system / developer -> ``message_appended`` user / system (developer
  counts as system); of role assistant -> an assistant ``message_appended`` with the text of its
  ``output_text`` and ``refusal`` parts;
- ``function_call`` / ``custom_tool_call`` -> an assistant ``message_appended`` with one tool call;
- ``function_call_output`` / ``custom_tool_call_output`` -> ``tool_returned`` for that call;
- every other item (``reasoning``, web search, MCP, ``compaction``, types this SDK version does not
  know yet) -> an assistant ``message_appended`` with empty text: it keeps its place in the order
  and the item count, and the model never sees reasoning as if it were an answer.

``pop_item`` and ``clear_session`` delete nothing: they append ``session_rewound`` (reason ``pop``,
or ``clear`` to version 0), which every projection honours; ``turnlog log`` still shows all.

Budgeted context: ``RunConfig(call_model_input_filter=session.model_input_filter)`` sends the model
turnlog's context under ``budget`` (retention, capped tool outputs, summaries) before every model
call instead of the whole history. (A ``session_input_callback`` is the wrong hook for this: the
runner would store the capped and summary items it returns as new items.) The runner's compaction
hook ``run_compaction`` runs turnlog's compaction and appends ``summary_recorded``; it never clears.

Where this differs from ``SQLiteSession``: ``db`` is required (no ``":memory:"`` default: pass a
temp path); the message after ``close()`` reads "TurnlogSession ... is closed"; there are no corrupt
rows to skip (the store verifies its rows), and a rewind cannot be half-applied.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from turnlog.integrations import StoreLike, open_for_adapter, require
from turnlog.store import (
    Event,
    MessageAppended,
    Origin,
    OriginItem,
    RecordedEvent,
    SessionRewound,
    Store,
    ToolCall,
    ToolReturned,
    UsageRecorded,
    VersionConflictError,
)
from turnlog.store.events import RunFinished, new_event_id
from turnlog.store.rows import gc_paused

__all__ = ["DEFAULT_BUDGET", "FRAMEWORK", "TurnlogSession", "event_for_item"]

_memory = require("agents.memory", "openai-agents")
_settings_mod = require("agents.memory.session_settings", "openai-agents")

DEFAULT_BUDGET = 8000
"""The default token budget of the budgeted context and of compaction."""

FRAMEWORK = "openai-agents"
"""The ``origin.framework`` of every event this adapter writes."""

_CALL_TYPES = ("function_call", "custom_tool_call")
_OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output")
_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


def _text(content: Any) -> str:
    """The readable text of a message's content: a string, or the text of its text parts."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping):
                for key in ("text", "refusal"):
                    value = part.get(key)
                    if isinstance(value, str):
                        parts.append(value)
    return "\n".join(parts)


def _mapped(item: Mapping[str, Any], origin: Origin) -> Event | None:
    kind, role, call_id = item.get("type", "message"), item.get("role"), item.get("call_id")
    if kind == "message" and isinstance(role, str) and role in _ROLES:
        role = _ROLES[role]
        return MessageAppended(role=role, content=_text(item.get("content")), origin=origin)
    if kind in _CALL_TYPES and isinstance(call_id, str) and isinstance(item.get("name"), str):
        arguments = item.get("arguments", item.get("input", "{}"))
        call = ToolCall(
            id=call_id,
            name=item["name"],
            arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
        )
        return MessageAppended(role="assistant", tool_calls=(call,), origin=origin)
    if kind in _OUTPUT_TYPES and isinstance(call_id, str):
        output = item.get("output", "")
        content = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        return ToolReturned(tool_call_id=call_id, content=content, origin=origin)
    return None


def event_for_item(item: Mapping[str, Any]) -> Event:
    """The turnlog event one SDK item is stored as (see the module's docstring for the mapping).

    An item whose fields do not fit the mapped event (a call id with spaces, a missing name) is
    still stored losslessly, as an empty assistant message carrying it in ``origin``."""
    origin = Origin(framework=FRAMEWORK, item=dict(item))
    try:
        event = _mapped(item, origin)
    except ValidationError:
        event = None
    return event if event is not None else MessageAppended(role="assistant", origin=origin)


def _item_of(record: RecordedEvent) -> Any | None:
    """The SDK item a record holds, or None for a record that is not one of this adapter's items."""
    origin = getattr(record.event, "origin", None)
    if isinstance(origin, Origin) and origin.framework == FRAMEWORK:
        return origin.item
    return None


class TurnlogSession:
    """An OpenAI Agents SDK session kept in a turnlog store (the SDK's ``Session`` protocol).

    ``db`` is a store's path or an open :class:`store.SQLiteStore` (then it stays the caller's to
    close). ``session_settings`` (a ``SessionSettings`` or a dict of its fields) gives the default
    ``limit`` of ``get_items``, as on ``SQLiteSession``. ``budget`` (tokens) bounds the context that
    :meth:`model_input_filter` sends the model and is the target of :meth:`run_compaction`.
    Several sessions (ids) share one store without seeing each other; two objects with the same id
    and store share the conversation.
    """

    def __init__(
        self,
        session_id: str,
        db: StoreLike,
        session_settings: Any | None = None,
        *,
        budget: int = DEFAULT_BUDGET,
        summarizer: object | None = None,
    ) -> None:
        self.session_id = session_id
        self.budget = budget
        """The token budget of :meth:`budgeted_items`, :meth:`model_input_filter` and compaction."""
        self.summarizer = summarizer
        """What :meth:`run_compaction` summarizes with (None: turnlog's extractive summarizer)."""
        # As SQLiteSession: no settings means SessionSettings() (no default limit).
        self.session_settings = (
            _settings_mod.SessionSettings()
            if session_settings is None
            else _settings_mod.coerce_session_settings(session_settings)
        )
        self._store, self._owned = open_for_adapter(db)
        # Calls run in worker threads (asyncio.to_thread) and may come from several event loops at
        # once: a threading lock, never an asyncio.Lock, orders this object's read-then-write steps.
        self._lock = threading.Lock()
        self._closed = False

    @property
    def store(self) -> Store:
        """The turnlog store this session writes to."""
        return self._store

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(
                f"TurnlogSession {self.session_id!r} is closed: create a new TurnlogSession to use it again"
            )

    def close(self) -> None:
        """Close the store if this session opened it; afterwards every call raises RuntimeError."""
        if not self._closed:
            self._closed = True
            if self._owned:
                self._store.close()

    # -- reads ---------------------------------------------------------------------------------

    def _live_tail(self, limit: int | None) -> list[tuple[OriginItem, Any]]:
        """The newest ``limit`` live items (all with None), oldest first, read from the tail. Only
        each event's place and origin are read (the items are the origins, verbatim), with the
        garbage collector paused while the result is built (see store.rows.gc_paused)."""
        from turnlog.projections.live import live_marks  # here: keeps `import turnlog.integrations` light

        head = self._store.head_version(self.session_id)
        window = None if limit is None else min(head, 2 * limit + 16)
        while True:
            with gc_paused():
                rows = self._store.read_origins(self.session_id, newest=window) if window != 0 else []
                marks = live_marks(self._store, self.session_id, rows)
                items = [
                    (row, row.item)
                    for row, live in zip(rows, marks, strict=True)
                    if live and row.framework == FRAMEWORK
                ]
            if limit is None or window is None or len(items) >= limit or window >= head:
                return items if limit is None else items[len(items) - min(limit, len(items)) :]
            window = min(head, window * 4)

    def _get_items(self, limit: int | None) -> list[Any]:
        self._check_open()
        if limit is None or limit < 0:  # SQLiteSession: a negative limit returns everything
            return [item for _, item in self._live_tail(None)]
        if limit == 0:
            return []
        return [item for _, item in self._live_tail(limit)]

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The session's items in chronological order; with ``limit`` (or the session settings'
        limit) the latest ``limit`` of them, still oldest first; 0 gives ``[]``, a negative limit
        everything (as ``SQLiteSession``)."""
        resolved = _settings_mod.resolve_session_limit(limit, self.session_settings)
        return await asyncio.to_thread(self._get_items, resolved)

    # -- writes --------------------------------------------------------------------------------

    def _add_items(self, items: list[Any]) -> None:
        self._check_open()
        if not items:
            return
        events = [event_for_item(item) for item in items]
        # An output item does not name its tool; its call usually sits in the same batch.
        names = {c.id: c.name for e in events if isinstance(e, MessageAppended) for c in e.tool_calls or ()}
        events = [
            e.model_copy(update={"tool_name": names[e.tool_call_id]})
            if isinstance(e, ToolReturned) and e.tool_call_id in names
            else e
            for e in events
        ]
        # One batch = one atomic append: the SDK's recovery treats a batch as all-or-nothing.
        records = self._store.append(self.session_id, events)
        if any(isinstance(e, ToolReturned) for e in events):
            from turnlog.loop import after_adapter_commit  # the session policy's output views

            after_adapter_commit(self._store, self.session_id, records)

    async def add_items(self, items: list[Any]) -> None:
        """Append items, all in one atomic append."""
        await asyncio.to_thread(self._add_items, list(items))

    def _rewind(self, reason: str, target: int, expected: int) -> None:
        event = SessionRewound(to_version=target, reason=reason, source=FRAMEWORK)
        self._store.append(self.session_id, [event], expected_version=expected)

    def _pop_item(self) -> Any | None:
        self._check_open()
        with self._lock:
            while True:
                head = self._store.head_version(self.session_id)
                last = self._live_tail(1)
                if not last:
                    return None
                record, item = last[0]
                try:
                    # Back to the version just before the item: the live set as it was then.
                    self._rewind("pop", record.version - 1, head)
                except VersionConflictError:
                    continue  # another writer appended meanwhile: look again
                return item

    async def pop_item(self) -> Any | None:
        """Remove and return the latest item (None when the session is empty), by appending a
        ``session_rewound`` to the version before it."""
        return await asyncio.to_thread(self._pop_item)

    def _clear(self) -> None:
        self._check_open()
        with self._lock:
            head = self._store.head_version(self.session_id)
            if head and self._live_tail(1):
                self._rewind("clear", 0, head)

    async def clear_session(self) -> None:
        """Empty the session (a ``session_rewound`` to version 0; the log keeps everything)."""
        await asyncio.to_thread(self._clear)

    def _store_run_usage(self, result: Any, model: str | None) -> int:
        self._check_open()
        if model is None:
            agent_model = getattr(getattr(result, "last_agent", None), "model", None)
            model = (
                agent_model if isinstance(agent_model, str) and agent_model else type(agent_model).__name__
            )
        events: list[Event] = []
        for index, response in enumerate(result.raw_responses):
            usage = response.usage
            inputs, outputs = usage.input_tokens_details, usage.output_tokens_details
            events.append(
                UsageRecorded(
                    event_id=_stable_id("usage", self.session_id, response.response_id, index),
                    model=model,
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    cache_read_tokens=getattr(inputs, "cached_tokens", 0) or 0,
                    reasoning_tokens=getattr(outputs, "reasoning_tokens", 0) or 0,
                    response_id=response.response_id,
                )
            )
        if not events:
            return 0
        # The run is over: its end goes with its usage, so the session policy's run-end work runs
        # (turnlog.loop). Ids follow from the responses: storing the same result twice is a retry
        # that returns the stored records, never usage billed twice.
        first = result.raw_responses[0].response_id
        events.append(
            RunFinished(event_id=_stable_id("run-end", self.session_id, first, 0), run_id=f"run-{first}")
        )
        head = self._store.head_version(self.session_id)
        records = self._store.append(self.session_id, events)
        if records and records[0].version > head:  # stored now, not a retry of a stored result
            from turnlog.loop import after_adapter_commit

            after_adapter_commit(self._store, self.session_id, records)
        return len(events) - 1

    async def store_run_usage(self, result: Any, *, model: str | None = None) -> int:
        """Append one ``usage_recorded`` per model response of a finished run (as the SDK's
        ``AdvancedSQLiteSession.store_run_usage``), so ``turnlog audit`` shows what was billed, and a
        ``run_finished``, so the session policy's run-end work runs (``turnlog policy``); the Session
        protocol itself never sees usage or runs. Storing the same result again stores nothing
        (event ids follow from the response ids). Returns the count of usage records."""
        return await asyncio.to_thread(self._store_run_usage, result, model)

    # -- turnlog's budgeted context and compaction -----------------------------------------------

    def _policy(self) -> Any:
        from turnlog.projections.stable_cuts import session_context_policy

        # ``budget`` with the session's stored policy (``turnlog policy``): its tool cap, and its
        # cache_stable, so each call's context starts with the one before while the budget allows.
        return session_context_policy(self._store, self.session_id, self.budget)

    def _budgeted_items(self) -> list[Any]:
        from turnlog.projections.context import build_context

        self._check_open()
        built = build_context(self._store, self.session_id, self._policy())
        items: list[Any] = []
        for message in built.messages:
            if message.mode == "full":
                originals = [_item_of(self._store.get_event(event_id)) for event_id in message.event_ids]
                if originals and all(item is not None for item in originals):
                    items.extend(originals)  # shown whole: the SDK's own items, verbatim
                    continue
            items.extend(_items_for(message))
        return items

    async def budgeted_items(self) -> list[Any]:
        """The history as turnlog's context builder shows it under ``budget``: the retained items
        verbatim, capped tool outputs and summaries as new items, never a tool output without its
        call (the same context as ``turnlog context SESSION --budget BUDGET``)."""
        return await asyncio.to_thread(self._budgeted_items)

    def _model_input(self, given: list[Any]) -> list[Any]:
        budgeted = self._budgeted_items()
        # The runner saves every turn before the next model call, so what it gives is normally all
        # in the store; whatever follows the newest stored item is not yet, and is sent as given.
        last = self._live_tail(1)
        newest = last[0][1] if last else None
        at = max((i for i, item in enumerate(given) if item == newest), default=-1)
        return [*budgeted, *given[at + 1 :]] if newest is not None else list(given)

    async def model_input_filter(self, data: Any) -> Any:
        """A ``RunConfig.call_model_input_filter``: before every model call (tool loops included)
        the model gets turnlog's budgeted context instead of the whole history. The session itself
        is unchanged: the filter shapes only what is sent."""
        run_config = require("agents.run_config", "openai-agents")
        given = list(data.model_data.input)
        items = await asyncio.to_thread(self._model_input, given)
        return run_config.ModelInputData(input=items, instructions=data.model_data.instructions)

    def _compact(self, force: bool) -> int:
        from turnlog.compaction import CompactionOptions, compact

        self._check_open()
        if not self._store.head_version(self.session_id):
            return 0
        # force: compact whatever the context's size, keeping only the newest two messages raw.
        options = CompactionOptions(trigger=1e-9, keep_last=2) if force else CompactionOptions()
        with self._lock:
            result = compact(self._store, self.session_id, self._policy(), self.summarizer, options=options)
        return len(result.summaries)

    async def run_compaction(self, args: Mapping[str, Any] | None = None, *, wrapper: Any = None) -> None:
        """The SDK's compaction hook (the runner calls it after a turn): turnlog's compaction
        appends ``summary_recorded`` events when the context outgrows ``budget`` (always, with
        ``{"force": True}``). Unlike ``OpenAIResponsesCompactionSession`` nothing is cleared or
        rewritten: ``get_items`` is unchanged, the summaries show in the budgeted context."""
        del wrapper  # accepted because the runner passes it to hooks that take it
        await asyncio.to_thread(self._compact, bool((args or {}).get("force")))


def _items_for(message: Any) -> list[Any]:
    """SDK items for a context message that is not shown whole (capped, a summary, a notice)."""
    if message.role == "tool":
        return [{"type": "function_call_output", "call_id": message.tool_call_id, "output": message.content}]
    items: list[Any] = []
    if message.content:
        items.append({"role": message.role, "content": message.content})
    items.extend(
        {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.arguments}
        for call in message.tool_calls
    )
    return items


def _stable_id(kind: str, session_id: str, response_id: str | None, index: int) -> str:
    """An event id that follows from the session and the provider's response id (a fresh one when
    the response has none)."""
    if not response_id:
        return new_event_id()
    digest = hashlib.sha256(f"{kind}\0{session_id}\0{response_id}\0{index}".encode()).hexdigest()
    return f"{kind}-{digest[:32]}"
