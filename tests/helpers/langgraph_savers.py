"""Savers of turnlog's LangGraph checkpointer opened on one store, SQLite or PostgreSQL, as separate
processes would open them. Import after ``pytest.importorskip`` of langgraph."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.postgres import pg_url
from turnlog.integrations.langgraph import TurnlogSaver

Opener = Callable[[], TurnlogSaver]


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Savers on one store: each call opens another (as another process would)."""
    if request.param == "postgres":
        where = f"{pg_url()}?schema={request.getfixturevalue('pg_schema')}"
    else:
        where = str(tmp_path / "t.db")
    opened: list[TurnlogSaver] = []

    def open_saver() -> TurnlogSaver:
        opened.append(TurnlogSaver(where))
        return opened[-1]

    yield open_saver
    for saver in opened:
        saver.close()


def echo_graph() -> Any:
    """A one-node MessagesState graph (not compiled) whose node answers how many messages it saw."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [("ai", f"noted {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder
