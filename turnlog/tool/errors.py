"""The agent-facing tool's error messages: short and tool-native (what was wrong, the accepted shape, and
where the agent likely confused two methods, the one it probably meant). Never a traceback."""

from __future__ import annotations

import difflib
import json
from typing import Any

from pydantic import ValidationError

from turnlog.tool.cards import shape
from turnlog.tool.inputs import METHODS, MODULES, fields_of

CALL_SHAPE = '{"module": M, "method": N, "input": {...}}'
"""The envelope, as error messages show it."""

NOTHING_WRITTEN = "Nothing was written."

MAX_PROBLEMS = 5
"""Validation problems listed at most."""

SESSION_KEYS = frozenset({"session", "session_id", "sessionId"})
"""Keys a model may use to name a session, which a call cannot do."""

OWN_SESSION = "the tool serves only the session it was started for, so a call cannot name one"
"""Why a call naming a session is refused (the agent reads and writes its own log only)."""

_MODES = ("tail", "range", "event")
_MODE_WORDS = {
    "last": "tail",
    "latest": "tail",
    "recent": "tail",
    "versions": "range",
    "id": "event",
    "one": "event",
}
"""Words a model may use for a mode of history.read."""


class ToolInputError(Exception):
    """Input that is well formed but cannot be served (past the end, not a message, an unknown id):
    its message goes back to the agent as the tool's answer."""


def envelope_error(problem: str) -> str:
    """The call itself is malformed (not JSON, not an object, wrong keys)."""
    return (
        f"error: {problem}\nSend one JSON object: {CALL_SHAPE}; tool.help {{}} lists the methods. "
        f"{NOTHING_WRITTEN}"
    )


def unknown_module(module: str) -> str:
    hint = ""
    if "." in module and module in METHODS:
        head, name = module.split(".", 1)
        hint = f' Module and method are separate: {{"module": "{head}", "method": "{name}", ...}}.'
    else:
        same = [name for name in METHODS if name.split(".")[1] == module]
        close = difflib.get_close_matches(module, MODULES, n=1, cutoff=0.6)
        if same:
            hint = f" Did you mean {same[0]}?"
        elif close:
            hint = f" Did you mean {close[0]}?"
    return (
        f"error: unknown module {_show(module)}; the modules are {', '.join(MODULES)}.{hint}\n"
        f"tool.help {{}} lists every method. {NOTHING_WRITTEN}"
    )


def unknown_method(module: str, method: str) -> str:
    own = [name.split(".")[1] for name in METHODS if name.startswith(module + ".")]
    hint = ""
    same = [name for name in METHODS if name.split(".")[1] == method]
    if method == "help":
        hint = f' Did you mean tool.help {{"method": "{module}.{own[0]}"}}?'
    elif same:
        hint = f" Did you mean {same[0]}?"
    else:
        close = difflib.get_close_matches(method, own, n=1, cutoff=0.6) or [
            name.split(".")[1]
            for name in difflib.get_close_matches(f"{module}.{method}", METHODS, n=1, cutoff=0.7)
            if name.startswith(module + ".")
        ]
        if close:
            hint = f" Did you mean {module}.{close[0]}?"
    return (
        f"error: module {module} has no method {_show(method)}; its methods are {', '.join(own)}.{hint}\n"
        f"tool.help {{}} lists every method. {NOTHING_WRITTEN}"
    )


def input_error(method: str, problem: str) -> str:
    """The input is missing or not an object."""
    return f"error: {method}: {problem}\naccepted input: {shape(method)}\n{NOTHING_WRITTEN}"


def validation_error(method: str, data: dict[str, Any], exc: ValidationError) -> str:
    """The input does not match the method's model: each problem, the accepted shape, a hint."""
    problems = [_problem(method, error) for error in exc.errors(include_url=False)]
    shown = problems[:MAX_PROBLEMS]
    if len(problems) > MAX_PROBLEMS:
        shown.append(f"and {len(problems) - MAX_PROBLEMS} more")
    lines = [f"error: invalid input for {method}:", *(f"- {p}" for p in shown)]
    lines.append(f"accepted input: {shape(method)}")
    hint = suggest_method(method, data)
    if hint:
        lines.append(hint)
    lines.append(f'{NOTHING_WRITTEN} tool.help {{"method": "{method}"}} shows the full card.')
    return "\n".join(lines)


def suggest_method(method: str, data: dict[str, Any]) -> str | None:
    """``did you mean X?`` when the input looks made for another method: its fields belong to that
    method, or (for history.read) its mode names another method."""
    mode = data.get("mode")
    if method == "history.read" and isinstance(mode, str) and mode not in _MODES:
        if f"history.{mode}" in METHODS:
            return f"Did you mean history.{mode}?"
        close = difflib.get_close_matches(mode, _MODES, n=1, cutoff=0.5)
        meant = _MODE_WORDS.get(mode.lower()) or (close[0] if close else None)
        if meant:
            return f'Did you mean mode "{meant}"?'
    wanted = data.get("method")
    if method == "tool.help" and isinstance(wanted, str) and wanted not in METHODS:
        close = difflib.get_close_matches(wanted, METHODS, n=1, cutoff=0.6)
        if close:
            return f'Did you mean {{"method": "{close[0]}"}}?'
    given = set(data)
    extras = given - fields_of(method)
    if not extras:
        return None
    best: tuple[int, str] | None = None
    for other in METHODS:
        if other == method or not extras <= fields_of(other):
            continue
        score = len(given & fields_of(other)) - len(given - fields_of(other))
        if best is None or score > best[0]:
            best = (score, other)
    if best is None:
        return None
    fields = ", ".join(sorted(extras))
    return f"Did you mean {best[1]}? It takes {fields}."


def _problem(method: str, error: Any) -> str:
    parts = list(error["loc"])
    if method == "history.read" and parts and parts[0] in _MODES:
        parts = parts[1:]  # the union's tag: the mode is already known
    where = ""
    for part in parts:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    kind = error["type"]
    message = str(error["msg"])
    if kind == "extra_forbidden":
        message = "unknown field"
        if parts and parts[-1] in SESSION_KEYS:
            message = f"unknown field: {OWN_SESSION}; leave it out"
    elif kind == "missing":
        message = "required field is missing"
    elif kind == "union_tag_not_found":
        return f"mode: required; one of {', '.join(json.dumps(m) for m in _MODES)}"
    elif kind == "union_tag_invalid":
        tag = error.get("ctx", {}).get("tag")
        return f"mode: {_show(tag)} is not a mode; use one of {', '.join(json.dumps(m) for m in _MODES)}"
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        message = "must be a JSON object"
    elif kind == "value_error":
        message = message.removeprefix("Value error, ")
        return message if not where else f"{where}: {message}"
    else:
        message = f"{message} (got {_show(error.get('input'))})"
    return f"{where}: {message}" if where else message


def _show(value: Any, width: int = 40) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"
