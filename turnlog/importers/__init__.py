"""Importing into the log: turnlog's own lossless JSON lines export, OpenAI chat-completions
transcripts and pydantic-ai message histories, one session per conversation.

Imports are atomic per session and idempotent: the jsonl format keeps the original event ids, the
others derive them from the session id, the event's index and its content, so importing the same
file twice writes nothing the second time, and importing a transcript that has grown since appends
only the new events."""

from __future__ import annotations

from collections.abc import Callable

from turnlog.importers.base import (
    Conversation,
    ImportResult,
    check_unicode,
    decode_text,
    derive_event_id,
    import_conversations,
    with_derived_ids,
)
from turnlog.importers.from_jsonl import parse_jsonl
from turnlog.importers.from_openai import parse_openai
from turnlog.importers.from_pydantic_ai import parse_pydantic_ai
from turnlog.store import EventStore, InvalidEventError

Parser = Callable[..., list[Conversation]]

IMPORT_FORMATS: dict[str, Parser] = {
    "jsonl": parse_jsonl,
    "openai": parse_openai,
    "pydantic-ai": parse_pydantic_ai,
}
"""Format name -> parser of a file's text into conversations (``parse(text, session=...)``)."""


def import_file(
    store: EventStore,
    text: str | bytes,
    fmt: str,
    *,
    session: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ImportResult:
    """Parse ``text`` (str, or bytes of UTF-8) in format ``fmt`` and import its conversations (see
    import_conversations). The whole file is parsed before anything is written.
    ``progress(done, total)`` counts events, called after each batch."""
    parser = IMPORT_FORMATS.get(fmt)
    if parser is None:
        raise InvalidEventError(f"unknown import format {fmt!r} (known: {', '.join(IMPORT_FORMATS)})")
    if session is not None:
        check_unicode(session, "--session")
    conversations = parser(decode_text(text), session=session)
    total = sum(len(c.events) for c in conversations)
    done = 0

    def step(count: int) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress(done, total)

    return import_conversations(store, conversations, progress=step)


__all__ = [
    "IMPORT_FORMATS",
    "Conversation",
    "ImportResult",
    "Parser",
    "derive_event_id",
    "import_conversations",
    "import_file",
    "parse_jsonl",
    "parse_openai",
    "parse_pydantic_ai",
    "with_derived_ids",
]
