"""An append to a SQLite store kept caught up (``turnlog.open_store``) costs one durable commit: the
log's, and nothing more (issue 20). The token counts and the materialized projections are made by
the next read's catch-up, from the appended records kept in memory, in one non-durable commit (or by
closing the store). When that cannot be done (a projection fails), the events are stored all the same
and a later catch-up does the rest. Rows read back skip the depth re-check; verify does not."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import turnlog
from tests.helpers.forge import forge_row
from turnlog.projections.context_index import ContextIndex
from turnlog.projections.registry import materializer
from turnlog.store import MessageAppended, Origin, SQLiteStore, StoreError
from turnlog.store.limits import MAX_JSON_DEPTH
from turnlog.store.sqlite import counted_through


def _commits(store: SQLiteStore) -> list[str]:
    """The commits the connection makes: its COMMIT statements, and each write statement run outside
    a transaction (SQLite's autocommit: the statement is its own transaction, as a one-event
    append's INSERT is; the trace shows it again for each trigger it fires)."""
    seen: list[str] = []
    conn = store.conn
    last = [""]

    def trace(sql: str) -> None:
        text = sql.strip().upper()
        again, last[0] = sql == last[0], sql
        if text == "COMMIT" or (
            text.startswith(("INSERT", "UPDATE", "DELETE")) and not conn.in_transaction and not again
        ):
            seen.append(sql)

    conn.set_trace_callback(trace)
    return seen


def _checkpoints(store: SQLiteStore) -> set[int]:
    rows = store.conn.execute("SELECT position FROM projection_checkpoints").fetchall()
    return {int(r[0]) for r in rows}


def _uncounted(store: SQLiteStore) -> int:
    return int(store.conn.execute("SELECT count(*) FROM events WHERE tokens IS NULL").fetchone()[0])


def test_one_commit_per_append_and_one_for_the_next_read(tmp_path: Path) -> None:
    store = turnlog.open_store(tmp_path / "t.db")
    store.append("s", [MessageAppended(role="user", content="first")])
    materializer(store).catch_up()  # creates the projections
    commits = _commits(store)
    for i in range(5):
        store.append("s", [MessageAppended(role="user", content=f"message {i}")])
    assert len(commits) == 5  # the log's commits, nothing else
    assert _checkpoints(store) == {1} and _uncounted(store) == 5  # left for the next read
    seen: list[str] = []
    store.conn.set_trace_callback(seen.append)
    # The read's catch-up: counts and rows of all five in one commit, without fsync (derived state).
    turnlog.build_context(store, "s", turnlog.ContextPolicy(budget=1000))
    store.conn.set_trace_callback(None)
    writes = [i for i, sql in enumerate(seen) if sql == "BEGIN IMMEDIATE"]
    assert len(writes) == 1 and seen[writes[0] - 1] == "PRAGMA synchronous = NORMAL"
    head = store.head_position()
    assert _checkpoints(store) == {head}
    with store.reading() as conn:
        assert counted_through(conn) == head
    assert _uncounted(store) == 0
    assert materializer(store).differences() == []
    store.close()


def test_closing_a_writer_leaves_its_file_caught_up(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with turnlog.open_store(path) as store:
        store.append("s", [MessageAppended(role="user", content=f"m{i}") for i in range(3)])
        store.append("s", [MessageAppended(role="assistant", content="reply")])
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert {r[0] for r in conn.execute("SELECT position FROM projection_checkpoints")} == {4}
        assert conn.execute("SELECT count(*) FROM events WHERE tokens IS NULL").fetchone()[0] == 0
    finally:
        conn.close()


def test_a_failing_projection_leaves_the_append_stored_and_is_caught_up_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = turnlog.open_store(tmp_path / "t.db")
    store.append("s", [MessageAppended(role="user", content="first")])
    materializer(store).catch_up()
    before = _checkpoints(store)

    def broken(self: Any, conn: sqlite3.Connection, records: Any) -> None:
        conn.execute("INSERT INTO ctx_messages DEFAULT VALUES")  # a write the rollback must undo
        raise StoreError("projection failed")

    def broken_remembering(self: Any, conn: sqlite3.Connection, records: Any, memo: Any) -> None:
        broken(self, conn, records)

    with monkeypatch.context() as patch:
        patch.setattr(ContextIndex, "apply", broken)
        patch.setattr(ContextIndex, "apply_remembering", broken_remembering)  # what catch_up calls
        stored = store.append("s", [MessageAppended(role="user", content="second")])
        with pytest.raises(StoreError):
            materializer(store).catch_up()
    assert [r.version for r in stored] == [2]
    assert store.head_version("s") == 2
    assert _checkpoints(store) == before  # nothing of the failed projection work was kept
    assert materializer(store).catch_up() == store.head_position()
    assert materializer(store).differences() == []
    store.close()


def test_projections_behind_the_log_are_caught_up_by_the_next_read(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with SQLiteStore.open(path) as bare:  # no projections kept: they fall behind
        bare.append("s", [MessageAppended(role="user", content=f"m{i}") for i in range(3)])
    store = turnlog.open_store(path)
    store.append("s", [MessageAppended(role="user", content="next")])
    assert materializer(store).catch_up() == store.head_position()
    assert _checkpoints(store) == {store.head_position()}
    assert materializer(store).differences() == []
    store.close()


def _forge_origin_row(path: Path, depth: int) -> int:
    """Append, by hand with a valid hash, a message whose origin item nests ``depth`` levels."""
    text = "[" * (depth - 1) + "]" * (depth - 1)
    payload = '{"role":"user","content":"x","origin":{"framework":"f","item":' + text + "}}"
    return forge_row(path, "s", "message_appended", payload)


def test_verify_still_checks_the_depth_that_reads_trust(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with SQLiteStore.open(path) as store:
        store.append("s", [MessageAppended(role="user", content="first")])
    deep: Any = []
    for _ in range(MAX_JSON_DEPTH + 5):
        deep = [deep]
    with pytest.raises(ValueError, match="levels deep"):  # input is still checked
        Origin(framework="f", item=deep)
    bad = _forge_origin_row(path, MAX_JSON_DEPTH + 10)
    with SQLiteStore.open(path) as store:
        report = store.verify()
        assert not report.ok
        assert report.first_bad_position == bad
        assert any("levels deep" in p for p in report.problems), report.problems
