"""The agent-facing tool served over MCP on stdio, for one session: one tool, ``turnlog``, whose calls
go through :func:`turnlog.tool.invoke`, the code path of ``turnlog tool call``.

Needs the ``mcp`` package (``pip install 'turnlog[mcp]'``); importing this module imports it, so the
CLI imports this module only inside the ``mcp`` command."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from turnlog import open_store
from turnlog.store import Store, StoreError
from turnlog.tool import TOOL_NAME, description, invoke, parameters_schema

__all__ = [
    "OUTPUT_SCHEMA",
    "TOOL_CALL_ID_META",
    "McpAnswer",
    "answer",
    "build_server",
    "serve_stdio",
    "tool_listing",
]

TOOL_CALL_ID_META = "turnlog/tool_call_id"
"""The ``_meta`` key of a ``tools/call`` request through which a client that already logged the
call (an assistant message holding a ``turnlog`` tool call of that id) names it: the server then
appends only the call's effects and its result, exactly once per id, as ``turnlog tool call
--tool-call-id`` does. Without it each request is a new call (MCP gives no retry key of its own:
JSON-RPC request ids restart with every connection)."""

_RECORDED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "position": {"type": "integer", "description": "The event's position in the store's log."},
        "version": {"type": "integer", "description": "The event's version in the session."},
        "type": {"type": "string", "description": "The event's type."},
        "event_id": {"type": "string", "description": "The event's id."},
    },
    "required": ["position", "version", "type", "event_id"],
    "additionalProperties": False,
}

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "result": {"type": "string", "description": "The result text (the same as the text content)."},
        "is_error": {"type": "boolean", "description": "True when the call was refused."},
        "method": {
            "type": ["string", "null"],
            "description": "The module.method called, when the call named a known one.",
        },
        "retried": {
            "type": "boolean",
            "description": "True for a repeated call id already answered: the first result, nothing written.",
        },
        "recorded": {
            "type": "array",
            "items": _RECORDED_SCHEMA,
            "description": "The events this call appended to the session's log.",
        },
    },
    "required": ["result", "is_error", "method", "retried", "recorded"],
    "additionalProperties": False,
}
"""The structured result of every call: what ``turnlog tool call --json`` prints."""


def tool_listing() -> types.Tool:
    """The one tool: the envelope schema of ``turnlog tool schema`` unchanged, the index card as its
    description, and the structured result's schema."""
    return types.Tool(
        name=TOOL_NAME,
        description=description(),
        input_schema=parameters_schema(),
        output_schema=OUTPUT_SCHEMA,
    )


@dataclass(frozen=True, slots=True)
class McpAnswer:
    """One call's answer, before it becomes an MCP ``CallToolResult``."""

    text: str
    """What the model reads: the tool's result or error text."""
    structured: dict[str, Any]
    """The answer as data (see :data:`OUTPUT_SCHEMA`)."""
    is_error: bool
    """True when the call was refused."""


def answer(
    store: Store,
    session_id: str,
    name: str,
    arguments: dict[str, Any] | None,
    meta: dict[str, Any] | None = None,
    *,
    max_tokens: int | None = None,
    record: bool = True,
) -> McpAnswer:
    """Serve one ``tools/call`` request for ``session_id`` through :func:`turnlog.tool.invoke`.

    Every problem the caller can correct comes back as an error answer, never raised: an unknown
    tool name, a malformed envelope, invalid input, a store error during the call (a busy store, a
    call id reused for another input). ``meta`` is the request's ``_meta``; a string under
    :data:`TOOL_CALL_ID_META` names a call the client has already logged."""
    if name != TOOL_NAME:
        return _error(f"error: unknown tool {name!r}: this server has one tool, {TOOL_NAME}.")
    call_id = (meta or {}).get(TOOL_CALL_ID_META)
    if call_id is not None and not isinstance(call_id, str):
        return _error(f"error: _meta[{TOOL_CALL_ID_META!r}] must be a string (a tool call id).")
    if call_id is not None and not record:
        return _error(
            f"error: _meta[{TOOL_CALL_ID_META!r}] asks to record the call's result, but this server "
            "was started with --no-record."
        )
    try:
        result = invoke(
            store,
            session_id,
            {} if arguments is None else arguments,
            max_tokens=max_tokens,
            record=record,
            tool_call_id=call_id,
        )
    except StoreError as exc:
        return _error(f"error: {exc}")
    return McpAnswer(result.text, result.as_json(), result.is_error)


def _error(text: str) -> McpAnswer:
    data = {"result": text, "is_error": True, "method": None, "retried": False, "recorded": []}
    return McpAnswer(text, data, True)


def build_server(
    store: Store, session_id: str, *, max_tokens: int | None = None, record: bool = True
) -> Server[Any]:
    """The MCP server (the SDK's low-level one, so the tool's schema is sent as it is and the
    arguments reach the tool unvalidated: its own errors are the ones the model learns from)."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool_listing()])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # Served in the event loop's thread, one call at a time: the store's connection belongs
        # to this thread, and a stdio client has one conversation to serve.
        meta = dict(params.meta) if params.meta else None
        got = answer(
            store, session_id, params.name, params.arguments, meta, max_tokens=max_tokens, record=record
        )
        return types.CallToolResult(
            content=[types.TextContent(text=got.text)],
            structured_content=got.structured,
            is_error=got.is_error,
        )

    return Server(
        "turnlog",
        version=version("turnlog"),
        instructions=f"The turnlog log of session {session_id!r}: call the {TOOL_NAME} tool, "
        "tool.help {} first to see its methods.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def serve_stdio(db: str, session_id: str, *, max_tokens: int | None = None, record: bool = True) -> None:
    """Open the store at ``db``, check the session exists (StoreError if not, before anything is
    served), and serve the tool for it on standard input and output until the client disconnects."""
    with open_store(db, create=False) as store:
        store.require_session(session_id)
        server = build_server(store, session_id, max_tokens=max_tokens, record=record)

        async def run() -> None:
            async with stdio_server() as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())

        anyio.run(run)
