"""pydantic-ai ConversationStore protocol, run against pydantic-ai's InMemoryConversationStore and
turnlog's TurnlogConversationStore alike, plus what turnlog shows of the same conversations."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("pydantic_ai")

from click.testing import CliRunner
from pydantic_ai import Agent, RunContext
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationStore,
    InMemoryConversationStore,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from turnlog.cli import cli
from turnlog.integrations.pydantic_ai import TurnlogConversationStore
from turnlog.store import SQLiteStore
from turnlog.store.events import UsageRecorded

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    last = messages[-1].parts[-1]
    if last.part_kind == "user-prompt":
        return ModelResponse(
            parts=[ToolCallPart("get_weather", {"city": "Paris"}, tool_call_id=f"call_{len(messages)}")]
        )
    return ModelResponse(parts=[TextPart("It is sunny in Paris.")])


def make_agent() -> Agent[None, str]:
    agent = Agent(FunctionModel(script), instructions="be brief")

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return f"sunny in {city}"

    return agent


@pytest.fixture(params=["memory", "turnlog"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], ConversationStore]]:
    opened: list[TurnlogConversationStore] = []
    memory = InMemoryConversationStore()

    def make() -> ConversationStore:
        if request.param == "memory":
            return memory
        store = TurnlogConversationStore(db=tmp_path / "t.db")
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


async def _turn(store: ConversationStore, cid: str, prompt: str, scope: str | None = None) -> Any:
    conversation = await store.load(cid, scope=scope) or Conversation(conversation_id=cid)
    result = await make_agent().run(prompt, conversation=conversation)
    entries = await store.save(result, scope=scope)
    return result, entries


def test_save_load_roundtrip_and_append_only_new(make_store: Callable[[], ConversationStore]) -> None:
    store = make_store()

    async def go() -> None:
        assert await store.load("c1") is None
        result, entries = await _turn(store, "c1", "Weather in Paris?")
        assert [e.parent_id for e in entries] == [None, *[e.id for e in entries[:-1]]]
        assert len(entries) == 4
        loaded = await store.load("c1")
        assert loaded is not None
        assert loaded.messages == result.all_messages()
        assert loaded.usage == result.usage
        result2, entries2 = await _turn(store, "c1", "And tomorrow?")
        assert len(entries2) == 4 and entries2[0].parent_id == entries[-1].id
        again = await make_store().load("c1")  # a fresh adapter on the same file sees the same
        assert again is not None and again.messages == result2.all_messages()
        tail = await store.load("c1", limit=3)
        assert tail is not None and tail.messages == result2.all_messages()[-3:]
        with pytest.raises(UserError):
            await store.load("c1", limit=-1)
        ids = [e.id for e in (await store.load_entries("c1")) or []]
        assert ids == [e.id for e in entries + entries2]

    run(go())


def test_conflicts_and_scope(make_store: Callable[[], ConversationStore]) -> None:
    store = make_store()

    async def go() -> None:
        await _turn(store, "c1", "hi", scope="alice")
        stale = await store.load("c1", scope="alice")
        assert stale is not None
        await _turn(store, "c1", "again", scope="alice")
        stale_result = await make_agent().run("late", conversation=stale)
        with pytest.raises(ConversationConflict):
            await store.save(stale_result)
        fresh = await make_agent().run("new", conversation=Conversation(conversation_id="c1"))
        with pytest.raises(ConversationConflict):
            await store.save(fresh)
        assert await store.load("c1", scope="bob") is None
        assert await store.load("c1", scope="alice") is not None
        await store.delete("c1", scope="bob")  # other owner's: left alone
        assert await store.load("c1") is not None

    run(go())


def test_concurrent_saves_one_wins(make_store: Callable[[], ConversationStore]) -> None:
    store = make_store()

    async def go() -> None:
        await _turn(store, "c1", "hi")
        a = await store.load("c1")
        b = await store.load("c1")
        assert a is not None and b is not None
        ra = await make_agent().run("a", conversation=a)
        rb = await make_agent().run("b", conversation=b)
        outcomes = []
        for r in (ra, rb):
            try:
                await make_store().save(r)
                outcomes.append("ok")
            except ConversationConflict:
                outcomes.append("conflict")
        assert sorted(outcomes) == ["conflict", "ok"]

    run(go())


def test_list_branch_fork_delete(make_store: Callable[[], ConversationStore]) -> None:
    store = make_store()

    async def go() -> None:
        _, first = await _turn(store, "c1", "one", scope="s")
        await _turn(store, "c2", "two", scope="t")
        assert [r.conversation_id for r in await store.list_conversations()] == ["c2", "c1"]
        assert [r.conversation_id for r in await store.list_conversations(scope="s")] == ["c1"]
        assert len(await store.list_conversations(limit=1)) == 1
        with pytest.raises(UserError):
            await store.list_conversations(limit=-1)
        loaded = await store.load("c1")
        assert loaded is not None
        branched = await store.branch("c1", at=2, expected_revision=loaded.revision)
        assert len(branched.messages) == 2
        record = await store.read_record("c1")
        assert record is not None and record.branches == [first[-1].id]
        with pytest.raises(ConversationConflict):
            await store.branch("c1", at=1, expected_revision=loaded.revision)
        back = await store.branch("c1", from_entry=first[-1].id, expected_revision=branched.revision)
        assert len(back.messages) == 4
        with pytest.raises(UserError):
            await store.branch("nope", at=0, expected_revision="x")
        fork = await store.fork("c1", at=2, new_conversation_id="f1")
        assert len(fork.messages) == 2 and fork.usage.input_tokens == 0
        whole = await store.fork("c1", new_conversation_id="f2")
        assert whole.usage == back.usage
        with pytest.raises(ConversationConflict):
            await store.fork("c1", new_conversation_id="f2")
        await store.delete("c1")
        assert await store.load("c1") is None
        f1 = await store.load("f1")  # the fork's shared entries outlive the parent
        assert f1 is not None and f1.messages == fork.messages
        await _turn(store, "c1", "reborn")
        reborn = await store.load("c1")
        assert reborn is not None and len(reborn.messages) == 4 and reborn.revision != loaded.revision

    run(go())


def test_rewritten_history_is_a_branch(make_store: Callable[[], ConversationStore]) -> None:
    store = make_store()

    async def go() -> None:
        _result, entries = await _turn(store, "c1", "hi")
        loaded = await store.load("c1")
        assert loaded is not None
        rewritten = Conversation(
            messages=loaded.messages[:1], conversation_id="c1", revision=loaded.revision, usage=loaded.usage
        )
        new = await make_agent().run("compacted", conversation=rewritten)
        await store.save(new)
        record = await store.read_record("c1")
        assert record is not None and entries[-1].id in record.branches
        again = await store.load("c1")
        assert again is not None and again.messages == new.all_messages()

    run(go())


def test_turnlog_side(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = TurnlogConversationStore(db=db)
    _result, _ = run(_turn(store, "c1", "Weather in Paris?"))
    run(_turn(store, "c1", "Tomorrow?"))
    conversation = run(store.load("c1"))
    assert conversation is not None
    store.close()
    with SQLiteStore.open(str(db)) as log:
        events = [r.event for r in log.read_session("c1")]
    usage = [e for e in events if e.type == "usage_recorded"]
    assert sum(u.input_tokens for u in usage) == conversation.usage.input_tokens
    assert sum(u.output_tokens for u in usage) == conversation.usage.output_tokens
    assert len([e for e in events if e.type == "tool_returned"]) == 2
    calls = [c.id for e in events if e.type == "message_appended" for c in (e.tool_calls or ())]
    assert len(calls) == len(set(calls)) == 2
    systems = [e for e in events if e.type == "message_appended" and e.role == "system"]
    assert len(systems) == 1
    runner = CliRunner()
    shown = runner.invoke(cli, ["--db", str(db), "log", "c1"])
    assert shown.exit_code == 0 and "get_weather" in shown.output
    ctx = runner.invoke(cli, ["--db", str(db), "context", "c1", "--budget", "10000", "--format", "openai"])
    assert ctx.exit_code == 0, ctx.output
    assert "Weather in Paris?" in ctx.output and "sunny in Paris" in ctx.output
    verify = runner.invoke(cli, ["--db", str(db), "verify"])
    assert verify.exit_code == 0, verify.output
    # delete is a compensating event: the rows stay, the context is empty
    store = TurnlogConversationStore(db=db)
    run(store.delete("c1"))
    store.close()
    with SQLiteStore.open(str(db)) as log:
        last = [r.event for r in log.read_session("c1")][-2]
    assert last.type == "session_rewound" and last.reason == "delete" and last.to_version == 0


def test_testmodel_run(tmp_path: Path) -> None:
    agent = Agent(TestModel())

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    store = TurnlogConversationStore(db=tmp_path / "t.db")
    result = run(agent.run("add", conversation=Conversation(conversation_id="tm")))
    run(store.save(result))
    loaded = run(store.load("tm"))
    assert loaded is not None and loaded.messages == result.all_messages()
    store.close()


CHILD = """
import asyncio, sys
sys.path.insert(0, {tests!r})
from test_integration_pydantic_ai import _turn
from turnlog.integrations.pydantic_ai import TurnlogConversationStore
store = TurnlogConversationStore(db={db!r})
async def go():
    for i in range(1000):
        await _turn(store, "k", f"q{{i}}")
        loaded = await store.load("k")
        print(len(loaded.messages), flush=True)
asyncio.run(go())
"""


def test_sigkill_keeps_every_saved_turn(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    code = CHILD.format(tests=str(ROOT / "tests"), db=str(db))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:
        seen = int(line)
        if seen >= 12:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = TurnlogConversationStore(db=db)
    loaded = run(store.load("k"))
    store.close()
    assert loaded is not None and len(loaded.messages) >= seen and len(loaded.messages) % 4 == 0


def test_example_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/examples/pydantic_ai_example.py")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "sunny" in out.stdout and "turnlog" in out.stdout


def test_turnlog_history_sends_the_budgeted_context(tmp_path: Path) -> None:
    from turnlog.integrations.pydantic_ai_history import TurnlogHistory

    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return script(messages, info)

    db = tmp_path / "t.db"
    store = TurnlogConversationStore(db=db)
    agent = Agent(
        FunctionModel(model),
        instructions="be brief",
        capabilities=[TurnlogHistory(db=store.store, budget=120)],
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return f"sunny in {city} " + "and warm " * 30

    async def go() -> None:
        for i in range(6):
            conversation = await store.load("h") or Conversation(conversation_id="h")
            await store.save(await agent.run(f"question {i}", conversation=conversation))

    run(go())
    loaded = run(store.load("h"))
    assert loaded is not None and len(loaded.messages) == 24  # the store keeps everything
    last = seen[-1]
    assert len(last) < 23  # the model was sent less than the whole history
    calls = {p.tool_call_id for m in last for p in m.parts if isinstance(p, ToolCallPart)}
    returns = {p.tool_call_id for m in last for p in m.parts if p.part_kind == "tool-return"}
    assert calls == returns  # never a call without its return, or the reverse
    texts = [p.content for m in last for p in m.parts if p.part_kind == "user-prompt"]
    assert "question 0" in texts and texts[-1] == "question 5"  # first request kept, current one sent
    systems = [p.content for m in last for p in m.parts if p.part_kind == "system-prompt"]
    assert "be brief" not in systems  # the instructions go once, as instructions
    store.close()


# --- more of the protocol: entries, serialized conversations, forks, scopes, deferred tools --------


def test_load_entries_limit_scope_and_unknown(make_store: Callable[[], ConversationStore]) -> None:
    store = make_store()

    async def go() -> None:
        assert await store.load_entries("nope") is None
        _, entries = await _turn(store, "c1", "hi", scope="s")
        assert await store.load_entries("c1", scope="other") is None
        assert await store.load("c1", scope="other") is None
        whole = await store.load_entries("c1", scope="s")
        assert whole is not None and [e.id for e in whole] == [e.id for e in entries]
        last2 = await store.load_entries("c1", limit=2)
        assert last2 is not None and [e.id for e in last2] == [e.id for e in entries[-2:]]
        assert await store.load_entries("c1", limit=0) == []
        empty = await store.load("c1", limit=0)
        assert empty is not None and empty.messages == []
        assert (await store.read_entry(entries[1].id)) == entries[1]
        with pytest.raises(LookupError):
            await store.read_entry("no-such-entry")
        with pytest.raises(UserError):
            await store.load_entries("c1", limit=-1)

    run(go())


def test_serialized_conversation_is_compared_with_the_stored_one(
    make_store: Callable[[], ConversationStore],
) -> None:
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    store = make_store()

    async def go() -> None:
        result, entries = await _turn(store, "c1", "hi")
        # What an app that keeps the history as JSON has: no new_message_index, only the revision.
        text = ModelMessagesTypeAdapter.dump_json(result.all_messages())
        revision = result.conversation.revision

        def thawed() -> Conversation:
            messages = ModelMessagesTypeAdapter.validate_json(text)
            return Conversation(messages=messages, conversation_id="c1", revision=revision)

        grown = await make_agent().run("more", conversation=thawed())
        added = await store.save(grown)
        assert len(added) == 4 and added[0].parent_id == entries[-1].id
        assert await store.save(grown) == []  # saved again: nothing new
        loaded = await store.load("c1")
        assert loaded is not None and loaded.messages == grown.all_messages()
        stale = await make_agent().run("late", conversation=thawed())
        with pytest.raises(ConversationConflict):
            await store.save(stale)

    run(go())


def test_fork_scope_points_and_independence(make_store: Callable[[], ConversationStore]) -> None:
    store = make_store()

    async def go() -> None:
        _, first = await _turn(store, "c1", "one", scope="s")
        await _turn(store, "c1", "two", scope="s")
        with pytest.raises(UserError):
            await store.fork("c1", source_scope="other", new_conversation_id="x")
        with pytest.raises(UserError):
            await store.fork("c1", at=1, from_entry=first[0].id, new_conversation_id="x")
        with pytest.raises(UserError):
            await store.fork("c1", at=99, new_conversation_id="x")
        empty = await store.fork("c1", at=0, new_conversation_id="f0", scope="t")
        assert empty.messages == [] and empty.usage.input_tokens == 0
        record = await store.read_record("f0")
        assert record is not None and record.scope == "t" and record.forked_from == "c1"
        assert record.forked_at is None and record.head_id is None
        assert [r.conversation_id for r in await store.list_conversations(scope="t")] == ["f0"]
        half = await store.fork("c1", from_entry=first[-1].id, new_conversation_id="f2", source_scope="s")
        assert len(half.messages) == 4 and half.usage.input_tokens == 0
        half_record = await store.read_record("f2")
        assert half_record is not None and half_record.scope == "s" and half_record.forked_at == first[-1].id
        # A turn on the fork leaves the parent as it was, and a fork of the fork shares both.
        await store.save(await make_agent().run("on the fork", conversation=half))
        parent = await store.load("c1")
        assert parent is not None and len(parent.messages) == 8
        assert parent.messages[:4] == [e.message for e in first]
        f2 = await store.load("f2")
        assert (
            f2 is not None
            and f2.messages[:4] == parent.messages[:4]
            and f2.messages[4:] != parent.messages[4:]
        )
        grandchild = await store.fork("f2", at=6, new_conversation_id="g")
        assert grandchild.messages == f2.messages[:6]
        g_entries = await store.load_entries("g")
        assert g_entries is not None and g_entries[0].id == first[0].id  # shared, not copied
        await store.save(await make_agent().run(conversation=grandchild))  # runs the pending call
        g = await store.load("g")
        assert g is not None and g.messages[:6] == f2.messages[:6] and len(g.messages) == 8
        # A turn on an empty fork starts its own history.
        await _turn(store, "f0", "fresh")
        f0 = await store.load("f0")
        assert f0 is not None and len(f0.messages) == 4

    run(go())


def test_branch_back_and_forth_keeps_every_branch(make_store: Callable[[], ConversationStore]) -> None:
    store = make_store()

    async def go() -> None:
        _, first = await _turn(store, "c1", "one", scope="s")
        _, second = await _turn(store, "c1", "two", scope="s")
        loaded = await store.load("c1")
        assert loaded is not None
        with pytest.raises(UserError):
            await store.branch("c1", at=2, expected_revision=loaded.revision, scope="other")
        with pytest.raises(UserError):
            await store.branch("c1", from_entry="no-such-entry", expected_revision=loaded.revision)
        short = await store.branch("c1", at=4, expected_revision=loaded.revision)
        await store.save(await make_agent().run("three", conversation=short))
        record = await store.read_record("c1")
        assert record is not None and record.branches == [second[-1].id]
        # Back to the branch that was left, from its tip: the other one is left in turn.
        back = await store.branch("c1", from_entry=second[-1].id, expected_revision=record.revision)
        assert back.messages == [e.message for e in first + second]
        record = await store.read_record("c1")
        assert record is not None and len(record.branches) == 1 and record.branches != [second[-1].id]
        emptied = await store.branch("c1", at=0, expected_revision=back.revision)
        assert emptied.messages == []
        await _turn(store, "c1", "anew")
        final = await store.load("c1")
        assert final is not None and len(final.messages) == 4

    run(go())


def test_deferred_tool_requests_are_kept(make_store: Callable[[], ConversationStore]) -> None:
    from pydantic_ai import DeferredToolRequests, DeferredToolResults

    def ask(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if messages[-1].parts[-1].part_kind == "user-prompt":
            return ModelResponse(parts=[ToolCallPart("wipe", {"path": "/tmp/x"}, tool_call_id="w1")])
        return ModelResponse(parts=[TextPart("wiped")])

    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(ask), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def wipe(path: str) -> str:
        return f"wiped {path}"

    store = make_store()

    async def go() -> None:
        paused = await agent.run("wipe it", conversation=Conversation(conversation_id="d"))
        assert isinstance(paused.output, DeferredToolRequests)
        await store.save(paused, scope="s")
        loaded = await store.load("d")
        assert loaded is not None and loaded.deferred_tool_requests == paused.output
        approvals = DeferredToolResults(approvals={"w1": True})
        done = await agent.run(conversation=loaded, deferred_tool_results=approvals)
        assert done.output == "wiped"
        await store.save(done)
        again = await store.load("d")
        assert again is not None and again.deferred_tool_requests is None
        assert again.messages == done.all_messages()

    run(go())


def test_delete_with_scope_and_unknown(make_store: Callable[[], ConversationStore]) -> None:
    store = make_store()

    async def go() -> None:
        await store.delete("never-saved")  # nothing to delete: no error
        await _turn(store, "c1", "hi", scope="s")
        await _turn(store, "c2", "hi", scope="s")
        await store.delete("c1", scope="s")
        assert await store.load("c1") is None and await store.read_record("c1") is None
        assert [r.conversation_id for r in await store.list_conversations()] == ["c2"]
        with pytest.raises(UserError):
            await store.fork("c1", new_conversation_id="x")
        stale = await store.load("c2")
        await store.delete("c2")
        assert stale is not None
        with pytest.raises(ConversationConflict):
            await store.save(await make_agent().run("late", conversation=stale))
        assert await store.list_conversations() == []

    run(go())


def test_usage_recorded_sums_to_the_run_usage_once(tmp_path: Path) -> None:
    """A delegate agent's usage (``usage=ctx.usage``) is in the run's usage but in no response of the
    history: it is recorded too, once, whatever is saved again, branched or forked."""

    delegate = Agent(TestModel(custom_output_text="delegated"))

    def lead(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if messages[-1].parts[-1].part_kind == "user-prompt":
            return ModelResponse(parts=[ToolCallPart("ask", {"q": "x"}, tool_call_id=f"a{len(messages)}")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(lead), instructions="be brief")

    @agent.tool
    async def ask(ctx: RunContext[None], q: str) -> str:
        return (await delegate.run(q, usage=ctx.usage)).output

    db = tmp_path / "t.db"
    store = TurnlogConversationStore(db=db)

    def recorded(session: str) -> tuple[int, int]:
        # A session's own events: a fork's history also shows its parent's, billed there.
        events = store.store.read_session(session, own=True)
        usage = [r.event for r in events if isinstance(r.event, UsageRecorded)]
        return sum(u.input_tokens for u in usage), sum(u.output_tokens for u in usage)

    async def go() -> None:
        result = await agent.run("one", conversation=Conversation(conversation_id="c"))
        await store.save(result)
        await store.save(result)  # the same result again: nothing new, no usage twice
        assert recorded("c") == (result.usage.input_tokens, result.usage.output_tokens)
        loaded = await store.load("c")
        assert loaded is not None
        result2 = await agent.run("two", conversation=loaded)
        await store.save(result2)
        await store.save(result2)
        assert result2.usage.requests == 6  # three per run: the lead's two and the delegate's one
        assert recorded("c") == (result2.usage.input_tokens, result2.usage.output_tokens)
        branched = await store.branch("c", at=4, expected_revision=result2.conversation.revision)
        await store.fork("c", new_conversation_id="f")
        assert recorded("c") == (result2.usage.input_tokens, result2.usage.output_tokens)
        assert recorded("f") == (0, 0)  # the fork's copied usage was billed in "c"
        result3 = await agent.run("three", conversation=branched)
        await store.save(result3)
        assert recorded("c") == (result3.usage.input_tokens, result3.usage.output_tokens)

    run(go())
    store.close()
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", str(db), "verify"]).exit_code == 0


def test_turnlog_history_honours_a_stored_cache_stable_policy(tmp_path: Path) -> None:
    """With the conversation's stored policy cache-stable, each request's history starts with the
    one before (unless the cut moved: rarely, and once per overflow), where the default policy
    moves the start of nearly every request once the budget binds."""
    kept = {stable: prefixes_kept(tmp_path / f"{stable}.db", stable) for stable in (False, True)}
    assert kept[True] >= 15 and kept[True] > kept[False], kept


def shape(messages: list[ModelMessage]) -> list[Any]:
    """What is sent, part by part (tool-call arguments as the JSON the provider gets)."""
    return [
        (p.part_kind, p.args_as_json_str() if isinstance(p, ToolCallPart) else str(getattr(p, "content", "")))
        for m in messages
        for p in m.parts
    ]


def prefixes_kept(db: Path, stable: bool) -> int:
    """Of ten runs' requests (two a run) after the policy is stored, how many start with the one
    before: within a run (the run's own messages follow the stored history) and across runs."""
    from turnlog.integrations.pydantic_ai_history import TurnlogHistory
    from turnlog.loop import set_policy
    from turnlog.store import SessionPolicy

    seen: list[list[Any]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(shape(messages))
        return script(messages, info)

    store = TurnlogConversationStore(db=db)
    agent = Agent(
        FunctionModel(model),
        instructions="be brief",
        capabilities=[TurnlogHistory(db=store.store, budget=700)],
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return f"sunny in {city} " + "and warm " * 40

    async def go(n: int) -> None:
        for i in range(n):
            conversation = await store.load("h") or Conversation(conversation_id="h")
            await store.save(await agent.run(f"question {i} " * 10, conversation=conversation))

    run(go(1))
    set_policy(store.store, "h", SessionPolicy(cache_stable=stable))
    seen.clear()
    run(go(10))
    store.close()
    return sum(after[: len(before)] == before for before, after in itertools.pairwise(seen))
