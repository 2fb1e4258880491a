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

A task's writes for a checkpoint whose ``put`` was still being committed when they arrived (a step's
first task, run while its checkpoint commits) wait likewise, at most :data:`NEXT_LINGER` from that
commit, for the namespace's next ``put``, which LangGraph makes as soon as that one returns: else
they would take the lock first and the next checkpoint would wait for their commit (one more
commit, about 4 ms on a disk's flush, in series in every turn). A namespace whose writes found no
next ``put`` twice in a row (LangGraph waits for a delta channel's writes before it puts the next
checkpoint; a step that ends the run) stops waiting so, and tries again once 64 puts later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from turnlog.projections.langgraph_index import CHECKPOINT_MEDIA
from turnlog.store import StateRecorded

__all__ = ["LINGER", "NEXT_LINGER", "QueuedWrite", "WriteQueue"]

LINGER = 0.2
"""Seconds a task's writes wait at most (from their ``put_writes`` call) for the checkpoint they
belong to: that checkpoint waits for the previous one's commit, however slow the server. It costs
this much only when the checkpoint is never put (a caller that writes for one it then abandons)."""

NEXT_LINGER = 0.005
"""Seconds a task's writes for a checkpoint just committed wait at most (from that commit) for the
namespace's next ``put`` (LangGraph's next call, a thread wake-up away), to go in its append."""
_MISSES = 2  # next puts not come in a row after which a namespace's writes stop waiting for one
_RETRY = 64  # puts of such a namespace after which its writes try waiting once more

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
    next_put: bool = False
    """Patient, and (their namespace's next puts having come lately) they may wait, once their
    checkpoint is committed, for the next one's ``put``."""


Flush = Callable[[str, list[QueuedWrite]], None]


class WriteQueue:
    """The writes waiting for a saver's lock."""

    def __init__(
        self, lock: threading.RLock, linger: float = LINGER, next_linger: float = NEXT_LINGER
    ) -> None:
        self._lock = lock
        self._linger = linger
        self._next_linger = next_linger
        self._guard = threading.Condition(threading.Lock())
        self._waiting: list[QueuedWrite] = []
        self._latest: dict[tuple[str, str], str] = {}
        """The greatest checkpoint id handed to ``put`` so far, per (thread, namespace)."""
        self._putting: dict[str, int] = {}
        """Checkpoints queued or being appended, per thread."""
        self._committed: dict[str, float] = {}
        """When each thread's last checkpoint was committed (or refused), by ``time.monotonic``."""
        self._misses: dict[tuple[str, str], int] = {}
        """Per (thread, namespace): writes that waited for a next put in vain, in a row."""

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
                    self._misses.clear()
                    self._committed.clear()
                self._latest[key] = max(self._latest.get(key, ""), item.state.key)
                if self._misses.get(key, 0) >= _MISSES:  # not waiting: try again now and then
                    self._misses[key] += 1
                    if self._misses[key] >= _MISSES + _RETRY:
                        self._misses[key] = _MISSES - 1
                self._putting[item.sid] = self._putting.get(item.sid, 0) + 1
                self._guard.notify_all()
            else:
                # A caller that puts its checkpoints itself, one after the other, never waits.
                item.patient = item.sid in self._putting
                missed = self._misses.get((item.sid, item.state.namespace), 0)
                item.next_put = item.patient and missed < _MISSES
        deadline = time.monotonic() + self._linger
        while item.error is None and not item.stored:
            with self._lock:
                if item.stored or item.error is not None:
                    break
                with self._guard:
                    batch = [w for w in self._waiting if w.sid == item.sid]
                    if time.monotonic() < deadline and self._awaits_put(item.sid) is not None:
                        batch = [w for w in batch if _is_put(w)]
                    self._waiting = [w for w in self._waiting if not any(w is b for b in batch)]
                if batch:
                    self._flush(item.sid, batch, flush)
                    continue
            with self._guard:  # only writes, one of them awaiting a checkpoint: wait, unlocked
                while not (item.stored or item.error is not None):
                    until = self._awaits_put(item.sid)
                    now = time.monotonic()
                    if until is None or now >= deadline:
                        break
                    self._guard.wait(timeout=min(deadline, until) - now)
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
                    self._committed[sid] = time.monotonic()
                elif write.next_put:
                    parent = write.state.parent_key or ""
                    if not any(_is_put(w) and w.state.key == parent for w in batch):
                        key = (sid, write.state.namespace)
                        if any(_is_put(w) and w.state.key > parent for w in batch):
                            self._misses.pop(key, None)  # the next put came
                        else:
                            self._misses[key] = self._misses.get(key, 0) + 1
            self._guard.notify_all()  # their callers may be waiting unlocked

    def _awaits_put(self, sid: str) -> float | None:
        """Until when (``time.monotonic``; None: not) a waiting write of the thread awaits a put:
        a patient task's writes for a checkpoint newer than any put so far in its namespace (one
        LangGraph is about to put: until the caller's own deadline), or ``next_put`` writes for
        the latest one (while it commits, then :data:`NEXT_LINGER` past its commit). Called under
        the guard."""
        until: float | None = None
        for write in self._waiting:
            if write.sid == sid and write.patient:
                latest = self._latest.get((sid, write.state.namespace))
                if latest is None:
                    continue
                parent = write.state.parent_key or ""
                if parent > latest:
                    return float("inf")
                if write.next_put and parent == latest:
                    if any(_is_put(w) and w.sid == sid and w.state.key == parent for w in self._waiting):
                        continue  # its checkpoint's put is still queued: they go in its append
                    if sid in self._putting:
                        return float("inf")  # its checkpoint is still being committed
                    ends = self._committed.get(sid, 0.0) + self._next_linger
                    if ends > time.monotonic():
                        until = ends if until is None else max(until, ends)
        return until


def _is_put(write: QueuedWrite) -> bool:
    return write.state.media_type.startswith(CHECKPOINT_MEDIA)
