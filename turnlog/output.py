"""The CLI's one way of printing data: aligned text for people, ``--json`` for programs."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from turnlog.store import RecordedEvent

F = TypeVar("F", bound=Callable[..., Any])

# What stored text must never send to a terminal as it is: C0 controls but newline and tab (ESC
# starts colour, cursor and title sequences; BEL ends OSC titles; CR overwrites a line), DEL, the C1
# controls (0x9b is a one-byte CSI on some terminals), the bidi and line-separator format characters
# that reorder or split what is shown (U+202E makes `exe.txt` of `txt.exe`), and lone surrogates
# (undecodable bytes of an argument, which cannot even be written as UTF-8).
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def escape_text(text: str) -> str:
    """``text`` with every control or format character that a terminal would act on shown as an
    escape (``\\x1b``, ``\\u202e``); newline and tab stay. The result holds only printable
    characters, so escaping it again changes nothing."""
    return _UNSAFE.sub(_visible, text)


def escape_json(text: str) -> str:
    """JSON text (from ``json.dumps``, which escapes C0 itself) with DEL, C1, bidi controls and lone
    surrogates escaped as ``\\uXXXX`` too: the same JSON value, safe on a terminal. These characters
    can only occur inside JSON strings, where ``\\uXXXX`` means the same."""
    return _UNSAFE.sub(_json_escape, text)


def dumps(data: Any, *, indent: int | None = 2) -> str:
    """``data`` as JSON text safe to print: non-ASCII text stays readable, controls are escaped."""
    return escape_json(json.dumps(data, indent=indent, ensure_ascii=False, default=str))


def echo(text: str = "", *, nl: bool = True, err: bool = False) -> None:
    """Print text for people: the CLI's only way to print text, so stored text with escape
    sequences is shown, never obeyed, on a terminal as well as through a pipe."""
    click.echo(escape_text(text), nl=nl, err=err)


def echo_json_chunks(chunks: Iterable[str]) -> None:
    """Print JSON text (an export) chunk by chunk, escaped as :func:`escape_json` does."""
    for chunk in chunks:
        click.echo(escape_json(chunk), nl=False)


MAX_INT64 = 2**63 - 1
"""The largest log position or version: SQLite's INTEGER, and what any count here stays under."""

MAX_TOKENS = 100_000_000
"""The largest token budget or cap an option takes: far above any model's context window."""


def int_range(min: int, max: int = MAX_INT64) -> click.IntRange:
    """An integer option's type, always bounded: a number the store cannot hold (``--at 2**63``) is
    a usage error naming the range, never an overflow deep inside a command."""
    return click.IntRange(min=min, max=max)


def tokens_range(min: int) -> click.IntRange:
    """The type of a token budget or cap option."""
    return click.IntRange(min=min, max=MAX_TOKENS)


def json_option(command: F) -> F:
    """The shared ``--json`` flag."""
    return click.option("--json", "as_json", is_flag=True, help="Print the data as JSON instead of text.")(
        command
    )


def at_option(help: str = "As of this log position.") -> Callable[[F], F]:
    """The shared ``--at POSITION`` option (replay: everything as it was at that point of the log)."""
    return click.option("--at", type=int_range(1), help=help)


def max_tool_tokens_option(help: str, *, policy: bool = False) -> Callable[[F], F]:
    """The shared ``--max-tool-tokens`` option of commands that build contexts (``policy``: unset
    means the session policy's cap, else 1000)."""
    from turnlog.projections.capping import MIN_CAP

    if policy:
        return click.option(
            "--max-tool-tokens",
            type=tokens_range(MIN_CAP),
            default=None,
            show_default="the session policy's, else 1000",
            help=help,
        )
    return click.option(
        "--max-tool-tokens", type=tokens_range(MIN_CAP), default=1000, show_default=True, help=help
    )


def index_option(
    help: str = "Show the session's artifact index after the system messages (within half the budget).",
) -> Callable[[F], F]:
    """The shared ``--index/--no-index`` option of commands that build contexts (default: on)."""
    return click.option("--index/--no-index", default=True, show_default=True, help=help)


def input_file_option(what: str) -> Callable[[F], F]:
    """The shared ``--file`` option of commands that read their input from standard input."""
    return click.option(
        "--file",
        "source",
        type=click.File("rb"),
        default="-",
        help=f"Read {what} from this file instead of standard input.",
    )


MAX_JSON_DEPTH = 128
"""Levels of JSON nesting an input may have (pydantic-core's parser stops at about 200)."""

_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


def read_text(source: Any) -> str:
    """The whole of an input file opened in binary (``--file``, ``--write``) as text: bytes that
    are not UTF-8 are one clear error, not a traceback."""
    data: bytes = source.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        name = getattr(source, "name", "<stdin>")
        where = "standard input" if name in ("<stdin>", "-") else str(name)
        raise click.ClickException(
            f"{escape_text(where)} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}): "
            "give JSON in UTF-8"
        ) from None


def check_json_depth(text: str, what: str, limit: int = MAX_JSON_DEPTH, *, wrapping: int = 0) -> None:
    """Refuse JSON nested deeper than ``limit`` before it is parsed: Python's parser fails on deep
    nesting with a RecursionError, and what it does read, SQLite's JSON functions and pydantic-core
    cannot read back. Brackets inside strings do not count; ``wrapping`` levels (a list of events
    around the fields that are limited) come on top."""
    depth = 0
    for match in _JSON_TOKENS.finditer(text):
        token = text[match.start()]
        if token in ("[", "{"):
            depth += 1
            if depth > limit + wrapping:
                raise click.ClickException(
                    f"{what}: JSON nested more than {limit} levels deep: flatten it (at most {limit} levels)"
                )
        elif token in ("]", "}"):
            depth -= 1


def emit(
    data: Any,
    *,
    as_json: bool,
    columns: Sequence[str] | None = None,
    text: str | None = None,
) -> None:
    """Print ``data``: as JSON with ``--json``; else as a table of ``columns`` (rows are dicts), or
    as ``text`` when given."""
    if as_json:
        click.echo(dumps(data))
    elif text is not None:
        echo(text)
    elif columns is not None:
        echo(table(data, columns))
    else:
        echo(str(data))


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Rows as aligned columns under a header."""
    # Escaped before measuring, so the columns line up with what is printed.
    cells = [[escape_text(_cell(row.get(c))) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in cells:
        lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


def describe(record: RecordedEvent, width: int = 80) -> str:
    """One line saying what an event is, for logs."""
    fields = record.event.model_dump(
        mode="json", exclude={"type", "schema_version", "event_id"}, exclude_none=True
    )
    return describe_fields(record.type, fields, width)


def describe_fields(etype: str, fields: Mapping[str, Any], width: int = 80) -> str:
    """:func:`describe` of an event given by its type and its fields as JSON data (its
    ``model_dump(mode="json", exclude_none=True)``, as store.event_fields reads them)."""
    if etype == "message_appended":
        text = fields.get("content", "")
        calls = fields.get("tool_calls")
        if calls:
            listed = ", ".join(f"{c['name']}({short(c.get('arguments', '{}'), 40)})" for c in calls)
            text = (text + " " if text else "") + f"→ {listed}"
        pin = " [pinned]" if fields.get("pinned") else ""
        return f"{fields['role']}{pin}: {short(text, width)}"
    if etype == "tool_returned":
        err = " ERROR" if fields.get("is_error") else ""
        name = fields.get("tool_name") or "?"
        return f"{name} [{fields['tool_call_id']}]{err}: {short(fields['content'], width)}"
    if etype == "session_rewound":
        by = f" by {fields['source']}" if fields.get("source") else ""
        note = f": {fields['note']}" if fields.get("note") else ""
        return short(f"rewind ({fields['reason']}){by} to version {fields['to_version']}{note}", width)
    if etype == "message_removed":
        ids = ", ".join(i[:12] for i in fields["target_event_ids"])
        why = f" ({fields['reason']})" if fields.get("reason") else ""
        count = len(fields["target_event_ids"])
        return short(f"removed {count} message{'s' if count != 1 else ''}{why}: {ids}", width)
    if etype == "state_recorded":
        namespace, key = fields["namespace"], fields["key"]
        where = f"{namespace}/{key}" if namespace else key
        size = f"{fields['size']:,} bytes" if fields.get("size") is not None else "?"
        return short(f"{fields['framework']} state {where} ({fields['media_type']}, {size})", width)
    rest = (f"{k}={_compact(v)}" for k, v in fields.items() if k != "content")
    return short(", ".join(rest), width)


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def short(text: str, width: int) -> str:
    """``text`` on one line, escaped, cut to ``width`` characters."""
    flat = escape_text(" ".join(text.split()))
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) >= 1000 else str(value)
    return str(value)
