"""A worker process for tests/test_concurrency.py: appends to one store file next to other processes.

Run as a script (``python tests/helpers/appender.py MODE --db PATH ...``) with the repository root on
PYTHONPATH. Every acknowledged append (``append`` returned) is written as one JSON line to ``--out``
and flushed at once, so the parent test knows exactly what the store acknowledged.

Modes:

``mix``      append ``--batches`` batches of 1-5 events, some to the worker's own session, some to a
             shared session with ``expected_version`` and a retry on VersionConflictError.
``replay``   append the events of a JSON file (same ids) to a session: an idempotent retry.
``same-ids`` append deterministic batches whose ids every process running this mode shares.
``open``     open the store while another process may hold its write lock, and append once.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from turnlog import store
from turnlog.store import (
    ANY,
    NO_SESSION,
    MessageAppended,
    SessionStarted,
    SQLiteStore,
    ToolCall,
    ToolReturned,
    VersionConflictError,
)

GO_TIMEOUT = 30.0
"""A worker whose parent never says go gives up after this many seconds."""

MAX_CONFLICTS_PER_BATCH = 10_000
"""Livelock guard: optimistic retries of one batch before the worker gives up."""

SHARED_BLOB_TEXT = "shared tool output, stored once whatever process writes it. " * 40
"""Content every worker writes: larger than INLINE_LIMIT, so all of them insert the same blob."""


class Acks:
    """The JSON-lines file of acknowledged appends."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def ack(self, session_id: str, records: list[store.RecordedEvent], **extra: Any) -> None:
        self.write(
            {
                "session": session_id,
                "ids": [r.event_id for r in records],
                "positions": [r.position for r in records],
                "versions": [r.version for r in records],
                "sessions": [r.session_id for r in records],
                **extra,
            }
        )

    def close(self) -> None:
        self._file.close()


def wait_for_go(ready: str | None, go: str | None) -> None:
    if ready:
        Path(ready).write_text(str(os.getpid()))
    if not go:
        return
    deadline = time.monotonic() + GO_TIMEOUT
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise SystemExit(f"no go file {go} after {GO_TIMEOUT}s")
        time.sleep(0.002)


def mix_batch(worker: int, batch: int, size: int, rng: random.Random) -> list[Any]:
    """1-5 events whose ids and contents say which worker and batch made them."""
    events: list[Any] = []
    for index in range(size):
        event_id = f"w{worker}-b{batch:04d}-e{index}"
        kind = rng.random()
        if kind < 0.15:
            events.append(
                ToolReturned(event_id=event_id, tool_call_id=f"call-{event_id}", content=SHARED_BLOB_TEXT)
            )
        elif kind < 0.3:
            text = f"output of {event_id}: " + " ".join(str(rng.random()) for _ in range(80))
            events.append(ToolReturned(event_id=event_id, tool_call_id=f"call-{event_id}", content=text))
        elif kind < 0.4:
            events.append(
                MessageAppended(
                    event_id=event_id,
                    role="assistant",
                    tool_calls=(ToolCall(id=f"call-{event_id}", name="grep", arguments='{"q": "x"}'),),
                )
            )
        else:
            role = "user" if index % 2 == 0 else "assistant"
            events.append(MessageAppended(event_id=event_id, role=role, content=f"{event_id} says hello"))
    return events


def run_mix(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    own = f"own-{args.worker}"
    acks = Acks(args.out)
    db = SQLiteStore.open(args.db)
    wait_for_go(args.ready, args.go)
    conflicts = 0

    # Every worker first tries to start the shared session; exactly one of them can.
    start = [SessionStarted(event_id=f"w{args.worker}-start", title="shared")]
    try:
        acks.ack(args.shared, db.append(args.shared, start, expected_version=NO_SESSION), batch=-1)
    except VersionConflictError:
        conflicts += 1

    own_head = 0
    for batch in range(args.batches):
        size = rng.randint(1, 5)
        events = mix_batch(args.worker, batch, size, rng)
        if rng.random() < 0.4:
            if own_head == 0:
                events = [SessionStarted(event_id=f"w{args.worker}-own-start"), *events[:4]]
            expected = NO_SESSION if own_head == 0 else own_head
            # Nobody else writes this session: a conflict here is a store bug, so it is not caught.
            records = db.append(own, events, expected_version=expected)
            own_head = records[-1].version
            acks.ack(own, records, batch=batch)
            continue
        tries = 0
        while True:
            head = db.head_version(args.shared)
            if rng.random() < 0.5:
                time.sleep(rng.random() * 0.002)  # the agent "thinks" between reading and appending
            try:
                records = db.append(args.shared, events, expected_version=head)
            except VersionConflictError:
                conflicts += 1
                tries += 1
                if tries > MAX_CONFLICTS_PER_BATCH:
                    raise
                continue
            acks.ack(args.shared, records, batch=batch, expected=head)
            break
    acks.write({"done": True, "conflicts": conflicts})
    acks.close()
    db.close()


def run_replay(args: argparse.Namespace) -> None:
    events = store.parse_events_json(Path(args.events).read_text(encoding="utf-8"))
    expected: Any = {"any": ANY, "none": NO_SESSION}.get(args.expected)
    if expected is None:
        expected = int(args.expected)
    acks = Acks(args.out)
    db = SQLiteStore.open(args.db)
    wait_for_go(args.ready, args.go)
    try:
        records = db.append(args.session, events, expected_version=expected)
    except store.StoreError as exc:
        acks.write({"error": type(exc).__name__, "message": str(exc)})
    else:
        acks.ack(args.session, records, hashes=[r.hash for r in records])
    acks.close()
    db.close()


def same_ids_batch(batch: int) -> list[Any]:
    """The same events, with the same ids, in every process that asks for batch ``batch``."""
    size = batch % 4 + 1
    events: list[Any] = []
    for index in range(size):
        event_id = f"dup-b{batch:04d}-e{index}"
        if index == 1:
            content = f"{event_id} " + "large deterministic output " * 60
            events.append(ToolReturned(event_id=event_id, tool_call_id=f"call-{event_id}", content=content))
        else:
            events.append(MessageAppended(event_id=event_id, role="user", content=f"{event_id} text"))
    return events


def run_same_ids(args: argparse.Namespace) -> None:
    acks = Acks(args.out)
    db = SQLiteStore.open(args.db)
    wait_for_go(args.ready, args.go)
    for batch in range(args.batches):
        records = db.append(args.session, same_ids_batch(batch))
        acks.ack(args.session, records, batch=batch, hashes=[r.hash for r in records])
    acks.close()
    db.close()


def run_open(args: argparse.Namespace) -> None:
    """Open the store (waiting up to ``--busy-timeout`` for other writers) and append one event."""
    acks = Acks(args.out)
    wait_for_go(args.ready, args.go)
    started = time.monotonic()
    try:
        with SQLiteStore.open(args.db, busy_timeout=args.busy_timeout) as db:
            records = db.append(args.session, [MessageAppended(role="user", content="hello")])
    except store.StoreError as exc:
        acks.write({"error": type(exc).__name__, "message": str(exc), "after": time.monotonic() - started})
    else:
        acks.ack(args.session, records, after=time.monotonic() - started)
    acks.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["mix", "replay", "same-ids", "open"])
    parser.add_argument("--db")
    parser.add_argument("--out", required=True)
    parser.add_argument("--ready")
    parser.add_argument("--go")
    parser.add_argument("--worker", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--shared", default="shared")
    parser.add_argument("--session", default="s")
    parser.add_argument("--events")
    parser.add_argument("--expected", default="any")
    parser.add_argument("--busy-timeout", type=float, default=30.0)
    args = parser.parse_args()
    run = {"mix": run_mix, "replay": run_replay, "same-ids": run_same_ids, "open": run_open}
    try:
        run[args.mode](args)
    except BaseException:
        traceback.print_exc()
        sys.exit(1)


if __name__ == "__main__":
    main()
