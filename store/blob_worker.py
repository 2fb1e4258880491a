"""A large content's blob made on a worker thread: its sha256 (the blob id) and its zstd frame.

hashlib and zstandard release the GIL on large inputs, so while one thread hashes and compresses
a batch's tool outputs the appending thread goes on preparing and linking the rest of the batch
(on a batch of real-shaped tool outputs these were about a sixth of an append's work). The result
is the same bytes as made in line: the same hash, and the same compressor at the same level
(store.append_rules._encode_blob, one zstd context per thread)."""

from __future__ import annotations

import _thread
import hashlib
import os
import threading
from collections.abc import Callable
from queue import SimpleQueue


class BlobJob:
    """One content's hash and encoded form, made on the worker; :meth:`result` waits for them."""

    __slots__ = ("codec", "data", "digest", "done", "encode", "error", "packed")

    def __init__(self, data: bytes, encode: Callable[[bytes], tuple[str, bytes]]) -> None:
        self.data = data
        self.encode = encode
        self.digest = ""
        self.codec = ""
        self.packed = b""
        self.error: BaseException | None = None
        # A bare lock held until the job is done: the cheapest thing to wait on (an Event costs a
        # Condition and a lock per job).
        self.done = _thread.allocate_lock()
        self.done.acquire()

    def run(self) -> None:
        try:
            self.digest = hashlib.sha256(self.data).hexdigest()
            self.codec, self.packed = self.encode(self.data)
        except BaseException as exc:  # MemoryError: raised where the append waits for the result
            self.error = exc
        finally:
            self.data = b""
            self.done.release()

    def result(self) -> tuple[str, str, bytes]:
        """(the content's sha256 as hex, its codec, its stored bytes), once the worker made them."""
        with self.done:
            pass
        if self.error is not None:
            raise self.error
        return self.digest, self.codec, self.packed


class BlobWorker:
    """One daemon thread running jobs in the order they were given, started on first use (and again
    in a forked child, which has no threads but the one that forked)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: SimpleQueue[BlobJob] = SimpleQueue()
        self._pid = 0

    def submit(self, data: bytes, encode: Callable[[bytes], tuple[str, bytes]]) -> BlobJob | None:
        """A job for ``data`` queued to the worker; None when no thread can be started (the
        interpreter is shutting down), and the caller makes the blob itself."""
        if self._pid != os.getpid() and not self._start():
            return None
        job = BlobJob(data, encode)
        self._queue.put(job)
        return job

    def _start(self) -> bool:
        with self._lock:
            if self._pid == os.getpid():
                return True
            queue: SimpleQueue[BlobJob] = SimpleQueue()
            try:
                threading.Thread(target=_serve, args=(queue,), name="turnlog-blobs", daemon=True).start()
            except RuntimeError:
                return False
            self._queue, self._pid = queue, os.getpid()
            return True


def _serve(queue: SimpleQueue[BlobJob]) -> None:
    while True:
        queue.get().run()


WORKER = BlobWorker()
"""The process's one blob worker."""
