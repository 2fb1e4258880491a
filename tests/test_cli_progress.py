"""Progress bars: drawn on standard error when it is a terminal (a real pseudo-terminal here), never
when it is piped, nor with --quiet or --json; standard output stays the command's answer alone."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from turnlog import open_store
from turnlog.store import MessageAppended

ROOT = Path(__file__).resolve().parent.parent
ENTRY = [sys.executable, "-c", "from turnlog.cli import main; main()"]


def _store(db: Path, events: int = 60) -> None:
    with open_store(db) as store:
        store.append("s", [MessageAppended(role="user", content=f"message {i}") for i in range(events)])


def run_with_tty_stderr(*args: str) -> tuple[int, str, str]:
    """Run the command with standard error on a pseudo-terminal; returns status, stdout, terminal."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [*ENTRY, *args],
        stdout=subprocess.PIPE,
        stderr=slave,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100", "TERM": "xterm"},
    )
    os.close(slave)
    terminal = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            terminal += chunk
        elif process.poll() is not None:
            break
    assert process.stdout is not None
    out = process.stdout.read().decode()
    process.stdout.close()
    code = process.wait()
    os.close(master)
    return code, out, terminal.decode(errors="replace")


def run_piped(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENTRY, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )


def test_rebuild_draws_a_bar_on_a_terminal_only(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    _store(db)
    code, out, terminal = run_with_tty_stderr("--db", str(db), "rebuild")
    assert code == 0 and out.startswith("rebuilt every projection over 60 events")
    assert "rebuilding" in terminal and "60/60" in terminal
    piped = run_piped("--db", str(db), "rebuild")
    assert piped.returncode == 0 and piped.stderr == ""
    code, out, terminal = run_with_tty_stderr("--db", str(db), "rebuild", "--quiet")
    assert code == 0 and terminal == ""


@pytest.mark.parametrize("flag", ["--json", "--quiet"])
def test_import_and_copy_bars(tmp_path: Path, flag: str) -> None:
    source = tmp_path / "a.db"
    _store(source)
    code, out, terminal = run_with_tty_stderr("copy", str(source), str(tmp_path / "b.db"))
    assert code == 0 and "copied 60 events" in out and "copying" in terminal
    exported = tmp_path / "s.jsonl"
    assert run_piped("--db", str(source), "export", "s", "-o", str(exported)).returncode == 0
    code, out, terminal = run_with_tty_stderr("--db", str(tmp_path / "c.db"), "import", str(exported))
    assert code == 0 and "importing" in terminal
    piped = run_piped("--db", str(tmp_path / "d.db"), "import", str(exported))
    assert piped.returncode == 0 and piped.stderr == ""
    code, out, terminal = run_with_tty_stderr("copy", str(source), str(tmp_path / f"e{flag}.db"), flag)
    assert code == 0 and terminal == ""


def test_compact_draws_a_bar_per_summary(tmp_path: Path) -> None:
    db = tmp_path / "long.db"
    with open_store(db) as store:
        store.append(
            "s",
            [
                MessageAppended(
                    role="user" if i % 2 == 0 else "assistant", content=f"message {i} " + "word " * 300
                )
                for i in range(80)
            ],
        )
    code, out, terminal = run_with_tty_stderr(
        "--db", str(db), "compact", "s", "--budget", "2000", "--keep-last", "2"
    )
    assert code == 0, out
    assert "summarizing" in terminal and re.search(r"\D([2-9]|\d\d+)/\1\D", terminal), terminal
    piped = run_piped(
        "--db", str(tmp_path / "long.db"), "compact", "s", "--budget", "1000", "--keep-last", "2"
    )
    assert piped.stderr == ""
