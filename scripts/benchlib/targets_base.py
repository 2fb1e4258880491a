"""What the results document's parts share: a store's label, the table of targets judged met or
missed, and the spread of a measurement's rounds."""

from __future__ import annotations

from typing import Any

from benchlib import report as R
from benchlib.peers import peer_class


def label(name: str) -> str:
    if name == "turnlog+count":
        return "turnlog, batch + deferred counts caught up"
    return peer_class(name).label


class Targets:
    """The targets of issue #4, each judged met, missed or (None) only recorded."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, bool | None]] = []
        self.missed: list[str] = []

    def add(self, key: str, what: str, required: str, measured: str, met: bool | None) -> None:
        self.rows.append((what, required, measured, met))
        if met is False:
            self.missed.append(key)


def spread(figures: dict[str, Any]) -> str:
    rates = figures.get("rates") or [figures["rate"]]
    return f"{R.rate(min(rates))} – {R.rate(max(rates))}"
