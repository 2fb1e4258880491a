"""A pytest plugin that runs the OpenAI Agents SDK's own session and runner tests on TurnlogSession:
it replaces ``agents.SQLiteSession`` with a TurnlogSession that takes SQLiteSession's constructor
(``":memory:"`` -> a private store in a temp dir; a path -> a turnlog store beside it).

The SDK's tests are not copied here: ``openai_agents_suite.py`` (beside this file) downloads the
SDK's sdist (it ships them) and runs them from there with this plugin (``tests/test_sdk_suites.py``
does so in the test suite)::

    python scripts/sdk_suites/openai_agents_suite.py

Tests that exercise SQLiteSession's own internals (its thread-local connections, file locks,
rollbacks, corrupt-row skipping, the literal message "SQLiteSession is closed", and the compaction
decorator patching SQLite's ``_insert_items``) fail by construction; deselect them with
``-k`` on the names listed in :data:`SQLITE_INTERNALS`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import agents
import agents.memory
import agents.memory.sqlite_session as sqlite_session
import pytest
from openai_agents_suite import DESELECTED_REPORT, SQLITE_INTERNALS

from turnlog.integrations.openai_agents import TurnlogSession

__all__ = ["SQLITE_INTERNALS", "SQLiteShapedTurnlogSession"]


class SQLiteShapedTurnlogSession(TurnlogSession):
    """TurnlogSession with SQLiteSession's constructor, so the SDK's tests can build it."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        del sessions_table  # turnlog keeps sessions in its own log
        memory = str(db_path) == ":memory:"
        db = (
            Path(tempfile.mkdtemp()) / "session.db" if memory else Path(f"{db_path}.{messages_table}.turnlog")
        )
        super().__init__(session_id, db=db, session_settings=session_settings)
        self.db_path = db_path


agents.SQLiteSession = SQLiteShapedTurnlogSession  # type: ignore[misc,assignment]
agents.memory.SQLiteSession = SQLiteShapedTurnlogSession  # type: ignore[misc,assignment]
sqlite_session.SQLiteSession = SQLiteShapedTurnlogSession  # type: ignore[misc,assignment]


@pytest.hookimpl
def pytest_deselected(items: list[pytest.Item]) -> None:
    """Write the deselected node ids where the runner asked (it checks they are SQLite internals)."""
    report = os.environ.get(DESELECTED_REPORT)
    if report:
        path = Path(report)
        seen = json.loads(path.read_text()) if path.is_file() else []
        path.write_text(json.dumps(seen + [item.nodeid for item in items]))
