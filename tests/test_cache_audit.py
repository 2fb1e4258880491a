"""The prompt cache in the audit: billed cache reads and writes per session, run and model, beside
turnlog's predicted cacheable share (from recorded manifests) and the money the cache saved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from turnlog.cli import cli
from turnlog.projections.cache_audit import cache_audit, shared_tokens
from turnlog.projections.context import ContextPolicy, build_context
from turnlog.projections.prices import ModelPrice, PriceTable
from turnlog.store import (
    ManifestEntry,
    MessageAppended,
    SQLiteStore,
    ToolCall,
    ToolReturned,
    UsageRecorded,
)

PRICES = PriceTable(
    date="2025-09-01",
    source="test",
    models={"sonnet": ModelPrice(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)},
)


def agent_session(
    store: SQLiteStore, sid: str, calls: int, *, model: str = "sonnet", run: str = "r1"
) -> None:
    """A session whose agent builds a cache-stable context before each call, records it, and is
    billed with cache reads of what the previous call sent."""
    store.append(
        sid,
        [
            MessageAppended(role="system", content="You are a careful agent. " * 40),
            MessageAppended(role="user", content="Please fix the build."),
        ],
    )
    policy = ContextPolicy(budget=2500, cache_stable=True)
    previous = 0
    for i in range(calls):
        built = build_context(store, sid, policy)
        store.append(sid, [built.to_event(run_id=run, model=model)])
        answer = MessageAppended(
            role="assistant", content=f"step {i}", tool_calls=(ToolCall(id=f"{sid}{i}", name="read"),)
        )
        store.append(
            sid,
            [
                answer,
                UsageRecorded(
                    model=model,
                    input_tokens=built.total_tokens,
                    output_tokens=20,
                    cache_read_tokens=min(previous, built.total_tokens),
                    cache_write_tokens=max(0, built.total_tokens - previous),
                    run_id=run,
                    call_event_id=answer.event_id,
                ),
                ToolReturned(
                    tool_call_id=f"{sid}{i}", tool_name="read", content="line of output " * (40 + i)
                ),
            ],
        )
        previous = built.total_tokens


def test_billed_cache_beside_the_prediction_and_the_money_saved() -> None:
    store = SQLiteStore.open(":memory:")
    agent_session(store, "a", 12)
    agent_session(store, "b", 4, run="r2")
    audit = cache_audit(store, prices=PRICES)
    rows = {r.key: r for r in audit.rows}
    assert set(rows) == {"a", "b"} and audit.cache_stable == 16
    a = rows["a"]
    assert a.calls == 12 and a.contexts == 12
    assert a.cache_read > 0 and a.cache_write > 0
    assert a.billed_share == pytest.approx(a.cache_read / a.input)
    # The prediction: the shared leading entries of consecutive manifests, never more than sent.
    assert 0 < a.predicted < a.sent and a.predicted_share == pytest.approx(a.predicted / a.sent)
    # Saved: the uncached price of the input, less what the reads and writes cost.
    read, write = a.cache_read, a.cache_write
    expected = (read * (3.0 - 0.3) + write * (3.0 - 3.75)) / 1e6
    assert a.saved == pytest.approx(expected)
    totals = audit.totals
    assert totals.calls == 16 and totals.cache_read == a.cache_read + rows["b"].cache_read
    assert totals.saved == pytest.approx(a.saved + (rows["b"].saved or 0))
    # By run and by model; one session alone.
    assert {r.key for r in cache_audit(store, by="run", prices=PRICES).rows} == {"r1", "r2"}
    assert [r.key for r in cache_audit(store, by="model", prices=PRICES).rows] == ["sonnet"]
    assert [r.key for r in cache_audit(store, "b", prices=PRICES).rows] == ["b"]


def test_an_unpriced_model_saves_an_unknown_amount_never_zero() -> None:
    store = SQLiteStore.open(":memory:")
    agent_session(store, "a", 3, model="no-such-model-anywhere")
    audit = cache_audit(store, prices=PRICES)
    assert audit.rows[0].saved is None and audit.totals.saved is None


def test_shared_tokens_stop_at_the_first_difference() -> None:
    def entry(event: str, tokens: int, mode: str = "full") -> ManifestEntry:
        return ManifestEntry(event_ids=(event,), role="user", mode=mode, category="message", tokens=tokens)  # type: ignore[arg-type]

    before = (entry("a", 10), entry("b", 20), entry("c", 30))
    assert shared_tokens(before, (entry("a", 10), entry("b", 20), entry("d", 5))) == 30
    assert shared_tokens(before, (entry("a", 10), entry("b", 20, "capped"), entry("c", 30))) == 10
    assert shared_tokens((), before) == 0


def test_the_audit_command_shows_the_cache(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with SQLiteStore.open(db) as store:
        agent_session(store, "a", 6)
    prices = tmp_path / "prices.json"
    prices.write_text(PRICES.model_dump_json())
    runner = CliRunner()
    text = runner.invoke(cli, ["--db", str(db), "audit", "--prices", str(prices)])
    assert text.exit_code == 0, text.output
    assert "prompt cache:" in text.output and "predicted_cacheable" in text.output
    data = json.loads(runner.invoke(cli, ["--db", str(db), "audit", "--by", "run", "--json"]).output)
    assert data["cache"]["by"] == "run" and data["cache"]["rows"][0]["key"] == "r1"
    assert data["cache"]["totals"]["cache_read"] > 0
    # A store without cache reads, writes or cache-stable contexts shows no cache section.
    plain = tmp_path / "plain.db"
    with SQLiteStore.open(plain) as store:
        store.append("s", [MessageAppended(role="user", content="hi")])
    assert "prompt cache:" not in runner.invoke(cli, ["--db", str(plain), "audit"]).output
