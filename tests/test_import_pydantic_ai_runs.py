"""Importing histories made by real pydantic-ai runs (its FunctionModel, no network): instructions
are sent with every request and must land once, a changed instruction replaces the old one, an
appended instruction change is kept, and re-importing a grown history appends only what is new."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from turnlog.importers import import_file, parse_pydantic_ai
from turnlog.projections.context import ContextPolicy, build_context
from turnlog.store import MessageAppended, MessageRemoved, SQLiteStore, ToolReturned


@pytest.fixture
def store() -> Iterator[SQLiteStore]:
    with SQLiteStore.open(":memory:") as opened:
        yield opened


def _script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if any(part.part_kind == "user-prompt" for part in messages[-1].parts):
        call = ToolCallPart("get_weather", {"city": "Paris"}, tool_call_id=f"call_{len(messages)}")
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart("Sunny in Paris.")])


def _histories(dynamic: Literal["none", "rewrite", "append"], runs: int = 3) -> list[str]:
    """The JSON an app saves after each run (``ModelMessagesTypeAdapter``), one per run."""
    agent = Agent(FunctionModel(_script), instructions="Be brief.", system_prompt="You forecast weather.")
    calls = {"request": 0, "run": 0}
    if dynamic != "none":

        @agent.instructions(name="clock", on_change=dynamic)
        def clock() -> str:
            # Rewritten: changes on every request. Appended: on every run (an appended change is
            # one more request's worth of history, so it changes once per run here).
            calls["request"] += 1
            return f"This is request {calls['request']}." if dynamic == "rewrite" else f"Run {calls['run']}."

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return f"sunny in {city}"

    history: list[ModelMessage] = []
    saved = []
    for n in range(runs):
        calls["run"] = n + 1
        history = agent.run_sync(f"Weather, take {n}?", message_history=history).all_messages()
        saved.append(ModelMessagesTypeAdapter.dump_json(history).decode())
    return saved


def _system(store: SQLiteStore, session: str) -> list[str]:
    built = build_context(store, session, ContextPolicy(budget=100_000))
    return [m["content"] for m in built.rendered if m["role"] == "system"]


def _pairs_intact(store: SQLiteStore, session: str) -> None:
    built = build_context(store, session, ContextPolicy(budget=100_000))
    messages: list[dict[str, Any]] = built.rendered
    for index, message in enumerate(messages):
        for call in message.get("tool_calls") or ():
            answer = messages[index + 1]
            assert answer["role"] == "tool" and answer["tool_call_id"] == call["id"]


def test_static_instructions_are_imported_once(store: SQLiteStore) -> None:
    text = _histories("none")[-1]
    requests = [m for m in json.loads(text) if m["kind"] == "request"]
    assert len(requests) == 6 and all(r["instructions"] == "Be brief." for r in requests)
    [conv] = parse_pydantic_ai(text, session="w")
    systems = [e.content for e in conv.events if isinstance(e, MessageAppended) and e.role == "system"]
    assert systems == ["Be brief.", "You forecast weather."]
    assert not any(isinstance(e, MessageRemoved) for e in conv.events)
    import_file(store, text, "pydantic-ai", session="w")
    assert _system(store, "w") == ["Be brief.", "You forecast weather."]
    _pairs_intact(store, "w")
    assert store.verify().ok


def test_rewritten_instructions_replace_the_old_ones(store: SQLiteStore) -> None:
    """A dynamic instruction that changes on every request: pydantic-ai sends each request the whole
    new text as its system prompt. The log keeps every version; every context holds the latest once."""
    text = _histories("rewrite")[-1]
    requests = [m for m in json.loads(text) if m["kind"] == "request"]
    assert len({r["instructions"] for r in requests}) == len(requests) == 6
    [conv] = parse_pydantic_ai(text, session="w")
    logged = [e for e in conv.events if isinstance(e, MessageAppended) and e.role == "system"]
    removed = [e for e in conv.events if isinstance(e, MessageRemoved)]
    assert len(logged) == 7 and len(removed) == 5  # six versions and the system prompt; five replaced
    instructions = [logged[0], *logged[2:]]  # logged[1] is the system prompt
    assert [r.target_event_ids for r in removed] == [(e.event_id,) for e in instructions[:-1]]
    import_file(store, text, "pydantic-ai", session="w")
    assert _system(store, "w") == ["You forecast weather.", "Be brief.\n\nThis is request 6."]
    _pairs_intact(store, "w")
    # Never between a call and its result: the change comes after the request's tool results.
    for index, event in enumerate(conv.events):
        if isinstance(event, ToolReturned):
            assert not isinstance(conv.events[index - 1], MessageRemoved)
    assert store.verify().ok


def test_appended_instruction_changes_are_kept(store: SQLiteStore) -> None:
    """``on_change='append'``: the prefix stays, each change rides in the history as a delta that
    the model is sent; every delta is a system message, the instructions stay once."""
    text = _histories("append")[-1]
    [conv] = parse_pydantic_ai(text, session="w")
    systems = [e.content for e in conv.events if isinstance(e, MessageAppended) and e.role == "system"]
    assert systems == [
        "Be brief.\n\nRun 1.",
        "You forecast weather.",
        '<context id="agent:clock">\nRun 2.\n</context>',
        '<context id="agent:clock">\nRun 3.\n</context>',
    ]
    assert not any(isinstance(e, MessageRemoved) for e in conv.events)
    import_file(store, text, "pydantic-ai", session="w")
    _pairs_intact(store, "w")
    assert store.verify().ok


@pytest.mark.parametrize("dynamic", ["none", "rewrite", "append"])
def test_reimporting_a_grown_history_appends_only_the_new_part(
    store: SQLiteStore, dynamic: Literal["none", "rewrite", "append"]
) -> None:
    saved = _histories(dynamic)  # what the app saved after runs 1, 2 and 3
    whole = parse_pydantic_ai(saved[-1])[0]
    total = 0
    for text in saved:
        result = import_file(store, text, "pydantic-ai")
        [row] = result.sessions
        assert row["session_id"] == whole.session_id  # the same conversation, recognised by its start
        assert row["skipped"] == total  # what was stored is recognised, only the rest appended
        total += row["appended"]
    assert import_file(store, saved[-1], "pydantic-ai").appended == 0
    stored = store.read_session(whole.session_id)
    assert [r.event_id for r in stored] == [e.event_id for e in whole.events]  # as one import of it all
    systems = _system(store, whole.session_id)
    assert sum("Be brief." in s for s in systems) == 1
    assert store.verify().ok
