"""Importing tau-bench results files: one session per entry with ids from task and trial, paired
tool calls, no invented usage, idempotent re-imports, and clear errors naming the entry and field
that leave the store unchanged (no entry of a bad file is written)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import FIXTURES
from turnlog.importers import import_conversations
from turnlog.importers.from_tau_bench import looks_like_tau_bench, parse_tau_bench
from turnlog.store import (
    InvalidEventError,
    MessageAppended,
    SessionStarted,
    SQLiteStore,
    ToolReturned,
    UsageRecorded,
)

RESULTS = FIXTURES / "tau_bench_results.json"
TEXT = RESULTS.read_text()
NAME = "results/tool-calling-gpt-4o-0.0_range_0-2_user-gpt-4o-llm_0703120000.json"
IDS = ["tau-bench-retail-0-0-b4bfdf1e", "tau-bench-retail-1-0-403c0772", "tau-bench-retail-0-1-6c7ca3f1"]


def test_one_session_per_entry_with_ids_from_task_and_trial(file_store: SQLiteStore) -> None:
    result = import_conversations(file_store, parse_tau_bench(TEXT, name=NAME))
    assert [s["session_id"] for s in result.sessions] == IDS
    entries = json.loads(TEXT)
    for entry, sid in zip(entries, IDS, strict=True):
        started, *body = [r.event for r in file_store.read_session(sid)]
        assert isinstance(started, SessionStarted)
        assert started.model == "gpt-4o"  # from the file's name
        assert started.metadata is not None
        assert (started.metadata["task_id"], started.metadata["trial"]) == (entry["task_id"], entry["trial"])
        assert started.metadata["reward"] == entry["reward"]
        assert started.metadata["info"] == entry["info"]
        assert len(body) == len(entry["traj"])
        assert not any(isinstance(e, UsageRecorded) for e in body)  # the file records none: unknown
    started = file_store.read_session(IDS[0])[0].event
    assert isinstance(started, SessionStarted) and started.title == "Hi, I'd like to cancel an order please."


def test_tool_calls_are_paired_with_their_results(file_store: SQLiteStore) -> None:
    import_conversations(file_store, parse_tau_bench(TEXT))
    body = [r.event for r in file_store.read_session(IDS[0])][1:]
    assert [type(e).__name__ for e in body].count("ToolReturned") == 3
    for index, event in enumerate(body):
        if isinstance(event, ToolReturned):
            call = body[index - 1]
            assert isinstance(call, MessageAppended) and call.tool_calls is not None
            assert call.content == ""  # content null
            assert (event.tool_call_id, event.tool_name) == (call.tool_calls[0].id, call.tool_calls[0].name)
    cancel = body[10]
    assert isinstance(cancel, MessageAppended) and cancel.tool_calls is not None
    assert json.loads(cancel.tool_calls[0].arguments) == {
        "order_id": "#W2378156",
        "reason": "no longer needed",
    }
    assert [e.role for e in body if isinstance(e, MessageAppended)][:3] == ["system", "user", "assistant"]


def test_re_importing_writes_nothing(file_store: SQLiteStore) -> None:
    first = import_conversations(file_store, parse_tau_bench(TEXT, name=NAME))
    count = file_store.count_events()
    again = import_conversations(file_store, parse_tau_bench(TEXT, name=NAME))
    assert first.appended == count and again.appended == 0
    assert file_store.count_events() == count


def _airline(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same tasks and trials run in the airline domain (its policy as the system prompt)."""
    out = json.loads(json.dumps(entries))
    for entry in out:
        entry["traj"][0]["content"] = "# Airline Agent Policy\nThe current time is 2024-05-15 15:00:00 EST."
    return out


def test_results_of_other_domains_and_runs_never_share_a_session(file_store: SQLiteStore) -> None:
    retail = json.loads(TEXT)
    airline = _airline(retail)
    other_run = json.loads(TEXT)
    other_run[0]["reward"] = 0.0  # the same task and trial, another outcome
    sessions = []
    for document in (retail, airline, other_run):
        result = import_conversations(file_store, parse_tau_bench(json.dumps(document), name=NAME))
        assert result.appended > 0
        sessions.append([s["session_id"] for s in result.sessions])
    assert sessions[0] == IDS
    assert [sid.rsplit("-", 1)[0] for sid in sessions[1]] == [
        "tau-bench-airline-0-0",
        "tau-bench-airline-1-0",
        "tau-bench-airline-0-1",
    ]
    assert sessions[2][0] not in IDS and sessions[2][1:] == IDS[1:]
    assert len({sid for found in sessions for sid in found}) == 7
    # A domain the system prompt does not name: task, trial and digest only.
    unnamed = json.loads(TEXT)
    unnamed[0]["traj"][0]["content"] = "You are a helpful agent."
    assert parse_tau_bench(json.dumps(unnamed[:2]))[0].session_id.startswith("tau-bench-0-0-")


def test_the_same_entries_map_to_the_same_sessions_however_the_file_changed(file_store: SQLiteStore) -> None:
    import_conversations(file_store, parse_tau_bench(TEXT, name=NAME))
    count = file_store.count_events()
    entries = json.loads(TEXT)
    # Renamed, re-indented, rewritten in another order (tau-bench's final write), or read from stdin
    # (where the name no longer gives the model, --model does).
    for text, name, model in (
        (TEXT, "renamed.json", "gpt-4o"),
        (json.dumps(entries, indent=4), NAME, None),
        (json.dumps(entries[::-1]), NAME, None),
        (json.dumps(entries), None, "gpt-4o"),
    ):
        conversations = parse_tau_bench(text, name=name, model=model)
        assert sorted(c.session_id for c in conversations) == sorted(IDS)
        assert import_conversations(file_store, conversations).appended == 0
    assert file_store.count_events() == count
    # A file that has grown (tau-bench appends each finished task) adds its new entry's session only.
    grown = [*entries, {**entries[1], "trial": 1}]
    result = import_conversations(file_store, parse_tau_bench(json.dumps(grown), name=NAME))
    assert [s["appended"] > 0 for s in result.sessions] == [False, False, False, True]
    assert result.sessions[3]["session_id"].startswith("tau-bench-retail-1-1-")


def test_session_and_model_given_win() -> None:
    conversations = parse_tau_bench(TEXT, name=NAME, session="run7", model="gpt-4o-2024-08-06")
    assert [c.session_id for c in conversations] == ["run7-0-0", "run7-1-0", "run7-0-1"]
    started = conversations[0].events[0]
    assert isinstance(started, SessionStarted) and started.model == "gpt-4o-2024-08-06"
    one = json.dumps(json.loads(TEXT)[1:2])
    assert [c.session_id for c in parse_tau_bench(one, session="run7")] == ["run7"]
    started = parse_tau_bench(one, name="other.json")[0].events[0]
    assert isinstance(started, SessionStarted) and started.model is None


def test_format_sniffing() -> None:
    assert looks_like_tau_bench(TEXT[:2048])
    assert looks_like_tau_bench('\ufeff[{"task_id": 3, "reward": 0.0, "info": {}, "traj": [], "trial": 0}]')
    assert not looks_like_tau_bench((FIXTURES / "openai_chat.json").read_text()[:2048])
    assert not looks_like_tau_bench((FIXTURES / "swe_agent_native.traj").read_text()[:2048])
    assert not looks_like_tau_bench('[{"role": "user", "content": "task_id reward"}]')


def _entry(index: int, change: Callable[[dict[str, Any]], Any]) -> Callable[[list[Any]], None]:
    def edit(document: list[Any]) -> None:
        change(document[index])

    return edit


BAD: list[tuple[str, Callable[[list[Any]], Any] | str, str]] = [
    ("malformed", '[{"task_id": 0,', "malformed JSON"),
    ("an object", lambda d: {"results": d}, "expected a tau-bench results file"),
    ("empty", lambda d: [], "holds no entry"),
    ("entry not an object", lambda d: d.append("x"), "entry [3]: expected an object"),
    ("no task id", _entry(2, lambda e: e.pop("task_id")), "entry [2].task_id: expected the task's number"),
    ("trial as text", _entry(2, lambda e: e.update(trial="1")),
     "entry [2].trial: expected the trial's number"),
    ("negative trial", _entry(2, lambda e: e.update(trial=-1)), "entry [2].trial"),
    ("traj not a list", _entry(2, lambda e: e.update(traj={})),
     "entry [2] (session tau-bench-0-1-"),
    ("reward as text", _entry(2, lambda e: e.update(reward="1")), ".reward: expected a number"),
    ("info a list", _entry(2, lambda e: e.update(info=[])), ".info: expected an object"),
    ("message not an object", _entry(2, lambda e: e["traj"].append(None)), ".traj[8]: expected an object"),
    ("unknown role", _entry(2, lambda e: e["traj"][1].update(role="agent")),
     ".traj[1].role: unknown role 'agent'"),
    ("content a number", _entry(2, lambda e: e["traj"][1].update(content=5)),
     ".traj[1].content: expected a string"),
    ("result of no call", _entry(2, lambda e: e["traj"][5].update(tool_call_id="call_nope")),
     ".traj[5].tool_call_id: 'call_nope' answers no tool call"),
    ("call without a name", _entry(2, lambda e: e["traj"][4]["tool_calls"][0]["function"].pop("name")),
     ".traj[4].tool_calls[0].function.name"),
    ("tool calls not a list", _entry(2, lambda e: e["traj"][4].update(tool_calls={})),
     ".traj[4].tool_calls: expected a list"),
    ("same task and trial twice", _entry(2, lambda e: e.update(trial=0)),
     "entry [2]: task 0 trial 0 is also entry [0]"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_names_the_entry_and_field_and_writes_nothing(
    file_store: SQLiteStore, change: Callable[[list[Any]], Any] | str, message: str
) -> None:
    if isinstance(change, str):
        text = change
    else:
        document = json.loads(TEXT)
        replaced = change(document)
        text = json.dumps(document if replaced is None else replaced)
    with pytest.raises(InvalidEventError) as caught:
        import_conversations(file_store, parse_tau_bench(text, name="results/bad.json"))
    assert message in str(caught.value)
    assert str(caught.value).startswith("'results/bad.json'")
    assert file_store.count_events() == 0  # the good entries before the bad one are not stored either
