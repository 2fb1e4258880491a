"""What trimming may leave in a context: never a message trimmed to nothing, never a notice cut in
two (a notice is whole or absent, and counted), and tool-call arguments capped like outputs."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_context import ENC, assert_pairs_whole, independent_count, sessions, words
from turnlog.projections.context import ContextBudgetError, ContextPolicy, build_context
from turnlog.store import MessageAppended, RunStarted, SQLiteStore, ToolCall, ToolReturned

NOTICE = re.compile(r"\[turnlog: [^\[\]]*\]")
REF = re.compile(r"the full (?:text|call) is (?:artifact|event) (\S+?)\]")


def refs_of(store: SQLiteStore, session_id: str) -> set[str]:
    """What a notice may name: a stored event id, or the 12-character prefix of an artifact id."""
    found: set[str] = set()
    for record in store.read_session(session_id):
        found.add(record.event_id)
        artifact = getattr(record.event, "artifact_id", None)
        if artifact:
            found.add(artifact[:12])
    return found


def assert_trimmed_cleanly(
    store: SQLiteStore, session_id: str, built: Any, *, whole_caps: bool = True
) -> None:
    """Every notice whole and naming a whole id; and, unless the policy's own caps are too small
    for a notice and some text (``whole_caps=False``), no message capped to its notice alone."""
    refs = refs_of(store, session_id)
    for message in built.messages:
        texts = [message.content, *(c.arguments for c in message.tool_calls)]
        for text in texts:
            whole = NOTICE.findall(text)
            # every notice is whole: as many complete notices as notice openings
            assert text.count("[turnlog:") == len(whole), text[-200:]
            for notice in whole:
                for ref in REF.findall(notice):
                    assert ref in refs, f"notice names {ref!r}, which is not a whole id: {notice}"
        if message.mode == "capped" and whole_caps:
            shown = NOTICE.sub("", message.content).strip()
            shown_args = [NOTICE.sub("", c.arguments).strip() for c in message.tool_calls]
            assert shown or any(shown_args), f"a message trimmed to nothing: {message.content!r}"


def long_session(store: SQLiteStore) -> None:
    events: list[Any] = [MessageAppended(role="user", content="first")]
    for i in range(6):
        events += [
            MessageAppended(role="assistant", content=words(400, i)),
            MessageAppended(role="assistant", tool_calls=(ToolCall(id=f"c{i}", name="cat"),)),
            ToolReturned(tool_call_id=f"c{i}", tool_name="cat", content=words(3000, i)),
        ]
    store.append("s", events)


def test_fill_never_emits_a_message_trimmed_to_nothing() -> None:
    store = SQLiteStore.open(":memory:")
    long_session(store)
    for budget in range(60, 700, 3):
        for cap in (32, 40, 200):
            policy = ContextPolicy(budget=budget, max_tool_tokens=cap, max_message_tokens=300)
            built = build_context(store, "s", policy)
            assert built.total_tokens == independent_count(built.rendered) <= budget
            assert_trimmed_cleanly(store, "s", built, whole_caps=cap >= 100)


def test_a_message_notice_is_never_cut_in_its_event_id() -> None:
    store = SQLiteStore.open(":memory:")
    store.append("s", [MessageAppended(role="user", content="first")])
    store.append("s", [MessageAppended(role="assistant", content=words(3000))])
    for cap in range(32, 60):
        built = build_context(store, "s", ContextPolicy(budget=5000, max_message_tokens=cap))
        assert built.total_tokens == independent_count(built.rendered) <= 5000
        assert_trimmed_cleanly(store, "s", built, whole_caps=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=sessions(), budget=st.integers(60, 3000), cap=st.integers(32, 400))
def test_trimming_leaves_no_artefacts_for_random_sessions_and_budgets(
    events: list[Any], budget: int, cap: int
) -> None:
    store = SQLiteStore.open(":memory:")
    try:
        store.append("s", events)
        policy = ContextPolicy(budget=budget, max_tool_tokens=cap, max_message_tokens=cap)
        try:
            built = build_context(store, "s", policy)
        except ContextBudgetError:
            return  # the retained messages do not fit: test_context's property covers the error
        assert built.total_tokens == independent_count(built.rendered) <= budget
        assert_pairs_whole(built.rendered)
        for message in built.messages:
            assert message.content or message.tool_calls or message.mode == "full"
        # A policy cap under ~100 tokens may leave an output its notice alone (the user asked for
        # it); fill, which picks its own caps, never does.
        assert_trimmed_cleanly(store, "s", built, whole_caps=cap >= 100)
    finally:
        store.close()


# --- tool-call arguments ------------------------------------------------------------------------


def big_file(lines: int) -> str:
    return "\n".join(
        f"def handler_{i}(event, context):\n    return {{'status': {i}, 'ok': True}}" for i in range(lines)
    )


def write_file_session(store: SQLiteStore, *, run: bool = False) -> tuple[str, str]:
    """A user asks for a file; the agent writes it with one call of ~15,000 tokens of arguments."""
    arguments = json.dumps({"path": "src/handlers.py", "content": big_file(700), "mode": "w"})
    assert len(ENC.encode_ordinary(arguments)) > 15_000
    ask = MessageAppended(role="user", content="Now write src/handlers.py with all 700 handlers.")
    call = MessageAppended(
        role="assistant", tool_calls=(ToolCall(id="w1", name="write_file", arguments=arguments),)
    )
    events: list[Any] = [
        MessageAppended(role="system", content="You are a coding agent."),
        MessageAppended(role="user", content="Let us build the handlers module."),
        MessageAppended(role="assistant", content="Sure, tell me what you need."),
    ]
    if run:
        events.append(RunStarted(run_id="r1"))
    events += [
        ask,
        call,
        ToolReturned(tool_call_id="w1", tool_name="write_file", content="wrote 700 handlers"),
    ]
    store.append("s", events)
    return ask.event_id, call.event_id


@pytest.mark.parametrize("run", [False, True])
def test_a_huge_tool_call_is_capped_and_the_newest_user_turn_stays(run: bool) -> None:
    store = SQLiteStore.open(":memory:")
    ask_id, call_id = write_file_session(store, run=run)
    for fmt in ("openai", "anthropic"):
        built = build_context(store, "s", ContextPolicy(budget=8000, format=fmt))  # type: ignore[arg-type]
        assert built.total_tokens <= 8000
        ids = [e.event_ids[0] for e in built.entries if e.event_ids]
        assert ask_id in ids and call_id in ids, "the newest user turn and the call stay"
        call_message = next(m for m in built.messages if m.event_ids == (call_id,))
        assert call_message.mode == "capped"
        (call,) = call_message.tool_calls
        capped = json.loads(call.arguments)  # still valid JSON, same shape
        assert capped["path"] == "src/handlers.py" and capped["mode"] == "w"
        assert capped["content"].startswith("def handler_0(event, context):")
        assert f"the full call is event {call_id}" in capped["content"]
        assert len(ENC.encode_ordinary(call.arguments)) <= ContextPolicy(budget=8000).max_tool_tokens
        if fmt == "openai":
            assert built.total_tokens == independent_count(built.rendered)
            assert_pairs_whole(built.rendered)
            assert built.rendered[-1]["role"] == "tool"
        else:
            blocks = [b for turn in built.rendered["messages"] for b in turn["content"]]
            tool_use = next(b for b in blocks if b["type"] == "tool_use")
            assert tool_use["input"]["path"] == "src/handlers.py"  # parsed, not _raw_arguments
        assert_trimmed_cleanly(store, "s", built)
    # the log keeps the whole call
    stored = store.get_event(call_id).event
    assert isinstance(stored, MessageAppended) and len(stored.tool_calls[0].arguments) > 40_000


def test_arguments_that_are_not_json_are_capped_as_text() -> None:
    store = SQLiteStore.open(":memory:")
    raw = "patch <<EOF\n" + big_file(400) + "\nEOF"
    call = MessageAppended(role="assistant", tool_calls=(ToolCall(id="p", name="shell", arguments=raw),))
    store.append("s", [MessageAppended(role="user", content="go"), call])
    built = build_context(store, "s", ContextPolicy(budget=3000, max_tool_tokens=300))
    (shown,) = next(m for m in built.messages if m.event_ids == (call.event_id,)).tool_calls
    assert shown.arguments.startswith("patch <<EOF") and f"event {call.event_id}" in shown.arguments
    assert len(ENC.encode_ordinary(shown.arguments)) <= 300
    assert built.total_tokens == independent_count(built.rendered) <= 3000
    assert_trimmed_cleanly(store, "s", built)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def argument_texts(draw: st.DrawFn) -> str:
    """Arguments as agents send them: JSON objects holding a few long strings, other JSON values,
    or plain text."""
    kind = draw(st.sampled_from(["object", "value", "text"]))
    if kind == "text":
        return words(draw(st.integers(0, 3000)), draw(st.integers(0, 9)))
    if kind == "value":
        return json.dumps(draw(JSON_VALUES))
    body = {f"k{i}": draw(JSON_VALUES) for i in range(draw(st.integers(0, 3)))}
    for i in range(draw(st.integers(0, 3))):
        n = draw(st.integers(0, 2500))
        body[f"text{i}"] = big_file(n // 20) if draw(st.booleans()) else words(n, i)
    return json.dumps(body)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    arguments=st.lists(argument_texts(), min_size=1, max_size=3),
    budget=st.integers(200, 6000),
    cap=st.integers(32, 1500),
    run=st.booleans(),
)
def test_capped_arguments_stay_valid_and_within_budget(
    arguments: list[str], budget: int, cap: int, run: bool
) -> None:
    store = SQLiteStore.open(":memory:")
    try:
        calls = tuple(ToolCall(id=f"c{i}", name="f", arguments=a) for i, a in enumerate(arguments))
        head = MessageAppended(role="assistant", tool_calls=calls)
        ask = MessageAppended(role="user", content="do it")
        events: list[Any] = [MessageAppended(role="user", content="start"), ask]
        events += [RunStarted(run_id="r")] if run else []
        events += [head] + [ToolReturned(tool_call_id=c.id, content=words(50)) for c in calls[:-1]]
        store.append("s", events)
        try:
            built = build_context(store, "s", ContextPolicy(budget=budget, max_tool_tokens=cap))
        except ContextBudgetError:
            return
        assert built.total_tokens == independent_count(built.rendered) <= budget
        assert_pairs_whole(built.rendered)
        shown_ids = {e.event_ids[0] for e in built.entries if e.event_ids}
        if budget >= len(calls) * (cap + 120) + 200:
            # Room for the call with every argument and output at its cap: the call and the user
            # turn that asked for it are both kept.
            assert head.event_id in shown_ids and ask.event_id in shown_ids
        for message in built.messages:
            if message.event_ids != (head.event_id,) or message.role != "assistant":
                continue  # (a synthesized result of the unanswered call names its call's event too)
            for original, shown in zip(calls, message.tool_calls, strict=True):
                if shown.arguments == original.arguments:
                    continue
                assert len(ENC.encode_ordinary(shown.arguments)) <= cap
                try:
                    json.loads(original.arguments)
                except ValueError:
                    continue
                json.loads(shown.arguments)  # JSON stays JSON
        assert_trimmed_cleanly(store, "s", built, whole_caps=cap >= 100)
    finally:
        store.close()
