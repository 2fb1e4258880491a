"""`turnlog doctor`: what is wrong with a store and what to run; `turnlog datasette-metadata`: the
metadata that makes Datasette show a store's text, with canned audit queries."""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path

import click

from turnlog.cli_group import CommandError, _Context, cli, pass_ctx
from turnlog.output import emit, escape_text, json_option


@cli.command()
@json_option
@pass_ctx
def doctor(ctx: _Context, as_json: bool) -> None:
    """Say what is wrong with the store, if anything, and the command that fixes each finding.

    It reads and never writes: no store is created, migrated or caught up. Each finding is one
    line: a problem (with the command to run) or a note (fine as it is, and what it means). Exits 0
    when the store is healthy, 1 when there is a problem.

    \b
    Example:
      turnlog --db agent.db doctor
    """
    from turnlog.doctor import diagnose

    diagnosis = diagnose(ctx.db)
    if as_json:
        emit(diagnosis.to_dict(), as_json=True)
    else:
        lines = [escape_text(f.line()) for f in diagnosis.findings]
        if diagnosis.healthy:
            lines.insert(
                0,
                f"ok: {escape_text(diagnosis.path)} is a healthy turnlog store ({diagnosis.events:,} "
                f"events, schema version {diagnosis.schema_version or '-'}, tokenizer {diagnosis.tokenizer})",
            )
        click.echo("\n".join(lines))
    if not diagnosis.healthy:
        sys.exit(1)


@cli.command("datasette-metadata")
@click.option(
    "--database",
    metavar="NAME",
    help="The database's name in Datasette (default: the --db file's name without its extension, "
    "as Datasette names it).",
)
@click.option("--yaml", "as_yaml", is_flag=True, help="YAML instead of JSON (needs PyYAML).")
@pass_ctx
def datasette_metadata(ctx: _Context, database: str | None, as_yaml: bool) -> None:
    """Print the Datasette metadata for a turnlog store: titles, column help and canned audit queries.

    Save it and pass it to Datasette with the store (its views show message text, tool calls and
    usage per call; the canned queries audit spend per session, model and day).

    \b
    Example:
      turnlog --db agent.db datasette-metadata > meta.json
      datasette agent.db -m meta.json
    """
    from turnlog.projections.registry import all_projections

    metadata = json.loads(resources.files("turnlog").joinpath("datasette.json").read_text(encoding="utf-8"))
    name = database or Path(ctx.db).stem
    entry = metadata["databases"].pop("turnlog")
    # Derived and internal tables are hidden (Datasette still lists them under "hidden tables").
    internal = ["blobs", "projection_checkpoints", *(t for p in all_projections() for t in p.tables)]
    for table in internal:
        entry["tables"].setdefault(table, {})["hidden"] = True
    metadata["databases"][name] = entry
    if not as_yaml:
        click.echo(json.dumps(metadata, indent=2, ensure_ascii=False))
        return
    try:
        import yaml  # type: ignore[import-untyped]  # PyYAML (no stubs); only with --yaml
    except ImportError as exc:
        raise CommandError(
            "--yaml needs PyYAML: pip install pyyaml (or print JSON)", "missing_extra"
        ) from exc
    click.echo(yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True, width=100).rstrip("\n"))
