"""The quick read-only view (store.sqlite_quick) that `turnlog log` and `turnlog sessions` read a caught-up
store file through, without pydantic: it gives exactly what the full store gives (records, their JSON,
their one-line descriptions, the listing of sessions), and declines (None) wherever the file alone
cannot: token counts pending, projections behind, a row at an older schema, an unknown session."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from pydantic_core import PydanticUndefined

from tests.store_contract import example_events, session_events
from turnlog import open_store
from turnlog.cli_group import _Context, cli
from turnlog.output import describe, describe_fields
from turnlog.projections.registry import materializer
from turnlog.projections.sessions import list_sessions, quick_sessions
from turnlog.store import (
    CURRENT_VERSIONS,
    EVENT_CLASSES,
    MessageAppended,
    SessionRewound,
    SQLiteStore,
    ToolCall,
    ToolReturned,
)
from turnlog.store.event_fields import FIELDS, stored_fields
from turnlog.store.events import ENVELOPE_FIELDS
from turnlog.store.limits import MAX_TOKENS
from turnlog.store.sqlite_quick import MAX_TOKENS as QUICK_MAX_TOKENS
from turnlog.store.sqlite_quick import QuickView


def fields_from_models() -> dict[str, tuple[int, tuple[tuple[str, str | None], ...]]]:
    """FIELDS as the event models give it today."""
    from pydantic import TypeAdapter

    table = {}
    for etype, cls in EVENT_CLASSES.items():
        fields = []
        for name, info in cls.model_fields.items():
            if name in ENVELOPE_FIELDS:
                continue
            default = info.get_default(call_default_factory=True)
            if default is PydanticUndefined:
                fields.append((name, None))
            else:
                dumped = TypeAdapter(info.annotation).dump_python(default, mode="json")
                fields.append((name, json.dumps(dumped)))
        table[etype] = (CURRENT_VERSIONS[etype], tuple(fields))
    return table


def test_the_fields_table_mirrors_the_event_models() -> None:
    expected = fields_from_models()
    assert expected == FIELDS, f"update store/event_fields.py FIELDS to:\n{expected!r}"
    assert QUICK_MAX_TOKENS == MAX_TOKENS


def test_stored_fields_fill_defaults_in_model_order_and_decline_what_they_cannot_read() -> None:
    payload = json.dumps({"content": "hi", "role": "user"})
    assert list(stored_fields("message_appended", 1, payload, None) or {}) == ["role", "content"]
    assert stored_fields("message_appended", 1, '{"role": "user"}', None) == {"role": "user", "content": ""}
    assert stored_fields("run_finished", 1, '{"run_id": "r"}', None) == {"run_id": "r", "status": "completed"}
    assert stored_fields("tool_returned", 1, '{"tool_call_id": "c"}', "blob text") == {
        "tool_call_id": "c",
        "content": "blob text",
        "is_error": False,
    }
    assert stored_fields("usage_recorded", 1, '{"model": "m"}', None) is None  # older schema: upcast
    assert stored_fields("message_appended", 1, '{"role": "user", "extra": 1}', None) is None
    assert stored_fields("tool_returned", 1, '{"content": "x"}', None) is None  # required field missing
    assert stored_fields("no_such_type", 1, "{}", None) is None
    assert stored_fields("message_appended", 1, "[1]", None) is None


def _caught_up(path: Path, sessions: dict[str, list[Any]]) -> None:
    with open_store(path) as store:
        for sid, events in sessions.items():
            store.append(sid, events)
        materializer(store).catch_up()


def _same_reads(path: Path, session: str, **versions: int) -> None:
    """The view reads the session as the full read-only store does: records, JSON, descriptions."""
    with SQLiteStore.open(path, readonly=True) as store:
        records = store.read_session(session, **versions)
    view = QuickView.open(str(path))
    assert view is not None
    with view:
        quick = view.session_events(session, **versions)
    assert quick is not None
    assert [q.to_dict() for q in quick] == [r.to_dict() for r in records]
    for width in (20, 80):
        assert [describe_fields(q.type, q.fields, width) for q in quick] == [
            describe(r, width) for r in records
        ]


def test_every_event_type_reads_as_the_full_store_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "all.db"
    events = example_events()
    _caught_up(path, {"s": events})
    _same_reads(path, "s")
    _same_reads(path, "s", from_version=3, to_version=9)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=session_events(max_size=10))
def test_any_session_reads_as_the_full_store_reads_it(
    tmp_path_factory: pytest.TempPathFactory, events: Any
) -> None:
    path = tmp_path_factory.mktemp("quick") / "s.db"
    _caught_up(path, {"s": events})
    _same_reads(path, "s")


@pytest.fixture
def store_path(tmp_path: Path) -> Iterator[Path]:
    """A caught-up store: a plain session, a session with a rewind, and a fork."""
    path = tmp_path / "s.db"
    big = "line\n" * 2000  # over the inline limit: its content is a blob
    _caught_up(
        path,
        {
            "plain": [
                MessageAppended(role="user", content="list the files"),
                MessageAppended(role="assistant", tool_calls=(ToolCall(id="c1", name="ls"),)),
                ToolReturned(tool_call_id="c1", tool_name="ls", content=big),
                MessageAppended(role="assistant", content="two files"),
            ],
            "rewound": [
                MessageAppended(role="user", content="a"),
                MessageAppended(role="assistant", content="b"),
                SessionRewound(to_version=1, reason="pop"),
            ],
        },
    )
    yield path


def _outputs(runner: CliRunner, path: Path, commands: list[list[str]]) -> list[tuple[int, str]]:
    return [
        (done.exit_code, done.output)
        for done in (runner.invoke(cli, ["--db", str(path), *args]) for args in commands)
    ]


COMMANDS = [
    ["log", "plain"],
    ["log", "plain", "--json"],
    ["log", "plain", "--width", "20", "--from-version", "2", "--to-version", "3"],
    ["log", "rewound"],
    ["log", "rewound", "--json"],
    ["log", "nope"],
    ["log", "nope", "--json"],
    ["sessions"],
    ["sessions", "--json"],
    ["sessions", "--at", "2"],
]


def test_the_commands_print_the_same_through_the_view_or_the_full_store(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    quick = _outputs(runner, store_path, COMMANDS)
    monkeypatch.setattr(_Context, "quick", lambda self: None)
    full = _outputs(runner, store_path, COMMANDS)
    assert quick == full
    assert quick[0][0] == 0 and "ls [c1]: line line" in quick[0][1]
    assert quick[5][0] == 1 and "no session 'nope'" in quick[5][1]


def test_the_view_serves_a_caught_up_store_and_declines_the_rest(store_path: Path) -> None:
    view = QuickView.open(str(store_path))
    assert view is not None
    with view:
        assert view.session_events("nope") is None  # the full store names the sessions there are
        events = view.session_events("plain")
        assert events is not None and [e.version for e in events] == [1, 2, 3, 4]
        assert view.current("live", 1) and not view.current("live", 99) and not view.current("nope", 1)
        # A rewind undid messages: counting what stays live needs the context index, so the
        # listing is left to the full store.
        assert quick_sessions(view) is None
    with SQLiteStore.open(store_path) as store:  # no hooks: the projections fall behind
        store.append("plain", [MessageAppended(role="user", content="more")])
        store.catch_up_tokens()
    view = QuickView.open(str(store_path))
    assert view is not None
    with view:
        assert not view.current("live", 1) and not view.current("sessions", 2)
        assert quick_sessions(view) is None
    with SQLiteStore.open(store_path) as store:  # the count is left for a later read
        store.append("plain", [MessageAppended(role="user", content="uncounted")])
    assert QuickView.open(str(store_path)) is None
    assert QuickView.open(str(store_path.parent / "missing.db")) is None
    (store_path.parent / "junk.db").write_text("not a store")
    assert QuickView.open(str(store_path.parent / "junk.db")) is None


def test_the_listing_through_the_view_equals_the_full_one(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _caught_up(path, {"a": [MessageAppended(role="user", content="x")], "b": example_events()[:5]})
    with open_store(path) as store:
        from turnlog.actions import fork_session

        fork_session(store, "b", 3, "c", title="a fork")
        materializer(store).catch_up()
    view = QuickView.open(str(path))
    assert view is not None
    with SQLiteStore.open(path, readonly=True) as store, view:
        for at in (None, 0, 2, 7):
            assert quick_sessions(view, at=at) == list_sessions(store, at=at)
