"""Writes scripts/data/coding_session.jsonl: a realistic three-run coding-agent session in turnlog's
own event format (the JSON lines `turnlog append` reads). Deterministic: the file is committed, and
this script is how it was made. Run: .venv/bin/python scripts/make_sample_session.py"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "data" / "coding_session.jsonl"

MONEY_PY = '''"""Money amounts and their rounding, per currency."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

# Minor units per currency (ISO 4217). JPY has none, KWD has three.
MINOR_UNITS = {"EUR": 2, "USD": 2, "GBP": 2, "JPY": 0, "KWD": 3, "CHF": 2}


@dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str

    def __post_init__(self) -> None:
        if self.currency not in MINOR_UNITS:
            raise ValueError(f"unknown currency {self.currency}")

    def __add__(self, other: Money) -> Money:
        self._same_currency(other)
        return Money(self.amount + other.amount, self.currency)

    def __mul__(self, factor: Decimal | int) -> Money:
        return Money(self.amount * Decimal(factor), self.currency)

    def rounded(self) -> Money:
        # BUG: always rounds to cents, whatever the currency.
        return Money(round(self.amount, 2), self.currency)

    def _same_currency(self, other: Money) -> None:
        if other.currency != self.currency:
            raise ValueError(f"cannot add {other.currency} to {self.currency}")


def total(lines: list[tuple[Money, int]], tax_rate: Decimal) -> Money:
    """Sum of price x quantity, plus tax, rounded once at the end."""
    if not lines:
        raise ValueError("an invoice needs at least one line")
    currency = lines[0][0].currency
    subtotal = Money(Decimal(0), currency)
    for price, quantity in lines:
        subtotal = subtotal + price * quantity
    return (subtotal + subtotal * tax_rate).rounded()
'''

MONEY_FIXED = MONEY_PY.replace(
    """    def rounded(self) -> Money:
        # BUG: always rounds to cents, whatever the currency.
        return Money(round(self.amount, 2), self.currency)""",
    '''    def rounded(self) -> Money:
        """Rounded half-up to the currency's minor unit (banker's rounding is not what invoices use)."""
        exponent = Decimal(1).scaleb(-MINOR_UNITS[self.currency])
        return Money(self.amount.quantize(exponent, rounding=ROUND_HALF_UP), self.currency)''',
)

TEST_PY = """from decimal import Decimal

import pytest

from invoice.money import Money, total


@pytest.mark.parametrize(
    ("currency", "amount", "expected"),
    [("EUR", "10.005", "10.01"), ("JPY", "1000.5", "1001"), ("KWD", "1.0005", "1.001")],
)
def test_rounding_follows_the_currency(currency: str, amount: str, expected: str) -> None:
    assert Money(Decimal(amount), currency).rounded().amount == Decimal(expected)


def test_total_rounds_once() -> None:
    lines = [(Money(Decimal("0.333"), "EUR"), 3)]
    assert total(lines, Decimal("0.2")).amount == Decimal("1.20")
"""


def pytest_output(failures: int, seed: int) -> str:
    rng = random.Random(seed)
    lines = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.7, pytest-8.3.3, pluggy-1.5.0",
        "rootdir: /work/invoice-tool",
        "collected 214 items",
        "",
    ]
    for module in ("test_cli", "test_money", "test_invoice", "test_pdf", "test_tax", "test_export"):
        marks = "".join("F" if failures and rng.random() < 0.05 else "." for _ in range(36))
        lines.append(f"tests/{module}.py {marks} [{rng.randint(5, 99):3d}%]")
    if failures:
        lines += ["", "=================================== FAILURES ==================================="]
        for i in range(failures):
            currency = ("JPY", "KWD", "JPY")[i % 3]
            lines += [
                f"____________________ test_invoice_total[{currency}-case{i}] ____________________",
                "",
                f"    def test_invoice_total(currency='{currency}'):",
                "        lines = [(Money(Decimal('1000.5'), currency), 1)]",
                ">       assert total(lines, Decimal('0')).amount == expected[currency]",
                "E       AssertionError: assert Decimal('1000.50') == Decimal('1001')",
                "",
                "tests/test_invoice.py:48: AssertionError",
            ]
        lines.append(f"FAILED tests/test_invoice.py::test_invoice_total - {failures} failed")
    lines.append(
        f"{'=' * 23} {failures} failed, {214 - failures} passed in 3.21s {'=' * 24}"
        if failures
        else "============================= 216 passed in 3.30s =============================="
    )
    return "\n".join(lines)


def grep_output(seed: int) -> str:
    rng = random.Random(seed)
    modules = [
        "invoice/money.py",
        "invoice/tax.py",
        "invoice/pdf.py",
        "invoice/export/csv.py",
        "invoice/export/xlsx.py",
        "invoice/reports/monthly.py",
        "invoice/reports/yearly.py",
        "tests/test_money.py",
        "tests/test_tax.py",
        "tests/test_invoice.py",
    ]
    calls = [
        "round(amount, 2)",
        "round(self.amount, 2)",
        "round(total * rate, 2)",
        "round(Decimal(value), 2)",
        "round(line.price * line.quantity, 2)",
    ]
    out = []
    for _ in range(900):
        out.append(
            f"{rng.choice(modules)}:{rng.randint(1, 400)}:    value = {rng.choice(calls)}  "
            f"# {rng.choice(['subtotal', 'vat', 'discount', 'shipping', 'fx'])}"
        )
    return "\n".join(out)


TASKS = (
    "Reproduce the wrong totals with the test suite",
    "Find where amounts are rounded",
    "Fix the rounding per currency and add a regression test",
)


def todo_list(*statuses: str) -> list[dict[str, str]]:
    """The agent's three tasks with these statuses."""
    return [
        {"id": str(i), "content": task, "status": status}
        for i, (task, status) in enumerate(zip(TASKS, statuses, strict=True), 1)
    ]


def main() -> None:
    events: list[dict[str, Any]] = []

    def add(kind: str, **fields: Any) -> str:
        event_id = f"demo-{len(events) + 1:04d}"
        events.append({"type": kind, "event_id": event_id, **fields})
        return event_id

    def usage(run: str, inp: int, out: int, cached: int = 0) -> None:
        add(
            "usage_recorded",
            model="gpt-4o-2024-08-06",
            input_tokens=inp,
            output_tokens=out,
            cache_read_tokens=cached,
            run_id=run,
            response_id=f"chatcmpl-{len(events):05d}",
        )

    def call(run: str, text: str, calls: list[tuple[str, str, dict[str, Any]]]) -> None:
        add(
            "message_appended",
            role="assistant",
            content=text,
            tool_calls=[
                {"id": cid, "name": name, "arguments": json.dumps(args)} for cid, name, args in calls
            ],
        )

    add(
        "session_started",
        title="Fix currency rounding in invoice totals",
        model="gpt-4o-2024-08-06",
        metadata={"agent": "coder", "repo": "invoice-tool"},
    )
    add(
        "message_appended",
        role="system",
        content=(
            "You are a coding agent working in the repository invoice-tool. Use the tools to read, search, "
            "edit files and run tests. Keep changes small and explain what you did."
        ),
    )

    # Run 1: investigate.
    add("run_started", run_id="run-1")
    constraint = add(
        "message_appended",
        role="user",
        content=(
            "Invoice totals are off for some currencies: JPY invoices show cents and KWD ones lose a digit. "
            "Find out why and fix it. Don't change the public API of invoice.money."
        ),
    )
    add("todos_updated", todos=todo_list("in_progress", "pending", "pending"))
    call("run-1", "Let me run the test suite first.", [("call_01", "run_tests", {"path": "tests"})])
    usage("run-1", 1480, 42)
    add(
        "tool_returned",
        tool_call_id="call_01",
        tool_name="run_tests",
        content=pytest_output(6, 1),
        is_error=True,
    )
    call(
        "run-1",
        "Six invoice tests fail for JPY and KWD. Searching for rounding calls.",
        [
            ("call_02", "grep", {"pattern": "round(", "path": "."}),
            ("call_03", "read_file", {"path": "invoice/money.py"}),
        ],
    )
    usage("run-1", 2950, 61, cached=1408)
    add("tool_returned", tool_call_id="call_02", tool_name="grep", content=grep_output(2))
    add("tool_returned", tool_call_id="call_03", tool_name="read_file", content=MONEY_PY)
    add("todos_updated", todos=todo_list("completed", "completed", "pending"))
    add(
        "message_appended",
        role="assistant",
        content=(
            "Found it: `Money.rounded()` in invoice/money.py always rounds to two decimals with Python's "
            "`round()`, which also uses banker's rounding. JPY has no minor unit and KWD has three, so both "
            "come out wrong. The fix is to quantize to the currency's minor unit with ROUND_HALF_UP; the "
            "public API stays the same. Shall I go ahead?"
        ),
    )
    usage("run-1", 23810, 118, cached=2816)
    add("run_finished", run_id="run-1")
    add("message_pinned", target_event_id=constraint, reason="the user's constraint on the public API")

    # Run 2: fix and test.
    add("run_started", run_id="run-2")
    add("message_appended", role="user", content="Yes, fix it and add a regression test.")
    add("todos_updated", todos=todo_list("completed", "completed", "in_progress"))
    call(
        "run-2",
        "",
        [
            ("call_04", "write_file", {"path": "invoice/money.py"}),
            ("call_05", "write_file", {"path": "tests/test_money_rounding.py"}),
        ],
    )
    usage("run-2", 24406, 812, cached=23552)
    add(
        "artifact_written",
        name="invoice/money.py",
        content=MONEY_FIXED,
        media_type="text/x-python",
        tool_call_id="call_04",
    )
    add(
        "tool_returned",
        tool_call_id="call_04",
        tool_name="write_file",
        content="wrote invoice/money.py (52 lines)",
    )
    add(
        "artifact_written",
        name="tests/test_money_rounding.py",
        content=TEST_PY,
        media_type="text/x-python",
        tool_call_id="call_05",
    )
    add(
        "tool_returned",
        tool_call_id="call_05",
        tool_name="write_file",
        content="wrote tests/test_money_rounding.py (19 lines)",
    )
    call("run-2", "Running the tests again.", [("call_06", "run_tests", {"path": "tests"})])
    usage("run-2", 25390, 25, cached=24320)
    add("tool_returned", tool_call_id="call_06", tool_name="run_tests", content=pytest_output(0, 3))
    add("todos_updated", todos=todo_list("completed", "completed", "completed"))
    add(
        "message_appended",
        role="assistant",
        content=(
            "Fixed: `Money.rounded()` now quantizes to each currency's minor unit, half-up. I added "
            "tests/test_money_rounding.py covering EUR, JPY and KWD. All 216 tests pass."
        ),
    )
    usage("run-2", 26102, 64, cached=25344)
    add("run_finished", run_id="run-2")

    # Run 3: a changelog entry; the agent process dies during the lint call.
    add("run_started", run_id="run-3")
    add("message_appended", role="user", content="Great. Add a CHANGELOG entry and run the linter.")
    add(
        "artifact_written",
        name="CHANGELOG.md",
        media_type="text/markdown",
        content=(
            "## Unreleased\n\n- Fix: invoice totals are rounded to each currency's minor unit "
            "(JPY, KWD, ...) with half-up rounding.\n"
        ),
    )
    call(
        "run-3",
        "Added the entry to CHANGELOG.md. Running the linter now.",
        [("call_07", "run_linter", {"paths": ["invoice", "tests"]})],
    )
    usage("run-3", 26650, 38, cached=26112)
    # No result for call_07 and no run_finished: the agent crashed here.

    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
    print(f"wrote {len(events)} events to {OUT}")


if __name__ == "__main__":
    main()
