"""The cache-stable fold materialized for the session's stored policy (projections.stable_cuts): the
stored cuts give the same bytes as the on-the-fly fold at every call point, under random appends,
pins, rewinds and policy changes, whether the rows are written in the appends' transactions or by
a later catch-up, on SQLite and PostgreSQL; a policy change refolds; other policies fold on the fly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.helpers.postgres import drop_schema, new_schema_name, pg_url, require_pg
from tests.test_context_cache import Session, calls_of, step
from turnlog.projections.context import ContextPolicy, build_context
from turnlog.projections.context_cache import build_stable
from turnlog.projections.registry import keep_caught_up, materializer
from turnlog.projections.stable_cuts import fold_policy, stored_cuts
from turnlog.store import ForkPoint, PolicySet, SessionPolicy, SessionStarted, SQLiteStore, Store

policies = st.builds(
    SessionPolicy,
    budget=st.sampled_from([None, 900, 1500, 3000]),
    cache_stable=st.sampled_from([True, True, False, None]),
    refill_to=st.sampled_from([None, 0.5, 0.8]),
    max_tool_tokens=st.sampled_from([None, 200]),
)
steps_and_policies = st.lists(
    st.one_of(step, step, step, st.tuples(st.just("policy"), policies)), min_size=5, max_size=40
)


def apply(session: Session, kind: str, arg: Any) -> None:
    if kind == "policy":
        records = session.store.append(session.sid, [PolicySet(policy=arg)])
        session.resets.append(records[0].position)
    else:
        session.apply(kind, arg)


def outcome(build: Any) -> Any:
    """The bytes and cut of a build, or the error it raised (both ways must agree on it too)."""
    try:
        built = build()
    except Exception as exc:  # compared, not swallowed
        return f"{type(exc).__name__}: {exc}"
    return built.rendered, built.cut, built.total_tokens


def check_stored_equals_on_the_fly(store: Store, sid: str = "s", after: int = 0) -> int:
    """Every call point after ``after`` (and the head) of the session built under its stored
    policy, read from the stored cuts and folded on the fly: the same. Returns how many builds
    used stored cuts."""
    from turnlog.projections.runtime import session_policy

    used = 0
    head = store.head_position()
    for at in [*(p for p in calls_of(store, sid) if p > after), head]:
        policy = fold_policy(session_policy(store, sid))
        if policy is None:
            continue
        used += stored_cuts(store, sid, policy, at) is not None
        for fmt in ("openai", "anthropic"):
            shown = policy.model_copy(update={"format": fmt})
            version = store.version_at(sid, at)
            stored = outcome(lambda p=shown, a=at: build_context(store, sid, p, a))
            folded = outcome(
                lambda p=shown, a=at, v=version: build_stable(store, sid, p, a, v, materialized=False)
            )
            assert stored == folded, (at, fmt)
    return used


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_and_policies, within=st.booleans())
def test_the_stored_cuts_build_what_the_fold_builds(steps: list[tuple[str, Any]], within: bool) -> None:
    store = SQLiteStore.open(":memory:")
    try:
        if within:
            keep_caught_up(store)  # the rows are written in each append's own transaction
        session = Session(store)
        for kind, arg in steps:
            apply(session, kind, arg)
        materializer(store).catch_up()
        check_stored_equals_on_the_fly(store)
        assert materializer(store).differences() == []
    finally:
        store.close()


@pytest.fixture
def store() -> Iterator[SQLiteStore]:
    s = SQLiteStore.open(":memory:")
    keep_caught_up(s)
    yield s
    s.close()


def long_session(store: Store, sid: str = "s", n: int = 40) -> Session:
    session = Session(store, sid) if store.head_version(sid) == 0 else continued(store, sid)
    for i in range(n):
        session.apply("user", 20 + i % 7)
        session.apply("call", [150 + (i * 37) % 300])
        session.apply("text", 30)
    return session


def continued(store: Store, sid: str) -> Session:
    """A Session that appends to a session already started (its system prompt and request)."""
    session = Session.__new__(Session)
    session.store, session.sid, session.messages, session.pinned, session.resets = store, sid, [], [], []
    session.n, session.run_open = store.head_version(sid) + 1000, False
    return session


def rows(store: Store, sid: str = "s") -> tuple[list[Any], list[Any]]:
    materializer(store).catch_up()
    with store.reading() as conn:
        return (
            conn.execute("SELECT policy FROM ctx_stable_policies WHERE session_id = ?", (sid,)).fetchall(),
            conn.execute(
                "SELECT position, head, cut, moved_at, moved_head FROM ctx_stable_cuts "
                "WHERE session_id = ? ORDER BY position",
                (sid,),
            ).fetchall(),
        )


def test_only_a_cache_stable_stored_policy_with_a_budget_is_materialized(store: SQLiteStore) -> None:
    long_session(store)
    assert rows(store) == ([], [])
    store.append("s", [PolicySet(policy=SessionPolicy(budget=1500))])
    assert rows(store) == ([], [])
    store.append("s", [PolicySet(policy=SessionPolicy(cache_stable=True))])
    assert rows(store) == ([], [])  # no budget: nothing to fold for
    store.append("s", [PolicySet(policy=SessionPolicy(cache_stable=True, budget=1500))])
    policies, cuts = rows(store)
    assert len(policies) == 1 and len(cuts) == len(calls_of(store))
    # The cut moved (the session is far over 1,500 tokens), and only forward.
    assert [c[2] for c in cuts] == sorted(c[2] for c in cuts) and cuts[-1][2] > 1


def test_a_policy_change_refolds_and_each_new_call_adds_one_row(store: SQLiteStore) -> None:
    session = long_session(store)
    store.append("s", [PolicySet(policy=SessionPolicy(cache_stable=True, budget=1500))])
    first = rows(store)
    session.apply("user", 10)
    session.apply("text", 10)
    policies, cuts = rows(store)
    assert policies == first[0] and cuts[: len(first[1])] == first[1] and len(cuts) == len(first[1]) + 1
    store.append("s", [PolicySet(policy=SessionPolicy(cache_stable=True, budget=3000, refill_to=0.5))])
    refolded = rows(store)
    assert refolded[0] != policies and len(refolded[1]) == len(cuts) and refolded[1] != cuts
    assert '"budget":3000' in refolded[0][0][0] and '"refill_to":0.5' in refolded[0][0][0]
    store.append("s", [PolicySet(policy=SessionPolicy(cache_stable=False, budget=3000))])
    assert rows(store) == ([], [])
    assert check_stored_equals_on_the_fly(store) == 0


def test_the_stored_policy_reads_its_cuts_and_others_fold_on_the_fly(store: SQLiteStore) -> None:
    long_session(store)
    store.append("s", [PolicySet(policy=SessionPolicy(cache_stable=True, budget=1500))])
    assert check_stored_equals_on_the_fly(store) == len(calls_of(store)) + 1
    stored = ContextPolicy(budget=1500, cache_stable=True)
    head = store.head_position()
    assert stored_cuts(store, "s", stored, head) is not None
    assert stored_cuts(store, "s", stored.model_copy(update={"format": "anthropic"}), head) is not None
    for other in (
        ContextPolicy(budget=1600, cache_stable=True),
        ContextPolicy(budget=1500, cache_stable=True, refill_to=0.5),
        ContextPolicy(budget=1500, cache_stable=True, max_tool_tokens=200),
    ):
        assert stored_cuts(store, "s", other, head) is None
        built = build_context(store, "s", other)
        assert built.total_tokens <= other.budget


def test_a_fork_folds_its_own_cuts_under_the_policy_it_starts_with(store: SQLiteStore) -> None:
    long_session(store)
    store.append("s", [PolicySet(policy=SessionPolicy(cache_stable=True, budget=1500))])
    long_session(store, n=5)
    fork_at = store.head_version("s") - 10
    (started,) = store.append("f", [SessionStarted(parent=ForkPoint(session_id="s", version=fork_at))])
    fork = continued(store, "f")
    for _ in range(5):
        fork.apply("user", 30)
        fork.apply("call", [400])
        fork.apply("text", 20)
    assert rows(store, "f")[0] == rows(store, "s")[0]
    # The calls the fork shares with its parent have the parent's cuts (one fold of one log).
    shared = [r for r in rows(store, "s")[1] if r[1] < fork_at]
    assert rows(store, "f")[1][: len(shared)] == shared and len(rows(store, "f")[1]) > len(shared)
    # (A fork is built as of its own positions: from its session_started on.)
    assert check_stored_equals_on_the_fly(store, "f", after=started.position) == 11
    assert materializer(store).differences() == []


def test_a_new_store_object_reads_the_stored_cuts(tmp_path: Any) -> None:
    """What the materialization is for: a new process builds from the stored cut, and a read-only
    one folds what the file lacks in its own scratch tables, with the same bytes."""
    path = tmp_path / "t.db"
    first = SQLiteStore.open(path)
    keep_caught_up(first)
    long_session(first)
    first.append("s", [PolicySet(policy=SessionPolicy(cache_stable=True, budget=1500))])
    materializer(first).catch_up()
    policy = ContextPolicy(budget=1500, cache_stable=True)
    expected = build_context(first, "s", policy).rendered
    first.close()
    again = SQLiteStore.open(path)
    try:
        assert stored_cuts(again, "s", policy, again.head_position()) is not None
        assert build_context(again, "s", policy).rendered == expected
    finally:
        again.close()
    readonly = SQLiteStore.open(path, readonly=True)
    try:
        assert build_context(readonly, "s", policy).rendered == expected
    finally:
        readonly.close()


def test_a_read_only_verify_of_a_file_without_projection_tables(tmp_path: Any) -> None:
    """A file written without the projections (no materializer attached) verifies read-only: the
    fold's rebuild reads the runtime projection's policies from their read-only shadow, which the
    comparison of that projection, made before, must not have dropped."""
    path = tmp_path / "t.db"
    bare = SQLiteStore.open(path)
    long_session(bare)
    bare.append("s", [PolicySet(policy=SessionPolicy(cache_stable=True, budget=1500))])
    long_session(bare)
    bare.close()
    readonly = SQLiteStore.open(path, readonly=True)
    try:
        assert materializer(readonly).differences() == []
        assert materializer(readonly).differences() == []  # and again, from the kept shadows
    finally:
        readonly.close()


# No shrinking: every step appends to a server.
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(steps=steps_and_policies)
def test_the_same_on_postgresql(steps: list[tuple[str, Any]]) -> None:
    """On PostgreSQL the rows are written in the appends' transactions too (the builds read that
    transaction's rows): the stored cuts equal the fold, and SQLite's rows, for the same log."""
    require_pg()
    from turnlog import open_store

    schema = new_schema_name()
    pg = open_store(f"{pg_url()}?schema={schema}")
    lite = SQLiteStore.open(":memory:")
    try:
        keep_caught_up(pg)
        keep_caught_up(lite)
        sessions = [Session(pg), Session(lite)]
        for kind, arg in steps:
            for session in sessions:
                apply(session, kind, arg)
        check_stored_equals_on_the_fly(pg)
        assert rows(pg)[1] == rows(lite)[1] and rows(pg)[0] == rows(lite)[0]
        assert materializer(pg).differences() == []
    finally:
        lite.close()
        pg.close()
        drop_schema(schema)
