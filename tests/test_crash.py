"""SIGKILL at a random moment: after the crash the log is valid, batches are all-or-nothing, every
acknowledged batch survived, and the store keeps working.

A writer process (tests/helpers/crash_writer.py) appends batches in a loop and records each batch
``append`` acknowledged in an fsync'ed side file; the test kills it with SIGKILL at a random moment,
optionally together with a second process running ``catch_up_tokens()`` in a loop, then opens the
store and checks it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from turnlog.store import (
    DEFAULT_ENCODING,
    INLINE_LIMIT,
    NO_SESSION,
    ArtifactWritten,
    MessageAppended,
    RecordedEvent,
    SQLiteStore,
    StoreError,
    ToolReturned,
    load_tokenizer,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
HELPER = Path(__file__).resolve().parent / "helpers" / "crash_writer.py"
START_TIMEOUT = 10.0
BATCH_MARKER = re.compile(r"^b(\d{5})-(\d+)of(\d+)$")
TOOL_CHECK = re.compile(r"^c(\d+)-(\d+)-(\d+)-([0-9a-f]{8})$")

# (seed, earliest kill, latest kill): the writer is killed after at least a few acknowledged batches,
# then after a random delay in that range (seconds), so kills land at different moments of an append.
KILLS = [(101, 0.0, 0.02), (202, 0.02, 0.12), (303, 0.12, 0.4)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


@dataclass
class Helper:
    proc: subprocess.Popen[bytes]
    side: Path
    stderr: Path

    def lines(self) -> list[dict[str, Any]]:
        """The complete lines of the side file (a line cut by the kill was never acknowledged)."""
        if not self.side.exists():
            return []
        text = self.side.read_text(encoding="utf-8")
        return [json.loads(line) for line in text.split("\n")[:-1] if line]

    def kill(self) -> None:
        assert self.proc.poll() is None, f"helper died before the kill:\n{self.stderr.read_text()[-3000:]}"
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=5)
        assert self.proc.returncode == -signal.SIGKILL


class Helpers:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.started: list[Helper] = []

    def start(self, mode: str, db_path: Path, *options: str) -> Helper:
        n = len(self.started)
        side = self.folder / f"{mode}-{n}.jsonl"
        stderr = self.folder / f"{mode}-{n}.stderr"
        with stderr.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, str(HELPER), mode, f"--db={db_path}", f"--side={side}", *options],
                env=_env(),
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        helper = Helper(proc, side, stderr)
        self.started.append(helper)
        return helper

    def wait_lines(self, helper: Helper, count: int, accept: Any = None) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while len([x for x in helper.lines() if accept is None or accept(x)]) < count:
            if helper.proc.poll() is not None:
                pytest.fail(f"helper exited ({helper.proc.returncode}):\n{helper.stderr.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"helper wrote fewer than {count} lines in {START_TIMEOUT}s")
            time.sleep(0.001)

    def kill_all(self) -> None:
        for helper in self.started:
            if helper.proc.poll() is None:
                helper.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL cannot be ignored
                helper.proc.wait(timeout=5)


@pytest.fixture
def helpers(tmp_path: Path) -> Iterator[Helpers]:
    started = Helpers(tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


def _tokenizer_count(record: RecordedEvent) -> int:
    tokenizer = load_tokenizer(DEFAULT_ENCODING)
    return sum(tokenizer.count(text) for text in record.event.token_texts())


def _check_after_crash(db: SQLiteStore, acked: list[dict[str, Any]]) -> list[RecordedEvent]:
    """Everything that must hold when the store is opened after the kill."""
    report = db.verify()
    assert report.ok, report.problems
    stored = list(db.iter_after(0))
    assert [r.position for r in stored] == list(range(1, len(stored) + 1)), "positions have gaps"
    assert report.events == len(stored) == db.count_events()

    # Group the events by batch marker: every batch is wholly present (or absent), in one piece.
    batches: dict[int, list[tuple[int, int, RecordedEvent]]] = defaultdict(list)
    for record in stored:
        match = BATCH_MARKER.match(record.event_id)
        assert match, f"unexpected event {record.event_id!r}"
        batch, index, size = (int(g) for g in match.groups())
        batches[batch].append((index, size, record))
    for batch, members in batches.items():
        sizes = {size for _, size, _ in members}
        assert len(sizes) == 1, f"batch {batch}: events disagree on its size"
        assert [index for index, _, _ in members] == list(range(sizes.pop())), f"batch {batch} is partial"
        records = [r for _, _, r in members]
        assert len({r.session_id for r in records}) == 1
        assert [r.position for r in records] == list(range(records[0].position, records[-1].position + 1))
        assert [r.version for r in records] == list(range(records[0].version, records[-1].version + 1))

    # Every acknowledged batch is there, where append said; at most the one in flight is unacknowledged.
    acked_numbers = [line["batch"] for line in acked]
    assert acked_numbers == list(range(len(acked)))
    for line in acked:
        records = [r for _, _, r in batches.get(line["batch"], [])]
        assert [r.event_id for r in records] == line["ids"], f"acknowledged batch {line['batch']} lost"
        assert [r.position for r in records] == line["positions"]
        assert [r.version for r in records] == line["versions"]
        assert {r.session_id for r in records} == {line["session"]}
    assert set(batches) <= set(range(len(acked) + 1)), sorted(set(batches) - set(range(len(acked))))

    # Per-session versions are gapless.
    versions: dict[str, list[int]] = defaultdict(list)
    for record in stored:
        versions[record.session_id].append(record.version)
    for session_id, seen in versions.items():
        assert seen == list(range(1, len(seen) + 1)), session_id

    # Large content went to blobs and reads back exactly as written.
    blobs = 0
    for record in stored:
        event = record.event
        if isinstance(event, ToolReturned):
            check = TOOL_CHECK.match(event.tool_call_id)
            assert check, event.tool_call_id
            data = event.content.encode("utf-8")
            assert len(event.content) == int(check.group(3))
            assert f"{zlib.crc32(data):08x}" == check.group(4)
            assert (event.artifact_id is not None) == (len(data) > INLINE_LIMIT)
        if isinstance(event, ToolReturned | ArtifactWritten) and event.artifact_id:
            assert db.get_blob(event.artifact_id).text == event.content
            blobs += 1
    assert blobs, "no blob was written before the kill"
    return stored


def _check_append_after_crash(db: SQLiteStore, stored: list[RecordedEvent]) -> None:
    sessions = sorted({r.session_id for r in stored})
    position = len(stored)
    for session_id in sessions:
        head = db.head_version(session_id)
        batch = [
            MessageAppended(role="user", content=f"after the crash, in {session_id}"),
            ToolReturned(tool_call_id="after-crash", content="recovered output " * 100),
        ]
        records = db.append(session_id, batch, expected_version=head)
        assert [r.position for r in records] == [position + 1, position + 2]
        assert [r.version for r in records] == [head + 1, head + 2]
        position += 2
    records = db.append(
        "after-crash", [MessageAppended(role="user", content="new")], expected_version=NO_SESSION
    )
    assert records[0].position == position + 1
    report = db.verify()
    assert report.ok, report.problems
    assert [r.position for r in db.iter_after(0)] == list(range(1, position + 2))


def _catch_up_after_crash(db: SQLiteStore) -> dict[int, int | None]:
    """Right after opening, before any read that counts tokens by itself: each count is either
    NULL and pending (catch_up_tokens will count it) or already there; catch_up_tokens counts exactly
    the NULL ones. Returns the counts as the crash left them, by position."""
    left = dict(db.conn.execute("SELECT position, tokens FROM events ORDER BY position").fetchall())
    missing = sum(1 for tokens in left.values() if tokens is None)
    assert db.pending_token_counts() == missing, "a NULL count is not pending: catch-up would skip it"
    assert db.catch_up_tokens() == missing
    assert db.pending_token_counts() == 0
    return left


def _check_tokens(db: SQLiteStore, left: dict[int, int | None]) -> None:
    """Counts left by the crash were correct, and every count is the tokenizer's count now."""
    stored = list(db.iter_after(0))
    for record in stored:
        expected = _tokenizer_count(record)
        assert record.tokens == expected, f"position {record.position}: wrong count"
        assert left.get(record.position) in (None, expected), f"position {record.position}: wrong count"
    assert sum(s.tokens for s in db.sessions()) == sum(r.tokens or 0 for r in stored)


def _check_store(db: SQLiteStore, acked: list[dict[str, Any]]) -> tuple[int, int]:
    """Everything after the crash; returns the events stored and how many had their counts."""
    left = _catch_up_after_crash(db)
    stored = _check_after_crash(db, acked)
    _check_tokens(db, left)
    _check_append_after_crash(db, stored)
    _check_tokens(db, _catch_up_after_crash(db))
    return len(stored), sum(1 for tokens in left.values() if tokens is not None)


@pytest.mark.parametrize(("seed", "earliest", "latest"), KILLS)
def test_sigkill_during_appends_loses_no_acknowledged_batch(
    tmp_path: Path, helpers: Helpers, seed: int, earliest: float, latest: float
) -> None:
    rng = random.Random(seed)
    db_path = tmp_path / "crash.db"
    SQLiteStore.open(db_path).close()
    writer = helpers.start("writer", db_path, f"--seed={seed}")
    helpers.wait_lines(writer, rng.randint(3, 15))
    time.sleep(rng.uniform(earliest, latest))
    writer.kill()

    acked = writer.lines()
    with SQLiteStore.open(db_path) as db:
        stored, _ = _check_store(db, acked)
    print(f"killed after {len(acked)} acknowledged batches, {stored} events stored")


# The writer's pause between batches: none (the counter lags behind, so many counts are missing
# and the counter is killed in the middle of its work), short, or long enough for it to keep up.
TOKEN_KILLS = [(*kill, pause) for kill, pause in zip(KILLS, (0.0, 0.003, 0.01), strict=True)]


def _counter_committed(db_path: Path) -> bool:
    """True once the counter has committed counts: some events are no longer pending."""
    with SQLiteStore.open(db_path) as db:
        return db.pending_token_counts() < db.count_events()


@pytest.mark.parametrize(("seed", "earliest", "latest", "pause"), TOKEN_KILLS)
def test_sigkill_during_token_catch_up(
    tmp_path: Path, helpers: Helpers, seed: int, earliest: float, latest: float, pause: float
) -> None:
    rng = random.Random(seed)
    db_path = tmp_path / "crash.db"
    SQLiteStore.open(db_path).close()
    writer = helpers.start("writer", db_path, f"--seed={seed}", f"--pause={pause}")
    counter = helpers.start("tokens", db_path)
    helpers.wait_lines(writer, rng.randint(3, 15))
    deadline = time.monotonic() + START_TIMEOUT
    while not _counter_committed(db_path):
        assert counter.proc.poll() is None, counter.stderr.read_text()[-3000:]
        assert time.monotonic() < deadline, "the counter committed nothing"
        time.sleep(0.005)
    time.sleep(rng.uniform(earliest, latest))
    # Kill the counter first (so the writer may append more after it), then the writer.
    counter.kill()
    time.sleep(rng.uniform(0, 0.05))
    writer.kill()

    acked = writer.lines()
    with SQLiteStore.open(db_path) as db:
        stored, counted = _check_store(db, acked)
    print(f"killed after {len(acked)} acknowledged batches; {counted} of {stored} events were counted")


# --- a failed init leaves nothing behind ----------------------------------------------------------------

TURNLOG = Path(sys.executable).parent / "turnlog"


def test_a_failed_init_leaves_no_file(tmp_path: Path) -> None:
    """An init that fails (an unknown tokenizer, or a failure after the file was made) leaves no
    file, -wal or -shm that a later command could take for a store."""
    path = tmp_path / "t.db"
    done = subprocess.run(
        [str(TURNLOG), "--db", str(path), "init", "--tokenizer", "no_such_encoding"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "unknown tokenizer" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
    later = subprocess.run(
        [str(TURNLOG), "--db", str(path), "sessions"], capture_output=True, text=True, timeout=120
    )
    assert later.returncode == 1 and "no turnlog store" in later.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_creation_that_fails_midway_removes_what_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.db"

    def failing(*args: Any) -> str:
        raise StoreError("the disk is full")

    monkeypatch.setattr("turnlog.store.sqlite_connection._migrate", failing)
    with pytest.raises(StoreError, match="disk is full"):
        SQLiteStore.open(path)
    assert list(tmp_path.iterdir()) == []
    # An existing store is never removed by a failed open.
    monkeypatch.undo()
    SQLiteStore.open(path).close()
    monkeypatch.setattr("turnlog.store.sqlite_connection._migrate", failing)
    with pytest.raises(StoreError, match="disk is full"):
        SQLiteStore.open(path)
    assert path.exists()


def test_init_in_a_folder_it_may_not_write_leaves_nothing(tmp_path: Path) -> None:
    # Root ignores file modes: then the command runs as nobody.
    nobody = (
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] if os.geteuid() == 0 else []
    )
    folder = Path(tempfile.mkdtemp(prefix="turnlog-init-"))
    try:
        folder.chmod(0o555)
        done = subprocess.run(
            [*nobody, str(TURNLOG), "--db", str(folder / "t.db"), "init"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 1 and "cannot create" in done.stderr and "Traceback" not in done.stderr
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)
