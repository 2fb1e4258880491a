"""`turnlog tool`: call (envelope on standard input, recorded in the log), schema, help."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import turnlog.tool as tool
from turnlog.cli import cli
from turnlog.store import MessageAppended, SQLiteStore, ToolReturned, load_tokenizer

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


# --- --tool-call-id is a retry key: applied once per session --------------------------------------

ENTRY = [sys.executable, "-c", "from turnlog.cli import main; main()"]


def _call(db: Path, session: str, call_id: str, envelope: str) -> subprocess.CompletedProcess[str]:
    argv = [*ENTRY, "--db", str(db), "tool", "call", session, "--tool-call-id", call_id, "--json"]
    return subprocess.run(argv, input=envelope, capture_output=True, text=True)


def _pins_and_todos(db: Path, session: str) -> tuple[int, int, int]:
    with SQLiteStore.open(db) as store:
        types = [r.type for r in store.read_session(session)]
    return types.count("message_pinned"), types.count("todos_updated"), types.count("tool_returned")


@pytest.mark.parametrize("method", ["todos.write", "context.pin"])
def test_a_retried_call_is_applied_once(runner: CliRunner, db: Path, method: str) -> None:
    with SQLiteStore.open(db) as store:
        target = store.read_session(SID)[1].event_id
    data = (
        {"todos": [{"content": "retry me"}]}
        if method == "todos.write"
        else {"event_id": target, "reason": "r"}
    )
    module, name = method.split(".")
    envelope = json.dumps({"module": module, "method": name, "input": data})
    before = _pins_and_todos(db, SID), events(db)
    first = _call(db, SID, "call_retry", envelope)
    assert first.returncode == 0, first.stderr
    once = _pins_and_todos(db, SID), events(db)
    assert once[1] == before[1] + 2  # its effect and the tool_returned
    # Retried by a real process, with the same JSON spaced and ordered differently.
    same = json.dumps(json.loads(envelope), indent=3, sort_keys=True)
    second = _call(db, SID, "call_retry", same)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["result"] == json.loads(first.stdout)["result"]
    assert json.loads(second.stdout)["retried"] is True and json.loads(second.stdout)["recorded"] == []
    assert (_pins_and_todos(db, SID), events(db)) == once


def test_a_retry_with_other_input_is_refused(db: Path) -> None:
    write = json.dumps({"module": "todos", "method": "write", "input": {"todos": [{"content": "a"}]}})
    assert _call(db, SID, "call_1", write).returncode == 0
    count = events(db)
    other = _call(db, SID, "call_1", write.replace('"a"', '"b"'))
    assert other.returncode == 1 and other.stderr == ""  # --json: the error is JSON on stdout
    error = json.loads(other.stdout)["error"]["message"]
    assert error.startswith("tool call 'call_1'") and "already answered for another input" in error
    assert events(db) == count


def test_the_same_call_id_in_another_session_is_another_call(runner: CliRunner, db: Path) -> None:
    run(runner, db, "append", "other", input='{"type": "message_appended", "role": "user", "content": "x"}')
    write = json.dumps({"module": "todos", "method": "write", "input": {"todos": [{"content": "a"}]}})
    assert _call(db, SID, "call_1", write).returncode == 0
    elsewhere = _call(db, "other", "call_1", write)
    assert elsewhere.returncode == 0 and json.loads(elsewhere.stdout)["retried"] is False
    assert _pins_and_todos(db, "other")[1:] == (1, 1)


def test_a_retried_read_returns_the_first_result_even_after_new_events(runner: CliRunner, db: Path) -> None:
    read = json.dumps({"module": "history", "method": "read", "input": {"mode": "tail", "n": 2}})
    first = _call(db, SID, "call_read", read)
    run(runner, db, "append", SID, input='{"type": "message_appended", "role": "user", "content": "new"}')
    count = events(db)
    again = _call(db, SID, "call_read", read)
    assert json.loads(again.stdout)["result"] == json.loads(first.stdout)["result"]
    assert events(db) == count
