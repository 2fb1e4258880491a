"""``turnlog import`` and ``turnlog export``: transcripts into the store, and sessions out of it,
in turnlog's own lossless jsonl or as OpenAI or Anthropic transcripts (which import reads back)."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import click

from turnlog.cli_group import CommandError, _Context, cli, pass_ctx
from turnlog.exporters import EXPORT_FORMATS, export_sessions, export_to_file
from turnlog.importers import formats, prepare_import, store_conversations
from turnlog.output import echo_json_chunks, emit, json_option
from turnlog.progress import ProgressBar as _ProgressBar


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


@cli.command("import")
@click.argument("path", type=click.Path(allow_dash=True))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(sorted(formats())),
    help="The transcript's format (default: recognized from the file).",
)
@click.option("--session", help="Session id (NAME-1, NAME-2... when the file has several).")
@click.option("--model", help="The model, where the transcript names none (e.g. gpt-4o).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
@pass_ctx
def import_(
    ctx: _Context,
    path: str,
    fmt: str | None,
    session: str | None,
    model: str | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Import PATH (a file, a folder of logs for the formats that read folders, or '-' for
    standard input with --format) as sessions, one per conversation.

    The whole input is checked before anything is written; then each conversation is stored
    whole, in one transaction. Safe to re-run: an already imported conversation is skipped, a
    grown one gets its new messages appended, and an interrupted import is finished.
    """
    # Bytes: the importer decodes them and names the first byte that is not UTF-8.
    source: Path | bytes = sys.stdin.buffer.read() if path == "-" else Path(path)
    if isinstance(source, Path) and not source.exists():
        raise CommandError(f"{path} does not exist", "file_error")
    # Everything read and checked first: bad input leaves no store behind, not even an empty one.
    _, conversations = prepare_import(source, fmt, session=session, model=model)
    bar = _ProgressBar("importing", enabled=not quiet and not as_json)
    with ctx.open(create=True) as store, bar:
        result = store_conversations(store, conversations, progress=bar.update)
    emit(
        result.sessions,
        as_json=as_json,
        columns=["session_id", "events", "appended", "skipped"],
    )


def _formats_help() -> str:
    lines = [f"  {name:<12} {fmt.describe}" for name, fmt in sorted(formats().items())]
    example = "  turnlog import chat.json --format openai --session support-42"
    return "\n\b\nFormats:\n" + "\n".join(lines) + f"\n\n\b\nExample:\n{example}\n"


import_.help = inspect.cleandoc(import_.help or "") + "\n" + _formats_help()


@cli.command("copy")
@click.argument("source")
@click.argument("destination")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
def copy_(source: str, destination: str, quiet: bool, as_json: bool) -> None:
    """Copy every event of the store SOURCE into the store DESTINATION: each a SQLite file or a
    PostgreSQL URL, either direction. Event ids, positions, versions, recorded_at and hashes are
    kept, so both ends verify with the same head. DESTINATION must be empty (it is created with
    SOURCE's tokenizer) or hold a prefix of SOURCE (the copy resumes after it); anything else is
    refused before a single event is written. --db is not used.

    \b
    Examples:
      turnlog copy agent.db postgresql://me@db.internal:5432/agents
      turnlog copy 'postgresql://me@db.internal:5432/agents?schema=team_a' backup.db
    """
    from turnlog import open_backend, open_store
    from turnlog.copying import copy_store

    with open_backend(source, create=False, readonly=True) as src:  # noqa: SIM117 - dst takes its tokenizer
        with open_store(destination, create=True, tokenizer=src.tokenizer.name) as dst:
            with _ProgressBar("copying", enabled=not quiet and not as_json) as bar:
                result = copy_store(src, dst, progress=bar.update)
            report = dst.verify()
    if not report.ok:  # pragma: no cover - a copy that verifies wrong is a bug, said plainly
        raise CommandError(f"the copy does not verify: {report.problems[0]}", "verify_failed")
    data = {
        "source": src.path,
        "destination": dst.path,
        "events": result.source_events,
        "already_there": result.already,
        "copied": result.copied,
        "head_hash": result.head_hash,
    }
    text = (
        f"copied {result.copied:,} events ({result.already:,} were already there) from {src.path} to "
        f"{dst.path}; both end at hash {result.head_hash[:16]}"
        if result.source_events
        else f"nothing to copy: {src.path} is empty"
    )
    emit(data, as_json=as_json, text=text)
