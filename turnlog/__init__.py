"""turnlog: an event-sourced conversation store for LLM agents.

``import turnlog`` gives the public API: open a store, append events, read them back, import
transcripts. Everything else (context, artifacts, todos, the ledger) is a projection of the log.
"""

from __future__ import annotations

import os

from projections.registry import keep_caught_up
from store import *  # noqa: F403 - the facade re-exports the store's public names
from store import __all__ as _store_all
from store.sqlite import SQLiteStore, Synchronous, TokenCounting
from turnlog.compaction import CompactionOptions, CompactionResult, compact
from turnlog.exporters import EXPORT_FORMATS, export_anthropic, export_jsonl, export_openai, export_sessions
from turnlog.importers import (
    IMPORT_FORMATS,
    Conversation,
    ImportResult,
    import_conversations,
    import_file,
    parse_jsonl,
    parse_openai,
    parse_pydantic_ai,
)
from turnlog.recorder import SessionRecorder, session


def open_store(
    path: str | os.PathLike[str] = "turnlog.db",
    *,
    tokenizer: str | None = None,
    create: bool = True,
    synchronous: Synchronous = "FULL",
    token_counting: TokenCounting = "deferred",
    readonly: bool = False,
) -> SQLiteStore:
    """Open (or create) the store at ``path``; see :meth:`store.SQLiteStore.open`.

    Every append to the store returned then advances its token counts and materialized projections
    in its own transaction (one commit; when they are behind, right after it), so reads find them
    caught up. ``readonly=True`` opens an existing store
    for reading only: it never writes to the file and never waits for a writer; what writers have
    not materialized yet is folded in memory for its reads."""
    store = SQLiteStore.open(
        path,
        tokenizer=tokenizer,
        create=create,
        synchronous=synchronous,
        token_counting=token_counting,
        readonly=readonly,
    )
    keep_caught_up(store)
    return store


__all__ = [
    *_store_all,
    "EXPORT_FORMATS",
    "IMPORT_FORMATS",
    "CompactionOptions",
    "CompactionResult",
    "Conversation",
    "ImportResult",
    "SessionRecorder",
    "compact",
    "export_anthropic",
    "export_jsonl",
    "export_openai",
    "export_sessions",
    "import_conversations",
    "import_file",
    "open_store",
    "parse_jsonl",
    "parse_openai",
    "parse_pydantic_ai",
    "session",
]
