"""The CLI's one way of printing data: aligned text for people, ``--json`` for programs."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click

from store import RecordedEvent
from store.events import MessageAppended, ToolReturned

F = TypeVar("F", bound=Callable[..., Any])


def json_option(command: F) -> F:
    """The shared ``--json`` flag."""
    return click.option("--json", "as_json", is_flag=True, help="Print the data as JSON instead of text.")(
        command
    )


def at_option(help: str = "As of this log position.") -> Callable[[F], F]:
    """The shared ``--at POSITION`` option (replay: everything as it was at that point of the log)."""
    return click.option("--at", type=click.IntRange(min=1), help=help)


def max_tool_tokens_option(help: str) -> Callable[[F], F]:
    """The shared ``--max-tool-tokens`` option of commands that build contexts."""
    from projections.capping import MIN_CAP

    return click.option(
        "--max-tool-tokens", type=click.IntRange(min=MIN_CAP), default=1000, show_default=True, help=help
    )


def input_file_option(what: str) -> Callable[[F], F]:
    """The shared ``--file`` option of commands that read their input from standard input."""
    return click.option(
        "--file",
        "source",
        type=click.File("r", encoding="utf-8"),
        default="-",
        help=f"Read {what} from this file instead of standard input.",
    )


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
        click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))
    elif text is not None:
        click.echo(text)
    elif columns is not None:
        click.echo(table(data, columns))
    else:
        click.echo(str(data))


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Rows as aligned columns under a header."""
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in cells:
        lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


def describe(record: RecordedEvent, width: int = 80) -> str:
    """One line saying what an event is, for logs."""
    event = record.event
    if isinstance(event, MessageAppended):
        text = event.content
        if event.tool_calls:
            calls = ", ".join(f"{c.name}({short(c.arguments, 40)})" for c in event.tool_calls)
            text = (text + " " if text else "") + f"→ {calls}"
        pin = " [pinned]" if event.pinned else ""
        return f"{event.role}{pin}: {short(text, width)}"
    if isinstance(event, ToolReturned):
        err = " ERROR" if event.is_error else ""
        name = event.tool_name or "?"
        return f"{name} [{event.tool_call_id}]{err}: {short(event.content, width)}"
    fields = event.model_dump(
        mode="json", exclude={"type", "schema_version", "event_id", "content"}, exclude_none=True
    )
    return short(", ".join(f"{k}={_compact(v)}" for k, v in fields.items()), width)


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def short(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) >= 1000 else str(value)
    return str(value)
