"""Opening a TurnlogSaver on a store it opens itself makes the projections' tables then, as
PostgresSaver's ``setup()`` makes its own, so no turn of the graph pays for it (the saver catches
its projections up only every so many events)."""

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
