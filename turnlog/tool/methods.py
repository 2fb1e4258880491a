"""What each method of the agent-facing tool does: reads return text under a token budget; writes
also return the events to append (the dispatcher appends them in one batch with the call's record)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from turnlog.projections.artifact_index import (
    INDEX_MAX_CHARS,
    cap_entries,
    chars_omitted,
    index_entries,
    index_header,
    is_own_output,
    within_chars,
)
from turnlog.projections.artifacts import ArtifactInfo, list_artifacts, read_artifact
from turnlog.projections.todos import build_todo_list, current_todos, render_checklist
from turnlog.store import (
    Event,
    MessageAppended,
    MessagePinned,
    MessageUnpinned,
    RecordedEvent,
    Store,
    Tokenizer,
)
from turnlog.tool.cards import help_card
from turnlog.tool.errors import ToolInputError
from turnlog.tool.history import (
    Page,
    call_text,
    find_event,
    read_event,
    read_range,
    read_tail,
    search,
)
from turnlog.tool.inputs import (
    ArtifactsIndex,
    ArtifactsList,
    ArtifactsRead,
    ContextPin,
    ContextUnpin,
    HistoryEvent,
    HistoryRange,
    HistorySearch,
    HistoryTail,
    TodosRead,
    TodosWrite,
    ToolHelp,
)


@dataclass(frozen=True, slots=True)
class Call:
    """One call being served: where it reads, and the tokens its result may have."""

    store: Store
    session_id: str
    tok: Tokenizer
    budget: int
    explicit: bool = True
    """Whether the caller gave ``budget`` (else it is the default, and a method may use its own cap)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """A method's result text, and the events it writes (none for reads)."""

    text: str
    effects: tuple[Event, ...] = ()
    bounded: bool = False
    """The method kept the text within its own cap: without an explicit budget, it is not cut again."""


# --- artifacts ---------------------------------------------------------------------------------


def _artifacts(call: Call) -> list[ArtifactInfo]:
    """The session's artifacts, less this tool's own large results (kept as artifacts by the store
    like any tool output over 1 KiB): they only repeat the log, and would crowd out the rest."""
    return [info for info in list_artifacts(call.store, call.session_id) if not is_own_output(info)]


def artifacts_list(call: Call, query: ArtifactsList) -> Outcome:
    infos = _artifacts(call)
    if not infos:
        return Outcome("This session has no artifacts.")
    if query.offset >= len(infos):
        raise ToolInputError(
            f"offset {query.offset} is past the end: this session has {len(infos)} artifacts "
            f"(offsets 0 to {len(infos) - 1})"
        )
    page = Page(call.tok, call.budget - 60)
    chosen = infos[query.offset : query.offset + query.limit]
    shown = 0
    for info in chosen:
        if not page.add(_artifact_line(info), force=shown == 0):
            break
        shown += 1
    end = query.offset + shown
    header = f"Artifacts of this session: {query.offset + 1}–{end} of {len(infos)}"
    read_one = call_text("artifacts", "read", {"id": "ID"}).replace('"ID"', "ID")
    if end < len(infos):
        following: dict[str, object] = {"offset": end}
        if query.limit != ArtifactsList.model_fields["limit"].default:
            following["limit"] = query.limit
        footer = f"[next: {call_text('artifacts', 'list', following)}; read one: {read_one}]"
    else:
        footer = f"[read one: {read_one}]"
    return Outcome("\n".join([header, *page.blocks, footer]))


def _artifact_line(info: ArtifactInfo) -> str:
    tokens = f"{info.tokens:,}" if info.tokens_exact else f"~{info.tokens:,}"
    name = _short_name(info.name)
    size = f"{info.lines:,} lines, {tokens} tokens"
    return f"- {info.short_id} · {info.source} · `{name}` · {size} · v{info.version}"


def _short_name(name: str, width: int = 80) -> str:
    flat = " ".join(name.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def artifacts_index(call: Call, query: ArtifactsIndex) -> Outcome:
    # The shared index (the projection's lines and cut), less this tool's own results: within the
    # index's character cap, or the caller's token budget when it gave one.
    infos = _artifacts(call)
    header = index_header(call.session_id, len(infos))
    if not infos:
        return Outcome(header, bounded=True)
    entries = index_entries(infos)
    rest = "; artifacts.list pages through them all"
    fits, omitted = within_chars(INDEX_MAX_CHARS), chars_omitted(INDEX_MAX_CHARS, rest)
    if call.explicit:
        room = call.budget - 30
        fits = lambda text: call.tok.count(text) <= room  # noqa: E731
        omitted = lambda count: f"… {count:,} more not listed{rest}"  # noqa: E731
    capped = cap_entries(header, entries, fits, omitted)
    # Not even the header and the closing line fit: they are shown, and the dispatcher caps them.
    text = capped[0] if capped is not None else f"{header}\n{omitted(len(entries))}"
    return Outcome(text, bounded=True)


def artifacts_read(call: Call, query: ArtifactsRead) -> Outcome:
    # Only the session's own artifacts: an agent reads its own log, not other sessions' content.
    infos = {info.artifact_id: info for info in _artifacts(call)}
    found = [artifact_id for artifact_id in infos if artifact_id.startswith(query.id)]
    if not found:
        raise ToolInputError(
            f"no artifact of this session has an id starting with {query.id!r}; artifacts.list shows them"
        )
    if len(found) > 1:
        shown = ", ".join(artifact_id[: len(query.id) + 4] + "…" for artifact_id in found[:3])
        raise ToolInputError(f"artifact id {query.id!r} is ambiguous: it starts {shown}; give more of it")
    info = infos[found[0]]
    name = _short_name(info.name)
    header = f"Artifact {info.short_id} · `{name}` · {info.lines:,} lines"
    room = call.budget - call.tok.count(header) - 2
    page = read_artifact(call.store, info.artifact_id, query.offset, query.limit, max_tokens=room)
    return Outcome(f"{header}\n{page.render()}")


# --- history -----------------------------------------------------------------------------------


def history_read(call: Call, query: HistoryTail | HistoryRange | HistoryEvent) -> Outcome:
    if isinstance(query, HistoryTail):
        return Outcome(read_tail(call.store, call.session_id, query, call.tok, call.budget))
    if isinstance(query, HistoryRange):
        return Outcome(read_range(call.store, call.session_id, query, call.tok, call.budget))
    return Outcome(read_event(call.store, call.session_id, query, call.tok, call.budget))


def history_search(call: Call, query: HistorySearch) -> Outcome:
    return Outcome(search(call.store, call.session_id, query, call.tok, call.budget))


# --- todos -------------------------------------------------------------------------------------


def todos_read(call: Call, query: TodosRead) -> Outcome:
    return Outcome(render_checklist(current_todos(call.store, call.session_id), show_ids=True))


def todos_write(call: Call, query: TodosWrite) -> Outcome:
    # The one construction function every caller uses: it numbers items without an id and checks
    # what the input model cannot (ids unique across items).
    event = build_todo_list([entry.model_dump(exclude_none=True) for entry in query.todos])
    text = "Todo list replaced.\n" + render_checklist(event.todos, show_ids=True)
    return Outcome(text, (event,))


# --- context -----------------------------------------------------------------------------------


def context_pin(call: Call, query: ContextPin) -> Outcome:
    target = _message(call, query.event_id, "pinned")
    event = MessagePinned(target_event_id=target.event_id, reason=query.reason)
    return Outcome(f"pinned {_describe(target)}: every context keeps it whole from now on", (event,))


def context_unpin(call: Call, query: ContextUnpin) -> Outcome:
    target = _message(call, query.event_id, "unpinned")
    event = MessageUnpinned(target_event_id=target.event_id, reason=query.reason)
    return Outcome(f"unpinned {_describe(target)}: contexts may leave it out again", (event,))


def _message(call: Call, ref: str, verb: str) -> RecordedEvent:
    record = find_event(call.store, call.session_id, ref)
    if not isinstance(record.event, MessageAppended):
        raise ToolInputError(
            f"event {record.event_id[:12]} (v{record.version}) is a {record.type}, not a message: "
            f"only messages can be {verb}"
        )
    return record


def _describe(record: RecordedEvent) -> str:
    role = record.event.role if isinstance(record.event, MessageAppended) else record.type
    return f"v{record.version} {role} · {record.event_id[:12]}"


# --- tool --------------------------------------------------------------------------------------


def tool_help(call: Call, query: ToolHelp) -> Outcome:
    return Outcome(help_card(query.method))


HANDLERS: dict[str, Callable[[Call, Any], Outcome]] = {
    "artifacts.list": artifacts_list,
    "artifacts.index": artifacts_index,
    "artifacts.read": artifacts_read,
    "history.read": history_read,
    "history.search": history_search,
    "todos.read": todos_read,
    "todos.write": todos_write,
    "context.pin": context_pin,
    "context.unpin": context_unpin,
    "tool.help": tool_help,
}
"""``module.method`` -> what serves it."""
