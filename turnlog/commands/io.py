"""``turnlog export``: sessions out of the store, in turnlog's own lossless jsonl or as OpenAI or
Anthropic transcripts (``turnlog import`` reads them back in)."""

from __future__ import annotations

import click

from turnlog.cli import _Context, cli, pass_ctx
from turnlog.exporters import EXPORT_FORMATS, export_sessions, export_to_file
from turnlog.output import echo_json_chunks, emit, json_option


@cli.command()
@click.argument("sessions", nargs=-1, required=True)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(EXPORT_FORMATS),
    default="jsonl",
    show_default=True,
    help="jsonl: every event, lossless (import it with --format jsonl); openai, anthropic: the "
    "conversation as a transcript.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, allow_dash=True),
    default="-",
    help="Write to FILE instead of standard output (replaced only once the export is complete; "
    "never the store's own file).",
)
@json_option
@pass_ctx
def export(ctx: _Context, sessions: tuple[str, ...], fmt: str, output: str, as_json: bool) -> None:
    """Export SESSIONS: every event as JSON lines (several sessions at once, a fork after its
    parent), or one session's conversation as an OpenAI or Anthropic transcript.

    With --output, a summary is printed (as JSON with --json).

    \b
    Examples:
      turnlog export chat-1 --output chat-1.jsonl
      turnlog export chat-1 --format anthropic
      turnlog --db other.db import chat-1.jsonl --format jsonl
    """
    with ctx.read() as store:
        if output == "-":
            echo_json_chunks(export_sessions(store, sessions, fmt))
            return
        written = export_to_file(store, sessions, fmt, output)
    data = {"sessions": list(sessions), "format": fmt, "path": output, "bytes": written}
    emit(data, as_json=as_json, text=f"exported {', '.join(sessions)} ({fmt}, {written:,} bytes) to {output}")
