"""Reading aider's markdown chat history (``.aider.chat.history.md``): one session per ``# aider
chat started at`` that has a user turn, its SEARCH/REPLACE edits as artifact writes and each
``> Tokens:`` line as the usage of one model call.

aider appends to the file as it goes: ``# aider chat started at TIME`` opens a run, ``> `` lines
are its own notes (start-up banner, ``Tokens:`` reports, applied edits, commits), ``#### `` lines
are what the user typed (one line each), and everything else is the model's replies. A reply ends
at its ``> Tokens:`` report (aider may call the model again without a user turn, to fix a failed
edit or a lint error: each reply is its own assistant message). A user turn that is an aider
command (``/add``, ``/run``, ``/diff``...) was not sent to the model and is not a message; ``/ask``,
``/code``, ``/architect`` and ``/help`` send the text after them, which is. A run with no user
turn (aider started and quit) is left out.

Edits: the replies are read with a port of aider's own parser (``find_original_update_blocks`` in
aider/coders/editblock_coder.py): a ``<<<<<<< SEARCH`` / ``=======`` / ``>>>>>>> REPLACE`` block
edits the file named on one of the three lines above it (past fences with or without a language;
else the file of the reply's previous block), and becomes an ``artifact_written`` of that file
holding the replacement text. A reply that aider's parser refuses (a block without a file name, or
not closed) gave aider no edit, and gives none here; shell blocks are not edits.

Usage: ``> Tokens: N sent[, W cache write][, H cache hit], M received. Cost: $X message, $Y
session.`` (``request`` in older versions; the cost on the next line when both cache counts are
given) becomes one ``usage_recorded`` tied to the reply before it, ``cost_usd`` the message's cost.
aider rounds its counts (``1.2k`` is read as 1,200: the figures are as exact as the file). The
line does not say whether ``sent`` includes the cached tokens: aider takes litellm's
``prompt_tokens``, which include cache hits for OpenAI and DeepSeek but, as Anthropic reports
them, neither hits nor writes. So where a cache write is reported (Anthropic's prompt caching) or
the cache counts exceed ``sent``, input is ``sent`` plus both; otherwise hits are a part of ``sent``.
The model is the main model of the run's banner (``--model`` where it has none). aider writes the
run's start in local time without an offset: it is read as UTC and given to every event of the
run."""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from turnlog.importers.agent_logs import line_id, session_names
from turnlog.importers.base import Conversation, check_unicode, fields_of, short_repr
from turnlog.store import (
    ArtifactWritten,
    Event,
    InvalidEventError,
    MessageAppended,
    SessionStarted,
    UsageRecorded,
)
from turnlog.store.limits import recorded_time

SOURCE = "aider"
"""The ``source`` of the usage."""

_STARTED = re.compile(r"^# aider chat started at (.+?)\s*$")
_MODEL = re.compile(r"^> (?:Main model|Models?): (\S+)")
_TOKENS = re.compile(r"^> Tokens: (.*?) received\.(.*)$")
_COUNT = re.compile(r"^([0-9][0-9,]*(?:\.[0-9]+)?)([kKmM]?) (sent|cache write|cache hit)$")
_RECEIVED = re.compile(r"^([0-9][0-9,]*(?:\.[0-9]+)?)([kKmM]?)$")
_COST = re.compile(r"Cost: \$([0-9][0-9,]*(?:\.[0-9]+)?) (?:message|request)")
_COST_LINE = re.compile(r"^(> )?Cost: \$")
_SENT_COMMANDS = re.compile(r"^/(ask|code|architect|help)(?:\s+(.*))?$", re.DOTALL)


def looks_like_aider(text_head: str) -> bool:
    """Whether the start of a file looks like an aider chat history: a ``# aider chat started at``
    line among its first lines."""
    lines = text_head.removeprefix("\ufeff").splitlines()[:200]
    return any(_STARTED.match(line) for line in lines)


@dataclass
class _Run:
    """One ``# aider chat started at`` and the lines after it."""

    started: str
    line: int
    model: str | None = None
    items: list[tuple[str, int, str]] = field(default_factory=list)
    """(``user`` | ``assistant`` | ``tokens`` | ``cost``, line number, text), in file order."""
    turns: int = 0


def parse_aider(
    text: str, *, session: str | None = None, model: str | None = None, name: str | None = None
) -> list[Conversation]:
    """Read an aider chat history: one conversation per run with a user turn (see the module's
    docstring). Each is named ``aider-`` and its start time (``-2``, ``-3``... for runs started in
    the same second); ``session`` renames them (``NAME``, or ``NAME-1``, ``NAME-2``... for several).
    Event ids derive from the session, each event's index and its text, so importing the history
    again once aider has appended to it adds only what is new."""
    where = short_repr(name, 200) if name else "the file"
    runs = [run for run in _runs(text, where) if run.turns]
    if not runs:
        raise InvalidEventError(
            f"{where}: holds no aider run with a user turn (a '# aider chat started at' line "
            "followed by '#### ' lines)"
        )
    ids: list[str] = []
    for run in runs:
        base = "aider-" + run.started.replace(" ", "T")
        own = base
        number = 1
        while own in ids:
            number += 1
            own = f"{base}-{number}"
        ids.append(own)
    names = session_names(session, ids)
    return [_build(names[own], run, where, model) for own, run in zip(ids, runs, strict=True)]


def _runs(text: str, where: str) -> list[_Run]:
    runs: list[_Run] = []
    run: _Run | None = None
    reply: list[str] = []
    user: list[str] = []
    user_line = reply_line = 0
    code = _Code()  # inside a reply's fence or SEARCH/REPLACE block, '#### ' and '> ' lines are code

    def flush_user() -> None:
        if run is not None and user:
            run.items.append(("user", user_line, "\n".join(user)))
            run.turns += 1
        user.clear()

    def flush_reply() -> None:
        body = "\n".join(reply).strip("\n")
        if run is not None and body.strip():
            run.items.append(("assistant", reply_line, body))
        reply.clear()

    for number, raw in enumerate(text.replace("\r\n", "\n").split("\n"), 1):
        line = raw.rstrip()
        started = _STARTED.match(line)
        if code.inside() and not started and not line.startswith("> Tokens:"):
            reply.append(raw)
            code.read(line)
            continue
        code = _Code()
        if started:
            flush_user()
            flush_reply()
            run = _Run(_start_time(started.group(1), f"{where}, line {number}"), number)
            runs.append(run)
            continue
        if run is None:
            continue  # before the first run: nothing to tie it to
        if line == "####" or line.startswith("#### "):
            flush_reply()
            if not user:
                user_line = number
            user.append(line[5:])
            continue
        flush_user()
        if not reply and run.items and run.items[-1][0] == "tokens" and _COST_LINE.match(line):
            # aider's report goes on two lines when it gives both cache counts; only the first
            # is quoted
            run.items.append(("cost", number, line))
            continue
        if line == ">" or line.startswith("> "):
            if line.startswith("> Tokens:"):
                flush_reply()
                run.items.append(("tokens", number, line))
            elif run.model is None and not run.turns:
                found = _MODEL.match(line)
                if found:
                    run.model = found.group(1)
            continue
        if not run.turns:
            continue  # the banner's lines that aider wrote without '> '
        if not reply:
            if not line:
                continue
            reply_line = number
        reply.append(raw)
        code.read(line)
    flush_user()
    flush_reply()
    return runs


@dataclass
class _Code:
    """Whether a reply is inside a fence or a SEARCH/REPLACE block, line by line."""

    fence: bool = False
    block: bool = False

    def inside(self) -> bool:
        return self.fence or self.block

    def read(self, line: str) -> None:
        text = line.strip()
        if self.block:
            self.block = text != _UPDATED
        elif text == _HEAD:
            self.block = True
        elif text.startswith(_FENCE):
            self.fence = not self.fence


def _start_time(value: str, where: str) -> str:
    """The run's start as aider wrote it, checked to be a time."""
    value = value.strip()
    try:
        datetime.datetime.fromisoformat(value)
    except ValueError:
        raise InvalidEventError(
            f"{where}: '# aider chat started at' needs a time like 2024-08-05 19:33:02, not "
            f"{short_repr(value)}"
        ) from None
    return value


def _recorded(started: str, where: str) -> str:
    """The run's start in the store's format (a time without an offset read as UTC)."""
    when = datetime.datetime.fromisoformat(started)
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return recorded_time(when.isoformat(), where)


def _build(sid: str, run: _Run, where: str, model: str | None) -> Conversation:
    events: list[Event] = []
    last_reply: str | None = None  # the reply the next Tokens line reports on
    title: str | None = None
    run_model = run.model or model
    pending: UsageRecorded | None = None
    for kind, number, text in run.items:
        here = f"{where}, line {number}"
        check_unicode(text, here)
        event_id = line_id(sid, len(events), text)
        with fields_of(here):
            if kind == "cost":
                cost = _cost(text, here)
                if pending is not None and pending.cost_usd is None and cost is not None:
                    events[-1] = pending.model_copy(update={"cost_usd": cost})
                pending = None
                continue
            pending = None
            if kind == "user":
                content = _sent(text)
                if content is None:
                    continue  # an aider command, not sent to the model
                events.append(MessageAppended(event_id=event_id, role="user", content=content))
                title = title or " ".join(content.split())[:80] or None
            elif kind == "assistant":
                message = MessageAppended(event_id=event_id, role="assistant", content=text)
                events.append(message)
                last_reply = message.event_id
                for number_in_reply, (path, replacement) in enumerate(_edits(text)):
                    events.append(
                        ArtifactWritten(
                            event_id=line_id(sid, len(events), "edit", number_in_reply, path, replacement),
                            name=path,
                            content=replacement,
                        )
                    )
            else:
                pending = _usage(text, here, event_id, run_model or "unknown", last_reply)
                events.append(pending)
                last_reply = None
    started = SessionStarted(
        event_id=line_id(sid, "session_started", run.started),
        title=title,
        model=run_model,
        metadata={"imported_from": SOURCE, "started_at": run.started},
    )
    time = _recorded(run.started, f"{where}, line {run.line}")
    return Conversation(sid, (started, *events), (time,) * (len(events) + 1))


def _sent(text: str) -> str | None:
    """What a user turn sent to the model: the text, or the text after a command that sends it;
    None for other aider commands."""
    text = "\n".join("" if line == "<blank>" else line for line in text.split("\n"))
    if not text.startswith("/"):
        return text
    found = _SENT_COMMANDS.match(text)
    if found is None or not (found.group(2) or "").strip():
        return None
    return found.group(2)


def _number(digits: str, unit: str, label: str, where: str) -> int:
    value = float(digits.replace(",", ""))
    value *= {"": 1, "k": 1_000, "m": 1_000_000}[unit.lower()]
    if value != value or value > 1e15:
        raise InvalidEventError(f"{where}: {label} count {short_repr(digits + unit)} is not a token count")
    return round(value)


def _usage(line: str, where: str, event_id: str, model: str, reply: str | None) -> UsageRecorded:
    found = _TOKENS.match(line)
    parts = found.group(1).split(", ") if found else []
    counts: dict[str, int] = {}
    for part in parts:
        count = _COUNT.match(part.strip())
        if count is None:
            break
        counts[count.group(3)] = _number(count.group(1), count.group(2), count.group(3), where)
    received = _RECEIVED.match(parts[-1].strip()) if parts else None
    if found is None or received is None or "sent" not in counts or len(counts) != len(parts) - 1:
        raise InvalidEventError(
            f"{where}: Tokens: expected 'Tokens: N sent[, W cache write][, H cache hit], M received.', "
            f"not {short_repr(line, 120)}"
        )
    sent, written, hit = counts["sent"], counts.get("cache write", 0), counts.get("cache hit", 0)
    output = _number(received.group(1), received.group(2), "received", where)
    total = sent + written + hit if written or hit + written > sent else sent
    return UsageRecorded(
        event_id=event_id,
        model=model,
        input_tokens=total,
        output_tokens=output,
        cache_read_tokens=hit,
        cache_write_tokens=written,
        call_event_id=reply,
        cost_usd=_cost(found.group(2), where),
        source=SOURCE,
    )


def _cost(text: str, where: str) -> float | None:
    found = _COST.search(text)
    return None if found is None else float(found.group(1).replace(",", ""))


# aider's edit-block parser (aider/coders/editblock_coder.py, find_original_update_blocks), ported.

_HEAD = "<<<<<<< SEARCH"
_DIVIDER = "======="
_UPDATED = ">>>>>>> REPLACE"
_FENCE = "```"
_SHELL_STARTS = tuple(
    _FENCE + name
    for name in (
        "bash",
        "sh",
        "shell",
        "cmd",
        "batch",
        "powershell",
        "ps1",
        "zsh",
        "fish",
        "ksh",
        "csh",
        "tcsh",
    )
)


class _Malformed(ValueError):
    """A reply aider's parser refuses (it then applies none of the reply's edits)."""


def _edits(reply: str) -> list[tuple[str, str]]:
    """The (file, replacement text) of each SEARCH/REPLACE block of a reply, as aider reads them;
    none when aider's parser would refuse the reply."""
    try:
        return list(_blocks(reply))
    except _Malformed:
        return []


def _blocks(content: str) -> Iterator[tuple[str, str]]:
    lines = content.splitlines(keepends=True)
    index = 0
    current: str | None = None
    while index < len(lines):
        line = lines[index]
        if line.strip().startswith(_SHELL_STARTS):
            index += 1
            while index < len(lines) and not lines[index].strip().startswith(_FENCE):
                index += 1
            index += 1  # past the closing fence
            continue
        if line.strip() == _HEAD:
            filename = _find_filename(lines[max(0, index - 3) : index]) or current
            if filename is None:
                raise _Malformed("missing filename")
            current = filename
            index += 1
            while index < len(lines) and lines[index].strip() != _DIVIDER:
                index += 1
            if index >= len(lines):
                raise _Malformed(f"expected {_DIVIDER}")
            updated = []
            index += 1
            while index < len(lines) and lines[index].strip() != _UPDATED:
                updated.append(lines[index])
                index += 1
            if index >= len(lines):
                raise _Malformed(f"expected {_UPDATED}")
            yield filename, "".join(updated)
        index += 1


def _find_filename(lines: list[str]) -> str | None:
    """The file named on the three lines above a block, looking back past fences only."""
    for line in reversed(lines[-3:]):
        name = _strip_filename(line)
        if name:
            return name
        if not line.startswith(_FENCE):
            return None
    return None


def _strip_filename(line: str) -> str | None:
    name = line.strip()
    if name == "..." or name.startswith(_FENCE):
        return None
    name = name.rstrip(":").lstrip("#").strip().strip("`").strip("*").replace("\\_", "_")
    return name or None
