"""Terminal escape injection: stored text holding escape sequences, bidi overrides or other control
characters is shown escaped by every command, on a terminal as through a pipe, and in errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from turnlog.cli import cli
from turnlog.output import dumps, escape_text
from turnlog.store import (
    ArtifactWritten,
    MessageAppended,
    MessagePinned,
    MessageRemoved,
    RunFinished,
    RunStarted,
    SessionStarted,
    SQLiteStore,
    StateRecorded,
    SummaryRecorded,
    TodoItem,
    TodosUpdated,
    ToolCall,
    ToolReturned,
    UsageRecorded,
)
from turnlog.store.events import SummarizerInfo, summary_context_text

# Clears the screen, sets the window title, rings the bell, NUL, an 8-bit CSI, DEL and a bidi
# override: what a hostile tool output or web page can put into an agent's log.
HOSTILE = "A\x1b[2J\x1b]0;pwned\x07\x00\x9b31m\x7f\u202eB\u2066\r"
HOSTILE_ID = "id\x1b]0;x\x07"
# Everything a terminal acts on except newline and tab, independent of the code under test.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
SID = "s1"


def _seed(db: Path) -> dict[str, str]:
    """A store with hostile text in every kind of field; returns ids the commands need."""
    with SQLiteStore.open(db, create=True) as store:
        first = MessageAppended(role="user", content=HOSTILE, name=HOSTILE)
        call = ToolCall(id=HOSTILE_ID, name=HOSTILE, arguments=json.dumps({"path": HOSTILE}))
        events = [
            SessionStarted(title=HOSTILE, model=HOSTILE, metadata={"k": HOSTILE}),
            MessageAppended(role="system", content=HOSTILE),
            first,
            RunStarted(run_id=HOSTILE_ID),
            MessageAppended(role="assistant", content=HOSTILE, tool_calls=(call,)),
            ToolReturned(tool_call_id=HOSTILE_ID, tool_name=HOSTILE, content=HOSTILE * 400),
            ArtifactWritten(name=HOSTILE, content=HOSTILE + "\n" + HOSTILE, media_type=HOSTILE),
            TodosUpdated(todos=(TodoItem(id=HOSTILE_ID, content=HOSTILE),)),
            MessagePinned(target_event_id=first.event_id, reason=HOSTILE),
            UsageRecorded(model=HOSTILE, input_tokens=10, output_tokens=5, run_id=HOSTILE_ID),
            MessageAppended(role="assistant", content=HOSTILE),
            RunFinished(run_id=HOSTILE_ID),
            MessageAppended(role="user", content=HOSTILE),
            MessageAppended(role="assistant", content=HOSTILE),
        ]
        recorded = store.append(SID, events)
        artifact_id = recorded[6].event.artifact_id  # type: ignore[union-attr]
        store.append(
            SID,
            [
                SummaryRecorded(
                    first_version=3,
                    last_version=5,
                    level=0,
                    text=HOSTILE,
                    tokens=store.tokenizer.count(summary_context_text(3, 5, HOSTILE)),
                    summarizer=SummarizerInfo(name=HOSTILE, model=HOSTILE),
                    key="0" * 64,
                ),
                StateRecorded(
                    framework=HOSTILE, namespace=HOSTILE, key=HOSTILE, media_type=HOSTILE, content=HOSTILE
                ),
                MessageRemoved(target_event_ids=(first.event_id,), reason=HOSTILE, source=HOSTILE),
            ],
        )
    assert artifact_id is not None
    return {"message": first.event_id, "artifact": artifact_id}


def _openai_file(tmp_path: Path) -> str:
    path = tmp_path / "hostile.json"
    path.write_text(
        json.dumps(
            {
                "id": "chat-h",
                "title": HOSTILE,
                "messages": [
                    {"role": "user", "content": HOSTILE},
                    {"role": "assistant", "content": HOSTILE},
                ],
            }
        ),
        encoding="utf-8",
    )
    return str(path)


HOSTILE_TOOL = "ev\x1b]0;owned\x07il\x9b2J\u202etool"
"""A tool name as hostile as a name can be (no ``=``, which ends a TOOL=MODE's name)."""

ENVELOPE = json.dumps({"module": "history", "method": "read", "input": {"mode": "tail", "n": 20}})


def _hostile_store(tmp_path: Path) -> str:
    path = tmp_path / "other.db"
    if not path.exists():
        with SQLiteStore.open(path) as store:
            store.append("other", [{"type": "message_appended", "role": "user", "content": HOSTILE}])
    return str(path)


def _invocations(ids: dict[str, str], tmp_path: Path) -> list[tuple[list[str], str | None]]:
    """Every command (several ways where its output differs), with the standard input it reads."""
    todo = json.dumps([{"id": "t1", "content": HOSTILE}])
    append = json.dumps({"type": "message_appended", "role": "user", "content": HOSTILE})
    return [
        (["init"], None),
        (["append", SID], append),
        (["log", SID], None),
        (["sessions"], None),
        (["verify"], None),
        (["import", _openai_file(tmp_path), "--format", "openai", "--quiet"], None),
        (["context", SID, "--budget", "4000"], None),
        (["context", SID, "--budget", "4000", "--format", "anthropic", "--manifest"], None),
        (["context", SID, "--budget", "4000", "--format", "text", "--manifest"], None),
        (["artifacts", SID], None),
        (["artifact", ids["artifact"]], None),
        (["index", SID], None),
        (["todos", SID], None),
        (["todos", SID, "--history"], None),
        (["todos", SID, "--write", "-"], todo),
        (["audit"], None),
        (["audit", SID, "--by", "model"], None),
        (["audit", SID, "--by", "run"], None),
        (["audit", SID, "--by", "category"], None),
        (["pin", SID, ids["message"], "--reason", HOSTILE], None),
        (["unpin", SID, ids["message"], "--reason", HOSTILE], None),
        (["fork", SID, "--at", "5", "--into", "s2", "--title", HOSTILE], None),
        (["rewind", SID, "--to-version", "14", "--note", HOSTILE], None),
        (["rebuild", "--quiet"], None),
        (["compact", SID, "--budget", "300", "--keep-last", "1", "--dry-run"], None),
        (["compact", SID, "--budget", "300", "--keep-last", "1", "--allow-over-budget"], None),
        (["summaries", SID], None),
        (["policy", SID, "--tool-output-mode", f"{HOSTILE_TOOL}=auto", "--budget", "4000"], None),
        (["policy", SID], None),
        # A copy into a store with a (hostile) history of its own: refused, and said.
        (["copy", str(tmp_path / "t.db"), _hostile_store(tmp_path)], None),
        (["copy", str(tmp_path / "t.db"), str(tmp_path / "copy.db")], None),
        (["export", SID], None),
        (["export", SID, "--format", "openai"], None),
        (["export", SID, "--format", "anthropic"], None),
        (["export", SID, "--output", str(tmp_path / "out.jsonl")], None),
        (["replay", SID], None),
        (["replay", SID, "--call", "1"], None),
        (["tool", "call", SID], ENVELOPE),
        (["tool", "schema"], None),
        (["tool", "help"], None),
        # A stdio server (its output is the MCP protocol, for a program): only its error before
        # serving reaches a terminal.
        (["mcp", "--session", HOSTILE_ID], None),
        (["doctor"], None),
        (["datasette-metadata"], None),
        # A server: only its refusal of a hostile host name (before serving) can reach a terminal.
        (["serve", "--host", HOSTILE_ID, "--port", "0"], None),
    ]


def _command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> set[str]:
    paths: set[str] = set()
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            paths |= _command_paths(command, (*prefix, name))
        else:
            paths.add(" ".join((*prefix, name)))
    return paths


def _command_of(args: list[str]) -> tuple[list[str], click.Command]:
    """The command path at the start of ``args``, and its command."""
    command: click.Command = cli
    path: list[str] = []
    for word in args:
        if not isinstance(command, click.Group) or word not in command.commands:
            break
        command = command.commands[word]
        path.append(word)
    return path, command


def _has_json(args: list[str]) -> bool:
    return any(p.name == "as_json" for p in _command_of(args)[1].params)


def _assert_clean(result: Result, what: str) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), (what, result.exception)
    for stream in (result.stdout, result.stderr):
        found = RAW.search(stream)
        assert found is None, f"{what}: raw {found.group()!r} in {stream[:400]!r}"


@pytest.mark.parametrize("color", [False, True], ids=["pipe", "terminal"])
def test_no_command_prints_raw_control_characters(tmp_path: Path, color: bool) -> None:
    db = tmp_path / "t.db"
    ids = _seed(db)
    invocations = _invocations(ids, tmp_path)
    covered = {" ".join(_command_of(args)[0]) for args, _ in invocations}
    assert _command_paths(cli) <= covered, f"commands not tested: {_command_paths(cli) - covered}"
    runner = CliRunner()
    for args, stdin in invocations:
        variants = [args, [*args, "--json"]] if _has_json(args) else [args]
        for argv in variants:
            # color=True is a terminal: click strips colour codes only when piped, never titles.
            result = runner.invoke(cli, ["--db", str(db), *argv], input=stdin, color=color)
            _assert_clean(result, " ".join(argv))
            if argv[0] in ("log", "context", "artifact", "todos") and result.exit_code == 0:
                shown = ("\\x1b]0;pwned\\x07", "\\u001b]0;pwned\\u0007")
                assert any(s in result.stdout for s in shown), "the text is shown, escaped"


def test_json_output_escapes_as_json_does(tmp_path: Path, runner: CliRunner) -> None:
    db = tmp_path / "t.db"
    _seed(db)
    result = runner.invoke(cli, ["--db", str(db), "log", SID, "--json"], color=True)
    assert result.exit_code == 0 and RAW.search(result.stdout) is None
    assert "\\u001b]0;pwned\\u0007" in result.stdout and "\\u202e" in result.stdout
    contents = [r["event"].get("content") for r in json.loads(result.stdout)]
    assert HOSTILE in contents, "the JSON still means exactly the stored text"


@pytest.mark.parametrize(
    "args",
    [
        ["log", "no\x1b]0;x\x07such"],
        ["context", "no\x1b[2Jsuch", "--budget", "100"],
        ["pin", SID, "e\x1b]0;x\x07e"],
        ["artifact", "ab\x1b[2Jcdefgh"],
        ["no-such\x1b[2J-command"],
        ["log", SID, "--no-such\x1b]0;x\x07"],
        ["audit", "--by", "x\x1b[2J"],
    ],
)
def test_errors_quoting_the_input_are_escaped(tmp_path: Path, runner: CliRunner, args: list[str]) -> None:
    db = tmp_path / "t.db"
    _seed(db)
    result = runner.invoke(cli, ["--db", str(db), *args], color=True)
    assert result.exit_code != 0
    _assert_clean(result, " ".join(args))
    assert "\\x1b" in result.stderr


def test_escape_text_keeps_newline_tab_and_printable_text() -> None:
    assert escape_text("a\tb\nc é 日本 👍🏽\u200d") == "a\tb\nc é 日本 👍🏽\u200d"
    assert escape_text("\x1b[2J\x07\x00\x7f\x9b\u202e\ud800") == "\\x1b[2J\\x07\\x00\\x7f\\x9b\\u202e\\ud800"
    assert escape_text(escape_text(HOSTILE)) == escape_text(HOSTILE)
    assert json.loads(dumps({"k": HOSTILE})) == {"k": HOSTILE}
