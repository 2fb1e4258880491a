"""Progressive disclosure for the agent-facing tool: the index card that is the tool's description (one
line per method), the full card of one method (input schema, an example call, an example result), and
the compact input shapes that error messages quote."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from turnlog.projections.artifact_index import AGENT_TOOL
from turnlog.tool.inputs import INPUTS, METHODS

TOOL_NAME = AGENT_TOOL
"""The tool's name, in provider schemas and in the log's records of its calls."""


@dataclass(frozen=True, slots=True)
class Card:
    """What the tool tells a model about one method."""

    line: str
    """Its line on the index card: input fields in short, then what it does."""
    about: str
    """A few sentences for its full card: what it returns, paging, what it writes."""
    example: dict[str, Any]
    """An example input."""
    result: str
    """The result of that example on the coding session shipped in scripts/data (a test checks it;
    a result ending in ``...`` is a prefix of the real one)."""


CARDS: dict[str, Card] = {
    "artifacts.list": Card(
        line="{offset?, limit?} — artifacts (files written, large tool outputs): id, name, size",
        about="Lists the session's artifacts in log order: files written and tool outputs too large to "
        "keep inline, each with its id, source, name, lines and tokens. Pages with offset and limit.",
        example={"limit": 2},
        result="""\
Artifacts of this session: 1–2 of 6
- 3f1884d489ce · tool · `run_tests output call_01` · 63 lines, 679 tokens · v8
- 65b9ff4b97cb · tool · `grep output call_02` · 900 lines, 20,038 tokens · v11
[next: artifacts.list {"offset": 2, "limit": 2}; read one: artifacts.read {"id": ID}]""",
    ),
    "artifacts.index": Card(
        line="{} — one line per artifact: id, name, first words",
        about="The artifact index: one line per artifact, sorted by name, with the first words of its "
        "content (the context shows it too, after the system messages, cut to fit). Read one with "
        "artifacts.read.",
        example={},
        result="""\
Artifacts of session fix-rounding (6): fetch one with its id
- `5558fb5a6183` · user · `CHANGELOG.md` — ## Unreleased - Fix: invoice totals are rounded to each \
currency's minor unit (JPY, KWD, ...) with half-up rounding.
- `65b9ff4b97cb` · tool · `grep output call_02` — invoice/money.py:47: value = round(amount, 2) # \
discount invoice/pdf.py:377: value = round(total * rate, 2) # discount t…
...""",
    ),
    "artifacts.read": Card(
        line="{id, offset?, limit?} — a page of an artifact's lines",
        about="A page of an artifact's lines, from the 0-based line offset. Fewer lines are returned when "
        "the page would not fit the result's token cap; the notice at the end gives the next offset, "
        "so reading page after page never skips a line.",
        example={"id": "65b9ff4b97cb", "offset": 0, "limit": 2},
        result="""\
Artifact 65b9ff4b97cb · `grep output call_02` · 900 lines
invoice/money.py:47:    value = round(amount, 2)  # discount
invoice/pdf.py:377:    value = round(total * rate, 2)  # discount
[lines 1–2 of 900; next: offset=2]""",
    ),
    "history.read": Card(
        line='{mode: "tail", n?} | {mode: "range", from_version, to_version} | {mode: "event", event_id}'
        " — earlier messages",
        about="Earlier events of this session, with their versions and event ids. tail: the last n "
        "messages (tool returns count). range: versions from_version to to_version (at most 500). "
        "event: one event, whole. Long contents are capped, and say how to read them whole; a result "
        "that does not fit says which call shows the rest. Usage and context-build records are left "
        "out, and results of this tool are not repeated.",
        example={"mode": "range", "from_version": 19, "to_version": 21},
        result="""\
[v19 user · demo-0019]
Yes, fix it and add a regression test.
[v20 todos updated · demo-0020]
Todos: 2 of 3 completed, 1 in progress, 0 pending
- [x] Reproduce the wrong totals with the test suite (id: 1)
- [x] Find where amounts are rounded (id: 2)
- [~] Fix the rounding per currency and add a regression test (id: 3)
[v21 assistant · demo-0021]
→ write_file [call_04] {"path": "invoice/money.py"}
→ write_file [call_05] {"path": "tests/test_money_rounding.py"}
[versions 19–21 of 19–21 shown]""",
    ),
    "history.search": Card(
        line="{query, match?, role?, limit?, before_version?} — find text in messages and tool returns",
        about="Finds text (case-insensitive) in this session's messages and tool returns, newest first: "
        "each match with its version, role, event id and an excerpt. match all_words finds every word "
        "anywhere in one message. When there are more, the result gives the before_version of the "
        "next page. Read a match whole with history.read mode event.",
        example={"query": "KWD", "limit": 2},
        result="""\
Matches for "KWD", newest first:
- v31 assistant · demo-0031: …I added tests/test_money_rounding.py covering EUR, JPY and KWD. \
All 216 tests pass.
- v14 assistant · demo-0014: …also uses banker's rounding. JPY has no minor unit and KWD has three, \
so both come out wrong. The fix is to quantize to the currency's minor unit with…
[more: history.search {"query": "KWD", "limit": 2, "before_version": 14}]
[a match whole: history.read {"mode": "event", "event_id": "demo-0031"}]""",
    ),
    "todos.read": Card(
        line="{} — the todo list, with item ids",
        about="The session's todo list as a checklist: [ ] pending, [~] in progress, [x] completed, "
        "each with its id.",
        example={},
        result="""\
Todos: 3 of 3 completed, 0 in progress, 0 pending
- [x] Reproduce the wrong totals with the test suite (id: 1)
- [x] Find where amounts are rounded (id: 2)
- [x] Fix the rounding per currency and add a regression test (id: 3)""",
    ),
    "todos.write": Card(
        line="{todos: [{content, status?, id?}]} — replace the whole todo list",
        about="Replaces the whole todo list: give every item, in order, each with its content, status "
        "(pending, in_progress, completed; default pending) and the id todos.read shows (items "
        "without one are numbered). Returns the new checklist.",
        example={
            "todos": [
                {"id": "1", "content": "Add a CHANGELOG entry", "status": "completed"},
                {"content": "Run the linter", "status": "in_progress"},
            ]
        },
        result="""\
Todo list replaced.
Todos: 1 of 2 completed, 1 in progress, 0 pending
- [x] Add a CHANGELOG entry (id: 1)
- [~] Run the linter (id: 2)""",
    ),
    "context.pin": Card(
        line="{event_id, reason} — keep a message whole in every context",
        about="Pins a message (by the event id history results show, or a unique prefix of 6+ "
        "characters): every context built from now on keeps it, whole, however small its budget.",
        example={"event_id": "demo-0004", "reason": "the user's constraints"},
        result="pinned v4 user · demo-0004: every context keeps it whole from now on",
    ),
    "context.unpin": Card(
        line="{event_id, reason} — lift a pin",
        about="Lifts the pin of a message, so contexts may leave it out again when the budget is short.",
        example={"event_id": "demo-0014", "reason": "the fix is done"},
        result="unpinned v14 assistant · demo-0014: contexts may leave it out again",
    ),
    "tool.help": Card(
        line="{method} — a method's full card: input schema, example call and result",
        about="The full card of one method: what it does, its input's JSON Schema, an example call "
        "and its result. Without method, the index of all methods.",
        example={"method": "history.read"},
        result="history.read — Earlier events of this session, ... (this card, for that method)",
    ),
}


def description() -> str:
    """The tool's description: the index card, one line per ``module.method``."""
    lines = [
        "Your own session log, fetched on demand: earlier messages, full tool outputs, artifacts, todos.",
        'Call with {"module": M, "method": N, "input": {...}}; input is required ({} if the method '
        "takes nothing). Methods (module.method input — what it does):",
    ]
    lines += [f"- {name} {CARDS[name].line}" for name in METHODS]
    lines.append("Results are capped by tokens; a capped or partial result says how to get the rest.")
    return "\n".join(lines)


def input_schema(method: str) -> dict[str, Any]:
    """The JSON Schema of a method's input, as providers and the help card show it: no titles, no
    null (an optional field is left out, never null)."""
    cleaned: dict[str, Any] = _clean(INPUTS[method].json_schema())
    return cleaned


def help_card(method: str | None = None) -> str:
    """The full card of one method (``module.method``); without one, the index card."""
    if method is None:
        return description()
    card = CARDS[method]
    module, name = method.split(".")
    call = {"module": module, "method": name, "input": card.example}
    return "\n".join(
        [
            f"{method} — {card.about}",
            f"Input (shape): {shape(method)}",
            f"Input (JSON Schema): {json.dumps(input_schema(method), ensure_ascii=False)}",
            f"Example call: {json.dumps(call, ensure_ascii=False)}",
            "Example result:",
            card.result,
        ]
    )


def shape(method: str) -> str:
    """A method's input in one line: ``{"id": str, "offset"?: int ≥0 = 0}`` (``?``: optional)."""
    schema = input_schema(method)
    return _shape(schema, schema.get("$defs", {}))


def _shape(schema: dict[str, Any], definitions: dict[str, Any]) -> str:
    if "$ref" in schema:
        return _shape(definitions[schema["$ref"].rsplit("/", 1)[-1]], definitions)
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return " | ".join(_shape(part, definitions) for part in schema[key])
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return "|".join(json.dumps(value) for value in schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        required = set(schema.get("required", ()))
        parts = [
            f"{json.dumps(key)}{'' if key in required else '?'}: {_shape(value, definitions)}"
            for key, value in schema.get("properties", {}).items()
        ]
        return "{" + ", ".join(parts) + "}"
    if kind == "array":
        most = schema.get("maxItems")
        return f"[{_shape(schema.get('items', {}), definitions)}, …]" + (f" (≤{most})" if most else "")
    if kind == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        text = "int"
        if low is not None and high is not None and high < 10**12:
            text += f" {low}–{high}"
        elif low is not None:
            text += f" ≥{low}"
        return text + (f" = {schema['default']}" if "default" in schema else "")
    if kind == "string":
        if "pattern" in schema and schema["pattern"].startswith("^["):
            return f"str /{schema['pattern']}/"
        return "str"
    return str(kind or "any")


def _clean(schema: Any) -> Any:
    """Titles and object descriptions dropped (the card says it better), null branches removed."""
    if isinstance(schema, list):
        return [_clean(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "description" and "properties" in schema:
            continue
        if key == "default" and value is None:
            continue
        if key == "properties":
            result[key] = {name: _clean(prop) for name, prop in value.items()}
            continue
        result[key] = _clean(value)
    branches = result.get("anyOf")
    if isinstance(branches, list) and {"type": "null"} in branches:
        rest = [branch for branch in branches if branch != {"type": "null"}]
        del result["anyOf"]
        if len(rest) == 1:
            result = {**rest[0], **result}
        else:
            result["anyOf"] = rest
    return result
