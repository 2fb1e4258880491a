"""turnlog: an event-sourced conversation store for LLM agents.

``import turnlog`` gives the public API: open a store, append events, read them back, import
transcripts, record an agent loop (``session``, ``SessionRecorder``), build the model's context
(``build_context``, ``ContextPolicy``, ``ContextBudgetError``), serve the agent-facing tool
(``turnlog.tool``, ``call_tool``, ``invoke_tool``, ``tool_definition``) and run the session policy's
work after commits (``set_policy``, ``get_policy``, ``after_commit``, ``Handlers``). Everything else (context,
artifacts, todos, the ledger) is a projection of the log.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from turnlog.store import __all__ as _store_all

if TYPE_CHECKING:
    from turnlog import tool
    from turnlog.compaction import CompactionOptions, CompactionResult, compact
    from turnlog.config import load_config
    from turnlog.exporters import (
        EXPORT_FORMATS,
        export_anthropic,
        export_jsonl,
        export_openai,
        export_sessions,
    )
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
    from turnlog.loop import Handlers, LoopReport, after_commit, get_policy, set_policy
    from turnlog.projections.context import BuiltContext, ContextBudgetError, ContextPolicy, build_context
    from turnlog.recorder import SessionRecorder, session
    from turnlog.store import *  # noqa: F403 - the facade re-exports the store's public names
    from turnlog.store.base import Store
    from turnlog.store.sqlite import Synchronous, TokenCounting
    from turnlog.tool import ToolResult, tool_definition
    from turnlog.tool import call as call_tool
    from turnlog.tool import invoke as invoke_tool

# Every public name but open_store, open_backend and is_postgres_url is imported on first use, so
# `import turnlog` (and `turnlog --help`) loads none of pydantic, tiktoken or the SQLite backend
# until something needs them: public name -> (module, attribute; None for the module itself).
_LAZY: dict[str, tuple[str, str | None]] = {
    **{name: ("turnlog.store", name) for name in _store_all},
    "CompactionOptions": ("turnlog.compaction", "CompactionOptions"),
    "CompactionResult": ("turnlog.compaction", "CompactionResult"),
    "compact": ("turnlog.compaction", "compact"),
    "EXPORT_FORMATS": ("turnlog.exporters", "EXPORT_FORMATS"),
    "export_anthropic": ("turnlog.exporters", "export_anthropic"),
    "export_jsonl": ("turnlog.exporters", "export_jsonl"),
    "export_openai": ("turnlog.exporters", "export_openai"),
    "export_sessions": ("turnlog.exporters", "export_sessions"),
    "IMPORT_FORMATS": ("turnlog.importers", "IMPORT_FORMATS"),
    "Conversation": ("turnlog.importers", "Conversation"),
    "ImportResult": ("turnlog.importers", "ImportResult"),
    "import_conversations": ("turnlog.importers", "import_conversations"),
    "import_file": ("turnlog.importers", "import_file"),
    "parse_jsonl": ("turnlog.importers", "parse_jsonl"),
    "parse_openai": ("turnlog.importers", "parse_openai"),
    "parse_pydantic_ai": ("turnlog.importers", "parse_pydantic_ai"),
    "SessionRecorder": ("turnlog.recorder", "SessionRecorder"),
    "session": ("turnlog.recorder", "session"),
    "BuiltContext": ("turnlog.projections.context", "BuiltContext"),
    "ContextBudgetError": ("turnlog.projections.context", "ContextBudgetError"),
    "ContextPolicy": ("turnlog.projections.context", "ContextPolicy"),
    "build_context": ("turnlog.projections.context", "build_context"),
    "tool": ("turnlog.tool", None),
    "ToolResult": ("turnlog.tool", "ToolResult"),
    "call_tool": ("turnlog.tool", "call"),
    "invoke_tool": ("turnlog.tool", "invoke"),
    "tool_definition": ("turnlog.tool", "tool_definition"),
    "Handlers": ("turnlog.loop", "Handlers"),
    "LoopReport": ("turnlog.loop", "LoopReport"),
    "after_commit": ("turnlog.loop", "after_commit"),
    "get_policy": ("turnlog.loop", "get_policy"),
    "set_policy": ("turnlog.loop", "set_policy"),
    "load_config": ("turnlog.config", "load_config"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'turnlog' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = importlib.import_module(module)
    found = value if attribute is None else getattr(value, attribute)
    globals()[name] = found
    return found


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def open_store(
    path: str | os.PathLike[str] = "turnlog.db",
    *,
    tokenizer: str | None = None,
    create: bool = True,
    synchronous: Synchronous = "FULL",
    token_counting: TokenCounting | None = None,
    readonly: bool = False,
) -> Store:
    """Open (or create) the store at ``path``: a SQLite file, or a PostgreSQL URL
    (``postgresql://USER@HOST:PORT/DBNAME``, the store in schema ``turnlog``, or the one a
    ``?schema=NAME`` parameter names; needs the ``postgres`` extra). See
    :meth:`turnlog.store.SQLiteStore.open` and ``turnlog.store.postgres.PostgresStore.open``.

    The store returned keeps its token counts and materialized projections advanced with its
    appends: an append is the log's durable commit alone, and the next read (each read, in any
    process, catches up first) counts and applies what was appended, from memory, in one
    non-durable transaction (closing the store does it too, so a writer leaves its store caught up).
    ``token_counting``: when an event's tokens are counted, ``"deferred"`` (after the commit, by that
    catch-up) or ``"inline"`` (before the append's transaction); by default deferred on SQLite, where
    filling in a count is a write in place, and inline on PostgreSQL, where it is a new row version
    that cost an agent's turn (append, then build) more on the server than counting saved the append.
    ``readonly=True`` opens an existing store for reading only: appends are refused; a SQLite file is
    never written to and never waited for (what writers have not materialized yet is folded in memory
    for its reads)."""
    store = open_backend(
        path,
        tokenizer=tokenizer,
        create=create,
        synchronous=synchronous,
        token_counting=token_counting,
        readonly=readonly,
    )
    if not readonly:  # a reader never advances anything: it need not import every projection
        from turnlog.projections.registry import keep_caught_up

        keep_caught_up(store)
    return store


def open_backend(
    path: str | os.PathLike[str],
    *,
    tokenizer: str | None = None,
    create: bool = True,
    synchronous: Synchronous = "FULL",
    token_counting: TokenCounting | None = None,
    readonly: bool = False,
) -> Store:
    """The store at ``path`` (a SQLite file or a PostgreSQL URL), opened as it is, without
    :func:`open_store`'s hook that advances the projections after each append (for a writer that
    advances them its own way)."""
    if is_postgres_url(path):
        store = _open_postgres(
            str(path),
            tokenizer=tokenizer,
            create=create and not readonly,
            token_counting="inline" if token_counting is None else token_counting,
        )
        store.refuse_appends = readonly  # type: ignore[attr-defined]
        return store
    from turnlog.store.sqlite import SQLiteStore

    return SQLiteStore.open(
        path,
        tokenizer=tokenizer,
        create=create,
        synchronous=synchronous,
        token_counting="deferred" if token_counting is None else token_counting,
        readonly=readonly,
    )


def is_postgres_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a PostgreSQL store rather than a SQLite file."""
    return isinstance(path, str) and path.startswith(("postgresql://", "postgres://"))


def _open_postgres(url: str, *, tokenizer: str | None, create: bool, token_counting: TokenCounting) -> Store:
    from turnlog.store.errors import StoreError

    try:
        from turnlog.store.postgres import PostgresStore
    except ImportError as exc:
        raise StoreError(
            "a PostgreSQL store needs the postgres extra, which is not installed: "
            "pip install 'turnlog[postgres]'"
        ) from exc
    base, _, query = url.partition("?")
    schema = "turnlog"
    kept = []
    for part in filter(None, query.split("&")):
        key, _, value = part.partition("=")
        if key == "schema":
            schema = value
        else:
            kept.append(part)
    target = base + ("?" + "&".join(kept) if kept else "")
    return PostgresStore.open(
        target, schema=schema, create=create, tokenizer=tokenizer, token_counting=token_counting
    )


__all__ = [
    *_store_all,
    "EXPORT_FORMATS",
    "IMPORT_FORMATS",
    "BuiltContext",
    "CompactionOptions",
    "CompactionResult",
    "ContextBudgetError",
    "ContextPolicy",
    "Conversation",
    "Handlers",
    "LoopReport",
    "ImportResult",
    "SessionRecorder",
    "ToolResult",
    "after_commit",
    "build_context",
    "call_tool",
    "compact",
    "export_anthropic",
    "export_jsonl",
    "export_openai",
    "export_sessions",
    "get_policy",
    "import_conversations",
    "import_file",
    "invoke_tool",
    "load_config",
    "open_backend",
    "open_store",
    "parse_jsonl",
    "parse_openai",
    "parse_pydantic_ai",
    "session",
    "set_policy",
    "tool",
    "tool_definition",
]
