"""Bench of the LangChain adapter against LangChain's own SQL backend, in the same run.

    PYTHONPATH=.:scripts .venv/bin/python -c \
        "from benchlib.integration_langchain import main; main()"   # n=2000; main(20000) for 20,000

Writes: one message per ``add_messages`` call (the per-turn pattern), both at synchronous=FULL
(SQLChatMessageHistory: SQLite's default journal, synchronous=FULL; turnlog: WAL, synchronous=FULL).
Full read: ``.messages``. Bounded read: turnlog's budgeted context (8,000 tokens) against LangChain's
full read plus its own ``trim_messages`` to the same budget.
"""

from __future__ import annotations

import json
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)

from projections.context import ContextPolicy, build_context
from turnlog.integrations.langchain import TurnlogChatMessageHistory

BUDGET = 8_000
TEXT = "The quick brown fox jumps over the lazy dog while the agent reasons about the next step. " * 2


def workload(n: int) -> list[BaseMessage]:
    """``n`` messages (~200 characters each): a system message, then user / tool call / tool result /
    answer turns."""
    out: list[BaseMessage] = [SystemMessage("You are a helpful agent.")]
    i = 0
    while len(out) < n:
        call = {"name": "lookup", "args": {"q": f"item {i}"}, "id": f"call_{i}", "type": "tool_call"}
        out += [
            HumanMessage(f"question {i}: {TEXT}"),
            AIMessage("", tool_calls=[call]),
            ToolMessage(f"result {i}: {TEXT}", tool_call_id=f"call_{i}", name="lookup"),
            AIMessage(f"answer {i}: {TEXT}"),
        ]
        i += 1
    return out[:n]


def _count(messages: list[BaseMessage]) -> int:
    # A cheap stand-in counter (4 characters a token) so the trim cost is LangChain's, not tiktoken's.
    return sum(len(json.dumps(m.content)) // 4 + 4 for m in messages)


def _timed(fn: Callable[[], Any], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _turnlog_bounded(history: TurnlogChatMessageHistory) -> Callable[[], object]:
    store = history._store  # the adapter's own store: the one a user's budgeted context reads
    return lambda: build_context(store, history.session_id, ContextPolicy(budget=BUDGET))


def _langchain_bounded(history: Any) -> Callable[[], object]:
    return lambda: trim_messages(
        history.messages,
        max_tokens=BUDGET,
        token_counter=_count,
        strategy="last",
        include_system=True,
        start_on="human",
    )


def run(n: int = 2_000, directory: Path | None = None) -> dict[str, dict[str, float]]:
    """Measure both backends on ``n`` messages; returns {backend: {writes_per_s, full_read_ms,
    bounded_read_ms}}."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langchain_community.chat_message_histories import SQLChatMessageHistory
    directory = directory or Path(tempfile.mkdtemp(prefix="bench-lc-"))
    messages = workload(n)
    sql = SQLChatMessageHistory("bench", connection=f"sqlite:///{directory / 'lc.db'}")
    turnlog = TurnlogChatMessageHistory("bench", db=directory / "turnlog.db")
    results: dict[str, dict[str, float]] = {}
    for name, history in (("SQLChatMessageHistory", sql), ("TurnlogChatMessageHistory", turnlog)):
        start = time.perf_counter()
        for message in messages:
            history.add_messages([message])
        writes = n / (time.perf_counter() - start)
        assert len(history.messages) == n
        full = _timed(lambda h=history: h.messages)  # type: ignore[misc]
        bounded = _turnlog_bounded(turnlog) if history is turnlog else _langchain_bounded(sql)
        results[name] = {
            "writes_per_s": round(writes, 1),
            "full_read_ms": round(full * 1000, 2),
            "bounded_read_ms": round(_timed(bounded) * 1000, 2),
        }
    turnlog.close()
    return results


def main(n: int = 2_000) -> None:
    for name, figures in run(n).items():
        print(f"{name:>26} n={n}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))
