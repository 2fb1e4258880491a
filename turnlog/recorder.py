"""Recording an agent run from its loop: one object per session that appends messages, tool calls
and results, todo lists, artifacts, usage and runs, and builds the context for the next model call.

Example::

    import turnlog.recorder as tr

    with tr.session("agent.db", "chat-1", title="Fix the bug", model="gpt-4o") as rec:
        rec.system("You are a coding agent.")
        rec.user("The invoice total is off by a cent.")
        with rec.run():
            context = rec.context(budget=8000)       # context.rendered: the messages to send
            rec.assistant("Let me look.", tool_calls=[{"id": "c1", "name": "read_file",
                                                       "arguments": {"path": "totals.py"}}])
            rec.usage(input_tokens=context.total_tokens, output_tokens=12)
            rec.tool_result("c1", "def total(): ...")
            rec.todos(["fix rounding", {"content": "run the tests", "status": "pending"}])
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

from pydantic import BaseModel, ValidationError

from turnlog.projections.context import BuiltContext, ContextPolicy, build_context
from turnlog.projections.registry import keep_caught_up
from turnlog.projections.todos import TodoInput, build_todo_list
from turnlog.store import (
    NO_SESSION,
    ArtifactWritten,
    Event,
    InvalidEventError,
    MessageAppended,
    MessagePinned,
    MessageUnpinned,
    Pin,
    RecordedEvent,
    RunFinished,
    RunStarted,
    SessionStarted,
    Store,
    StoreError,
    ToolCall,
    ToolReturned,
    UsageRecorded,
    VersionConflictError,
    determinism,
)
from turnlog.store.events import describe_validation_error

if TYPE_CHECKING:
    from turnlog.loop import Handlers, LoopReport
    from turnlog.tool import Envelope, ToolResult

M = TypeVar("M", bound=BaseModel)

ToolCallInput = ToolCall | Mapping[str, Any]
"""A tool call as :meth:`SessionRecorder.assistant` takes it: a ToolCall, or a mapping with
``name``, optional ``id`` (generated when missing) and ``arguments`` (JSON text, or any JSON value,
which is serialised)."""


class SessionRecorder:
    """Appends one session's events, each append checked against the version this recorder last
    saw (optimistic concurrency): if another writer appended meanwhile, the append fails with
    VersionConflictError instead of interleaving; :meth:`sync` adopts the new head.

    A transient store error (the file busy past its timeout, an I/O error) is retried with the same
    event ids, so an append whose acknowledgement was lost is stored once. One recorder per writer;
    it is not meant to be shared by threads. Make one with :func:`session`."""

    def __init__(
        self,
        store: Store,
        session_id: str,
        *,
        model: str | None = None,
        retries: int = 3,
        owns_store: bool = False,
        handlers: Handlers | None = None,
        loop: bool = True,
    ) -> None:
        self.store = store
        """The store appended to (each append leaves its projections caught up)."""
        keep_caught_up(store)
        self.session_id = session_id
        """The session recorded."""
        self.model = model
        """The model, used for usage records and context manifests that name none."""
        self.retries = retries
        """How often a transient store error is retried."""
        self.version = store.head_version(session_id)
        """The session's head version as this recorder last saw it."""
        self.run_id: str | None = None
        """The open run, if any."""
        self.loop = loop
        """Run the session policy's work after commits: condense long tool outputs, compact when a
        run finishes (see turnlog.loop). Off: this recorder only appends."""
        self.handlers = handlers
        """What the policy's names stand for (default: the local configuration)."""
        self.last_report: LoopReport | None = None
        """What the loop did after the last append that triggered it (its ``errors`` say what failed)."""
        self._owns_store = owns_store
        self._call_names: dict[str, str] = {}

    # --- messages ------------------------------------------------------------------------------

    def system(self, text: str, *, pinned: bool | str = False) -> RecordedEvent:
        """Append a system message (``pinned``: True, or the reason, to pin it from the start)."""
        return self.message("system", text, pinned=pinned)

    def user(self, text: str, *, name: str | None = None, pinned: bool | str = False) -> RecordedEvent:
        """Append a user message (``pinned``: True, or the reason, to pin it from the start)."""
        return self.message("user", text, name=name, pinned=pinned)

    def assistant(
        self,
        text: str = "",
        *,
        tool_calls: Sequence[ToolCallInput] | None = None,
        name: str | None = None,
    ) -> RecordedEvent:
        """Append an assistant message, with the tool calls it requests. The recorded event's
        ``tool_calls`` carry the ids (generated for calls given without one)."""
        calls = tuple(_tool_call(call) for call in tool_calls or ())
        recorded = self.message("assistant", text, name=name, tool_calls=calls or None)
        self._call_names.update((call.id, call.name) for call in calls)
        return recorded

    def message(
        self,
        role: Literal["system", "user", "assistant"],
        text: str,
        *,
        name: str | None = None,
        tool_calls: tuple[ToolCall, ...] | None = None,
        pinned: bool | str = False,
    ) -> RecordedEvent:
        """Append a message of any role."""
        fields: dict[str, Any] = {"role": role, "content": text, "name": name, "tool_calls": tool_calls}
        if pinned is not False:
            fields["pinned"] = Pin(reason=pinned if isinstance(pinned, str) else None)
        return self.append(_build(MessageAppended, fields))[0]

    def tool_result(
        self,
        call_id: str,
        content: str,
        *,
        tool_name: str | None = None,
        is_error: bool = False,
    ) -> RecordedEvent:
        """Append the result of a tool call (``tool_name`` defaults to the name of the call this
        recorder appended with that id). Large outputs are kept whole as artifacts by the store."""
        name = tool_name or self._call_names.get(call_id)
        fields = {"tool_call_id": call_id, "tool_name": name, "content": content, "is_error": is_error}
        return self.append(_build(ToolReturned, fields))[0]

    def invoke_tool(self, call_id: str, arguments: Envelope, *, max_tokens: int | None = None) -> ToolResult:
        """Serve a call of the ``turnlog`` tool (the agent reading its own log, writing its todo
        list or pins) that this recorder appended with :meth:`assistant`: what the call writes and
        its result go in one batch answering ``call_id``; ``.text`` is what to give the model. Invalid
        input is answered with an error result (``is_error``) the model can correct, never raised;
        a retry with the same call id and input writes nothing. See :func:`turnlog.tool.invoke`."""
        from turnlog import tool  # on first use: `import turnlog` stays light

        expected = self.version if self.version else NO_SESSION
        result = tool.invoke(
            self.store,
            self.session_id,
            arguments,
            max_tokens=max_tokens,
            tool_call_id=call_id,
            expected_version=expected,
        )
        if result.recorded:
            self.version = result.recorded[-1].version
            if self.loop:
                self._after_commit(list(result.recorded))
        return result

    # --- the rest of the session ---------------------------------------------------------------

    def todos(self, items: Sequence[TodoInput]) -> RecordedEvent:
        """Replace the todo list (strings, ``{"content", "status", "id"}`` mappings or TodoItems;
        checked by the one todo-list builder)."""
        return self.append(build_todo_list(items))[0]

    def artifact(
        self,
        name: str,
        content: str,
        *,
        media_type: str = "text/plain",
        tool_call_id: str | None = None,
    ) -> RecordedEvent:
        """Append a file or document the agent produced (stored once, by content)."""
        fields = {"name": name, "content": content, "media_type": media_type, "tool_call_id": tool_call_id}
        return self.append(_build(ArtifactWritten, fields))[0]

    def usage(
        self,
        *,
        input_tokens: int,
        output_tokens: int,
        model: str | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        response_id: str | None = None,
    ) -> RecordedEvent:
        """Append one model call's usage as the provider reported it (``model`` defaults to the
        recorder's; the open run is recorded with it)."""
        model = model or self.model
        if not model:
            raise InvalidEventError("usage: give model= (the recorder was opened without a model)")
        fields = {
            "model": model,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_read_tokens": cache_read_tokens,
            "cache_write_tokens": cache_write_tokens,
            "reasoning_tokens": reasoning_tokens,
            "run_id": self.run_id,
            "response_id": response_id,
        }
        return self.append(_build(UsageRecorded, fields))[0]

    def pin(self, message: RecordedEvent | str, reason: str | None = None) -> RecordedEvent:
        """Pin a message (its record or event id) so every context keeps it, whole."""
        return self.append(MessagePinned(target_event_id=_event_id(message), reason=reason))[0]

    def unpin(self, message: RecordedEvent | str, reason: str | None = None) -> RecordedEvent:
        """Lift a message's pin."""
        return self.append(MessageUnpinned(target_event_id=_event_id(message), reason=reason))[0]

    @contextlib.contextmanager
    def run(self, run_id: str | None = None) -> Iterator[str]:
        """Record an agent run around the block: ``run_started``, then ``run_finished`` with status
        ``completed``, or ``failed`` when the block raises (``cancelled`` for KeyboardInterrupt and
        other non-Exception exits); the exception is re-raised. Yields the run id."""
        if self.run_id is not None:
            raise InvalidEventError(f"run {self.run_id!r} is still open: runs do not nest")
        run_id = run_id or f"run-{determinism.token_hex(6)}"
        self.append(_build(RunStarted, {"run_id": run_id}))
        self.run_id = run_id
        status = "completed"
        try:
            yield run_id
        except Exception:
            status = "failed"
            raise
        except BaseException:
            status = "cancelled"
            raise
        finally:
            self.run_id = None
            self.append(_build(RunFinished, {"run_id": run_id, "status": status}))

    # --- context -------------------------------------------------------------------------------

    def context(
        self,
        budget: int | None = None,
        *,
        policy: ContextPolicy | None = None,
        record: bool = True,
        **options: Any,
    ) -> BuiltContext:
        """Build the context for the next model call: ``budget`` in prompt tokens and any other
        ContextPolicy option (``format="anthropic"``, ``max_tool_tokens=...``), or a whole
        ``policy``. ``record`` (the default) appends a ``context_built`` manifest, so the audit
        can show what the model saw on this call. ``.rendered`` holds the messages to send."""
        if policy is None:
            if budget is None:
                raise InvalidEventError("context: give budget= (prompt tokens) or policy=")
            try:
                policy = ContextPolicy(budget=budget, **options)
            except ValidationError as exc:
                raise InvalidEventError(f"context policy: {describe_validation_error(exc)}") from None
        elif budget is not None or options:
            raise InvalidEventError("context: give either a policy or budget= and options, not both")
        built = build_context(self.store, self.session_id, policy)
        if record:
            self.append(built.to_event(run_id=self.run_id, model=self.model))
        return built

    # --- appending -----------------------------------------------------------------------------

    def append(self, *events: Event) -> list[RecordedEvent]:
        """Append events as one atomic batch at the version this recorder expects."""
        expected = self.version if self.version else NO_SESSION
        delay = 0.05
        for attempt in range(self.retries + 1):
            try:
                records = self.store.append(self.session_id, list(events), expected_version=expected)
                break
            except VersionConflictError as exc:
                exc.add_note(
                    f"another writer appended to session {self.session_id!r} after this recorder's "
                    f"version {self.version}; read what it wrote, then call sync() to continue after it"
                )
                raise
            except StoreError as exc:
                # Only the base class is transient (busy file, I/O); its subclasses are answers.
                if type(exc) is not StoreError or attempt == self.retries:
                    raise
                time.sleep(delay)
                delay *= 2
        if records:
            self.version = records[-1].version
            if self.loop:
                self._after_commit(records)
        return records

    def _after_commit(self, records: list[RecordedEvent]) -> None:
        if not any(r.type in ("tool_returned", "run_finished") for r in records):
            return
        from turnlog.loop import after_commit  # the loop's summarizers are imported only when used

        try:
            report = after_commit(self.store, self.session_id, records, handlers=self.handlers)
        except StoreError as exc:  # the events are committed; say what could not follow them
            from turnlog.loop import LoopReport

            self.last_report = LoopReport(errors=[f"the run-time loop could not run: {exc}"])
            return
        if report.appended or report.errors:
            self.last_report = report
        # Adopt what the loop appended right after this recorder's head; anything else another
        # writer appended meanwhile is left for the next append to detect.
        for record in report.appended:
            if record.version == self.version + 1:
                self.version = record.version

    def sync(self) -> int:
        """Adopt the session's current head version (after another writer appended); returns it."""
        self.version = self.store.head_version(self.session_id)
        return self.version

    def close(self) -> None:
        """Close the store if this recorder opened it."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def session(
    store: Store | str | os.PathLike[str],
    session_id: str,
    *,
    title: str | None = None,
    model: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    retries: int = 3,
    handlers: Handlers | None = None,
    loop: bool = True,
) -> SessionRecorder:
    """A recorder for ``session_id``: started (``session_started`` with the title, model and
    metadata) when it does not exist yet, continued from its head when it does. ``store`` is an
    open store or the path of one, or a PostgreSQL URL (opened, created if needed, and closed with
    the recorder)."""
    from turnlog import open_backend  # here: turnlog imports this module

    owns = not isinstance(store, Store)
    opened = open_backend(store) if not isinstance(store, Store) else store
    try:
        recorder = SessionRecorder(
            opened, session_id, model=model, retries=retries, owns_store=owns, handlers=handlers, loop=loop
        )
        if recorder.version == 0:
            started = _build(
                SessionStarted,
                {"title": title, "model": model, "metadata": dict(metadata) if metadata else None},
            )
            recorder.append(started)
        elif recorder.model is None:
            found = opened.first_event(session_id)
            first = found.event if found else None
            recorder.model = first.model if isinstance(first, SessionStarted) else None
    except BaseException:
        if owns:
            opened.close()
        raise
    return recorder


def _tool_call(call: ToolCallInput) -> ToolCall:
    if isinstance(call, ToolCall):
        return call
    if not isinstance(call, Mapping):
        raise InvalidEventError(
            "tool_calls: expected a ToolCall or a mapping with name, id and arguments, "
            f"got {type(call).__name__}"
        )
    unknown = set(call) - {"id", "name", "arguments"}
    if unknown:
        raise InvalidEventError(
            f"tool_calls: unknown field {sorted(unknown)[0]!r} (allowed: id, name, arguments)"
        )
    arguments = call.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    fields = {
        "id": call.get("id") or f"call_{determinism.token_hex(12)}",
        "name": call.get("name"),
        "arguments": arguments,
    }
    return _build(ToolCall, fields)


def _build(cls: type[M], fields: Mapping[str, Any]) -> M:
    """A model from keyword fields (Nones dropped so defaults apply), field errors as one
    InvalidEventError naming them."""
    try:
        return cls(**{key: value for key, value in fields.items() if value is not None})
    except ValidationError as exc:
        raise InvalidEventError(f"{cls.__name__}: {describe_validation_error(exc)}") from None


def _event_id(message: RecordedEvent | str) -> str:
    return message.event_id if isinstance(message, RecordedEvent) else message


__all__ = ["SessionRecorder", "ToolCallInput", "session"]
