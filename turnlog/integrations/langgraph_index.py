"""The LangGraph saver's index of one thread: which checkpoints and pending writes a thread holds
and where in its turnlog session they are, and which LangGraph messages are live there.

It is a pure fold over the session's events in version order, kept in memory and advanced from the
log (``ThreadIndex.fold``), so it never disagrees with the log: the saver folds whatever another
writer appended before it reads. No table is added to the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from store import MessageAppended, MessageRemoved, RecordedEvent, SessionRewound, StateRecorded, ToolReturned

__all__ = [
    "CHECKPOINT_MEDIA",
    "FRAMEWORK",
    "WRITES_MEDIA",
    "CheckpointEntry",
    "ThreadIndex",
    "WriteEntry",
]

FRAMEWORK = "langgraph"
"""The ``framework`` of the state events and the ``origin.framework`` of the messages written."""

CHECKPOINT_MEDIA = "application/x-langgraph-checkpoint"
"""The media type (before its parameters) of a checkpoint's ``state_recorded``."""

WRITES_MEDIA = "application/x-langgraph-writes+json"
"""The media type of the ``state_recorded`` holding one ``put_writes`` call."""

# The channels whose writes replace earlier ones (SqliteSaver: INSERT OR REPLACE) and their fixed
# indexes; langgraph's WRITES_IDX_MAP, copied so this module imports no framework.
SPECIAL_CHANNELS = {"__error__": -1, "__scheduled__": -2, "__interrupt__": -3, "__resume__": -4}


@dataclass(frozen=True, slots=True)
class CheckpointEntry:
    """Where one checkpoint is stored."""

    version: int
    """The session version of its ``state_recorded``."""
    parent: str | None
    """The parent checkpoint id."""
    metadata: Mapping[str, Any]
    """Its LangGraph metadata (what ``list(filter=...)`` matches)."""


@dataclass(frozen=True, slots=True)
class WriteEntry:
    """Where one pending write is stored: item ``item`` of the writes event at ``version``."""

    version: int
    item: int
    task_id: str
    task_path: str
    idx: int


@dataclass(slots=True)
class ThreadIndex:
    """One thread's checkpoints, pending writes and live messages, as of session version ``version``."""

    version: int = 0
    """The last session version folded in."""
    checkpoints: dict[str, dict[str, CheckpointEntry]] = field(default_factory=dict)
    """Namespace -> checkpoint id -> entry (since the last delete)."""
    writes: dict[tuple[str, str], dict[tuple[str, int], WriteEntry]] = field(default_factory=dict)
    """(namespace, checkpoint id) -> (task id, idx) -> entry, as SqliteSaver's writes table keys them."""
    messages: dict[str, str] | None = field(default_factory=dict)
    """Live LangGraph message id -> the event id it was stored as (None: to be rebuilt after a rewind)."""
    latest: dict[str, str] = field(default_factory=dict)
    """Namespace -> its greatest checkpoint id (SqliteSaver's "latest": ORDER BY checkpoint_id DESC)."""

    def latest_id(self, namespace: str) -> str | None:
        """The checkpoint id ``get_tuple`` returns for a namespace when none is given."""
        return self.latest.get(namespace)

    def fold(self, records: Iterable[RecordedEvent]) -> None:
        """Advance over the session's next records (in version order)."""
        for record in records:
            if record.version <= self.version:
                continue
            self.version = record.version
            event = record.event
            if isinstance(event, StateRecorded):
                if event.framework == FRAMEWORK:
                    self._fold_state(event, record.version)
            elif isinstance(event, SessionRewound):
                if event.to_version == 0:  # a delete (or any rewind to the empty session)
                    self.checkpoints.clear()
                    self.writes.clear()
                    self.latest.clear()
                    self.messages = {}
                else:  # the live messages are those of an earlier version: rebuilt when needed
                    self.messages = None
            elif isinstance(event, MessageRemoved):
                if self.messages is not None:
                    gone = set(event.target_event_ids)
                    self.messages = {m: e for m, e in self.messages.items() if e not in gone}
            elif isinstance(event, MessageAppended | ToolReturned):
                message_id = _message_id(event)
                if message_id is not None and self.messages is not None:
                    self.messages[message_id] = event.event_id

    def _fold_state(self, event: StateRecorded, version: int) -> None:
        meta = event.metadata or {}
        if event.media_type.startswith(CHECKPOINT_MEDIA):
            entry = CheckpointEntry(version=version, parent=event.parent_key, metadata=meta)
            self.checkpoints.setdefault(event.namespace, {})[event.key] = entry
            current = self.latest.get(event.namespace)
            if current is None or event.key > current:
                self.latest[event.namespace] = event.key
        elif event.media_type == WRITES_MEDIA and event.parent_key is not None:
            task_id, task_path = str(meta.get("task_id", "")), str(meta.get("task_path", ""))
            channels = [str(c) for c in meta.get("channels", []) or []]  # type: ignore[union-attr]
            table = self.writes.setdefault((event.namespace, event.parent_key), {})
            # SqliteSaver: INSERT OR REPLACE when every write is to a special channel, else OR IGNORE.
            replace = all(c in SPECIAL_CHANNELS for c in channels)
            for item, channel in enumerate(channels):
                idx = SPECIAL_CHANNELS.get(channel, item)
                key = (task_id, idx)
                if replace or key not in table:
                    table[key] = WriteEntry(version, item, task_id, task_path, idx)


def _message_id(event: MessageAppended | ToolReturned) -> str | None:
    origin = event.origin
    if origin is None or origin.framework != FRAMEWORK or not isinstance(origin.item, dict):
        return None
    data = origin.item.get("data")
    found = data.get("id") if isinstance(data, dict) else None
    return found if isinstance(found, str) else None
