"""A SQLite append reuses the heads (session version and hash, store position and order hash) its own
connection's last commit left, instead of reading them again, only while no other connection has
committed (SQLite's data_version) and that commit really happened: other writers, rolled-back
appends and threads sharing the store all leave the chain whole."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from turnlog.store import MessageAppended, SQLiteStore, VersionConflictError


def _msg(text: str) -> MessageAppended:
    return MessageAppended(role="user", content=text)


def _heads_reads(store: SQLiteStore) -> list[str]:
    seen: list[str] = []
    store.conn.set_trace_callback(lambda sql: seen.append(sql) if "ORDER BY position DESC" in sql else None)
    return seen


def test_appends_of_one_writer_read_the_heads_once(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "t.db") as store:
        reads = _heads_reads(store)
        for i in range(5):
            store.append("s", [_msg(f"m{i}")], expected_version=i)
        assert len(reads) == 1  # the first append; the next four know them
        store.append("other", [_msg("x")])  # another session: read again
        assert len(reads) == 2
        assert store.verify().ok


def test_another_connections_commit_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with SQLiteStore.open(path) as a, SQLiteStore.open(path) as b:
        reads = _heads_reads(a)
        for i in range(0, 6, 2):
            a.append("s", [_msg(f"a{i}")], expected_version=i)
            b.append("s", [_msg(f"b{i}")], expected_version=i + 1)
        with pytest.raises(VersionConflictError):
            a.append("s", [_msg("stale")], expected_version=5)  # b's last commit moved the head to 6
        a.append("s", [_msg("last")], expected_version=6)
        assert len(reads) == 5  # every append of a after one of b read the heads again
        versions = [r.version for r in a.read_session("s")]
        assert versions == list(range(1, 8))
        assert [r.position for r in a.read_session("s")] == list(range(1, 8))
        assert a.verify().ok


def test_a_rolled_back_append_leaves_no_heads_behind(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "t.db") as store:
        store.append("s", [_msg("first")])
        failing = [True]

        def hook(conn: Any, records: Any) -> None:
            if failing[0]:
                failing[0] = False
                raise RuntimeError("a hook inside the transaction failed")

        store.within_append(hook)
        with pytest.raises(RuntimeError):
            store.append("s", [_msg("rolled back")])
        [second] = store.append("s", [_msg("second")], expected_version=1)
        assert (second.version, second.position) == (2, 2)
        assert second.prev_hash == store.read_session("s")[0].hash
        assert store.verify().ok


def test_threads_sharing_a_store_keep_the_chain(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "t.db") as store:

        def write(name: str) -> None:
            for i in range(20):
                store.append(name if i % 3 else "shared", [_msg(f"{name} {i}")])

        threads = [threading.Thread(target=write, args=(f"t{n}",)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert store.head_position() == 80
        shared = store.read_session("shared")
        assert [r.version for r in shared] == list(range(1, len(shared) + 1))
        assert store.verify().ok
