"""The whole-store check behind `turnlog verify`: the log's own checks plus every materialized
projection against a fresh rebuild."""

from __future__ import annotations

from projections.registry import materializer
from store import SQLiteStore, VerifyReport


def verify_all(store: SQLiteStore) -> VerifyReport:
    """The log's verify report, with a problem added for each projection that differs from a fresh
    rebuild (only when the log itself is sound: projections of a tampered log prove nothing)."""
    report = store.verify()
    if report.ok:
        report.problems += materializer(store).differences()
    return report
