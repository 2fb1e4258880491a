"""The bench's `postgres` section (issue 17): its build figure times turnlog and the plain-psycopg
tail read in turns on one server and leaves nothing behind. (Its ratios are measured by
`scripts/bench --only postgres`, never asserted here.)"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.postgres import pg_url, require_pg, sql

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def postgres_bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    require_pg()
    monkeypatch.setenv("TURNLOG_BENCH_PG", pg_url())
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from benchlib import postgres_bench

        yield postgres_bench
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def _bench_schemas() -> set[str]:
    rows = sql("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'tl_bench_%'", "public")
    return {str(r[0]) for r in rows}


def test_the_build_figure_takes_turns_and_drops_its_schemas(
    postgres_bench: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _bench_schemas()
    calls: list[str] = []
    timed = postgres_bench._times

    def recording(fn: Any, repeat: int) -> list[float]:
        calls.append(fn.__name__)
        return timed(fn, repeat)

    monkeypatch.setattr(postgres_bench, "_times", recording)
    ours, floor = postgres_bench.build(120, 20)
    assert ours > 0 and floor > 0
    # A block of each side, round after round: the drift of a shared machine falls on both.
    assert calls == ["ours", "tail"] * postgres_bench.BUILD_ROUNDS
    assert _bench_schemas() == before


def test_the_writer_processes_are_spawned_and_leave_nothing_behind(postgres_bench: Any) -> None:
    # Spawned writers import the bench afresh (nothing of this process's heap); each makes one
    # untimed append, then all start together. Both sides, then no schema of theirs is left.
    before = _bench_schemas()
    assert postgres_bench.writers(2, 5) > 0
    assert postgres_bench.writers(2, 5, floor=True) > 0
    assert _bench_schemas() == before


def test_the_append_floor_is_one_statement_or_three(
    postgres_bench: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lone INSERT in autocommit mode is its own transaction; explicit=True (and a batch) opens
    # one with BEGIN and ends it with COMMIT.
    import psycopg

    opened: list[int] = []
    transaction = psycopg.Connection.transaction

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(1)
        return transaction(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "transaction", counted)
    before = _bench_schemas()
    assert postgres_bench.floor_append(10) > 0
    assert len(opened) == 0
    assert postgres_bench.floor_append(10, explicit=True) > 0
    assert len(opened) == 10
    assert postgres_bench.floor_append(20, batch=10) > 0
    assert len(opened) == 12
    assert _bench_schemas() == before


def test_turnlogs_own_statements_replayed_store_the_same_rows(postgres_bench: Any) -> None:
    # The third side records turnlog's one-round-trip statements and sends them again by plain
    # psycopg into a copy of the log; it checks the copy then holds the source's very rows (it
    # raises otherwise) and drops both schemas.
    from benchlib import pg_rows

    before = _bench_schemas()
    assert pg_rows.rows_append(12) > 0
    assert _bench_schemas() == before


def test_the_least_client_work_is_timed_on_the_stores_own_rows(postgres_bench: Any) -> None:
    # The least work of the recorded appends' events is checked against the rows turnlog stored
    # (LeastWork raises otherwise), its schemas are dropped, and the bound it gives is rendered.
    from benchlib import pg_rows

    before = _bench_schemas()
    assert pg_rows.least_append(12) > 0
    assert _bench_schemas() == before
    rows = postgres_bench._least_row({"floor_append": 1000.0, "rows_append": 800.0, "least_append": 8000.0})
    assert len(rows) == 1 and "at best 0.73×" in rows[0] and "out of reach of this design" in rows[0]
    assert postgres_bench._least_row({"floor_append": 1000.0}) == []
