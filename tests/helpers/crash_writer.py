"""Processes for tests/test_crash.py, killed with SIGKILL at a random moment.

Run as a script (``python tests/helpers/crash_writer.py MODE --db PATH --side PATH``) with the
repository root on PYTHONPATH.

``writer``  appends batches in a loop (as fast as it can, or with a random ``--pause`` between
            batches) to a few sessions. Batch ``i`` of ``n``
            events has the ids ``b{i:05d}-{j}of{n}`` (the batch marker). Large tool outputs are over
            ``store.INLINE_LIMIT`` so blobs are written; their tool_call_id ``c{i}-{j}-{length}-{crc32}``
            says what the content must be. After ``append`` returns, the batch is written as one JSON
            line to the side file, which is flushed and fsync'ed: the side file lists acknowledged
            batches only.
``tokens``  runs ``catch_up_tokens()`` in a loop, logging each round that counted something.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import traceback
import zlib
from typing import Any

from turnlog.store import (
    INLINE_LIMIT,
    NO_SESSION,
    ArtifactWritten,
    MessageAppended,
    SessionStarted,
    SQLiteStore,
    ToolCall,
    ToolReturned,
)

SESSIONS = ("crash-a", "crash-b", "crash-c")
MAX_BATCHES = 5_000
"""Stop appending (and idle) after this many batches: bounds the file should a kill come late."""

_VOCABULARY = (
    "the model called grep on src and found twelve matches in four files while the tests ran "
    "def class return import async await error warning token budget context window summary "
    "0 1 2 3 42 1024 ü é 漢字 → ✓ {} [] () :: -- == != <= >="
)
WORDS = tuple(_VOCABULARY.split())

REPEATED_OUTPUT = "a tool output that many batches return, stored as one blob. " * 30


# Text to cut outputs from: cheap to slice, so the writer spends its time in append, where the
# kill should land, rather than in making up content.
POOL = " ".join(random.Random(7).choices(WORDS, k=20_000))


def big_text(rng: random.Random, length: int) -> str:
    """ASCII-and-not text of ``length`` characters, more than INLINE_LIMIT UTF-8 bytes."""
    start = rng.randrange(len(POOL) - length)
    return f"{start}:" + POOL[start : start + length - len(str(start)) - 1]


def tool_output(rng: random.Random, batch: int, index: int) -> ToolReturned:
    content = REPEATED_OUTPUT if rng.random() < 0.15 else big_text(rng, rng.randint(INLINE_LIMIT + 1, 20_000))
    check = f"c{batch}-{index}-{len(content)}-{zlib.crc32(content.encode('utf-8')):08x}"
    return ToolReturned(
        event_id=f"b{batch:05d}-{index}of0", tool_call_id=check, tool_name="grep", content=content
    )


def make_batch(rng: random.Random, batch: int, new_session: bool) -> list[Any]:
    size = rng.randint(1, 6)
    events: list[Any] = []
    if new_session:
        events.append(SessionStarted(title=f"session started by batch {batch}"))
    while len(events) < size:
        index = len(events)
        roll = rng.random()
        if roll < 0.4 or (batch % 3 == 0 and index == size - 1):
            events.append(tool_output(rng, batch, index))
        elif roll < 0.55:
            call = ToolCall(id=f"call-{batch}-{index}", name="grep", arguments=json.dumps({"q": batch}))
            events.append(MessageAppended(role="assistant", content="", tool_calls=(call,)))
        elif roll < 0.62:
            events.append(ArtifactWritten(name=f"out/{batch}-{index}.txt", content=big_text(rng, 3000)))
        else:
            events.append(MessageAppended(role="user", content=f"batch {batch} message {index} " * 3))
    # The batch marker: every event id names the batch, its index in it and the batch's size.
    n = len(events)
    return [e.model_copy(update={"event_id": f"b{batch:05d}-{j}of{n}"}) for j, e in enumerate(events)]


def orphaned(parent: int) -> bool:
    """True when the test that started this process is gone (it would never kill us)."""
    return os.getppid() != parent


def run_writer(args: argparse.Namespace) -> None:
    parent = os.getppid()
    rng = random.Random(args.seed)
    db = SQLiteStore.open(args.db)
    heads = {s: db.head_version(s) for s in SESSIONS}
    fd = os.open(args.side, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for batch in range(MAX_BATCHES):
        if orphaned(parent):
            return
        session_id = rng.choice(SESSIONS)
        events = make_batch(rng, batch, new_session=heads[session_id] == 0)
        expected = heads[session_id] or NO_SESSION
        records = db.append(session_id, events, expected_version=expected)
        heads[session_id] = records[-1].version
        line = {
            "batch": batch,
            "session": session_id,
            "ids": [r.event_id for r in records],
            "positions": [r.position for r in records],
            "versions": [r.version for r in records],
        }
        os.write(fd, (json.dumps(line) + "\n").encode("utf-8"))
        os.fsync(fd)
        if args.pause:
            time.sleep(rng.uniform(0, args.pause))
    while not orphaned(parent):  # only reached when the test is far slower than expected
        time.sleep(0.1)


def run_tokens(args: argparse.Namespace) -> None:
    parent = os.getppid()
    db = SQLiteStore.open(args.db)
    fd = os.open(args.side, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, b'{"started": true}\n')
    while not orphaned(parent):
        counted = db.catch_up_tokens()
        if counted:
            os.write(fd, (json.dumps({"counted": counted}) + "\n").encode("utf-8"))
        else:
            time.sleep(0.002)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["writer", "tokens"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--side", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pause", type=float, default=0.0, help="sleep up to this long between batches")
    args = parser.parse_args()
    try:
        {"writer": run_writer, "tokens": run_tokens}[args.mode](args)
    except BaseException:
        traceback.print_exc()
        sys.exit(1)


if __name__ == "__main__":
    main()
