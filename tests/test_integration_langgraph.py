"""LangGraph: TurnlogSaver behaves as LangGraph's own SqliteSaver does.

First LangGraph's published checkpoint conformance suite (langgraph-checkpoint-conformance), through
the saver's async methods and, via a test-only subclass whose async methods call the sync ones
directly, through its sync methods. Then protocol tests written from LangGraph's documentation and
SqliteSaver's observable behaviour, run against both SqliteSaver and TurnlogSaver, so they prove the
behaviour is LangGraph's: versions, metadata merging, list's filter/before/limit, pending writes and
their overwrite rules, namespaces, delete_thread. The graphs and the turnlog side are in
test_integration_langgraph_graphs.py.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite", reason="needs the langgraph extra")
pytest.importorskip("langgraph.checkpoint.conformance", reason="needs the integrations-test extra")

from langgraph.checkpoint.base import BaseCheckpointSaver, create_checkpoint, empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.sqlite import SqliteSaver

from turnlog.integrations.langgraph import TurnlogSaver
from turnlog.store import SessionRewound, SQLiteStore, StateRecorded

# --- LangGraph's conformance suite -----------------------------------------------------------------


class SyncPathSaver(TurnlogSaver):
    """Test-only: the async methods call the sync ones directly, so the suite checks the sync path."""

    async def aget_tuple(self, config: Any) -> Any:
        return self.get_tuple(config)

    async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[Any]:
        for item in self.list(config, **kwargs):
            yield item

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)


@pytest.mark.parametrize("kind", [TurnlogSaver, SyncPathSaver])
def test_the_langgraph_conformance_suite_passes(tmp_path: Path, kind: type[TurnlogSaver]) -> None:
    made: list[TurnlogSaver] = []

    @checkpointer_test(name=kind.__name__)
    async def factory() -> AsyncIterator[TurnlogSaver]:
        saver = kind(db=tmp_path / f"suite-{len(made)}.db")
        made.append(saver)
        yield saver
        saver.close()

    report = asyncio.run(validate(factory))
    results = report.results
    # SqliteSaver implements these five; the suite's optional extras (delete_for_runs, copy_thread,
    # prune) are not detected, as on SqliteSaver.
    for capability in ("put", "put_writes", "get_tuple", "list", "delete_thread"):
        result = results[capability]
        assert result.passed, (capability, result.failures)
        assert result.tests_passed > 0 and result.tests_failed == 0
    assert sum(results[c].tests_passed for c in results) >= 55
    assert len(made) >= 5


# --- protocol tests: the same behaviour from SqliteSaver and TurnlogSaver --------------------------


@pytest.fixture(params=["sqlite", "turnlog"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseCheckpointSaver[str]]:
    if request.param == "sqlite":
        conn = sqlite3.connect(tmp_path / "lg.db", check_same_thread=False)
        yield SqliteSaver(conn)
        conn.close()
    else:
        with TurnlogSaver(db=tmp_path / "turnlog.db") as turnlog:
            yield turnlog


def cfg(thread: str, ns: str = "", checkpoint_id: str | None = None, **extra: Any) -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns, **extra}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def put(saver: BaseCheckpointSaver[str], config: Any, step: int, **metadata: Any) -> Any:
    """A checkpoint at ``step`` after the one ``config`` names (LangGraph's create_checkpoint)."""
    checkpoint = create_checkpoint(empty_checkpoint(), None, step)
    checkpoint["channel_values"] = {"count": step}
    return saver.put(config, checkpoint, {"step": step, "source": "loop", **metadata}, {})


def chain(saver: BaseCheckpointSaver[str], thread: str, n: int, ns: str = "") -> list[Any]:
    configs, config = [], cfg(thread, ns)
    for step in range(n):
        config = put(saver, config, step)
        configs.append(config)
    return configs


def test_get_next_version_is_sqlitesavers(saver: BaseCheckpointSaver[str]) -> None:
    first = saver.get_next_version(None, None)
    second = saver.get_next_version(first, None)
    assert first.startswith("0" * 31 + "1.") and second.startswith("0" * 31 + "2.")
    assert first < second
    assert saver.get_next_version(7, None).startswith("0" * 31 + "8.")  # type: ignore[arg-type]


def test_put_returns_the_new_config_and_get_tuple_reads_it_back(saver: BaseCheckpointSaver[str]) -> None:
    assert saver.get_tuple(cfg("t")) is None
    first = put(saver, cfg("t"), 0)
    assert set(first["configurable"]) == {"thread_id", "checkpoint_ns", "checkpoint_id"}
    second = put(saver, first, 1)
    got = saver.get_tuple(cfg("t"))
    assert got is not None
    assert got.config == second and got.parent_config == first
    assert got.checkpoint["channel_values"] == {"count": 1}
    assert got.checkpoint["id"] == second["configurable"]["checkpoint_id"]
    by_id = saver.get_tuple(first)
    assert (
        by_id is not None
        and by_id.parent_config is None
        and by_id.checkpoint["channel_values"] == {"count": 0}
    )
    assert saver.get_tuple(cfg("t", checkpoint_id="no-such-id")) is None
    assert saver.get(cfg("t")) == got.checkpoint


def test_metadata_is_merged_as_sqlitesaver_merges_it(saver: BaseCheckpointSaver[str]) -> None:
    config = cfg("t", user_id="u1", run_name="r", __secret="x", thread_ts="old", api_key="k", nested={"a": 1})
    stored = put(saver, config, 0, writes={"node": {"x": "é"}}, parents={})
    got = saver.get_tuple(stored)
    assert got is not None
    meta = dict(got.metadata)
    assert meta["user_id"] == "u1" and meta["step"] == 0 and meta["writes"] == {"node": {"x": "é"}}
    assert "__secret" not in meta  # dunder keys of the config are not metadata
    assert "checkpoint_ns" not in meta and "thread_id" not in meta


def test_the_latest_is_the_greatest_id_not_the_last_written(saver: BaseCheckpointSaver[str]) -> None:
    checkpoint = empty_checkpoint()
    later = {**checkpoint, "id": "2"}
    earlier = {**checkpoint, "id": "1"}
    saver.put(cfg("t"), later, {"step": 2}, {})  # type: ignore[arg-type]
    saver.put(cfg("t"), earlier, {"step": 1}, {})  # type: ignore[arg-type]
    got = saver.get_tuple(cfg("t"))
    assert got is not None and got.config["configurable"]["checkpoint_id"] == "2"


def test_a_checkpoint_put_again_replaces_the_first(saver: BaseCheckpointSaver[str]) -> None:
    checkpoint = {**empty_checkpoint(), "id": "c1"}
    saver.put(cfg("t"), checkpoint, {"v": 1}, {})  # type: ignore[arg-type]
    saver.put(cfg("t"), {**checkpoint, "channel_values": {"x": 2}}, {"v": 2}, {})  # type: ignore[arg-type]
    listed = list(saver.list(cfg("t")))
    assert len(listed) == 1
    assert listed[0].metadata["v"] == 2 and listed[0].checkpoint["channel_values"] == {"x": 2}  # type: ignore[typeddict-item]


def test_list_filter_before_and_limit(saver: BaseCheckpointSaver[str]) -> None:
    configs = chain(saver, "t", 5)
    chain(saver, "other", 2)
    ids = [c["configurable"]["checkpoint_id"] for c in configs]
    listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg("t"))]
    assert listed == ids[::-1]
    assert [t.metadata["step"] for t in saver.list(cfg("t"), filter={"step": 3})] == [3]
    assert [t.metadata["step"] for t in saver.list(cfg("t"), before=configs[2])] == [1, 0]
    assert [t.metadata["step"] for t in saver.list(cfg("t"), before=configs[4], limit=2)] == [3, 2]
    assert list(saver.list(cfg("t"), limit=0)) == []
    assert len(list(saver.list(cfg("t"), limit=-1))) == 5  # SQLite: a negative LIMIT is no limit
    assert len(list(saver.list(None))) == 7  # every thread
    assert len(list(saver.list(None, filter={"step": 1}))) == 2
    assert [t.metadata["step"] for t in saver.list(cfg("t", checkpoint_id=ids[1]))] == [1]
    assert list(saver.list(cfg("t"), before=cfg("t"))) == []  # `before` without an id matches nothing
    with pytest.raises(ValueError, match="Invalid filter key"):
        list(saver.list(cfg("t"), filter={"a'; DROP": 1}))


def test_list_filter_compares_values_as_json_extract_does(saver: BaseCheckpointSaver[str]) -> None:
    config = cfg("t")
    values = [
        {"flag": True, "nested": {"k": "v"}, "score": 1.0, "tags": ["a", "b"], "none": None},
        {"flag": False, "nested": {"k": "w"}, "score": 2, "tags": ["b"], "s": "1"},
    ]
    for step, extra in enumerate(values):
        config = put(saver, config, step, **extra)

    def steps(**filter: Any) -> list[int]:
        return sorted(t.metadata["step"] for t in saver.list(cfg("t"), filter=filter))

    assert steps(flag=True) == [0] and steps(flag=1) == [0] and steps(flag=False) == [1]
    assert steps(**{"nested.k": "w"}) == [1]
    assert steps(nested={"k": "v"}) == [0]
    assert steps(score=1) == [0] and steps(score=2.0) == [1]
    assert steps(tags=["a", "b"]) == [0]
    assert steps(none=None) == [0, 1]  # IS NULL: a null value and a missing key both match
    assert steps(s=1) == [] and steps(s="1") == [1]  # a number never equals text
    assert steps(missing="x") == []


def test_pending_writes_overwrite_rules(saver: BaseCheckpointSaver[str]) -> None:
    config = put(saver, cfg("t"), 0)
    saver.put_writes(config, [("a", 1), ("b", 2)], task_id="task1")
    saver.put_writes(config, [("a", 99)], task_id="task1")  # a regular channel: OR IGNORE keeps the first
    saver.put_writes(config, [("__error__", "first")], task_id="task2")
    saver.put_writes(config, [("__error__", "second")], task_id="task2")  # special: OR REPLACE
    saver.put_writes(config, [("c", 3)], task_id="task0", task_path="~0")
    got = saver.get_tuple(config)
    assert got is not None
    assert sorted(got.pending_writes) == sorted(
        [("task1", "a", 1), ("task1", "b", 2), ("task2", "__error__", "second"), ("task0", "c", 3)]
    )
    saver.put_writes(config, [], task_id="task3")  # nothing: nothing stored
    again = saver.get_tuple(config)
    assert again is not None and again.pending_writes == got.pending_writes
    newer = put(saver, config, 1)
    latest = saver.get_tuple(newer)
    assert latest is not None and latest.pending_writes == []  # writes belong to their checkpoint


def test_namespaces_are_separate_within_a_thread(saver: BaseCheckpointSaver[str]) -> None:
    root = chain(saver, "t", 2)
    child = chain(saver, "t", 3, ns="child:1")
    got_root, got_child = saver.get_tuple(cfg("t")), saver.get_tuple(cfg("t", "child:1"))
    assert got_root is not None and got_root.config == root[-1]
    assert got_child is not None and got_child.config == child[-1]
    assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 5  # no ns: all of them
    assert len(list(saver.list(cfg("t", "child:1")))) == 3
    assert saver.get_tuple(cfg("t", "nope")) is None


def test_delete_thread_forgets_and_the_thread_can_be_used_again(saver: BaseCheckpointSaver[str]) -> None:
    config = chain(saver, "t", 3)[-1]
    saver.put_writes(config, [("a", 1)], task_id="x")
    chain(saver, "t", 1, ns="child")
    chain(saver, "keep", 2)
    saver.delete_thread("t")
    assert saver.get_tuple(cfg("t")) is None and list(saver.list(cfg("t"))) == []
    assert saver.get_tuple(cfg("t", "child")) is None and saver.get_tuple(config) is None
    assert len(list(saver.list(cfg("keep")))) == 2
    saver.delete_thread("t")  # again, and a thread that never was: no error
    saver.delete_thread("never")
    fresh = put(saver, cfg("t"), 0)
    got = saver.get_tuple(cfg("t"))
    assert got is not None and got.config == fresh and got.parent_config is None


# --- turnlog's side of the same calls ----------------------------------------------------------------


def test_checkpoints_are_state_events_and_delete_is_a_compensating_event(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with TurnlogSaver(db=db) as saver:
        config = chain(saver, "t", 2)[-1]
        saver.put_writes(config, [("a", 1)], task_id="x")
        saver.delete_thread("t")
        put(saver, cfg("t"), 0)
    with SQLiteStore.open(db) as store:
        events = [r.event for r in store.read_session("t")]
        states = [e for e in events if isinstance(e, StateRecorded)]
        assert len(states) == 4 and all(e.framework == "langgraph" for e in states)
        checkpoint = states[1]
        assert checkpoint.key == config["configurable"]["checkpoint_id"]
        assert checkpoint.parent_key == states[0].key
        assert checkpoint.media_type.startswith("application/x-langgraph-checkpoint; serde=")
        assert checkpoint.state_id is not None and checkpoint.metadata is not None
        assert checkpoint.metadata["step"] == 1
        rewinds = [e for e in events if isinstance(e, SessionRewound)]
        assert [(r.to_version, r.reason, r.source) for r in rewinds] == [(0, "delete", "langgraph")]
        assert store.verify().ok


def test_two_savers_on_one_store_see_each_others_checkpoints(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with TurnlogSaver(db=db) as a, TurnlogSaver(db=db) as b:
        first = put(a, cfg("t"), 0)
        assert b.get_tuple(cfg("t")) is not None
        second = put(b, first, 1)  # b appends after what a wrote
        third = put(a, second, 2)  # a folds b's checkpoint before appending
        got = b.get_tuple(cfg("t"))
        assert got is not None and got.config == third and got.parent_config == second
        assert len(list(a.list(cfg("t")))) == 3


def test_a_thread_id_turnlog_cannot_take_is_a_clear_error(tmp_path: Path) -> None:
    with TurnlogSaver(db=tmp_path / "t.db") as saver:
        with pytest.raises(Exception, match="session"):
            put(saver, cfg("has space"), 0)
        assert list(saver.list(None)) == []


def test_async_methods_on_the_same_instance(tmp_path: Path) -> None:
    async def run(saver: TurnlogSaver) -> None:
        checkpoint = create_checkpoint(empty_checkpoint(), None, 0)
        config = await saver.aput(cfg("t"), checkpoint, {"step": 0}, {})
        await saver.aput_writes(config, [("a", 1)], task_id="x")
        got = await saver.aget_tuple(cfg("t"))
        assert got is not None and got.pending_writes == [("x", "a", 1)]
        assert [t.config async for t in saver.alist(cfg("t"))] == [config]
        await saver.adelete_thread("t")
        assert await saver.aget_tuple(cfg("t")) is None

    with TurnlogSaver(db=tmp_path / "t.db") as saver:
        asyncio.run(run(saver))


def test_without_langgraph_the_error_names_the_extra() -> None:
    root = Path(__file__).resolve().parent.parent
    code = (
        "import tests.helpers.no_frameworks\n"
        "import turnlog, turnlog.integrations\n"
        "try:\n import turnlog.integrations.langgraph\nexcept ImportError as e:\n print(e)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert "pip install 'turnlog[langgraph]'" in result.stdout


def test_delta_channel_history_walks_parents_and_stops_at_a_cycle(saver: BaseCheckpointSaver[str]) -> None:
    first = put(saver, cfg("t"), 0)
    saver.put_writes(first, [("log", "a"), ("other", 1)], task_id="x")
    second = put(saver, first, 1)
    saver.put_writes(second, [("log", "b")], task_id="y")
    third = put(saver, second, 2)
    got = saver.get_delta_channel_history(config=third, channels=["log", "count"])
    assert got["log"] == {"writes": [("x", "log", "a"), ("y", "log", "b")]}
    assert got["count"] == {"writes": [], "seed": 1}  # the nearest ancestor holding the channel
    assert saver.get_delta_channel_history(config=third, channels=[]) == {}
    # A checkpoint put again under a later one makes the parent chain a cycle: the walk ends.
    again = {**create_checkpoint(empty_checkpoint(), None, 0), "id": first["configurable"]["checkpoint_id"]}
    saver.put(second, again, {}, {})  # type: ignore[arg-type]
    looped = saver.get_delta_channel_history(config=second, channels=["log"])
    assert looped["log"]["writes"] == [("x", "log", "a")]
