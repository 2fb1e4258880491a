"""A writer process for tests/test_postgres_writers.py.

Run as ``python tests/helpers/pg_writer.py --url URL --schema S --writer W --session SID --batches N
--size K --side PATH``, with the repository root on PYTHONPATH. It appends N batches of K messages
to session SID, each with the expected version it last saw: on a VersionConflictError it takes the
head the error names and tries the same batch again; on any other StoreError (a lost connection)
it tries the same batch again with the same ids (an idempotent retry). Batch ``i`` has the event
ids ``w{W}-{i:05d}-{j}``. After ``append`` returns, one line ``BATCH_ID FIRST_POSITION`` is written
to the side file and flushed (and fsync'ed with ``--fsync``): the side file lists acknowledged
batches only. The last line of stdout says how long the appends took and how many conflicts and
retries there were."""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

from turnlog.store import MessageAppended, StoreError, VersionConflictError
from turnlog.store.postgres import PostgresStore


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("--url", "--schema", "--writer", "--session", "--side"):
        parser.add_argument(name, required=True)
    parser.add_argument("--batches", type=int, required=True)
    parser.add_argument("--size", type=int, default=1)
    parser.add_argument("--fsync", action="store_true")
    args = parser.parse_args()
    store = PostgresStore.open(args.url, schema=args.schema, pool_size=1)
    head = store.head_version(args.session)
    conflicts = retries = 0
    started = time.perf_counter()
    with open(args.side, "a", encoding="utf-8") as side:
        for i in range(args.batches):
            batch_id = f"w{args.writer}-{i:05d}"
            batch = [
                MessageAppended(role="user", content=f"{batch_id} message {j}", event_id=f"{batch_id}-{j}")
                for j in range(args.size)
            ]
            streak = 0
            while True:
                try:
                    records = store.append(args.session, batch, expected_version=head)
                except VersionConflictError as exc:
                    conflicts += 1
                    streak += 1
                    head = exc.actual
                    # Back off (exponentially, with jitter) so the others go first: on two cores,
                    # eight writers retrying at once mostly burn the CPU the winner needs.
                    time.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** min(streak, 6))))
                    continue
                except StoreError as exc:
                    retries += 1
                    print(f"retry after: {exc}", file=sys.stderr, flush=True)
                    if retries > 1000:
                        raise
                    time.sleep(
                        0.01
                    )  # the head stays: a stale one costs one conflict, and finds a stored batch
                    continue
                break
            head = records[-1].version
            side.write(f"{batch_id} {records[0].position}\n")
            side.flush()
            if args.fsync:
                os.fsync(side.fileno())
    elapsed = time.perf_counter() - started
    store.close()
    print(
        f"done {args.batches} batches in {elapsed:.3f} s; {conflicts} conflicts, {retries} retries",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
