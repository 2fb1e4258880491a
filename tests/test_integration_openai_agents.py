"""The OpenAI Agents SDK adapter: the Session protocol's behaviour, checked against the SDK's own
``SQLiteSession`` and ``TurnlogSession`` alike (so the expectations are the SDK's), runs through
``Runner.run`` with the SDK's public ``ScriptedModel``, and the turnlog side of the same store."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool
from agents.memory import Session, SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call

from turnlog.integrations.openai_agents import TurnlogSession
from turnlog.store import SessionPolicy, SessionRewound, SQLiteStore, SummaryRecorded, UsageRecorded

ROOT = Path(__file__).resolve().parent.parent
Factory = Callable[..., Any]

ITEMS: list[Any] = [
    {"content": "Weather in Paris?", "role": "user"},
    {"content": [{"type": "input_text", "text": "and Rome"}], "role": "user", "type": "message"},
    {"content": "be brief", "role": "developer"},
    {"id": "rs_1", "summary": [{"text": "think", "type": "summary_text"}], "type": "reasoning"},
    {
        "arguments": '{"city":"Paris"}',
        "call_id": "call_1",
        "name": "get_weather",
        "type": "function_call",
        "id": "call_1",
    },
    {"call_id": "call_1", "output": "sunny in Paris", "type": "function_call_output"},
    {"call_id": "call_2", "output": [{"type": "input_text", "text": "x"}], "type": "function_call_output"},
    {
        "id": "msg_1",
        "content": [{"annotations": [], "text": "It is sunny.", "type": "output_text", "logprobs": []}],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    },
    {"type": "custom_tool_call", "call_id": "c 3", "name": "", "input": "raw"},
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "q"},
    },
    {"type": "some_future_item", "payload": {"a": [1, 2.5, None, True, "é"]}},
]


@pytest.fixture(params=["sqlite", "turnlog"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Builds a session of the parametrized backend: ``make(session_id, **kwargs)``."""
    opened: list[Any] = []

    def factory(session_id: str, **kwargs: Any) -> Any:
        if request.param == "sqlite":
            session: Any = SQLiteSession(session_id, str(tmp_path / "agent.db"), **kwargs)
        else:
            session = TurnlogSession(session_id, db=tmp_path / "turnlog.db", **kwargs)
        opened.append(session)
        return session

    yield factory
    for session in opened:
        session.close()


def msg(i: int) -> Any:
    return {"role": "user", "content": f"m{i}"}


@pytest.mark.asyncio
async def test_the_protocol_basics(make: Factory) -> None:
    s = make("a")
    assert isinstance(s, Session)
    assert await s.get_items() == [] and await s.pop_item() is None
    await s.add_items([])
    await s.add_items(ITEMS[:4])
    await s.add_items(ITEMS[4:])
    assert await s.get_items() == ITEMS
    assert await s.pop_item() == ITEMS[-1]
    assert await s.get_items() == ITEMS[:-1]
    await s.clear_session()
    assert await s.get_items() == [] and await s.pop_item() is None
    await s.add_items([msg(1)])
    assert await s.get_items() == [msg(1)]


@pytest.mark.asyncio
async def test_limit_gives_the_latest_items_in_order(make: Factory) -> None:
    s = make("a")
    await s.add_items([msg(i) for i in range(10)])
    assert await s.get_items(limit=3) == [msg(7), msg(8), msg(9)]
    assert await s.get_items(limit=0) == []
    assert await s.get_items(limit=50) == [msg(i) for i in range(10)]
    assert await s.get_items(limit=-1) == [msg(i) for i in range(10)]  # SQLiteSession's historical rule
    await s.pop_item()
    await s.pop_item()
    assert await s.get_items(limit=2) == [msg(6), msg(7)]
    d = make("d", session_settings=SessionSettings(limit=2))
    await d.add_items([msg(i) for i in range(5)])
    assert await d.get_items() == [msg(3), msg(4)]
    assert await d.get_items(limit=4) == [msg(1), msg(2), msg(3), msg(4)]
    assert make("e", session_settings={"limit": 1}).session_settings == SessionSettings(limit=1)
    with pytest.raises(TypeError):
        make("f", session_settings={"limitt": 1})


@pytest.mark.asyncio
async def test_pops_go_back_one_item_at_a_time_across_adds(make: Factory) -> None:
    s = make("a")
    await s.add_items([msg(1), msg(2)])
    assert await s.pop_item() == msg(2)
    await s.add_items([msg(3)])
    assert await s.pop_item() == msg(3)
    assert await s.pop_item() == msg(1)
    assert await s.pop_item() is None
    await s.add_items([msg(4)])
    assert await s.get_items() == [msg(4)]


@pytest.mark.asyncio
async def test_sessions_are_isolated_and_the_same_id_shares(make: Factory) -> None:
    a, b, a2 = make("a"), make("b"), make("a")
    await a.add_items([msg(1)])
    await b.add_items([msg(2)])
    assert await a.get_items() == [msg(1)] and await b.get_items() == [msg(2)]
    assert await a2.get_items() == [msg(1)]
    assert await b.pop_item() == msg(2)
    await a.clear_session()
    assert await a2.get_items() == [] and await b.get_items() == []


def test_concurrent_add_items_from_threads_with_their_own_loops(make: Factory) -> None:
    s = make("a")

    def add(i: int) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(s.add_items([msg(i), msg(i + 100)]))
        finally:
            loop.close()

    with ThreadPoolExecutor(max_workers=5) as pool:
        list(pool.map(add, range(10)))
    items = asyncio.run(s.get_items())
    assert sorted(x["content"] for x in items) == sorted(f"m{i}" for i in [*range(10), *range(100, 110)])
    for i in range(10):  # each batch stays together
        assert items[items.index(msg(i)) + 1] == msg(i + 100)


@pytest.mark.asyncio
async def test_a_closed_session_refuses_use(make: Factory) -> None:
    s = make("a")
    s.close()
    with pytest.raises(RuntimeError, match="is closed"):
        await s.add_items([])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["type", "role", "content", "call_id", "output", "name", "id", "x"]),
            st.recursive(
                st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
                lambda inner: (
                    st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
                ),
                max_leaves=6,
            ),
            max_size=5,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_any_json_items_read_back_field_for_field(tmp_path: Path, items: list[Any]) -> None:
    for session in (
        SQLiteSession("h", str(tmp_path / "h.db")),
        TurnlogSession("h", db=tmp_path / "h-turnlog.db"),
    ):
        asyncio.run(session.clear_session())
        asyncio.run(session.add_items(items))
        assert asyncio.run(session.get_items()) == items
        session.close()


@function_tool
def get_weather(city: str) -> str:
    """Weather."""
    return f"sunny in {city}"


def weather_model() -> ScriptedModel:
    return ScriptedModel(
        [
            [function_call("get_weather", {"city": "Paris"}, call_id="call_1")],
            [assistant_message("It is sunny in Paris.")],
        ]
    )


@pytest.mark.asyncio
async def test_a_run_persists_the_turn_and_the_next_run_sees_it(make: Factory) -> None:
    s = make("conv")
    agent = Agent(name="a", instructions="be brief", model=weather_model(), tools=[get_weather])
    result = await Runner.run(agent, "Weather in Paris?", session=s)
    assert result.final_output == "It is sunny in Paris."
    items = await s.get_items()
    assert [i.get("type", "message") for i in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    model = ScriptedModel([[assistant_message("Yes.")]])
    await Runner.run(Agent(name="a", model=model), "Sure?", session=s)
    seen = model.calls[-1].input
    assert isinstance(seen, list) and next(i.get("content") for i in seen) == "Weather in Paris?"
    assert len(await s.get_items()) == 6
    limited = ScriptedModel([[assistant_message("ok")]])
    config = RunConfig(session_settings=SessionSettings(limit=2))
    await Runner.run(Agent(name="a", model=limited), "Last?", session=s, run_config=config)
    assert [i.get("content") for i in limited.calls[-1].input][-1] == "Last?"
    assert len(limited.calls[-1].input) == 3  # the latest 2 items and the new input


@pytest.mark.asyncio
async def test_a_session_input_callback_shapes_the_input_but_not_the_history(make: Factory) -> None:
    s = make("conv")
    await s.add_items([msg(i) for i in range(4)])
    model = ScriptedModel([[assistant_message("ok")]])
    config = RunConfig(session_input_callback=lambda history, new: history[-1:] + new)
    await Runner.run(Agent(name="a", model=model), "now", session=s, run_config=config)
    assert [i.get("content") for i in model.calls[-1].input] == ["m3", "now"]
    assert [i.get("content") for i in await s.get_items()][:5] == ["m0", "m1", "m2", "m3", "now"]
    assert len(await s.get_items()) == 6


def cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "turnlog"
    return subprocess.run([str(exe), "--db", str(db), *args], capture_output=True, text=True, check=False)


@pytest.mark.asyncio
async def test_turnlog_sees_the_run_as_ordinary_messages_and_tool_pairs(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    s = TurnlogSession("conv", db=db)
    agent = Agent(name="a", instructions="be brief", model=weather_model(), tools=[get_weather])
    await Runner.run(agent, "Weather in Paris?", session=s)
    await s.add_items([ITEMS[3]])
    assert await s.pop_item() == ITEMS[3]
    s.close()
    log = cli(db, "log", "conv")
    assert log.returncode == 0, log.stderr
    assert "Weather in Paris?" in log.stdout and "get_weather" in log.stdout and "rewind (pop)" in log.stdout
    context = cli(db, "context", "conv", "--budget", "4000", "--json")
    assert context.returncode == 0, context.stderr
    messages = json.loads(context.stdout)["messages"]
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["tool_calls"][0]["id"] == "call_1" and messages[2]["tool_call_id"] == "call_1"
    assert messages[2]["content"] == "sunny in Paris" and messages[3]["content"] == "It is sunny in Paris."
    verify = cli(db, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.asyncio
async def test_an_open_store_is_shared_and_stays_open(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "t.db") as store:
        s = TurnlogSession("a", db=store)
        await s.add_items([msg(1)])
        s.close()
        assert store.head_version("a") == 1
        assert not any(isinstance(r.event, SummaryRecorded) for r in store.read_session("a"))


WRITER = """
import asyncio, sys
from turnlog.integrations.openai_agents import TurnlogSession
async def main():
    s = TurnlogSession("k", db=sys.argv[1])
    i = 0
    while True:
        reasoning = {"type": "reasoning", "id": f"r{i}", "summary": []}
        await s.add_items([{"role": "user", "content": f"m{i}"}, reasoning])
        print(i, flush=True)
        i += 1
asyncio.run(main())
"""


@pytest.mark.asyncio
async def test_sigkill_loses_no_acknowledged_item(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    acknowledged = -1
    for line in proc.stdout:
        acknowledged = int(line)
        if acknowledged >= 40:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    s = TurnlogSession("k", db=db)
    items = await s.get_items()
    s.close()
    assert len(items) >= 2 * (acknowledged + 1) and len(items) % 2 == 0  # batches are atomic
    assert [i["content"] for i in items[::2]] == [f"m{i}" for i in range(len(items) // 2)]
    assert cli(db, "verify").returncode == 0


def test_the_example_runs(tmp_path: Path) -> None:
    script = ROOT / "scripts" / "examples" / "openai_agents_example.py"
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "ex.db")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "It is sunny in Paris." in result.stdout and "tool_returned" in result.stdout


def long_msg(i: int) -> Any:
    return {"role": "user", "content": f"message {i}: " + "words of a long message " * 40}


@pytest.mark.asyncio
async def test_forced_compaction_appends_a_summary_and_changes_no_item(tmp_path: Path) -> None:
    s = TurnlogSession("c", db=tmp_path / "t.db")
    await s.run_compaction({"force": True})  # an empty session: nothing to do
    assert s.store.head_version("c") == 0
    items = [long_msg(i) for i in range(12)]
    await s.add_items(items)
    await s.run_compaction()  # fits the default budget: nothing appended
    assert s.store.head_version("c") == 12
    await s.run_compaction({"force": True})
    records = s.store.read_session("c")
    assert [r.type for r in records[12:]] == ["summary_recorded"]
    assert await s.get_items() == items
    s.close()


@pytest.mark.asyncio
async def test_the_runner_compacts_after_a_turn_and_the_budgeted_input_stays_bounded(tmp_path: Path) -> None:
    s = TurnlogSession("c", db=tmp_path / "t.db", budget=1500)
    await s.add_items([long_msg(i) for i in range(30)])
    model = ScriptedModel([[assistant_message("ok")]])  # its response id makes the runner call run_compaction
    config = RunConfig(call_model_input_filter=s.model_input_filter)
    await Runner.run(Agent(name="a", model=model), "now", session=s, run_config=config)
    sent = model.calls[-1].input
    assert isinstance(sent, list) and 1 < len(sent) < 30 and sent[-1] == {"content": "now", "role": "user"}
    assert "earlier messages" in json.dumps(sent)  # turnlog's notice of what it left out
    assert len(await s.get_items()) == 32  # the history is whole: only the new turn was added
    assert any(isinstance(r.event, SummaryRecorded) for r in s.store.read_session("c"))
    budgeted = await s.budgeted_items()
    assert budgeted[-1]["content"] == [
        {"annotations": [], "text": "ok", "type": "output_text", "logprobs": []}
    ]
    assert budgeted[-2] == {"content": "now", "role": "user"} and len(budgeted) < 30
    s.close()


@pytest.mark.asyncio
async def test_the_model_input_filter_keeps_a_tool_loop_whole_under_a_large_budget(tmp_path: Path) -> None:
    s = TurnlogSession("c", db=tmp_path / "t.db")
    model = weather_model()
    agent = Agent(name="a", instructions="be brief", model=model, tools=[get_weather])
    config = RunConfig(call_model_input_filter=s.model_input_filter)
    result = await Runner.run(agent, "Weather in Paris?", session=s, run_config=config)
    assert result.final_output == "It is sunny in Paris."
    stored = await s.get_items()
    assert model.calls[0].input == stored[:1] and model.calls[1].input == stored[:3]
    assert model.calls[1].system_instructions == "be brief"
    s.close()


@pytest.mark.asyncio
async def test_pop_and_clear_are_rewinds_that_delete_nothing(tmp_path: Path) -> None:
    s = TurnlogSession("r", db=tmp_path / "t.db")
    await s.add_items([msg(1), msg(2), msg(3)])
    await s.pop_item()
    await s.clear_session()
    await s.clear_session()  # already empty: nothing more to record
    records = s.store.read_session("r")
    rewinds = [
        (e.to_version, e.reason, e.source) for r in records if isinstance(e := r.event, SessionRewound)
    ]
    assert rewinds == [(2, "pop", "openai-agents"), (0, "clear", "openai-agents")]
    assert [r.event.origin.item for r in records[:3]] == [msg(1), msg(2), msg(3)]  # type: ignore[union-attr]
    s.close()


@pytest.mark.asyncio
async def test_run_usage_is_recorded_per_model_response(tmp_path: Path) -> None:
    from agents.testing import ModelStep
    from agents.usage import Usage

    s = TurnlogSession("u", db=tmp_path / "t.db")
    steps = [
        ModelStep(
            output=[function_call("get_weather", {"city": "Rome"}, call_id="c1")],
            usage=Usage(1, 10, output_tokens=3),
        ),
        ModelStep(
            output=[assistant_message("Sunny.")], usage=Usage(1, 20, output_tokens=4), response_id="r2"
        ),
    ]
    agent = Agent(name="a", model=ScriptedModel(steps), tools=[get_weather])
    result = await Runner.run(agent, "Rome?", session=s)
    assert await s.store_run_usage(result, model="gpt-test") == 2
    usage = [r.event for r in s.store.read_session("u") if isinstance(r.event, UsageRecorded)]
    assert [(u.input_tokens, u.output_tokens, u.model) for u in usage] == [
        (10, 3, "gpt-test"),
        (20, 4, "gpt-test"),
    ]
    assert usage[1].response_id == "r2"
    s.close()


@pytest.mark.asyncio
async def test_run_usage_ends_the_run_once_and_runs_the_session_policy(tmp_path: Path) -> None:
    """store_run_usage appends the run's end with its usage (ids from the response ids: storing the
    same result twice stores nothing more), and the session policy's run-end work runs after it."""
    from agents.testing import ModelStep
    from agents.usage import Usage

    from turnlog.loop import set_policy

    s = TurnlogSession("u", db=tmp_path / "t.db")
    await s.add_items([{"role": "user", "content": "hello"}])
    set_policy(s.store, "u", SessionPolicy(compact_on_run_end=True, budget=100, summarizer="not-here"))
    steps = [
        ModelStep(output=[assistant_message("Hi.")], usage=Usage(1, 7, output_tokens=2), response_id="r1")
    ]
    agent = Agent(name="a", model=ScriptedModel(steps))
    result = await Runner.run(agent, "again", session=s)
    assert await s.store_run_usage(result, model="gpt-test") == 1
    assert await s.store_run_usage(result, model="gpt-test") == 1  # a retry: nothing new
    types = [r.type for r in s.store.read_session("u")]
    assert types.count("usage_recorded") == 1 and types.count("run_finished") == 1
    assert types[-2:] == [
        "run_finished",
        "compaction_failed",
    ]  # the policy ran; its summarizer is unknown here
    s.close()


@pytest.mark.asyncio
async def test_a_stored_cache_stable_policy_keeps_each_model_input_a_prefix_of_the_next(
    tmp_path: Path,
) -> None:
    """With the session's stored policy cache-stable (``turnlog policy SESSION --cache-stable``),
    the filter's input to each call starts with the previous call's input (the cut does not move
    for a few short turns), where the default policy drops the oldest message each turn."""
    from turnlog.loop import set_policy

    inputs: dict[bool, list[Any]] = {}
    for stable in (False, True):
        s = TurnlogSession(f"c{stable}", db=tmp_path / f"{stable}.db", budget=1500)
        await s.add_items([long_msg(i) for i in range(30)])
        set_policy(s.store, s.session_id, SessionPolicy(cache_stable=stable))
        assert s._policy().cache_stable is stable
        model = ScriptedModel([[assistant_message(f"ok {i} " * 30)] for i in range(3)])
        config = RunConfig(call_model_input_filter=s.model_input_filter)
        for i in range(3):
            await Runner.run(Agent(name="a", model=model), f"next {i} " * 30, session=s, run_config=config)
        inputs[stable] = [call.input for call in model.calls]
        assert len(inputs[stable]) == 3
        s.close()

    def prefixes(calls: list[Any]) -> int:
        return sum(after[: len(before)] == before for before, after in itertools.pairwise(calls))

    assert prefixes(inputs[True]) == 2 and prefixes(inputs[False]) == 0
