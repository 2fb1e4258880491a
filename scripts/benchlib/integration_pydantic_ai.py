"""pydantic-ai ConversationStore: TurnlogConversationStore against InMemoryConversationStore.

Not wired into bench.py. Call it as:
    PYTHONPATH=scripts .venv/bin/python -c "from benchlib.integration_pydantic_ai import main; main()"
or ``bench(items=2000, db_path=...)`` for the figures as a dict (seconds).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationStore, InMemoryConversationStore
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from turnlog.integrations.pydantic_ai import TurnlogConversationStore


async def _measure(store: ConversationStore, items: int) -> dict[str, float]:
    conversation = Conversation(conversation_id="bench")
    start = time.perf_counter()
    for n in range(0, items, 2):  # one save per turn: a request and its response
        new: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart(f"question {n} " + "word " * 20)]),
            ModelResponse(parts=[TextPart(f"answer {n} " + "word " * 40)], model_name="bench"),
        ]
        conversation.messages.extend(new)
        await store.save(conversation)
    writes = time.perf_counter() - start
    start = time.perf_counter()
    full = await store.load("bench")
    full_read = time.perf_counter() - start
    start = time.perf_counter()
    tail = await store.load("bench", limit=50)
    bounded_read = time.perf_counter() - start
    assert full is not None and len(full.messages) == items and tail is not None and len(tail.messages) == 50
    return {"writes_per_s": items / writes, "full_read_s": full_read, "bounded_read_s": bounded_read}


def bench(items: int = 2000, db_path: Path | None = None) -> dict[str, Any]:
    """Write ``items`` messages (one save per request/response pair), then read all and the last 50."""
    path = db_path or Path(tempfile.mkdtemp()) / "bench.db"
    turnlog_store = TurnlogConversationStore(db=path)
    try:
        ours = asyncio.run(_measure(turnlog_store, items))
    finally:
        turnlog_store.close()
    return {
        "items": items,
        "turnlog": ours,
        "in_memory": asyncio.run(_measure(InMemoryConversationStore(), items)),
    }


def main() -> None:
    for name, value in bench().items():
        print(name, value)


if __name__ == "__main__":
    main()
