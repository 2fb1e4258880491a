"""A `turnlog import` killed with SIGKILL in the middle, for tests/test_export_import.py.

Run as a script (``python tests/helpers/importer.py --db PATH --file PATH --format FMT --kill-in N``)
with the repository root on PYTHONPATH. It imports the file as ``turnlog import`` does, but with the
store's batch limit lowered to ``--max-batch`` (so sessions are larger than one batch, as a big
import's are), and kills itself with SIGKILL inside the N-th append's write transaction, after its
rows are inserted and before the commit: the moment at which an import that is not atomic per
session would leave part of a session behind.
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path
from typing import Any

import turnlog.store.append_rules
from turnlog.importers import import_file
from turnlog.store import SQLiteStore


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--file", required=True)
    parser.add_argument("--format", required=True)
    parser.add_argument("--max-batch", type=int, required=True)
    parser.add_argument("--kill-in", type=int, required=True)
    args = parser.parse_args()
    turnlog.store.append_rules.MAX_BATCH = args.max_batch
    original = SQLiteStore._append_locked
    calls = 0

    def append_locked(self: SQLiteStore, *a: Any, **kw: Any) -> Any:
        nonlocal calls
        records = original(self, *a, **kw)
        calls += 1
        if calls == args.kill_in:
            os.kill(os.getpid(), signal.SIGKILL)
        return records

    SQLiteStore._append_locked = append_locked  # type: ignore[method-assign]
    with SQLiteStore.open(args.db) as opened:
        import_file(opened, Path(args.file).read_bytes(), args.format)
    print("finished")


if __name__ == "__main__":
    main()
