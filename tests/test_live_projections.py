"""Every projection that shows the conversation reads the live set: after a rewind or a removal the
undone events are not in the context, the session counts, the todo list or the artifact list; the
ledger keeps every usage (money is never undone); summaries over a range no longer live are hidden."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.store_contract import summary
from turnlog import open_store
from turnlog.projections.artifacts import list_artifacts
from turnlog.projections.context import build_context
from turnlog.projections.context_types import ContextPolicy
from turnlog.projections.ledger import audit
from turnlog.projections.sessions import list_sessions
from turnlog.projections.todos import current_todos, todo_history
from turnlog.store import (
    ArtifactWritten,
    ForkPoint,
    MessageAppended,
    MessageRemoved,
    SessionRewound,
    SessionStarted,
    TodoItem,
    TodosUpdated,
    ToolCall,
    ToolReturned,
    UsageRecorded,
)

POLICY = ContextPolicy(budget=100_000, format="openai")


def _texts(built: Any) -> list[str]:
    return [m.content for m in built.messages]


def test_a_rewind_takes_messages_out_of_the_context_and_a_later_one_brings_them_back(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as s:
        s.append("a", [SessionStarted(), MessageAppended(role="system", content="rules")])
        s.append("a", [MessageAppended(role="user", content=f"u{i}") for i in range(5)])  # versions 3-7
        s.append("a", [SessionRewound(to_version=4, reason="pop")])  # 8: u0, u1 stay
        assert _texts(build_context(s, "a", POLICY)) == ["rules", "u0", "u1"]
        s.append("a", [MessageAppended(role="user", content="new")])  # 9
        assert _texts(build_context(s, "a", POLICY)) == ["rules", "u0", "u1", "new"]
        s.append("a", [SessionRewound(to_version=7, reason="time_travel")])  # 10: back to u0..u4
        assert _texts(build_context(s, "a", POLICY)) == ["rules", "u0", "u1", "u2", "u3", "u4"]
        # Replay: the context as of the first rewind's position is still what it was then.
        position = s.read_session("a")[7].position
        assert _texts(build_context(s, "a", POLICY, at=position)) == ["rules", "u0", "u1"]
        s.append(
            "a",
            [SessionRewound(to_version=0, reason="delete"), MessageAppended(role="user", content="again")],
        )
        assert _texts(build_context(s, "a", POLICY)) == ["again"]


def test_a_removed_assistant_message_takes_its_tool_results(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as s:
        call = MessageAppended(role="assistant", tool_calls=(ToolCall(id="c1", name="f"),))
        other = MessageAppended(role="assistant", tool_calls=(ToolCall(id="c2", name="g"),))
        ret2 = ToolReturned(tool_call_id="c2", content="two")
        s.append(
            "a",
            [
                MessageAppended(role="user", content="go"),
                call,
                ToolReturned(tool_call_id="c1", content="one"),
                other,
                ret2,
                MessageAppended(role="assistant", content="done"),
            ],
        )
        s.append("a", [MessageRemoved(target_event_ids=(call.event_id,))])
        built = build_context(s, "a", POLICY)
        assert _texts(built) == ["go", "", "two", "done"]
        assert [m.tool_call_id for m in built.messages if m.role == "tool"] == ["c2"]
        # Removing a tool return alone leaves its call answered by a synthesized "interrupted" result.
        s.append("a", [MessageRemoved(target_event_ids=(ret2.event_id,))])
        tools = [m for m in build_context(s, "a", POLICY).messages if m.role == "tool"]
        assert [(m.tool_call_id, m.mode) for m in tools] == [("c2", "synthesized")]


def test_a_summary_over_a_range_no_longer_live_is_not_shown(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as s:
        s.append("a", [MessageAppended(role="user", content=f"u{i}") for i in range(4)])
        s.append("a", [summary(1, 3, "they said u0 to u2")])  # 5
        assert "they said" in _texts(build_context(s, "a", POLICY))[0]
        s.append("a", [SessionRewound(to_version=2)])  # versions 3-5 are undone, the summary too
        assert _texts(build_context(s, "a", POLICY)) == ["u0", "u1"]


def test_sessions_todos_artifacts_read_the_live_set_and_the_ledger_keeps_the_money(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as s:
        usage = UsageRecorded(model="gpt-4o", input_tokens=100, output_tokens=10)
        s.append(
            "a",
            [
                MessageAppended(role="user", content="u"),  # 1
                TodosUpdated(todos=(TodoItem(id="1", content="first"),)),  # 2
                ArtifactWritten(name="a.txt", content="kept"),  # 3
                MessageAppended(role="assistant", content="x", tool_calls=(ToolCall(id="c", name="f"),)),  # 4
                ToolReturned(tool_call_id="c", content="r"),  # 5
                TodosUpdated(todos=(TodoItem(id="2", content="second"),)),  # 6
                ArtifactWritten(name="b.txt", content="undone"),  # 7
                usage,  # 8
            ],
        )
        before = audit(s, "a").totals
        s.append("a", [SessionRewound(to_version=3, reason="pop")])
        assert [t.content for t in current_todos(s, "a")] == ["first"]
        assert [h.version for h in todo_history(s, "a")] == [2]
        assert [a.name for a in list_artifacts(s, "a")] == ["a.txt"]
        info = next(i for i in list_sessions(s) if i.session_id == "a")
        assert (info.user_messages, info.assistant_messages, info.tool_calls, info.tool_returns) == (
            1,
            0,
            0,
            0,
        )
        assert info.head_version == 9  # the log only grows
        after = audit(s, "a").totals
        assert (
            (after.calls, after.input, after.output)
            == (before.calls, before.input, before.output)
            == (1, 100, 10)
        )
        # As of a position before the rewind, everything was live.
        at = s.read_session("a")[7].position
        assert next(i for i in list_sessions(s, at=at) if i.session_id == "a").assistant_messages == 1
        assert [t.content for t in current_todos(s, "a", at=at)] == ["second"]


def test_a_fork_keeps_what_its_parent_rewinds_later(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as s:
        s.append("p", [MessageAppended(role="user", content=f"p{i}") for i in range(3)])
        s.append("c", [SessionStarted(parent=ForkPoint(session_id="p", version=3))])
        s.append("p", [SessionRewound(to_version=1)])
        assert _texts(build_context(s, "p", POLICY)) == ["p0"]
        assert _texts(build_context(s, "c", POLICY)) == ["p0", "p1", "p2"]
        s.append("c", [SessionRewound(to_version=2, reason="time_travel")])
        assert _texts(build_context(s, "c", POLICY)) == ["p0", "p1"]


def test_the_agent_tool_reads_the_live_history(tmp_path: Path) -> None:
    import turnlog.tool as tool

    def env(method: str, data: Any) -> dict[str, Any]:
        module, name = method.split(".")
        return {"module": module, "method": name, "input": data}

    with open_store(tmp_path / "s.db") as s:
        s.append("a", [MessageAppended(role="user", content=f"word{i}") for i in range(6)])
        s.append("a", [SessionRewound(to_version=2, reason="pop")])
        tail = tool.call(s, "a", env("history.read", {"mode": "tail", "n": 10}), record=False)
        assert "word1" in tail and "word2" not in tail and "session_rewound" not in tail
        found = tool.call(s, "a", env("history.search", {"query": "word"}), record=False)
        assert "word0" in found and "word5" not in found
        ranged = tool.call(
            s, "a", env("history.read", {"mode": "range", "from_version": 1, "to_version": 7}), record=False
        )
        assert "word1" in ranged and "word3" not in ranged


def test_replay_shows_each_call_with_the_live_set_of_its_time(tmp_path: Path) -> None:
    from turnlog.projections.replay import replay

    with open_store(tmp_path / "s.db") as s:
        undone = MessageAppended(role="user", content="first question")
        s.append("a", [undone, MessageAppended(role="assistant", content="first answer")])
        s.append("a", [SessionRewound(to_version=0, reason="pop")])
        s.append(
            "a",
            [MessageAppended(role="user", content="second"), MessageAppended(role="assistant", content="ok")],
        )
        calls = replay(s, "a", POLICY)
        assert len(calls) == 2  # both calls happened: a rewind never undoes a model call
        first, second = (c.context for c in calls)
        assert first is not None and second is not None
        assert _texts(first) == ["first question"]
        assert _texts(second) == ["second"]
        assert calls[1].dropped == [undone.event_id]


def test_after_a_delete_the_new_generations_first_user_message_is_kept(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as s:
        s.append("a", [MessageAppended(role="user", content="old task")])
        s.append("a", [SessionRewound(to_version=0, reason="delete")])
        s.append("a", [MessageAppended(role="user", content="the new task " * 20)])
        s.append("a", [MessageAppended(role="assistant", content=f"step {i} " * 30) for i in range(30)])
        built = build_context(s, "a", ContextPolicy(budget=400, format="openai"))
        assert built.messages[0].content.startswith("the new task")
        assert all("old task" not in m.content for m in built.messages)


def test_a_summary_replaced_by_an_undone_one_is_shown_again(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as s:
        s.append("a", [MessageAppended(role="user", content=f"u{i}") for i in range(4)])
        s.append("a", [summary(1, 2, "early part")])  # 5
        s.append("a", [summary(1, 3, "longer part", level=1)])  # 6: replaces the first
        assert _texts(build_context(s, "a", POLICY))[0].endswith("longer part")
        s.append("a", [SessionRewound(to_version=5)])
        texts = _texts(build_context(s, "a", POLICY))
        assert texts[0].endswith("early part") and texts[-2:] == ["u2", "u3"]  # (u0: the first user message)
        assert not any("longer part" in t for t in texts)


def test_compaction_after_a_removal_writes_summaries_the_context_shows(tmp_path: Path) -> None:
    from turnlog.compaction import CompactionOptions, compact

    with open_store(tmp_path / "s.db") as s:
        msgs = [
            MessageAppended(role="user" if i % 2 == 0 else "assistant", content=f"part {i} " + "word " * 80)
            for i in range(30)
        ]
        s.append("a", msgs)
        s.append("a", [MessageRemoved(target_event_ids=(msgs[10].event_id,))])
        policy = ContextPolicy(budget=1200, format="openai")
        result = compact(s, "a", policy, options=CompactionOptions(keep_last=4))
        assert result.appended
        written = [r.event for r in result.appended]
        assert all(not (e.first_version <= 11 <= e.last_version) for e in written)  # type: ignore[union-attr]
        built = build_context(s, "a", policy)
        shown = {e.event_ids[0] for e in built.entries if e.mode == "summary"}
        assert shown and shown <= {e.event_id for e in written}
        assert built.total_tokens <= 1200


def test_a_read_only_store_folds_the_live_set_it_has_not_materialized(tmp_path: Path) -> None:
    from turnlog.store import SQLiteStore

    db = tmp_path / "s.db"
    with SQLiteStore.open(db) as s:  # no projections materialized in the file
        s.append("a", [MessageAppended(role="user", content=f"u{i}") for i in range(3)])
        s.append("a", [SessionRewound(to_version=1)])
    with open_store(db, readonly=True) as r:
        assert _texts(build_context(r, "a", POLICY)) == ["u0"]
        assert next(i for i in list_sessions(r) if i.session_id == "a").user_messages == 1
