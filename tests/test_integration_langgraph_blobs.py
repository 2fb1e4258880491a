"""The LangGraph saver stores each channel once per change (integrations.langgraph_blobs): a
``MessagesState`` turn's checkpoints hold its new messages and refer to earlier checkpoints for the
rest. What a saver reads back, in the process that wrote or in a fresh one (the index's path), is
what LangGraph's own SqliteSaver reads back, across the rewrites of a whole value and time travel;
a message edited in place is stored again; checkpoints in the earlier form (the whole checkpoint)
are still read. On SQLite and on PostgreSQL."""

from __future__ import annotations

import base64
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.helpers.postgres import pg_schema

pytest.importorskip("langgraph.checkpoint.sqlite", reason="needs the langgraph extra")

from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

from tests.helpers.langgraph_savers import Opener, echo_graph, opener
from turnlog.integrations.langgraph import TurnlogSaver
from turnlog.integrations.langgraph_blobs import MAX_SEGMENTS
from turnlog.projections.langgraph_index import CHECKPOINT_MEDIA, FRAMEWORK
from turnlog.store import StateRecorded

__all__ = ["opener", "pg_schema"]  # the fixtures, imported for this module's tests


def _shape(found: Any) -> Any:
    """What a checkpoint tuple holds, without ids that differ between savers."""
    values = dict(found.checkpoint["channel_values"])
    messages = [(type(m).__name__, m.content) for m in values.pop("messages", [])]
    return messages, sorted(values), found.metadata["step"], [w[1:] for w in found.pending_writes or []]


def _checkpoints(saver: TurnlogSaver, thread: str) -> list[StateRecorded]:
    return [
        r.event
        for r in saver.store.read_session(thread)
        if isinstance(r.event, StateRecorded) and r.event.media_type.startswith(CHECKPOINT_MEDIA)
    ]


def test_a_turn_stores_its_new_messages_and_reads_back_as_sqlitesaver(opener: Opener, tmp_path: Path) -> None:
    """More turns than a value's segments may number (so it is written whole again): each turn
    serializes its two new messages (and the whole list once every ``MAX_SEGMENTS`` checkpoints),
    checkpoints stay small, and every checkpoint of the thread, read in this process and in a fresh
    one, is SqliteSaver's, message for message."""
    conn = sqlite3.connect(tmp_path / "peer.db", check_same_thread=False)
    peer = echo_graph().compile(checkpointer=SqliteSaver(conn))
    saver = opener()
    ours = echo_graph().compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "g"}}
    serialized: list[int] = []
    dumps = saver.serde.dumps_typed

    def counting(value: Any) -> Any:  # the messages each serialization holds (a checkpoint's too)
        if isinstance(value, dict):
            value_ = (value.get("channel_values") or {}).get("messages") or []
            serialized.append(len(value_))
        elif isinstance(value, list) and not (value and isinstance(value[0], list)):
            serialized.append(len(value))  # (a message list's quicker form holds the same: once)
        return dumps(value)

    serde = saver.serde  # (LangGraph's default serde is one object, the peer's too)
    saver.serde = SimpleNamespace(dumps_typed=counting, loads_typed=serde.loads_typed)  # type: ignore[assignment]
    turns = MAX_SEGMENTS + 5
    for i in range(turns):
        for graph in (peer, ours):
            graph.invoke({"messages": [("user", f"turn {i} " + "x" * 200)]}, config)
    theirs = [_shape(t) for t in peer.checkpointer.list(config)]  # type: ignore[union-attr]
    assert [_shape(t) for t in saver.list(config)] == theirs
    assert [_shape(t) for t in opener().list(config)] == theirs
    assert len(theirs) == 3 * turns and len(theirs[0][0]) == 2 * turns
    whole = [n for n in serialized if n > 1]  # written whole again after MAX_SEGMENTS segments
    assert len(whole) == 2 * turns // MAX_SEGMENTS
    assert sum(serialized) < 10 * turns  # each checkpoint's whole list: 6 * turns**2 / 2
    sizes = [len(e.content) for e in _checkpoints(saver, "g")]
    assert sum(size > 2000 for size in sizes) == len(whole)
    conn.close()


def test_an_item_edited_in_place_is_stored_again(opener: Opener) -> None:
    """A message of the parent's list edited in place (by assignment) before the child is put: the
    child stores its list whole, and reads back edited; the parent reads back as it was put."""
    saver = opener()
    first = create_checkpoint(empty_checkpoint(), None, 0)
    kept, edited = AIMessage("kept", id="m1"), AIMessage("before", id="m2")
    first["channel_values"] = {"messages": [kept, edited]}
    first["channel_versions"] = {"messages": "1"}
    parent = saver.put(cfg("t"), first, {"step": 0}, {"messages": "1"})
    edited.content = "after"
    second = create_checkpoint(first, None, 1)
    second["channel_values"] = {"messages": [kept, edited, AIMessage("new", id="m3")]}
    second["channel_versions"] = {"messages": "2"}
    child = saver.put(parent, second, {"step": 1}, {"messages": "2"})
    for reader in (saver, opener()):
        for config, expected in ((parent, ["kept", "before"]), (child, ["kept", "after", "new"])):
            found = reader.get_tuple(config)
            assert found is not None
            assert [m.content for m in found.checkpoint["channel_values"]["messages"]] == expected


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def test_time_travel_from_a_checkpoint_that_refers_to_earlier_ones(opener: Opener, tmp_path: Path) -> None:
    """Resuming from an older checkpoint (its values partly in earlier checkpoints' blobs) and
    reading it by id from a fresh saver give SqliteSaver's states."""
    conn = sqlite3.connect(tmp_path / "peer.db", check_same_thread=False)
    peer = echo_graph().compile(checkpointer=SqliteSaver(conn))
    saver = opener()
    ours = echo_graph().compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "g"}}
    for graph in (peer, ours):
        for i in range(6):
            graph.invoke({"messages": [("user", f"turn {i}")]}, config)
        back = list(graph.checkpointer.list(config))[7]  # type: ignore[union-attr]  # an older one
        graph.invoke({"messages": [("user", "again")]}, back.config)
    theirs = [_shape(t) for t in peer.checkpointer.list(config)]  # type: ignore[union-attr]
    assert [_shape(t) for t in saver.list(config)] == theirs
    fresh = opener()
    for found in list(saver.list(config))[::3]:
        assert _shape(fresh.get_tuple(found.config)) == _shape(found)
    conn.close()


def test_a_checkpoint_in_the_earlier_form_is_still_read(opener: Opener) -> None:
    """A checkpoint event holding the whole checkpoint's serde bytes (``encoding=base64``)."""
    saver = opener()
    checkpoint = create_checkpoint(empty_checkpoint(), None, 0)
    checkpoint["channel_values"] = {"messages": [AIMessage("kept", id="m1")], "count": 3}
    type_, data = saver.serde.dumps_typed(checkpoint)
    state = StateRecorded(
        framework=FRAMEWORK,
        namespace="",
        key=checkpoint["id"],
        media_type=f"{CHECKPOINT_MEDIA}; serde={type_}; encoding=base64",
        content=base64.b64encode(data).decode("ascii"),
        metadata={"step": 0, "source": "loop"},
    )
    saver._log.append("old", 0, [state])
    for reader in (saver, opener()):
        found = reader.get_tuple({"configurable": {"thread_id": "old", "checkpoint_ns": ""}})
        assert found is not None and found.checkpoint["channel_values"]["count"] == 3
        assert [m.content for m in found.checkpoint["channel_values"]["messages"]] == ["kept"]
    config: Any = {"configurable": {"thread_id": "old"}}
    graph = echo_graph().compile(checkpointer=saver)
    graph.invoke({"messages": [("user", "next")]}, config)
    assert [m.content for m in graph.get_state(config).values["messages"]] == ["kept", "next", "noted 2"]


def test_a_write_looks_only_at_the_messages_after_those_it_last_wrote(opener: Opener) -> None:
    """The message mapping of a root checkpoint whose list starts with the objects the saver last
    wrote looks at the rest only (each message is looked at once, not once per checkpoint), and a
    list that does not (a message removed, another writer's append) is compared whole."""
    from langchain_core.messages import RemoveMessage

    import turnlog.integrations.langgraph_log as saver_log

    seen: list[int] = []
    changes = saver_log._message_changes

    def counting(live: Any, messages: Any, mapped: Any = None) -> Any:
        prefix = mapped is not None and all(a is b for a, b in zip(mapped, messages, strict=False))
        seen.append(len(messages) - (len(mapped) if prefix else 0))
        return changes(live, messages, mapped)

    saver = opener()
    graph = echo_graph().compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "g"}}
    graph.invoke({"messages": [("user", "first")]}, config)
    original, saver_log._message_changes = saver_log._message_changes, counting
    try:
        for i in range(5):
            graph.invoke({"messages": [("user", f"turn {i}")]}, config)
        assert seen == [0, 1, 1] * 5  # the input checkpoint, then one new message a step
        first = graph.get_state(config).values["messages"][0]
        graph.update_state(config, {"messages": [RemoveMessage(id=first.id)]})
        other = opener()  # another writer appends to the thread
        echo_graph().compile(checkpointer=other).invoke({"messages": [("user", "elsewhere")]}, config)
        graph.invoke({"messages": [("user", "again")]}, config)
    finally:
        saver_log._message_changes = original
    state = graph.get_state(config).values["messages"]
    assert [m.content for m in state][:1] == ["noted 1"] and state[-4].content == "elsewhere"
    removed = [r.event for r in saver.store.read_session("g") if r.event.type == "message_removed"]
    assert len(removed) == 1
    head = saver.store.head_version("g")
    for log in (saver._log, opener()._log):  # what it noted; what turnlog's live set says
        with log.lock:
            assert set(log.live_messages("g", head)) == {m.id for m in state}
