"""Several processes appending to one store file at once: no lost, duplicated or interleaved appends.

Real processes on a real file (WAL, synchronous=FULL): each worker runs tests/helpers/appender.py and
writes every append the store acknowledged to its own JSON-lines file; afterwards the log must hold
exactly the acknowledged events, at positions 1..N, with gapless session versions and a valid chain.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from turnlog.store import MessageAppended, SessionStarted, SQLiteStore, StoreError, ToolReturned

REPO_ROOT = Path(__file__).resolve().parent.parent
APPENDER = Path(__file__).resolve().parent / "helpers" / "appender.py"
WORKERS = 4
# How long a helper process may take to start or finish: generous, since a loaded 2-core machine
# (CI beside other work) can take seconds just to import Python; only a hang should reach it.
PROCESS_TIMEOUT = 60.0


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


class Processes:
    """Helper processes started by one test; every one of them is killed and reaped at the end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        log = self.folder / f"helper-{len(self.procs)}.stderr"
        with log.open("wb") as stderr:
            proc = subprocess.Popen(
                [sys.executable, str(APPENDER), *args],
                env=_env(),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        self.procs.append(proc)
        self.logs.append(log)
        return proc

    def wait_files(self, paths: list[Path], timeout: float = PROCESS_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not all(p.exists() for p in paths):
            for proc, log in zip(self.procs, self.logs, strict=True):
                if proc.poll() is not None:
                    pytest.fail(f"helper exited early ({proc.returncode}): {log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"helpers not ready after {timeout}s")
            time.sleep(0.005)

    def wait_all(self, timeout: float = PROCESS_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        for proc, log in zip(self.procs, self.logs, strict=True):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"helper {proc.args} still running after {timeout}s")
            assert proc.returncode == 0, f"helper failed ({proc.returncode}):\n{log.read_text()[-3000:]}"

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL cannot be ignored
                proc.wait(timeout=5)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    processes = Processes(tmp_path)
    try:
        yield processes
    finally:
        processes.kill_all()


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _create_store(path: Path) -> None:
    SQLiteStore.open(path).close()


# --- many writers, own sessions and one shared session -----------------------------------------------


def test_concurrent_appenders_lose_nothing_and_duplicate_nothing(tmp_path: Path, procs: Processes) -> None:
    db_path = tmp_path / "turnlog.store.db"
    _create_store(db_path)
    go = tmp_path / "go"
    ready = [tmp_path / f"w{k}.ready" for k in range(WORKERS)]
    outs = [tmp_path / f"w{k}.jsonl" for k in range(WORKERS)]
    for k in range(WORKERS):
        procs.start(
            "mix",
            f"--db={db_path}",
            f"--worker={k}",
            f"--seed={1000 + k}",
            "--batches=60",
            "--shared=shared",
            f"--out={outs[k]}",
            f"--ready={ready[k]}",
            f"--go={go}",
        )
    procs.wait_files(ready)
    go.touch()
    # Meanwhile, a reader in this process sees a valid log at every moment: a consistent snapshot
    # never shows a gap, a broken chain or a session version out of order.
    snapshots = 0
    with SQLiteStore.open(db_path) as reader:
        deadline = time.monotonic() + PROCESS_TIMEOUT
        while any(p.poll() is None for p in procs.procs) and time.monotonic() < deadline:
            report = reader.verify()
            assert report.ok, report.problems
            snapshots += 1
            time.sleep(0.01)
    procs.wait_all()

    acked: list[dict[str, Any]] = []  # every acknowledged batch, with its worker
    conflicts = 0
    for k, out in enumerate(outs):
        lines = _read_jsonl(out)
        assert lines and lines[-1].get("done"), f"worker {k} did not finish: {lines[-1:]}"
        conflicts += lines[-1]["conflicts"]
        acked.extend({**line, "worker": k} for line in lines[:-1])
    acked_ids = [event_id for batch in acked for event_id in batch["ids"]]

    with SQLiteStore.open(db_path) as db:
        report = db.verify()
        assert report.ok, report.problems
        stored = list(db.iter_after(0))
        # Global positions are exactly 1..N and N is the number of acknowledged events.
        assert [r.position for r in stored] == list(range(1, len(stored) + 1))
        assert len(stored) == len(acked_ids) == report.events == db.head_position()
        # Each acknowledged id is stored exactly once; nothing unacknowledged was stored.
        stored_ids = Counter(r.event_id for r in stored)
        assert max(stored_ids.values()) == 1
        assert set(stored_ids) == set(acked_ids)
        assert len(set(acked_ids)) == len(acked_ids)
        # What append returned is what the log holds.
        by_id = {r.event_id: r for r in stored}
        for batch in acked:
            records = [by_id[i] for i in batch["ids"]]
            assert [r.position for r in records] == batch["positions"]
            assert [r.version for r in records] == batch["versions"]
            assert {r.session_id for r in records} == {batch["session"]}
            # A batch is atomic: consecutive positions and versions, nothing interleaved.
            first = batch["positions"][0]
            assert batch["positions"] == list(range(first, first + len(records)))
            assert batch["versions"] == list(range(batch["versions"][0], batch["versions"][0] + len(records)))
            if "expected" in batch:
                assert batch["versions"][0] == batch["expected"] + 1

        # Per-session versions are gapless.
        per_session: dict[str, list[int]] = defaultdict(list)
        for r in stored:
            per_session[r.session_id].append(r.version)
        assert set(per_session) == {"shared", *(f"own-{k}" for k in range(WORKERS))}
        for session_id, versions in per_session.items():
            assert versions == list(range(1, len(versions) + 1)), session_id
            assert db.head_version(session_id) == len(versions)
            assert [r.version for r in db.read_session(session_id)] == versions

        # The shared session: started exactly once, by its first event; every worker wrote to it;
        # each worker's events appear in the order that worker appended them.
        shared = db.read_session("shared")
        starts = [r for r in shared if isinstance(r.event, SessionStarted)]
        assert len(starts) == 1 and starts[0].version == 1
        for k in range(WORKERS):
            in_ack_order = [
                i for b in acked if b["worker"] == k and b["session"] == "shared" for i in b["ids"]
            ]
            in_log_order = [r.event_id for r in shared if r.event_id.startswith(f"w{k}-")]
            assert in_log_order == in_ack_order, f"worker {k}'s shared events are out of order"
            assert len(in_ack_order) > 1, f"worker {k} never appended to the shared session"

        # Blobs written by several processes at once are stored once and read back whole.
        outputs = [r.event for r in stored if isinstance(r.event, ToolReturned)]
        assert any(e.artifact_id for e in outputs)
        for event in outputs:
            if event.artifact_id:
                assert db.get_blob(event.artifact_id).text == event.content
    print(f"{len(stored)} events, {len(acked)} batches, {conflicts} conflicts retried, {snapshots} snapshots")


# --- idempotent retries from another process ---------------------------------------------------------


def _write_events(path: Path, events: list[Any]) -> None:
    path.write_text(json.dumps([e.model_dump(mode="json") for e in events]), encoding="utf-8")


def test_idempotent_retry_from_second_process_writes_nothing(tmp_path: Path, procs: Processes) -> None:
    db_path = tmp_path / "turnlog.store.db"
    events: list[Any] = [
        SessionStarted(title="retried"),
        MessageAppended(role="user", content="do the thing"),
        ToolReturned(tool_call_id="call-1", content="big output line\n" * 200),
        MessageAppended(role="assistant", content="done"),
    ]
    with SQLiteStore.open(db_path) as db:
        original = db.append("s", events, expected_version=0)
        db.append("other", [MessageAppended(role="user", content="unrelated, later")])
        head = db.head_position()
    events_file = tmp_path / "events.json"
    _write_events(events_file, events)

    # The retry carries the stale expected version of the first attempt, as a real retry does.
    out = tmp_path / "retry.jsonl"
    procs.start(
        "replay", f"--db={db_path}", f"--events={events_file}", "--session=s", "--expected=0", f"--out={out}"
    )
    # A batch of which only part is stored is not a retry: refused, and nothing is written either.
    partial_file = tmp_path / "partial.json"
    _write_events(partial_file, [events[1], MessageAppended(role="user", content="new")])
    partial_out = tmp_path / "partial.jsonl"
    procs.start(
        "replay", f"--db={db_path}", f"--events={partial_file}", "--session=s", f"--out={partial_out}"
    )
    procs.wait_all()

    [retry] = _read_jsonl(out)
    assert "error" not in retry, retry
    assert retry["ids"] == [r.event_id for r in original]
    assert retry["positions"] == [r.position for r in original]
    assert retry["versions"] == [r.version for r in original]
    assert retry["hashes"] == [r.hash for r in original]
    [partial] = _read_jsonl(partial_out)
    assert partial.get("error") == "DuplicateEventError", partial

    with SQLiteStore.open(db_path) as db:
        assert db.head_position() == head
        assert db.count_events() == head
        assert db.head_version("s") == len(events)
        assert db.verify().ok


def test_racing_retries_with_the_same_ids_store_each_batch_once(tmp_path: Path, procs: Processes) -> None:
    """Two processes append the same batches (same ids) at the same time, as a client does when it
    retries on a second connection after a lost acknowledgement: each batch is stored once, and both
    get the same records back."""
    db_path = tmp_path / "turnlog.store.db"
    _create_store(db_path)
    go = tmp_path / "go"
    batches = 80
    outs = [tmp_path / f"dup{k}.jsonl" for k in range(2)]
    ready = [tmp_path / f"dup{k}.ready" for k in range(2)]
    for k in range(2):
        procs.start(
            "same-ids",
            f"--db={db_path}",
            "--session=dup",
            f"--batches={batches}",
            f"--out={outs[k]}",
            f"--ready={ready[k]}",
            f"--go={go}",
        )
    procs.wait_files(ready)
    go.touch()
    procs.wait_all()

    first, second = (_read_jsonl(out) for out in outs)
    assert len(first) == len(second) == batches
    assert first == second
    expected_events = sum(b % 4 + 1 for b in range(batches))
    with SQLiteStore.open(db_path) as db:
        stored = list(db.iter_after(0))
        assert len(stored) == expected_events
        assert [r.position for r in stored] == list(range(1, expected_events + 1))
        assert [r.version for r in stored] == list(range(1, expected_events + 1))
        # Batches appear whole and in order: the batch numbers never go back.
        batch_numbers = [int(r.event_id.split("-")[1][1:]) for r in stored]
        assert batch_numbers == sorted(batch_numbers)
        assert db.verify().ok


# --- opening a new store while another process writes it ------------------------------------------------


def test_open_of_a_new_store_waits_for_another_writer(tmp_path: Path, procs: Processes) -> None:
    """Agent workers started together on a store that does not exist yet all open it: an opener waits
    (up to its busy timeout) while another process holds the new file's write lock. Unsynchronised
    first opens of one new file by 4 processes fail this way in about 1 of 5 opens."""
    db_path = tmp_path / "new.db"
    holder = sqlite3.connect(db_path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the write lock, in the file's initial (rollback) mode
        out, ready, go = tmp_path / "open.jsonl", tmp_path / "open.ready", tmp_path / "open.go"
        procs.start(
            "open",
            f"--db={db_path}",
            "--busy-timeout=10",
            "--session=late",
            f"--out={out}",
            f"--ready={ready}",
            f"--go={go}",
        )
        procs.wait_files([ready])
        go.touch()
        time.sleep(0.8)  # the opener is inside open() by now, and must wait for us
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    procs.wait_all()
    [result] = _read_jsonl(out)
    assert "error" not in result, f"open failed after {result['after']:.2f}s: {result['message']}"
    with SQLiteStore.open(db_path) as db:
        assert db.head_version("late") == 1
        assert db.verify().ok


# --- reads next to a writer -----------------------------------------------------------------------------

TURNLOG = Path(sys.executable).parent / "turnlog"

_HOLDER = """
import sys
from turnlog.store import MessageAppended, SQLiteStore
store = SQLiteStore.open(sys.argv[1])
with store.atomic() as conn:
    conn.execute("SELECT count(*) FROM events").fetchone()
    print("holding", flush=True)
    sys.stdin.readline()  # the write lock is held until the test says so
print("released", flush=True)
"""


def test_reads_do_not_wait_for_a_writer_holding_the_write_lock(tmp_path: Path) -> None:
    """Every read command finishes while another process holds ``BEGIN IMMEDIATE``: proven by order
    (the holder only lets go when told, after the reads, and a writer is still refused then), not by
    timing. Before, a read waited out its 30 s busy timeout and failed."""
    db_path = tmp_path / "t.db"
    with SQLiteStore.open(db_path) as db:
        db.append("s", [SessionStarted(title="t"), MessageAppended(role="user", content="hello")])
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(db_path)],
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == "holding\n"
        for args in (["sessions"], ["log", "s"], ["context", "s", "--budget", "500"], ["verify"], ["audit"]):
            done = subprocess.run(
                [str(TURNLOG), "--db", str(db_path), *args], capture_output=True, text=True, timeout=120
            )
            assert (args, done.returncode, done.stderr) == (args, 0, "")
            assert holder.poll() is None  # still holding the lock
        with pytest.raises(StoreError, match="busy"), SQLiteStore.open(db_path, busy_timeout=0.2) as late:
            late.append("s", [MessageAppended(role="user", content="blocked")])
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == "released\n"
        assert holder.wait(timeout=60) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_the_wal_shrinks_once_a_long_reader_lets_go(tmp_path: Path) -> None:
    """A reader holding an old snapshot keeps checkpoints from reaching the end of the -wal, so it
    grows; at the first commit after the reader lets go, the writer checkpoints and truncates it."""
    db_path = tmp_path / "t.db"
    wal = tmp_path / "t.db-wal"
    limit = 256 * 1024
    with SQLiteStore.open(db_path) as writer, SQLiteStore.open(db_path, readonly=True) as reader:
        writer.wal_size_limit = limit
        writer.append("s", [SessionStarted(title="t")])
        with reader.reading() as conn:
            conn.execute("SELECT count(*) FROM events").fetchone()  # holds this snapshot
            for i in range(40):
                writer.append("s", [MessageAppended(role="user", content=f"{i} " + "words " * 2000)])
            assert wal.stat().st_size > 2 * limit
        writer.append("s", [MessageAppended(role="user", content="after the reader")])
        assert wal.stat().st_size <= limit
        assert writer.head_version("s") == 42
