"""The LangGraph saver's side of the log: what it knows of its threads in memory (each namespace's
latest checkpoint with its pending writes, and the live messages: integrations.langgraph_index),
how it keeps that in step with the log, and how it appends a thread's waiting writes
(integrations.langgraph_queue) as message and state events.

What it knows is folded from its own appends, or from the log when another writer appended (one
head query tells). A write that depends on it (a root checkpoint, whose messages and time travel
are decided against the thread's state) is appended at the known head, so the append's expected
version checks it; on a conflict the saver reads what is new and tries again. Writes that depend on
nothing (a task's writes, a subgraph's checkpoint) are appended wherever the head is.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import operator
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, cast

from langchain_core.messages import BaseMessage

from turnlog.integrations.langchain import _to_event, _usage  # one mapping for both
from turnlog.integrations.langgraph_index import LatestCheckpoint, ThreadCheckpoints, ThreadMessages
from turnlog.integrations.langgraph_queue import QueuedWrite, WriteQueue
from turnlog.projections.langgraph_index import (
    CHECKPOINT_MEDIA,
    FRAMEWORK,
    CheckpointRow,
    find_checkpoints,
    indexed_through,
    writes_from,
)
from turnlog.projections.live import live_marks
from turnlog.projections.registry import materializer
from turnlog.store import (
    ANY,
    NO_SESSION,
    Event,
    InvalidEventError,
    MessageAppended,
    MessageRemoved,
    Origin,
    RecordedEvent,
    SessionRewound,
    SessionStarted,
    StateRecorded,
    Store,
    StoreError,
    ToolReturned,
    VersionConflictError,
)
from turnlog.store.dialect import Connection, dialect_of

__all__ = ["SaverLog", "advance_in_batches", "state_of"]

_MAX_TARGETS = 1000  # message_removed names at most this many events
_THREADS = 256  # threads whose latest checkpoints are kept in memory (the least recently used go)
_ID = operator.attrgetter("id")
_MAPPED = 64  # threads whose last written messages list is kept (its objects: the least recent go)
_BACKLOG = 200  # events appended before the saver advances the materialized projections

Query = Callable[[Connection], Any]


class SaverLog:
    """A saver's threads in memory and its appends; every method is called under ``lock``."""

    def __init__(self, store: Store, lock: threading.RLock) -> None:
        self.store = store
        self.lock = lock
        self.queue = WriteQueue(lock)
        self._messages: dict[str, ThreadMessages] = {}
        self._threads: OrderedDict[str, ThreadCheckpoints] = OrderedDict()
        self._mapped: OrderedDict[str, tuple[int, tuple[Any, ...]]] = OrderedDict()
        """Per thread: the messages list its live messages are, noted at ``changes`` of them."""

    def query(self, query: Query) -> Any:
        """Ask the index (projections.langgraph_index), caught up with the log first."""
        materializer(self.store).catch_up()  # whatever any writer appended is indexed first
        with self.store.reading() as conn:
            return query(conn)

    def append(
        self, sid: str, head: int, events: builtins.list[Event], *, check: bool = True
    ) -> builtins.list[RecordedEvent]:
        """Append right after version ``head`` (``check``: VersionConflictError if another writer
        appended meanwhile; else wherever the head is); a thread's first events open its session.
        What is known of the thread advances over what was appended when it follows ``head``."""
        if head == 0:
            events = [SessionStarted(metadata={"framework": FRAMEWORK}), *events]
        expected = NO_SESSION if head == 0 else head if check else ANY
        records = self.store.append(sid, events, expected_version=expected, bounded=False)
        follows = records[0].version == head + 1
        known = self._messages.get(sid)
        if known is not None and known.live is not None and known.version == head and follows:
            known.fold(records)
        thread = self._threads.get(sid)
        if thread is not None and thread.version == head and follows:
            thread.fold(records)  # what the saver wrote is what it will be asked for next
        else:
            self._threads.pop(sid, None)
        return records

    # --- what is known of each thread --------------------------------------------------------------

    def thread(self, sid: str, *, fresh: bool) -> ThreadCheckpoints:
        """The thread's checkpoints as this saver knows them; ``fresh``: advanced to the log's head
        first (one query when nothing is new), since another writer may have appended."""
        thread = self._threads.get(sid)
        if thread is None or fresh:
            head = self.store.head_version(sid)
            if thread is None or head < thread.version:
                thread = ThreadCheckpoints(version=head, complete=head == 0)
            elif head > thread.version:
                self._fold(sid, thread, self.store.read_session(sid, from_version=thread.version + 1))
            self._threads[sid] = thread
        self._threads.move_to_end(sid)
        while len(self._threads) > _THREADS:
            self._threads.popitem(last=False)
        return thread

    def _fold(self, sid: str, thread: ThreadCheckpoints, records: builtins.list[RecordedEvent]) -> None:
        """Advance the thread's checkpoints, and its messages when they were as far, over records
        another writer appended (read once for both)."""
        known = self._messages.get(sid)
        if known is not None and known.live is not None and known.version == thread.version:
            known.fold(records)
        thread.fold(records)

    def latest(self, sid: str, thread: ThreadCheckpoints, namespace: str) -> LatestCheckpoint | None:
        """The namespace's latest checkpoint: from memory, else loaded once from the index and
        brought to the thread's version. None on a read-only store, whose index this saver cannot
        place in the log."""
        entry = thread.known(namespace)
        if entry is not None or self.store.readonly:
            return entry
        loaded = ThreadCheckpoints(version=0, complete=False)
        entry = loaded.namespaces[namespace] = LatestCheckpoint()

        def read(conn: Connection) -> tuple[int, builtins.list[CheckpointRow], Any]:
            rows = find_checkpoints(conn, session_id=sid, namespace=namespace, limit=1)
            writes = writes_from(conn, sid, namespace, rows[0][2] if rows else None)
            return indexed_through(conn), rows, writes

        position, rows, writes = self.query(read)
        loaded.version = self.store.version_at(sid, position)
        wanted = {row[4] for row in rows} | {w[2] for _, w in writes}
        states = {r.version: state_of(r) for r in self.store.read_versions(sid, sorted(wanted))}
        if rows:
            entry.put(rows[0], states[rows[0][4]])
        for checkpoint_id, write in writes:
            entry.write(checkpoint_id, True, [write], states[write[2]])
        low, high = sorted((loaded.version, thread.version))
        if high > low:  # the index and the thread at one version: fold what lies between
            records = self.store.read_session(sid, from_version=low + 1, to_version=high)
            loaded.fold(records)
            self._fold(sid, thread, records)
        entry = loaded.known(namespace)  # (a delete folded in made it anew)
        if entry is not None:
            thread.namespaces[namespace] = entry
        return entry

    def live_messages(self, sid: str, head: int) -> dict[str, str]:
        """The session's live LangGraph messages at version ``head``."""
        known = self._messages.setdefault(sid, ThreadMessages(live=None))
        if known.live is not None and head != known.version:
            if head < known.version:
                known.live = None
                known.changes += 1
            else:
                known.fold(self.store.read_session(sid, from_version=known.version + 1, to_version=head))
        if known.live is None:  # first use, or after a rewind: turnlog's live set says which
            records = self.store.read_session(sid, to_version=head)
            marks = live_marks(self.store, sid, records)
            fresh = ThreadMessages()
            fresh.fold(r for r, live in zip(records, marks, strict=True) if live)
            known.live, known.version = fresh.live, head
        return cast(dict[str, str], known.live)

    def _remember_mapped(self, sid: str, known: ThreadMessages, mapped: tuple[Any, ...]) -> None:
        """The messages list whose ids the thread's live messages now are (just appended)."""
        self._mapped[sid] = (known.changes, mapped)
        self._mapped.move_to_end(sid)
        while len(self._mapped) > _MAPPED:  # it holds the messages: the least recent threads go
            self._mapped.popitem(last=False)

    def _mapped_of(self, sid: str) -> tuple[Any, ...] | None:
        """That list, if nothing changed the live messages since (another writer, a rewind)."""
        known, found = self._messages.get(sid), self._mapped.get(sid)
        if known is None or found is None or found[0] != known.changes:
            return None
        return found[1]

    def note_read(self, sid: str, messages: builtins.list[Any]) -> None:
        """A root checkpoint's messages as read back: the same messages (by id, in order) as the
        list noted, they stand for it, so the next write, which starts with these objects, looks at
        its new messages only."""
        found = self._mapped.get(sid)
        if found is None or self._mapped_of(sid) is None or len(found[1]) != len(messages):
            return
        if _mapped_ids(found[1]) == _mapped_ids(messages):
            self._mapped[sid] = (found[0], tuple(messages))

    # --- writing ---------------------------------------------------------------------------------

    def write(self, item: QueuedWrite) -> None:
        """Append one ``put`` or ``put_writes`` (with whatever else of its thread waits)."""
        self.queue.run(item, self._flush)

    def _flush(self, sid: str, batch: builtins.list[QueuedWrite]) -> None:
        """Append a thread's waiting writes, as many in one append as can go together, marking
        each stored or giving it its error."""
        while batch:
            thread = self.thread(sid, fresh=False)
            count = 1
            try:
                head, events, count, mapped = self._events(sid, thread, batch)
                checked = any(w.messages is not None for w in batch[:count])
                records = self.append(sid, head, events, check=checked)
                known = self._messages.get(sid)
                if mapped is not None and known is not None and known.version == records[-1].version:
                    self._remember_mapped(sid, known, mapped)
            except VersionConflictError:
                self.thread(sid, fresh=True)  # another writer appended: look again
                continue
            except Exception as exc:
                if count > 1 and isinstance(exc, InvalidEventError):
                    for write in batch[:count]:  # nothing was stored: each alone says whose it is
                        self._flush(sid, [write])
                else:
                    for write in batch[:count]:
                        write.error = exc
                batch = batch[count:]
                continue
            at = {r.event.event_id: r.version for r in records}
            for write in batch[:count]:
                write.version = at.get(write.state.event_id)
                write.stored = True
            batch = batch[count:]

    def _events(
        self, sid: str, thread: ThreadCheckpoints, batch: builtins.list[QueuedWrite]
    ) -> tuple[int, builtins.list[Event], int, tuple[Any, ...] | None]:
        """The head to append at, the events of the first writes of ``batch`` that go in one append,
        how many writes that is, and the messages list the thread's live messages are then (if
        known): each write's message events (the root namespace's messages the thread's live ones
        are not yet, and a ``message_removed`` for those gone) before its state event. A time
        travel goes first in an append of its own, after its ``session_rewound``."""
        head, events = thread.version, builtins.list[Event]()
        live: ThreadMessages | None = None
        mapped: tuple[Any, ...] | None = None
        travels = any(w.parent for w in batch if w.messages is not None)
        root = self.latest(sid, thread, "") if travels else None
        latest = root.row[2] if root is not None and root.row is not None else None
        for count, write in enumerate(batch):
            try:
                if write.messages is not None:
                    if write.parent is not None and (root is None or latest not in (None, write.parent)):
                        if count:
                            return head, events, count, mapped
                        self._travel(sid, thread, write.parent)
                        head = thread.version
                    if live is None:
                        live = ThreadMessages(version=head, live=dict(self.live_messages(sid, head)))
                        mapped = self._mapped_of(sid)  # (live_messages brought it to head)
                    added = _message_changes(cast(dict[str, str], live.live), write.messages, mapped)
                    for event in added:
                        live.apply(event)
                    events += added
                    mapped = tuple(write.messages)
            except Exception:
                if count:
                    return head, events, count, mapped  # its error is its own, in an append of its own
                raise
            events.append(write.state)
            state = write.state
            if state.namespace == "" and state.media_type.startswith(CHECKPOINT_MEDIA):
                latest = state.key if latest is None else max(latest, state.key)
        return head, events, len(batch), mapped

    def _travel(self, sid: str, thread: ThreadCheckpoints, parent: str) -> None:
        """Resuming from ``parent``, not the latest root checkpoint: a ``session_rewound`` back to
        the state the session had when that checkpoint was stored (if the index knows both)."""
        latest, at = self.query(
            lambda conn: (
                find_checkpoints(conn, session_id=sid, namespace="", limit=1),
                find_checkpoints(conn, session_id=sid, namespace="", checkpoint_id=parent),
            )
        )
        if latest and at and latest[0][2] != parent:
            rewind = SessionRewound(
                to_version=at[0][4],
                reason="time_travel",
                source=FRAMEWORK,
                note=f"resumed from checkpoint {parent}",
            )
            self.append(sid, thread.version, [rewind])


def advance_in_batches(store: Store) -> None:
    """Like ``turnlog.open_store``'s hook, but the materialized projections are advanced only by an
    append with messages (an append of state events alone, most of a graph's steps, leaves them to
    a later one), and only once the log has gone ``_BACKLOG`` events past them: each catch-up is a
    transaction of its own, and one folds a backlog as cheaply per event as a catch-up per turn
    would. On a server it runs in a thread of its own (its tens of round trips wait for the server,
    and the graph's next step, which waits for this ``put`` to return, need not wait for derived
    rows); an SQLite file's catch-up is quick and runs in the append's thread. Readers catch up
    what is left before they read (the saver's own reads need only its memory or the LangGraph
    index); the log itself is durable at every append. The projections' tables are made here, when
    the saver opens the store, not in the turn whose append first catches them up."""
    materializer(store).prepare()
    with store.reading() as conn:
        remote = dialect_of(conn).remote
    ref = weakref.ref(store)  # the hook lives on the store: no cycle keeping it alive
    applied = 0  # the last position a catch-up of this hook was started for
    running = threading.Lock()  # one catch-up at a time

    def catch_up(records: Sequence[RecordedEvent]) -> None:
        try:
            kept = ref()
            if kept is not None:
                with contextlib.suppress(StoreError):  # derived state only: readers catch up
                    materializer(kept).catch_up(appended=records)
        finally:
            running.release()

    def advance(records: Sequence[RecordedEvent]) -> None:
        nonlocal applied
        if (
            ref() is not None
            and records
            and records[-1].position - applied >= _BACKLOG
            and any(r.type != "state_recorded" for r in records)
            and running.acquire(blocking=False)
        ):
            applied = records[-1].position
            if not remote:
                catch_up(records)
                return
            threading.Thread(
                target=catch_up, args=(records,), name="turnlog-saver-catch-up", daemon=True
            ).start()

    store.on_append(advance)


def state_of(record: RecordedEvent) -> StateRecorded:
    """The record's state event (the index points only at state events)."""
    event = record.event
    if not isinstance(event, StateRecorded):
        raise InvalidEventError(f"version {record.version} of {record.session_id!r} is not a state event")
    return event


def _message_changes(
    live: dict[str, str], messages: builtins.list[Any], mapped: tuple[Any, ...] | None = None
) -> builtins.list[Event]:
    """The events that make ``live`` (LangGraph message id -> event id) the channel's messages: a
    ``message_removed`` for those gone, then each new message (and its usage). ``mapped``: a list
    whose messages' ids are ``live``'s; when ``messages`` starts with the very same objects (as
    LangGraph's ``add_messages`` keeps them), none is gone and only the rest is looked at."""
    prefix = (
        mapped is not None
        and len(mapped) <= len(messages)
        and all(map(operator.is_, mapped, messages))  # (in C: the list is long)
    )
    if prefix:
        messages = messages[len(mapped or ()) :]
    current = [m for m in messages if isinstance(m, BaseMessage) and isinstance(m.id, str) and m.id]
    ids = {m.id for m in current}
    gone = [] if prefix else [event_id for message_id, event_id in live.items() if message_id not in ids]

    events: builtins.list[Event] = [
        MessageRemoved(
            target_event_ids=tuple(gone[i : i + _MAX_TARGETS]), reason="RemoveMessage", source=FRAMEWORK
        )
        for i in range(0, len(gone), _MAX_TARGETS)
    ]
    added: set[str] = set()
    for message in current:
        if message.id in live or message.id in added:
            continue
        added.add(cast(str, message.id))
        events.append(_message_event(message))
        events.extend(_usage(message))
    return events


def _mapped_ids(items: Sequence[Any]) -> builtins.list[str | None]:
    """The ids by which the mapping knows a channel's items (None: an item it does not map)."""
    if all(map(isinstance, items, itertools.repeat(BaseMessage))):  # (in C: the list is long)
        ids = builtins.list(map(_ID, items))
        if all(map(isinstance, ids, itertools.repeat(str))) and all(ids):
            return ids
    return [m.id if isinstance(m, BaseMessage) and isinstance(m.id, str) and m.id else None for m in items]


def _message_event(message: BaseMessage) -> Event:
    """LangChain's mapping of a message, its origin marked as LangGraph's."""
    try:
        event = _to_event(message)
    except InvalidEventError:
        # Content that is not JSON: still shown by its text; the origin keeps only its id.
        event = _to_event(message.model_copy(update={"additional_kwargs": {}, "response_metadata": {}}))
    item = event.origin.item if isinstance(event, MessageAppended | ToolReturned) and event.origin else None
    return event.model_copy(update={"origin": Origin(framework=FRAMEWORK, item=item)})
