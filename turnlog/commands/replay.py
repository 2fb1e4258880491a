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
from turnlog.projections.context import BuiltContext, ContextPolicy
from turnlog.projections.replay import ModelCall, sent_context
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
    if show_call is not None:
        with ctx.read() as store:
            cache = cache_defaults(store, session, cache_stable, refill_to)
            policy = ContextPolicy(
                budget=budget, max_tool_tokens=max_tool_tokens, format="text", index=index, **cache
            )
            # Only that call's context (and the one before, for what changed) is built.
            found = replay_calls(store, session, policy, at=at, only=show_call)
            if not found:
                count = len(replay_calls(store, session, policy, at=at))
                raise click.ClickException(f"{session} has {count} model calls; there is no call {show_call}")
            built = sent_context(store, found[0], "openai" if as_json else "text")
        _show_call(found[0], built, as_json)
        return
    with ctx.read() as store:
        cache = cache_defaults(store, session, cache_stable, refill_to)
        policy = ContextPolicy(
            budget=budget, max_tool_tokens=max_tool_tokens, format="text", index=index, **cache
        )
        calls = replay_calls(store, session, policy, at=at)
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


def _show_call(call: ModelCall, built: BuiltContext | None, as_json: bool) -> None:
    """One call: the messages it was sent (rebuilt from its manifest when it has one), and for a
    recorded call the manifest's table, under a header with the budget the call was built with."""
    if as_json:
        data = call.to_dict()
        if built is not None:
            data["messages"] = built.rendered
        emit(data, as_json=True)
        return
    origin = "from its recorded manifest" if call.source == "manifest" else "rebuilt with the given policy"
    echo(
        f"call {call.number}: context as of position {call.at_position}, "
        f"{call.total_tokens:,} of {call.budget:,} tokens ({origin})\n"
    )
    if built is not None:
        echo(built.rendered)
    if call.manifest is not None:
        if built is None:
            echo(
                "(its messages cannot be rebuilt exactly from this store: "
                "the manifest alone says what was sent)"
            )
        manifest = {
            "entries": [e.model_dump() for e in call.entries],
            "total_tokens": call.total_tokens,
            "budget": call.budget,
            "tokenizer": call.manifest.tokenizer,
            "omitted_messages": built.omitted_messages if built is not None else None,
        }
        echo("\n" + _manifest_table(manifest))
