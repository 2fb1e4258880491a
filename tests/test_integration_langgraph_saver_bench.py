"""The bench's checkpointer-append figure (scripts/benchlib/saver_append.py): the calls it records are
the ``put``/``put_writes`` a graph makes, and replayed into a saver they leave the thread as the graph
left it, on LangGraph's PostgresSaver and on TurnlogSaver alike. (Its rates are measured by
``scripts/bench --only postgres``, never asserted here.)"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.postgres import pg_schema, pg_url
from turnlog.integrations.langgraph import TurnlogSaver

pytest.importorskip("langgraph.checkpoint.postgres", reason="langgraph-checkpoint-postgres is not installed")

__all__ = ["pg_schema"]  # the fixture, imported for this module's tests

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def saver_append() -> Iterator[Any]:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from benchlib import saver_append

        yield saver_append
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def _messages(saver: Any, thread_id: str) -> list[tuple[str, str]]:
    found = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    assert found is not None
    return [(m.type, m.content) for m in found.checkpoint["channel_values"]["messages"]]


def test_replayed_appends_leave_the_thread_the_graph_left(saver_append: Any, pg_schema: str) -> None:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    calls = saver_append.record(3)
    # A turn: the input's checkpoint, the node's writes, its checkpoint, and so on; nothing but appends.
    # A turn: a read, the input's checkpoint, the node's writes, its checkpoint, and so on.
    assert {name for name, _ in calls} == {"get_tuple", "put", "put_writes"} and len(calls) == 18
    # A message passed again is the same object in the later call, as LangGraph passes it.
    lists = [args[1]["channel_values"].get("messages", []) for name, args in calls if name == "put"]
    assert lists[-1][-2] is lists[-2][-1]
    theirs_schema = f"{pg_schema}_peer"
    with psycopg.connect(pg_url(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {theirs_schema}")
    try:
        with (
            PostgresSaver.from_conn_string(f"{pg_url()}?options=-csearch_path%3D{theirs_schema}") as theirs,
            TurnlogSaver(f"{pg_url()}?schema={pg_schema}") as ours,
        ):
            theirs.setup()
            for saver in (theirs, ours):
                assert saver_append.replay(saver, saver_append._on_thread(calls, "moved")) > 0
                assert _messages(saver, "moved") == [
                    ("human", "turn 0"),
                    ("ai", "noted 1"),
                    ("human", "turn 1"),
                    ("ai", "noted 3"),
                    ("human", "turn 2"),
                    ("ai", "noted 5"),
                ]
    finally:
        with psycopg.connect(pg_url(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {theirs_schema} CASCADE")


def test_rates_are_medians_of_alternating_rounds_on_fresh_threads(saver_append: Any, tmp_path: Path) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    memory = InMemorySaver()

    @contextlib.contextmanager
    def savers() -> Iterator[tuple[Any, Any]]:
        with TurnlogSaver(str(tmp_path / "saver.db")) as ours:
            yield memory, ours

    result = saver_append.saver_appends(2, 3, savers)
    assert result["calls_per_turn"] == 6
    assert result["postgres_saver"] > 0 and result["turnlog_saver"] > 0
    assert len(memory.storage) == 4  # a warm round and three measured, each on a thread of its own


def test_the_writes_after_a_read_carry_the_replaying_savers_own_messages(saver_append: Any) -> None:
    """As in a graph, a turn's checkpoints are made of what the saver itself read at the turn's start
    (TurnlogSaver knows those objects, and stores only the messages a checkpoint adds)."""
    from langgraph.checkpoint.memory import InMemorySaver

    reads: list[list[Any]] = []
    puts: list[list[Any]] = []

    class Spy(InMemorySaver):
        def get_tuple(self, config: Any) -> Any:
            found = super().get_tuple(config)
            reads.append(saver_append._messages(found))
            return found

        def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            puts.append(list(checkpoint["channel_values"].get("messages", [])))
            return super().put(config, checkpoint, metadata, new_versions)

    saver_append.replay(Spy(), saver_append._on_thread(saver_append.record(3), "spied"))
    assert [len(read) for read in reads] == [0, 2, 4] and len(puts) == 9
    assert all(mine is read for mine, read in zip(puts[6], reads[2], strict=True))  # the third turn's input
