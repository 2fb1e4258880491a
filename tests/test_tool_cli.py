"""`turnlog tool`: call (envelope on standard input, recorded in the log), schema, help."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import turnlog.tool as tool
from store import MessageAppended, SQLiteStore, ToolReturned, load_tokenizer
from turnlog.cli import cli

SESSION_FILE = Path(__file__).parent.parent / "scripts" / "data" / "coding_session.jsonl"
SID = "fix-rounding"


@pytest.fixture
def db(tmp_path: Path, runner: CliRunner) -> Path:
    path = tmp_path / "t.db"
    result = runner.invoke(cli, ["--db", str(path), "append", SID, "--file", str(SESSION_FILE)])
    assert result.exit_code == 0, result.output
    return path


def run(runner: CliRunner, db: Path, *args: str, input: str | None = None) -> tuple[int, str]:
    result = runner.invoke(cli, ["--db", str(db), *args], input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def events(db: Path) -> int:
    with SQLiteStore.open(db) as store:
        return store.count_events()


def test_call_prints_the_result_and_records_it(runner: CliRunner, db: Path) -> None:
    envelope = '{"module": "history", "method": "search", "input": {"query": "KWD", "limit": 2}}'
    code, out = run(runner, db, "tool", "call", SID, input=envelope)
    assert code == 0
    with SQLiteStore.open(db) as store:
        expected = tool.call(store, SID, envelope, record=False)
        call, returned = store.read_session(SID, from_version=39)
    assert out == expected + "\n"
    assert isinstance(call.event, MessageAppended) and isinstance(returned.event, ToolReturned)
    assert returned.event.content == expected
    assert call.event.tool_calls is not None and call.event.tool_calls[0].arguments == envelope


def test_call_json_no_record_and_tool_call_id(runner: CliRunner, db: Path) -> None:
    envelope = '{"module": "todos", "method": "read", "input": {}}'
    code, out = run(runner, db, "tool", "call", SID, "--no-record", "--json", input=envelope)
    data = json.loads(out)
    assert code == 0 and data["method"] == "todos.read" and not data["is_error"] and data["recorded"] == []
    assert data["result"].startswith("Todos: 3 of 3 completed")
    assert events(db) == 38
    code, out = run(runner, db, "tool", "call", SID, "--tool-call-id", "call_9", "--json", input=envelope)
    [recorded] = json.loads(out)["recorded"]
    assert code == 0 and recorded["type"] == "tool_returned" and recorded["version"] == 39
    code, out = run(runner, db, "tool", "call", SID, "--no-record", "--tool-call-id", "x", input=envelope)
    assert code == 2 and "exclude each other" in out


def test_refused_call_exits_1_and_writes_nothing(runner: CliRunner, db: Path) -> None:
    envelope = '{"module": "artifacts", "method": "read", "input": {"mode": "tail"}}'
    code, out = run(runner, db, "tool", "call", SID, input=envelope)
    assert code == 1 and "Did you mean history.read?" in out and "Nothing was written." in out
    code, out = run(runner, db, "tool", "call", SID, input="not json")
    assert code == 1 and "not valid JSON" in out and "Traceback" not in out
    assert events(db) == 38
    code, out = run(runner, db, "tool", "call", "nope", input=envelope)
    assert code == 1 and "no session 'nope'" in out


def test_call_max_tokens(runner: CliRunner, db: Path) -> None:
    envelope = '{"module": "history", "method": "read", "input": {"mode": "event", "event_id": "demo-0011"}}'
    code, out = run(runner, db, "tool", "call", SID, "--max-tokens", "150", "--no-record", input=envelope)
    assert (
        code == 0 and load_tokenizer().count(out.rstrip("\n")) <= 150 and "[the rest: artifacts.read" in out
    )
    code, out = run(runner, db, "tool", "call", SID, "--max-tokens", "10", input=envelope)
    assert code == 2


@pytest.mark.parametrize("provider", tool.PROVIDERS)
def test_schema(runner: CliRunner, provider: str) -> None:
    result = runner.invoke(cli, ["tool", "schema", "--format", provider])
    assert result.exit_code == 0
    assert json.loads(result.output) == tool.tool_definition(provider)  # type: ignore[arg-type]
    assert runner.invoke(cli, ["tool", "schema", "--format", "gemini"]).exit_code == 2


def test_help(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["tool", "help", "--tokens"])
    assert result.exit_code == 0 and result.output.startswith(tool.description())
    assert result.output.rstrip().endswith(" tokens)")
    result = runner.invoke(cli, ["tool", "help", "history.read"])
    assert result.exit_code == 0 and result.output == tool.help_card("history.read") + "\n"
    assert runner.invoke(cli, ["tool", "help", "history.reed"]).exit_code == 2
    data = json.loads(runner.invoke(cli, ["tool", "help", "--json"]).output)
    assert data == {
        "method": None,
        "text": tool.description(),
        "tokens": load_tokenizer().count(data["text"]),
    }
    assert data["tokens"] < 600


def test_every_tool_command_has_help(runner: CliRunner) -> None:
    for name in ("call", "schema", "help"):
        result = runner.invoke(cli, ["tool", name, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.output
