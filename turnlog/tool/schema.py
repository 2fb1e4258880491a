"""The tool's definition for providers: OpenAI function calling and Anthropic tool use. The schema
names the envelope only (module, method, input; all three required, none nullable); each method's
input schema is disclosed on demand by tool.help, so the definition stays small."""

from __future__ import annotations

from typing import Any, Literal

from turnlog.tool.cards import TOOL_NAME, description
from turnlog.tool.inputs import METHODS, MODULES

Provider = Literal["openai", "anthropic"]
PROVIDERS: tuple[Provider, ...] = ("openai", "anthropic")


def parameters_schema() -> dict[str, Any]:
    """The JSON Schema of the tool's arguments: the envelope."""
    methods = sorted({name.split(".")[1] for name in METHODS})
    return {
        "type": "object",
        "properties": {
            "module": {"type": "string", "enum": list(MODULES), "description": "The module."},
            "method": {
                "type": "string",
                "enum": methods,
                "description": "The method of that module (see the list above).",
            },
            "input": {
                "type": "object",
                "description": "The method's input ({} if it takes nothing); tool.help shows its schema.",
            },
        },
        "required": ["module", "method", "input"],
        "additionalProperties": False,
    }


def tool_definition(provider: Provider = "openai") -> dict[str, Any]:
    """The tool as a provider's API takes it: ``{"type": "function", "function": {...}}`` for OpenAI
    chat completions, ``{"name", "description", "input_schema"}`` for Anthropic messages."""
    if provider == "openai":
        return {
            "type": "function",
            "function": {"name": TOOL_NAME, "description": description(), "parameters": parameters_schema()},
        }
    if provider == "anthropic":
        return {"name": TOOL_NAME, "description": description(), "input_schema": parameters_schema()}
    raise ValueError(f"unknown provider {provider!r}; use one of {', '.join(PROVIDERS)}")
