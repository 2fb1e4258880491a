"""Reads never write: every read command works on a store it may not write (a read-only file in a
read-only folder, with or without committed frames still in its -wal) and leaves every byte as it
was; what writers have not materialized yet is folded in memory; a file that is no store is refused
untouched; and every write path leaves the token counts and projections caught up.

The store is made unwritable with file modes. Root ignores them, so a test running as root runs the
read commands as the user ``nobody`` (``setpriv``), or, where ``nobody`` cannot reach this checkout,
as root inside a mount namespace where the store's folder is a read-only bind mount; either way a
check that the reader really cannot write there comes first."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

from turnlog import open_store, session
from turnlog.actions import pin_message
from turnlog.cli import cli
from turnlog.projections.registry import all_projections, materializer
from turnlog.store import MessageAppended, SQLiteStore, StoreError, ToolCall, ToolReturned

SESSION_FILE = Path(__file__).parent.parent / "scripts" / "data" / "coding_session.jsonl"
TURNLOG = Path(sys.executable).parent / "turnlog"
AS_ROOT = os.geteuid() == 0
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
TIMEOUT = 120


def reader(folder: Path) -> list[str]:
    """The command prefix that runs a program unable to write to ``folder``."""
    if not AS_ROOT:
        return []
    if (
        shutil.which("setpriv")
        and subprocess.run([*NOBODY, str(TURNLOG), "--version"], capture_output=True).returncode == 0
    ):
        return NOBODY
    if shutil.which("unshare") is None:
        pytest.fail("running as root needs setpriv (with a checkout nobody can read) or unshare")
    mount = f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}" && exec "$@"'
    return ["unshare", "--mount", "sh", "-c", mount, "sh"]


def run_cli(db: Path, *args: str, prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [*(prefix or []), str(TURNLOG), "--db", str(db), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, check=False)


def run_all(
    db: Path, commands: list[tuple[str, ...]], prefix: list[str] | None = None
) -> dict[tuple[str, ...], subprocess.CompletedProcess[str]]:
    """Each command run on ``db``, a few processes at a time (each a reader of its own: nothing they
    do depends on another), so the cores a machine has all work; the results in the given order."""
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        done = list(pool.map(lambda args: run_cli(db, *args, prefix=prefix), commands))
    return dict(zip(commands, done, strict=True))


def hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A folder ``nobody`` can reach (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="turnlog-readonly-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o755)
        shutil.rmtree(folder)


def make_read_only(folder: Path) -> list[str]:
    """Make the folder and its files read-only; return the prefix of a reader that cannot write them."""
    for path in folder.iterdir():
        path.chmod(0o444)
    folder.chmod(0o555)
    prefix = reader(folder)
    probe = subprocess.run([*prefix, "touch", str(folder / "probe")], capture_output=True, check=False)
    assert probe.returncode != 0, "the folder must not be writable for the reader"
    store = next(folder.glob("*.db"))
    probe = subprocess.run([*prefix, "sh", "-c", f"echo >> '{store}'"], capture_output=True, check=False)
    assert probe.returncode != 0, "the store file must not be writable for the reader"
    return prefix


def build_behind_store(path: Path) -> SQLiteStore:
    """A store with a materialized part (written by the CLI, which catches up after each write) and
    events a plain SQLiteStore appended after it (token counts deferred, projections behind), as a
    writer killed between its commit and its catch-up leaves them. Returns the plain writer, still
    open with automatic checkpoints off, so its last commits are only in the -wal."""
    assert (
        CliRunner().invoke(cli, ["--db", str(path), "append", "fix", "--file", str(SESSION_FILE)]).exit_code
        == 0
    )
    compacted = CliRunner().invoke(
        cli, ["--db", str(path), "compact", "fix", "--budget", "1500", "--keep-last", "4", "--during-run"]
    )
    assert compacted.exit_code == 0, compacted.output
    writer = SQLiteStore.open(path)
    writer.conn.execute("PRAGMA wal_autocheckpoint = 0")
    writer.append(
        "fix",
        [
            MessageAppended(role="user", content="one more question about the rounding"),
            MessageAppended(role="assistant", content="", tool_calls=[ToolCall(id="c9", name="run_tests")]),
            ToolReturned(tool_call_id="c9", content="ok " * 900),
        ],
    )
    writer.append("other", [MessageAppended(role="user", content="a second session", event_id="ro-last")])
    return writer


READS: list[tuple[str, ...]] = [
    ("sessions", "--json"),
    ("log", "fix", "--json"),
    ("log", "other"),
    ("context", "fix", "--budget", "3000", "--json"),
    ("context", "fix", "--budget", "800", "--format", "text", "--manifest"),
    ("audit", "--json"),
    ("audit", "fix", "--by", "category", "--json"),
    ("verify", "--json"),
    ("replay", "fix", "--json"),
    ("artifacts", "fix", "--json"),
    ("index", "fix"),
    ("todos", "fix", "--json"),
    ("todos", "fix", "--history", "--json"),
    ("summaries", "fix", "--json"),
    ("export", "fix", "other"),
    (
        "compact",
        "fix",
        "--budget",
        "1000",
        "--keep-last",
        "2",
        "--during-run",
        "--dry-run",
        "--allow-over-budget",
        "--json",
    ),
]


def test_every_read_command_works_on_a_read_only_store_and_changes_no_byte(public_dir: Path) -> None:
    source = public_dir / "source"
    source.mkdir()
    writer = build_behind_store(source / "t.db")
    layouts = {name: public_dir / name for name in ("wal-and-shm", "wal-only", "checkpointed", "reference")}
    try:
        for name, folder in layouts.items():
            folder.mkdir()
            suffixes = {"wal-and-shm": ("", "-wal", "-shm"), "wal-only": ("", "-wal")}.get(name, ("", "-wal"))
            for suffix in suffixes:
                shutil.copyfile(source / f"t.db{suffix}", folder / f"t.db{suffix}")
    finally:
        writer.close()
    assert (layouts["wal-only"] / "t.db-wal").stat().st_size > 0  # committed frames not checkpointed
    for name in ("checkpointed", "reference"):  # closing the last connection checkpoints the -wal
        conn = sqlite3.connect(layouts[name] / "t.db")
        conn.execute("SELECT count(*) FROM events").fetchone()
        conn.close()
        assert not (layouts[name] / "t.db-wal").exists()
    with open_store(layouts["reference"] / "t.db") as reference:  # what a writer's catch-up makes
        materializer(reference).catch_up()
    artifact_id = json.loads(run_cli(layouts["reference"] / "t.db", "artifacts", "fix", "--json").stdout)[0][
        "artifact_id"
    ]
    reads = [*READS, ("artifact", artifact_id[:12], "--limit", "5")]
    expected = run_all(layouts["reference"] / "t.db", reads)
    for args, done in expected.items():
        assert done.returncode == 0, (args, done.stderr)
    assert "ro-last" in expected[("log", "other")].stdout
    assert json.loads(expected[("verify", "--json")].stdout)["ok"] is True

    for name in ("wal-only", "wal-and-shm", "checkpointed"):
        folder = layouts[name]
        prefix = make_read_only(folder)
        before = hashes(folder)
        for args, done in run_all(
            folder / "t.db", reads if name == "wal-only" else reads[:5], prefix
        ).items():
            assert (name, args, done.returncode, done.stderr) == (name, args, 0, expected[args].stderr)
            assert done.stdout == expected[args].stdout, (name, args)
        assert hashes(folder) == before, name


def test_a_read_folds_what_is_not_materialized_in_memory(tmp_path: Path) -> None:
    """The projections a read-only store folds equal the rows a writer's catch-up writes, whether
    the file's rows are behind the log or missing altogether; the file is not touched."""
    behind = tmp_path / "behind.db"
    build_behind_store(behind).close()
    bare = tmp_path / "bare.db"  # never materialized: every projection folded from zero
    with SQLiteStore.open(bare) as writer:
        writer.append("s", [MessageAppended(role="user", content=f"message {i}") for i in range(30)])
    for path in (behind, bare):
        caught_up = tmp_path / "caught-up.db"
        shutil.copyfile(path, caught_up)
        with open_store(caught_up) as store:
            materializer(store).catch_up()
            want = materializer(store).snapshots()
            want_sessions = store.sessions()
        before = hashlib.sha256(path.read_bytes()).hexdigest()
        with open_store(path, readonly=True) as reader:
            assert reader.pending_token_counts() > 0
            assert reader.sessions() == want_sessions  # token sums include the folded counts
            materializer(reader).catch_up()
            assert materializer(reader).snapshots() == want
            assert materializer(reader).differences() == []
            assert reader.verify().ok
            materializer(reader).catch_up()  # the shadow is made again after verify dropped it
            assert materializer(reader).snapshots() == want
        assert hashlib.sha256(path.read_bytes()).hexdigest() == before
        caught_up.unlink()


def test_a_read_only_store_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with open_store(path) as store:
        store.append("s", [MessageAppended(role="user", content="hi")])
    before = path.read_bytes()
    with open_store(path, readonly=True) as reader:
        with pytest.raises(StoreError, match="read-only"):
            reader.append("s", [MessageAppended(role="user", content="again")])
        with pytest.raises(StoreError, match="read-only"):
            materializer(reader).rebuild()
        assert [r.event.content for r in reader.read_session("s")] == ["hi"]  # type: ignore[union-attr]
    assert path.read_bytes() == before
    with pytest.raises(StoreError, match="no turnlog store"):
        SQLiteStore.open(tmp_path / "missing.db", readonly=True)
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(StoreError, match="by its path"):
        SQLiteStore.open(":memory:", readonly=True)


def _foreign_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("empty", "is empty (0 bytes), not a turnlog store"),
        ("text", "not a turnlog store (not an SQLite database)"),
        ("sqlite", "an SQLite database but not a turnlog store"),
    ],
)
def test_a_read_refuses_a_file_that_is_no_store_and_leaves_it_as_it_was(
    tmp_path: Path, runner: CliRunner, kind: str, message: str
) -> None:
    path = tmp_path / "x.db"
    if kind == "empty":
        path.touch()
    elif kind == "text":
        path.write_text("my notes\n" * 100)
    else:
        _foreign_sqlite(path)
    before = hashes(tmp_path)
    for args in (["sessions"], ["log", "s"], ["verify"], ["context", "s", "--budget", "100"]):
        result = runner.invoke(cli, ["--db", str(path), *args])
        assert result.exit_code == 1, result.output
        assert message in result.output and "Traceback" not in result.output
        assert result.output.count("\n") == 1
    assert hashes(tmp_path) == before  # no schema, no -wal or -shm


def test_db_refuses_memory_and_uris(
    tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    for db in (":memory:", "file::memory:?cache=shared", f"file:{tmp_path}/t.db?mode=rwc"):
        result = runner.invoke(cli, ["--db", db, "append", "s"], input='{"type": "message_appended", '
                               '"role": "user", "content": "hi"}')  # fmt: skip
        assert result.exit_code == 2, result.output
        assert "--db" in result.output and ("memory" in result.output or "not a file path" in result.output)
    assert list(tmp_path.iterdir()) == []
    # A file whose name starts with "file:" is reached as a relative path.
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(cli, ["--db", "./file:odd.db", "init"]).exit_code == 0
    assert runner.invoke(cli, ["--db", "./file:odd.db", "sessions"]).exit_code == 0
    assert (tmp_path / "file:odd.db").exists()


def behind(path: Path) -> tuple[int, int, list[int]]:
    """(head position, events without a count, each projection's checkpoint) as the file holds them."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        head = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]
        uncounted = conn.execute("SELECT count(*) FROM events WHERE tokens IS NULL").fetchone()[0]
        stored = (
            dict(conn.execute("SELECT name, position FROM projection_checkpoints").fetchall()) if head else {}
        )
    finally:
        conn.close()
    return head, uncounted, [stored.get(p.name, -1) for p in all_projections()]


def assert_caught_up(path: Path) -> None:
    head, uncounted, checkpoints = behind(path)
    assert uncounted == 0
    assert checkpoints == [head if head else -1] * len(checkpoints)


def test_every_write_path_leaves_the_materialized_state_caught_up(tmp_path: Path, runner: CliRunner) -> None:
    path = tmp_path / "t.db"
    db = ["--db", str(path)]

    def ok(*args: str, input: str | None = None) -> str:
        result = runner.invoke(cli, [*db, *args], input=input)
        assert result.exit_code == 0, (args, result.output)
        assert_caught_up(path)
        return result.output

    ok("init")
    ok("append", "fix", "--file", str(SESSION_FILE))
    first = json.loads(ok("log", "fix", "--json"))[1]["event_id"]
    ok("unpin", "fix", "demo-0002")
    ok("pin", "fix", first)
    ok("fork", "fix", "--at", "10", "--into", "fix-2")
    ok("todos", "fix-2", "--write", "-", input='["write the test"]')
    ok("context", "fix", "--budget", "3000", "--record")
    ok("compact", "fix", "--budget", "1500", "--keep-last", "4", "--during-run")
    ok("tool", "call", "fix", input='{"module": "history", "method": "search", "input": {"query": "round"}}')
    jsonl = tmp_path / "fix.jsonl"
    ok("export", "fix", "--output", str(jsonl))
    ok("--db", str(tmp_path / "copy.db"), "import", str(jsonl), "--format", "jsonl", "--session", "copy")
    assert_caught_up(tmp_path / "copy.db")

    # The API: a store from open_store, the recorder, and the actions on a plain SQLiteStore.
    with open_store(path) as store:
        store.append("api", [MessageAppended(role="user", content="from the API")])
    assert_caught_up(path)
    with session(str(path), "recorded", title="t") as recorder:
        recorder.user("hello")
        recorder.assistant("hi")
    assert_caught_up(path)
    with SQLiteStore.open(path) as plain:
        pin_message(plain, "api", plain.read_session("api")[0].event_id)
    assert_caught_up(path)
    # The rows written after each commit equal a rebuild from the log.
    assert json.loads(ok("verify", "--json"))["ok"] is True
