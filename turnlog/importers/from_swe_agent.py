"""Reading SWE-agent trajectories (``.traj`` files): the history the model was sent, and the run's
billed totals as usage.

The ``history`` is imported message by message, as the model saw it (SWE-agent sends every message's
role and content; the ``trajectory`` steps repeat the same responses and are not imported). Both
history formats are read: native tool calling (an assistant message with ``tool_calls``, its
results as ``role: tool`` messages with ``tool_call_ids``) becomes assistant messages with tool
calls and ``tool_returned`` events; the older format (thought and action as assistant text, the
observation as the next user message) stays text. Each message's SWE-agent fields other than role,
content and tool calls (``agent``, ``message_type``, ``thought``, ``action``, ``is_demo``...) are
kept in its ``origin`` (framework ``swe-agent``): a demonstration message is an ordinary, unpinned
message (it was sent with every call) whose ``origin.item`` says ``"is_demo": true``.

``info.model_stats`` (the sums of the API's usage over the run) becomes one ``usage_recorded`` with
``scope="run"``: ``tokens_sent`` / ``tokens_received`` as input / output tokens, ``api_calls`` as
``calls`` and ``instance_cost`` as ``cost_usd``."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import PurePath
from typing import Any

from turnlog.importers.base import (
    Conversation,
    content_text,
    fields_of,
    is_id,
    load_document,
    openai_tool_calls,
    short_repr,
    token_count,
    with_derived_ids,
)
from turnlog.store import (
    Event,
    InvalidEventError,
    MessageAppended,
    Origin,
    SessionStarted,
    ToolReturned,
    UsageRecorded,
)

SOURCE = "swe-agent"
"""The ``source`` of the usage, and the ``framework`` of the messages' origins."""

MODEL_ALIASES: dict[str, str] = {
    "gpt3": "gpt-3.5-turbo-1106",
    "gpt3-legacy": "gpt-3.5-turbo-16k-0613",
    "gpt3-0125": "gpt-3.5-turbo-0125",
    "gpt4": "gpt-4-1106-preview",
    "gpt4-legacy": "gpt-4-0613",
    "gpt4-0125": "gpt-4-0125-preview",
    "claude": "claude-2",
    "claude-opus": "claude-3-opus-20240229",
    "claude-sonnet": "claude-3-sonnet-20240229",
    "claude-haiku": "claude-3-haiku-20240307",
}
"""SWE-agent's (0.x) model shortcuts, which it puts first in a run directory's name
(``gpt4__<data>__<config>__t-0.00__...``): the model each one called."""

_MESSAGE_FIELDS = frozenset({"role", "content", "tool_calls", "tool_call_ids"})
"""History fields the events hold; the others are kept in the origin."""

_FIRST_KEY = re.compile(r'\A\s*\{\s*"(environment|trajectory|history|info|replay_config)"\s*:')


def looks_like_swe_agent(text_head: str) -> bool:
    """Whether the start of a file looks like a SWE-agent trajectory: a JSON object whose first key
    is one SWE-agent writes first, with a ``trajectory`` or ``history`` in sight."""
    head = text_head.removeprefix("\ufeff")
    return bool(_FIRST_KEY.match(head)) and ('"trajectory"' in head or '"history"' in head)


def parse_swe_agent(
    text: str, *, session: str | None = None, model: str | None = None, name: str | None = None
) -> list[Conversation]:
    """Read a SWE-agent ``.traj`` file as one conversation (see the module's docstring).

    ``name`` is the path the file was read from: its stem is the instance id, the session id
    (without a usable one, an id derived from the first messages, so a grown file maps to the
    same session), and a SWE-agent model shortcut first in its directory's name (``gpt4__...``)
    gives the model. ``model`` given explicitly wins over the shortcut; ``session`` over the
    derived id."""
    document, where = load_document(text, name)
    if not isinstance(document, dict):
        raise InvalidEventError(
            f"{where}: expected a SWE-agent trajectory (a JSON object with 'history'), "
            f"got {type(document).__name__}"
        )
    history = document.get("history")
    if not isinstance(history, list):
        raise InvalidEventError(
            f"{where}: 'history' must be a list of messages, not {type(history).__name__}"
        )
    info = document.get("info", {})
    if not isinstance(info, dict):
        raise InvalidEventError(f"{where}: 'info' must be an object, not {type(info).__name__}")
    instance = _instance_id(name)
    session_id = session or instance or _derived_id(history)
    model = model or _model_from_path(name) or _model_from_replay_config(document.get("replay_config"))
    where = f"{where} (session {short_repr(session_id)})"
    events: list[Event] = []

    def next_id() -> str:
        # Provisional; the final ids are derived from the content below.
        return f"{session_id[:150]}-{len(events)}"

    demos = sum(1 for m in history if isinstance(m, dict) and m.get("is_demo") is True)
    metadata: dict[str, Any] = {"imported_from": SOURCE}
    if instance is not None:
        metadata["instance_id"] = instance
    run = PurePath(name).parent.name if name else ""
    if run:
        metadata["run"] = run
    if isinstance(info.get("exit_status"), str):
        metadata["exit_status"] = info["exit_status"]
    if demos:
        metadata["demonstration_messages"] = demos
    with fields_of(where):
        events.append(
            SessionStarted(
                event_id=next_id(), title=instance or _title(history), model=model, metadata=metadata
            )
        )
    calls: dict[str, str] = {}  # call id -> tool name, for the results
    for index, item in enumerate(history):
        position = f"{where}, history[{index}]"
        if not isinstance(item, dict):
            raise InvalidEventError(f"{position}: expected an object, got {type(item).__name__}")
        with fields_of(position):
            events.append(_event(item, position, next_id(), calls))
    stats = info.get("model_stats")
    if stats is not None:
        events.append(_usage(stats, f"{where}, info.model_stats", next_id(), model))
    return [Conversation(session_id, with_derived_ids(session_id, events))]


def _event(item: dict[str, Any], position: str, event_id: str, calls: dict[str, str]) -> Event:
    role = item.get("role")
    content = content_text(item.get("content"), f"{position}.content")
    extra = {k: v for k, v in item.items() if k not in _MESSAGE_FIELDS}
    origin = Origin(framework=SOURCE, item=extra) if extra else None
    if role == "tool":
        ids = item.get("tool_call_ids")
        if not isinstance(ids, list) or len(ids) != 1 or not isinstance(ids[0], str):
            raise InvalidEventError(
                f"{position}.tool_call_ids: a tool message answers one call: expected a list of one "
                f"call id, not {short_repr(ids)}"
            )
        call_id = ids[0]
        if call_id not in calls:
            raise InvalidEventError(
                f"{position}.tool_call_ids: {short_repr(call_id)} answers no tool call of an earlier "
                "assistant message"
            )
        return ToolReturned(
            event_id=event_id, tool_call_id=call_id, tool_name=calls[call_id], content=content, origin=origin
        )
    if role in ("system", "user"):
        return MessageAppended(event_id=event_id, role=role, content=content, origin=origin)
    if role == "assistant":
        tool_calls = openai_tool_calls(item.get("tool_calls"), f"{position}.tool_calls")
        for call in tool_calls:
            calls[call.id] = call.name
        return MessageAppended(
            event_id=event_id, role="assistant", content=content, tool_calls=tool_calls or None, origin=origin
        )
    raise InvalidEventError(
        f"{position}.role: unknown role {short_repr(role)} (expected system, user, assistant or tool)"
    )


def _usage(stats: Any, where: str, event_id: str, model: str | None) -> UsageRecorded:
    """The run's billed totals."""
    if not isinstance(stats, dict):
        raise InvalidEventError(f"{where}: expected an object, not {type(stats).__name__}")
    for field in ("tokens_sent", "tokens_received"):
        if field not in stats:
            raise InvalidEventError(f"{where}: '{field}' is missing")
    sent = token_count(stats["tokens_sent"], "tokens_sent", where)
    received = token_count(stats["tokens_received"], "tokens_received", where)
    api_calls = stats.get("api_calls")
    if api_calls is not None:
        api_calls = token_count(api_calls, "api_calls", where)
    cost = stats.get("instance_cost")
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, (int, float)) or not cost >= 0):
        raise InvalidEventError(
            f"{where}: instance_cost must be a number of dollars (0 or more), not {cost!r}"
        )
    with fields_of(where):
        return UsageRecorded(
            event_id=event_id,
            model=model or "unknown",
            input_tokens=sent,
            output_tokens=received,
            scope="run",
            calls=api_calls or None,
            cost_usd=None if cost is None else float(cost),
            source=SOURCE,
        )


def _instance_id(name: str | None) -> str | None:
    """The instance id SWE-agent names its trajectory file after, when it can be a session id."""
    if not name:
        return None
    stem = PurePath(name).name
    for suffix in (".json", ".traj"):
        stem = stem.removesuffix(suffix)
    return stem if is_id(stem) else None


def _derived_id(history: list[Any]) -> str:
    """An id from the first messages (system prompt and task), which a grown file keeps."""
    canonical = json.dumps(history[:2], sort_keys=True, ensure_ascii=False)
    return "swe-agent-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _model_from_path(name: str | None) -> str | None:
    """The model of a SWE-agent shortcut first in the run directory's name (``gpt4__...``)."""
    if not name:
        return None
    alias = PurePath(name).parent.name.split("__")[0]
    return MODEL_ALIASES.get(alias.removeprefix("azure:"))


def _model_from_replay_config(config: Any) -> str | None:
    """SWE-agent 1.x keeps its configuration (a JSON text) in the trajectory: its model name."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except (ValueError, RecursionError):
            return None
    found: Any = config
    for key in ("agent", "model", "name"):
        found = found.get(key) if isinstance(found, dict) else None
    return found if isinstance(found, str) and found else None


def _title(history: list[Any]) -> str | None:
    """The first words of the task (the first user message that is not a demonstration)."""
    for item in history:
        if isinstance(item, dict) and item.get("role") == "user" and not item.get("is_demo"):
            content = item.get("content")
            if isinstance(content, str):
                return " ".join(content.split())[:80] or None
            return None
    return None
