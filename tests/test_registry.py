"""The registry of materializers: one per store object, and freed with it (a process that opens many
stores, such as a server, must not keep every store it ever opened in memory)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from turnlog.projections.registry import keep_caught_up, materializer
from turnlog.projections.sessions import list_sessions
from turnlog.store import MessageAppended, SQLiteStore


def test_one_materializer_per_store_object(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "a.db") as a, SQLiteStore.open(tmp_path / "a.db") as b:
        assert materializer(a) is materializer(a)
        assert materializer(a) is not materializer(b)
        assert materializer(a).store is a


def test_stores_dropped_after_use_are_freed_with_their_materializers(tmp_path: Path) -> None:
    refs: list[weakref.ref[object]] = []
    for i in range(20):
        path = tmp_path / f"s{i}.db"
        store = SQLiteStore.open(path)
        keep_caught_up(store)  # the after-append hook uses the materializer
        store.append("s", [MessageAppended(role="user", content=f"hello {i}")])
        assert [s.session_id for s in list_sessions(store)] == ["s"]
        refs += [weakref.ref(store), weakref.ref(materializer(store))]
        store.close()
        reader = SQLiteStore.open(path, readonly=True)  # a read folds in the reader's memory
        assert [s.session_id for s in list_sessions(reader)] == ["s"]
        refs += [weakref.ref(reader), weakref.ref(materializer(reader))]
        reader.close()
        del store, reader
    gc.collect()
    alive = [r() for r in refs if r() is not None]
    assert alive == []


def test_a_store_dropped_without_close_is_freed(tmp_path: Path) -> None:
    store = SQLiteStore.open(tmp_path / "t.db")
    store.append("s", [MessageAppended(role="user", content="hi")])
    materializer(store).catch_up()
    refs = [weakref.ref(store), weakref.ref(materializer(store))]
    del store  # its connection is closed when it is collected
    gc.collect()
    assert [r() for r in refs] == [None, None]
