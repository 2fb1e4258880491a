"""`turnlog replay`."""

from __future__ import annotations

import click

from turnlog.cli_group import _Context, cli, pass_ctx
from turnlog.commands.policy import cache_defaults, cache_stable_options
from turnlog.commands.projections import _manifest_table
from turnlog.output import (
    at_option,
    echo,
    emit,
    index_option,
    int_range,
    json_option,
    max_tool_tokens_option,
    table,
    tokens_range,
)
from turnlog.projections.context import ContextPolicy
from turnlog.projections.formats import render
from turnlog.projections.replay import replay as replay_calls


@cli.command()
@click.argument("session")
@click.option(
    "--budget",
    type=tokens_range(1),
    default=8000,
    show_default=True,
    help="Policy for calls without a recorded manifest: the budget.",
)
@max_tool_tokens_option("Policy for calls without a recorded manifest: the tool output cap.")
@index_option("Policy for calls without a recorded manifest: show the artifact index.")
@at_option("Only the calls made up to this log position.")
@click.option("--call", "show_call", type=int_range(1), help="Print the context of call N in full.")
@cache_stable_options(
    "Policy for calls without a recorded manifest: cache-stable contexts (default: the session policy's)."
)
@json_option
@pass_ctx
def replay(
    ctx: _Context,
    session: str,
    budget: int,
    max_tool_tokens: int,
    index: bool,
    at: int | None,
    show_call: int | None,
    cache_stable: bool | None,
    refill_to: float | None,
    as_json: bool,
) -> None:
    """Walk SESSION's model calls: what each was sent, its tokens, and what changed since the
    previous call (added, capped, summarized, dropped).

    A call is a `usage_recorded` (or, where no usage was recorded, an assistant message). Its context
    comes from the recorded manifest when there is one (`turnlog context --record`), otherwise it is
    rebuilt with the given policy as of just before the call's answer.

    \b
    Examples:
      turnlog replay chat-1 --budget 8000
      turnlog replay chat-1 --call 3 --json
    """
    with ctx.read() as store:
        cache = cache_defaults(store, session, cache_stable, refill_to)
        policy = ContextPolicy(
            budget=budget, max_tool_tokens=max_tool_tokens, format="text", index=index, **cache
        )
        calls = replay_calls(store, session, policy, at=at)
    if show_call is not None:
        chosen = next((c for c in calls if c.number == show_call), None)
        if chosen is None:
            raise click.ClickException(
                f"{session} has {len(calls)} model calls; there is no call {show_call}"
            )
        if as_json:
            data = chosen.to_dict()
            if chosen.context is not None:
                data["messages"] = render(chosen.context.messages, "openai")
            emit(data, as_json=True)
        elif chosen.context is not None:
            echo(f"call {chosen.number}: context as of position {chosen.at_position}, ", nl=False)
            echo(f"{chosen.total_tokens:,} tokens\n")
            echo(chosen.context.rendered)
        else:
            manifest = {
                "entries": [e.model_dump() for e in chosen.entries],
                "total_tokens": chosen.total_tokens,
                "budget": budget,
                "tokenizer": "recorded manifest",
                "omitted_messages": 0,
            }
            echo(f"call {chosen.number}: from its recorded manifest\n" + _manifest_table(manifest))
        return
    if as_json:
        emit([c.to_dict() for c in calls], as_json=True)
        return
    rows = [
        {
            "call": c.number,
            "at": c.at_position,
            "run": c.run_id or "",
            "from": c.source,
            "tokens": c.total_tokens,
            "billed": c.billed_input,
            "added": len(c.added),
            "capped": len(c.capped),
            "summarized": len(c.summarized),
            "dropped": len(c.dropped),
        }
        for c in calls
    ]
    columns = ["call", "at", "run", "from", "tokens", "billed", "added", "capped", "summarized", "dropped"]
    emit(rows, as_json=False, text=table(rows, columns) if rows else f"{session} has no model calls yet")
