"""session_rewound and message_removed at append: what the store refuses, and the `turnlog rewind`
command."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnlog.store import (
    ForkPoint,
    InvalidEventError,
    MessageAppended,
    MessageRemoved,
    SessionRewound,
    SessionStarted,
    SQLiteStore,
    ToolReturned,
)


def _messages(n: int) -> list[MessageAppended]:
    return [MessageAppended(role="user", content=f"m{i}") for i in range(n)]


def test_a_rewind_must_go_back(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "s.db") as s:
        s.append("a", _messages(3))
        for to in (4, 5, 10**9):
            with pytest.raises(InvalidEventError, match=f"rewinds to version {to}: .* earlier version"):
                s.append("a", [SessionRewound(to_version=to)])
        assert s.head_version("a") == 3
        s.append("a", [SessionRewound(to_version=3)])  # to its head: undoes nothing, allowed
        s.append("a", [SessionRewound(to_version=0, reason="delete")])
        # Within a batch, the rewind's own version counts.
        with pytest.raises(InvalidEventError, match="rewinds to version 7"):
            s.append("a", [*_messages(1), SessionRewound(to_version=7)])
        s.append("a", [*_messages(1), SessionRewound(to_version=6)])
        assert s.head_version("a") == 7


def test_removal_targets_must_be_messages_of_this_session(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "s.db") as s:
        mine, theirs = _messages(1)[0], _messages(1)[0]
        s.append("a", [SessionStarted(), mine])
        s.append("b", [theirs])
        start = s.read_session("a")[0].event_id
        # Another session's message, an unknown id, an event that is not a message.
        for target in (theirs.event_id, "nope", start):
            with pytest.raises(
                InvalidEventError, match=f"no message or tool return with event id '{target}'"
            ):
                s.append("a", [MessageRemoved(target_event_ids=(mine.event_id, target))])
        assert s.head_version("a") == 2
        s.append("a", [MessageRemoved(target_event_ids=(mine.event_id,))])
        # A message or a tool return of the same batch may be removed.
        m, r = _messages(1)[0], ToolReturned(tool_call_id="c", content="x")
        s.append("a", [m, r, MessageRemoved(target_event_ids=(m.event_id, r.event_id))])


def test_a_fork_may_remove_its_parents_messages_up_to_the_fork(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "s.db") as s:
        shared, later = _messages(2)
        s.append("p", [shared])
        s.append("c", [SessionStarted(parent=ForkPoint(session_id="p", version=1))])
        s.append("p", [later])  # the parent's version 2, after the fork: not the child's
        with pytest.raises(InvalidEventError, match="no message"):
            s.append("c", [MessageRemoved(target_event_ids=(later.event_id,))])
        s.append("c", [MessageRemoved(target_event_ids=(shared.event_id,))])
        assert s.verify().ok


# --- turnlog rewind and turnlog log -------------------------------------------------------------


def _cli(db: Path, *args: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from turnlog.cli import cli

    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_the_rewind_command_records_a_rewind_and_log_marks_what_it_undid(tmp_path: Path) -> None:
    import json

    db = tmp_path / "t.db"
    with SQLiteStore.open(db) as s:
        s.append("chat", [MessageAppended(role="user", content=f"m{i}") for i in range(3)])
    code, out = _cli(db, "rewind", "chat", "--to-version", "1", "--reason", "pop", "--note", "undo")
    assert code == 0 and out.startswith("rewound chat to version 1")
    code, out = _cli(db, "log", "chat")
    lines = out.splitlines()
    assert "live" in lines[0]
    assert [("undone" in line) for line in lines[2:]] == [False, True, True, False]
    assert "rewind (pop) by cli to version 1: undo" in lines[-1]
    code, out = _cli(db, "log", "chat", "--json")
    assert [e["live"] for e in json.loads(out)] == [True, False, False, False]
    code, out = _cli(db, "rewind", "chat", "--to-version", "3", "--reason", "time_travel", "--json")
    assert code == 0 and json.loads(out)["version"] == 5
    code, out = _cli(db, "log", "chat", "--json")
    assert [e["live"] for e in json.loads(out)] == [True, True, True, False, False]


def test_bad_rewinds_are_one_clear_line_and_change_nothing(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with SQLiteStore.open(db) as s:
        s.append("chat", [MessageAppended(role="user", content=f"m{i}") for i in range(3)])
    for args, message in (
        (
            ["chat", "--to-version", "3"],
            "cannot rewind 'chat' to version 3: its head is version 3; give a version from 0 to 2",
        ),
        (["chat", "--to-version", "99"], "cannot rewind 'chat' to version 99"),
        (["nope", "--to-version", "0"], "no session 'nope'"),
        (["chat", "--to-version", "-1"], "Invalid value for '--to-version'"),
        (["chat", "--to-version", "1", "--reason", "undo"], "Invalid value for '--reason'"),
    ):
        code, out = _cli(db, "rewind", *args)
        assert code != 0 and message in out and "Traceback" not in out
        assert len([line for line in out.splitlines() if line.startswith("Error")]) == 1
    with SQLiteStore.open(db) as s:
        assert s.head_version("chat") == 3


def test_the_new_events_read_well_in_the_log(tmp_path: Path) -> None:
    from turnlog.store import StateRecorded

    db = tmp_path / "t.db"
    with SQLiteStore.open(db) as s:
        m = MessageAppended(role="user", content="hello")
        s.append("chat", [m, MessageRemoved(target_event_ids=(m.event_id,), reason="RemoveMessage")])
        s.append(
            "chat",
            [
                StateRecorded(
                    framework="langgraph",
                    namespace="",
                    key="ckpt-7",
                    media_type="application/json",
                    content="{}",
                )
            ],
        )
    code, out = _cli(db, "log", "chat")
    assert code == 0
    assert f"removed 1 message (RemoveMessage): {m.event_id[:12]}" in out
    assert "langgraph state ckpt-7 (application/json, 2 bytes)" in out
