"""Commands that show a projection of the log: the context for the model, artifacts, the artifact
index, the todo list, and the token audit."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import click

from turnlog.actions import write_todos
from turnlog.cli_group import _Context, cli, pass_ctx
from turnlog.commands.policy import (
    as_modes,
    cache_defaults,
    cache_stable_options,
    modes_option,
    policy_defaults,
)
from turnlog.output import (
    at_option,
    check_json_depth,
    echo,
    emit,
    index_option,
    int_range,
    json_option,
    max_tool_tokens_option,
    read_text,
    short,
    table,
    tokens_range,
)
from turnlog.plot import check_plot_path, plot_spend
from turnlog.projections.artifacts import artifact_index, list_artifacts, read_artifact
from turnlog.projections.capping import MIN_CAP
from turnlog.projections.context import ContextPolicy, build_context
from turnlog.projections.ledger import AuditReport, audit, load_prices
from turnlog.projections.todos import current_todos, render_checklist, todo_history


@cli.command()
@click.argument("session")
@click.option(
    "--budget",
    type=tokens_range(1),
    help="Prompt tokens, all included (default: the budget of the session's policy).",
)
@max_tool_tokens_option("Inline cap per tool output (the rest stays fetchable as an artifact).", policy=True)
@click.option(
    "--max-message-tokens",
    type=tokens_range(MIN_CAP),
    default=4000,
    show_default=True,
    help="Cap for an over-long user or assistant message.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["openai", "anthropic", "text"]),
    default="openai",
    show_default=True,
    help="Output format.",
)
@at_option("Build it as of this log position (replay).")
@click.option("--cap-open-run", is_flag=True, help="Cap tool outputs of the open run too.")
@modes_option(
    "TOOL=MODE, repeatable: which stored view of a long output to show (simple, auto, custom:NAME) "
    "over the session's policy; a view not made yet shows the simple cap. Never writes."
)
@index_option()
@click.option("--manifest", is_flag=True, help="Also print what went in: events, modes, tokens.")
@click.option("--record", is_flag=True, help="Append a context_built event with the manifest.")
@click.option(
    "--calibrate-for",
    "calibrate_for",
    metavar="MODEL",
    help="Divide the budget by MODEL's billed ÷ estimated ratio as of the build position "
    "(for a model whose tokenizer is not the store's; see `turnlog audit`).",
)
@cache_stable_options(
    "Keep the prompt cache warm: the context starts with the previous call's unchanged while the "
    "budget allows, and its start moves only when it must (default: the session policy's)."
)
@json_option
@pass_ctx
def context(
    ctx: _Context,
    session: str,
    budget: int | None,
    max_tool_tokens: int | None,
    max_message_tokens: int,
    fmt: str,
    at: int | None,
    cap_open_run: bool,
    tool_modes: tuple[tuple[str, str], ...],
    index: bool,
    manifest: bool,
    record: bool,
    calibrate_for: str | None,
    cache_stable: bool | None,
    refill_to: float | None,
    as_json: bool,
) -> None:
    """Build the context to send to the model for SESSION under a token budget.

    System messages, the first user message and pinned messages are always kept; then, when the
    session has artifacts, their index (one line each; at most half the budget); then the newest
    messages. Tool calls stay with their results; outputs are capped by tokens. The openai and
    anthropic formats print JSON; text is for people.

    With --cache-stable, each call's context starts with the previous call's context, byte for
    byte, until the budget is exceeded; then its start moves once, leaving it at --refill-to of the
    budget. --format anthropic then marks cache_control breakpoints.

    \b
    Examples:
      turnlog context chat-1 --budget 8000 --format anthropic --manifest
      turnlog context chat-1 --budget 8000 --format text --no-index
      turnlog context chat-1 --budget 8000 --cache-stable --format anthropic
    """
    with ctx.open() if record else ctx.read() as store:
        budget, max_tool_tokens = policy_defaults(store, session, budget, max_tool_tokens)
        cache = cache_defaults(store, session, cache_stable, refill_to)
        policy = ContextPolicy(
            budget=budget,
            max_tool_tokens=max_tool_tokens,
            max_message_tokens=max_message_tokens,
            format=fmt,
            cap_open_run=cap_open_run,
            tool_output_modes=as_modes(tool_modes),
            index=index,
            calibrate=calibrate_for is not None,
            **cache,
        )
        built = build_context(store, session, policy, at=at, record=record, model=calibrate_for)
    if fmt == "text" and not as_json:
        echo(built.rendered)
        if manifest:
            echo("\n" + _manifest_table(built.manifest()))
        return
    data: Any = built.rendered
    if manifest or as_json:
        data = {"messages": built.rendered, "manifest": built.manifest()}
    emit(data, as_json=True)


def _manifest_table(manifest: dict[str, Any]) -> str:
    rows = [
        {
            "#": i,
            "role": e["role"],
            "mode": e["mode"],
            "category": e["category"],
            "tokens": e["tokens"],
            "events": ",".join(x[:12] for x in e["event_ids"]),
        }
        for i, e in enumerate(manifest["entries"], 1)
    ]
    head = f"{manifest['total_tokens']:,} of {manifest['budget']:,} tokens ({manifest['tokenizer']})"
    if manifest["omitted_messages"] is not None:  # None: a manifest alone does not say
        head += f", {manifest['omitted_messages']:,} messages left out"
    if manifest.get("cut") is not None:
        head += f"; cache-stable, the history starts at version {manifest['cut']:,}"
    return head + "\n" + table(rows, ["#", "role", "mode", "category", "tokens", "events"])


@cli.command()
@click.argument("session")
@at_option()
@json_option
@pass_ctx
def artifacts(ctx: _Context, session: str, at: int | None, as_json: bool) -> None:
    """List SESSION's artifacts: files written and tool outputs kept whole.

    \b
    Example:
      turnlog artifacts chat-1
    """
    with ctx.read() as store:
        found = list_artifacts(store, session, at=at)
    if as_json:
        emit([dataclasses.asdict(a) for a in found], as_json=True)
        return
    rows = [
        {
            "id": a.short_id,
            "source": a.source,
            "name": short(a.name, 40),
            "type": a.media_type,
            "bytes": a.size,
            "tokens": a.tokens if a.tokens_exact else f"~{a.tokens}",
            "pos": a.position,
        }
        for a in found
    ]
    emit(rows, as_json=False, columns=["id", "source", "name", "type", "bytes", "tokens", "pos"])


@cli.command()
@click.argument("artifact_id")
@click.option("--offset", type=int_range(0), default=0, help="First line (0-based).")
@click.option("--limit", type=int_range(1), default=200, show_default=True, help="Lines.")
@click.option("--max-tokens", type=tokens_range(1), help="Fewer lines so the page fits.")
@json_option
@pass_ctx
def artifact(
    ctx: _Context, artifact_id: str, offset: int, limit: int, max_tokens: int | None, as_json: bool
) -> None:
    """Print an artifact's content by id (or a unique prefix of 8+ characters), a page of lines
    at a time; the notice says which offset comes next.

    \b
    Example:
      turnlog artifact 3f9a1c2b7d4e --offset 200 --limit 100
    """
    with ctx.read() as store:
        page = read_artifact(store, artifact_id, offset=offset, limit=limit, max_tokens=max_tokens)
    emit(dataclasses.asdict(page), as_json=as_json, text=page.render())


@cli.command()
@click.argument("session")
@at_option()
@click.option("--max-chars", type=int_range(200), default=32768, show_default=True)
@json_option
@pass_ctx
def index(ctx: _Context, session: str, at: int | None, max_chars: int, as_json: bool) -> None:
    """Print the one-line-per-artifact index an agent reads before fetching what it needs.

    \b
    Example:
      turnlog index chat-1
    """
    with ctx.read() as store:
        text = artifact_index(store, session, at=at, max_chars=max_chars)
    emit({"index": text}, as_json=as_json, text=text)


@cli.command()
@click.argument("session")
@at_option()
@click.option("--history", is_flag=True, help="Every version of the list, oldest first.")
@click.option(
    "--write",
    "source",
    type=click.File("rb"),
    help="Replace the list with JSON read from FILE ('-': standard input): a list of strings or "
    'of {"content", "status", "id"} objects.',
)
@json_option
@pass_ctx
def todos(ctx: _Context, session: str, at: int | None, history: bool, source: Any, as_json: bool) -> None:
    """Show SESSION's todo list as the checklist given to the model, or replace it with --write.

    \b
    Examples:
      turnlog todos chat-1
      echo '["write the test", {"content": "fix it", "status": "in_progress"}]' \\
        | turnlog todos chat-1 --write -
    """
    if source is not None:
        text = read_text(source)
        check_json_depth(text, "--write")
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise click.ClickException(f"--write: malformed JSON: {exc.msg}") from None
        if not isinstance(items, list):
            raise click.ClickException("--write: expected a JSON list of todo items")
        with ctx.open(create=True) as store:
            write_todos(store, session, items)
            current = current_todos(store, session)
        emit([i.model_dump() for i in current], as_json=as_json, text=render_checklist(current))
        return
    with ctx.read() as store:
        if history:
            snapshots = todo_history(store, session, at=at)
            data = [
                {"position": h.position, "version": h.version, "items": [i.model_dump() for i in h.items]}
                for h in snapshots
            ]
            text = "\n\n".join(
                f"version {h.version} (position {h.position}):\n{render_checklist(h.items)}"
                for h in snapshots
            )
            emit(data, as_json=as_json, text=text or "no todo list yet")
            return
        current = current_todos(store, session, at=at)
    emit([i.model_dump() for i in current], as_json=as_json, text=render_checklist(current))


@cli.command("audit")
@click.argument("session", required=False)
@click.option(
    "--by",
    type=click.Choice(["session", "run", "model", "day", "category"]),
    default="session",
    show_default=True,
    help="How to group the rows.",
)
@click.option(
    "--prices",
    type=click.Path(dir_okay=False, exists=True),
    help="A price table (JSON, USD per million tokens) instead of genai-prices' prices.",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, writable=True),
    help="Also draw tokens and cost per call (with SESSION) or per day into FILE (.png or .svg; "
    "needs the plot extra).",
)
@json_option
@pass_ctx
def audit_(
    ctx: _Context, session: str | None, by: str, prices: str | None, plot: str | None, as_json: bool
) -> None:
    """Where the tokens went: billed usage (the agent's model calls and turnlog's summarizer calls),
    tokens appended, tokens sent per category, and cost: as billed by the source where it recorded
    one, and as priced by turnlog (genai-prices, each call at its date; unknown models unpriced).
    Then the agent's calls: billed input beside turnlog's estimate of what each was sent, exact or
    approximate (with a billed ÷ estimated calibration ratio per model).

    \b
    Examples:
      turnlog audit --by model
      turnlog audit chat-1 --by category
      turnlog audit chat-1 --plot spend.png
    """
    from turnlog.projections.cache_audit import CacheGrouping, cache_audit
    from turnlog.projections.estimates import audit_estimates

    if plot is not None:
        check_plot_path(plot)
    table_of_prices = load_prices(prices)
    with ctx.read() as store:
        report = audit(store, session, by=by, prices=table_of_prices)  # type: ignore[arg-type]
        estimates = audit_estimates(store, session, by)
        cache_by: CacheGrouping = by if by in ("run", "model") else "session"  # type: ignore[assignment]
        cache = cache_audit(store, session, cache_by, table_of_prices)
        if plot is not None:
            plot_spend(store, plot, session, table_of_prices)
    rows = [dataclasses.asdict(r) for r in (*report.rows, report.totals)]
    rows[-1]["key"] = "TOTAL"
    if as_json:
        emit(
            {
                "by": report.by,
                "session_id": report.session_id,
                "rows": rows[:-1],
                "totals": rows[-1],
                "summarization": dataclasses.asdict(report.summarization),
                "unknown_models": list(report.unknown_models),
                "prices": {"date": report.prices_date, "source": report.prices_source},
                "estimates": {
                    "rows": [dataclasses.asdict(r) for r in estimates.rows],
                    "totals": dataclasses.asdict(estimates.totals),
                    "calibration": estimates.calibration,
                },
                "cache": {
                    "by": cache.by,
                    "rows": [dataclasses.asdict(r) for r in cache.rows],
                    "totals": dataclasses.asdict(cache.totals),
                },
            },
            as_json=True,
        )
        return
    text = _audit_text(report, rows, prices, plot) + _estimates_text(estimates) + _cache_text(cache)
    emit(rows, as_json=False, text=text)


def _cache_text(cache: Any) -> str:
    """The prompt cache (projections.cache_audit), when the provider billed cache reads or writes or
    contexts were built cache-stable."""
    totals = cache.totals
    if not (totals.cache_read or totals.cache_write or cache.cache_stable):
        return ""

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    rows = [
        {
            cache.by: "TOTAL" if row is totals else (row.key if row.key is not None else "-"),
            "calls": row.calls,
            "input": row.input,
            "cache_read": row.cache_read,
            "cache_write": row.cache_write,
            "billed_cached": share(row.billed_share),
            "contexts": row.contexts,
            "predicted_cacheable": share(row.predicted_share),
            "saved": "unknown" if row.saved is None and row.calls else f"${row.saved or 0:,.4f}",
        }
        for row in (*cache.rows, totals)
    ]
    columns = [cache.by, "calls", "input", "cache_read", "cache_write", "billed_cached", "contexts"]
    columns += ["predicted_cacheable", "saved"]
    return (
        "\n\nprompt cache: input billed as cache reads and writes beside turnlog's predicted cacheable "
        "share (the leading run each recorded context shares with the previous one), and what the "
        "cache saved at the model's prices:\n" + table(rows, columns)
    )


def _estimates_text(report: Any) -> str:
    """The agent's calls: billed input beside turnlog's estimate (projections.estimates)."""
    if not report.totals.calls:
        return ""
    rows = []
    for row in (*report.rows, report.totals):
        rows.append(
            {
                report.by: "TOTAL" if row is report.totals else (row.key if row.key is not None else "-"),
                "calls": row.calls,
                "billed_input": row.billed_input,
                "estimated_input": row.estimated_input,
                "difference": row.difference,
                "estimate": "exact" if row.exact else "approximate",
            }
        )
    columns = [report.by, "calls", "billed_input", "estimated_input", "difference", "estimate"]
    text = "\n\nbilled input beside turnlog's estimate of what each call was sent:\n" + table(rows, columns)
    for model, ratio in report.calibration.items():
        text += f"\ncalibration {model}: billed ÷ estimated = {ratio:.3f} (its tokenizer is not the store's)"
    return text


def _audit_text(report: AuditReport, rows: list[dict[str, Any]], prices: str | None, plot: str | None) -> str:
    by = report.by
    partial = False
    for row in rows:
        row[by] = row.pop("key") if row["key"] is not None else "-"
        row["billed cost"] = _usd(row["billed_cost"])
        if row["billed_cost"] is not None and row["billed_calls"] != row["calls"]:
            row["billed cost"] += "*"
            partial = True
        row["priced"] = "unknown" if row["calls"] and row["cost"] is None else _usd(row["cost"])
    billed = ["calls", "input", "output", "cache_read", "reasoning"]
    costs = ["billed cost", "priced"] if any(r["billed_cost"] is not None for r in rows) else ["priced"]
    columns = [by, *billed, "appended", "sent", *costs]
    spent = report.summarization
    if by == "category":  # billed categories are listed when summarizers were billed
        columns = [by, *billed, "contexts", "sent", *costs] if spent.calls else [by, "contexts", "sent"]
    text = table(rows, columns)
    if by != "category" or spent.calls:
        origin = f"of {report.prices_date} from {prices}" if prices else report.prices_source
        billed_note = "billed cost: as the sources recorded it; " if len(costs) == 2 else ""
        text += f"\n(USD; {billed_note}priced: with the prices {origin})"
    if partial:
        text += "\n* the source recorded a cost for only some of these calls"
    if spent.calls:
        text += (
            f"\nsummarization: {spent.calls:,} summarizer call{'s' if spent.calls != 1 else ''}, "
            f"{spent.input or 0:,} input + {spent.output or 0:,} output tokens, "
            f"{_usd(spent.cost) or 'cost unknown'} of {_usd(report.totals.cost) or 'an unknown total'}"
        )
        if spent.cost is not None and report.totals.cost:
            text += f" ({spent.cost / report.totals.cost:.1%})"
    if report.unknown_models:
        text += "\nno price for: " + ", ".join(report.unknown_models)
    if plot is not None:
        text += f"\nplot written to {plot}"
    return text


def _usd(cost: float | None) -> str:
    return "" if cost is None else f"${cost:.4f}"
