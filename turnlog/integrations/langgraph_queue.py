"""Group commit for the LangGraph saver: LangGraph hands a step's checkpoint and its tasks' writes to
the saver from several threads at once (its background executor), so while one append is being
committed others wait for the saver's lock. The first of a thread's waiting writers to get the lock
appends every write of that thread waiting by then, in the order they arrived, in one append; each
caller returns when its own write is committed (or raises its own error), as it would alone.

With durability ``async`` (LangGraph's default) a step's tasks run while its checkpoint waits for
the previous one to commit, so their writes reach the saver before the checkpoint they belong to.
A batch holding such a write waits a moment (:data:`LINGER`) for that checkpoint's ``put``, which
LangGraph has already queued, so both go in one append: one commit (one WAL flush) where there
would be two. Nothing is acknowledged before its commit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from turnlog.projections.langgraph_index import CHECKPOINT_MEDIA, WRITES_MEDIA
from turnlog.store import StateRecorded

__all__ = ["LINGER", "QueuedWrite", "WriteQueue"]

LINGER = 0.05
"""Seconds a batch waits at most for the checkpoint its writes belong to (the longest it costs is
when that checkpoint is never put: a caller that writes for a checkpoint it then abandons)."""

_REMEMBERED = 4096  # (thread, namespace) pairs whose latest put is remembered (all are forgotten past it)


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

    def __init__(self, lock: threading.RLock, linger: float = LINGER) -> None:
        self._lock = lock
        self._linger = linger
        self._guard = threading.Condition(threading.Lock())
        self._waiting: list[QueuedWrite] = []
        self._latest: dict[tuple[str, str], str] = {}
        """The greatest checkpoint id handed to ``put`` so far, per (thread, namespace)."""

    def run(self, item: QueuedWrite, flush: Flush) -> None:
        """Append ``item``, with whatever else of its thread waits, by ``flush`` (called under the
        saver's lock with the writes in arrival order; it marks each stored or gives it an error)."""
        with self._guard:
            self._waiting.append(item)
            if item.state.media_type.startswith(CHECKPOINT_MEDIA):
                key = (item.sid, item.state.namespace)
                if key not in self._latest and len(self._latest) >= _REMEMBERED:
                    self._latest.clear()
                self._latest[key] = max(self._latest.get(key, ""), item.state.key)
                self._guard.notify_all()
        with self._lock:
            if not item.stored and item.error is None:
                with self._guard:
                    self._guard.wait_for(lambda: not self._awaits_put(item.sid), timeout=self._linger)
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

    def _awaits_put(self, sid: str) -> bool:
        """Whether a waiting write of the thread belongs to a checkpoint newer than any put so far
        (in its namespace): one LangGraph is about to put. Called under the guard."""
        for write in self._waiting:
            if write.sid == sid and write.state.media_type == WRITES_MEDIA:
                latest = self._latest.get((sid, write.state.namespace))
                if latest is not None and (write.state.parent_key or "") > latest:
                    return True
        return False
