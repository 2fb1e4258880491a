"""Reading tau-bench results files: a JSON list of ``{task_id, trial, reward, info, traj}``, one
session per entry.

``traj`` holds the agent's chat messages as tau-bench sent them (OpenAI format: ``system``, the
simulated ``user``, ``assistant`` with ``tool_calls``, ``tool`` results with ``tool_call_id``);
they become messages, tool calls and their paired ``tool_returned``. The entry's task id, trial,
reward and ``info`` (the task and its reward details) go in the session's metadata. A results file
records no token usage (tau-bench keeps only a cost it does not write), so none is imported: the
usage of these sessions is unknown, not 0.

Session ids: ``tau-bench-DOMAIN-TASK-TRIAL-DIGEST``. Task ids restart at 0 in every domain and every
run, so task and trial alone collide between the results of airline and retail, or of two runs. The
domain is read from the agent's system prompt (tau-bench's policies open with ``# Airline Agent
Policy`` / ``# Retail agent policy``; left out when it names none), and the digest is a hash of the
entry itself: the same entry always maps to the same session — whatever the file is called, in
whatever order tau-bench rewrote its entries, however many it has added since — and entries of
different runs or domains never share one."""

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
    with_derived_ids,
)
from turnlog.store import (
    Event,
    InvalidEventError,
    MessageAppended,
    SessionStarted,
    ToolReturned,
)

SOURCE = "tau-bench"

_HEAD = re.compile(r'\A\s*\[\s*\{\s*"')

# The heading tau-bench's domain policies (the agent's system prompt) open with.
_POLICY = re.compile(r"\A\s*#\s*([A-Za-z][A-Za-z0-9_]*) agent policy\b", re.IGNORECASE)

# tau-bench names a results file {agent strategy}-{model}-{temperature}_range_{start}-{end}_user-...
_FILE_NAME = re.compile(
    r"\A(?:tool-calling|act|react|few-shot)-(?P<model>.+)-\d+(?:\.\d+)?_range_\d+-\d+_user-"
)


def looks_like_tau_bench(text_head: str) -> bool:
    """Whether the start of a file looks like a tau-bench results file: a JSON list of objects with
    ``task_id`` and ``reward`` in sight."""
    head = text_head.removeprefix("\ufeff")
    return bool(_HEAD.match(head)) and '"task_id"' in head and '"reward"' in head


def parse_tau_bench(
    text: str, *, session: str | None = None, model: str | None = None, name: str | None = None
) -> list[Conversation]:
    """Read a tau-bench results file: one conversation per entry, session
    ``tau-bench-DOMAIN-TASK-TRIAL-DIGEST`` (see the module's docstring; the same entry always maps
    to the same session). ``session`` names them ``SESSION-TASK-TRIAL`` instead (a file of one
    entry is session ``session`` itself). ``name`` is the path the file was
    read from: tau-bench puts the agent's model in its name (``tool-calling-MODEL-0.0_range_...``);
    ``model`` given explicitly wins. Every entry is read and checked before any is returned."""
    document, where = load_document(text, name)
    if not isinstance(document, list):
        raise InvalidEventError(
            f"{where}: expected a tau-bench results file (a JSON list of entries with task_id, "
            f"trial and traj), got {type(document).__name__}"
        )
    if not document:
        raise InvalidEventError(f"{where}: the results file holds no entry")
    model = model or _model_from_name(name)
    conversations = []
    seen: dict[tuple[str, int], int] = {}
    for index, entry in enumerate(document):
        position = f"{where}, entry [{index}]"
        if not isinstance(entry, dict):
            raise InvalidEventError(f"{position}: expected an object, got {type(entry).__name__}")
        task, trial = _task_and_trial(entry, position)
        if (task, trial) in seen:
            raise InvalidEventError(
                f"{position}: task {task} trial {trial} is also entry [{seen[task, trial]}]: each "
                "task and trial is one session; import the results of another run into another store "
                "or under another --session"
            )
        seen[task, trial] = index
        if session is not None:
            session_id = session if len(document) == 1 else f"{session}-{task}-{trial}"
        else:
            session_id = _session_id(entry, task, trial)
        if not is_id(session_id):
            raise InvalidEventError(f"{position}: {short_repr(session_id)} cannot be a session id")
        conversations.append(_conversation(entry, f"{position} (session {session_id})", session_id, model))
    return conversations


def _session_id(entry: dict[str, Any], task: str, trial: int) -> str:
    """``tau-bench-DOMAIN-TASK-TRIAL-DIGEST``: the domain its system prompt names, and a hash of the
    entry (canonical JSON, so a file rewritten with other spacing keeps its ids)."""
    canonical = json.dumps(entry, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    domain = _domain(entry.get("traj"))
    return "-".join(part for part in (SOURCE, domain, task, str(trial), digest) if part)


def _domain(traj: Any) -> str | None:
    """The domain whose policy the system prompt is (``airline``, ``retail``...), if it says."""
    first = traj[0] if isinstance(traj, list) and traj else None
    content = first.get("content") if isinstance(first, dict) and first.get("role") == "system" else None
    match = _POLICY.match(content) if isinstance(content, str) else None
    return match[1].lower() if match else None


def _task_and_trial(entry: dict[str, Any], position: str) -> tuple[str, int]:
    task = entry.get("task_id")
    if isinstance(task, bool) or not (isinstance(task, int) or is_id(task)):
        raise InvalidEventError(
            f"{position}.task_id: expected the task's number or id, not {short_repr(task)}"
        )
    trial = entry.get("trial")
    if isinstance(trial, bool) or not isinstance(trial, int) or trial < 0:
        raise InvalidEventError(
            f"{position}.trial: expected the trial's number (0 or more), not {short_repr(trial)}"
        )
    return str(task), trial


def _conversation(entry: dict[str, Any], where: str, session_id: str, model: str | None) -> Conversation:
    traj = entry.get("traj")
    if not isinstance(traj, list):
        raise InvalidEventError(f"{where}.traj: expected a list of messages, not {type(traj).__name__}")
    reward = entry.get("reward")
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
        raise InvalidEventError(f"{where}.reward: expected a number, not {short_repr(reward)}")
    info = entry.get("info")
    if info is not None and not isinstance(info, dict):
        raise InvalidEventError(f"{where}.info: expected an object, not {type(info).__name__}")
    events: list[Event] = []

    def next_id() -> str:
        # Provisional; the final ids are derived from the content below.
        return f"{session_id[:150]}-{len(events)}"

    metadata: dict[str, Any] = {
        "imported_from": SOURCE,
        "task_id": entry["task_id"],
        "trial": entry["trial"],
        "reward": reward,
    }
    if info is not None:
        metadata["info"] = info
    with fields_of(where):
        events.append(SessionStarted(event_id=next_id(), title=_title(traj), model=model, metadata=metadata))
    calls: dict[str, str] = {}  # call id -> tool name, for the results
    for index, message in enumerate(traj):
        position = f"{where}.traj[{index}]"
        if not isinstance(message, dict):
            raise InvalidEventError(f"{position}: expected an object, got {type(message).__name__}")
        with fields_of(position):
            events.append(_event(message, position, next_id(), calls))
    return Conversation(session_id, with_derived_ids(session_id, events))


def _event(message: dict[str, Any], position: str, event_id: str, calls: dict[str, str]) -> Event:
    role = message.get("role")
    content = content_text(message.get("content"), f"{position}.content")
    if role in ("system", "user"):
        return MessageAppended(event_id=event_id, role=role, content=content)
    if role == "assistant":
        tool_calls = openai_tool_calls(message.get("tool_calls"), f"{position}.tool_calls")
        for call in tool_calls:
            calls[call.id] = call.name
        return MessageAppended(
            event_id=event_id, role="assistant", content=content, tool_calls=tool_calls or None
        )
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or call_id not in calls:
            raise InvalidEventError(
                f"{position}.tool_call_id: {short_repr(call_id)} answers no tool call of an earlier "
                "assistant message"
            )
        return ToolReturned(
            event_id=event_id, tool_call_id=call_id, tool_name=calls[call_id], content=content
        )
    raise InvalidEventError(
        f"{position}.role: unknown role {short_repr(role)} (expected system, user, assistant or tool)"
    )


def _model_from_name(name: str | None) -> str | None:
    """The agent's model tau-bench put in the results file's name."""
    if not name:
        return None
    match = _FILE_NAME.match(PurePath(name).name)
    return match["model"] if match else None


def _title(traj: list[Any]) -> str | None:
    """The first words of the simulated user's first message."""
    for message in traj:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return " ".join(content.split())[:80] or None
            return None
    return None
