"""The quicker stored form of a message list (integrations.langgraph_messages): what it reads back
is what LangGraph's own savers read back (the same class, ``==``, the same ``model_fields_set``),
for a graph's runs on SQLite and on PostgreSQL and for generated messages; anything it cannot
rebuild so keeps LangGraph's form, and blobs in LangGraph's form still read."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.postgres import drop_schema, new_schema_name, pg_schema, pg_url

pytest.importorskip("langgraph.checkpoint.sqlite", reason="needs the langgraph extra")

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph

from tests.helpers.langgraph_savers import Opener, opener
from turnlog.integrations.langgraph_messages import SUFFIX, dumps, loads
from turnlog.projections.langgraph_index import CHECKPOINT_MEDIA
from turnlog.store import StateRecorded

__all__ = ["opener", "pg_schema"]  # the fixtures, imported for this module's tests

SERDE = JsonPlusSerializer()


def _assert_same(ours: list[Any], theirs: list[Any]) -> None:
    assert len(ours) == len(theirs)
    for mine, peer in zip(ours, theirs, strict=True):
        assert type(mine) is type(peer)
        assert mine == peer
        assert mine.model_fields_set == peer.model_fields_set
        assert vars(mine) == vars(peer)


# --- a graph's runs, against LangGraph's savers -----------------------------------------------------


def _tool_graph() -> StateGraph[Any]:
    """A one-node graph whose node answers with every kind of message, the fields a model and a
    tool fill in set, with ids fixed by the turn (so both savers' runs hold the same messages)."""

    def answer(state: MessagesState) -> dict[str, Any]:
        turn = len(state["messages"])
        call = {"name": "lookup", "args": {"q": f"turn {turn}", "n": [1, 2.5, None]}, "id": f"call-{turn}"}
        return {
            "messages": [
                AIMessage(
                    [{"type": "text", "text": f"calling {turn}"}],
                    id=f"ai-{turn}",
                    name="model",
                    tool_calls=[call],
                    usage_metadata={"input_tokens": turn, "output_tokens": 3, "total_tokens": turn + 3},
                    response_metadata={"model_name": "m", "finish_reason": "tool_calls"},
                    additional_kwargs={"refusal": None},
                ),
                ToolMessage(
                    f"found {turn}", tool_call_id=f"call-{turn}", id=f"tool-{turn}", artifact={"rows": [turn]}
                ),
                SystemMessage("keep it short", id=f"sys-{turn}"),
                AIMessage(f"answer {turn}", id=f"ai2-{turn}"),
            ]
        }

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder


@pytest.fixture
def peer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseCheckpointSaver[Any]]:
    """LangGraph's own saver on the same backend as the test's ``opener``."""
    if request.node.callspec.params["opener"] == "postgres":
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver

        name = new_schema_name()
        with psycopg.connect(pg_url(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        try:
            with PostgresSaver.from_conn_string(f"{pg_url()}?options=-csearch_path%3D{name}") as saver:
                saver.setup()
                yield saver
        finally:
            drop_schema(name)
    else:
        conn = sqlite3.connect(tmp_path / "peer.db", check_same_thread=False)
        yield SqliteSaver(conn)
        conn.close()


def test_a_graphs_messages_read_back_as_langgraphs_savers_give_them(
    opener: Opener, peer: BaseCheckpointSaver[Any]
) -> None:
    """Every checkpoint of a thread, read by the saver that wrote it and by a fresh one (the
    index's path), holds the messages LangGraph's saver on the same backend gives back; the
    messages were stored in the quicker form."""
    saver = opener()
    graphs = [_tool_graph().compile(checkpointer=s) for s in (peer, saver)]
    config: Any = {"configurable": {"thread_id": "g"}}
    for turn in range(4):
        human = HumanMessage([{"type": "text", "text": f"turn {turn}"}, "more"], id=f"h-{turn}", name="u")
        for graph in graphs:
            graph.invoke({"messages": [human]}, config)
    theirs = list(peer.list(config))
    for reader in (saver, opener()):
        ours = list(reader.list(config))
        assert len(ours) == len(theirs) == 12
        for mine, their in zip(ours, theirs, strict=True):
            _assert_same(
                mine.checkpoint["channel_values"].get("messages", []),
                their.checkpoint["channel_values"].get("messages", []),
            )
        latest = reader.get_tuple(config)
        assert latest is not None
        _assert_same(
            latest.checkpoint["channel_values"]["messages"],
            theirs[0].checkpoint["channel_values"]["messages"],
        )
    types = [
        json.loads(r.event.content.split("\n", 1)[0])["types"]
        for r in saver.store.read_session("g")
        if isinstance(r.event, StateRecorded) and r.event.media_type.startswith(CHECKPOINT_MEDIA)
    ]
    assert any(t.endswith(SUFFIX) for found in types for t in found[1:])


# --- generated messages -------------------------------------------------------------------------------

_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=20)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_kwargs = st.dictionaries(_text, _json, max_size=3)
_content = _text | st.lists(
    _text
    | st.fixed_dictionaries({"type": st.just("text"), "text": _text})
    | st.dictionaries(_text, _json, max_size=2),
    max_size=3,
)
_id = st.none() | _text
_common = {
    "content": _content,
    "id": _id,
    "name": st.none() | _text,
    "additional_kwargs": _kwargs,
    "response_metadata": _kwargs,
}
_call = st.fixed_dictionaries(
    {
        "name": _text,
        "args": st.dictionaries(_text, _json, max_size=3),
        "id": _id,
        "type": st.just("tool_call"),
    }
)
_usage = st.none() | st.builds(
    lambda i, o: {"input_tokens": i, "output_tokens": o, "total_tokens": i + o},
    st.integers(0, 10**6),
    st.integers(0, 10**6),
)
_messages = st.one_of(
    st.builds(HumanMessage, **_common),
    st.builds(SystemMessage, **_common),
    st.builds(AIMessage, **_common, tool_calls=st.lists(_call, max_size=2), usage_metadata=_usage),
    st.builds(
        ToolMessage,
        **_common,
        tool_call_id=_text,
        status=st.sampled_from(["success", "error"]),
        artifact=_json,
    ),
    st.builds(ChatMessage, **_common, role=_text),
    st.builds(FunctionMessage, **{**_common, "name": _text}),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_messages, min_size=1, max_size=5))
def test_generated_messages_read_back_as_langgraphs_serializer_gives_them(
    messages: list[BaseMessage],
) -> None:
    type_, data = dumps(SERDE, messages)
    assert type_ == "msgpack" + SUFFIX  # (the fallback would hide a difference of the quicker form)
    _assert_same(loads(SERDE, type_, data), SERDE.loads_typed(SERDE.dumps_typed(messages)))


# --- what keeps LangGraph's form ------------------------------------------------------------------------


class _Custom(AIMessage):
    """A subclass: its own fields and validators may differ."""


def _changed_by_validation() -> AIMessage:
    """A message whose validation on the way back would change it: tool calls left only in the
    OpenAI form (``additional_kwargs``), which AIMessage's validator parses into ``tool_calls``."""
    message = AIMessage("x", id="a")
    message.additional_kwargs = {
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]
    }
    return message


@pytest.mark.parametrize(
    "items",
    [
        [HumanMessage("hi"), {"role": "user", "content": "a dict"}],
        [_Custom("a subclass")],
        [AIMessage("an extra field", id="e", extra_field=1)],
        [_changed_by_validation()],
        ["text", 1],
    ],
    ids=["mixed", "subclass", "extra", "validated", "no-messages"],
)
def test_what_the_quicker_form_cannot_rebuild_keeps_langgraphs_form(items: list[Any]) -> None:
    type_, data = dumps(SERDE, items)
    assert (type_, data) == SERDE.dumps_typed(items)
    back, expected = loads(SERDE, type_, data), SERDE.loads_typed((type_, data))
    assert back == expected and [type(x) for x in back] == [type(x) for x in expected]


def test_a_blob_in_langgraphs_form_still_reads() -> None:
    messages = [HumanMessage("hi", id="1"), AIMessage("hello", id="2")]
    stored = SERDE.dumps_typed(messages)
    _assert_same(loads(SERDE, *stored), SERDE.loads_typed(stored))


def test_a_class_it_does_not_rebuild_is_a_clear_error() -> None:
    _type, data = SERDE.dumps_typed([[["builtins", "dict", []]], []])
    with pytest.raises(ValueError, match=r"builtins\.dict"):
        loads(SERDE, "msgpack" + SUFFIX, data)


def test_a_message_stored_with_other_fields_is_built_by_pydantic() -> None:
    """Stored by a langchain_core whose HumanMessage had fewer fields: ``model_construct`` fills in
    the defaults of the others, as it does for LangGraph's own read when validation fails."""
    header = [["langchain_core.messages.human", "HumanMessage", ["content", "id"]]]
    _type, data = SERDE.dumps_typed([header, [[0, ["hi", "x"], None], [0, ["ho", None], ["content"]]]])
    back = loads(SERDE, "msgpack" + SUFFIX, data)
    _assert_same(back, [HumanMessage("hi", id="x"), HumanMessage("ho")])


def test_a_message_stored_with_some_fields_set_reads_with_those() -> None:
    fields = HumanMessage("hi", id="x").model_dump()
    header = [["langchain_core.messages.human", "HumanMessage", list(fields)]]
    _type, data = SERDE.dumps_typed([header, [[0, list(fields.values()), ["content"]]]])
    back = loads(SERDE, "msgpack" + SUFFIX, data)
    _assert_same(back, [HumanMessage.model_construct({"content"}, **fields)])


def test_each_read_builds_its_own_messages_as_model_construct_does() -> None:
    """The builders are kept per class: every read still gives new messages, with containers of
    their own, whose state is model_construct's."""
    serde = JsonPlusSerializer()
    items = [HumanMessage("hi", id="h1"), AIMessage("yo", id="a1", tool_calls=[], response_metadata={"k": 1})]
    type_, data = dumps(serde, items)
    assert type_.endswith(SUFFIX)
    first, second = loads(serde, type_, data), loads(serde, type_, data)
    for a, b, item in zip(first, second, items, strict=True):
        assert a is not b and a.response_metadata is not b.response_metadata
        assert a.model_fields_set is not b.model_fields_set
        expected = type(item).model_construct(set(type(item).model_fields), **item.model_dump())
        assert vars(a) == vars(expected) and a.model_fields_set == expected.model_fields_set
        assert a.__pydantic_extra__ == {} and a.__pydantic_private__ is None
    first[1].response_metadata["k"] = 2
    assert second[1].response_metadata == {"k": 1}
