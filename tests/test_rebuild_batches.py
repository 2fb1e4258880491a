"""A rebuild cut into many batches: each projection's memo is carried from one batch to the next
(projections.materialize), and the rows still equal the incremental ones; the tool returns of a
rebuild are matched to their calls in memory, not with a statement per return."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import turnlog.projections.materialize as materialize
from tests.test_projection_properties import histories
from turnlog.projections.registry import materializer
from turnlog.store import MessageAppended, SQLiteStore, ToolCall, ToolReturned


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(history=histories(), batch=st.integers(1, 7), data=st.data())
def test_a_rebuild_in_small_batches_equals_incremental(
    history: list[tuple[str, list[Any]]], batch: int, data: st.DataObject
) -> None:
    store = SQLiteStore.open(":memory:")
    try:
        m = materializer(store)
        for sid, events in history:
            store.append(sid, events)
            m.catch_up()
        incremental = m.snapshots()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(materialize, "BATCH", batch)
            m.rebuild()
            assert m.snapshots() == incremental
            # Another writer moves the checkpoints between two batches: the memos are dropped.
            head = store.head_position()
            checkpoint = data.draw(st.integers(0, head), label="checkpoint")
            m.reset()
            m.catch_up(through=checkpoint)
            m.catch_up()
        assert m.snapshots() == incremental
    finally:
        store.close()


def _session(n_calls: int) -> list[Any]:
    events: list[Any] = [MessageAppended(role="system", content="be brief")]
    for i in range(n_calls):
        events.append(MessageAppended(role="user", content=f"question {i}"))
        events.append(
            MessageAppended(role="assistant", tool_calls=(ToolCall(id=f"c{i}", name="read", arguments="{}"),))
        )
        events.append(ToolReturned(tool_call_id=f"c{i}", tool_name="read", content=f"output {i}\n" * 50))
    return events


def _traced_rebuild(store: SQLiteStore) -> list[str]:
    """The statements of a rebuild of every projection, checked to give what incremental gave."""
    m = materializer(store)
    m.catch_up()
    before = m.snapshots()
    statements: list[str] = []
    with store.reading() as conn:
        conn.set_trace_callback(statements.append)
    try:
        m.rebuild()
    finally:
        with store.reading() as conn:
            conn.set_trace_callback(None)
    assert m.snapshots() == before
    return statements


def test_a_rebuild_reads_no_call_back_per_tool_return(monkeypatch: pytest.MonkeyPatch) -> None:
    store = SQLiteStore.open(":memory:")
    try:
        for sid in ("a", "b"):
            store.append(sid, _session(40))
        monkeypatch.setattr(materialize, "BATCH", 50)  # sessions cut across batches
        statements = _traced_rebuild(store)
        # 80 tool returns: their calls are found in memory (live_index) or in the session's open
        # calls read once (context_index), never with a statement each.
        # (A few at most: a session's open calls when it goes on in the next batch, a return whose
        # call ended the batch before.)
        lookups = [
            s
            for s in statements
            if s.startswith("SELECT") and ("FROM live_calls" in s or "FROM ctx_calls" in s)
        ]
        assert len(lookups) <= 6, lookups
    finally:
        store.close()


def test_a_call_answered_in_the_same_batch_is_written_once() -> None:
    store = SQLiteStore.open(":memory:")
    try:
        for sid in ("a", "b"):
            store.append(sid, _session(40))
        statements = _traced_rebuild(store)
        # 80 calls, each answered in the batch that holds it: its row is inserted with its return
        # (one row each), never inserted and then updated.
        inserts = [s for s in statements if s.startswith("INSERT INTO ctx_calls")]
        updates = [s for s in statements if s.startswith("UPDATE ctx_calls")]
        assert len(inserts) == 80 and not updates, (len(inserts), updates[:3])
        assert all(s.rstrip().endswith("ON CONFLICT DO NOTHING") for s in inserts)
    finally:
        store.close()


def test_returns_of_calls_from_an_earlier_batch_update_their_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    store = SQLiteStore.open(":memory:")
    try:
        store.append("a", _session(40))
        m = materializer(store)
        m.catch_up()
        before = m.snapshots()
        # Batches of 3 events: a call ends some batches and its return opens the next one.
        monkeypatch.setattr(materialize, "BATCH", 3)
        m.rebuild()
        assert m.snapshots() == before
        calls = before["context_index"]["ctx_calls"]
        assert len(calls) == 40 and all(row[3] is not None and row[4] is not None for row in calls)
    finally:
        store.close()


def test_no_collection_walks_a_batch_of_records(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    store = SQLiteStore.open(":memory:")
    try:
        for sid in ("a", "b", "c"):
            store.append(sid, _session(200))
        m = materializer(store)
        m.catch_up()
        before = m.snapshots()
        monkeypatch.setattr(materialize, "BATCH", 1000)
        young: list[int] = []

        def watch(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                young.append(len(gc.get_objects(generation=0)))

        gc.collect()
        gc.callbacks.append(watch)
        try:
            m.rebuild()
        finally:
            gc.callbacks.remove(watch)
        assert m.snapshots() == before
        # A batch of 1,000 records is thousands of tracked objects: the collector is paused from
        # its read to its commit, so a collection only ever finds the few objects made between.
        assert max(young, default=0) < 1000, young
    finally:
        store.close()
