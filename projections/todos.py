"""The todo list of a session: one function that builds a valid ``todos_updated`` event from what any
caller gives (API, CLI, agent tool), a materialized history of the list, and the checklist a model reads."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import ConfigDict, TypeAdapter, ValidationError

from turnlog.projections.artifacts import InvalidArgumentError
from turnlog.projections.live_index import live_condition
from turnlog.projections.materialize import Projection, copy_rows, fork_of
from turnlog.store import InvalidEventError, RecordedEvent, Store, TodoItem, TodosUpdated
from turnlog.store.dialect import Connection, dialect_of
from turnlog.store.events import describe_validation_error

STATUSES = ("pending", "in_progress", "completed")
"""The statuses an item may have, in the order a list usually moves through them."""

MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
"""Checklist mark of each status."""

TodoInput = str | Mapping[str, Any] | TodoItem
"""What :func:`build_todo_list` accepts per item: plain text (a pending item), a mapping with
``content`` and optionally ``status`` and ``id``, or a TodoItem."""

_FIELDS = ("content", "status", "id")
_IDENTIFIER = re.compile(r"\S{1,200}")
_ITEMS: TypeAdapter[tuple[TodoItem, ...]] = TypeAdapter(
    tuple[TodoItem, ...], config=ConfigDict(defer_build=True)
)
_MAX_PROBLEMS = 10


@dataclass(frozen=True, slots=True)
class TodoSnapshot:
    """The todo list as one ``todos_updated`` event left it."""

    position: int
    """Global log position of the update."""
    version: int
    """Its version within the session."""
    event_id: str
    """The update's event id."""
    recorded_at: str
    """When it was stored (UTC, ISO 8601)."""
    items: tuple[TodoItem, ...]
    """The whole list after the update, in order."""


def build_todo_list(items: Sequence[TodoInput], *, event_id: str | None = None) -> TodosUpdated:
    """The ``todos_updated`` event for a whole todo list: the one way every caller builds one.

    Each item is a string (a pending item with that content), a mapping with ``content`` and
    optionally ``status`` (``pending``, ``in_progress``, ``completed``; default ``pending``) and
    ``id`` (a string without whitespace, or a non-negative integer), or a TodoItem. Items without an
    id get ``"1"``, ``"2"``, ... in order, skipping ids that other items already have. Every problem
    (unknown field or status, empty content, duplicate id, ...) is reported in one InvalidEventError
    naming the item's index and the field, e.g. ``todos[2].status: ...``."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise InvalidEventError(
            f"todos: expected a list of items (strings, or objects with content, status and id), "
            f"got {type(items).__name__}"
        )
    problems: list[str] = []
    parsed: list[tuple[str | None, str, str]] = []  # (id or None, content, status)
    for index, item in enumerate(items):
        found = _parse_item(index, item, problems)
        if found is not None:
            parsed.append(found)
    owners: dict[str, int] = {}
    for index, (item_id, _, _) in enumerate(parsed):
        if item_id is None:
            continue
        if item_id in owners:
            problems.append(
                f"todos[{index}].id: {item_id!r} is also the id of todos[{owners[item_id]}]; "
                "ids must be unique (or leave them out to have them numbered)"
            )
        else:
            owners[item_id] = index
    if problems:
        shown = problems[:_MAX_PROBLEMS]
        if len(problems) > _MAX_PROBLEMS:
            shown.append(f"and {len(problems) - _MAX_PROBLEMS} more problems")
        raise InvalidEventError("invalid todo list: " + "; ".join(shown))
    next_number = 1
    todos = []
    for item_id, content, status in parsed:
        if item_id is None:
            while str(next_number) in owners:
                next_number += 1
            item_id = str(next_number)
            owners[item_id] = -1
        todos.append({"id": item_id, "content": content, "status": status})
    fields: dict[str, Any] = {"todos": todos}
    if event_id is not None:
        fields["event_id"] = event_id
    try:
        return TodosUpdated.model_validate(fields)
    except ValidationError as exc:
        raise InvalidEventError(f"invalid todo list: {describe_validation_error(exc)}") from None


def _parse_item(index: int, item: object, problems: list[str]) -> tuple[str | None, str, str] | None:
    where = f"todos[{index}]"
    if isinstance(item, TodoItem):
        return item.id, item.content, item.status
    if isinstance(item, str):
        if not item.strip():
            problems.append(f"{where}: content must not be empty")
            return None
        return None, item, "pending"
    if not isinstance(item, Mapping):
        problems.append(
            f"{where}: expected a string or an object with content, status and id, got {type(item).__name__}"
        )
        return None
    before = len(problems)
    for key in item:
        if key not in _FIELDS:
            problems.append(f"{where}.{key}: unknown field (allowed: {', '.join(_FIELDS)})")
    content = item.get("content")
    if "content" not in item:
        problems.append(f"{where}.content: required field is missing")
    elif not isinstance(content, str):
        problems.append(f"{where}.content: must be a string, not {type(content).__name__}")
    elif not content.strip():
        problems.append(f"{where}.content: must not be empty")
    status = item.get("status", "pending")
    if status not in STATUSES:
        problems.append(f"{where}.status: {status!r} is not a status; use one of {', '.join(STATUSES)}")
    raw_id = item.get("id")
    item_id: str | None = None
    if isinstance(raw_id, int) and not isinstance(raw_id, bool) and raw_id >= 0:
        item_id = str(raw_id)
    elif isinstance(raw_id, str) and _IDENTIFIER.fullmatch(raw_id):
        item_id = raw_id
    elif raw_id is not None:
        problems.append(
            f"{where}.id: {raw_id!r} is not a valid id; use 1 to 200 characters without whitespace, "
            "a non-negative integer, or leave it out"
        )
    if len(problems) > before:
        return None
    return item_id, str(content), str(status)


class TodosProjection(Projection):
    """One row per ``todos_updated`` event with the whole list as JSON: the current list is the
    session's last row, the list as of a position the last row at or before it."""

    name: ClassVar[str] = "todos"
    version: ClassVar[int] = 2
    tables: ClassVar[tuple[str, ...]] = ("todos",)
    types: ClassVar[tuple[str, ...] | None] = ("todos_updated", "session_started")

    def create(self, conn: Connection, schema: str = "main") -> None:
        dialect_of(conn).create(
            conn,
            """
            CREATE TABLE {schema}.todos (
                session_id TEXT NOT NULL,
                position INTEGER NOT NULL,
                version INTEGER NOT NULL,
                event_id TEXT NOT NULL,
                recorded_at TEXT NOT NULL,
                items TEXT NOT NULL,            -- JSON list of {id, content, status}, in order
                PRIMARY KEY (session_id, position)
            )
            """,
            schema,
        )

    def apply(self, conn: Connection, records: Sequence[RecordedEvent]) -> None:
        rows: list[tuple[object, ...]] = []
        for record in records:
            event = record.event
            fork = fork_of(conn, record)
            if fork is not None:  # a fork starts with its parent's todo history up to the fork
                _insert(conn, rows)
                copy_rows(conn, "todos", fork[0], record.session_id, "position <= ?", (fork[2],))
                continue
            if not isinstance(event, TodosUpdated):
                continue
            items = json.dumps(
                [item.model_dump(mode="json") for item in event.todos],
                ensure_ascii=False,
                separators=(",", ":"),
            )
            rows.append(
                (
                    record.session_id,
                    record.position,
                    record.version,
                    record.event_id,
                    record.recorded_at,
                    items,
                )
            )
        _insert(conn, rows)


def _insert(conn: Connection, rows: list[tuple[object, ...]]) -> None:
    conn.executemany(
        "INSERT INTO todos (session_id, position, version, event_id, recorded_at, items) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        rows,
    )
    rows.clear()


def current_todos(store: Store, session_id: str, at: int | None = None) -> list[TodoItem]:
    """The session's todo list as its last update left it (``at``: the last update at or before that
    global position); empty when there was none. Raises UnknownSessionError for an unknown session."""
    _check_at(at)
    store.require_session(session_id)
    _caught_up(store)
    with store.reading() as conn:
        # The live update with the highest version: a rewound or removed update no longer counts.
        through = _through(at)
        row = conn.execute(
            f"SELECT items FROM todos t WHERE session_id = ? AND position <= ? AND {live_condition('t')} "
            "ORDER BY version DESC LIMIT 1",
            (session_id, through, through, through),
        ).fetchone()
    return [] if row is None else list(_ITEMS.validate_json(row[0]))


def todo_history(store: Store, session_id: str, at: int | None = None) -> list[TodoSnapshot]:
    """Every live update of the session's todo list in log order (``at``: those at or before that
    global position, live as of it). Raises UnknownSessionError for an unknown session."""
    _check_at(at)
    store.require_session(session_id)
    _caught_up(store)
    with store.reading() as conn:
        through = _through(at)
        rows = conn.execute(
            "SELECT position, version, event_id, recorded_at, items FROM todos t "
            f"WHERE session_id = ? AND position <= ? AND {live_condition('t')} ORDER BY position",
            (session_id, through, through, through),
        ).fetchall()
    return [
        TodoSnapshot(int(pos), int(version), str(event_id), str(recorded_at), _ITEMS.validate_json(items))
        for pos, version, event_id, recorded_at, items in rows
    ]


def render_checklist(items: Sequence[TodoItem], *, show_ids: bool = False) -> str:
    """The list as the checklist a model reads: a one-line count, then ``- [ ] pending``,
    ``- [~] in progress``, ``- [x] completed``, one per item in order (``show_ids`` adds each id,
    for a model that updates items by id). An empty list says so."""
    if not items:
        return "Todos: none (the list is empty)"
    counts = {status: sum(1 for item in items if item.status == status) for status in STATUSES}
    lines = [
        f"Todos: {counts['completed']} of {len(items)} completed, "
        f"{counts['in_progress']} in progress, {counts['pending']} pending"
    ]
    for item in items:
        # Continuation lines are indented so a multi-line item stays one entry of the list.
        content = item.content.strip().replace("\n", "\n      ")
        suffix = f" (id: {item.id})" if show_ids else ""
        lines.append(f"- {MARKS[item.status]} {content}{suffix}")
    return "\n".join(lines)


def _caught_up(store: Store) -> None:
    # Imported here: the registry imports this module to list its projection.
    from turnlog.projections.registry import materializer

    materializer(store).catch_up()


def _check_at(at: int | None) -> None:
    if at is not None and (isinstance(at, bool) or not isinstance(at, int) or at < 0):
        raise InvalidArgumentError(f"at must be a global log position (an integer >= 0), not {at!r}")


def _through(at: int | None) -> int:
    return 2**62 if at is None else at


__all__ = [
    "MARKS",
    "STATUSES",
    "TodoInput",
    "TodoSnapshot",
    "TodosProjection",
    "build_todo_list",
    "current_todos",
    "render_checklist",
    "todo_history",
]
