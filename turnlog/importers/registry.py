"""The import formats: what each one reads (a file's text, or a path: one file or a folder of
them), how it is recognized when ``--format`` is not given, and the one entry point that reads a
path or standard input, detects the format, applies ``--model`` and imports.

A format recognized from the first KiB of a file (or, for a folder, of the first files that look
like its logs) is imported as if given; a file that none recognizes, or that several do, is refused
with the list of formats to choose from."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnlog.importers.base import Conversation, decode_text
from turnlog.store import InvalidEventError, SessionStarted

HEAD_BYTES = 4096
"""How much of a file the detectors look at."""


@dataclass(frozen=True)
class ImportFormat:
    """One format: ``parse(text, session=..., [model=..., name=...])`` for a file's text, or
    ``read(path, session=..., model=...)`` for a file or folder; ``detect(path, head)`` says whether
    the file (or folder) at ``path``, beginning with ``head``, is in this format."""

    name: str
    describe: str
    parse: Callable[..., list[Conversation]] | None = None
    read: Callable[..., list[Conversation]] | None = None
    detect: Callable[[Path, str], bool] | None = None
    folders: bool = False
    """Whether a folder is a valid input (its files are found by the reader)."""


_FORMATS: dict[str, ImportFormat] = {}


def register(fmt: ImportFormat) -> None:
    """Add a format (by name; a second registration of the name replaces the first)."""
    _FORMATS[fmt.name] = fmt


def formats() -> dict[str, ImportFormat]:
    """Every known format, by name."""
    return dict(_FORMATS)


def detect_format(path: Path) -> str:
    """The one format that recognizes ``path``; InvalidEventError naming the file otherwise."""
    head = "" if path.is_dir() else _head(path)
    found = [
        fmt.name for fmt in _FORMATS.values() if fmt.detect is not None and _safe(fmt.detect, path, head)
    ]
    choices = ", ".join(sorted(_FORMATS))
    if not found:
        raise InvalidEventError(f"{path}: cannot tell its format; give --format (one of {choices})")
    if len(found) > 1:
        raise InvalidEventError(
            f"{path}: looks like {' and '.join(sorted(found))}; give --format (one of {choices})"
        )
    return found[0]


def read_conversations(
    source: Path | bytes,
    fmt: str | None,
    *,
    session: str | None = None,
    model: str | None = None,
    name: str | None = None,
) -> tuple[str, list[Conversation]]:
    """The conversations of ``source`` (a path, or the bytes of standard input, which need ``fmt``)
    read as ``fmt`` (detected when None); returns the format used and the conversations, with
    ``model`` filled in where the source names none."""
    if fmt is None:
        if not isinstance(source, Path):
            raise InvalidEventError(f"standard input: give --format (one of {', '.join(sorted(_FORMATS))})")
        fmt = detect_format(source)
    chosen = _FORMATS.get(fmt)
    if chosen is None:
        raise InvalidEventError(f"unknown import format {fmt!r} (known: {', '.join(sorted(_FORMATS))})")
    if isinstance(source, Path) and source.is_dir() and not chosen.folders:
        raise InvalidEventError(f"{source} is a folder; format {fmt} reads one file")
    if chosen.read is not None and isinstance(source, Path):
        conversations = _call(chosen.read, source, session=session, model=model)
    else:
        if chosen.parse is None:
            raise InvalidEventError(f"format {fmt} reads files and folders, not standard input")
        data = source.read_bytes() if isinstance(source, Path) else source
        where = name if name is not None else (str(source) if isinstance(source, Path) else None)
        conversations = _call(chosen.parse, decode_text(data), session=session, model=model, name=where)
    return fmt, with_model(conversations, model)


def with_model(conversations: Sequence[Conversation], model: str | None) -> list[Conversation]:
    """``model`` written into each session's start where the source names no model."""
    if model is None:
        return list(conversations)
    out = []
    for conversation in conversations:
        first = conversation.events[0] if conversation.events else None
        if isinstance(first, SessionStarted) and first.model is None:
            events = (first.model_copy(update={"model": model}), *conversation.events[1:])
            conversation = Conversation(conversation.session_id, events, conversation.recorded_at)
        out.append(conversation)
    return out


def _call(function: Callable[..., list[Conversation]], first: Any, **options: Any) -> list[Conversation]:
    """``function(first, **options)`` with only the options it takes (older parsers take none but
    ``session``)."""
    accepted = inspect.signature(function).parameters
    return function(first, **{key: value for key, value in options.items() if key in accepted})


def _head(path: Path) -> str:
    try:
        with path.open("rb") as file:
            return file.read(HEAD_BYTES).decode("utf-8", "replace")
    except OSError as exc:
        raise InvalidEventError(f"cannot read {path}: {exc.strerror or exc}") from None


def _safe(detect: Callable[[Path, str], bool], path: Path, head: str) -> bool:
    try:
        return bool(detect(path, head))
    except (OSError, ValueError):
        return False


def first_json(head: str) -> Any:
    """The first JSON value of ``head`` (the whole of a short file, or the first line of JSON lines),
    or None when it cannot be read from the head alone."""
    text = head.lstrip("\ufeff \t\r\n")
    try:
        return json.loads(text)
    except ValueError:
        pass
    line = text.split("\n", 1)[0]
    try:
        return json.loads(line)
    except ValueError:
        return None


def starts_like(head: str, *needles: str) -> bool:
    """Whether the head of a (possibly long, cut) JSON file holds every one of ``needles``."""
    return all(needle in head for needle in needles)
