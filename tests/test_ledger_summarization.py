"""Summarizer spend in the ledger: the usage of ``summary_recorded`` and the tokens of
``output_condensed`` are billed under category ``summarization`` with the summarizer's model (or its
name), attributed to session, day and open run, priced like any model, told apart in the audit (API,
``--by category``, the text line, ``--json``), and a real ``compact`` lands there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.test_cli_projections import run
from tests.test_compaction import long_session
from tests.test_ledger import Clock
from turnlog.compaction import CompactionOptions, compact
from turnlog.projections.context import ContextPolicy
from turnlog.projections.ledger import (
    AGENT,
    SUMMARIZATION,
    AuditRow,
    Ledger,
    PriceTable,
    audit,
    load_prices,
)
from turnlog.projections.materialize import Materializer
from turnlog.store import (
    CondenserInfo,
    MessageAppended,
    OutputCondensed,
    RunFinished,
    RunStarted,
    SessionRewound,
    SQLiteStore,
    SummarizerInfo,
    SummarizerUsage,
    SummaryRecorded,
    ToolCall,
    ToolReturned,
    UsageRecorded,
)
from turnlog.store.events import summary_context_text
from turnlog.summarizers import CallableSummarizer, SummaryRequest, SummaryResult

DAY1 = "2025-09-01T10:00:00.000000+00:00"
DAY2 = "2025-09-02T10:00:00.000000+00:00"

PRICES = {
    "date": "2030-01",
    "source": "test prices",
    "models": {
        "gpt-4o": {"input": 2.0, "output": 8.0, "cache_read": 1.0, "cache_write": 2.0},
        "gpt-4o-mini": {"input": 0.5, "output": 1.0, "cache_read": 0.25, "cache_write": 0.5},
        "local-llm": {"input": 0.1, "output": 0.2, "cache_read": 0.1, "cache_write": 0.1},
    },
}

# What the scenario bills (USD), from PRICES:
AGENT_COST = (1000 * 2.0 + 200 * 8.0) / 1e6 + (500 * 2.0 + 50 * 8.0) / 1e6
SUMMARY_COST = (3000 * 0.5 + 150 * 1.0) / 1e6  # the summary, by gpt-4o-mini
CONDENSED_COST = (2000 * 0.1 + 100 * 0.2) / 1e6  # the condensed output, by "local-llm" (its name)
MINI_CONDENSED_COST = (400 * 0.5 + 40 * 1.0) / 1e6  # a condensed output in run r2, by gpt-4o-mini


@pytest.fixture
def prices_file(tmp_path: Path) -> Path:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(PRICES))
    return path


@pytest.fixture
def prices(prices_file: Path) -> PriceTable:
    return load_prices(prices_file)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr("turnlog.store.sqlite_append.now", fake)
    return fake


def summary(
    store: SQLiteStore,
    first: int,
    last: int,
    usage: SummarizerUsage | None,
    *,
    model: str | None = "gpt-4o-mini",
    reused_from: str | None = None,
) -> SummaryRecorded:
    text = f"The user asked for versions {first}-{last} to be summarized."
    return SummaryRecorded(
        first_version=first,
        last_version=last,
        level=0,
        text=text,
        tokens=store.tokenizer.count(summary_context_text(first, last, text)),
        summarizer=SummarizerInfo(name="openai", model=model),
        usage=usage,
        key="a" * 64,
        reused_from=reused_from,
    )


def condensed(target: str, input: int, output: int, name: str, model: str | None = None) -> OutputCondensed:
    return OutputCondensed(
        target_event_id=target,
        condenser=CondenserInfo(mode="auto", name=name, model=model),
        text="3 tests failed in test_money.py.",
        source_tokens=5000,
        input_tokens=input,
        output_tokens=output,
        key="b" * 64,
    )


def build_scenario(store: SQLiteStore, clock: Clock) -> None:
    """s: run r1 (a tool output, the agent's gpt-4o call), then, after r1 finished, a summary by
    gpt-4o-mini, a reused summary, a zero-usage summary, a condensed output by local-llm (no model)
    and an unbilled one; day 2: run r2 with an agent call and a condensed output by gpt-4o-mini.
    t: one agent call, no summarizer."""
    clock.now = DAY1
    call = MessageAppended(
        role="assistant", content="", tool_calls=(ToolCall(id="c1", name="run_tests", arguments="{}"),)
    )
    output = ToolReturned(tool_call_id="c1", tool_name="run_tests", content="FAILED\n" * 400)
    store.append(
        "s",
        [
            RunStarted(run_id="r1"),
            MessageAppended(role="user", content="fix the tests"),
            call,
            output,
            UsageRecorded(model="gpt-4o", input_tokens=1000, output_tokens=200),
            RunFinished(run_id="r1"),
        ],
    )
    first = summary(store, 1, 4, SummarizerUsage(input_tokens=3000, output_tokens=150))
    store.append(
        "s",
        [
            first,
            summary(store, 1, 4, None, reused_from=first.event_id),  # reused: nothing billed
            summary(store, 1, 2, SummarizerUsage()),  # a call billed zero tokens
            condensed(output.event_id, 2000, 100, "local-llm"),
            condensed(output.event_id, 0, 0, "grep"),  # a custom handler: no model called
        ],
    )
    clock.now = DAY2
    store.append(
        "s",
        [
            RunStarted(run_id="r2"),
            UsageRecorded(model="gpt-4o", input_tokens=500, output_tokens=50),
            condensed(output.event_id, 400, 40, "cheap", model="gpt-4o-mini"),
            RunFinished(run_id="r2"),
        ],
    )
    store.append("t", [UsageRecorded(model="gpt-4o", input_tokens=10, output_tokens=1)])


@pytest.fixture
def scenario(tmp_path: Path, clock: Clock) -> Iterator[SQLiteStore]:
    with SQLiteStore.open(tmp_path / "s.db") as store:
        build_scenario(store, clock)
        yield store


def billed(row: AuditRow) -> tuple[Any, ...]:
    return (row.key, row.calls, row.input, row.output, row.cache_read, row.reasoning)


T_COST = (10 * 2.0 + 1 * 8.0) / 1e6


def test_by_category_lists_agent_and_summarization_spend(scenario: SQLiteStore, prices: PriceTable) -> None:
    report = audit(scenario, "s", by="category", prices=prices)
    agent, summarization = report.rows[:2]
    assert billed(agent) == (AGENT, 2, 1500, 250, 0, 0)
    # The summary (3000/150), the zero-usage summary (a call, no tokens), two condensed outputs;
    # neither the reused summary nor the unbilled condensed output counts.
    assert billed(summarization) == (SUMMARIZATION, 4, 3000 + 2000 + 400, 150 + 100 + 40, 0, 0)
    assert agent.cost == pytest.approx(AGENT_COST)
    assert summarization.cost == pytest.approx(SUMMARY_COST + CONDENSED_COST + MINI_CONDENSED_COST)
    assert (summarization.appended, summarization.sent, summarization.contexts) == (None, None, None)
    assert summarization == report.summarization
    # The manifest categories follow (none here: no context was recorded), and the billed rows add
    # up to the totals.
    assert len(report.rows) == 2
    totals = report.totals
    assert totals.calls == agent.calls + summarization.calls  # type: ignore[operator]
    assert totals.input == agent.input + summarization.input  # type: ignore[operator]
    assert totals.output == agent.output + summarization.output  # type: ignore[operator]
    assert totals.cost == pytest.approx(agent.cost + summarization.cost)  # type: ignore[operator]


def test_every_grouping_includes_summarization_in_its_totals(
    scenario: SQLiteStore, prices: PriceTable
) -> None:
    whole = SUMMARY_COST + CONDENSED_COST + MINI_CONDENSED_COST
    by_model = {r.key: r for r in audit(scenario, by="model", prices=prices).rows}
    assert set(by_model) == {"gpt-4o", "gpt-4o-mini", "local-llm"}
    assert billed(by_model["gpt-4o-mini"]) == ("gpt-4o-mini", 3, 3400, 190, 0, 0)
    assert by_model["gpt-4o-mini"].cost == pytest.approx(SUMMARY_COST + MINI_CONDENSED_COST)
    assert billed(by_model["local-llm"]) == ("local-llm", 1, 2000, 100, 0, 0)  # the condenser's name
    by_run = {r.key: r for r in audit(scenario, by="run", prices=prices).rows}
    # r1 finished before the summaries: they belong to no run; r2's condensed output is r2's.
    assert billed(by_run["r1"]) == ("r1", 1, 1000, 200, 0, 0)
    assert billed(by_run["r2"]) == ("r2", 2, 900, 90, 0, 0)
    assert by_run["r2"].cost == pytest.approx((500 * 2.0 + 50 * 8.0) / 1e6 + MINI_CONDENSED_COST)
    assert billed(by_run[None]) == (None, 4, 5010, 251, 0, 0)
    by_day = {r.key: r for r in audit(scenario, by="day", prices=prices).rows}
    assert (by_day["2025-09-01"].calls, by_day["2025-09-02"].calls) == (4, 3)  # t is on day 2
    by_session = {r.key: r for r in audit(scenario, prices=prices).rows}
    assert by_session["s"].cost == pytest.approx(AGENT_COST + whole)
    assert by_session["t"].cost == pytest.approx(T_COST)
    for by in ("session", "run", "model", "day", "category"):
        report = audit(scenario, by=by, prices=prices)  # type: ignore[arg-type]
        assert report.totals.calls == 7 and report.totals.cost == pytest.approx(AGENT_COST + whole + T_COST)
        assert report.summarization.calls == 4
        assert report.summarization.cost == pytest.approx(whole)
        if by != "category":
            assert sum(r.calls or 0 for r in report.rows) == 7
            assert sum(r.cost or 0 for r in report.rows) == pytest.approx(report.totals.cost)


def test_unpriced_summarizer_and_a_store_without_summaries(
    scenario: SQLiteStore, tmp_path: Path, clock: Clock
) -> None:
    only_4o = PriceTable.model_validate({**PRICES, "models": {"gpt-4o": PRICES["models"]["gpt-4o"]}})
    report = audit(scenario, "s", prices=only_4o)
    assert report.unknown_models == ("gpt-4o-mini", "local-llm")
    assert report.summarization.cost is None and report.totals.cost is None
    # No summarizer billed anywhere: the category view keeps only the manifest categories, and the
    # summarization row is zeros.
    with SQLiteStore.open(tmp_path / "plain.db") as plain:
        plain.append("p", [UsageRecorded(model="gpt-4o", input_tokens=5, output_tokens=5)])
        report = audit(plain, by="category")
        assert report.rows == ()
        assert billed(report.summarization) == (SUMMARIZATION, 0, 0, 0, 0, 0)
        assert report.summarization.cost == 0.0


def test_t_alone_has_no_billed_rows(scenario: SQLiteStore, prices: PriceTable) -> None:
    # Session t had no summarizer call: its category view lists no billed categories.
    report = audit(scenario, "t", by="category", prices=prices)
    assert report.rows == () and report.summarization.calls == 0
    assert report.totals.calls == 1


def test_a_rewind_does_not_refund_summarizer_spend(scenario: SQLiteStore, prices: PriceTable) -> None:
    before = audit(scenario, "s", prices=prices).summarization
    scenario.append("s", [SessionRewound(to_version=0, reason="delete")])
    after = audit(scenario, "s", prices=prices)
    assert after.summarization == before and after.summarization.calls == 4


def test_incremental_equals_rebuild_and_an_old_ledger_is_rebuilt(
    tmp_path: Path, clock: Clock, prices: PriceTable
) -> None:
    with SQLiteStore.open(tmp_path / "r.db") as store:
        ledger = Materializer(store, [Ledger()])
        ledger.catch_up()
        build_scenario(store, clock)  # four appends, each caught up after it commits
        ledger.catch_up()
        assert ledger.differences() == []
        before = audit(store, by="run", prices=prices)
        # A ledger written by version 1 (ledger_usage without a category) is dropped and rebuilt.
        store.conn.execute("DROP TABLE ledger_usage")
        store.conn.execute(
            "CREATE TABLE ledger_usage (session_id TEXT NOT NULL, run_id TEXT NOT NULL, model TEXT NOT NULL, "
            "day TEXT NOT NULL, calls INTEGER NOT NULL, input INTEGER NOT NULL, output INTEGER NOT NULL, "
            "cache_read INTEGER NOT NULL, cache_write INTEGER NOT NULL, reasoning INTEGER NOT NULL, "
            "PRIMARY KEY (session_id, run_id, model, day)) STRICT, WITHOUT ROWID"
        )
        store.conn.execute("UPDATE projection_checkpoints SET version = 1 WHERE name = 'ledger'")
    with SQLiteStore.open(tmp_path / "r.db", readonly=True) as readonly:
        assert audit(readonly, by="run", prices=prices) == before  # folded in memory, file untouched
    with SQLiteStore.open(tmp_path / "r.db") as reopened:
        assert audit(reopened, by="run", prices=prices) == before
        columns = [row[1] for row in reopened.conn.execute("PRAGMA table_info(ledger_usage)")]
        assert "category" in columns


def test_a_real_compaction_lands_in_the_audit(tmp_path: Path, prices: PriceTable) -> None:
    calls: list[int] = []

    def summarize(request: SummaryRequest) -> SummaryResult:
        calls.append(request.last_version)
        return SummaryResult(
            f"Parts {request.first_version}-{request.last_version} were edited and tested.",
            SummarizerUsage(input_tokens=len(request.transcript), output_tokens=42),
        )

    with SQLiteStore.open(tmp_path / "c.db") as store:
        long_session(store, 30)
        summarizer = CallableSummarizer(summarize, name="mini", model="gpt-4o-mini")
        options = CompactionOptions(keep_last=6)
        result = compact(
            store, "s", ContextPolicy(budget=2500, max_tool_tokens=200), summarizer, options=options
        )
        # Each summarizer call wrote one billed summary (a last, truncating tier may add unbilled ones).
        assert result.summaries and len(calls) == sum(1 for s in result.summaries if s.usage)
        spent = sum(s.usage.input_tokens for s in result.summaries if s.usage)
        report = audit(store, "s", by="category", prices=prices)
        assert billed(report.rows[1]) == (SUMMARIZATION, len(calls), spent, 42 * len(calls), 0, 0)
        assert report.summarization.cost == pytest.approx((spent * 0.5 + 42 * len(calls) * 1.0) / 1e6)
        by_model = {r.key: r for r in audit(store, "s", by="model", prices=prices).rows}
        assert by_model["gpt-4o-mini"].calls == len(calls)
        # Compacting again reuses nothing new and bills nothing: the fork-free session fits now.
        again = compact(
            store, "s", ContextPolicy(budget=2500, max_tool_tokens=200), summarizer, options=options
        )
        assert not again.summaries
        assert audit(store, "s", prices=prices).summarization == report.summarization


def test_a_plain_callable_is_billed_under_its_name(tmp_path: Path) -> None:
    def local_llm(request: SummaryRequest) -> SummaryResult:
        return SummaryResult("Edited and tested.", SummarizerUsage(input_tokens=100, output_tokens=10))

    with SQLiteStore.open(tmp_path / "n.db") as store:
        long_session(store, 30)
        compact(store, "s", ContextPolicy(budget=2500, max_tool_tokens=200), local_llm)
        report = audit(store, "s", by="model")
        assert report.rows[0].key == "local_llm"  # the function's name: no model given
        assert report.unknown_models == ("local_llm",) and report.summarization.cost is None


# --- the CLI -------------------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path, clock: Clock) -> Path:
    path = tmp_path / "cli.db"
    with SQLiteStore.open(path, create=True) as store:
        build_scenario(store, clock)
    return path


def test_cli_json_carries_summarization(runner: CliRunner, db: Path, prices_file: Path) -> None:
    code, out = run(runner, db, "audit", "--prices", str(prices_file), "--json")
    assert code == 0
    data = json.loads(out)
    spent = data["summarization"]
    assert (spent["key"], spent["calls"], spent["input"], spent["output"]) == (SUMMARIZATION, 4, 5400, 290)
    assert spent["cost"] == pytest.approx(SUMMARY_COST + CONDENSED_COST + MINI_CONDENSED_COST)
    assert data["totals"]["calls"] == 7
    code, out = run(runner, db, "audit", "s", "--by", "category", "--prices", str(prices_file), "--json")
    rows = {r["key"]: r for r in json.loads(out)["rows"]}
    assert list(rows) == [AGENT, SUMMARIZATION]
    assert rows[SUMMARIZATION]["calls"] == 4 and rows[SUMMARIZATION]["sent"] is None


def test_cli_text_shows_the_summarization_line(runner: CliRunner, db: Path, prices_file: Path) -> None:
    code, out = run(runner, db, "audit", "--prices", str(prices_file))
    assert code == 0
    whole = SUMMARY_COST + CONDENSED_COST + MINI_CONDENSED_COST
    total = AGENT_COST + whole + T_COST
    line = _ledger_text(out).splitlines()[-1]
    assert line == (
        f"summarization: 4 summarizer calls, 5,400 input + 290 output tokens, ${whole:.4f} of "
        f"${total:.4f} ({whole / total:.1%})"
    )
    code, out = run(runner, db, "audit", "s", "--by", "category", "--prices", str(prices_file))
    lines = out.splitlines()
    assert lines[0].split() == [
        "category", "calls", "input", "output", "cache_read", "reasoning", "contexts", "sent", "priced",
    ]  # fmt: skip
    assert lines[2].split()[:4] == [AGENT, "2", "1,500", "250"]
    assert lines[3].split()[:4] == [SUMMARIZATION, "4", "5,400", "290"]
    assert f"(USD; priced: with the prices of 2030-01 from {prices_file})" in out
    assert "summarization: 4 summarizer calls" in out


def test_cli_text_without_summaries_is_unchanged(runner: CliRunner, db: Path) -> None:
    code, out = run(runner, db, "audit", "t")
    assert code == 0 and "summarization" not in out
    assert _ledger_text(out).splitlines()[-1].startswith("(USD; priced: with the prices genai-prices ")
    code, out = run(runner, db, "audit", "t", "--by", "category")
    assert _ledger_text(out).split() == [
        "category", "contexts", "sent", "--------", "--------", "----", "TOTAL", "0", "0"
    ]  # fmt: skip


def test_cli_unknown_summarizer_price(runner: CliRunner, db: Path, tmp_path: Path) -> None:
    prices = tmp_path / "p.json"
    prices.write_text(json.dumps({**PRICES, "models": {"gpt-4o": PRICES["models"]["gpt-4o"]}}))  # type: ignore[index]
    code, out = run(runner, db, "audit", "s", "--prices", str(prices))
    assert code == 0
    assert (
        "summarization: 4 summarizer calls, 5,400 input + 290 output tokens, cost unknown of an unknown total"
        in out
    )
    assert _ledger_text(out).splitlines()[-1] == "no price for: gpt-4o-mini, local-llm"


def _ledger_text(out: str) -> str:
    """The audit's text before its estimates section (the agent's calls: billed beside estimated)."""
    return out.split("\n\nbilled input beside", 1)[0].rstrip("\n")
