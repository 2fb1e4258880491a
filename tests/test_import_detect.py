"""`turnlog import PATH` without --format: each format is recognized from its file; --model fills
in the model a transcript does not name; what cannot be told apart, or read, is refused in one
line with the formats to choose from, and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from turnlog.cli import cli
from turnlog.importers import formats, import_path
from turnlog.importers.registry import detect_format
from turnlog.store import InvalidEventError, SessionStarted, SQLiteStore

FIXTURES = Path(__file__).parent / "fixtures"


def run(*args: str, input: bytes | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("fixture", "fmt"),
    [
        ("openai_chat.json", "openai"),
        ("pydantic_ai_coding_run.json", "pydantic-ai"),
        ("pydantic_ai_native_tools.json", "pydantic-ai"),
        ("swe_agent_native.traj", "swe-agent"),
        ("swe_agent_thought_action.traj", "swe-agent"),
        (
            "swe-agent/gpt4__swe-agent__test-repo__default_from_url__t-0.00__p-0.95__c-3.00__install-1/"
            "swe-agent__test-repo-i1.traj",
            "swe-agent",
        ),
        ("tau_bench_results.json", "tau-bench"),
        ("claude-code/-home-dev-invoice/7d3f2a10-5b8e-4c21-9f4a-2e6b8c0d1a55.jsonl", "claude-code"),
        ("claude-code/-home-dev-invoice", "claude-code"),
        ("claude-code", "claude-code"),
        ("codex", "codex"),
        ("openhands/trajectory.json", "openhands"),
        ("openhands/plain_replies.json", "openhands"),
        ("aider/.aider.chat.history.md", "aider"),
        ("real/claude-code-log/sidechain_integrated.jsonl", "claude-code"),
        ("real/localpush-codex", "codex"),
    ],
)
def test_a_file_is_recognized(fixture: str, fmt: str) -> None:
    assert detect_format(FIXTURES / fixture) == fmt


def test_an_export_is_recognized_and_imported_without_format(tmp_path: Path) -> None:
    source, copy, export = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "s.jsonl"
    assert run("--db", str(source), "import", str(FIXTURES / "openai_chat.json"), "--session", "s")[0] == 0
    assert run("--db", str(source), "export", "s", "--format", "jsonl", "-o", str(export))[0] == 0
    assert detect_format(export) == "jsonl"
    code, out = run("--db", str(copy), "import", str(export), "--json")
    assert code == 0, out
    assert json.loads(out)[0]["session_id"] == "s"


def test_model_fills_in_what_the_transcript_does_not_name(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps({"id": "c1", "messages": [{"role": "user", "content": "hi"}]}))
    with SQLiteStore.open(tmp_path / "t.db") as store:
        used, result = import_path(store, path, model="gpt-4o")
        assert used == "openai" and result.appended >= 1
        first = store.read_session(result.sessions[0]["session_id"])[0].event
        assert isinstance(first, SessionStarted) and first.model == "gpt-4o"
    named = tmp_path / "named.json"
    named.write_text(
        json.dumps({"id": "c2", "model": "gpt-4.1", "messages": [{"role": "user", "content": "x"}]})
    )
    with SQLiteStore.open(tmp_path / "t.db") as store:
        _, result = import_path(store, named, model="gpt-4o")
        first = store.read_session(result.sessions[0]["session_id"])[0].event
        assert isinstance(first, SessionStarted) and first.model == "gpt-4.1"  # the source's own wins


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("just some notes\n", "cannot tell its format; give --format (one of "),
        ("", "cannot tell its format"),
    ],
)
def test_what_cannot_be_told_is_refused_in_one_line(tmp_path: Path, content: str, message: str) -> None:
    path, db = tmp_path / "notes.txt", tmp_path / "t.db"
    path.write_text(content)
    code, out = run("--db", str(db), "import", str(path))
    assert code == 1 and message in out and len(out.strip().splitlines()) == 1
    assert not db.exists()  # refused before a store was opened, or created


def test_a_folder_or_stdin_needs_a_format_that_reads_it(tmp_path: Path) -> None:
    code, out = run("--db", str(tmp_path / "t.db"), "import", str(tmp_path), "--format", "openai")
    assert code == 1 and "is a folder; format openai reads one file" in out
    code, out = run("--db", str(tmp_path / "t.db"), "import", "-", input=b"[]")
    assert code == 1 and "standard input: give --format" in out
    code, out = run("--db", str(tmp_path / "t.db"), "import", str(tmp_path / "missing.json"))
    assert code != 0 and "does not exist" in out


def test_every_format_is_described() -> None:
    assert {"jsonl", "openai", "pydantic-ai", "swe-agent", "tau-bench", "claude-code", "codex"} <= set(
        formats()
    )
    assert all(fmt.describe for fmt in formats().values())
    with pytest.raises(InvalidEventError, match="unknown import format 'nope'"):
        import_path(SQLiteStore.open(":memory:"), b"[]", "nope")


def test_a_folder_of_claude_code_logs_imports_without_format(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    code, out = run("--db", str(db), "import", str(FIXTURES / "claude-code"), "--json")
    assert code == 0, out
    sessions = json.loads(out)
    assert sessions and all(s["appended"] == s["events"] for s in sessions)
    code, out = run("--db", str(db), "import", str(FIXTURES / "claude-code"), "--json")
    assert code == 0 and all(s["appended"] == 0 for s in json.loads(out))  # a re-import writes nothing
