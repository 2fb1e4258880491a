"""Forks: a new session that shares its parent's history up to a version without copying events.
Every projection of the fork sees the prefix as it was at the fork; appends to either never affect
the other; a fork reuses its parent's summaries by key instead of paying for them again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.test_compaction import long_session
from turnlog.actions import fork_session
from turnlog.cli import cli
from turnlog.compaction import CompactionOptions, compact
from turnlog.projections.artifacts import list_artifacts
from turnlog.projections.context import INTERRUPTED, ContextPolicy, build_context
from turnlog.projections.summaries import list_summaries
from turnlog.projections.todos import current_todos
from turnlog.store import (
    ArtifactWritten,
    MessageAppended,
    MessagePinned,
    MessageUnpinned,
    SQLiteStore,
    SummaryRecorded,
    TodoItem,
    TodosUpdated,
    ToolCall,
    ToolReturned,
)
from turnlog.summarizers import SummaryRequest

POLICY = ContextPolicy(budget=100_000, index=False)
"""The messages only (the artifact index is checked on its own)."""


def contents(built: Any) -> list[str]:
    return [m["content"] for m in built.rendered if m.get("content")]


@pytest.fixture
def store() -> Any:
    s = SQLiteStore.open(":memory:")
    yield s
    s.close()


def test_the_fork_sees_the_prefix_and_only_it(store: SQLiteStore) -> None:
    keep = MessageAppended(role="user", content="never delete data")
    store.append(
        "p",
        [
            MessageAppended(role="system", content="sys"),
            keep,
            MessageAppended(role="assistant", content="reading", tool_calls=(ToolCall(id="c1", name="cat"),)),
            TodosUpdated(todos=(TodoItem(id="1", content="read", status="in_progress"),)),
            ArtifactWritten(name="notes.md", content="early notes"),
            MessagePinned(target_event_id=keep.event_id),
        ],
    )
    fork_session(store, "p", 6, "f")
    # The parent goes on: a result for c1, an unpin, another todo list, another artifact.
    store.append(
        "p",
        [
            ToolReturned(tool_call_id="c1", tool_name="cat", content="late result"),
            MessageUnpinned(target_event_id=keep.event_id),
            TodosUpdated(todos=(TodoItem(id="1", content="read", status="completed"),)),
            ArtifactWritten(name="later.md", content="later"),
            MessageAppended(role="user", content="parent only"),
        ],
    )
    store.append("f", [MessageAppended(role="user", content="fork only")])
    fork = build_context(store, "f", POLICY)
    assert contents(fork) == ["sys", "never delete data", "reading", INTERRUPTED, "fork only"]
    assert [e.category for e in fork.entries][1] == "pinned"  # pinned before the fork, unpinned after it
    assert [a.name for a in list_artifacts(store, "f")] == ["notes.md"]
    indexed = build_context(store, "f", ContextPolicy(budget=100_000)).messages[1]
    assert indexed.category == "index" and "notes.md" in indexed.content and "later.md" not in indexed.content
    assert [t.status for t in current_todos(store, "f")] == ["in_progress"]
    parent = build_context(store, "p", POLICY)
    assert "fork only" not in contents(parent) and "late result" in contents(parent)
    assert [a.name for a in list_artifacts(store, "p")] == ["notes.md", "later.md"]
    assert store.verify().ok


def test_pins_and_runs_of_the_prefix_are_as_they_were_at_the_fork(store: SQLiteStore) -> None:
    first = MessageAppended(role="user", content="first")
    pinned = MessageAppended(role="user", content="pinned before the fork")
    store.append("p", [first, pinned, MessagePinned(target_event_id=pinned.event_id)])
    for i in range(30):
        store.append("p", [MessageAppended(role="assistant", content=f"step {i} " + "word " * 40)])
    head = store.head_version("p")
    fork_session(store, "p", head, "f")
    store.append("p", [MessageUnpinned(target_event_id=pinned.event_id)])
    small = ContextPolicy(budget=300)
    assert "pinned before the fork" in contents(build_context(store, "f", small))
    assert "pinned before the fork" not in contents(build_context(store, "p", small))
    # The fork can pin a message of its prefix; the parent does not see that pin.
    store.append("f", [MessagePinned(target_event_id=first.event_id)])
    assert "first" in contents(build_context(store, "f", small))


def test_a_fork_of_a_fork(store: SQLiteStore) -> None:
    store.append(
        "a", [MessageAppended(role="user", content="a1"), MessageAppended(role="assistant", content="a2")]
    )
    fork_session(store, "a", 1, "b")
    store.append("b", [MessageAppended(role="assistant", content="b3")])
    fork_session(store, "b", 3, "c")
    store.append("c", [MessageAppended(role="user", content="c5")])
    assert contents(build_context(store, "c", POLICY)) == ["a1", "b3", "c5"]
    assert store.verify().ok


def test_a_fork_inherits_summaries_written_before_it(store: SQLiteStore) -> None:
    long_session(store, 40, sid="p")
    policy = ContextPolicy(budget=3000, max_tool_tokens=200)
    compact(store, "p", policy)
    before = [s.event_id for s in list_summaries(store, "p")]
    assert before
    fork_session(store, "p", store.head_version("p"), "f")
    assert [s.event_id for s in list_summaries(store, "f")] == before
    built = build_context(store, "f", policy)
    assert {e.event_ids[0] for e in built.entries if e.mode == "summary"} <= set(before)


def test_a_fork_reuses_the_parents_summaries_by_key(store: SQLiteStore) -> None:
    calls: list[tuple[int, int]] = []

    def summarizer(request: SummaryRequest) -> str:
        calls.append((request.first_version, request.last_version))
        return f"what happened in versions {request.first_version}-{request.last_version}"

    long_session(store, 60, sid="p")
    fork_session(store, "p", store.head_version("p"), "f")
    store.append("f", [MessageAppended(role="user", content="Now try it another way.")])
    policy = ContextPolicy(budget=2500, max_tool_tokens=200)
    options = CompactionOptions(keep_last=8, summary_tokens=100, max_input_tokens=1200)
    compact(store, "p", policy, summarizer, options=options)
    paid_by_parent = len(calls)
    assert paid_by_parent >= 2
    result = compact(store, "f", policy, summarizer, options=options)
    fork_summaries = [r.event for r in result.appended]
    reused = [s for s in fork_summaries if isinstance(s, SummaryRecorded) and s.reused_from]
    assert reused, "the fork summarized its shared prefix again instead of reusing the parent's summaries"
    assert len(calls) - paid_by_parent == len(fork_summaries) - len(reused)
    parents = {
        r.event.key: r.event
        for r in store.read_session("p", own=True)
        if isinstance(r.event, SummaryRecorded)
    }
    for summary in reused:
        assert summary.text == parents[summary.key].text and summary.usage is None


def test_fork_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    db = str(tmp_path / "t.db")
    data = Path(__file__).parent.parent / "scripts" / "data" / "coding_session.jsonl"
    assert runner.invoke(cli, ["--db", db, "append", "fix", "--file", str(data)]).exit_code == 0
    result = runner.invoke(cli, ["--db", db, "fork", "fix", "--at", "16", "--into", "retry", "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["version"] == 17
    result = runner.invoke(cli, ["--db", db, "fork", "fix", "--at", "99", "--into", "x"])
    assert result.exit_code == 1 and "from 1 to 38" in result.output
    result = runner.invoke(cli, ["--db", db, "fork", "fix", "--at", "3", "--into", "retry"])
    assert result.exit_code == 1 and "already exists" in result.output
    result = runner.invoke(cli, ["--db", db, "fork", "nope", "--at", "3", "--into", "y"])
    assert result.exit_code == 1 and "no session 'nope'" in result.output
    result = runner.invoke(cli, ["--db", db, "log", "retry", "--json"])
    assert [r["version"] for r in json.loads(result.output)][-2:] == [16, 17]
    assert runner.invoke(cli, ["--db", db, "verify"]).exit_code == 0
