"""Commands on the store as a whole: create it, verify it, rebuild its projections."""

from __future__ import annotations

import os
import sys
import time

import click

from turnlog import is_postgres_url
from turnlog.checks import verify_all
from turnlog.cli_group import _Context, cli, pass_ctx
from turnlog.output import emit, json_option
from turnlog.progress import ProgressBar
from turnlog.projections.registry import materializer
from turnlog.store import DEFAULT_ENCODING


@cli.command()
@click.option(
    "--tokenizer",
    default=None,
    help=f"tiktoken encoding for token counts (default {DEFAULT_ENCODING}, which works offline).",
)
@json_option
@pass_ctx
def init(ctx: _Context, tokenizer: str | None, as_json: bool) -> None:
    """Create a store (or check an existing one).

    \b
    Example:
      turnlog --db agent.db init
    """
    server = is_postgres_url(ctx.db)
    existed = os.path.exists(ctx.db)
    with ctx.open(create=True, tokenizer=tokenizer) as store:
        data = {
            "path": store.path,  # a server's URL never shows its password
            "created": None if server else not existed,  # a server's schema: made when missing
            "tokenizer": store.tokenizer.name,
            "events": store.head_position(),
        }
    verb = "ready:" if server else "created" if data["created"] else "already exists:"
    emit(
        data,
        as_json=as_json,
        text=f"{verb} turnlog store {store.path} (tokenizer {data['tokenizer']}, {data['events']} events)",
    )


@cli.command()
@click.option(
    "--quick",
    is_flag=True,
    help="Run SQLite's quick_check instead of the full integrity_check (faster; skips the indexes).",
)
@json_option
@pass_ctx
def verify(ctx: _Context, quick: bool, as_json: bool) -> None:
    """Check the file's integrity, the immutability triggers, the hash chain, that every event
    decodes, every stored token count, the content blobs, and that every materialized projection
    equals a fresh rebuild.

    Exits 1 and lists every finding, with its position, when anything is wrong.
    """
    with ctx.read() as store:
        report = verify_all(store, quick=quick)
    data = {
        "ok": report.ok,
        "events": report.events,
        "head_hash": report.head_hash,
        "first_bad_position": report.first_bad_position,
        "problems": report.problems,
    }
    if report.ok:
        text = (
            f"ok: {report.events} events, hash chain intact (head {report.head_hash[:16]}), "
            "projections match a fresh rebuild"
        )
    else:
        text = f"FAILED at position {report.first_bad_position}:\n" + "\n".join(
            f"  {p}" for p in report.problems
        )
    emit(data, as_json=as_json, text=text)
    if not report.ok:
        sys.exit(1)


@cli.command()
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
@pass_ctx
def rebuild(ctx: _Context, quiet: bool, as_json: bool) -> None:
    """Rebuild every materialized projection from the log, from zero.

    Projections catch up by themselves; this is for after a bug fix, or to check timings.
    """
    bar = ProgressBar("rebuilding", enabled=not quiet and not as_json)
    started = time.perf_counter()
    with ctx.open() as store, bar:
        materializer(store).rebuild(progress=bar.update)
        events = store.head_position()
    seconds = time.perf_counter() - started
    emit(
        {"events": events, "seconds": round(seconds, 3)},
        as_json=as_json,
        text=f"rebuilt every projection over {events:,} events in {seconds:.2f} s",
    )
