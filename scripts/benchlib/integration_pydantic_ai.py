"""TurnlogConversationStore against pydantic-ai's documented way to keep a history in a file
(``ModelMessagesTypeAdapter`` JSON of all messages, rewritten after each run), in the same run:
one save per turn (a request and its response, written interleaved), a full load, and the bounded
read: ``load(limit=50)`` against the file's full load plus its own trimming (the last 50 messages).

Durability: at ``FULL`` the file is fsynced after each write (turnlog: WAL, synchronous=FULL); at
``NORMAL`` it is not (turnlog: synchronous=NORMAL). The file is rewritten whole on each save, so at
more than 4,000 messages both sides are filled to all but the last 2,000 first (untimed), and the
writes figure is the per-turn saves of the last 2,000. Run from the repository root:
``PYTHONPATH=.:scripts .venv/bin/python -m benchlib.integration_pydantic_ai [N] [FULL|NORMAL]``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)

from benchlib.integration_common import best_of, interleaved_writes, row

LIMIT = 50
TIMED = 2000
"""At most this many messages are written timed (see the module's docstring)."""


def _messages(n: int) -> list[ModelMessage]:
    out: list[ModelMessage] = []
    for i in range(0, n, 2):
        out.append(ModelRequest(parts=[UserPromptPart(f"question {i} " + "word " * 20)]))
        out.append(ModelResponse(parts=[TextPart(f"answer {i} " + "word " * 40)], model_name="bench"))
    return out[:n]


class FileHistory:
    """pydantic-ai's documented pattern: all messages as ModelMessagesTypeAdapter JSON in one file."""

    def __init__(self, path: Path, fsync: bool) -> None:
        self.path = path
        self.fsync = fsync
        self.messages: list[ModelMessage] = []

    def save(self, new: list[ModelMessage]) -> None:
        self.messages.extend(new)
        with open(self.path, "wb") as f:
            f.write(ModelMessagesTypeAdapter.dump_json(self.messages))
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())

    def load(self) -> list[ModelMessage]:
        return ModelMessagesTypeAdapter.validate_json(self.path.read_bytes())


def bench_pydantic_ai(
    n: int = 2000, workdir: Path | None = None, synchronous: str = "FULL"
) -> list[dict[str, Any]]:
    """Measure both sides on ``n`` messages (``n`` even), each in a fresh file under ``workdir``."""
    import turnlog
    from turnlog.integrations.pydantic_ai import TurnlogConversationStore

    root = workdir or Path(tempfile.mkdtemp(prefix="bench-pai-"))
    root.mkdir(parents=True, exist_ok=True)
    n -= n % 2
    messages = _messages(n)
    peer = FileHistory(root / f"history-{n}-{synchronous}.json", fsync=synchronous != "NORMAL")
    store = turnlog.open_store(root / f"turnlog-pai-{n}-{synchronous}.db", synchronous=synchronous)  # type: ignore[arg-type]
    ours = TurnlogConversationStore(db=store)
    conversation = Conversation(conversation_id="bench")
    loop = asyncio.new_event_loop()
    start = 0 if n <= 2 * TIMED else n - TIMED
    try:
        for lo in range(0, start, 100):  # the untimed fill of a large history
            conversation.messages.extend(messages[lo : lo + 100])
            loop.run_until_complete(ours.save(conversation))
        peer.save(messages[:start])

        def peer_write(lo: int, hi: int) -> None:
            for i in range(lo, hi, 2):
                peer.save(messages[i : i + 2])

        def ours_write(lo: int, hi: int) -> None:
            for i in range(lo, hi, 2):
                conversation.messages.extend(messages[i : i + 2])
                loop.run_until_complete(ours.save(conversation))

        peer_w, ours_w = interleaved_writes([peer_write, ours_write], n, start)
        loaded = loop.run_until_complete(ours.load("bench"))
        tail = loop.run_until_complete(ours.load("bench", limit=LIMIT))
        assert loaded is not None and tail is not None
        assert peer.load() == loaded.messages == messages and tail.messages == messages[-LIMIT:]
        peer_full, ours_full, peer_trim, ours_bounded = best_of(
            [
                peer.load,
                lambda: loop.run_until_complete(ours.load("bench")),
                lambda: peer.load()[-LIMIT:],
                lambda: loop.run_until_complete(ours.load("bench", limit=LIMIT)),
            ]
        )
    finally:
        ours.close()
        store.close()
        loop.close()
    durability = "file, fsync after each save" if peer.fsync else "file, no fsync"
    timed = "" if start == 0 else f" (last {n - start:,} timed)"
    return [
        row(
            "ModelMessagesTypeAdapter file",
            "peer",
            n,
            durability + timed,
            writes_per_s=peer_w,
            full_read_ms=peer_full,
            bounded_read_ms=None,
            bounded=f"full load + last {LIMIT}",
            trimmed_read_ms=peer_trim,
        ),
        row(
            "TurnlogConversationStore",
            "turnlog",
            n,
            f"WAL, synchronous={synchronous}{timed}",
            writes_per_s=ours_w,
            full_read_ms=ours_full,
            bounded_read_ms=ours_bounded,
            bounded=f"load(limit={LIMIT})",
        ),
    ]


if __name__ == "__main__":
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for line in bench_pydantic_ai(size, synchronous=sys.argv[2] if len(sys.argv) > 2 else "FULL"):
        print(line)
