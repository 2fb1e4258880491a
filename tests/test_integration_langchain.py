"""LangChain: TurnlogChatMessageHistory behaves as LangChain's own SQL backend does.

The protocol tests are written from ``BaseChatMessageHistory``'s documented behaviour and run against
langchain-community's ``SQLChatMessageHistory`` (sync mode, and async mode on aiosqlite: one instance
serves one of the two) as well as against the adapter through its sync and its async methods, so they
prove the behaviour is LangChain's. Then the turnlog side: the same store read by ``turnlog log``,
``context`` and ``verify``; a SIGKILL in the middle of a run; the example.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core", reason="needs the langchain extra")
pytest.importorskip("langchain_community", reason="needs the integrations-test extra")
pytest.importorskip("greenlet", reason="SQLChatMessageHistory needs greenlet")

from click.testing import CliRunner
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    get_buffer_string,
)

from turnlog.cli import cli
from turnlog.integrations.langchain import TurnlogChatMessageHistory
from turnlog.store import InvalidEventError, SessionRewound, SQLiteStore

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "scripts" / "examples" / "langchain_example.py"

with warnings.catch_warnings():  # "langchain-community is being sunset": it is only our reference here
    warnings.simplefilter("ignore")
    from langchain_community.chat_message_histories import SQLChatMessageHistory

CALL = {"name": "get_weather", "args": {"city": "Paris", "days": [1, 2]}, "id": "call_1", "type": "tool_call"}


def conversation() -> list[BaseMessage]:
    """Every message type, with ids, content blocks, tool calls and their results, metadata."""
    return [
        SystemMessage("be brief", id="s1"),
        HumanMessage(content=[{"type": "text", "text": "hi"}, {"type": "image", "url": "https://x/y.png"}]),
        AIMessage(
            "",
            id="a1",
            tool_calls=[CALL],
            invalid_tool_calls=[{"name": "bad", "args": "{oops", "id": "call_2", "error": "not JSON"}],
            additional_kwargs={"refusal": None},
            response_metadata={"model_name": "fake", "finish_reason": "tool_calls"},
            usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
        ),
        ToolMessage("sunny", tool_call_id="call_1", name="get_weather", artifact={"raw": [1]}, id="t1"),
        ToolMessage("boom", tool_call_id="call_2", status="error"),
        AIMessage("It is sunny.", id="a2", name="assistant-bot"),
        ChatMessage(content="a note", role="critic"),
    ]


class History:
    """One backend, driven through its sync or its async methods."""

    def __init__(self, make: Callable[[str], BaseChatMessageHistory], use_async: bool) -> None:
        self.make, self.use_async = make, use_async

    def of(self, session_id: str) -> BaseChatMessageHistory:
        return self.make(session_id)

    def add(self, h: BaseChatMessageHistory, messages: Sequence[BaseMessage]) -> None:
        if self.use_async:
            asyncio.run(h.aadd_messages(messages))
        else:
            h.add_messages(messages)

    def get(self, h: BaseChatMessageHistory) -> list[BaseMessage]:
        return asyncio.run(h.aget_messages()) if self.use_async else h.messages

    def clear(self, h: BaseChatMessageHistory) -> None:
        if self.use_async:
            asyncio.run(h.aclear())
        else:
            h.clear()


@pytest.fixture(params=["sql-sync", "sql-async", "turnlog-sync", "turnlog-async"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[History]:
    kind, mode = request.param.split("-")
    use_async = mode == "async"
    made: list[Any] = []

    def make(session_id: str) -> BaseChatMessageHistory:
        h: BaseChatMessageHistory
        if kind == "turnlog":
            h = TurnlogChatMessageHistory(session_id, db=tmp_path / "turnlog.db")
        elif use_async:
            url = f"sqlite+aiosqlite:///{tmp_path / 'lc.db'}"
            h = SQLChatMessageHistory(session_id, connection=url, async_mode=True)
        else:
            h = SQLChatMessageHistory(session_id, connection=f"sqlite:///{tmp_path / 'lc.db'}")
        made.append(h)
        return h

    yield History(make, use_async)
    for h in made:
        if isinstance(h, TurnlogChatMessageHistory):
            h.close()


# --- protocol: the same behaviour on LangChain's SQL backend and on turnlog -----------------------


def test_a_new_history_is_empty(backend: History) -> None:
    assert backend.get(backend.of("s")) == []


def test_messages_read_back_equal_to_what_was_added(backend: History) -> None:
    h = backend.of("s")
    sent = conversation()
    backend.add(h, sent)
    got = backend.get(h)
    assert got == sent
    assert [type(m) for m in got] == [type(m) for m in sent]
    assert got[2].tool_calls == [CALL] and got[2].usage_metadata == sent[2].usage_metadata  # type: ignore[attr-defined]
    assert got[1].id is None  # added without an id, read back without one
    # A fresh instance on the same storage reads the same.
    assert backend.get(backend.of("s")) == sent


def test_order_is_kept_across_calls_and_the_convenience_methods(backend: History) -> None:
    h = backend.of("s")
    backend.add(h, [HumanMessage("1")])
    if (
        backend.use_async
    ):  # the convenience methods are sync (SQLChatMessageHistory's async mode refuses them)
        backend.add(h, [HumanMessage("2")])
        backend.add(h, [AIMessage("3")])
        backend.add(h, [HumanMessage("4", id="h4")])
    else:
        h.add_user_message("2")
        h.add_ai_message("3")
        h.add_message(HumanMessage("4", id="h4"))
    backend.add(h, [AIMessage("5"), HumanMessage("6")])
    got = backend.get(h)
    assert [m.content for m in got] == ["1", "2", "3", "4", "5", "6"]
    assert [m.type for m in got] == ["human", "human", "ai", "human", "ai", "human"]
    assert got[3].id == "h4"
    assert get_buffer_string(got) == "Human: 1\nHuman: 2\nAI: 3\nHuman: 4\nAI: 5\nHuman: 6"
    if not backend.use_async:
        assert str(h) == get_buffer_string(got)


def test_sessions_are_isolated(backend: History) -> None:
    a, b = backend.of("a"), backend.of("b")
    backend.add(a, [HumanMessage("for a")])
    backend.add(b, [HumanMessage("for b"), AIMessage("b too")])
    backend.clear(a)
    assert backend.get(a) == []
    assert [m.content for m in backend.get(b)] == ["for b", "b too"]


def test_clear_empties_and_the_history_is_reusable(backend: History) -> None:
    h = backend.of("s")
    backend.clear(h)  # clearing nothing is fine
    backend.add(h, conversation())
    backend.clear(h)
    assert backend.get(h) == []
    backend.add(h, [HumanMessage("again", id="h9")])
    assert backend.get(h) == [HumanMessage("again", id="h9")]
    assert backend.get(backend.of("s")) == [HumanMessage("again", id="h9")]


# --- turnlog side --------------------------------------------------------------------------------


def test_sync_and_async_on_one_instance(tmp_path: Path) -> None:
    """SQLChatMessageHistory refuses the other mode's methods; the adapter serves both (a choice)."""
    h = TurnlogChatMessageHistory("s", db=tmp_path / "t.db")
    h.add_messages([HumanMessage("sync")])
    asyncio.run(h.aadd_messages([AIMessage("async")]))
    assert asyncio.run(h.aget_messages()) == h.messages == [HumanMessage("sync"), AIMessage("async")]
    h.close()


def test_clear_is_a_compensating_event_and_the_log_keeps_everything(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "t.db") as store:
        h = TurnlogChatMessageHistory("s", db=store)
        h.add_messages(conversation())
        before = len(store.read_session("s"))
        h.clear()
        h.add_user_message("new generation")
        records = store.read_session("s")
        assert len(records) == before + 2
        rewind = records[before].event
        assert isinstance(rewind, SessionRewound)
        assert (rewind.to_version, rewind.reason, rewind.source) == (0, "clear", "langchain")
        assert [m.content for m in h.messages] == ["new generation"]
        h.close()  # the caller's store stays open
        assert store.verify().ok


def test_bad_input_is_a_clear_error_and_nothing_is_stored(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "t.db") as store:
        h = TurnlogChatMessageHistory("s", db=store)
        with pytest.raises(InvalidEventError, match="not JSON"):
            h.add_messages([HumanMessage("ok"), ToolMessage("x", tool_call_id="c", artifact=object())])
        with pytest.raises(InvalidEventError, match="BaseMessage"):
            h.add_messages([HumanMessage("ok"), "not a message"])  # type: ignore[list-item]
        with pytest.raises(InvalidEventError, match="session id"):
            TurnlogChatMessageHistory("has space", db=store).add_user_message("x")
        assert store.head_version("s") == 0


def test_messages_written_by_other_writers_read_as_langchain_messages(tmp_path: Path) -> None:
    from turnlog.store import MessageAppended, ToolCall, ToolReturned

    with SQLiteStore.open(tmp_path / "t.db") as store:
        call = ToolCall(id="c1", name="f", arguments='{"x": 1}')
        store.append(
            "s",
            [
                MessageAppended(role="user", content="q"),
                MessageAppended(role="assistant", content="", tool_calls=(call,)),
                ToolReturned(tool_call_id="c1", tool_name="f", content="r", is_error=True),
            ],
        )
        got = TurnlogChatMessageHistory("s", db=store).messages
        assert got[0] == HumanMessage("q")
        assert got[1].tool_calls == [{"name": "f", "args": {"x": 1}, "id": "c1", "type": "tool_call"}]  # type: ignore[attr-defined]
        assert got[2] == ToolMessage("r", tool_call_id="c1", name="f", status="error")


def _scripted_run(db: Path) -> None:
    """A tool-calling turn through LangChain's fake chat model, kept in the adapter."""
    model = GenericFakeChatModel(
        messages=iter([AIMessage("", tool_calls=[CALL]), AIMessage("It is sunny in Paris.")])
    )
    h = TurnlogChatMessageHistory("chat", db=db)
    h.add_messages([SystemMessage("Be brief."), HumanMessage("Weather in Paris?")])
    reply = model.invoke(h.messages)
    h.add_message(reply)
    h.add_message(ToolMessage("sunny, 21 C", tool_call_id="call_1", name="get_weather"))
    h.add_message(model.invoke(h.messages))
    h.close()


def test_turnlog_log_context_and_verify_show_the_conversation(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    _scripted_run(db)
    runner = CliRunner()

    log = runner.invoke(cli, ["--db", str(db), "log", "chat", "--json"])
    assert log.exit_code == 0, log.output
    text = log.output
    for shown in ("Be brief.", "Weather in Paris?", "get_weather", "sunny, 21 C", "It is sunny in Paris."):
        assert shown in text

    ctx = runner.invoke(cli, ["--db", str(db), "context", "chat", "--budget", "4000", "--json"])
    assert ctx.exit_code == 0, ctx.output
    messages = json.loads(ctx.output)["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2]["tool_calls"][0]["id"] == "call_1"
    assert messages[2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert json.loads(messages[2]["tool_calls"][0]["function"]["arguments"]) == CALL["args"]
    assert messages[3]["tool_call_id"] == "call_1" and "sunny, 21 C" in messages[3]["content"]
    assert messages[4]["content"] == "It is sunny in Paris."

    verify = runner.invoke(cli, ["--db", str(db), "verify"])
    assert verify.exit_code == 0, verify.output


WRITER = """
import sys
from langchain_core.messages import HumanMessage
from turnlog.integrations.langchain import TurnlogChatMessageHistory
h = TurnlogChatMessageHistory("crash", db=sys.argv[1])
for i in range(100_000):
    h.add_messages([HumanMessage(f"message {i}", id=f"m{i}")])
    print(i, flush=True)  # after add_messages returned: acknowledged
"""


def test_a_sigkill_loses_no_acknowledged_message(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, env=env, text=True
    )
    assert proc.stdout is not None
    acknowledged = []
    for line in proc.stdout:
        acknowledged.append(int(line))
        if len(acknowledged) >= 30:
            break
    proc.send_signal(signal.SIGKILL)
    rest = proc.stdout.read()
    proc.wait()
    acknowledged += [int(line) for line in rest.split("\n")[:-1] if line]  # a cut last line: not acked
    ids = [m.id for m in TurnlogChatMessageHistory("crash", db=db).messages]
    assert ids[: len(acknowledged)] == [f"m{i}" for i in acknowledged]
    assert len(ids) - len(acknowledged) <= 1  # at most the one whose acknowledgement the kill cut
    with SQLiteStore.open(db) as store:
        assert store.verify().ok


def test_the_example_runs(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    db = tmp_path / "example.db"
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), str(db)], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "tool: sunny, 21 C" in result.stdout
    assert "ai: It is sunny in Paris." in result.stdout
    assert "verify: ok" in result.stdout
    assert len(TurnlogChatMessageHistory("weather-chat", db=db).messages) == 5


def test_usage_goes_to_the_ledger_and_stays_after_a_clear(tmp_path: Path) -> None:
    from turnlog.store import UsageRecorded

    with SQLiteStore.open(tmp_path / "t.db") as store:
        h = TurnlogChatMessageHistory("s", db=store)
        usage = {
            "input_tokens": 30,
            "output_tokens": 7,
            "total_tokens": 37,
            "input_token_details": {"cache_read": 10},
            "output_token_details": {"reasoning": 2},
        }
        h.add_messages([AIMessage("hi", usage_metadata=usage, response_metadata={"model_name": "m-1"})])
        h.add_ai_message("no usage")
        h.clear()
        recorded = [r.event for r in store.read_session("s") if isinstance(r.event, UsageRecorded)]
        assert [
            (u.model, u.input_tokens, u.output_tokens, u.cache_read_tokens, u.reasoning_tokens)
            for u in recorded
        ] == [("m-1", 30, 7, 10, 2)]
        assert h.messages == []


def test_tool_call_ids_turnlog_cannot_take_keep_their_pairs(tmp_path: Path) -> None:
    """LangChain ids are any string; turnlog's have no whitespace: such an id maps to a stable digest,
    the same for the call and its result, and reads back as LangChain wrote it."""
    odd = {"name": "f", "args": {}, "id": "call with spaces", "type": "tool_call"}
    sent = [AIMessage("", tool_calls=[odd]), ToolMessage("r", tool_call_id="call with spaces")]
    with SQLiteStore.open(tmp_path / "t.db") as store:
        h = TurnlogChatMessageHistory("s", db=store)
        h.add_messages(sent)
        assert h.messages == sent
        call, result = (r.event for r in store.read_session("s")[1:])
        assert call.tool_calls[0].id == result.tool_call_id != "call with spaces"  # type: ignore[union-attr]


def test_drop_in_for_runnable_with_message_history(tmp_path: Path) -> None:
    """The deprecated RunnableWithMessageHistory, as existing apps use it: one line changes."""
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables.history import RunnableWithMessageHistory

    model = GenericFakeChatModel(messages=iter([AIMessage("Paris is in France."), AIMessage("Paris.")]))
    prompt = ChatPromptTemplate.from_messages(
        [("system", "be brief"), MessagesPlaceholder("history"), ("human", "{q}")]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chain = RunnableWithMessageHistory(
            prompt | model,
            lambda session_id: TurnlogChatMessageHistory(session_id, db=tmp_path / "t.db"),
            input_messages_key="q",
            history_messages_key="history",
        )
    config: Any = {"configurable": {"session_id": "s1"}}
    chain.invoke({"q": "Where is Paris?"}, config)
    chain.invoke({"q": "What did I ask?"}, config)
    got = TurnlogChatMessageHistory("s1", db=tmp_path / "t.db").messages
    assert [(m.type, m.content) for m in got] == [
        ("human", "Where is Paris?"),
        ("ai", "Paris is in France."),
        ("human", "What did I ask?"),
        ("ai", "Paris."),
    ]
