"""`turnlog compact` and `turnlog summaries`."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import click

from turnlog.cli_group import _Context, cli, pass_ctx
from turnlog.compaction import CompactionOptions, compact
from turnlog.output import (
    at_option,
    echo,
    emit,
    int_range,
    json_option,
    max_tool_tokens_option,
    table,
    tokens_range,
)
from turnlog.progress import ProgressBar
from turnlog.projections.context import ContextPolicy
from turnlog.projections.summaries import list_summaries
from turnlog.store import SummaryRecorded
from turnlog.summarizers import CommandSummarizer, ExtractiveSummarizer, OpenAISummarizer, Summarizer


@cli.command("compact")
@click.argument("session")
@click.option("--budget", type=tokens_range(1), required=True, help="The context budget to fit.")
@click.option(
    "--summarizer",
    type=click.Choice(["extractive", "openai", "command"]),
    default="extractive",
    show_default=True,
    help="Who writes the summaries (extractive: offline and deterministic).",
)
@click.option(
    "--keep-last", type=int_range(0), default=20, show_default=True, help="Newest messages kept raw."
)
@click.option(
    "--trigger",
    type=click.FloatRange(0, 1, min_open=True),
    default=0.85,
    show_default=True,
    help="Compact when the context would need more than this share of the budget.",
)
@click.option(
    "--summary-tokens",
    type=tokens_range(32),
    default=400,
    show_default=True,
    help="Target size of each summary.",
)
@max_tool_tokens_option("Tool output cap of the contexts to fit (as for `turnlog context`).")
@click.option("--model", help="openai: the model.")
@click.option("--base-url", default="https://api.openai.com/v1", show_default=True, help="openai: endpoint.")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True, help="openai: key variable.")
@click.option("--command", "command_line", help="command: the program (reads the transcript on stdin).")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1, max=86400),
    default=60.0,
    show_default=True,
    help="openai/command: seconds before giving up.",
)
@click.option("--during-run", is_flag=True, help="Compact even while a run is open.")
@click.option("--dry-run", is_flag=True, help="Only say what would be summarized and the tokens saved.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option(
    "--allow-over-budget",
    is_flag=True,
    help="Exit 0 even when the context still needs more than the budget (the warning stays).",
)
@json_option
@pass_ctx
def compact_(
    ctx: _Context,
    session: str,
    budget: int,
    summarizer: str,
    keep_last: int,
    trigger: float,
    summary_tokens: int,
    max_tool_tokens: int,
    model: str | None,
    base_url: str,
    api_key_env: str,
    command_line: str | None,
    timeout: float,
    during_run: bool,
    dry_run: bool,
    quiet: bool,
    allow_over_budget: bool,
    as_json: bool,
) -> None:
    """Summarize SESSION's oldest messages so its context fits BUDGET.

    Summaries are events: the raw messages stay in the log, contexts built earlier are unchanged,
    and a failing summarizer appends nothing. Four adjacent summaries of one level are condensed into
    one of the next; a last, deterministic tier truncates. By default compaction waits for the open
    run to finish.

    It reports the tokens of the whole context before and after (measured by building it; a dry
    run estimates the after) and the summaries it wrote. When the context still needs more than
    BUDGET (what is always kept, or the newest messages, are too big) it says so and exits 1,
    unless --allow-over-budget.

    \b
    Examples:
      turnlog compact chat-1 --budget 8000 --dry-run
      turnlog compact chat-1 --budget 8000 --summarizer openai --model gpt-4o-mini
      turnlog compact chat-1 --budget 8000 --summarizer command --command "./summarize.sh"
    """
    chosen: Summarizer
    if summarizer == "openai":
        if not model:
            raise click.UsageError("--summarizer openai needs --model")
        chosen = OpenAISummarizer(model, base_url=base_url, api_key_env=api_key_env, timeout=timeout)
    elif summarizer == "command":
        if not command_line:
            raise click.UsageError("--summarizer command needs --command")
        chosen = CommandSummarizer(command_line, timeout=timeout)
    else:
        chosen = ExtractiveSummarizer()
    policy = ContextPolicy(budget=budget, max_tool_tokens=max_tool_tokens)
    options = CompactionOptions(
        trigger=trigger, keep_last=keep_last, summary_tokens=summary_tokens, allow_open_run=during_run
    )
    # A bar once there are two summaries to make: each may be a model call of several seconds.
    bar = ProgressBar("summarizing", enabled=not quiet and not as_json, min_total=2)
    with ctx.read() if dry_run else ctx.open() as store, bar:
        result = compact(
            store, session, policy, chosen, options=options, dry_run=dry_run, progress=bar.update
        )
    steps = [
        {
            "step": s.kind,
            "versions": f"{s.first}–{s.last}",
            "level": s.level,
            "messages": s.messages,
            "replaces_tokens": s.covered_tokens,
        }
        for s in result.steps
    ]
    written: list[dict[str, Any]] = [
        {
            "event_id": r.event_id,
            "versions": f"{e.first_version}–{e.last_version}",
            "first_version": e.first_version,
            "last_version": e.last_version,
            "level": e.level,
            "tokens": e.tokens,
            "by": e.summarizer.name,
        }
        for r in result.appended
        if isinstance(e := r.event, SummaryRecorded)
    ]
    data: dict[str, Any] = {
        "session_id": session,
        "dry_run": dry_run,
        "budget": budget,
        "before_tokens": result.before_tokens,
        "after_tokens": result.after_tokens,
        "after_estimated": result.estimated,
        "met": result.met,
        "steps": steps,
        "summaries": written,
        "appended": [r.event_id for r in result.appended],
        "reason": result.reason,
        "over_budget": result.over_budget,
    }
    after = f"{'about ' if result.estimated else ''}{result.after_tokens:,}"
    if not steps:
        text = f"nothing to do: {result.reason} (the whole context needs {result.before_tokens:,} tokens)"
    else:
        verb = "would write" if dry_run else "wrote"
        text = (
            f"{verb} {len(steps)} summar{'y' if len(steps) == 1 else 'ies'}: the whole context needed "
            f"{result.before_tokens:,} tokens, {'would need' if dry_run else 'now needs'} {after} "
            f"(budget {budget:,})\n"
        )
        text += table(steps, ["step", "versions", "level", "messages", "replaces_tokens"])
        if written:
            text += "\n\nnew summaries:\n" + table(
                [dict(w, event_id=w["event_id"][:12]) for w in written],
                ["event_id", "versions", "level", "tokens", "by"],
            )
    emit(data, as_json=as_json, text=text)
    if not result.met:
        over = result.after_tokens - budget
        advice = (
            "--during-run compacts it now"
            if not steps and result.reason.startswith("run ")
            else "keep fewer messages raw (--keep-last), unpin some, or raise the budget"
        )
        echo(
            f"warning: over budget: the context {'would still need' if dry_run else 'still needs'} {after} "
            f"tokens, {over:,} more than the budget of {budget:,}: {result.over_budget}; {advice}",
            err=True,
        )
        if not allow_over_budget:
            sys.exit(1)


@cli.command("summaries")
@click.argument("session")
@at_option()
@json_option
@pass_ctx
def summaries_(ctx: _Context, session: str, at: int | None, as_json: bool) -> None:
    """Show SESSION's summary tree: levels, the versions each covers, and the tokens it saves.

    \b
    Example:
      turnlog summaries chat-1
    """
    with ctx.read() as store:
        found = list_summaries(store, session, at=at)
    if as_json:
        emit([dict(dataclasses.asdict(s), saved_tokens=s.saved_tokens) for s in found], as_json=True)
        return
    rows = [
        {
            "tree": "  " * (max(s.level for s in found) - s.level) + f"L{s.level}",
            "versions": f"{s.first_version}–{s.last_version}",
            "messages": s.covered_messages,
            "covered": s.covered_tokens,
            "summary": s.tokens,
            "saved": s.saved_tokens,
            "shown": "yes" if s.active else "replaced",
            "by": s.summarizer + (" (reused)" if s.reused else ""),
            "event": s.event_id[:12],
        }
        for s in found
    ]
    if not rows:
        emit([], as_json=False, text="no summaries yet (`turnlog compact` writes them)")
        return
    emit(
        rows,
        as_json=False,
        columns=["tree", "versions", "messages", "covered", "summary", "saved", "shown", "by", "event"],
    )
