"""The whole-store check behind `turnlog verify`: the log's own checks plus every materialized
projection against a fresh rebuild."""

from __future__ import annotations

from turnlog.projections.registry import materializer
from turnlog.store import Store, VerifyReport


def verify_all(store: Store, *, quick: bool = False) -> VerifyReport:
    """The log's verify report, with a problem added for each projection that differs from a fresh
    rebuild (only when the log itself is sound: projections of a tampered log prove nothing).
    ``quick`` runs SQLite's quick_check (no index check) instead of the full integrity_check."""
    report = store.verify(quick=quick)
    if report.ok:
        report.problems += materializer(store).differences()
    return report
