"""LangGraph: what TurnlogSaver answers from memory is what its index answers, and writes waiting for
its lock go in one append.

The saver keeps each thread's latest checkpoint per namespace and its pending writes in memory
(integrations.langgraph_log), folded from its own appends or from another writer's. Random runs of
puts (ids out of order, ids put again), writes (special channels or not, for the latest, an older
or a not-yet-stored checkpoint), deletes and a second saver writing to the same thread must give,
at every step, the same latest checkpoint from memory (``get_tuple``) as from the index
(``list(limit=1)``, one indexed query) and as a saver opened afresh — on SQLite and on PostgreSQL.
Then the group commit (integrations.langgraph_queue): writes queued while the lock is held go in
one append in arrival order, each caller returns once its write is stored, and a write the store
refuses fails alone.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base", reason="needs the langgraph extra")

from langgraph.checkpoint.base import CheckpointTuple, create_checkpoint, empty_checkpoint

from tests.helpers.langgraph_savers import Opener, echo_graph, opener
from tests.helpers.postgres import pg_schema
from turnlog.integrations.langgraph import TurnlogSaver
from turnlog.projections.langgraph_index import writes_of
from turnlog.projections.registry import materializer
from turnlog.store import InvalidEventError, StateRecorded

__all__ = ["opener", "pg_schema"]  # the fixtures, imported for this module's tests


def cfg(thread: str, ns: str = "", checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def shape(found: CheckpointTuple | None) -> Any:
    """What a reader sees of a checkpoint tuple (its objects compared by value)."""
    if found is None:
        return None
    return (
        found.config,
        found.checkpoint["id"],
        found.checkpoint["channel_values"],
        found.metadata,
        found.parent_config,
        found.pending_writes,
    )


def from_index(saver: TurnlogSaver, config: Any) -> CheckpointTuple | None:
    return next(iter(saver.list(config, limit=1)), None)


def random_run(seed: int, steps: int, open_saver: Opener) -> None:
    rng = random.Random(seed)
    main, other = open_saver(), open_saver()
    ids = [f"{i:04d}" for i in range(1, 9)]  # few, fixed-width: string order is numeric order
    threads, namespaces = ["a", "b"], ["", "sub"]

    def check() -> None:
        for reader in (main, other):
            for thread in threads:
                for ns in namespaces:
                    wanted = shape(from_index(reader, cfg(thread, ns)))
                    assert shape(reader.get_tuple(cfg(thread, ns))) == wanted, (seed, step, thread, ns)

    for step in range(steps):
        saver = other if rng.random() < 0.25 else main  # now and then another writer
        thread, ns = rng.choice(threads), rng.choice(namespaces)
        roll = rng.random()
        if roll < 0.4:
            checkpoint = create_checkpoint(empty_checkpoint(), None, step)
            checkpoint["id"] = rng.choice(ids)
            checkpoint["channel_values"] = {"step": step}
            parent = rng.choice([None, rng.choice(ids)])
            saver.put(cfg(thread, ns, parent), checkpoint, {"step": step, "source": "loop"}, {})
        elif roll < 0.95:
            channels = rng.choice([["x"], ["x", "y"], ["__error__"], ["__interrupt__", "__resume__"]])
            writes = [(channel, f"{channel}@{step}") for channel in channels]
            target = rng.choice([ids[-1], ids[-2], rng.choice(ids)])  # often the latest, or one to come
            task = rng.choice(["t1", "t2"])
            saver.put_writes(cfg(thread, ns, target), writes, task_id=task, task_path=f"p{step}")
        else:
            saver.delete_thread(thread)
        if rng.random() < 0.3:  # not after every step: a saver's memory may be behind when it writes
            check()
    check()
    fresh = open_saver()  # loads each namespace from the index, then folds
    for thread in threads:
        for ns in namespaces:
            assert shape(fresh.get_tuple(cfg(thread, ns))) == shape(from_index(main, cfg(thread, ns)))


@pytest.mark.parametrize("seed", range(4))
def test_the_latest_from_memory_is_the_indexs(opener: Opener, seed: int) -> None:
    random_run(seed, 120, opener)


def test_a_thread_known_from_before_is_loaded_from_the_index_and_folded(opener: Opener) -> None:
    first = opener()
    config = cfg("t")
    for step in range(6):
        checkpoint = create_checkpoint(empty_checkpoint(), None, step)
        checkpoint["id"] = f"{step:04d}"
        config = first.put(config, checkpoint, {"step": step}, {})
        first.put_writes(config, [("x", step)], task_id=f"t{step}")
        if step == 3:
            materializer(first.store).catch_up()  # the index stops here: 0003 is its latest
    later = opener()  # a new process: nothing in memory yet, and an index behind the log

    def without_catching_up(query: Any) -> Any:
        with later.store.reading() as conn:
            return query(conn)

    later._log.query = without_catching_up  # type: ignore[method-assign]
    found = later.get_tuple(cfg("t"))  # the index's rows, then what the log holds past them
    assert found is not None and found.checkpoint["id"] == "0005"
    assert [(w[0], w[1], w[2]) for w in found.pending_writes or []] == [("t5", "x", 5)]
    first.put_writes(config, [("y", 6)], task_id="t6")  # appended after `later` loaded it
    found = later.get_tuple(cfg("t"))
    assert found is not None and sorted(w[0] for w in found.pending_writes or []) == ["t5", "t6"]
    assert shape(found) == shape(from_index(first, cfg("t")))


# --- group commit ------------------------------------------------------------------------------


def queued(saver: TurnlogSaver, count: int) -> None:
    """Wait until ``count`` writes wait in the saver's queue (their threads blocked on its lock)."""
    deadline = time.monotonic() + 30
    while len(saver._log.queue._waiting) < count:
        assert time.monotonic() < deadline, "the writers never queued"
        time.sleep(0.005)


def appends_of(saver: TurnlogSaver) -> list[list[Any]]:
    """Record each store.append call's events (the saver's appends go through it)."""
    calls: list[list[Any]] = []
    original = saver.store.append

    def append(session_id: str, events: Any, **kwargs: Any) -> Any:
        calls.append(list(events))
        return original(session_id, events, **kwargs)

    saver.store.append = append  # type: ignore[method-assign]
    return calls


def test_writes_waiting_for_the_lock_go_in_one_append_in_arrival_order(opener: Opener) -> None:
    saver = opener()
    checkpoint = create_checkpoint(empty_checkpoint(), None, 0)
    config = saver.put(cfg("t"), checkpoint, {"step": 0}, {})
    calls = appends_of(saver)
    errors: list[BaseException] = []

    def write(task: str) -> None:
        try:
            saver.put_writes(config, [("x", task)], task_id=task)
        except BaseException as exc:
            errors.append(exc)

    workers = []
    with saver._lock:  # an append in progress: every writer waits
        for i in range(6):
            workers.append(threading.Thread(target=write, args=(f"t{i}",)))
            workers[-1].start()
            queued(saver, i + 1)  # one at a time: their order is known
    for worker in workers:
        worker.join()
    assert errors == []
    assert len(calls) == 1
    assert [e.key.rsplit("/", 1)[1] for e in calls[0] if isinstance(e, StateRecorded)] == [
        f"t{i}" for i in range(6)
    ]
    found = saver.get_tuple(cfg("t"))
    assert found is not None
    assert sorted(w[0] for w in found.pending_writes or []) == [f"t{i}" for i in range(6)]
    assert shape(found) == shape(from_index(saver, cfg("t")))


def test_a_write_the_store_refuses_fails_alone(opener: Opener) -> None:
    saver = opener()
    checkpoint = create_checkpoint(empty_checkpoint(), None, 0)
    config = saver.put(cfg("t"), checkpoint, {"step": 0}, {})
    original = saver.store.append

    def append(session_id: str, events: Any, **kwargs: Any) -> Any:
        # As the store refuses an invalid event: before anything is stored.
        if any(isinstance(e, StateRecorded) and e.key.endswith("/bad") for e in events):
            raise InvalidEventError("event 2 (state_recorded): refused by the test")
        return original(session_id, events, **kwargs)

    saver.store.append = append  # type: ignore[method-assign]
    outcomes: dict[str, str] = {}

    def write(task: str) -> None:
        try:
            saver.put_writes(config, [("x", task)], task_id=task)
            outcomes[task] = "stored"
        except InvalidEventError as exc:
            outcomes[task] = str(exc)

    tasks = ["good1", "bad", "good2"]
    workers = []
    with saver._lock:
        for i, task in enumerate(tasks):
            workers.append(threading.Thread(target=write, args=(task,)))
            workers[-1].start()
            queued(saver, i + 1)
    for worker in workers:
        worker.join()
    assert outcomes == {
        "good1": "stored",
        "bad": "event 2 (state_recorded): refused by the test",
        "good2": "stored",
    }
    found = saver.get_tuple(cfg("t"))
    assert found is not None and sorted(w[0] for w in found.pending_writes or []) == ["good1", "good2"]
    assert shape(found) == shape(from_index(saver, cfg("t")))


def test_a_graph_turn_appends_once_per_checkpoint_at_most_plus_writes(opener: Opener) -> None:
    """A one-node graph turn: LangGraph's three checkpoints and two task writes, in three to five
    appends (writes that arrive while a checkpoint commits join the next append), and no read of
    the index once the thread is known."""
    saver = opener()
    graph = echo_graph().compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "g"}}
    graph.invoke({"messages": [("user", "hello")]}, config)
    calls = appends_of(saver)
    queries: list[Any] = []
    original_query = saver._log.query
    saver._log.query = lambda query: queries.append(query) or original_query(query)  # type: ignore[method-assign]
    for i in range(5):
        graph.invoke({"messages": [("user", f"turn {i}")]}, config)
    assert 15 <= len(calls) <= 25
    assert sum(isinstance(e, StateRecorded) for call in calls for e in call) == 25
    assert queries == []
    messages = graph.get_state(config).values["messages"]
    assert [m.content for m in messages][-2:] == ["turn 4", "noted 11"]


def started(fn: Callable[[], Any], errors: list[BaseException]) -> threading.Thread:
    """``fn`` running in a thread of its own, its exception kept in ``errors``."""

    def target() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    return thread


def keys(calls: list[list[Any]]) -> list[list[str]]:
    return [[e.key for e in call if isinstance(e, StateRecorded)] for call in calls]


def test_writes_for_a_checkpoint_not_yet_put_wait_for_it_and_go_in_its_append(opener: Opener) -> None:
    """LangGraph's default (durability ``async``): while a checkpoint waits to commit, the next
    step's tasks run and write for the next checkpoint, not yet put. The checkpoint goes alone; the
    writes (and the thread's other writes queued with them) wait for the next one's ``put``, so all
    go in one append (one commit), writes first, in arrival order."""
    saver = opener()
    first = create_checkpoint(empty_checkpoint(), None, 0)
    config = saver.put(cfg("t"), first, {"step": 0}, {})
    second = create_checkpoint(first, None, 1)
    third = create_checkpoint(second, None, 2)
    assert first["id"] < second["id"] < third["id"]
    saver._log.queue._linger = 60.0  # however slow the machine: the put comes first
    calls = appends_of(saver)
    errors: list[BaseException] = []
    now, then = cfg("t", checkpoint_id=second["id"]), cfg("t", checkpoint_id=third["id"])
    with saver._lock:  # an append in progress
        workers = [started(lambda: saver.put(config, second, {"step": 1}, {}), errors)]
        queued(saver, 1)
        workers.append(started(lambda: saver.put_writes(now, [("x", "a")], task_id="task0"), errors))
        queued(saver, 2)
        workers.append(started(lambda: saver.put_writes(then, [("x", "b")], task_id="task1"), errors))
        queued(saver, 3)
    workers[0].join()
    saver.put(now, third, {"step": 2}, {})
    for worker in workers:
        worker.join()
    assert errors == []
    assert keys(calls) == [
        [second["id"]],
        [f"{second['id']}/writes/task0", f"{third['id']}/writes/task1", third["id"]],
    ]
    for checkpoint, task in [(second, "task0"), (third, "task1")]:
        found = saver.get_tuple(cfg("t", checkpoint_id=checkpoint["id"]))
        assert found is not None and [w[0] for w in found.pending_writes or []] == [task]
        assert shape(found) == shape(from_index(saver, cfg("t", checkpoint_id=checkpoint["id"])))
    assert shape(saver.get_tuple(cfg("t"))) == shape(from_index(saver, cfg("t")))


def test_writes_whose_checkpoint_never_comes_are_stored_after_the_wait(opener: Opener) -> None:
    saver = opener()
    first = create_checkpoint(empty_checkpoint(), None, 0)
    config = saver.put(cfg("t"), first, {"step": 0}, {})
    second = create_checkpoint(first, None, 1)
    never = create_checkpoint(second, None, 2)
    saver._log.queue._linger = 0.05
    calls = appends_of(saver)
    errors: list[BaseException] = []
    then = cfg("t", checkpoint_id=never["id"])
    with saver._lock:
        workers = [started(lambda: saver.put(config, second, {"step": 1}, {}), errors)]
        queued(saver, 1)
        workers.append(started(lambda: saver.put_writes(then, [("x", "b")], task_id="task"), errors))
        queued(saver, 2)
    for worker in workers:
        worker.join()
    assert errors == []
    assert keys(calls) == [[second["id"]], [f"{never['id']}/writes/task"]]
    assert [w[0] for w in saver._log.query(lambda conn: writes_of(conn, "t", "", never["id"]))] == ["task"]


def test_writes_of_a_caller_that_puts_its_checkpoints_itself_do_not_wait(opener: Opener) -> None:
    """No checkpoint of the thread being put: writes for the latest, an older or a later checkpoint
    (this caller's own next, put by it afterwards) go at once."""
    saver = opener()
    first = create_checkpoint(empty_checkpoint(), None, 0)
    config = saver.put(cfg("t"), first, {"step": 0}, {})
    later = create_checkpoint(first, None, 1)
    queue = saver._log.queue
    asked: list[bool] = []
    original = queue._awaits_put

    def awaits(sid: str) -> bool:
        asked.append(original(sid))
        return asked[-1]

    queue._awaits_put = awaits  # type: ignore[method-assign]
    calls = appends_of(saver)
    saver.put_writes(config, [("x", "now")], task_id="task")
    saver.put_writes(cfg("t", checkpoint_id="0"), [("x", "older")], task_id="task")
    saver.put_writes(cfg("t", checkpoint_id=later["id"]), [("x", "later")], task_id="task")
    assert len(calls) == 3
    assert asked and not any(asked)


def writes_during_a_commit(saver: TurnlogSaver, checkpoint: Any, task: str) -> list[list[Any]]:
    """``checkpoint`` put (its config's parent: the thread's latest) while, during its append, a
    task writes for it (as a step's first task does while LangGraph's ``put`` commits); returns once
    the put has returned, the writes still on their way. The appends' events, recorded."""
    calls = appends_of(saver)
    inner = saver.store.append
    appending, release = threading.Event(), threading.Event()

    def append(session_id: str, events: Any, **kwargs: Any) -> Any:
        if any(isinstance(e, StateRecorded) and e.key == checkpoint["id"] for e in events):
            appending.set()
            assert release.wait(30)
        return inner(session_id, events, **kwargs)

    saver.store.append = append  # type: ignore[method-assign]
    errors: list[BaseException] = []
    parent = saver.get_tuple(cfg("t"))
    base = cfg("t", checkpoint_id=parent.checkpoint["id"]) if parent is not None else cfg("t")
    putting = started(lambda: saver.put(base, checkpoint, {"step": 1}, {}), errors)
    assert appending.wait(30)
    now = cfg("t", checkpoint_id=checkpoint["id"])
    writing = started(lambda: saver.put_writes(now, [("x", task)], task_id=task), errors)
    queued(saver, 1)
    release.set()
    putting.join()
    saver._test_writing = writing  # type: ignore[attr-defined]
    saver._test_errors = errors  # type: ignore[attr-defined]
    return calls


def test_writes_made_while_their_checkpoint_commits_go_in_the_next_puts_append(opener: Opener) -> None:
    """LangGraph's default durability: a step's first task writes while the step's checkpoint
    commits; LangGraph puts the next checkpoint once that returns. The writes wait for that put and
    go in its append: two appends (two commits), not three one after the other."""
    saver = opener()
    first = create_checkpoint(empty_checkpoint(), None, 0)
    saver.put(cfg("t"), first, {"step": 0}, {})
    second = create_checkpoint(first, None, 1)
    third = create_checkpoint(second, None, 2)
    saver._log.queue._next_linger = 60.0  # however slow the machine: the next put comes first
    calls = writes_during_a_commit(saver, second, "task0")
    saver.put(cfg("t", checkpoint_id=second["id"]), third, {"step": 2}, {})
    saver._test_writing.join()  # type: ignore[attr-defined]
    assert saver._test_errors == []  # type: ignore[attr-defined]
    assert keys(calls) == [[second["id"]], [f"{second['id']}/writes/task0", third["id"]]]
    found = saver.get_tuple(cfg("t", checkpoint_id=second["id"]))
    assert found is not None and [w[0] for w in found.pending_writes or []] == ["task0"]
    assert shape(found) == shape(from_index(saver, cfg("t", checkpoint_id=second["id"])))
    assert shape(saver.get_tuple(cfg("t"))) == shape(from_index(saver, cfg("t")))
    assert saver._log.queue._misses == {}


def test_writes_whose_next_put_does_not_come_stop_waiting_for_it(opener: Opener) -> None:
    """A next put that does not come (LangGraph waits for a delta channel's writes before it puts
    the next checkpoint; the run ends): the writes go alone after the short wait, and after two such
    in a row the namespace's writes no longer wait, until a next put comes again."""
    saver = opener()
    queue = saver._log.queue
    queue._next_linger = 0.02
    previous = create_checkpoint(empty_checkpoint(), None, 0)
    saver.put(cfg("t"), previous, {"step": 0}, {})
    for step in range(1, 4):
        checkpoint = create_checkpoint(previous, None, step)
        calls = writes_during_a_commit(saver, checkpoint, f"task{step}")
        saver._test_writing.join()  # type: ignore[attr-defined]
        assert saver._test_errors == []  # type: ignore[attr-defined]
        assert keys(calls) == [[checkpoint["id"]], [f"{checkpoint['id']}/writes/task{step}"]]
        assert queue._misses == {("t", ""): step}  # (from 2 on, each put counts towards a retry)
        found = saver.get_tuple(cfg("t"))
        assert found is not None and [w[0] for w in found.pending_writes or []] == [f"task{step}"]
        previous = checkpoint
    for step in range(4, 4 + 64):  # puts without writes during them: the namespace tries again
        checkpoint = create_checkpoint(previous, None, step)
        saver.put(cfg("t", checkpoint_id=previous["id"]), checkpoint, {"step": step}, {})
        previous = checkpoint
    assert queue._misses == {("t", ""): 1}
