"""With --json, an error is one line of JSON on standard output, {"error": {"type", "message"}}, with
the exit status of the error (2 for usage errors, 1 otherwise), nothing on standard error, and the
store unchanged; ``type`` names the kind of error (the README lists them)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from turnlog.cli import cli
from turnlog.cli_group import CommandError, error_type
from turnlog.store import (
    CorruptStoreError,
    DuplicateEventError,
    InvalidEventError,
    MessageAppended,
    SQLiteStore,
    StoreClosedError,
    StoreError,
    TokenizerError,
    UnknownArtifactError,
    UnknownEventError,
    UnknownSessionError,
    VersionConflictError,
)
from turnlog.store.errors import LockBusy

ROOT = Path(__file__).resolve().parent.parent
MESSAGE = '{"type": "message_appended", "role": "user", "content": "hi"}'


@pytest.fixture
def seeded(db_path: Path) -> Path:
    with SQLiteStore.open(db_path) as store:
        store.append("s", [MessageAppended(role="user", content="hello")])
    return db_path


def _snapshot(db: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT position, session_id, version, hash FROM events").fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("args", "stdin", "kind", "status"),
    [
        (["log", "nope", "--json"], None, "not_found", 1),
        (["context", "nope", "--budget", "100", "--json"], None, "not_found", 1),
        (["context", "s", "--budget", "0", "--json"], None, "usage_error", 2),
        (["audit", "--by", "colour", "--json"], None, "usage_error", 2),
        (["log", "s", "--no-such-option", "--json"], None, "usage_error", 2),
        (["append", "s", "--json"], "not json", "bad_input", 1),
        (["append", "s", "--json"], '{"type": "message_appended", "role": "robot"}', "bad_input", 1),
        (["append", "s", "--expected-version", "7", "--json"], MESSAGE, "version_conflict", 1),
        (["artifact", "0123456789abcdef", "--json"], None, "not_found", 1),
        (["pin", "s", "ffffffffffff", "--json"], None, "not_found", 1),
        (["import", "missing-file.json", "--json"], None, "file_error", 1),
    ],
)
def test_errors_are_json_with_their_type(
    runner: CliRunner, seeded: Path, args: list[str], stdin: str | None, kind: str, status: int
) -> None:
    before = _snapshot(seeded)
    result = runner.invoke(cli, ["--db", str(seeded), *args], input=stdin)
    assert result.exit_code == status, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and result.stderr == ""
    data = json.loads(lines[0])
    assert data == {"error": {"type": kind, "message": data["error"]["message"]}}
    assert data["error"]["message"] and "Traceback" not in data["error"]["message"]
    assert _snapshot(seeded) == before


def test_without_json_the_error_is_one_text_line(runner: CliRunner, seeded: Path) -> None:
    result = runner.invoke(cli, ["--db", str(seeded), "log", "nope"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: no session 'nope'") and result.output.count("\n") == 1


def test_a_corrupt_store_is_a_corrupt_store_error_in_a_real_process(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_text("this is not a database\n")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from turnlog.cli import main; main()",
            "--db",
            str(bad),
            "sessions",
            "--json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 1 and done.stderr == ""
    assert json.loads(done.stdout)["error"]["type"] == "corrupt_store"
    assert bad.read_text() == "this is not a database\n"


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (UnknownSessionError("x"), "not_found"),
        (UnknownEventError("x"), "not_found"),
        (UnknownArtifactError("x"), "not_found"),
        (VersionConflictError("s", 1, 2), "version_conflict"),
        (DuplicateEventError("x"), "duplicate_event"),
        (InvalidEventError("x"), "bad_input"),
        (CorruptStoreError("x"), "corrupt_store"),
        (TokenizerError("x"), "tokenizer_error"),
        (LockBusy("x"), "busy"),
        (StoreClosedError("x"), "store_error"),
        (StoreError("x"), "store_error"),
        (OSError(2, "No such file"), "file_error"),
    ],
)
def test_each_library_error_has_its_type(error: Exception, kind: str) -> None:
    wrapped = click.ClickException(str(error))
    wrapped.__cause__ = error
    assert error_type(wrapped) == kind


def test_types_of_click_and_command_errors() -> None:
    assert error_type(click.UsageError("x")) == "usage_error"
    assert error_type(click.BadParameter("x")) == "usage_error"
    assert error_type(click.ClickException("x")) == "bad_input"
    assert error_type(CommandError("x", "verify_failed")) == "verify_failed"
