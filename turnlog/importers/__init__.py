"""Importing into the log: turnlog's own lossless JSON lines export, OpenAI chat-completions
transcripts and pydantic-ai message histories, one session per conversation.

Imports are atomic per session and idempotent: the jsonl format keeps the original event ids, the
others derive them from the session id, the event's index and its content, so importing the same
file twice writes nothing the second time, and importing a transcript that has grown since appends
only the new events."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from turnlog.importers.base import (
    Conversation,
    ImportResult,
    check_unicode,
    derive_event_id,
    import_conversations,
    with_derived_ids,
)
from turnlog.importers.from_aider import looks_like_aider, parse_aider
from turnlog.importers.from_claude_code import looks_like_claude_code, read_claude_code
from turnlog.importers.from_codex import looks_like_codex, read_codex
from turnlog.importers.from_jsonl import parse_jsonl
from turnlog.importers.from_openai import parse_openai
from turnlog.importers.from_openhands import (
    looks_like_openhands,
    looks_like_openhands_store,
    parse_openhands,
    read_openhands,
)
from turnlog.importers.from_pydantic_ai import parse_pydantic_ai
from turnlog.importers.from_swe_agent import looks_like_swe_agent, parse_swe_agent
from turnlog.importers.from_tau_bench import looks_like_tau_bench, parse_tau_bench
from turnlog.importers.registry import ImportFormat, first_json, formats, read_conversations, register
from turnlog.store import EventStore, InvalidEventError

Parser = Callable[..., list[Conversation]]


def _is_jsonl(path: Path, head: str) -> bool:
    first = first_json(head)
    return isinstance(first, dict) and all(
        key in first for key in ("session_id", "version", "event_id", "event")
    )


def _is_openai(path: Path, head: str) -> bool:
    text = head.lstrip("\ufeff \t\r\n")
    # An OpenHands event stream also opens with '[{"id": ...': its "source" and "action" tell it apart.
    return bool(_OPENAI_START.match(text)) and '"kind"' not in text[:200] and not looks_like_openhands(text)


def _is_pydantic_ai(path: Path, head: str) -> bool:
    text = head.lstrip("\ufeff \t\r\n")
    return text.startswith("[") and '"parts"' in text and bool(_PYDANTIC_KIND.search(text))


def _is_openhands(path: Path, head: str) -> bool:
    return looks_like_openhands_store(path) if path.is_dir() else looks_like_openhands(head)


_OPENAI_START = re.compile(r'^(\[\s*)?\{\s*"(role|messages|id|title|model)"\s*:')
_PYDANTIC_KIND = re.compile(r'"kind"\s*:\s*"(request|response)"')

register(ImportFormat("jsonl", "turnlog's own lossless export", parse=parse_jsonl, detect=_is_jsonl))
register(ImportFormat("openai", "OpenAI chat-completions transcripts", parse=parse_openai, detect=_is_openai))
register(
    ImportFormat(
        "pydantic-ai", "pydantic-ai message histories", parse=parse_pydantic_ai, detect=_is_pydantic_ai
    )
)

register(
    ImportFormat(
        "swe-agent",
        "SWE-agent trajectories (.traj), with the run's billed totals",
        parse=parse_swe_agent,
        detect=lambda path, head: looks_like_swe_agent(head),
    )
)
register(
    ImportFormat(
        "tau-bench",
        "tau-bench results files, one session per task and trial",
        parse=parse_tau_bench,
        detect=lambda path, head: looks_like_tau_bench(head),
    )
)
register(
    ImportFormat(
        "claude-code",
        "Claude Code transcripts: a .jsonl, a project folder or ~/.claude/projects",
        read=read_claude_code,
        detect=lambda path, head: looks_like_claude_code(path),
        folders=True,
    )
)
register(
    ImportFormat(
        "codex",
        "OpenAI Codex CLI rollouts: a rollout-*.jsonl or ~/.codex/sessions",
        read=read_codex,
        detect=lambda path, head: looks_like_codex(path),
        folders=True,
    )
)

register(
    ImportFormat(
        "openhands",
        "OpenHands event streams: a saved trajectory, or a file store's sessions/<id>/events folder",
        parse=parse_openhands,
        read=read_openhands,
        detect=_is_openhands,
        folders=True,
    )
)
register(
    ImportFormat(
        "aider",
        "aider chat histories (.aider.chat.history.md): one session per run, edits as artifacts",
        parse=parse_aider,
        detect=lambda path, head: looks_like_aider(head),
    )
)

IMPORT_FORMATS: dict[str, Parser] = {
    "jsonl": parse_jsonl,
    "openai": parse_openai,
    "pydantic-ai": parse_pydantic_ai,
}
"""turnlog's own and the chat-transcript formats: name -> ``parse(text, session=...)`` (fuzzed by
tests/test_fuzz_import.py). Every format, files and folders: :func:`turnlog.importers.formats`."""


def import_path(
    store: EventStore,
    source: Path | bytes,
    fmt: str | None = None,
    *,
    session: str | None = None,
    model: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[str, ImportResult]:
    """Import a file or folder (or the bytes of standard input, with ``fmt``) in format ``fmt``,
    detected when None; ``model`` is written where the source names none. Everything is read and
    checked before anything is written. Returns the format used and what was imported."""
    used, conversations = prepare_import(source, fmt, session=session, model=model)
    return used, store_conversations(store, conversations, progress)


def prepare_import(
    source: Path | bytes, fmt: str | None = None, *, session: str | None = None, model: str | None = None
) -> tuple[str, list[Conversation]]:
    """Read and check everything :func:`import_path` would import, without a store: the format used
    and the conversations (so a command can refuse bad input before it opens, or creates, a store)."""
    if session is not None:
        check_unicode(session, "--session")
    if model is not None:
        check_unicode(model, "--model")
        if not model.strip():
            raise InvalidEventError("--model: give a model name")
    return read_conversations(source, fmt, session=session, model=model)


def import_file(
    store: EventStore,
    text: str | bytes,
    fmt: str,
    *,
    session: str | None = None,
    model: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ImportResult:
    """Parse ``text`` (str, or bytes of UTF-8) in format ``fmt`` and import its conversations (see
    import_conversations). The whole file is parsed before anything is written.
    ``progress(done, total)`` counts events, called after each batch."""
    if fmt not in formats():
        raise InvalidEventError(f"unknown import format {fmt!r} (known: {', '.join(sorted(formats()))})")
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return import_path(store, data, fmt, session=session, model=model, progress=progress)[1]


def store_conversations(
    store: EventStore,
    conversations: Sequence[Conversation],
    progress: Callable[[int, int], None] | None = None,
) -> ImportResult:
    """Import conversations read by :func:`prepare_import`; ``progress(done, total)`` counts events."""
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
    "ImportFormat",
    "ImportResult",
    "Parser",
    "derive_event_id",
    "formats",
    "import_conversations",
    "import_file",
    "import_path",
    "parse_jsonl",
    "parse_openai",
    "parse_pydantic_ai",
    "prepare_import",
    "register",
    "store_conversations",
    "with_derived_ids",
]
