"""TurnlogChatMessageHistory against LangChain's own SQLChatMessageHistory (SQLite through
SQLAlchemy), in the same run: one message per ``add_messages`` call (the per-turn pattern, written
interleaved), a full ``.messages``, and the bounded read: turnlog's budgeted context (8,000 tokens)
against LangChain's full read plus its own ``trim_messages`` to the same budget.

Durability: SQLChatMessageHistory's SQLite file keeps SQLite's rollback journal and its default
``synchronous`` (FULL here); the bench sets the same level on both sides (a PRAGMA on each pooled
connection; turnlog's ``synchronous`` knob, WAL). Run from the repository root:
``PYTHONPATH=.:scripts .venv/bin/python -m benchlib.integration_langchain [N] [FULL|NORMAL]``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import warnings
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

from benchlib.integration_common import best_of, interleaved_writes, row

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


def _trimmed(history: Any) -> Any:
    return trim_messages(
        history.messages,
        max_tokens=BUDGET,
        token_counter=_count,
        strategy="last",
        include_system=True,
        start_on="human",
    )


def bench_langchain(
    n: int = 2000, workdir: Path | None = None, synchronous: str = "FULL"
) -> list[dict[str, Any]]:
    """Measure both backends on ``n`` messages, each in a fresh file under ``workdir``."""
    from sqlalchemy import create_engine, event

    import turnlog
    from turnlog.integrations.langchain import TurnlogChatMessageHistory
    from turnlog.projections.context import ContextPolicy, build_context

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langchain_community.chat_message_histories import SQLChatMessageHistory

    root = workdir or Path(tempfile.mkdtemp(prefix="bench-lc-"))
    root.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{root / f'langchain-{n}-{synchronous}.db'}")
    event.listen(engine, "connect", lambda conn, _: conn.execute(f"PRAGMA synchronous = {synchronous}"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peer = SQLChatMessageHistory("bench", connection=engine)
    store = turnlog.open_store(root / f"turnlog-lc-{n}-{synchronous}.db", synchronous=synchronous)  # type: ignore[arg-type]
    ours = TurnlogChatMessageHistory("bench", db=store)
    messages = workload(n)
    try:

        def writer(history: Any) -> Any:
            def write(lo: int, hi: int) -> None:
                for i in range(lo, hi):
                    history.add_messages([messages[i]])

            return write

        peer_w, ours_w = interleaved_writes([writer(peer), writer(ours)], n)
        assert peer.messages == ours.messages == messages  # the same answer, or no figure
        policy = ContextPolicy(budget=BUDGET)
        peer_full, ours_full, peer_trim, ours_bounded = best_of(
            [
                lambda: peer.messages,
                lambda: ours.messages,
                lambda: _trimmed(peer),
                lambda: build_context(store, "bench", policy),
            ]
        )
    finally:
        ours.close()
        store.close()
        engine.dispose()
    bounded = f"budgeted context, {BUDGET:,} tokens"
    return [
        row(
            "SQLChatMessageHistory",
            "peer",
            n,
            f"rollback journal, synchronous={synchronous}",
            writes_per_s=peer_w,
            full_read_ms=peer_full,
            bounded_read_ms=None,
            bounded=f".messages + trim_messages({BUDGET:,})",
            trimmed_read_ms=peer_trim,
        ),
        row(
            "TurnlogChatMessageHistory",
            "turnlog",
            n,
            f"WAL, synchronous={synchronous}",
            writes_per_s=ours_w,
            full_read_ms=ours_full,
            bounded_read_ms=ours_bounded,
            bounded=bounded,
        ),
    ]


if __name__ == "__main__":
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for line in bench_langchain(size, synchronous=sys.argv[2] if len(sys.argv) > 2 else "FULL"):
        print(line)
