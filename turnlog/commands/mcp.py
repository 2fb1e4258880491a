"""`turnlog mcp`: the agent-facing tool served over MCP on stdio, for one session."""

from __future__ import annotations

import click

from turnlog.cli_group import CommandError, _Context, cli, pass_ctx
from turnlog.output import tokens_range
from turnlog.projections.artifact_index import INDEX_MAX_CHARS
from turnlog.tool import DEFAULT_MAX_TOKENS, MIN_MAX_TOKENS

MCP_MISSING = "turnlog mcp needs the mcp package, which is not installed: pip install 'turnlog[mcp]'"

# What a missing `mcp` extra looks like when importing the server (its SDK and the SDK's own
# dependencies); any other missing module is a bug to be seen with its traceback.
_MCP_PACKAGES = ("mcp", "mcp_types", "anyio")


@cli.command()
@click.option("--session", "session", required=True, help="The session the tool serves (it must exist).")
@click.option(
    "--max-tokens",
    type=tokens_range(MIN_MAX_TOKENS),
    help="Tokens a result may have (it is capped, and says how to get the rest); default: "
    f"{DEFAULT_MAX_TOKENS:,}, and for artifacts.index its own cap of {INDEX_MAX_CHARS:,} characters.",
)
@click.option(
    "--no-record",
    is_flag=True,
    help="Do not record the calls and their results in the log, only what they write (todos, pins): "
    "for a client that logs its agent's tool calls itself.",
)
@pass_ctx
def mcp(ctx: _Context, session: str, max_tokens: int | None, no_record: bool) -> None:
    """Serve the agent-facing tool for the session named by --session over MCP on standard input
    and output (stdio), until the client disconnects.

    One tool, `turnlog`, with the envelope schema of `turnlog tool schema`; each call goes through
    the same code as `turnlog tool call` and is recorded in the session's log the same way (unless
    --no-record). A refused call is an MCP tool result with isError and the tool's own error text,
    never a protocol error. A client that has already logged the call can name its id in the
    request's _meta under "turnlog/tool_call_id": the call is then answered exactly once per id,
    as with `turnlog tool call --tool-call-id`.

    There is no --json: standard output carries the MCP protocol (JSON-RPC). A missing store or
    session (or a file that is no store) is reported on one line, with exit status 1, before
    anything is served. Needs the `mcp` extra: pip install 'turnlog[mcp]'.

    \b
    Example (a desktop MCP client's command line):
      turnlog --db agent.db mcp --session fix-rounding
    """
    try:
        from turnlog.mcp_server import serve_stdio
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in _MCP_PACKAGES:
            raise CommandError(MCP_MISSING, "missing_extra") from exc
        raise
    serve_stdio(ctx.db, session, max_tokens=max_tokens, record=not no_record)
