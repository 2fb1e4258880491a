"""Group commit for the LangGraph saver: LangGraph hands a step's checkpoint and its tasks' writes to
the saver from several threads at once (its background executor), so while one append is being
committed others wait for the saver's lock. The first of a thread's waiting writers to get the lock
appends every write of that thread waiting by then, in the order they arrived, in one append; each
caller returns when its own write is committed (or raises its own error), as it would alone.

With durability ``async`` (LangGraph's default) a step's tasks run while its checkpoint waits for
the previous one to commit, so their writes reach the saver before the checkpoint they belong to.
Such writes wait (at most :data:`LINGER`) for that checkpoint's ``put``, which LangGraph has already
queued, so both go in one append: one commit (one WAL flush) where there would be two. They wait
without the saver's lock, while the thread's other writes go. Nothing is acknowledged before its
commit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from turnlog.projections.langgraph_index import CHECKPOINT_MEDIA
from turnlog.store import StateRecorded

__all__ = ["LINGER", "QueuedWrite", "WriteQueue"]

LINGER = 0.2
"""Seconds a task's writes wait at most (from their ``put_writes`` call) for the checkpoint they
belong to: that checkpoint waits for the previous one's commit, however slow the server. It costs
this much only when the checkpoint is never put (a caller that writes for one it then abandons)."""

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
    version: int | None = None
    """The session version its state event was stored at (once stored)."""
    error: BaseException | None = None
    """Why it was not (raised to its caller)."""
    patient: bool = False
    """A task's writes that arrived while a checkpoint of their thread was being put: LangGraph is
    running ahead of its checkpoints, so they may wait for theirs."""


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
        self._putting: dict[str, int] = {}
        """Checkpoints queued or being appended, per thread."""

    def run(self, item: QueuedWrite, flush: Flush) -> None:
        """Append ``item``, with whatever else of its thread waits, by ``flush`` (called under the
        saver's lock with the writes in arrival order; it marks each stored or gives it an error).
        While a task's writes await their checkpoint's ``put`` (for at most :data:`LINGER`), the
        thread's writes stay queued and only its checkpoints go; the writes' callers wait without
        the saver's lock, so the ``put`` they wait for (and every other thread's writes) can go."""
        with self._guard:
            self._waiting.append(item)
            if _is_put(item):
                key = (item.sid, item.state.namespace)
                if key not in self._latest and len(self._latest) >= _REMEMBERED:
                    self._latest.clear()
                self._latest[key] = max(self._latest.get(key, ""), item.state.key)
                self._putting[item.sid] = self._putting.get(item.sid, 0) + 1
                self._guard.notify_all()
            else:
                # A caller that puts its checkpoints itself, one after the other, never waits.
                item.patient = item.sid in self._putting
        deadline = time.monotonic() + self._linger
        while item.error is None and not item.stored:
            with self._lock:
                if item.stored or item.error is not None:
                    break
                with self._guard:
                    batch = [w for w in self._waiting if w.sid == item.sid]
                    if time.monotonic() < deadline and self._awaits_put(item.sid):
                        batch = [w for w in batch if _is_put(w)]
                    self._waiting = [w for w in self._waiting if not any(w is b for b in batch)]
                if batch:
                    self._flush(item.sid, batch, flush)
                    continue
            with self._guard:  # only writes, one of them awaiting its checkpoint: wait, unlocked
                self._guard.wait_for(
                    lambda: item.stored or item.error is not None or not self._awaits_put(item.sid),
                    timeout=max(0.0, deadline - time.monotonic()),
                )
        if item.error is not None:
            raise item.error

    def _flush(self, sid: str, batch: list[QueuedWrite], flush: Flush) -> None:
        """Flush ``batch`` (under the saver's lock); every write of it ends stored or refused."""
        try:
            flush(sid, batch)
        except BaseException as exc:
            for write in batch:
                if not write.stored and write.error is None:
                    write.error = exc
        for write in batch:
            if not write.stored and write.error is None:  # a flush that forgot one
                write.error = RuntimeError("the write was neither stored nor refused")
        with self._guard:
            for write in batch:
                if _is_put(write):
                    self._putting[sid] -= 1
                    if not self._putting[sid]:
                        del self._putting[sid]
            self._guard.notify_all()  # their callers may be waiting unlocked

    def _awaits_put(self, sid: str) -> bool:
        """Whether a waiting write of the thread is a patient task's writes for a checkpoint newer
        than any put so far in its namespace: one LangGraph is about to put. Called under the guard."""
        for write in self._waiting:
            if write.sid == sid and write.patient:
                latest = self._latest.get((sid, write.state.namespace))
                if latest is not None and (write.state.parent_key or "") > latest:
                    return True
        return False


def _is_put(write: QueuedWrite) -> bool:
    return write.state.media_type.startswith(CHECKPOINT_MEDIA)
