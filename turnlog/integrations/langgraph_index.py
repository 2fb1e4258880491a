"""The LangGraph saver's view of a thread's messages: which LangGraph message ids are live in the
session and which event each was stored as, so a checkpoint's ``messages`` channel is written once
per message and a message gone from it becomes a ``message_removed``.

A pure fold over the session's events in version order, kept in memory and advanced from the log
before each use; after a rewind (time travel) it is rebuilt from turnlog's own live set.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from turnlog.projections.langgraph_index import FRAMEWORK
from turnlog.store import MessageAppended, MessageRemoved, RecordedEvent, SessionRewound, ToolReturned

__all__ = ["ThreadMessages"]


@dataclass(slots=True)
class ThreadMessages:
    """A thread's live LangGraph messages, as of session version ``version``."""

    version: int = 0
    """The last session version folded in."""
    live: dict[str, str] | None = field(default_factory=dict)
    """Live LangGraph message id -> its event id (None: to be rebuilt from the live set)."""

    def fold(self, records: Iterable[RecordedEvent]) -> None:
        """Advance over the session's next records (in version order)."""
        for record in records:
            if record.version <= self.version:
                continue
            self.version = record.version
            event = record.event
            if isinstance(event, SessionRewound):
                self.live = {} if event.to_version == 0 else None
            elif self.live is None:
                continue
            elif isinstance(event, MessageRemoved):
                gone = set(event.target_event_ids)
                self.live = {m: e for m, e in self.live.items() if e not in gone}
            elif isinstance(event, MessageAppended | ToolReturned):
                message_id = _message_id(event)
                if message_id is not None:
                    self.live[message_id] = event.event_id


def _message_id(event: MessageAppended | ToolReturned) -> str | None:
    origin = event.origin
    if origin is None or origin.framework != FRAMEWORK or not isinstance(origin.item, dict):
        return None
    data = origin.item.get("data")
    found = data.get("id") if isinstance(data, dict) else None
    return found if isinstance(found, str) else None
