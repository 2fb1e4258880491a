"""A pytest plugin that runs the OpenAI Agents SDK's own session and runner tests on TurnlogSession:
it replaces ``agents.SQLiteSession`` with a TurnlogSession that takes SQLiteSession's constructor
(``":memory:"`` -> a private store in a temp dir; a path -> a turnlog store beside it).

The SDK's tests are not copied here: download its sdist (it ships them) and run them from there::

    pip download --no-deps --no-binary :all: openai-agents==0.24.0 && tar xzf openai_agents-0.24.0.tar.gz
    cd openai_agents-0.24.0 && PYTHONPATH=<repo>/scripts/sdk_suites pytest -q -p openai_agents_swap \
      tests/memory/test_session.py tests/memory/test_session_limit.py \
      tests/memory/test_session_context_wrapper.py tests/test_agent_runner.py \
      tests/test_agent_runner_streamed.py tests/test_tool_failure_boundaries.py \
      tests/test_tool_batch_failure_history.py tests/test_native_tool_failure_history.py \
      tests/test_max_turns.py tests/test_run_impl_resume_paths.py tests/deferred_session_writes \
      tests/test_hitl_session_scenario.py tests/test_soft_cancel.py

Tests that exercise SQLiteSession's own internals (its thread-local connections, file locks,
rollbacks, corrupt-row skipping, the literal message "SQLiteSession is closed", and the compaction
decorator patching SQLite's ``_insert_items``) fail by construction; deselect them with
``-k`` on the names listed in :data:`SQLITE_INTERNALS`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import agents
import agents.memory
import agents.memory.sqlite_session as sqlite_session

from turnlog.integrations.openai_agents import TurnlogSession

SQLITE_INTERNALS = (
    "close_closes_worker_thread_connections",
    "reaps_connections_from_exited_worker_threads",
    "closes_retired_connections_before_the_next_allocation",
    "keeps_connections_of_live_worker_threads",
    "closed_rejects_empty_add_items",
    "pop_item_skips_corrupt_most_recent",
    "pop_item_returns_none_after_dropping_only_corrupt_rows",
    "get_items_limit_skips_corrupt_newest_rows",
    "get_items_session_settings_limit_skips_corrupt_rows",
    "file_lock_is_shared_across_instances",
    "failed_add_items_releases_write_lock",
    "failed_clear_session_rolls_back",
    "failed_pop_item_releases_write_lock",
    "rollback_failure_evicts_connection",
    "close_retries_quarantined_connection",
    "post_commit_cancellation_propagates_after_known_outcome",
    "handoff_resume_after_cancelled_compaction_commits",
)
"""Names (substrings) of the SDK tests that test SQLiteSession's implementation, not the protocol."""


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
