"""What the importers of coding agents' own logs share (Claude Code's transcripts, Codex's rollouts):
reading a JSON lines file with errors that name the file and the line, event ids derived from a
line's own ids, and a compaction as a ``summary_recorded`` of everything before it."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnlog.importers.base import check_unicode, decode_text, json_lines, load_json, short_repr
from turnlog.store import (
    DEFAULT_ENCODING,
    InvalidEventError,
    SummarizerInfo,
    SummaryRecorded,
    load_tokenizer,
)
from turnlog.store.events import summary_context_text
from turnlog.store.limits import recorded_time


@dataclass(frozen=True)
class Record:
    """One JSON object of a log file, and where it is."""

    where: str
    """``FILE, line N``: the start of every error about it."""
    data: dict[str, Any]
    """The line's object."""


def read_records(path: Path) -> list[Record]:
    """The JSON objects of a JSON lines file, in order. A line that is not JSON, or not an object,
    is an error naming the file and the line; blank lines are skipped. A last line that has no
    newline yet and is not JSON is a line still being written (the agent is running): it is left
    for the next import."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidEventError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    text = decode_text(data, str(path))
    lines = json_lines(text)
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            value = load_json(line, where)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                break  # unterminated: being written
            raise InvalidEventError(f"{where}: malformed JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(value, dict):
            raise InvalidEventError(f"{where}: expected a JSON object, got {type(value).__name__}")
        records.append(Record(where, value))
    return records


def jsonl_files(root: Path, pattern: str) -> list[Path]:
    """The files under ``root`` whose names match ``pattern``, sorted by path (symbolic links to
    folders are not followed, so a link loop cannot make an import run forever)."""
    found: list[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        found.extend(Path(folder, name) for name in names if Path(name).match(pattern))
    return sorted(found)


def first_file(root: Path, pattern: str) -> Path | None:
    """The first file under ``root`` matching ``pattern`` (walking in name order), or None."""
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            if Path(name).match(pattern):
                return Path(folder, name)
    return None


def head_objects(path: Path, count: int = 10) -> Iterator[dict[str, Any]]:
    """The JSON objects among the first ``count`` non-blank lines of a file (at most 1 MB read); a
    file that cannot be read, or lines that are not JSON objects, give nothing."""
    try:
        with path.open("rb") as file:
            head = file.read(1 << 20)
    except OSError:
        return
    seen = 0
    for raw in head.split(b"\n"):
        if not raw.strip():
            continue
        seen += 1
        if seen > count:
            return
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            yield value


def line_id(*parts: object) -> str:
    """An event id made from a line's own ids (and the session it is imported into): the same line
    always gives the same id, however the file has grown since."""
    return hashlib.sha256("\0".join(str(p) for p in parts).encode()).hexdigest()[:32]


def text_field(record: Record, data: dict[str, Any], name: str) -> str | None:
    """An optional string field (None when absent), or an error naming it."""
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidEventError(f"{record.where}: {name} must be a string, not {short_repr(value)}")
    check_unicode(value, f"{record.where}, {name}")
    return value


def object_field(record: Record, data: dict[str, Any], name: str, *, required: bool = True) -> dict[str, Any]:
    """A field holding a JSON object (``{}`` when absent and not required), or an error naming it."""
    value = data.get(name)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        got = "missing" if value is None else f"a {type(value).__name__}"
        raise InvalidEventError(f"{record.where}: {name} must be an object, but it is {got}")
    return value


def line_time(record: Record, name: str = "timestamp") -> str | None:
    """The line's time in the store's format, None when it has none; a time that is not ISO 8601
    is an error naming the line."""
    value = record.data.get(name)
    if value is None:
        return None
    return recorded_time(value, f"{record.where}: {name}")


def fill_times(times: Sequence[str | None]) -> tuple[str, ...] | None:
    """Each event's time: a line without one takes the time before it (or the first time seen);
    None when no line has a time."""
    known = next((t for t in times if t is not None), None)
    if known is None:
        return None
    filled = []
    for value in times:
        known = value or known
        filled.append(known)
    return tuple(filled)


def compaction_summary(
    event_id: str, source: str, key: str, last_version: int, text: str, model: str | None
) -> SummaryRecorded:
    """A compaction the agent made: a summary of every version from 2 (the first after
    ``session_started``) to ``last_version``, so a context built after it shows the summary in
    their place, as the agent's next call did. Its tokens are counted with turnlog's default
    encoding (the session says so in its ``tokenizer``)."""
    return SummaryRecorded(
        event_id=event_id,
        first_version=2,
        last_version=last_version,
        level=0,
        text=text,
        tokens=load_tokenizer(DEFAULT_ENCODING).count(summary_context_text(2, last_version, text)),
        summarizer=SummarizerInfo(name=source, model=model),
        key=hashlib.sha256(f"{source}\0{key}".encode()).hexdigest(),
    )


def session_names(session: str | None, ids: Sequence[str]) -> dict[str, str]:
    """The name each log's own session id is imported under: its own id, or ``session`` when one
    session is imported under a given name (``NAME-1``, ``NAME-2``... for several)."""
    if session is None:
        return {i: i for i in ids}
    if len(ids) == 1:
        return {ids[0]: session}
    return {i: f"{session}-{n}" for n, i in enumerate(ids, 1)}
