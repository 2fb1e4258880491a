"""`turnlog policy`: a session's run-time policy, set once and stored as an event; and the loop's
report after a CLI append that finished a run."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from turnlog.cli_group import _Context, cli, pass_ctx
from turnlog.config import BUILT_IN, ConfigError, load_config
from turnlog.output import echo, emit, int_range, json_option, tokens_range
from turnlog.store import MAX_TOKENS, RecordedEvent, SessionPolicy, Store
from turnlog.store.events_policy import check_output_mode

DEFAULT_TOOL_CAP = 1000
"""The tool output cap of a context when neither the command nor the policy sets one."""

if TYPE_CHECKING:
    _ParamType = click.ParamType[tuple[str, str]]
else:  # click before 8.2 has no subscriptable ParamType
    _ParamType = click.ParamType


class ToolMode(_ParamType):
    """``TOOL=MODE``: a tool name (``default`` for the rest) and simple, auto or custom:NAME."""

    name = "TOOL=MODE"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        tool, sep, mode = str(value).partition("=")
        if not sep or not tool.strip() or len(tool) > 200:
            self.fail(f"{value!r} is not TOOL=MODE (e.g. search=auto, default=simple)", param, ctx)
        try:
            check_output_mode(mode)
        except ValueError as exc:
            self.fail(f"{tool}: {exc}", param, ctx)
        return tool, mode


TOOL_MODE = ToolMode()


F = TypeVar("F", bound=Callable[..., Any])


def modes_option(help: str) -> Callable[[F], F]:
    return click.option("--tool-output-mode", "tool_modes", type=TOOL_MODE, multiple=True, help=help)


def cache_stable_options(help: str) -> Callable[[F], F]:
    """``--cache-stable/--no-cache-stable`` and ``--refill-to F`` (unset: the session policy's)."""

    def decorate(command: F) -> F:
        command = click.option(
            "--refill-to",
            type=click.FloatRange(0, 1, min_open=True),
            metavar="F",
            help="With --cache-stable: the share of the budget a context is left at when its start "
            "moves (default 0.4).",
        )(command)
        return click.option("--cache-stable/--no-cache-stable", default=None, help=help)(command)

    return decorate


def as_modes(pairs: Sequence[tuple[str, str]]) -> dict[str, str] | None:
    """The repeated ``TOOL=MODE`` options as a mapping (the last one of a tool wins); None when none."""
    return dict(pairs) if pairs else None


@cli.command()
@click.argument("session")
@click.option(
    "--budget", type=tokens_range(1), help="Context budget of the session's contexts and compaction."
)
@click.option(
    "--compact-on-run-end/--no-compact-on-run-end",
    default=None,
    help="Compact the session when a run finishes (with the summarizer, to the budget).",
)
@click.option(
    "--summarizer",
    metavar="NAME",
    help=f"{BUILT_IN} (built in) or a [summarizers.NAME] of the local configuration ($TURNLOG_CONFIG).",
)
@click.option("--max-tool-tokens", type=tokens_range(16), help="Threshold and inline cap of a tool output.")
@click.option(
    "--keep-last", type=int_range(0, MAX_TOKENS), help="Newest messages run-end compaction keeps raw (20)."
)
@modes_option(
    "TOOL=MODE, repeatable: simple (cap), auto (a summary by the summarizer) or custom:NAME (a "
    "[custom.NAME] of the local configuration); TOOL 'default' for every tool not named."
)
@click.option(
    "--condense-at",
    type=click.Choice(["append", "run_end"]),
    help="Make auto/custom views right after the output is appended (default) or when the run finishes.",
)
@cache_stable_options(
    "Build the session's contexts cache-stable: each call's context starts with the previous one's "
    "while the budget allows (for the provider's prompt cache)."
)
@click.option("--reset", is_flag=True, help="Start from an empty policy instead of the current one.")
@json_option
@pass_ctx
def policy(
    ctx: _Context,
    session: str,
    budget: int | None,
    compact_on_run_end: bool | None,
    summarizer: str | None,
    max_tool_tokens: int | None,
    keep_last: int | None,
    tool_modes: tuple[tuple[str, str], ...],
    condense_at: str | None,
    cache_stable: bool | None,
    refill_to: float | None,
    reset: bool,
    as_json: bool,
) -> None:
    """Show SESSION's run-time policy, or set it (any option given): the fields given replace the
    stored ones, the rest stay (--reset: start from nothing). The policy is an event of the log.

    It holds names only: what a summarizer or custom handler NAME runs, and where, is read from the
    local configuration of the machine running turnlog ($TURNLOG_CONFIG, default
    ~/.config/turnlog/config.toml), never from the log.

    \b
    Examples:
      turnlog policy chat-1 --compact-on-run-end --budget 8000 --summarizer extractive
      turnlog policy chat-1 --tool-output-mode search=auto --tool-output-mode default=simple
      turnlog policy chat-1 --budget 8000 --cache-stable --refill-to 0.6
      turnlog policy chat-1
    """
    from turnlog.loop import get_policy, set_policy

    fields: dict[str, Any] = {
        "budget": budget,
        "compact_on_run_end": compact_on_run_end,
        "summarizer": summarizer,
        "max_tool_tokens": max_tool_tokens,
        "keep_last": keep_last,
        "tool_output_modes": as_modes(tool_modes),
        "condense_at": condense_at,
        "cache_stable": cache_stable,
        "refill_to": refill_to,
    }
    given = {k: v for k, v in fields.items() if v is not None}
    if given or reset:
        update = SessionPolicy.model_validate(given)  # checks the names' form
        with ctx.open() as store:
            record = set_policy(store, session, update, replace=reset)
            current = get_policy(store, session)
        data = _data(session, current, record)
        emit(
            data,
            as_json=as_json,
            text=f"policy of {session} set (event {record.event_id[:12]})\n{_text(current)}",
        )
        _warn_unknown_names(current)
        return
    with ctx.read() as store:
        current = get_policy(store, session)
    emit(_data(session, current, None), as_json=as_json, text=_text(current))


def _data(session: str, policy: SessionPolicy, record: RecordedEvent | None) -> dict[str, Any]:
    data: dict[str, Any] = {"session_id": session, "policy": policy.model_dump()}
    if record is not None:
        data |= {"event_id": record.event_id, "position": record.position, "version": record.version}
    return data


def _text(policy: SessionPolicy) -> str:
    if policy == SessionPolicy():
        return "no policy set (defaults: no run-end compaction, every tool output simple)"
    modes = policy.tool_output_modes or {}
    lines = [
        f"budget:             {policy.budget:,}" if policy.budget else "budget:             (not set)",
        f"compact on run end: {'yes' if policy.compact_on_run_end else 'no'}",
        f"summarizer:         {policy.summarizer or BUILT_IN + ' (default)'}",
        f"max tool tokens:    {policy.max_tool_tokens or '(default)'}",
        f"keep last:          {'(default)' if policy.keep_last is None else policy.keep_last}",
        f"condense at:        {policy.condense_at or 'append (default)'}",
        "tool output modes:  "
        + (", ".join(f"{tool}={mode}" for tool, mode in modes.items()) or "(all simple)"),
    ]
    if policy.cache_stable is not None or policy.refill_to is not None:
        refill = f" (refill to {policy.refill_to:g})" if policy.refill_to is not None else ""
        lines.append(f"cache stable:       {'yes' if policy.cache_stable else 'no'}{refill}")
    return "\n".join(lines)


def _warn_unknown_names(policy: SessionPolicy) -> None:
    """A name the local configuration does not define works only where it is defined: say so."""
    try:
        config = load_config()
    except ConfigError as exc:
        echo(f"warning: {exc}", err=True)
        return
    names = [policy.summarizer] if policy.summarizer and policy.summarizer != BUILT_IN else []
    missing = [f"summarizer {n!r}" for n in names if n not in config.values.summarizers]
    for mode in (policy.tool_output_modes or {}).values():
        kind, _, name = mode.partition(":")
        if kind == "custom" and name not in config.values.custom:
            missing.append(f"custom handler {name!r}")
    if missing:
        echo(
            f"warning: {', '.join(sorted(set(missing)))} not defined in {config.where()}: the loop "
            "records a compaction_failed event where it runs without them",
            err=True,
        )


def cache_defaults(
    store: Store, session: str, cache_stable: bool | None, refill_to: float | None
) -> dict[str, Any]:
    """The ContextPolicy fields of ``--cache-stable`` and ``--refill-to``, the session policy's
    where they are not given."""
    given = refill_to
    if cache_stable is None or (cache_stable and refill_to is None):
        from turnlog.projections.runtime import session_policy

        stored = session_policy(store, session)
        cache_stable = bool(stored.cache_stable) if cache_stable is None else cache_stable
        refill_to = refill_to if refill_to is not None else stored.refill_to
    if not cache_stable:
        if given is not None:
            raise click.UsageError("--refill-to is for cache-stable contexts: add --cache-stable")
        return {}
    return {"cache_stable": True} | ({} if refill_to is None else {"refill_to": refill_to})


def policy_defaults(
    store: Store, session: str, budget: int | None, max_tool_tokens: int | None
) -> tuple[int, int]:
    """``--budget`` and ``--max-tool-tokens`` when given, else the session policy's (the cap: 1000
    when the policy sets none either)."""
    if budget is not None and max_tool_tokens is not None:
        return budget, max_tool_tokens
    from turnlog.projections.runtime import session_policy

    store.require_session(session)
    stored = session_policy(store, session)
    budget = budget if budget is not None else stored.budget
    if budget is None:
        raise click.UsageError(
            f"--budget is required: session {session!r} has no policy budget "
            f"(set one with `turnlog policy {session} --budget N`)"
        )
    if max_tool_tokens is not None:
        return budget, max_tool_tokens
    # A stored cap below the builder's least (a policy takes 16 and up) is read as that least.
    from turnlog.projections.capping import MIN_CAP

    cap = stored.max_tool_tokens
    return budget, max(MIN_CAP, cap) if cap is not None else DEFAULT_TOOL_CAP


def report_loop(store: Store, session: str, records: Sequence[RecordedEvent]) -> None:
    """After a CLI append: the loop's work (run-end compaction, condensed outputs); its failures are
    recorded as events and said on standard error (the append itself stands)."""
    from turnlog.loop import after_commit, log

    if not log.handlers:  # the warnings below say it once, in the CLI's own words
        log.addHandler(logging.NullHandler())
    report = after_commit(store, session, records)
    for line in report.errors:
        echo(f"warning: {line} (the appended events are stored; see `turnlog log {session}`)", err=True)
