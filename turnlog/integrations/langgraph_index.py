"""The LangGraph saver's in-memory view of its threads, pure folds over a session's events in
version order, kept in memory and advanced from the log (or from the saver's own appends):

- :class:`ThreadMessages`: which LangGraph message ids are live in the session and which event each
  was stored as, so a checkpoint's ``messages`` channel is written once per message and a message
  gone from it becomes a ``message_removed``; after a rewind (time travel) it is rebuilt from
  turnlog's own live set.
- :class:`ThreadCheckpoints`: each namespace's latest checkpoint and its pending writes, with their
  events, by the rules of ``projections.langgraph_index`` (whose row functions it uses), so the
  saver answers "the latest checkpoint" and "is this a time travel" from what it wrote, without a
  query of the index.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from turnlog.integrations.langgraph_blobs import references
from turnlog.projections.langgraph_index import (
    FRAMEWORK,
    CheckpointRow,
    WriteRow,
    checkpoint_row,
    write_rows,
)
from turnlog.store import (
    Event,
    MessageAppended,
    MessageRemoved,
    RecordedEvent,
    SessionRewound,
    StateRecorded,
    ToolReturned,
)

__all__ = ["LatestCheckpoint", "ThreadCheckpoints", "ThreadMessages"]


@dataclass(slots=True)
class ThreadMessages:
    """A thread's live LangGraph messages, as of session version ``version``."""

    version: int = 0
    """The last session version folded in."""
    live: dict[str, str] | None = field(default_factory=dict)
    """Live LangGraph message id -> its event id (None: to be rebuilt from the live set)."""
    changes: int = 0
    """How many events changed ``live`` (the saver's note of the list it holds stays valid while
    this does not move: langgraph_log)."""

    def fold(self, records: Iterable[RecordedEvent]) -> None:
        """Advance over the session's next records (in version order)."""
        for record in records:
            if record.version <= self.version:
                continue
            self.version = record.version
            self.apply(record.event)

    def apply(self, event: Event) -> None:
        """Apply one event (the next of the session's, or one about to be appended)."""
        if isinstance(event, SessionRewound | MessageRemoved | MessageAppended | ToolReturned):
            self.changes += 1
        if isinstance(event, SessionRewound):
            self.live = {} if event.to_version == 0 else None
        elif self.live is None:
            return
        elif isinstance(event, MessageRemoved):
            gone = set(event.target_event_ids)
            self.live = {m: e for m, e in self.live.items() if e not in gone}
        elif isinstance(event, MessageAppended | ToolReturned):
            message_id = _message_id(event)
            if message_id is not None:
                self.live[message_id] = event.event_id


@dataclass(slots=True)
class LatestCheckpoint:
    """One namespace's latest checkpoint (greatest id) and the pending writes that may belong to it."""

    row: CheckpointRow | None = None
    """The latest checkpoint's index row; None while the namespace has no checkpoint."""
    writes: dict[str, dict[tuple[str, int], WriteRow]] = field(default_factory=dict)
    """Pending writes of that checkpoint and of any greater id (a checkpoint's writes may be put
    before it), by checkpoint id, then by (task id, idx) as the index keys them."""
    states: dict[int, StateRecorded] = field(default_factory=dict)
    """The state events of the row, of the earlier checkpoints whose blobs it refers to
    (integrations.langgraph_blobs), and of those writes, by session version."""
    refs: set[int] = field(default_factory=set)
    """The session versions the row's checkpoint is read from."""

    def put(self, row: CheckpointRow, state: StateRecorded) -> None:
        """A checkpoint stored (again, if its id is known: it replaces the first)."""
        if self.row is not None and row[2] < self.row[2]:
            return  # an older checkpoint stored again: the latest is still the latest
        if self.row is None or row[2] > self.row[2]:
            self.writes = {cid: rows for cid, rows in self.writes.items() if cid >= row[2]}
        self.row = row
        self.states[row[4]] = state
        self.refs = references(row[4], state)
        self._forget_unused()

    def write(self, checkpoint_id: str, replace: bool, rows: list[WriteRow], state: StateRecorded) -> None:
        """A task's writes for ``checkpoint_id``, kept or replacing as the index does."""
        if not rows or (self.row is not None and checkpoint_id < self.row[2]):
            return  # nothing, or writes of an older checkpoint: never read from here
        mine = self.writes.setdefault(checkpoint_id, {})
        for row in rows:
            key = (row[0], row[5])
            if replace or key not in mine:
                mine[key] = row
        self.states[rows[0][2]] = state
        self._forget_unused()

    def writes_of_latest(self) -> list[WriteRow]:
        """The latest checkpoint's pending writes, unordered."""
        return [] if self.row is None else list(self.writes.get(self.row[2], {}).values())

    def _forget_unused(self) -> None:
        used = {w[2] for rows in self.writes.values() for w in rows.values()}
        used |= self.refs
        self.states = {v: s for v, s in self.states.items() if v in used}


@dataclass(slots=True)
class ThreadCheckpoints:
    """What a thread's session holds of LangGraph checkpoints, as of session version ``version``:
    the latest checkpoint of each namespace in ``namespaces`` (the others are not known here)."""

    version: int
    """The last session version folded in."""
    complete: bool
    """Every namespace with a checkpoint or a write is in ``namespaces`` (a new or deleted thread)."""
    namespaces: dict[str, LatestCheckpoint] = field(default_factory=dict)
    """By namespace."""

    def known(self, namespace: str) -> LatestCheckpoint | None:
        """The namespace's latest checkpoint, if known here (None: ask the index)."""
        found = self.namespaces.get(namespace)
        if found is None and self.complete:
            found = self.namespaces[namespace] = LatestCheckpoint()
        return found

    def fold(self, records: Iterable[RecordedEvent]) -> None:
        """Advance over the session's next records (in version order)."""
        for record in records:
            if record.version <= self.version:
                continue
            self.version = record.version
            event = record.event
            if isinstance(event, SessionRewound) and event.to_version == 0:
                self.namespaces, self.complete = {}, True  # delete_thread: the index forgets all
                continue
            if not isinstance(event, StateRecorded):
                continue
            row = checkpoint_row(record)
            if row is not None:
                if (entry := self.known(row[1])) is not None:
                    entry.put(row, event)
            elif (found := write_rows(record)) is not None and (entry := self.known(found[0])) is not None:
                entry.write(found[1], found[2], found[3], event)


def _message_id(event: MessageAppended | ToolReturned) -> str | None:
    origin = event.origin
    if origin is None or origin.framework != FRAMEWORK or not isinstance(origin.item, dict):
        return None
    data = origin.item.get("data")
    found = data.get("id") if isinstance(data, dict) else None
    return found if isinstance(found, str) else None
