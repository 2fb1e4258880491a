"""Token counts on PostgreSQL made after the commit, as on SQLite (``token_counting="deferred"``,
store.pg_tokens): an append stores its rows without counts, the next catch-up fills them in once, a
read that finds events still waiting counts them in memory, the database lets a missing count be
filled in and nothing else, and verify checks every count made. Counting inline, before the
transaction, stays PostgreSQL's default, and costs it nothing of this."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import turnlog
from tests.helpers.postgres import pg_schema, pg_url, sql
from tests.helpers.v1_store import V1Batch, write_pg_v1
from tests.store_contract import example_events, independent_count, msg
from turnlog.store import SQLiteStore, StoreError, ToolReturned

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'turnlog[postgres]')")

from turnlog.store.postgres import PostgresStore

__all__ = ["pg_schema"]  # the fixture, imported for this module's tests


@pytest.fixture
def pg(pg_schema: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(pg_url(), schema=pg_schema, pool_size=2, token_counting="deferred") as s:
        yield s


def _stored(schema: str) -> list[tuple[Any, ...]]:
    return sql("SELECT position, tokens FROM events ORDER BY position", schema)


def _uncounted(schema: str) -> int:
    """Rows in the partial index of those waiting for a count (what counted_position probes)."""
    rows = sql("SELECT count(*) FROM event_log WHERE tokens IS NULL", schema)
    return int(str(rows[0][0]))


def test_an_append_commits_without_counts_and_a_catch_up_fills_them_in(pg: PostgresStore) -> None:
    records = pg.append("s", example_events())
    records += pg.append(
        "t", [msg("The quick brown fox " * 50), ToolReturned(tool_call_id="c", content="x\n" * 9)]
    )
    assert all(r.tokens is None for r in records)
    assert [tokens for _, tokens in _stored(pg.schema)] == [None] * len(records)
    assert pg.pending_token_counts() == len(records) and pg.counted_position() == 0
    # A read counts what waits in memory, writing nothing.
    read = list(pg.iter_after(0))
    assert [r.tokens for r in read] == [independent_count(r.event) for r in records]
    assert pg.read_session("t")[0].tokens == independent_count(records[-2].event)
    assert pg.get_event(records[0].event.event_id).tokens == independent_count(records[0].event)
    assert [tokens for _, tokens in _stored(pg.schema)] == [None] * len(records)
    # The catch-up stores them, once: every event is counted up to the head.
    assert pg.catch_up_tokens() == len(records)
    assert [tokens for _, tokens in _stored(pg.schema)] == [independent_count(r.event) for r in records]
    assert pg.counted_position() == len(records) and _uncounted(pg.schema) == 0
    assert pg.catch_up_tokens() == 0 and pg.pending_token_counts() == 0
    assert pg.verify().ok


def test_counts_are_the_same_as_sqlite_ones(pg: PostgresStore, tmp_path: Any) -> None:
    with SQLiteStore.open(tmp_path / "s.db", token_counting="inline") as lite:
        for target in (lite, pg):
            target.append("s", example_events())
            target.append("s", [msg("émoji 🙂 and 中文 and <|endoftext|>"), msg(" \n\t  spaces ")])
        pg.catch_up_tokens()
        assert [(r.position, r.tokens) for r in pg.iter_after(0)] == [
            (r.position, r.tokens) for r in lite.iter_after(0)
        ]
        assert [(s.session_id, s.tokens) for s in pg.sessions()] == [
            (s.session_id, s.tokens) for s in lite.sessions()
        ]


def test_inline_counting_the_default_stores_every_count_with_its_row(pg_schema: str) -> None:
    with PostgresStore.open(pg_url(), schema=pg_schema) as pg:
        records = pg.append("s", example_events())
        assert all(r.tokens == independent_count(r.event) for r in records)
        assert [tokens for _, tokens in _stored(pg_schema)] == [r.tokens for r in records]
        assert pg.catch_up_tokens() == 0 and pg.counted_position() == len(records)
        plan = sql(
            "EXPLAIN SELECT min(position) FROM event_log WHERE tokens IS NULL AND position IS NOT NULL",
            pg_schema,
        )
        assert "event_log_uncounted" in " ".join(str(row[0]) for row in plan)  # a probe, not a scan
    with pytest.raises(StoreError, match="token_counting must be 'deferred' or 'inline'"):
        PostgresStore.open(pg_url(), schema=pg_schema, token_counting="later")  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="token_counting must be 'deferred' or 'inline', not ''"):
        turnlog.open_store(f"{pg_url()}?schema={pg_schema}", token_counting="")  # type: ignore[arg-type]


def test_sessions_count_what_waits_before_summing(pg: PostgresStore) -> None:
    pg.append("a", [msg("alpha one"), msg("alpha two")])
    pg.append("b", [msg("beta")])
    sums = {s.session_id: s.tokens for s in pg.sessions()}
    assert sums == {"a": independent_count(msg("alpha one")) + independent_count(msg("alpha two")),
                    "b": independent_count(msg("beta"))}  # fmt: skip
    assert pg.pending_token_counts() == 0  # counted and stored on the way


def test_another_process_catch_up_and_the_writers_own_agree(pg_schema: str) -> None:
    url = f"{pg_url()}?schema={pg_schema}"
    writer = turnlog.open_store(url, token_counting="deferred")
    reader = turnlog.open_store(
        url
    )  # counts inline, the default: its catch-up counts what waits all the same
    try:
        writer.append("s", [msg(f"turn {i}") for i in range(5)])
        # The reader's read catches the log up: counts and projections, from the checkpoints.
        built = turnlog.build_context(reader, "s", turnlog.ContextPolicy(budget=4000))
        assert built.messages[-1].content == "turn 4"
        assert all(tokens is not None for _, tokens in _stored(pg_schema))
        writer.append("s", [msg("turn 5")])
    finally:
        writer.close()  # the writer's own catch-up: its count fills the last row
        reader.close()
    assert [tokens for _, tokens in _stored(pg_schema)] == [
        independent_count(msg(f"turn {i}")) for i in range(6)
    ]
    assert _uncounted(pg_schema) == 0


@pytest.mark.parametrize(
    ("statement", "allowed"),
    [
        ("UPDATE event_log SET tokens = 7 WHERE position = 2", True),
        ("UPDATE event_log SET tokens = NULL WHERE position = 2", False),
        ("UPDATE event_log SET tokens = 7, payload = '{}' WHERE position = 2", False),
        ("UPDATE event_log SET tokens = 7, order_hash = hash WHERE position = 2", False),
        ("UPDATE event_log SET tokens = 7, position = 99 WHERE position = 2", False),
        ("UPDATE event_log SET tokens = -1 WHERE position = 2", False),
    ],
)
def test_the_database_lets_a_missing_count_be_filled_in_and_nothing_else(
    pg: PostgresStore, statement: str, allowed: bool
) -> None:
    pg.append("s", [msg("one"), msg("two"), msg("three")])
    if allowed:
        sql(statement, pg.schema)
        assert _stored(pg.schema)[1] == (2, 7)
        with pytest.raises(Exception, match="turnlog: events are immutable"):
            sql("UPDATE event_log SET tokens = 8 WHERE position = 2", pg.schema)  # once only
        assert _stored(pg.schema)[1] == (2, 7)
    else:
        with pytest.raises(Exception, match=r"turnlog: events are immutable|events_tokens_in_range"):
            sql(statement, pg.schema)
        assert _stored(pg.schema)[1] == (2, None)


def test_verify_checks_every_count_made(pg: PostgresStore) -> None:
    pg.append("s", [msg("one"), msg("two"), msg("three")])
    assert pg.verify().ok  # counts still to be made: nothing wrong
    sql("UPDATE event_log SET tokens = 99 WHERE position = 1", pg.schema)  # a wrong count, filled in once
    report = pg.verify()
    assert not report.ok and report.first_bad_position == 1
    assert any("position 1: stored token count 99, recomputed" in p for p in report.problems)
    assert pg.counted_position() == 1  # position 2 waits: what follows is not counted yet


def test_a_store_of_an_older_schema_keeps_its_counts_and_starts_counted(pg_schema: str) -> None:
    batches: list[V1Batch] = [("s", [msg("one"), msg("two")]), ("t", [msg("three")])]
    write_pg_v1(pg_url(), pg_schema, batches)
    before = [tokens for _, tokens in _stored(pg_schema)]
    assert None not in before
    with PostgresStore.open(pg_url(), schema=pg_schema, token_counting="deferred") as pg:
        assert pg.pending_token_counts() == 0 and pg.counted_position() == 3  # migration 4 keeps them
        assert [tokens for _, tokens in _stored(pg_schema)] == before
        assert pg.verify().ok
        pg.append("t", [msg("four")])
        assert pg.counted_position() == 3
        assert pg.catch_up_tokens() == 1
        assert pg.counted_position() == 4


def test_an_append_applied_within_its_transaction_leaves_nothing_to_count(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnlog.projections.registry import materializer

    with PostgresStore.open(pg_url(), schema=pg_schema, token_counting="deferred") as pg:
        kept = materializer(pg)
        pg.within_append(kept.apply_within)
        pg.on_append(lambda records: kept.catch_up(appended=records))
        first = pg.append("s", [msg("one"), msg("two")])  # counted before (a hook needs them)
        assert all(r.tokens is not None for r in first)
        more = pg.append("s", [msg("three")])  # applied in its own transaction, with its count
        assert more[0].tokens == independent_count(msg("three"))
        assert _uncounted(pg_schema) == 0

        def refuse(*args: object) -> object:
            raise AssertionError("a catch-up had work to do")

        monkeypatch.setattr(pg, "count_pending", refuse)
        assert kept.current_head("s") == (3, 3)


def test_a_readers_catch_up_looks_for_counts_to_make_in_its_one_first_round_trip(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.helpers.postgres import sent_queries
    from turnlog.projections.registry import materializer

    url = f"{pg_url()}?schema={pg_schema}"
    with turnlog.open_store(url) as writer, turnlog.open_store(url) as reader:
        writer.append("s", [msg("one"), msg("two")])  # counted inline, the default
        sent = sent_queries(monkeypatch)
        assert materializer(reader).catch_up() == 2
        looked = [q for q in sent if "event_log WHERE tokens IS NULL" in q]
        # Only ever with the checkpoints (the reading's first round trip, and the write's in its
        # lock), never a round trip of its own.
        assert looked and all("projection_checkpoints" in q for q in looked)
        monkeypatch.undo()
    with turnlog.open_store(url, token_counting="deferred") as writer, turnlog.open_store(url) as reader:
        writer.append("s", [msg("three")])
        sent = sent_queries(monkeypatch)
        assert materializer(reader).catch_up() == 3  # seen waiting there, then counted and stored
        assert any("UPDATE event_log SET tokens" in q for q in sent)
        monkeypatch.undo()
        assert _uncounted(pg_schema) == 0


def test_a_damaged_row_waiting_for_its_count_does_not_stop_the_others(pg: PostgresStore) -> None:
    # A row that cannot be decoded keeps no count (verify reports it); the catch-up counts the
    # others, and a full batch that meets it reaches past it, so that the next batch goes on.
    records = pg.append("s", [msg(f"message {i}") for i in range(6)])
    sql(
        "ALTER TABLE event_log DISABLE TRIGGER events_no_update; "
        "UPDATE event_log SET payload = '{not json' WHERE position = 2; "
        "ALTER TABLE event_log ENABLE TRIGGER events_no_update",
        pg.schema,
    )
    pending = pg.count_pending(limit=3)
    assert pending is not None
    counts, through = pending
    assert [position for _, position in counts] == [1, 3] and through == 3
    assert pg.catch_up_tokens() == 5
    stored = _stored(pg.schema)
    assert [tokens is None for _, tokens in stored] == [False, True, False, False, False, False]
    assert [tokens for _, tokens in stored if tokens is not None] == [
        independent_count(r.event) for r in records if r.position != 2
    ]
    assert pg.pending_token_counts() == 1 and pg.counted_position() == 1
    assert not pg.verify().ok
