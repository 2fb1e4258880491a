"""Turns of an agent session made of random texts from a small vocabulary of prose and code, and a
build traced statement by statement: for the tests of what a turn and a build cost."""

from __future__ import annotations

import random
from typing import Any

from turnlog import ContextPolicy, build_context
from turnlog.store import MessageAppended, SQLiteStore, ToolCall, ToolReturned

_WORD_TEXT = (
    "the store keeps every event of a session and the context builder reads the newest rows def "
    "build(self, policy): return self.rows[-1] if policy else None"
)
WORDS = _WORD_TEXT.split(" ")


def words_text(rng: random.Random, words: int) -> str:
    """``words`` words drawn from :data:`WORDS` with ``rng``."""
    return " ".join(rng.choice(WORDS) for _ in range(words))


def tool_turn(rng: random.Random, tag: str, *, path: str = "src/a.py", output_words: int = 120) -> list[Any]:
    """A user message, a ``read_file`` call of ``path``, its output of ``output_words`` words, and
    the assistant's answer."""
    call = f"call_{tag}"
    return [
        MessageAppended(role="user", content=words_text(rng, 40)),
        MessageAppended(
            role="assistant",
            content="",
            tool_calls=(ToolCall(id=call, name="read_file", arguments=f'{{"path": "{path}"}}'),),
        ),
        ToolReturned(tool_call_id=call, tool_name="read_file", content=words_text(rng, output_words)),
        MessageAppended(role="assistant", content=words_text(rng, 60)),
    ]


def traced_build(store: SQLiteStore, session_id: str, policy: ContextPolicy) -> tuple[list[str], Any]:
    """The SQL statements one build of ``session_id`` ran on the store's connection, and what it built."""
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    try:
        built = build_context(store, session_id, policy)
    finally:
        store.conn.set_trace_callback(None)
    return statements, built
