"""LangGraph graphs on TurnlogSaver: the same runs on SqliteSaver and on turnlog give the same states.

Real compiled graphs (StateGraph with MessagesState, LangChain's fake chat model, a ToolNode,
interrupts and Command(resume=...), time travel from get_state_history, update_state, RemoveMessage,
a subgraph with its own checkpoints), each run on both checkpointers and compared. Then the turnlog
side: the thread is an ordinary session for ``turnlog log``, ``context --json`` and ``verify``; time
travel, RemoveMessage and delete_thread are compensating events; a SIGKILL in the middle of a run
loses no acknowledged checkpoint; the example runs.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite", reason="needs the langgraph extra")

from click.testing import CliRunner
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

from turnlog.cli import cli
from turnlog.integrations.langgraph import TurnlogSaver
from turnlog.store import MessageRemoved, SessionRewound, SQLiteStore, StateRecorded

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "scripts" / "examples" / "langgraph_example.py"
CALL = {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1", "type": "tool_call"}


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny, 21 C in {city}"


def weather_graph(checkpointer: BaseCheckpointSaver[str], replies: list[AIMessage]) -> Any:
    """An agent with one tool: the fake model answers with ``replies`` in turn."""
    model = GenericFakeChatModel(messages=iter(replies))

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([get_weather]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def tool_replies() -> list[AIMessage]:
    return [AIMessage("", tool_calls=[CALL]), AIMessage("It is sunny in Paris."), AIMessage("Bye.")]


@pytest.fixture(params=["sqlite", "turnlog"])
def make_saver(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], BaseCheckpointSaver[str]]]:
    """A factory of checkpointers on one file (several may be open at once, as separate processes)."""
    opened: list[Any] = []

    def make() -> BaseCheckpointSaver[str]:
        if request.param == "sqlite":
            conn = sqlite3.connect(tmp_path / "lg.db", check_same_thread=False)
            opened.append(conn)
            return SqliteSaver(conn)
        saver = TurnlogSaver(db=tmp_path / "turnlog.db")
        opened.append(saver)
        return saver

    yield make
    for item in opened:
        item.close()


def texts(messages: list[AnyMessage]) -> list[str]:
    return [
        f"{m.type}:{m.text or json.dumps([c['name'] for c in getattr(m, 'tool_calls', [])])}"
        for m in messages
    ]


def history_shape(app: Any, config: Any) -> list[tuple[Any, ...]]:
    """What get_state_history shows, without the ids that differ from run to run."""
    return [
        (h.metadata["step"], h.metadata["source"], h.next, len(h.values.get("messages", [])))
        for h in app.get_state_history(config)
    ]


# --- graphs: the same on both checkpointers -------------------------------------------------------


def test_a_tool_loop_persists_and_continues(make_saver: Callable[[], BaseCheckpointSaver[str]]) -> None:
    config = {"configurable": {"thread_id": "weather"}}
    app = weather_graph(make_saver(), tool_replies())
    out = app.invoke({"messages": [HumanMessage("Weather in Paris?")]}, config)
    assert texts(out["messages"]) == [
        "human:Weather in Paris?",
        'ai:["get_weather"]',
        "tool:sunny, 21 C in Paris",
        "ai:It is sunny in Paris.",
    ]
    assert history_shape(app, config) == [
        (3, "loop", (), 4),
        (2, "loop", ("agent",), 3),
        (1, "loop", ("tools",), 2),
        (0, "loop", ("agent",), 1),
        (-1, "input", ("__start__",), 0),
    ]
    # A new graph object on a new checkpointer of the same file continues the thread.
    again = weather_graph(make_saver(), [AIMessage("Bye.")])
    out = again.invoke({"messages": [HumanMessage("Thanks")]}, config)
    assert texts(out["messages"])[-2:] == ["human:Thanks", "ai:Bye."]
    assert len(list(again.get_state_history(config))) == 8


def test_interrupt_and_resume(make_saver: Callable[[], BaseCheckpointSaver[str]]) -> None:
    class State(TypedDict):
        question: str
        answer: str

    def ask(state: State) -> dict[str, Any]:
        return {"answer": interrupt({"question": state["question"]})}

    graph = StateGraph(State)
    graph.add_node("ask", ask)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", END)
    app = graph.compile(checkpointer=make_saver())
    config = {"configurable": {"thread_id": "human-in-the-loop"}}
    first = app.invoke({"question": "Deploy?", "answer": ""}, config)
    assert first["__interrupt__"][0].value == {"question": "Deploy?"}
    state = app.get_state(config)
    assert state.next == ("ask",) and state.tasks[0].interrupts[0].value == {"question": "Deploy?"}
    # The interrupt is a pending write of the checkpoint, found by a fresh checkpointer too.
    assert weather_graph(make_saver(), []).checkpointer.get_tuple(config).pending_writes  # type: ignore[union-attr]
    app2 = graph.compile(checkpointer=make_saver())
    done = app2.invoke(Command(resume="yes"), config)
    assert done == {"question": "Deploy?", "answer": "yes"}
    assert app2.get_state(config).next == ()


def test_time_travel_replays_and_forks(make_saver: Callable[[], BaseCheckpointSaver[str]]) -> None:
    config = {"configurable": {"thread_id": "travel"}}
    app = weather_graph(make_saver(), tool_replies())
    app.invoke({"messages": [HumanMessage("Weather in Paris?")]}, config)
    history = list(app.get_state_history(config))
    before_tools = next(h for h in history if h.next == ("tools",))
    # Replay from an earlier checkpoint: the tool and the model run again from there.
    app2 = weather_graph(make_saver(), [AIMessage("Replayed: sunny.")])
    out = app2.invoke(None, before_tools.config)
    assert texts(out["messages"])[-2:] == ["tool:sunny, 21 C in Paris", "ai:Replayed: sunny."]
    # Fork: change the state at that checkpoint, then continue from the fork.
    forked = app2.update_state(before_tools.config, {"messages": [HumanMessage("Rome instead?")]})
    assert texts(app2.get_state(forked).values["messages"]) == [
        "human:Weather in Paris?",
        'ai:["get_weather"]',
        "human:Rome instead?",
    ]
    latest = app2.get_state(config)
    assert latest.config["configurable"]["checkpoint_id"] == forked["configurable"]["checkpoint_id"]
    sources = [h.metadata["source"] for h in app2.get_state_history(config)]
    assert len(sources) == len(history) + 4  # a replay fork point, 2 replayed steps, the update
    assert sources[:4] == ["update", "loop", "loop", "fork"]


def test_update_state_and_remove_message(make_saver: Callable[[], BaseCheckpointSaver[str]]) -> None:
    config = {"configurable": {"thread_id": "edit"}}
    app = weather_graph(make_saver(), tool_replies())
    out = app.invoke({"messages": [SystemMessage("Be brief."), HumanMessage("Weather in Paris?")]}, config)
    human = out["messages"][1]
    app.update_state(config, {"messages": [RemoveMessage(id=human.id)]})
    after = app.get_state(config)
    assert human.id not in [m.id for m in after.values["messages"]]
    assert after.metadata["source"] == "update" and len(after.values["messages"]) == 4
    app.update_state(config, {"messages": [AIMessage("Edited.", id=out["messages"][-1].id)]}, as_node="agent")
    assert texts(app.get_state(config).values["messages"])[-1] == "ai:Edited."


def test_a_subgraph_keeps_its_own_checkpoints(make_saver: Callable[[], BaseCheckpointSaver[str]]) -> None:
    class State(TypedDict):
        log: list[str]

    def step(state: State) -> dict[str, Any]:
        approved = interrupt("approve?")
        return {"log": [*state["log"], f"child:{approved}"]}

    child = StateGraph(State)
    child.add_node("step", step)
    child.add_edge(START, "step")
    child.add_edge("step", END)

    def before(state: State) -> dict[str, Any]:
        return {"log": [*state["log"], "parent"]}

    parent = StateGraph(State)
    parent.add_node("before", before)
    parent.add_node("child", child.compile())
    parent.add_edge(START, "before")
    parent.add_edge("before", "child")
    parent.add_edge("child", END)
    saver = make_saver()
    app = parent.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "nested"}}
    app.invoke({"log": []}, config)
    state = app.get_state(config, subgraphs=True)
    assert state.next == ("child",)
    sub = state.tasks[0].state
    assert sub is not None and sub.next == ("step",) and sub.values == {"log": ["parent"]}  # type: ignore[union-attr]
    namespaces = {
        t.config["configurable"]["checkpoint_ns"]
        for t in saver.list({"configurable": {"thread_id": "nested"}})
    }
    assert "" in namespaces and any(ns.startswith("child:") for ns in namespaces)
    done = parent.compile(checkpointer=make_saver()).invoke(Command(resume="ok"), config)
    assert done == {"log": ["parent", "child:ok"]}


# --- the turnlog side ------------------------------------------------------------------------------


def scripted_run(db: Path) -> None:
    with TurnlogSaver(db=db) as saver:
        app = weather_graph(saver, tool_replies())
        config = {"configurable": {"thread_id": "weather"}}
        app.invoke({"messages": [SystemMessage("Be brief."), HumanMessage("Weather in Paris?")]}, config)


def test_turnlog_log_context_and_verify_show_the_conversation(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    scripted_run(db)
    runner = CliRunner()
    log = runner.invoke(cli, ["--db", str(db), "log", "weather", "--json"])
    assert log.exit_code == 0, log.output
    for shown in (
        "Be brief.",
        "Weather in Paris?",
        "get_weather",
        "sunny, 21 C in Paris",
        "It is sunny in Paris.",
    ):
        assert shown in log.output
    ctx = runner.invoke(cli, ["--db", str(db), "context", "weather", "--budget", "4000", "--json"])
    assert ctx.exit_code == 0, ctx.output
    messages = json.loads(ctx.output)["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2]["tool_calls"][0]["id"] == "call_1"
    assert messages[2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert messages[3]["tool_call_id"] == "call_1" and "sunny, 21 C in Paris" in messages[3]["content"]
    assert messages[4]["content"] == "It is sunny in Paris."
    verify = runner.invoke(cli, ["--db", str(db), "verify"])
    assert verify.exit_code == 0, verify.output
    with SQLiteStore.open(db) as store:
        types = [r.type for r in store.read_session("weather")]
        assert types.count("message_appended") == 4 and types.count("tool_returned") == 1  # once each
        assert types.count("state_recorded") >= 5


def test_remove_time_travel_and_delete_are_compensating_events(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    scripted_run(db)
    config = {"configurable": {"thread_id": "weather"}}
    with TurnlogSaver(db=db) as saver:
        app = weather_graph(saver, [AIMessage("Rome: rain.")])
        messages = app.get_state(config).values["messages"]
        app.update_state(config, {"messages": [RemoveMessage(id=messages[1].id)]})
        earlier = next(h for h in app.get_state_history(config) if h.next == ("tools",))
        app.update_state(earlier.config, {"messages": [HumanMessage("And Rome?")]})
        saver.delete_thread("weather")
        assert app.get_state(config).values == {}
    with SQLiteStore.open(db) as store:
        events = [r.event for r in store.read_session("weather")]
        removed = [e for e in events if isinstance(e, MessageRemoved)]
        assert len(removed) == 1 and removed[0].source == "langgraph"
        rewinds = [(e.reason, e.to_version) for e in events if isinstance(e, SessionRewound)]
        assert [r for r, _ in rewinds] == ["time_travel", "delete"] and rewinds[-1][1] == 0
        assert store.verify().ok
    runner = CliRunner()
    ctx = runner.invoke(cli, ["--db", str(db), "context", "weather", "--budget", "4000", "--json"])
    assert ctx.exit_code == 0 and json.loads(ctx.output)["messages"] == []  # deleted: nothing is live
    log = runner.invoke(cli, ["--db", str(db), "log", "weather"])
    assert "And Rome?" in log.output and "It is sunny in Paris." in log.output  # the log keeps all


def test_time_travel_context_is_the_forked_conversation(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    scripted_run(db)
    config = {"configurable": {"thread_id": "weather"}}
    with TurnlogSaver(db=db) as saver:
        app = weather_graph(saver, [AIMessage("Rome: rain.")])
        earlier = next(
            h for h in app.get_state_history(config) if h.next == ("agent",) and h.metadata["step"] == 0
        )
        app.update_state(earlier.config, {"messages": [HumanMessage("Rome instead?")]})
        out = app.invoke(None, config)
    ctx = CliRunner().invoke(cli, ["--db", str(db), "context", "weather", "--budget", "4000", "--json"])
    shown = [(m["role"], m.get("content")) for m in json.loads(ctx.output)["messages"]]
    assert shown == [
        (m.type.replace("human", "user").replace("ai", "assistant"), m.text) for m in out["messages"]
    ]
    assert shown[-2:] == [("user", "Rome instead?"), ("assistant", "Rome: rain.")]


WRITER = """
import sys
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from turnlog.integrations.langgraph import TurnlogSaver
# A few replies, cycled: the model's first call serializes it (its repr), and 100,000 of them took
# two minutes there before the first turn.
model = FakeMessagesListChatModel(responses=[AIMessage(f"reply {i}") for i in range(10)])
graph = StateGraph(MessagesState)
graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"][-1:])]})
graph.add_edge(START, "agent")
app = graph.compile(checkpointer=TurnlogSaver(db=sys.argv[1]))
config = {"configurable": {"thread_id": "crash"}}
for i in range(100_000):
    app.invoke({"messages": [HumanMessage(f"message {i}", id=f"m{i}")]}, config)
    print(i, flush=True)  # after invoke returned: its checkpoints are acknowledged
"""


def test_a_sigkill_loses_no_acknowledged_checkpoint(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, env=env, text=True
    )
    assert proc.stdout is not None
    acknowledged = []
    for line in proc.stdout:
        acknowledged.append(int(line))
        if len(acknowledged) >= 20:
            break
    proc.send_signal(signal.SIGKILL)
    rest = proc.stdout.read()
    proc.wait()
    acknowledged += [int(line) for line in rest.split("\n")[:-1] if line]
    with TurnlogSaver(db=db) as saver:
        latest = saver.get_tuple({"configurable": {"thread_id": "crash"}})
        assert latest is not None
        messages = latest.checkpoint["channel_values"]["messages"]
        human = [m.id for m in messages if m.type == "human"]
        assert human[: len(acknowledged)] == [f"m{i}" for i in acknowledged]
        assert len(human) - len(acknowledged) <= 1  # at most the turn whose acknowledgement the kill cut
        checkpoints = list(saver.list({"configurable": {"thread_id": "crash"}}))
        assert len(checkpoints) >= 3 * len(acknowledged)  # input, loop, then agent: per invoke
    with SQLiteStore.open(db) as store:
        assert store.verify().ok
        ids = [
            r.event.origin.item["data"]["id"]
            for r in store.read_session("crash")
            if getattr(r.event, "origin", None)
        ]
        assert [i for i in ids if i.startswith("m")][: len(acknowledged)] == [f"m{i}" for i in acknowledged]
        assert len([r for r in store.read_session("crash") if isinstance(r.event, StateRecorded)]) >= len(
            checkpoints
        )


def test_the_example_runs(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    db = tmp_path / "example.db"
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), str(db)], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "tool: sunny, 21 C in Paris" in result.stdout
    assert "assistant: It is sunny in Paris." in result.stdout
    assert "verify: ok" in result.stdout
    with TurnlogSaver(db=db) as saver:
        got = saver.get_tuple({"configurable": {"thread_id": "weather-thread"}})
        assert got is not None and len(got.checkpoint["channel_values"]["messages"]) == 4
