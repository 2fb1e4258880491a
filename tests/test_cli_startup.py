"""The command line starts fast: `turnlog --help` and `--version` import no command module and none of
pydantic, sqlite-utils or tiktoken; `sessions` and `log` on a caught-up store load no tokenizer, no
event model (pydantic) and no projection machinery (they read it through store.sqlite_quick); every
public name still resolves. The help table equals each command's own help. (Timings are measured by
scripts/bench --only startup, never asserted here.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

import turnlog
import turnlog.store
from turnlog.cli_group import COMMANDS, cli, load_commands
from turnlog.store import MessageAppended, SQLiteStore, ToolCall, ToolReturned

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("pydantic", "sqlite_utils", "tiktoken", "zstandard", "rich", "genai_prices")

# Runs the console script's code in a fresh interpreter, then prints the modules it loaded.
PROBE = """
import json, sys
from turnlog.cli import main
sys.argv = ["turnlog", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print("\\nMODULES " + json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def loaded(*args: str, cwd: Path | None = None) -> tuple[str, int, set[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(args))],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=False,
    )
    output, _, tail = done.stdout.rpartition("\nMODULES ")
    data = json.loads(tail)
    return output, data["code"], set(data["modules"])


def top_level(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_help_and_version_import_nothing_heavy(args: list[str]) -> None:
    output, code, modules = loaded(*args)
    assert code == 0
    assert "turnlog" in output
    assert not top_level(modules) & set(HEAVY), sorted(top_level(modules) & set(HEAVY))
    assert not {m for m in modules if m.startswith("turnlog.commands.")}
    assert "turnlog.store.events" not in modules and "turnlog.store.sqlite" not in modules


def test_help_lists_every_command_with_its_short_help() -> None:
    output, code, _ = loaded("--help")
    assert code == 0
    for name in COMMANDS:
        assert f"\n  {name} " in output, name


def test_a_command_help_imports_only_its_module() -> None:
    output, code, modules = loaded("sessions", "--help")
    assert code == 0 and "List the sessions" in output
    commands = {m for m in modules if m.startswith("turnlog.commands.")}
    assert commands == {"turnlog.commands.session"}


def test_import_turnlog_is_light() -> None:
    code = "import json, sys, turnlog, turnlog.store; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    modules = set(json.loads(done.stdout))
    assert not top_level(modules) & set(HEAVY), sorted(top_level(modules) & set(HEAVY))


def _store(path: Path) -> None:
    with SQLiteStore.open(path) as store:
        store.append(
            "s1",
            [
                MessageAppended(role="user", content="list the files"),
                MessageAppended(role="assistant", tool_calls=(ToolCall(id="c1", name="ls"),)),
                ToolReturned(tool_call_id="c1", tool_name="ls", content="a.txt\nb.txt"),
                MessageAppended(role="assistant", content="two files"),
            ],
        )
    # Projections caught up by a writing command, as a user's store is.
    subprocess.run(
        [sys.executable, "-c", "from turnlog.cli import main; main()", "--db", str(path), "rebuild"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
        capture_output=True,
    )


# What `sessions` and `log` must not load on a caught-up store.
NOT_FOR_READS = {"tiktoken", "sqlite_utils", "pydantic", "pydantic_core", "genai_prices", "rich"}
NOT_FOR_READS_MODULES = {"turnlog.store.events", "turnlog.store.sqlite", "turnlog.projections.materialize"}


def test_sessions_and_log_work_without_loading_a_tokenizer_or_the_event_models(tmp_path: Path) -> None:
    db = tmp_path / "small.db"
    _store(db)
    for args in (["sessions"], ["sessions", "--json"]):
        output, code, modules = loaded("--db", str(db), *args)
        assert code == 0, output
        assert not top_level(modules) & NOT_FOR_READS, sorted(top_level(modules) & NOT_FOR_READS)
        assert not modules & NOT_FOR_READS_MODULES, sorted(modules & NOT_FOR_READS_MODULES)
    [row] = json.loads(output)
    assert row["session_id"] == "s1" and row["head_version"] == 4
    for args in (["log", "s1"], ["log", "s1", "--json"]):
        output, code, modules = loaded("--db", str(db), *args)
        assert code == 0, output
        assert not top_level(modules) & NOT_FOR_READS, sorted(top_level(modules) & NOT_FOR_READS)
        assert not modules & NOT_FOR_READS_MODULES, sorted(modules & NOT_FOR_READS_MODULES)
    assert json.loads(output)[2]["event"]["content"] == "a.txt\nb.txt"
    output, code, modules = loaded("--db", str(db), "log", "s1")
    assert "user: list the files" in output and "ls [c1]: a.txt" in output and "two files" in output


def test_the_help_table_is_each_commands_own_short_help() -> None:
    commands = load_commands()
    assert set(commands) == set(COMMANDS), "every command is in COMMANDS, and nothing else"
    for name, command in commands.items():
        module, short = COMMANDS[name]
        assert command.callback is not None and command.callback.__module__ == module, name
        # What click would list for the command itself, uncut.
        assert short == command.get_short_help_str(limit=10_000), name


def test_an_unknown_command_is_a_usage_error() -> None:
    _, code, _ = loaded("no-such-command")
    assert code == 2
    assert cli.get_command(click.Context(cli), "no-such-command") is None


def test_every_public_name_resolves() -> None:
    for name in turnlog.__all__:
        assert getattr(turnlog, name) is not None, name
    for name in turnlog.store.__all__:
        assert getattr(turnlog.store, name) is getattr(turnlog, name), name
    assert set(turnlog.__all__) <= set(dir(turnlog))
    namespace: dict[str, object] = {}
    exec("from turnlog import open_store, build_context, SessionRecorder, EVENT_ADAPTER", namespace)
    assert callable(namespace["build_context"])
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        turnlog.nope  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        turnlog.store.nope  # type: ignore[attr-defined]  # noqa: B018


def test_a_lazy_tokenizer_loads_on_first_count(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "a.db") as store:
        store.append("s", [MessageAppended(role="user", content="hello")])
    with SQLiteStore.open(tmp_path / "a.db", readonly=True) as store:
        assert not store.tokenizer.loaded
        assert store.tokenizer.count("hello world") == 2
        assert store.tokenizer.loaded


def test_the_startup_bench_measures_and_renders() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from benchlib import startup
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    wall, cpu = startup.median_runs([sys.executable, "-c", "pass"], env, runs=1, warmup=0)
    assert wall > 0 and cpu >= 0
    with pytest.raises(RuntimeError, match="failed"):
        startup.median_runs([sys.executable, "-c", "raise SystemExit(3)"], env, runs=1, warmup=0)
    result = {
        "baseline_s": 0.02,
        "baseline_cpu_s": 0.02,
        "runs": 1,
        "warmup": 0,
        "load": 0.5,
        "commands": {"turnlog --help": {"seconds": 0.06, "ratio": 3.0, "cpu_ratio": 2.9, "target": 5.0}},
    }
    text = startup.render(result, "scripts/bench --only startup")
    assert text.startswith(startup.HEADING)
    assert "| `turnlog --help` | 60.0 ms | 3.0× | 2.9× | ≤ 5× | yes |" in text
