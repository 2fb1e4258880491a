"""The README's examples are run, and their outputs compared (tests/helpers/readme_blocks.py).

Each console or python block is one test, named by its file and line. The blocks of one file run in
order in one folder, so a test runs every earlier block first. TURNLOG_README_UPDATE=1 rewrites the
expected outputs from the real run instead of failing (check the diff before committing it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import readme_blocks
from tests.helpers.readme_blocks import Block, Runner, matches, parse, updated

UPDATE = os.environ.get("TURNLOG_README_UPDATE") == "1"
DOCUMENTS = readme_blocks.documents()
BLOCKS = [block for path in DOCUMENTS for block in parse(path)]
_runners: dict[Path, Runner] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_runners() -> Iterator[None]:
    yield
    for path, runner in list(_runners.items()):
        if UPDATE:
            readme_blocks.rewrite(path, list(runner.outcomes()))
        runner.close()
        del _runners[path]


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.not_run is None], ids=lambda b: b.name)
def test_example(block: Block) -> None:
    runner = _runners.get(block.path) or _runners.setdefault(block.path, Runner(block.path))
    outcome = runner.outcome(block)
    if outcome.failure and not (UPDATE and block.lang == "console"):
        pytest.fail(outcome.failure, pytrace=False)


def test_every_block_not_run_says_why() -> None:
    not_run = [(b.name, b.not_run) for b in BLOCKS if b.not_run is not None]
    print("\n".join(f"not run: {name}: {reason}" for name, reason in not_run))
    assert [name for name, reason in not_run if not reason] == []
    # The exceptions stay few (servers, PostgreSQL, fragments of the reader's own code).
    assert len(not_run) <= 12, not_run


def test_the_readme_has_examples_of_both_kinds() -> None:
    readme = [b for b in BLOCKS if b.path.name == "README.md" and b.not_run is None]
    assert sum(len(b.commands) for b in readme if b.lang == "console") >= 40
    assert any(b.lang == "python" for b in readme)


def test_parse_reads_commands_outputs_continuations_and_markers(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "Intro.\n\n```console\n$ echo a \\\n    b\na b\n\n$ true\n```\n\n"
        "<!-- not run: needs a server -->\n```console\n$ serve\n```\n"
        "<!-- not run -->\n\n```python\nprint(1)\n```\n```bash\nls\n```\n",
        encoding="utf-8",
    )
    first, second, third = parse(doc)
    assert (first.line, first.lang, first.not_run) == (3, "console", None)
    assert [(c.line, c.text, c.expected) for c in first.commands] == [
        (4, "echo a \\\n    b", ["a b"]),
        (8, "true", []),
    ]
    assert second.not_run == "needs a server"
    assert (third.lang, third.not_run) == ("python", "")


def test_a_stale_output_fails_and_update_rewrites_it(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```console\n$ printf 'one\\ntwo\\nthree\\n'\none\n...\n$ echo 1,977\n1,687\n"
        "$ printf 'x 0.41 s\\n'\nx ... s\n```\n\n```python\nraise SystemExit(3)\n```\n",
        encoding="utf-8",
    )
    runner = Runner(doc)
    try:
        console, python = (runner.outcome(b) for b in runner.blocks)
        assert console.failure is not None and "doc.md:5: $ echo 1,977" in console.failure
        assert "doc.md:2" not in console.failure and "doc.md:7" not in console.failure
        assert python.failure is not None and "exits 3" in python.failure
        assert readme_blocks.rewrite(doc, [console, python]) == 1
    finally:
        runner.close()
    assert "$ echo 1,977\n1,977\n" in doc.read_text(encoding="utf-8")
    rerun = Runner(doc)
    try:
        assert rerun.outcome(rerun.blocks[0]).failure is None
    finally:
        rerun.close()
    # The wildcard line and the wildcard part were kept.
    assert "one\n...\n" in doc.read_text(encoding="utf-8") and "x ... s" in doc.read_text(encoding="utf-8")


def test_blocks_share_one_folder_and_run_the_venvs_turnlog(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```console\n$ echo kept > note.txt\n```\n\n```console\n$ cat note.txt\nkept\n"
        "$ command -v turnlog\n.../turnlog\n$ ls scripts/data/coding_session.jsonl\n"
        "scripts/data/coding_session.jsonl\n```\n",
        encoding="utf-8",
    )
    runner = Runner(doc)
    try:
        assert [runner.outcome(b).failure for b in runner.blocks] == [None, None]
        assert runner.env["PATH"].startswith(str(Path(sys.executable).parent))
    finally:
        runner.close()


_line = st.text(alphabet="ab.", max_size=4).filter(lambda s: s.strip() != "...")


@given(st.lists(_line, max_size=6), st.integers(0, 6), st.integers(0, 6))
def test_a_wildcard_line_matches_any_run_of_lines(lines: list[str], start: int, stop: int) -> None:
    start, stop = sorted((min(start, len(lines)), min(stop, len(lines))))
    assert matches([*lines[:start], "...", *lines[stop:]], lines)
    assert matches(lines, lines)
    assert not matches([*lines, "extra"], lines)


@given(st.lists(_line, max_size=6), st.lists(_line, max_size=6))
def test_an_updated_output_always_matches_the_real_one(expected: list[str], actual: list[str]) -> None:
    assert matches(updated(expected, actual), actual)
    assert matches(updated(["...", *expected], actual), actual)


def test_the_module_runs_a_file_and_reports_what_differs(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("```console\n$ echo 2\n1\n```\n<!-- not run: a server -->\n```console\n$ x\n```\n")
    ran = subprocess.run(
        [sys.executable, "-m", "tests.helpers.readme_blocks", str(doc)],
        cwd=readme_blocks.ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(readme_blocks.ROOT)},
    )
    assert ran.returncode == 1
    assert "doc.md:2: $ echo 2" in ran.stdout and "doc.md:6: not run: a server" in ran.stdout


def _export(folder: Path, env: dict[str, str], *, whole: bool = True) -> bytes:
    """What a short session of commands leaves: the export of its sessions and verify's report.
    ``whole``: the README's opening commands (append, import, append); else one append, enough to show
    that ids and times vary."""

    def turnlog(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [str(readme_blocks.BIN / "turnlog"), *args],
            cwd=folder,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    data = readme_blocks.ROOT / "scripts" / "data"
    turnlog("init")
    if whole:
        turnlog("append", "fix-rounding", "--file", str(data / "coding_session.jsonl"))
        turnlog("import", str(data / "openai_chat.json"), "--format", "openai")
    message = {"type": "message_appended", "role": "user", "content": "hi"}
    turnlog("append", "chat-1", stdin=json.dumps(message))
    return (
        subprocess.run(
            [str(readme_blocks.BIN / "turnlog"), "export", *(["fix-rounding"] if whole else []), "chat-1"],
            cwd=folder,
            env=env,
            capture_output=True,
            check=True,
        ).stdout
        + turnlog("verify").encode()
    )


def test_deterministic_mode_makes_two_runs_byte_identical(tmp_path: Path) -> None:
    runs = []
    for name in ("one", "two"):
        folder = tmp_path / name
        folder.mkdir()
        env = readme_blocks.environment(tmp_path / f"{name}.state", tmp_path)
        runs.append(_export(folder, env))
    assert runs[0] == runs[1]
    assert b'"recorded_at":"2026-01-01T00:00:00.0' in runs[0]


def test_deterministic_mode_is_off_by_default(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLOG_")}
    env["PYTHONPATH"] = str(readme_blocks.ROOT)
    runs = []
    for name in ("one", "two"):
        folder = tmp_path / name
        folder.mkdir()
        runs.append(_export(folder, env, whole=False))
    assert runs[0] != runs[1]
    assert b"2026-01-01T00:00:00.0" not in runs[0]
