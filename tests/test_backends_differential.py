"""The same events give the same answers on both backends: every command a user reads (context,
audit, artifacts, todos, replay, summaries, sessions, log, export, verify) prints the same bytes for
a store in a SQLite file and for one in a PostgreSQL schema, after the same writes — a real agent
session, a compaction, a policy, a pin, a fork and a rewind — and over generated sessions."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.helpers.postgres import drop_schema, new_schema_name, pg_url, require_pg
from tests.store_contract import session_events
from turnlog.cli import cli

ROOT = Path(__file__).resolve().parent.parent
SESSION = ROOT / "scripts" / "data" / "coding_session.jsonl"

WRITES: list[list[str]] = [
    ["append", "fix", "--file", str(SESSION)],
    ["context", "fix", "--budget", "2000", "--record"],
    ["compact", "fix", "--budget", "1200", "--max-tool-tokens", "200", "--keep-last", "6", "--during-run"],
    ["policy", "fix", "--budget", "1500", "--tool-output-mode", "run_tests=auto"],
    ["pin", "fix", "demo-0014", "--reason", "the diagnosis"],
    ["fork", "fix", "--at", "16", "--into", "retry"],
    ["rewind", "retry", "--to-version", "12"],
    ["import", str(ROOT / "scripts" / "data" / "openai_chat.json"), "--format", "openai", "--quiet"],
    ["unpin", "fix", "demo-0014"],
    ["rebuild", "--quiet"],
]
READS: list[list[str]] = [
    ["context", "fix", "--json"],
    ["context", "fix", "--budget", "900", "--format", "anthropic", "--json"],
    ["context", "fix", "--budget", "3000", "--at", "30", "--format", "text", "--manifest"],
    ["context", "retry", "--budget", "4000", "--json"],
    ["audit", "--json"],
    ["audit", "fix", "--by", "run", "--json"],
    ["audit", "fix", "--by", "category", "--json"],
    ["artifacts", "fix", "--json"],
    ["index", "fix"],
    ["todos", "fix", "--history", "--json"],
    ["todos", "retry", "--json"],
    ["replay", "fix", "--budget", "3000", "--json"],
    ["replay", "fix", "--call", "2", "--json"],
    ["summaries", "fix", "--json"],
    ["policy", "fix", "--json"],
    ["log", "retry", "--json"],
    ["sessions", "--json"],
    ["export", "fix"],
    ["export", "chat-1", "--format", "anthropic"],
    ["artifact", "65b9ff4b97cb", "--json"],
]
# What differs by nature: when each event was stored, hence the hashes that cover it (and a summary's
# reuse key, made of them), and the ids turnlog makes up for the events it writes itself (a summary,
# a pin, a fork's start): random uuids, shown whole (32 hex digits) or by their first 12. Content
# ids (sha256, 64 digits) stay.
VOLATILE = re.compile(
    r'("(?:recorded_at|first_recorded_at|last_recorded_at|last|prev_hash|hash|key|day|digest)": ?)"[^"]*"'
)
MADE_UP_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])|(?<![0-9a-f])[0-9a-f]{12}(?![0-9a-f])")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?")


def run(db: str, args: list[str]) -> str:
    code, out = outcome(db, args)
    assert code == 0, f"{args}: {out}"
    return out


def outcome(db: str, args: list[str]) -> tuple[int, str]:
    """The command's exit code and its output, masked (an error is an outcome to compare too)."""
    result = CliRunner().invoke(cli, ["--db", db, *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    masked = TIME.sub("…", MADE_UP_ID.sub("…", VOLATILE.sub(r'\1"…"', result.output)))
    return result.exit_code, re.sub(r"in \d+\.\d+ s\b", "in … s", masked)  # how long a rebuild took


@pytest.fixture
def stores(tmp_path: Path) -> Any:
    require_pg()
    schema = new_schema_name()
    try:
        yield str(tmp_path / "t.db"), f"{pg_url()}?schema={schema}"
    finally:
        drop_schema(schema)


def test_the_same_writes_read_the_same_on_both_backends(stores: tuple[str, str]) -> None:
    sqlite, postgres = stores
    for args in WRITES:
        assert run(sqlite, args) == run(postgres, args), args
    # The open run ends: the policy's run-end work (the run's long outputs summarized) on both.
    end = '{"type": "run_finished", "run_id": "run-3"}'
    ended = [CliRunner().invoke(cli, ["--db", db, "append", "fix"], input=end) for db in stores]
    assert [e.exit_code for e in ended] == [0, 0] and ended[0].stderr == ended[1].stderr == ""
    for args in READS:
        assert run(sqlite, args) == run(postgres, args), args
    envelope = json.dumps({"module": "history", "method": "search", "input": {"query": "rounding"}})
    answers = [
        CliRunner().invoke(cli, ["--db", db, "tool", "call", "fix", "--json"], input=envelope)
        for db in stores
    ]
    assert [a.exit_code for a in answers] == [0, 0]
    assert MADE_UP_ID.sub("…", answers[0].output) == MADE_UP_ID.sub("…", answers[1].output)
    for db in stores:
        assert run(db, ["verify"]).startswith("ok: ")


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(sessions=st.lists(session_events(max_size=10), min_size=1, max_size=3))
def test_generated_sessions_read_the_same_on_both_backends(
    sessions: list[list[Any]], tmp_path_factory: Any
) -> None:
    require_pg()
    # NUL in text: PostgreSQL projections show U+FFFD for it (test_nul_text_on_postgresql); the
    # rest must read the same.
    assume(not any("\\u0000" in event.model_dump_json() for events in sessions for event in events))
    sqlite = str(tmp_path_factory.mktemp("diff") / "t.db")
    schema = new_schema_name()
    postgres = f"{pg_url()}?schema={schema}"
    try:
        for index, events in enumerate(sessions):
            payload = json.dumps([event.model_dump(mode="json") for event in events])
            for db in (sqlite, postgres):
                result = CliRunner().invoke(cli, ["--db", db, "append", f"s{index}", "--json"], input=payload)
                assert result.exit_code == 0, result.output
        for index in range(len(sessions)):
            for args in (
                ["context", f"s{index}", "--budget", "3000", "--json"],
                ["todos", f"s{index}", "--json"],
                ["artifacts", f"s{index}", "--json"],
                ["audit", f"s{index}", "--by", "run", "--json"],
                ["log", f"s{index}", "--json"],
            ):
                # A generated session may not fit the budget: then both must refuse it alike.
                assert outcome(sqlite, args) == outcome(postgres, args), args
    finally:
        drop_schema(schema)


def test_nul_text_on_postgresql(stores: tuple[str, str]) -> None:
    """Text holding NUL: the log keeps it exactly on both backends; PostgreSQL's projection rows, which
    cannot hold NUL, show U+FFFD in its place; nothing fails."""
    events = [
        {"type": "session_started", "title": "a\u0000b", "model": "m\u0000"},
        {"type": "message_appended", "role": "user", "content": "x\u0000y"},
        {"type": "todos_updated", "todos": [{"id": "1", "content": "do\u0000it"}]},
        {"type": "artifact_written", "name": "n\u0000.txt", "content": "c\u0000"},
    ]
    for db in stores:
        result = CliRunner().invoke(cli, ["--db", db, "append", "s"], input=json.dumps(events))
        assert result.exit_code == 0, result.output
    sqlite, postgres = stores
    assert run(sqlite, ["log", "s", "--json"]) == run(postgres, ["log", "s", "--json"])
    assert run(sqlite, ["context", "s", "--budget", "500", "--no-index", "--json"]) == run(
        postgres, ["context", "s", "--budget", "500", "--no-index", "--json"]
    )
    assert run(sqlite, ["todos", "s", "--json"]) == run(postgres, ["todos", "s", "--json"])  # JSON keeps it
    assert '"title": "a\\u0000b"' in run(sqlite, ["sessions", "--json"])
    assert '"title": "a\ufffdb"' in run(postgres, ["sessions", "--json"])
    for db in stores:
        assert run(db, ["verify"]).startswith("ok: ")


def test_the_recorder_and_the_langgraph_saver_open_a_postgresql_url(stores: tuple[str, str]) -> None:
    _, postgres = stores
    import turnlog

    with turnlog.session(postgres, "rec", title="on a server") as rec:
        rec.system("You are terse.")
        rec.user("hello")
        with rec.run():
            rec.assistant("hi")
        assert rec.context(budget=500).total_tokens > 0
    from langgraph.graph import END, START, MessagesState, StateGraph

    from turnlog.integrations.langgraph import TurnlogSaver

    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [("ai", f"you said {state['messages'][-1].content}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    steps: dict[str, Any] = {}
    for db in stores:
        saver = TurnlogSaver(db)
        try:
            graph = builder.compile(checkpointer=saver)
            config: Any = {"configurable": {"thread_id": "t1"}}
            graph.invoke({"messages": [("user", "ping")]}, config)
            state = graph.get_state(config)
            assert [m.content for m in state.values["messages"]] == ["ping", "you said ping"]
            # Metadata filters: each backend as its LangGraph saver compares (the same answers here).
            steps[db] = [
                [c.metadata.get("step") for c in saver.list(config, filter=wanted)]
                for wanted in (
                    {"source": "loop"},
                    {"step": 1},
                    {"source": "input", "step": -1},
                    {"nope": None},
                )
            ]
        finally:
            saver.close()
    assert steps[stores[0]] == steps[stores[1]] and steps[postgres][0]
    assert run(postgres, ["log", "t1"]).count("message_appended") == 2
    assert run(postgres, ["verify"]).startswith("ok: ")
