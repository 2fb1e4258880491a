"""A warm build's freshness check on SQLite: the projections' checkpoints are read again only when
the database may have changed (PRAGMA data_version for other connections' commits, the
connection's own count of changed rows for its writes); a change by anyone is always seen."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.turns import traced_build
from turnlog import ContextPolicy, build_context
from turnlog.store import MessageAppended, SQLiteStore

POLICY = ContextPolicy(budget=4000)


def _checks(store: SQLiteStore) -> tuple[int, list[str]]:
    """How many times a build read the checkpoints or its header, and the contents it built."""
    statements, built = traced_build(store, "s", POLICY)
    # The freshness check reads the checkpoints; the build's first statement (its header) the
    # live gaps among others: both only when the database may have changed.
    checks = sum("projection_checkpoints" in s or "FROM live_gaps" in s for s in statements)
    return checks, [m.content for m in built.messages]


def _filled(path: Path) -> SQLiteStore:
    store = SQLiteStore.open(path)
    store.append("s", [MessageAppended(role="system", content="be brief")], expected_version=0)
    store.append("s", [MessageAppended(role="user", content="first")], expected_version=1)
    return store


def test_an_unchanged_database_is_not_checked_again(tmp_path: Path) -> None:
    with _filled(tmp_path / "t.db") as store:
        build_context(store, "s", POLICY)
        first, contents = _checks(store)
        again, same = _checks(store)
    assert first <= 2
    assert again == 0
    assert same == contents


def test_the_store_own_append_is_seen(tmp_path: Path) -> None:
    with _filled(tmp_path / "t.db") as store:
        _checks(store)
        _checks(store)
        store.append("s", [MessageAppended(role="user", content="second")], expected_version=2)
        checks, contents = _checks(store)
    assert checks >= 1
    assert contents[-1] == "second"


def test_another_connection_commit_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with _filled(path) as store:
        _checks(store)
        _checks(store)
        with SQLiteStore.open(path) as other:
            other.append("s", [MessageAppended(role="user", content="from elsewhere")], expected_version=2)
        checks, contents = _checks(store)
        assert checks >= 1
        assert contents[-1] == "from elsewhere"
        # Caught up (this store's catch-up wrote the rows: checked once more) and unchanged since.
        _checks(store)
        assert _checks(store) == (0, contents)


def test_each_session_has_its_own_head(tmp_path: Path) -> None:
    with _filled(tmp_path / "t.db") as store:
        store.append("t", [MessageAppended(role="user", content="other session")], expected_version=0)
        build_context(store, "s", POLICY)
        build_context(store, "t", POLICY)
        s = [m.content for m in build_context(store, "s", POLICY).messages]
        t = [m.content for m in build_context(store, "t", POLICY).messages]
    assert s == ["be brief", "first"]
    assert t == ["other session"]


def test_a_warm_build_reads_no_payload_it_has_decoded(tmp_path: Path) -> None:
    """The index's rows are read alone; an event's payload is read and decoded once per store
    object (events never change), and a new message's payload when a build first shows it."""
    path = tmp_path / "t.db"
    with _filled(path) as store:
        build_context(store, "s", POLICY)
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        try:
            warm = build_context(store, "s", POLICY)
            assert not [s for s in statements if "JOIN events" in s]
            store.append("s", [MessageAppended(role="assistant", content="new")], expected_version=2)
            statements.clear()
            grown = build_context(store, "s", POLICY)
        finally:
            store.conn.set_trace_callback(None)
        assert len([s for s in statements if "JOIN events" in s]) == 1
        assert [m.content for m in grown.messages] == [*(m.content for m in warm.messages), "new"]
        with SQLiteStore.open(path) as cold:
            assert build_context(cold, "s", POLICY).rendered == grown.rendered


def _retained_reads(statements: list[str]) -> int:
    # (The build's read of the rows: a catch-up's projections may look at the index too.)
    return sum(s.startswith("SELECT c.") and "ctx_messages_retained" in s for s in statements)


def test_an_unchanged_database_does_not_read_the_retained_rows_again(tmp_path: Path) -> None:
    from turnlog.actions import pin_message

    with _filled(tmp_path / "t.db") as store:
        for i in range(6):
            store.append("s", [MessageAppended(role="user", content=f"turn {i}")], expected_version=2 + i)
        # The first build catches up, then builds in a snapshot taken after its own writes: the
        # next build finds the database unchanged since.
        first, built = traced_build(store, "s", POLICY)
        again, same = traced_build(store, "s", POLICY)
        assert any(s.startswith("BEGIN IMMEDIATE") for s in first)
        assert _retained_reads(first) == 1
        assert _retained_reads(again) == 0
        assert len(again) < len(first)
        assert [m.content for m in same.messages] == [m.content for m in built.messages]
        # A pin changes the database: the retained rows are read again, and the pinned one is kept.
        recorded = store.read_versions("s", [4])[0]
        pin_message(store, "s", recorded.event_id)
        pinned, shown = traced_build(store, "s", ContextPolicy(budget=60))
        assert _retained_reads(pinned) >= 1
        assert [m.category for m in shown.messages if m.content == "turn 1"] == ["pinned"]
        # The same policy as before: not the contexts built before the pin.
        _, after = traced_build(store, "s", POLICY)
        assert [m.content for m in after.messages] == [m.content for m in built.messages]
        assert [m.category for m in after.messages if m.content == "turn 1"] == ["pinned"]
