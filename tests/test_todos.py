"""Todos: the one construction function and its errors, the current list, its history, replay with
``at``, and the checklist a model reads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.projections.artifacts import InvalidArgumentError
from turnlog.projections.materialize import Materializer
from turnlog.projections.todos import (
    TodosProjection,
    build_todo_list,
    current_todos,
    render_checklist,
    todo_history,
)
from turnlog.store import (
    InvalidEventError,
    MessageAppended,
    SQLiteStore,
    TodoItem,
    TodosUpdated,
    UnknownSessionError,
)


@pytest.fixture
def db() -> Iterator[SQLiteStore]:
    s = SQLiteStore.open(":memory:")
    try:
        yield s
    finally:
        s.close()


def triples(event: TodosUpdated) -> list[tuple[str, str, str]]:
    return [(item.id, item.content, item.status) for item in event.todos]


# --- construction ----------------------------------------------------------------------------------


def test_strings_become_pending_items_numbered_in_order() -> None:
    event = build_todo_list(["read the code", "write tests"])
    assert isinstance(event, TodosUpdated)
    assert triples(event) == [("1", "read the code", "pending"), ("2", "write tests", "pending")]


def test_dicts_items_and_ids() -> None:
    event = build_todo_list(
        [
            {"content": "a", "status": "completed"},
            {"content": "b", "id": "1"},  # takes "1", so the others are numbered around it
            "c",
            {"content": "d", "status": "in_progress", "id": 7},
            TodoItem(id="x", content="e", status="completed"),
        ]
    )
    assert triples(event) == [
        ("2", "a", "completed"),
        ("1", "b", "pending"),
        ("3", "c", "pending"),
        ("7", "d", "in_progress"),
        ("x", "e", "completed"),
    ]


def test_empty_list_and_event_id() -> None:
    assert build_todo_list([]).todos == ()
    assert build_todo_list(("a",), event_id="todo-1").event_id == "todo-1"
    with pytest.raises(InvalidEventError, match="event_id"):
        build_todo_list(["a"], event_id="has space")


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([{"content": "a", "status": "done"}], r"todos\[0\]\.status: 'done' is not a status; use one of "
         "pending, in_progress, completed"),
        (["a", {"content": ""}], r"todos\[1\]\.content: must not be empty"),
        (["a", "  \n"], r"todos\[1\]: content must not be empty"),
        ([{"status": "pending"}], r"todos\[0\]\.content: required field is missing"),
        ([{"content": 3}], r"todos\[0\]\.content: must be a string, not int"),
        ([{"content": "a", "priority": 1}], r"todos\[0\]\.priority: unknown field \(allowed: content, "
         r"status, id\)"),
        ([{"content": "a", "id": "1"}, {"content": "b", "id": 1}], r"todos\[1\]\.id: '1' is also the id of "
         r"todos\[0\]; ids must be unique"),
        ([{"content": "a", "id": "two words"}], r"todos\[0\]\.id: 'two words' is not a valid id"),
        ([{"content": "a", "id": True}], r"todos\[0\]\.id: True is not a valid id"),
        ([{"content": "a", "id": -1}], r"todos\[0\]\.id: -1 is not a valid id"),
        (["a", 5], r"todos\[1\]: expected a string or an object .* got int"),
        ("a single string", r"todos: expected a list of items .* got str"),
        ({"content": "a"}, r"todos: expected a list of items .* got dict"),
    ],
)  # fmt: skip
def test_construction_errors_name_the_item_and_field(items: Any, message: str) -> None:
    with pytest.raises(InvalidEventError, match=message):
        build_todo_list(items)


def test_every_problem_is_reported_in_one_error() -> None:
    with pytest.raises(InvalidEventError) as info:
        build_todo_list([{"content": "", "status": "later"}, "ok", {"content": "x", "extra": 1}])
    text = str(info.value)
    assert text.startswith("invalid todo list: ")
    for part in ("todos[0].content", "todos[0].status", "todos[2].extra"):
        assert part in text


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(min_size=1).filter(str.strip),
            st.fixed_dictionaries(
                {"content": st.text(min_size=1).filter(str.strip)},
                optional={
                    "status": st.sampled_from(["pending", "in_progress", "completed"]),
                    "id": st.integers(0, 9).map(str),
                },
            ),
        ),
        max_size=8,
    )
)
def test_built_lists_are_valid_and_keep_given_ids(items: list[Any]) -> None:
    given_ids = [item["id"] for item in items if isinstance(item, dict) and "id" in item]
    if len(set(given_ids)) != len(given_ids):
        with pytest.raises(InvalidEventError, match="ids must be unique"):
            build_todo_list(items)
        return
    event = build_todo_list(items)
    assert len(event.todos) == len(items)
    assert len({item.id for item in event.todos}) == len(items)
    for item, built in zip(items, event.todos, strict=True):
        if isinstance(item, dict):
            assert built.content == item["content"]
            assert built.status == item.get("status", "pending")
            if "id" in item:
                assert built.id == item["id"]
        else:
            assert (built.content, built.status) == (item, "pending")


# --- current list, history, replay ---------------------------------------------------------------------


def test_current_history_and_as_of(db: SQLiteStore) -> None:
    db.append("s", [MessageAppended(role="user", content="plan it")])
    assert current_todos(db, "s") == []
    assert todo_history(db, "s") == []
    first = db.append("s", [build_todo_list(["a", "b"])])[0]
    db.append("other", [build_todo_list(["elsewhere"])])
    second = db.append(
        "s",
        [
            MessageAppended(role="assistant", content="working"),
            build_todo_list(
                [{"content": "a", "status": "completed"}, {"content": "b", "status": "in_progress"}]
            ),
        ],
    )[1]
    third = db.append("s", [build_todo_list([])])[0]
    assert isinstance(first.event, TodosUpdated) and isinstance(second.event, TodosUpdated)
    first_items, second_items = first.event.todos, second.event.todos
    assert current_todos(db, "s") == []
    assert current_todos(db, "s", at=third.position - 1) == list(second_items)
    assert [(t.content, t.status) for t in current_todos(db, "s", at=second.position)] == [
        ("a", "completed"),
        ("b", "in_progress"),
    ]
    assert [t.content for t in current_todos(db, "s", at=first.position)] == ["a", "b"]
    assert current_todos(db, "s", at=first.position - 1) == []
    assert [t.content for t in current_todos(db, "other")] == ["elsewhere"]
    history = todo_history(db, "s")
    assert [(h.position, h.version, h.event_id, h.recorded_at) for h in history] == [
        (r.position, r.version, r.event_id, r.recorded_at) for r in (first, second, third)
    ]
    assert [len(h.items) for h in history] == [2, 2, 0]
    assert history[0].items == first_items
    assert [h.position for h in todo_history(db, "s", at=second.position)] == [
        first.position,
        second.position,
    ]


def test_unknown_session_and_bad_at(db: SQLiteStore) -> None:
    db.append("s", [build_todo_list(["a"])])
    with pytest.raises(UnknownSessionError):
        current_todos(db, "missing")
    with pytest.raises(UnknownSessionError):
        todo_history(db, "missing")
    with pytest.raises(InvalidArgumentError, match="at must be"):
        current_todos(db, "s", at=-3)


def test_incremental_catch_up_equals_rebuild(db: SQLiteStore) -> None:
    mine = Materializer(db, [TodosProjection()])
    for n in range(6):
        db.append(
            f"s{n % 2}",
            [build_todo_list([f"item {i}" for i in range(n)]), MessageAppended(role="user", content="x")],
        )
        assert len(current_todos(db, f"s{n % 2}")) == n
    assert mine.differences() == []


# --- the checklist ---------------------------------------------------------------------------------


def test_checklist_rendering() -> None:
    items = build_todo_list(
        [
            {"content": "read the code", "status": "completed"},
            {"content": "write the tests", "status": "in_progress"},
            "ship it",
        ]
    ).todos
    assert render_checklist(items) == (
        "Todos: 1 of 3 completed, 1 in progress, 1 pending\n"
        "- [x] read the code\n"
        "- [~] write the tests\n"
        "- [ ] ship it"
    )
    assert render_checklist(items, show_ids=True).splitlines()[1:] == [
        "- [x] read the code (id: 1)",
        "- [~] write the tests (id: 2)",
        "- [ ] ship it (id: 3)",
    ]


def test_checklist_of_an_empty_list_says_so() -> None:
    assert render_checklist([]) == "Todos: none (the list is empty)"


def test_multi_line_items_stay_one_entry() -> None:
    items = build_todo_list(["first line\nsecond line", "next"]).todos
    assert render_checklist(items).splitlines()[1:] == ["- [ ] first line", "      second line", "- [ ] next"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["pending", "in_progress", "completed"]), max_size=10))
def test_checklist_counts_add_up(db: SQLiteStore, statuses: list[str]) -> None:
    items = build_todo_list([{"content": f"task {i}", "status": s} for i, s in enumerate(statuses)]).todos
    text = render_checklist(items)
    lines = text.splitlines()
    if not statuses:
        assert lines == ["Todos: none (the list is empty)"]
        return
    assert lines[0] == (
        f"Todos: {statuses.count('completed')} of {len(statuses)} completed, "
        f"{statuses.count('in_progress')} in progress, {statuses.count('pending')} pending"
    )
    assert len(lines) == len(statuses) + 1
