"""Group commit for the LangGraph saver: LangGraph hands a step's checkpoint and its tasks' writes to
the saver from several threads at once (its background executor), so while one append is being
committed others wait for the saver's lock. The first of a thread's waiting writers to get the lock
appends every write of that thread waiting by then, in the order they arrived, in one append; each
caller returns when its own write is committed (or raises its own error), as it would alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from turnlog.store import StateRecorded

__all__ = ["QueuedWrite", "WriteQueue"]


@dataclass(eq=False, slots=True)
class QueuedWrite:
    """One ``put`` or ``put_writes`` waiting to be appended."""

    sid: str
    """The thread's session."""
    state: StateRecorded
    """Its state event (a checkpoint, or a task's writes)."""
    messages: list[Any] | None = None
    """A root checkpoint's ``messages`` channel, to be written as message events (None: none)."""
    parent: str | None = None
    """A checkpoint's parent id (a root checkpoint whose parent is not the latest is a time travel)."""
    stored: bool = False
    """Committed to the log."""
    error: BaseException | None = None
    """Why it was not (raised to its caller)."""


Flush = Callable[[str, list[QueuedWrite]], None]


class WriteQueue:
    """The writes waiting for a saver's lock."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._guard = threading.Lock()
        self._waiting: list[QueuedWrite] = []

    def run(self, item: QueuedWrite, flush: Flush) -> None:
        """Append ``item``, with whatever else of its thread waits, by ``flush`` (called under the
        saver's lock with the writes in arrival order; it marks each stored or gives it an error)."""
        with self._guard:
            self._waiting.append(item)
        with self._lock:
            if not item.stored and item.error is None:
                with self._guard:
                    batch = [w for w in self._waiting if w.sid == item.sid]
                    self._waiting = [w for w in self._waiting if w.sid != item.sid]
                try:
                    flush(item.sid, batch)
                except BaseException as exc:
                    for write in batch:
                        if not write.stored and write.error is None:
                            write.error = exc
                for write in batch:
                    if not write.stored and write.error is None:  # a flush that forgot one
                        write.error = RuntimeError("the write was neither stored nor refused")
        if item.error is not None:
            raise item.error
