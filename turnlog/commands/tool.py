"""`turnlog tool`: the agent-facing tool from the command line: call it as the agent would, print its
definition for a provider, or print its cards."""

from __future__ import annotations

import sys
from typing import Any

import click

from turnlog.cli_group import _Context, cli, pass_ctx
from turnlog.output import emit, input_file_option, json_option, tokens_range
from turnlog.projections.artifact_index import INDEX_MAX_CHARS
from turnlog.store import load_tokenizer
from turnlog.tool import (
    DEFAULT_MAX_TOKENS,
    METHODS,
    MIN_MAX_TOKENS,
    PROVIDERS,
    Provider,
    help_card,
    invoke,
    tool_definition,
)


@cli.group()
def tool() -> None:
    """The agent-facing tool: one `turnlog` tool through which an agent reads its own log on demand
    (history, artifacts, todos) and writes its todo list and pins.

    \b
    Examples:
      turnlog tool schema --format anthropic
      echo '{"module": "history", "method": "read", "input": {"mode": "tail", "n": 5}}' \\
        | turnlog tool call chat-1
    """


@tool.command("call")
@click.argument("session")
@click.option(
    "--max-tokens",
    type=tokens_range(MIN_MAX_TOKENS),
    help="Tokens the result may have (it is capped, and says how to get the rest); default: "
    f"{DEFAULT_MAX_TOKENS:,}, and for artifacts.index its own cap of {INDEX_MAX_CHARS:,} characters.",
)
@click.option("--no-record", is_flag=True, help="Do not record the call and its result in the log.")
@click.option(
    "--tool-call-id",
    help="The call is already in the log under this id: append only its result (and what it writes). "
    "Safe to retry: the same id and input again print the first result and write nothing.",
)
@input_file_option("the envelope")
@json_option
@pass_ctx
def call_(
    ctx: _Context,
    session: str,
    max_tokens: int | None,
    no_record: bool,
    tool_call_id: str | None,
    source: Any,
    as_json: bool,
) -> None:
    """Call the tool for SESSION with the envelope read from standard input, as the agent would, and
    print the result the agent gets.

    The call and its result are recorded in the session's log (unless --no-record); a refused call
    prints its error message, writes nothing, and exits 1.

    \b
    Example:
      echo '{"module": "history", "method": "search", "input": {"query": "KWD"}}' \\
        | turnlog tool call fix-rounding
    """
    if no_record and tool_call_id is not None:
        raise click.UsageError("--no-record and --tool-call-id exclude each other")
    # Bytes as read: the tool itself answers an envelope that is not UTF-8 or nested too deeply
    # (recorded as the call's error result with --tool-call-id). The shell's final newline is not
    # part of the call.
    envelope: bytes = source.read().strip()
    with ctx.open() as store:
        result = invoke(
            store, session, envelope, max_tokens=max_tokens, record=not no_record, tool_call_id=tool_call_id
        )
    data = result.as_json()
    emit(data, as_json=as_json, text=result.text)
    if result.is_error:
        sys.exit(1)


@tool.command()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(PROVIDERS),
    default="openai",
    show_default=True,
    help="The provider: OpenAI function calling, or Anthropic tool use.",
)
def schema(fmt: str) -> None:
    """Print the tool's definition (name, description, JSON Schema) for a provider's API.

    \b
    Example:
      turnlog tool schema --format anthropic > turnlog_tool.json
    """
    provider: Provider = "anthropic" if fmt == "anthropic" else "openai"
    emit(tool_definition(provider), as_json=True)


@tool.command("help")
@click.argument("method", required=False, type=click.Choice(METHODS))
@click.option("--tokens", is_flag=True, help="Also print the text's size in tokens (cl100k_base).")
@json_option
def help_(method: str | None, tokens: bool, as_json: bool) -> None:
    """Print the tool's description (its index card), or with METHOD the full card of one method:
    what the agent gets from tool.help.

    \b
    Example:
      turnlog tool help history.read
    """
    text = help_card(method)
    size = load_tokenizer().count(text)
    emit(
        {"method": method, "text": text, "tokens": size},
        as_json=as_json,
        text=f"{text}\n({size:,} tokens)" if tokens else text,
    )
