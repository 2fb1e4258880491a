"""Importing SWE-agent trajectories: the real GPT-4 run (its billed totals as run usage, reproduced
exactly by the estimate of each call's input), the native tool-calling history (paired calls), the
older thought/action history, demonstrations kept and marked, idempotent re-imports, and clear
errors that leave the store unchanged."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from turnlog.importers import import_conversations
from turnlog.importers.from_swe_agent import looks_like_swe_agent, parse_swe_agent
from turnlog.projections.estimates import session_estimates
from turnlog.store import (
    InvalidEventError,
    MessageAppended,
    SessionStarted,
    SQLiteStore,
    ToolReturned,
    UsageRecorded,
)

REAL = next((FIXTURES / "swe-agent").glob("gpt4__*/swe-agent__test-repo-i1.traj"))
NATIVE = FIXTURES / "swe_agent_native.traj"
OLDER = FIXTURES / "swe_agent_thought_action.traj"


def _events(store: SQLiteStore, session: str) -> list[Any]:
    return [r.event for r in store.read_session(session)]


def _item(event: MessageAppended | ToolReturned) -> dict[str, Any]:
    """The SWE-agent fields an event's origin keeps."""
    assert event.origin is not None and event.origin.framework == "swe-agent"
    assert isinstance(event.origin.item, dict)
    return event.origin.item


def test_the_real_run_imports_its_billed_totals_and_model_from_the_alias(file_store: SQLiteStore) -> None:
    history = json.loads(REAL.read_text())["history"]
    result = import_conversations(file_store, parse_swe_agent(REAL.read_text(), name=str(REAL)))
    assert [s["session_id"] for s in result.sessions] == ["swe-agent__test-repo-i1"]
    events = _events(file_store, "swe-agent__test-repo-i1")
    started, *messages, usage = events
    assert isinstance(started, SessionStarted)
    assert started.model == "gpt-4-1106-preview"  # `gpt4__...`: SWE-agent's alias
    assert started.title == "swe-agent__test-repo-i1"
    assert started.metadata is not None and started.metadata["demonstration_messages"] == 1
    assert [(m.role, m.content) for m in messages] == [(h["role"], h["content"]) for h in history]
    assert isinstance(usage, UsageRecorded)
    assert (usage.input_tokens, usage.output_tokens, usage.cost_usd, usage.calls) == (52_861, 326, 0.53839, 5)
    assert (usage.scope, usage.model, usage.source, usage.call_event_id) == (
        "run",
        "gpt-4-1106-preview",
        "swe-agent",
        None,
    )


def test_the_estimate_of_each_call_sums_to_the_billed_prompt_tokens(file_store: SQLiteStore) -> None:
    """SOURCE.md: the messages before each assistant message, counted by OpenAI's rule with
    cl100k_base, give the API's prompt tokens; the assistant messages its completion tokens."""
    import_conversations(file_store, parse_swe_agent(REAL.read_text(), name=str(REAL)))
    records = file_store.read_session("swe-agent__test-repo-i1")
    calls, runs = session_estimates(file_store, "swe-agent__test-repo-i1")
    assert [c.estimated_input for c in calls] == [10_211, 10_387, 10_564, 10_792, 10_907]
    assert sum(c.estimated_input for c in calls) == 52_861 == sum(r.billed_input for r in runs)
    assert all(c.exact and c.model == "gpt-4-1106-preview" and c.billed_input is None for c in calls)
    replies = [r for r in records if isinstance(r.event, MessageAppended) and r.event.role == "assistant"]
    assert sum(r.tokens or 0 for r in replies) == 326


def test_demonstrations_are_kept_unpinned_and_marked_in_the_origin() -> None:
    [conv] = parse_swe_agent(REAL.read_text(), name=str(REAL))
    messages = [e for e in conv.events if isinstance(e, MessageAppended)]
    demos = [m for m in messages if _item(m).get("is_demo") is True]
    assert len(demos) == 1
    demo = demos[0]
    assert demo.role == "user" and demo.pinned is None
    assert demo.content.startswith("Here is a demonstration")
    assert all(_item(m)["agent"] == "primary" for m in messages)
    # The older format: thought and action kept beside the text the model wrote.
    first_reply = next(m for m in messages if m.role == "assistant")
    assert _item(first_reply)["action"] == 'find_file "missing_colon.py"\n'
    assert first_reply.tool_calls is None


def test_re_importing_writes_nothing(file_store: SQLiteStore) -> None:
    first = import_conversations(file_store, parse_swe_agent(REAL.read_text(), name=str(REAL)))
    count = file_store.count_events()
    again = import_conversations(file_store, parse_swe_agent(REAL.read_text(), name=str(REAL)))
    assert first.appended == 14 and again.appended == 0
    assert file_store.count_events() == count


def test_model_and_session_given_win() -> None:
    [conv] = parse_swe_agent(REAL.read_text(), name=str(REAL), model="gpt-4-0613", session="mine")
    started, usage = conv.events[0], conv.events[-1]
    assert conv.session_id == "mine"
    assert isinstance(started, SessionStarted) and started.model == "gpt-4-0613"
    assert isinstance(usage, UsageRecorded) and usage.model == "gpt-4-0613"


def test_without_a_path_the_model_is_unknown_and_the_id_derived_from_the_first_messages() -> None:
    text = REAL.read_text()
    [conv] = parse_swe_agent(text)
    started, usage = conv.events[0], conv.events[-1]
    assert isinstance(started, SessionStarted) and started.model is None
    assert isinstance(usage, UsageRecorded) and usage.model == "unknown"
    assert conv.session_id.startswith("swe-agent-")
    grown = json.loads(text)
    grown["history"].append({"role": "user", "content": "one more", "agent": "primary"})
    [grown_conv] = parse_swe_agent(json.dumps(grown))
    assert grown_conv.session_id == conv.session_id


def test_native_tool_calling_history_pairs_each_result_with_its_call(file_store: SQLiteStore) -> None:
    name = "trajectories/me/default__gpt-4o__t-0.00/calc-1/calc-1.traj"
    import_conversations(file_store, parse_swe_agent(NATIVE.read_text(), name=name))
    started, *body, usage = _events(file_store, "calc-1")
    assert isinstance(started, SessionStarted)
    assert started.model == "gpt-4o-2024-08-06"  # from the replay_config SWE-agent 1.x keeps
    assert [type(e).__name__ for e in body] == [
        "MessageAppended",  # system
        "MessageAppended",  # demonstration
        "MessageAppended",  # task
        "MessageAppended",
        "ToolReturned",
        "MessageAppended",
        "ToolReturned",
        "MessageAppended",
        "ToolReturned",
    ]
    assert body[2].content.startswith("<uploaded_files>")  # a list of text parts, joined
    for call, result in zip(body[3::2], body[4::2], strict=True):
        assert isinstance(call, MessageAppended) and call.tool_calls is not None
        assert isinstance(result, ToolReturned)
        assert result.tool_call_id == call.tool_calls[0].id
        assert result.tool_name == call.tool_calls[0].name
        assert result.content.startswith("OBSERVATION:")
    edit = body[5]
    assert isinstance(edit, MessageAppended) and edit.tool_calls is not None
    assert json.loads(edit.tool_calls[0].arguments)["command"] == "str_replace"
    assert _item(body[1])["is_demo"] is True and "is_demo" not in _item(body[2])
    assert isinstance(usage, UsageRecorded)
    assert (usage.input_tokens, usage.output_tokens, usage.calls, usage.cost_usd) == (7416, 300, 3, 0.02154)


def test_older_history_stays_text_and_a_claude_alias_names_its_model(file_store: SQLiteStore) -> None:
    name = "trajectories/me/claude-opus__greet__default__t-0.00__p-0.95__c-2.00__install-1/greet-i1.traj"
    import_conversations(file_store, parse_swe_agent(OLDER.read_text(), name=name))
    started, *body, usage = _events(file_store, "greet-i1")
    assert isinstance(started, SessionStarted) and started.model == "claude-3-opus-20240229"
    assert [m.role for m in body] == [
        "system",
        "user",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert not any(isinstance(m, ToolReturned) or m.tool_calls for m in body)
    assert body[3].content == "Let's open the file.\n\n```\nopen greet.py\n```"
    assert body[4].content.startswith("[File: /repo/greet.py")  # the observation, the next user message
    assert isinstance(usage, UsageRecorded) and usage.cost_usd == 0.00081  # instance_cost, not total_cost


def _edit(path: Path, change: Callable[[dict[str, Any]], Any]) -> str:
    document = json.loads(path.read_text())
    replaced = change(document)
    return json.dumps(document if replaced is None else replaced)


def _set(target: Callable[[dict[str, Any]], dict[str, Any]], key: str, value: Any) -> Callable[[Any], None]:
    def change(document: Any) -> None:
        target(document)[key] = value

    return change


BAD: list[tuple[str, Path, Callable[[dict[str, Any]], Any] | str, str]] = [
    ("malformed", REAL, '{"history": [', "malformed JSON"),
    ("a list", REAL, lambda d: [d], "expected a SWE-agent trajectory"),
    ("no history", REAL, lambda d: {"info": d["info"]}, "'history' must be a list"),
    ("info not an object", REAL, _set(lambda d: d, "info", []), "'info' must be an object"),
    ("entry not an object", REAL, _set(lambda d: d, "history", [{"role": "user", "content": "x"}, 3]),
     "history[1]: expected an object"),
    ("unknown role", REAL, _set(lambda d: d["history"][2], "role", "robot"), "history[2].role: unknown role"),
    ("content a number", REAL, _set(lambda d: d["history"][1], "content", 7), "history[1].content: expected"),
    ("bad content part", NATIVE, _set(lambda d: d["history"][2], "content", [7]), "history[2].content[0]"),
    ("call without a name", NATIVE, _set(lambda d: d["history"][3]["tool_calls"][0]["function"], "name", ""),
     "history[3].tool_calls[0].function.name"),
    ("call without an id", NATIVE, _set(lambda d: d["history"][3]["tool_calls"][0], "id", None),
     "history[3].tool_calls[0].id"),
    ("result of no call", NATIVE, _set(lambda d: d["history"][4], "tool_call_ids", ["call_zz"]),
     "history[4].tool_call_ids: 'call_zz' answers no tool call"),
    ("result of two calls", NATIVE, _set(lambda d: d["history"][4], "tool_call_ids", ["call_v1", "call_e2"]),
     "history[4].tool_call_ids: a tool message answers one call"),
    ("tokens as text", REAL, _set(lambda d: d["info"]["model_stats"], "tokens_sent", "52861"),
     "info.model_stats: tokens_sent must be a whole number"),
    ("tokens missing", REAL, lambda d: d["info"]["model_stats"].pop("tokens_received") and None,
     "info.model_stats: 'tokens_received' is missing"),
    ("negative cost", REAL, _set(lambda d: d["info"]["model_stats"], "instance_cost", -1),
     "info.model_stats: instance_cost must be a number"),
    ("calls fractional", REAL, _set(lambda d: d["info"]["model_stats"], "api_calls", 2.5),
     "info.model_stats: api_calls must be a whole number"),
    ("stats not an object", REAL, _set(lambda d: d["info"], "model_stats", 3),
     "info.model_stats: expected an object"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "change", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_names_the_file_entry_and_field_and_writes_nothing(
    file_store: SQLiteStore, path: Path, change: Callable[[dict[str, Any]], Any] | str, message: str
) -> None:
    import_conversations(file_store, parse_swe_agent(OLDER.read_text(), name="runs/x/other.traj"))
    before = file_store.count_events()
    text = change if isinstance(change, str) else _edit(path, change)
    with pytest.raises(InvalidEventError) as caught:
        import_conversations(file_store, parse_swe_agent(text, name="runs/x/bad-1.traj"))
    assert message in str(caught.value)
    assert str(caught.value).startswith("'runs/x/bad-1.traj'")
    assert file_store.count_events() == before
    assert file_store.head_version("bad-1") == 0


def test_format_sniffing() -> None:
    for path in (REAL, NATIVE, OLDER):
        assert looks_like_swe_agent(path.read_text()[:2048]), path
    assert not looks_like_swe_agent((FIXTURES / "tau_bench_results.json").read_text()[:2048])
    assert not looks_like_swe_agent((FIXTURES / "openai_chat.json").read_text()[:2048])
    assert not looks_like_swe_agent((FIXTURES / "events_v1.jsonl").read_text()[:2048])
    assert not looks_like_swe_agent('{"messages": [], "history": []}')
