"""What trimming may leave in a context: never a message trimmed to nothing, never a notice cut in
two (a notice is whole or absent, and counted), and tool-call arguments capped like outputs."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.context import ContextBudgetError, ContextPolicy, build_context
from store import MessageAppended, SQLiteStore, ToolCall, ToolReturned
from tests.test_context import assert_pairs_whole, independent_count, sessions, words

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
