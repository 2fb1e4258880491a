"""Token counts on PostgreSQL, made after the commit as on SQLite (store.pg_tokens): an append stores
its rows without counts, the next catch-up fills them in once and moves the watermark, a read that
finds events still waiting counts them in memory, the database lets a missing count be filled in and
nothing else, and verify tells a count still to be made from one that went missing."""

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
    with PostgresStore.open(pg_url(), schema=pg_schema, pool_size=2) as s:
        yield s


def _stored(schema: str) -> list[tuple[Any, ...]]:
    return sql("SELECT position, tokens FROM events ORDER BY position", schema)


def _watermark(schema: str) -> int | None:
    rows = sql("SELECT value FROM turnlog_meta WHERE key = 'tokens_counted_through'", schema)
    return int(str(rows[0][0])) if rows else None


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
    # The catch-up stores them, once, and moves the watermark to the head.
    assert pg.catch_up_tokens() == len(records)
    assert [tokens for _, tokens in _stored(pg.schema)] == [independent_count(r.event) for r in records]
    assert _watermark(pg.schema) == len(records) == pg.counted_position()
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


def test_inline_counting_stores_every_count_with_its_row(pg_schema: str) -> None:
    with PostgresStore.open(pg_url(), schema=pg_schema, token_counting="inline") as pg:
        records = pg.append("s", example_events())
        assert all(r.tokens == independent_count(r.event) for r in records)
        assert [tokens for _, tokens in _stored(pg_schema)] == [r.tokens for r in records]
        assert pg.catch_up_tokens() == 0
        assert _watermark(pg_schema) == len(records)  # the catch-up found nothing to count: only moved it
    with pytest.raises(StoreError, match="token_counting must be 'deferred' or 'inline'"):
        PostgresStore.open(pg_url(), schema=pg_schema, token_counting="later")  # type: ignore[arg-type]


def test_sessions_count_what_waits_before_summing(pg: PostgresStore) -> None:
    pg.append("a", [msg("alpha one"), msg("alpha two")])
    pg.append("b", [msg("beta")])
    sums = {s.session_id: s.tokens for s in pg.sessions()}
    assert sums == {"a": independent_count(msg("alpha one")) + independent_count(msg("alpha two")),
                    "b": independent_count(msg("beta"))}  # fmt: skip
    assert pg.pending_token_counts() == 0  # counted and stored on the way


def test_another_process_catch_up_and_the_writers_own_agree(pg_schema: str) -> None:
    url = f"{pg_url()}?schema={pg_schema}"
    writer = turnlog.open_store(url)
    reader = turnlog.open_store(url)
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
    assert _watermark(pg_schema) == 6


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


def test_verify_tells_a_count_to_be_made_from_a_missing_or_wrong_one(pg: PostgresStore) -> None:
    pg.append("s", [msg("one"), msg("two"), msg("three")])
    assert pg.verify().ok  # counts still to be made: nothing wrong
    sql("UPDATE event_log SET tokens = 99 WHERE position = 1", pg.schema)  # a wrong count, filled in once
    report = pg.verify()
    assert not report.ok and report.first_bad_position == 1
    assert any("position 1: stored token count 99, recomputed" in p for p in report.problems)
    # The watermark says every count up to 3 is made: the missing ones are faults now.
    sql("INSERT INTO turnlog_meta VALUES ('tokens_counted_through', '3')", pg.schema)
    problems = pg.verify().problems
    assert any("position 2: token count missing, though counted up to 3" in p for p in problems)


def test_a_store_of_an_older_schema_keeps_its_counts_and_starts_counted(pg_schema: str) -> None:
    batches: list[V1Batch] = [("s", [msg("one"), msg("two")]), ("t", [msg("three")])]
    write_pg_v1(pg_url(), pg_schema, batches)
    before = [tokens for _, tokens in _stored(pg_schema)]
    assert None not in before
    with PostgresStore.open(pg_url(), schema=pg_schema) as pg:
        assert _watermark(pg_schema) == 3  # migration 4: every row it found has its count
        assert pg.pending_token_counts() == 0 and pg.counted_position() == 3
        assert [tokens for _, tokens in _stored(pg_schema)] == before
        assert pg.verify().ok
        pg.append("t", [msg("four")])
        assert pg.catch_up_tokens() == 1
        assert _watermark(pg_schema) == 4


def test_an_append_applied_within_its_transaction_moves_the_watermark_itself(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnlog.projections.registry import materializer

    with PostgresStore.open(pg_url(), schema=pg_schema) as pg:
        kept = materializer(pg)
        pg.within_append(kept.apply_within)
        pg.on_append(lambda records: kept.catch_up(appended=records))
        first = pg.append("s", [msg("one"), msg("two")])  # counted before (a hook needs them)
        assert all(r.tokens is not None for r in first)
        assert _watermark(pg_schema) == 2  # the catch-up after the first commit made the tables
        more = pg.append("s", [msg("three")])  # applied in its own transaction, with its count
        assert more[0].tokens == independent_count(msg("three"))
        assert _watermark(pg_schema) == 3  # moved in that transaction: nothing left to count

        def refuse(*args: object) -> object:
            raise AssertionError("a catch-up had work to do")

        monkeypatch.setattr(pg, "count_pending", refuse)
        assert kept.current_head("s") == (3, 3)
