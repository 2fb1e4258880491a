"""Prices from genai-prices: read offline from the installed package and never updated over the network,
each call priced at its date and size, the provider taken from the model name, cached tokens in
turnlog's meaning; the cost a source recorded shown beside turnlog's price; unknown models unknown."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import genai_prices
import pytest
from click.testing import CliRunner
from genai_prices import Usage, data_snapshot, update_prices

from turnlog.cli import cli
from turnlog.projections.ledger import audit
from turnlog.projections.prices import CallTokens, PackagePrices, load_prices
from turnlog.projections.spend import call_spend
from turnlog.store import SQLiteStore, UsageRecorded

DAY = "2025-08-01T10:00:00+00:00"


@pytest.fixture
def prices() -> PackagePrices:
    return PackagePrices()


def call(input: int, output: int, read: int = 0, write: int = 0, calls: int = 1, at: str = DAY) -> CallTokens:
    return CallTokens(at, input, output, read, write, calls)


def test_cached_tokens_are_part_of_the_input_as_in_turnlog(prices: PackagePrices) -> None:
    # gpt-4o: $2.50 input, $1.25 cached input, $10 output per million tokens.
    assert prices.cost("gpt-4o-2024-08-06", [call(1000, 200, read=400)]) == pytest.approx(
        (600 * 2.50 + 400 * 1.25 + 200 * 10.0) / 1e6
    )
    # claude-sonnet-4: $3 input, $0.30 cache read, $3.75 cache write, $15 output.
    assert prices.cost("claude-sonnet-4-20250514", [call(2000, 100, read=1000, write=500)]) == pytest.approx(
        (500 * 3.0 + 1000 * 0.30 + 500 * 3.75 + 100 * 15.0) / 1e6
    )
    # More cached than input tokens (a source's mistake): priced as all cached, not refused.
    assert prices.cost("gpt-4o", [call(100, 0, read=400)]) == pytest.approx(400 * 1.25 / 1e6)


def test_the_same_as_genai_prices_itself(prices: PackagePrices) -> None:
    from datetime import datetime

    usage = Usage(input_tokens=12_345, output_tokens=678, cache_read_tokens=2_000, cache_write_tokens=300)
    for model in ("gpt-4o-mini", "claude-3-5-haiku-20241022", "gemini-2.5-flash", "o3-2025-04-16"):
        expected = genai_prices.calc_price(usage, model, genai_request_timestamp=datetime.fromisoformat(DAY))
        assert Decimal(str(prices.cost(model, [call(12_345, 678, 2_000, 300)]))) == pytest.approx(
            expected.total_price
        ), model


def test_unknown_models_have_no_price(prices: PackagePrices) -> None:
    assert prices.cost("mystery-model", [call(10, 10)]) is None
    assert prices.cost("nobody:gpt-4o-but-not-really", [call(10, 10)]) is None
    assert prices.find("mystery-model") is None


def test_the_provider_is_taken_from_the_model_name(prices: PackagePrices) -> None:
    plain = prices.cost("claude-3-5-haiku-20241022", [call(1000, 100)])
    assert plain is not None
    for named in ("anthropic:claude-3-5-haiku-20241022", "anthropic/claude-3-5-haiku-20241022"):
        found = prices.find(named)
        assert found is not None and found[0].id == "anthropic"
        assert prices.cost(named, [call(1000, 100)]) == plain
    found = prices.find("gpt-4o")
    assert found is not None and found[0].id == "openai"  # inferred from the name
    # An unknown prefix is not a provider: the name after it is still looked up.
    assert prices.cost("my-gateway/gpt-4o", [call(1000, 100)]) == prices.cost("gpt-4o", [call(1000, 100)])


def test_long_context_tiers_apply_per_call(prices: PackagePrices) -> None:
    # gemini-2.5-pro: $1.25 / $10 up to 200k prompt tokens, $2.50 / $15 above (every token of the call).
    small = prices.cost("gemini-2.5-pro", [call(150_000, 100)])
    big = prices.cost("gemini-2.5-pro", [call(300_000, 100)])
    assert small == pytest.approx((150_000 * 1.25 + 100 * 10) / 1e6)
    assert big == pytest.approx((300_000 * 2.50 + 100 * 15) / 1e6)
    # Two small calls are not one big one; a run's totals are priced as its average call.
    assert prices.cost("gemini-2.5-pro", [call(150_000, 100)] * 2) == pytest.approx(2 * small)  # type: ignore[operator]
    assert prices.cost("gemini-2.5-pro", [call(300_000, 200, calls=2)]) == pytest.approx(2 * small)  # type: ignore[operator]


def test_never_fetches_and_ignores_a_snapshot_set_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the network was used")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(update_prices.httpx2, "get", refuse)
    before = PackagePrices().cost("gpt-4o", [call(1000, 100)])
    # Another library in the process installs a snapshot (as genai-prices' updater does): turnlog's
    # prices stay those of the installed package.
    data_snapshot.set_custom_snapshot(data_snapshot.DataSnapshot(providers=[], from_auto_update=True))
    try:
        assert PackagePrices().cost("gpt-4o", [call(1000, 100)]) == before is not None
    finally:
        data_snapshot.set_custom_snapshot(None)
    assert update_prices._shared_updater.thread is None  # no updater was started


def test_prices_follow_the_date_of_each_call(prices: PackagePrices) -> None:
    # A model whose price changed on a date: priced at the date of the call, not today's.
    from genai_prices.types import ConditionalPrice, StartDateConstraint

    dated = next(
        (p.id, m.id, m.prices)
        for p in prices._snapshot.providers
        for m in p.models
        if isinstance(m.prices, list)
        and any(isinstance(c.constraint, StartDateConstraint) for c in m.prices)
        and all(isinstance(c, ConditionalPrice) for c in m.prices)
    )
    provider, model, conditional = dated
    change = next(
        c.constraint.start_date for c in conditional if isinstance(c.constraint, StartDateConstraint)
    )
    before = prices.cost(
        f"{provider}:{model}", [call(1_000_000, 1_000_000, at=f"{change.year - 1}-01-01T00:00:00+00:00")]
    )
    after = prices.cost(
        f"{provider}:{model}", [call(1_000_000, 1_000_000, at=f"{change.isoformat()}T12:00:00+00:00")]
    )
    assert before is not None and after is not None and before != after


def test_load_prices_defaults_to_the_package() -> None:
    prices = load_prices()
    assert isinstance(prices, PackagePrices) and prices is load_prices()
    assert prices.date is None and prices.source.startswith(f"genai-prices {genai_prices.__version__}")


# --- billed cost beside the price, in the audit -----------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore.open(tmp_path / "spend.db") as opened:
        opened.append(
            "billed",
            [
                UsageRecorded(model="gpt-4o", input_tokens=1000, output_tokens=100, cost_usd=0.5, source="x"),
                UsageRecorded(model="gpt-4o", input_tokens=2000, output_tokens=100),
                UsageRecorded(model="mystery-model", input_tokens=10, output_tokens=1, cost_usd=0.25),
            ],
        )
        opened.append("priced", [UsageRecorded(model="gpt-4o-mini", input_tokens=1000, output_tokens=100)])
        yield opened


def test_audit_shows_the_billed_cost_beside_the_price(store: SQLiteStore) -> None:
    report = audit(store, by="model")
    rows = {r.key: r for r in report.rows}
    gpt = rows["gpt-4o"]
    assert (gpt.billed_cost, gpt.billed_calls, gpt.calls) == (0.5, 1, 2)  # recorded for one call of two
    assert gpt.cost == pytest.approx((3000 * 2.50 + 200 * 10.0) / 1e6)
    mystery = rows["mystery-model"]
    assert (mystery.billed_cost, mystery.cost) == (0.25, None)  # billed, but turnlog cannot price it
    assert rows["gpt-4o-mini"].billed_cost is None
    assert report.totals.billed_cost == 0.75 and report.totals.cost is None
    assert report.unknown_models == ("mystery-model",)
    spent = call_spend(store, "billed")
    assert [(c.billed_cost, c.cost is None) for c in spent] == [(0.5, False), (None, False), (0.25, True)]


def test_cli_text_and_json_never_show_an_unknown_cost_as_zero(store: SQLiteStore, tmp_path: Path) -> None:
    runner = CliRunner()
    db = str(tmp_path / "spend.db")
    result = runner.invoke(cli, ["--db", db, "audit", "--by", "model"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[-3:] == ["billed", "cost", "priced"]
    table_lines = (
        lines[2 : lines.index("")] if "" in lines else lines[2:]
    )  # the estimates follow a blank line
    by_model = {line.split()[0]: line for line in table_lines if line.strip()}
    assert by_model["mystery-model"].split()[-2:] == ["$0.2500", "unknown"]
    assert by_model["gpt-4o"].split()[-2:] == ["$0.5000*", "$0.0095"]
    assert by_model["TOTAL"].split()[-2:] == ["$0.7500*", "unknown"]
    assert "* the source recorded a cost for only some of these calls" in result.output
    assert "no price for: mystery-model" in result.output
    result = runner.invoke(cli, ["--db", db, "audit", "--by", "model", "--json"])
    data = json.loads(result.output)
    rows = {r["key"]: r for r in data["rows"]}
    assert rows["mystery-model"]["cost"] is None and rows["mystery-model"]["billed_cost"] == 0.25
    assert data["totals"]["cost"] is None and data["unknown_models"] == ["mystery-model"]
    assert data["prices"]["date"] is None and data["prices"]["source"].startswith("genai-prices")
    # Without any recorded cost, only turnlog's price is shown.
    result = runner.invoke(cli, ["--db", db, "audit", "priced"])
    ledger = result.output.split("\n\nbilled input beside", 1)[0]  # the estimates section follows
    assert ledger.splitlines()[0].split()[-1] == "priced" and "billed" not in ledger
