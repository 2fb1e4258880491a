"""The agent-facing tool: one tool, ``turnlog``, through which an agent reads its own session log on
demand (earlier history, full tool outputs, artifacts, todos) and writes its todo list and pins.

Every call is one envelope, ``{"module": ..., "method": ..., "input": {...}}``; :func:`call` serves it
and records it in the log, :func:`tool_definition` exports the tool for OpenAI or Anthropic."""

from turnlog.tool.cards import TOOL_NAME, description, help_card, input_schema, shape
from turnlog.tool.dispatch import (
    DEFAULT_MAX_TOKENS,
    MIN_MAX_TOKENS,
    Envelope,
    ToolResult,
    call,
    call_recorded,
    invoke,
)
from turnlog.tool.inputs import INPUTS, METHODS, MODULES
from turnlog.tool.schema import PROVIDERS, Provider, parameters_schema, tool_definition

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "INPUTS",
    "METHODS",
    "MIN_MAX_TOKENS",
    "MODULES",
    "PROVIDERS",
    "TOOL_NAME",
    "Envelope",
    "Provider",
    "ToolResult",
    "call",
    "call_recorded",
    "description",
    "help_card",
    "input_schema",
    "invoke",
    "parameters_schema",
    "shape",
    "tool_definition",
]
