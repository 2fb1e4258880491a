"""The context index keeps no copy of the log's texts (issue 20): a build reads them from the events
(and their blobs), so the index's pages stay a small share of the file whatever the texts' size."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from turnlog import ContextPolicy, build_context
from turnlog.projections.registry import materializer
from turnlog.store import MessageAppended, SQLiteStore, ToolCall, ToolReturned


def _pages(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return dict(conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"))
    finally:
        conn.close()


def test_the_index_holds_no_copy_of_the_texts(tmp_path: Path) -> None:
    rng = random.Random(20)
    words = ["the", "store", "keeps", "every", "event", "of", "a", "session", "and", "the"]
    words += ["builder", "reads", "the", "newest", "rows"]
    path = tmp_path / "s.db"
    with SQLiteStore.open(path) as store:
        events: list[MessageAppended | ToolReturned] = [MessageAppended(role="user", content="start")]
        for i in range(300):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 400)))
            call = ToolCall(id=f"c{i}", name="t")
            events.append(MessageAppended(role="assistant", content=text, tool_calls=(call,)))
            events.append(ToolReturned(tool_call_id=f"c{i}", content=text * rng.randint(1, 4)))
        store.append("s", events)
        materializer(store).catch_up()
        built = build_context(store, "s", ContextPolicy(budget=20000, max_tool_tokens=20000))
        assert [m["content"] for m in built.rendered[-2:]] == [e.content for e in events[-2:]]
    pages = _pages(path)
    texts = pages["events"] + pages["blobs"]
    # Each row keeps ids, counts and totals only: about 100 bytes, against texts of 100 to 10,000.
    assert pages["ctx_messages"] < texts / 10, (pages["ctx_messages"], texts)
