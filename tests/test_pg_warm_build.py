"""A warm context build on PostgreSQL (projections.context_start): one prepared statement checks that
the projections are current and reads the header and the build's first rows, so a warm build of a
plain session makes one round trip whatever the session's length; one that must read on (a session
whose every message fits a large budget; pins, summaries, rewound ranges) makes a few more, as many
at any length. Each gives what the build the long way (as of an explicit position) gives."""

from __future__ import annotations

from typing import Any

import pytest

import turnlog
from tests.helpers.postgres import pg_schema, pg_url, sent_queries
from turnlog.actions import rewind_session
from turnlog.projections.context_reader import ITEMS
from turnlog.projections.context_start import TAIL_CAP
from turnlog.store import MessageAppended, MessagePinned, ToolCall, ToolReturned

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'turnlog[postgres]')")

__all__ = ["pg_schema"]  # the fixture, imported for this module's tests

POLICY = turnlog.ContextPolicy(budget=1500)


def _open(schema: str) -> Any:
    return turnlog.open_store(f"{pg_url()}?schema={schema}")


def _chat(n: int) -> list[Any]:
    events: list[Any] = [MessageAppended(role="system", content="You fix invoices.")]
    events += [
        MessageAppended(
            role="user" if i % 2 == 0 else "assistant", content=f"turn {i}: the total is off by {i} cents"
        )
        for i in range(n)
    ]
    return events


def _tool_turns(n: int) -> list[Any]:
    """Turns whose outputs are far over the policy's tool cap: the build fits more of them than
    their stored counts say."""
    events: list[Any] = []
    for i in range(n):
        events.append(MessageAppended(role="assistant", tool_calls=(ToolCall(id=f"c{i}", name="cat"),)))
        events.append(
            ToolReturned(tool_call_id=f"c{i}", tool_name="cat", content=f"line {i} of the log " * 300)
        )
    return events


def _long_way(store: Any, sid: str, policy: turnlog.ContextPolicy) -> Any:
    return turnlog.build_context(store, sid, policy, at=store.head_position())


def _warm(
    store: Any, sid: str, policy: turnlog.ContextPolicy, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, list[str]]:
    turnlog.build_context(store, sid, policy)  # the projections' tables made, the statement prepared
    sent = sent_queries(monkeypatch)
    built = turnlog.build_context(store, sid, policy)
    monkeypatch.undo()
    return built, sent


@pytest.mark.parametrize("length", [30, 900])
def test_a_warm_build_is_one_round_trip_whatever_the_sessions_length(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch, length: int
) -> None:
    store = _open(pg_schema)
    try:
        store.append("s", _chat(length))
        built, sent = _warm(store, "s", POLICY, monkeypatch)
        assert len(sent) == 1 and sent[0].startswith("WITH h AS")
        assert built.rendered == _long_way(store, "s", POLICY).rendered
        assert built.messages[0].content == "You fix invoices."
        assert (built.omitted_messages > 0) == (length == 900)
    finally:
        store.close()


def test_outputs_over_the_cap_are_read_at_what_they_cost_capped(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(pg_schema)
    try:
        store.append("s", _chat(4) + _tool_turns(40))
        policy = turnlog.ContextPolicy(budget=3000, max_tool_tokens=40)
        built, sent = _warm(store, "s", policy, monkeypatch)
        assert len(sent) == 1
        assert built.rendered == _long_way(store, "s", policy).rendered
        assert sum(m.role == "tool" for m in built.messages) > 3000 // 1200  # more than stored counts fit
    finally:
        store.close()


def test_a_build_that_needs_more_rows_than_were_read_ahead_reads_on(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(pg_schema)
    try:
        store.append("s", _chat(TAIL_CAP + 300))
        policy = turnlog.ContextPolicy(budget=200_000)  # the whole session fits
        built, sent = _warm(store, "s", policy, monkeypatch)
        # The statement, then the walk's next chunk (with its snapshot's BEGIN) and the ROLLBACK.
        assert len(sent) == 3 and sent[0].startswith("WITH h AS") and sent[2] == "ROLLBACK"
        assert built.omitted_messages == 0 and len(built.messages) == TAIL_CAP + 301
        assert built.rendered == _long_way(store, "s", policy).rendered
    finally:
        store.close()


def test_pins_and_a_rewind_are_read_as_the_long_way_reads_them_in_as_many_round_trips_at_any_length(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(pg_schema)
    try:
        counts = []
        for sid, length in (("short", 200), ("long", 800)):
            records = store.append(sid, _chat(length))
            store.append(sid, [MessagePinned(target_event_id=records[5].event_id)])
            rewind_session(store, sid, to_version=length - 50)
            store.append(sid, _chat(20)[1:])
            built, sent = _warm(store, sid, POLICY, monkeypatch)
            assert sent[0].startswith("WITH h AS")
            assert built.rendered == _long_way(store, sid, POLICY).rendered
            assert any(m.category == "pinned" for m in built.messages)
            counts.append(len(sent))
        # The statement, the reads of the rewound range and the pin (together), the pinned row,
        # the totals on each side of the range, the rows on each side, the ROLLBACK.
        assert counts[0] == counts[1] <= 8
    finally:
        store.close()


def test_appends_the_projections_have_not_applied_are_caught_up_first(pg_schema: str) -> None:
    from turnlog.store.postgres import PostgresStore

    store = _open(pg_schema)
    raw = PostgresStore.open(pg_url(), schema=pg_schema)  # appends without the projections' rows
    try:
        store.append("s", _chat(10))
        turnlog.build_context(store, "s", POLICY)
        raw.append("s", [MessageAppended(role="user", content="one more thing")])
        built = turnlog.build_context(store, "s", POLICY)
        assert built.messages[-1].content == "one more thing"
        assert built.rendered == _long_way(store, "s", POLICY).rendered
    finally:
        raw.close()
        store.close()


def test_a_readings_first_statement_alone_is_prepared_and_begins_no_transaction(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(pg_schema)
    try:
        sent = sent_queries(monkeypatch)
        with store.reading() as conn:
            assert conn.alone("SELECT ? + 1", (41,)) == [(42,)]
            assert conn.alone("SELECT ? + 1", (1,)) == [(2,)]
            prepared = conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()
        assert [q.split(";")[0] for q in sent] == [
            "SELECT %s + 1",
            "SELECT %s + 1",
            "BEGIN ISOLATION LEVEL REPEATABLE READ",  # with the statement after them
            "ROLLBACK",
        ]
        assert any("+ 1" in row[0] for row in prepared)
    finally:
        store.close()


def _payload_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """For each warm build's statement from here on: how many of its rows came with their event's
    payload (the type column set; the header row has none)."""
    from turnlog.store.pg_qmark import QmarkConnection

    counts: list[int] = []
    alone = QmarkConnection.alone

    def counting(self: QmarkConnection, sql: str, params: Any) -> list[tuple[Any, ...]]:
        rows = alone(self, sql, params)
        counts.append(sum(row[15] is not None for row in rows[1:]))
        return rows

    monkeypatch.setattr(QmarkConnection, "alone", counting)
    return counts


def test_a_warm_build_reads_the_payloads_of_new_messages_alone(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(pg_schema)
    try:
        store.append("s", _chat(400))
        counts = _payload_rows(monkeypatch)
        # A build after this process's appends catches up, then builds warm (one statement each).
        turnlog.build_context(store, "s", POLICY)  # the projections applied
        turnlog.build_context(store, "s", POLICY)
        store.append("s", _chat(3)[1:])
        turnlog.build_context(store, "s", POLICY)  # the new messages applied
        built = turnlog.build_context(store, "s", POLICY)
        monkeypatch.undo()
        assert built.rendered == _long_way(store, "s", POLICY).rendered
        assert len(counts) == 4, counts
        first, again, grown = counts[0], counts[1], counts[2]
        assert first > 40  # every row of the tail, the first time
        # Then only the rows no build has shown (the retained system message, not in the tail's
        # range; the rows read below what the budget took) and, after the append, the 3 new ones.
        shown = len(built.messages) - 2  # not the system message, nor the notice of the omitted
        assert built.omitted_messages > 0 and again <= first - shown and grown <= again + 3
    finally:
        store.close()


def test_items_forgotten_since_are_read_again(pg_schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from turnlog.projections import context_start

    store = _open(pg_schema)
    try:
        store.append("s", _chat(400))
        turnlog.build_context(store, "s", POLICY)
        # The statement told that every row's item is remembered, none being: the build reads
        # the payloads it needs, and shows the same.
        monkeypatch.setattr(context_start, "remembered_range", lambda store, sid: (0, 10**9))
        ITEMS.table(store).clear()
        sent = sent_queries(monkeypatch)
        built = turnlog.build_context(store, "s", POLICY)
        monkeypatch.undo()
        assert built.rendered == _long_way(store, "s", POLICY).rendered
        # The retained rows' payloads, then the tail's (each read when the first is wanted).
        assert len(sent) == 4 and all("AND c.version IN (" in q for q in sent[1:3])
    finally:
        store.close()


def test_caps_and_a_budget_past_what_an_integer_holds(pg_schema: str) -> None:
    store = _open(pg_schema)
    try:
        store.append("s", _chat(50) + _tool_turns(3))
        policy = turnlog.ContextPolicy(budget=2**40, max_tool_tokens=2**40, max_message_tokens=2**40)
        built = turnlog.build_context(store, "s", policy)
        assert built.omitted_messages == 0
        assert built.rendered == _long_way(store, "s", policy).rendered
    finally:
        store.close()


def test_the_statements_rows_are_put_in_order_when_the_server_sends_them_otherwise() -> None:
    from turnlog.projections.context_start import _in_order, _order

    header, retained, tail = (0, None), [(1, 3), (1, 1)], [(2, 9), (2, 8), (2, 5)]
    rows = [header, *retained, *tail]
    assert _in_order(rows)
    for shuffled in ([header, *tail, *retained], [header, retained[1], retained[0], *tail], rows[::-1]):
        assert not _in_order(shuffled)
        assert sorted(shuffled, key=_order) == rows
