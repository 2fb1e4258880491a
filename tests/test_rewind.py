"""session_rewound and message_removed at append: what the store refuses, and the `turnlog rewind`
command."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import (
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
