"""The projections a TurnlogSaver keeps on a store it opens itself: their tables are made when it
opens, as PostgresSaver's ``setup()`` makes its own, so no turn of the graph pays for it; they are
caught up every so many events, on a server in a thread of its own (a turn does not wait for
derived rows), and end up as a rebuild makes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.postgres import pg_schema, pg_url, sql

pytest.importorskip("langgraph.checkpoint.base", reason="langgraph is not installed")

from turnlog.integrations.langgraph import TurnlogSaver
from turnlog.projections.registry import materializer

__all__ = ["pg_schema"]  # the fixture, imported for this module's tests


def test_the_tables_are_made_when_the_saver_opens_a_sqlite_store(tmp_path: Path) -> None:
    with TurnlogSaver(str(tmp_path / "t.db")) as saver:
        conn = saver.store.reading()
        with conn as c:
            names = {row[0] for row in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"ctx_messages", "lg_checkpoints", "projection_checkpoints"} <= names
        assert materializer(saver.store).differences() == []


def test_the_tables_are_made_when_the_saver_opens_a_postgresql_store(pg_schema: str) -> None:
    with TurnlogSaver(f"{pg_url()}?schema={pg_schema}"):
        rows = sql("SELECT tablename FROM pg_tables WHERE schemaname = %s", pg_schema, (pg_schema,))
    assert {"ctx_messages", "lg_checkpoints", "projection_checkpoints"} <= {row[0] for row in rows}


def test_on_a_server_the_saver_catches_its_projections_up_in_a_thread(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from turnlog.projections.materialize import Materializer

    ran_in: list[str] = []
    catch_up = Materializer.catch_up

    def recording(self: Materializer, **kwargs: object) -> int:
        if kwargs.get("appended"):
            ran_in.append(threading.current_thread().name)
        return catch_up(self, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Materializer, "catch_up", recording)

    from tests.helpers.langgraph_savers import echo_graph

    builder = echo_graph()
    with TurnlogSaver(f"{pg_url()}?schema={pg_schema}") as saver:
        graph = builder.compile(checkpointer=saver)
        config: dict[str, object] = {"configurable": {"thread_id": "t"}}
        for i in range(40):  # past the saver's backlog of events
            graph.invoke({"messages": [("user", f"turn {i}")]}, config)  # type: ignore[arg-type]
        for thread in threading.enumerate():
            if thread.name == "turnlog-saver-catch-up":
                thread.join()
        assert ran_in and set(ran_in) == {"turnlog-saver-catch-up"}
        assert _advanced(pg_schema)  # by the saver's own catch-up: no reader ran
        assert materializer(saver.store).differences() == []


def _advanced(schema: str) -> bool:
    rows = sql("SELECT min(position) FROM projection_checkpoints", schema)
    return bool(rows and rows[0][0])
