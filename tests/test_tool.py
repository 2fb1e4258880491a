"""The agent-facing tool: every method with valid input, every kind of invalid input (answered with a
short message, the store left unchanged), recording of calls, budgets, provider schemas, the size of
the description, and fuzzing of the envelope."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import turnlog.tool as tool
from turnlog.checks import verify_all
from turnlog.projections.artifacts import list_artifacts
from turnlog.projections.context import ContextPolicy, build_context
from turnlog.projections.todos import build_todo_list, current_todos
from turnlog.store import (
    DuplicateEventError,
    InvalidEventError,
    MessageAppended,
    MessagePinned,
    SQLiteStore,
    StoreError,
    TodosUpdated,
    ToolReturned,
    UnknownSessionError,
    VersionConflictError,
    parse_events_json,
)
from turnlog.tool.cards import CARDS
from turnlog.tool.inputs import fields_of

SESSION_FILE = Path(__file__).parent.parent / "scripts" / "data" / "coding_session.jsonl"
SID = "fix-rounding"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore.open(tmp_path / "t.db")
    s.append(SID, parse_events_json(SESSION_FILE.read_text()))
    try:
        yield s
    finally:
        s.close()


def env(method: str, data: Any) -> dict[str, Any]:
    module, name = method.split(".")
    return {"module": module, "method": name, "input": data}


def state(store: SQLiteStore) -> tuple[int, str, bool]:
    report = store.verify()
    return store.count_events(), report.head_hash, report.ok


def tokens(store: SQLiteStore, text: str) -> int:
    return store.tokenizer.count(text)


# --- every method with valid input -------------------------------------------------------------


@pytest.mark.parametrize("method", tool.METHODS)
def test_every_method_with_its_example_input_is_recorded(store: SQLiteStore, method: str) -> None:
    before = store.count_events()
    result = tool.invoke(store, SID, env(method, CARDS[method].example))
    assert not result.is_error, result.text
    assert result.method == method
    records = store.read_session(SID, from_version=before + 1)
    assert [r.event_id for r in records] == [r.event_id for r in result.recorded]
    call, *effects, returned = [r.event for r in records]
    assert isinstance(call, MessageAppended) and call.role == "assistant" and call.tool_calls
    [tool_call] = call.tool_calls
    assert tool_call.name == "turnlog" and json.loads(tool_call.arguments) == env(
        method, CARDS[method].example
    )
    assert isinstance(returned, ToolReturned)
    assert returned.tool_call_id == tool_call.id and returned.tool_name == "turnlog"
    assert returned.content == result.text and not returned.is_error
    assert len(effects) == (1 if method in ("todos.write", "context.pin", "context.unpin") else 0)
    assert verify_all(store).ok


@pytest.mark.parametrize("method", tool.METHODS)
def test_each_cards_example_result_is_what_the_call_returns(store: SQLiteStore, method: str) -> None:
    out = tool.call(store, SID, env(method, CARDS[method].example), record=False)
    expected = CARDS[method].result
    if "..." in expected:
        assert out.startswith(expected.split("...")[0])
    else:
        assert out == expected


def test_artifacts_list_pages(store: SQLiteStore) -> None:
    first = tool.call(store, SID, env("artifacts.list", {"limit": 4}))
    assert first.startswith("Artifacts of this session: 1–4 of 6")
    assert 'next: artifacts.list {"offset": 4, "limit": 4}' in first
    last = tool.call(store, SID, env("artifacts.list", {"offset": 4, "limit": 4}))
    assert last.startswith("Artifacts of this session: 5–6 of 6") and "next:" not in last
    assert "CHANGELOG.md" in last
    past = tool.invoke(store, SID, env("artifacts.list", {"offset": 6}))
    assert past.is_error and "past the end" in past.text


def test_artifacts_read_pages_through_a_whole_artifact_under_a_small_budget(store: SQLiteStore) -> None:
    grep = next(a for a in list_artifacts(store, SID) if a.name.startswith("grep"))
    content = store.get_blob(grep.artifact_id).text
    got: list[str] = []
    offset: int | None = 0
    calls = 0
    while offset is not None:
        out = tool.call(
            store, SID, env("artifacts.read", {"id": grep.short_id, "offset": offset}), max_tokens=300
        )
        assert tokens(store, out) <= 300
        header, *lines, notice = out.split("\n")
        assert header.startswith(f"Artifact {grep.short_id}")
        got += lines
        found = re.search(r"next: offset=(\d+)", notice)
        offset = int(found.group(1)) if found else None
        calls += 1
    assert "\n".join(got) == content.rstrip("\n") and calls > 5


def test_artifacts_read_only_reads_the_sessions_own_artifacts(store: SQLiteStore) -> None:
    store.append("other", [MessageAppended(role="user", content="hi")])
    grep = next(a for a in list_artifacts(store, SID) if a.name.startswith("grep"))
    refused = tool.invoke(store, "other", env("artifacts.read", {"id": grep.short_id}))
    assert refused.is_error and "artifacts.list" in refused.text
    unknown = tool.invoke(store, SID, env("artifacts.read", {"id": "deadbeefdeadbeef"}))
    assert unknown.is_error and "no artifact of this session" in unknown.text


def test_artifacts_index_fits_the_budget(store: SQLiteStore) -> None:
    whole = tool.call(store, SID, env("artifacts.index", {}))
    assert whole.count("\n- `") == 6
    small = tool.call(store, SID, env("artifacts.index", {}), max_tokens=120)
    assert tokens(store, small) <= 120
    assert "more not listed" in small and "artifacts.list" in small


def test_the_tools_own_large_results_are_not_listed_as_artifacts(store: SQLiteStore) -> None:
    big = tool.call(store, SID, env("history.read", {"mode": "range", "from_version": 1, "to_version": 20}))
    assert len(big.encode()) > 1024  # so the store keeps it as an artifact
    assert any(a.name.startswith("turnlog output ") for a in list_artifacts(store, SID))
    listed = tool.call(store, SID, env("artifacts.list", {}))
    assert "turnlog output" not in listed and "1–6 of 6" in listed
    index = tool.call(store, SID, env("artifacts.index", {}))
    assert "turnlog output" not in index and index.startswith(f"Artifacts of session {SID} (6): ")


def test_history_tail(store: SQLiteStore) -> None:
    out = tool.call(store, SID, env("history.read", {"mode": "tail", "n": 2}), record=False)
    assert out.startswith("[v35 user · demo-0035]")
    assert "→ run_linter [call_07]" in out
    assert out.endswith("[versions 35–38: the last 2 messages; before them: versions 1–34]")
    assert "usage_recorded" not in out  # bookkeeping is left out


def test_history_tail_that_does_not_fit_names_the_range_of_the_rest(store: SQLiteStore) -> None:
    out = tool.call(store, SID, env("history.read", {"mode": "tail", "n": 30}), max_tokens=400, record=False)
    assert tokens(store, out) <= 400
    rest = re.search(r"older ones: history\.read (\{.*\})\]$", out)
    assert rest is not None, out
    follow = tool.invoke(store, SID, env("history.read", json.loads(rest.group(1))), record=False)
    assert not follow.is_error


def test_history_range_pages_cover_every_version_once(store: SQLiteStore) -> None:
    query: dict[str, Any] | None = {"mode": "range", "from_version": 1, "to_version": 38}
    seen: list[int] = []
    while query is not None:
        out = tool.call(store, SID, env("history.read", query), max_tokens=600, record=False)
        assert tokens(store, out) <= 600
        seen += [int(v) for v in re.findall(r"^\[v(\d+) ", out, re.MULTILINE)]
        following = re.search(r"next: history\.read (\{.*\})\]$", out)
        query = json.loads(following.group(1)) if following else None
    skipped = {r.version for r in store.read_session(SID) if r.type in ("usage_recorded", "context_built")}
    assert seen == [v for v in range(1, 39) if v not in skipped]


def test_history_range_past_the_end_and_clamped(store: SQLiteStore) -> None:
    past = tool.invoke(
        store, SID, env("history.read", {"mode": "range", "from_version": 50, "to_version": 60})
    )
    assert past.is_error and "last version is 38" in past.text
    end = tool.call(store, SID, env("history.read", {"mode": "range", "from_version": 35, "to_version": 99}))
    assert "the session ends at version 38" in end


def test_history_event(store: SQLiteStore) -> None:
    message = tool.call(store, SID, env("history.read", {"mode": "event", "event_id": "demo-0014"}))
    assert message.startswith("[v14 assistant · demo-0014]\nFound it:") and "Shall I go ahead?" in message
    large = tool.call(
        store, SID, env("history.read", {"mode": "event", "event_id": "demo-0011"}), max_tokens=300
    )
    assert tokens(store, large) <= 300
    assert large.startswith("[v11 tool grep [call_02] · demo-0011]")
    assert re.search(r'\[the rest: artifacts\.read \{"id": "65b9ff4b97cb", "offset": \d+\}\]$', large)
    ambiguous = tool.invoke(store, SID, env("history.read", {"mode": "event", "event_id": "demo-00"}))
    assert ambiguous.is_error and "ambiguous" in ambiguous.text
    unknown = tool.invoke(store, SID, env("history.read", {"mode": "event", "event_id": "nothing-here"}))
    assert unknown.is_error and "no event 'nothing-here' in this session" in unknown.text


def test_history_shows_its_own_results_once(store: SQLiteStore) -> None:
    tool.call(store, SID, env("todos.read", {}))
    out = tool.call(store, SID, env("history.read", {"mode": "tail", "n": 2}), record=False)
    assert "→ turnlog [turnlog_" in out and "(a result of this tool, not repeated" in out
    assert "Reproduce the wrong totals" not in out


def _brute(store: SQLiteStore, words: list[str], role: str = "any") -> list[int]:
    found = []
    for r in reversed(store.read_session(SID)):
        event = r.event
        if isinstance(event, MessageAppended):
            kind = event.role
            calls = [c for c in event.tool_calls or () if c.name != "turnlog"]
            text = event.content + "".join(f"\n→ {c.name} {c.arguments}" for c in calls)
        elif isinstance(event, ToolReturned) and event.tool_name != "turnlog":
            kind, text = "tool", event.content
        else:
            continue
        if role in ("any", kind) and all(w.lower() in text.lower() for w in words):
            found.append(r.version)
    return found


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ({"query": "rounding"}, ["rounding"]),
        ({"query": "JPY", "limit": 1}, ["JPY"]),
        ({"query": "kwd jpy", "match": "all_words", "limit": 2}, ["kwd", "jpy"]),
        ({"query": "money", "role": "tool", "limit": 3}, ["money"]),
    ],
)
def test_history_search_pages_find_every_match_newest_first(
    store: SQLiteStore, query: dict[str, Any], words: list[str]
) -> None:
    tool.call(store, SID, env("history.search", query))  # its own recorded result is never searched
    versions: list[int] = []
    current: dict[str, Any] | None = query
    while current is not None:
        out = tool.call(store, SID, env("history.search", current), max_tokens=400)
        assert tokens(store, out) <= 400
        versions += [int(v) for v in re.findall(r"^- v(\d+) ", out, re.MULTILINE)]
        more = re.search(r"^\[more: history\.search (\{.*\})\]$", out, re.MULTILINE)
        current = json.loads(more.group(1)) if more else None
    assert versions == _brute(store, words, query.get("role", "any"))
    assert versions


def test_history_search_excerpts_and_no_match(store: SQLiteStore) -> None:
    out = tool.call(store, SID, env("history.search", {"query": "half-up", "limit": 1}))
    first = out.split("\n")[1]
    assert first.startswith("- v") and "half-up" in first.lower() and len(first) < 260
    none = tool.call(store, SID, env("history.search", {"query": "no such words here"}))
    assert none == 'Matches for "no such words here", newest first: none.'


def test_todos_read_and_write_use_the_one_builder(store: SQLiteStore) -> None:
    items = [
        {"id": "1", "content": "Add a CHANGELOG entry", "status": "completed"},
        {"content": "Run the linter"},
    ]
    result = tool.invoke(store, SID, env("todos.write", {"todos": items}))
    assert not result.is_error
    [effect] = result.effects
    assert isinstance(effect, TodosUpdated)
    assert effect.todos == build_todo_list(items).todos
    assert current_todos(store, SID) == list(effect.todos)
    assert tool.call(store, SID, env("todos.read", {})).endswith("- [ ] Run the linter (id: 2)")
    cleared = tool.call(store, SID, env("todos.write", {"todos": []}))
    assert "none (the list is empty)" in cleared and current_todos(store, SID) == []


@pytest.mark.parametrize("options", [{}, {"record": False}, {"tool_call_id": "call-x"}])
def test_a_stale_expected_version_writes_nothing(store: SQLiteStore, options: dict[str, Any]) -> None:
    head = store.head_version(SID)
    before = state(store)
    with pytest.raises(VersionConflictError):
        tool.invoke(
            store,
            SID,
            env("todos.write", {"todos": [{"content": "x"}]}),
            expected_version=head - 1,
            **options,
        )
    assert state(store) == before
    result = tool.invoke(
        store, SID, env("todos.write", {"todos": [{"content": "x"}]}), expected_version=head, **options
    )
    assert result.recorded[-1].version == store.head_version(SID) > head


def test_pin_and_unpin(store: SQLiteStore) -> None:
    result = tool.invoke(store, SID, env("context.pin", {"event_id": "demo-0019", "reason": "the go-ahead"}))
    [effect] = result.effects
    assert isinstance(effect, MessagePinned) and effect.target_event_id == "demo-0019"
    assert effect.reason == "the go-ahead"
    built = build_context(store, SID, ContextPolicy(budget=1500))
    assert any(e.category == "pinned" and "demo-0019" in e.event_ids for e in built.entries)
    tool.call(store, SID, env("context.unpin", {"event_id": "demo-0019", "reason": "done"}))
    built = build_context(store, SID, ContextPolicy(budget=1500))
    assert not any(e.category == "pinned" and "demo-0019" in e.event_ids for e in built.entries)


def test_help_cards(store: SQLiteStore) -> None:
    assert tool.call(store, SID, env("tool.help", {}), record=False) == tool.description()
    for method in tool.METHODS:
        card = tool.call(store, SID, env("tool.help", {"method": method}), record=False)
        assert card.startswith(f"{method} — ")
        schema = json.loads(card.split("Input (JSON Schema): ", 1)[1].split("\n", 1)[0])
        assert schema == tool.input_schema(method)
        example = json.loads(card.split("Example call: ", 1)[1].split("\n", 1)[0])
        assert example == env(method, CARDS[method].example)
        assert "Example result:\n" in card


# --- invalid input: a short message, nothing written -------------------------------------------

WRONG_TYPE: dict[str, Any] = {
    "artifacts.list": {"limit": "5"},
    "artifacts.index": [],
    "artifacts.read": {"id": 65987654321},
    "history.read": {"mode": "tail", "n": "2"},
    "history.search": {"query": 5},
    "todos.read": "all",
    "todos.write": {"todos": "write the test"},
    "context.pin": {"event_id": "demo-0004", "reason": True},
    "context.unpin": {"event_id": "demo-0004", "reason": ["x"]},
    "tool.help": {"method": 1},
}

MISSING_FIELD: dict[str, tuple[dict[str, Any], str]] = {
    "artifacts.read": ({"offset": 3}, "id: required field is missing"),
    "history.read": ({"n": 3}, "mode: required"),
    "history.search": ({"limit": 3}, "query: required field is missing"),
    "todos.write": ({}, "todos: required field is missing"),
    "context.pin": ({"event_id": "demo-0004"}, "reason: required field is missing"),
    "context.unpin": ({"reason": "x"}, "event_id: required field is missing"),
}


def assert_refused(store: SQLiteStore, envelope: Any, *expected: str) -> str:
    before = state(store)
    result = tool.invoke(store, SID, envelope)
    assert result.is_error and result.text.startswith("error: ")
    for phrase in expected:
        assert phrase in result.text, result.text
    assert "Nothing was written." in result.text
    assert not result.recorded and not result.effects
    assert state(store) == before and before[2]
    assert tokens(store, result.text) <= 300
    return result.text


@pytest.mark.parametrize("method", tool.METHODS)
def test_extra_field(store: SQLiteStore, method: str) -> None:
    data = {**CARDS[method].example, "verbose": True}
    assert_refused(
        store, env(method, data), f"invalid input for {method}", "verbose: unknown field", "accepted input: "
    )


@pytest.mark.parametrize("method", tool.METHODS)
def test_wrong_type(store: SQLiteStore, method: str) -> None:
    text = assert_refused(store, env(method, WRONG_TYPE[method]), method, "accepted input: ")
    assert "got" in text or "must be a JSON object" in text


@pytest.mark.parametrize("method", sorted(MISSING_FIELD))
def test_missing_field(store: SQLiteStore, method: str) -> None:
    data, phrase = MISSING_FIELD[method]
    assert_refused(store, env(method, data), phrase)


@pytest.mark.parametrize("method", tool.METHODS)
def test_missing_input(store: SQLiteStore, method: str) -> None:
    envelope = env(method, {})
    del envelope["input"]
    assert_refused(store, envelope, f"{method}: input is required", "accepted input: ")
    envelope["input"] = None
    assert_refused(store, envelope, "input must be a JSON object, not null")


@pytest.mark.parametrize("method", tool.METHODS)
def test_unknown_method_and_module(store: SQLiteStore, method: str) -> None:
    module, name = method.split(".")
    assert_refused(
        store, {"module": module, "method": name + "x", "input": {}}, f"module {module} has no method"
    )
    assert_refused(store, {"module": module + "s", "method": name, "input": {}}, "unknown module")


@pytest.mark.parametrize(
    ("envelope", "phrases"),
    [
        (env("artifacts.read", {"mode": "tail"}), ["Did you mean history.read? It takes mode."]),
        (env("history.search", {"event_id": "demo-0004"}), ["Did you mean history.read?"]),
        (env("todos.read", {"todos": []}), ["Did you mean todos.write?"]),
        (env("context.pin", {"query": "x"}), ["Did you mean history.search?"]),
        (env("history.read", {"mode": "search", "query": "x"}), ["Did you mean history.search?"]),
        (env("history.read", {"mode": "last"}), ['Did you mean mode "tail"?']),
        (env("tool.help", {"method": "history.reed"}), ['Did you mean {"method": "history.read"}?']),
        ({"module": "history", "method": "list", "input": {}}, ["Did you mean artifacts.list?"]),
        ({"module": "history", "method": "serch", "input": {}}, ["Did you mean history.search?"]),
        ({"module": "todos", "method": "help", "input": {}}, ["Did you mean tool.help"]),
        ({"module": "histroy", "method": "read", "input": {}}, ["Did you mean history?"]),
        ({"module": "history.read", "method": "read", "input": {}}, ["Module and method are separate"]),
        (
            {"module": "history", "method": "read", "mode": "tail", "input": {}},
            ["a method's fields go inside input"],
        ),
    ],
)
def test_the_method_it_probably_meant(
    store: SQLiteStore, envelope: dict[str, Any], phrases: list[str]
) -> None:
    assert_refused(store, envelope, *phrases)


@pytest.mark.parametrize(
    ("envelope", "phrase"),
    [
        ('{"module": "history", "method": "read", input: {}}', "not valid JSON"),
        ("", "not valid JSON"),
        ('{"module": "todos", "method": "read", "input": {}, "x": NaN}', "not valid JSON"),
        ("[1, 2]", "must be a JSON object, not a list"),
        (b"\xff\xfe", "not valid UTF-8"),
        ('{"module": "history", "method": "search", "input": {"query": "\\ud800"}}', "not valid Unicode"),
        ({"module": 3, "method": "read", "input": {}}, "module must be a string"),
        ({"method": "read", "input": {}}, "the call has no module"),
        ({"module": "todos", "method": "read", "input": {}, "extra": float("nan")}, "not JSON data"),
        (env("history.search", {"query": "x", "before_version": None}), "null is not accepted"),
        (env("history.read", {"mode": "tail", "n": 2.0}), "n: Input should be a valid integer (got 2.0)"),
        (env("history.read", {"mode": "range", "from_version": 9, "to_version": 3}), "below from_version"),
        (env("history.read", {"mode": "range", "from_version": 1, "to_version": 501}), "at most 500"),
        (env("artifacts.read", {"id": "65B9FF4B97CB"}), "String should match pattern"),
        (env("todos.write", {"todos": [{"content": "a", "id": "1"}, {"content": "b", "id": "1"}]}), "unique"),
        (env("todos.write", {"todos": [{"content": "a", "status": "done"}]}), "todos[0].status"),
        (env("context.pin", {"event_id": "demo-0011", "reason": "x"}), "only messages can be pinned"),
        (env("context.unpin", {"event_id": "nothing-here", "reason": "x"}), "no event 'nothing-here'"),
        (env("artifacts.read", {"id": "65b9ff4b97cb", "offset": 900}), "past the end"),
    ],
)
def test_other_invalid_calls(store: SQLiteStore, envelope: Any, phrase: str) -> None:
    assert_refused(store, envelope, phrase)


def test_a_call_already_in_the_log_gets_its_error_result(store: SQLiteStore) -> None:
    before = store.count_events()
    text = tool.call_recorded(store, SID, "call_x", env("todos.write", {"todos": "nope"}))
    [returned] = store.read_session(SID, from_version=before + 1)
    assert isinstance(returned.event, ToolReturned)
    assert (
        returned.event.is_error and returned.event.tool_call_id == "call_x" and returned.event.content == text
    )
    ok = tool.call_recorded(store, SID, "call_y", env("todos.write", {"todos": [{"content": "x"}]}))
    todos, answer = store.read_session(SID, from_version=before + 2)
    assert todos.type == "todos_updated" and isinstance(answer.event, ToolReturned)
    assert answer.event.tool_call_id == "call_y" and answer.event.content == ok and not answer.event.is_error


def test_a_recorded_call_retried_is_applied_once(store: SQLiteStore) -> None:
    write = env("todos.write", {"todos": [{"content": "once"}]})
    first = tool.invoke(store, SID, write, tool_call_id="call_r")
    after = store.count_events()
    again = tool.invoke(store, SID, json.dumps(write), tool_call_id="call_r")
    assert again.retried and again.text == first.text and again.recorded == () and again.effects == ()
    assert store.count_events() == after
    refused = env("todos.write", {"todos": "nope"})
    bad = tool.invoke(store, SID, refused, tool_call_id="call_bad")
    assert tool.invoke(store, SID, refused, tool_call_id="call_bad").text == bad.text
    assert store.count_events() == after + 1
    with pytest.raises(DuplicateEventError, match="already answered for another input"):
        tool.invoke(store, SID, env("todos.write", {"todos": [{"content": "twice"}]}), tool_call_id="call_r")
    assert store.count_events() == after + 1


def test_record_false_writes_only_effects(store: SQLiteStore) -> None:
    before = store.count_events()
    tool.call(store, SID, env("history.read", {"mode": "tail", "n": 1}), record=False)
    assert store.count_events() == before
    tool.call(store, SID, env("todos.write", {"todos": [{"content": "x"}]}), record=False)
    [only] = store.read_session(SID, from_version=before + 1)
    assert only.type == "todos_updated"


def test_problems_of_the_caller_raise(store: SQLiteStore) -> None:
    with pytest.raises(UnknownSessionError):
        tool.call(store, "nope", env("todos.read", {}))
    with pytest.raises(StoreError, match="max_tokens"):
        tool.call(store, SID, env("todos.read", {}), max_tokens=50)
    with pytest.raises(InvalidEventError):
        tool.call_recorded(store, SID, "has space", env("todos.read", {}))


def test_recorded_calls_pair_with_their_results_in_the_context(store: SQLiteStore) -> None:
    for method in ("history.search", "todos.write", "context.pin", "artifacts.read"):
        tool.call(store, SID, env(method, CARDS[method].example))
    built = build_context(store, SID, ContextPolicy(budget=6000, format="text"))
    assert built.rendered.count("turnlog({") == 4
    assert built.rendered.count("interrupted") == 1  # only the sample session's own unanswered call
    assert verify_all(store).ok


# --- budgets -----------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [100, 160, 400, 2000])
@pytest.mark.parametrize("method", tool.METHODS)
def test_every_result_fits_its_budget(store: SQLiteStore, method: str, budget: int) -> None:
    examples = [CARDS[method].example]
    if method == "history.read":
        examples += [{"mode": "tail", "n": 200}, {"mode": "range", "from_version": 1, "to_version": 38}]
        examples += [{"mode": "event", "event_id": "demo-0011"}]
    for example in examples:
        out = tool.call(store, SID, env(method, example), max_tokens=budget, record=False)
        assert tokens(store, out) <= budget, (method, example)


def test_a_capped_result_says_so(store: SQLiteStore) -> None:
    out = tool.call(store, SID, env("tool.help", {"method": "history.read"}), max_tokens=150)
    assert "[turnlog: result capped:" in out and tokens(store, out) <= 150


# --- the description and the provider schemas --------------------------------------------------


def test_the_description_is_an_index_card_under_600_tokens(store: SQLiteStore) -> None:
    text = tool.description()
    assert tokens(store, text) < 600
    lines = text.split("\n")
    for method in tool.METHODS:
        assert sum(1 for line in lines if line.startswith(f"- {method} ")) == 1
    for provider in tool.PROVIDERS:  # the whole definition, schema included, stays small too
        assert tokens(store, json.dumps(tool.tool_definition(provider))) < 600


def _check_schema(schema: dict[str, Any]) -> None:
    """A meta-schema check when jsonschema is installed, else a structural one."""
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - jsonschema is in the dev environment
        _check_structure(schema)
        return
    jsonschema.Draft202012Validator.check_schema(schema)


def _check_structure(schema: Any) -> None:
    if isinstance(schema, dict):
        if "type" in schema:
            assert schema["type"] in ("object", "string", "integer", "number", "boolean", "array", "null")
        if "required" in schema:
            assert set(schema["required"]) <= set(schema.get("properties", {}))
        for value in schema.values():
            _check_structure(value)
    elif isinstance(schema, list):
        for value in schema:
            _check_structure(value)


def _nullable(schema: Any) -> bool:
    if isinstance(schema, dict):
        if schema.get("type") == "null" or (
            isinstance(schema.get("type"), list) and "null" in schema["type"]
        ):
            return True
        return any(_nullable(value) for value in schema.values())
    if isinstance(schema, list):
        return any(_nullable(value) for value in schema)
    return False


@pytest.mark.parametrize("provider", tool.PROVIDERS)
def test_provider_schemas_are_valid_and_require_input(provider: tool.Provider) -> None:
    definition = json.loads(json.dumps(tool.tool_definition(provider)))
    if provider == "openai":
        assert definition["type"] == "function"
        body = definition["function"]
        parameters = body["parameters"]
    else:
        body = definition
        parameters = body["input_schema"]
    assert body["name"] == "turnlog" and body["description"] == tool.description()
    _check_schema(parameters)
    assert set(parameters["required"]) == {"module", "method", "input"}
    assert parameters["properties"]["input"]["type"] == "object"
    assert parameters["additionalProperties"] is False
    assert not _nullable(parameters)


def test_envelopes_against_the_exported_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(tool.parameters_schema())
    for method in tool.METHODS:
        assert validator.is_valid(env(method, CARDS[method].example))
    assert not validator.is_valid({"module": "history", "method": "read"})
    assert not validator.is_valid({"module": "history", "method": "read", "input": None})
    assert not validator.is_valid({"module": "nope", "method": "read", "input": {}})


@pytest.mark.parametrize("method", tool.METHODS)
def test_method_input_schemas(method: str) -> None:
    schema = tool.input_schema(method)
    _check_schema(schema)
    assert not _nullable(schema)
    assert "title" not in json.dumps(schema)
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid(CARDS[method].example)
    assert not validator.is_valid({**CARDS[method].example, "verbose": True})
    assert not validator.is_valid(WRONG_TYPE[method])


# --- fuzzing: nothing in the envelope makes call raise -----------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
_field_names = sorted(set().union(*(fields_of(m) for m in tool.METHODS)) | {"x", "todos"})
_values = (
    _json
    | st.integers(min_value=-5, max_value=60)
    | st.sampled_from(
        ["tail", "range", "event", "demo-0004", "demo-0011", "65b9ff4b97cb", "KWD", "history.read"]
    )
    | st.lists(
        st.fixed_dictionaries({"content": st.text(max_size=8)}, optional={"status": _json, "id": _json})
    )
)
_inputs = st.dictionaries(st.sampled_from(_field_names), _values, max_size=4) | _json
_module_names = st.sampled_from([*tool.MODULES, "nope", "history.read"]) | st.text(max_size=8)
_method_names = st.sampled_from(sorted({m.split(".")[1] for m in tool.METHODS} | {"help", "x"})) | _json
_envelopes = (
    st.fixed_dictionaries(
        {"module": _module_names, "method": _method_names},
        optional={"input": _inputs, "extra": _json},
    )
    | _json
    | st.text(max_size=60)
    | st.binary(max_size=30)
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(envelope=_envelopes, as_text=st.booleans())
def test_fuzzed_envelopes_never_raise(store: SQLiteStore, envelope: Any, as_text: bool) -> None:
    if as_text and isinstance(envelope, dict):
        envelope = json.dumps(envelope)
    before = store.count_events()
    result = tool.invoke(store, SID, envelope, max_tokens=300)
    assert isinstance(result.text, str) and result.text
    assert tokens(store, result.text) <= 300
    if result.is_error:
        assert store.count_events() == before


@st.composite
def _near_valid(draw: st.DrawFn) -> dict[str, Any]:
    """A method's example input with one field set to something else: reaches the methods themselves."""
    method = draw(st.sampled_from(tool.METHODS))
    data = dict(CARDS[method].example)
    fields = sorted(fields_of(method)) or ["x"]
    data[draw(st.sampled_from(fields))] = draw(_values | st.text(min_size=6, max_size=40))
    return env(method, data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(envelope=_near_valid(), budget=st.integers(min_value=100, max_value=3000))
def test_fuzzed_inputs_never_raise(store: SQLiteStore, envelope: dict[str, Any], budget: int) -> None:
    before = store.count_events()
    result = tool.invoke(store, SID, envelope, max_tokens=budget)
    assert tokens(store, result.text) <= budget
    if result.is_error:
        assert store.count_events() == before
    else:
        assert store.count_events() > before
