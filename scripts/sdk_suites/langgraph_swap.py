"""A pytest plugin that runs LangGraph's own graph tests on TurnlogSaver: it replaces
``SqliteSaver.from_conn_string`` and ``AsyncSqliteSaver.from_conn_string`` (what LangGraph's test
fixtures ``sync_checkpointer``/``async_checkpointer`` call for their ``sqlite`` parameters) with a
TurnlogSaver on a fresh store in a temp dir (``":memory:"`` or a path alike).

LangGraph's tests are not copied here: download its sdist (it ships them) and run them from there,
in an environment with its test dependencies (syrupy, pytest-mock, pycryptodome, psycopg, redis,
langgraph-checkpoint-postgres; no server is needed with NO_DOCKER=true)::

    pip download --no-deps --no-binary :all: langgraph==1.2.24 && tar xzf langgraph-1.2.24.tar.gz
    cd langgraph-1.2.24 && NO_DOCKER=true PYTHONPATH=<repo>/scripts/sdk_suites pytest -q \
      -p langgraph_swap -k "sqlite" tests/test_pregel.py tests/test_pregel_async.py \
      tests/test_time_travel.py tests/test_time_travel_async.py tests/test_subgraph_persistence.py \
      tests/test_subgraph_persistence_async.py tests/test_interruption.py tests/test_messages_state.py
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from turnlog.integrations.langgraph import TurnlogSaver


@contextmanager
def _sync(cls: Any, conn_string: str) -> Iterator[TurnlogSaver]:
    with (
        tempfile.TemporaryDirectory(prefix="lg-swap-") as tmp,
        TurnlogSaver(db=Path(tmp) / "turnlog.db") as saver,
    ):
        yield saver


@asynccontextmanager
async def _async(cls: Any, conn_string: str) -> AsyncIterator[TurnlogSaver]:
    with (
        tempfile.TemporaryDirectory(prefix="lg-swap-") as tmp,
        TurnlogSaver(db=Path(tmp) / "turnlog.db") as saver,
    ):
        yield saver


SqliteSaver.from_conn_string = classmethod(_sync)  # type: ignore[assignment,method-assign]
AsyncSqliteSaver.from_conn_string = classmethod(_async)  # type: ignore[assignment,method-assign]
