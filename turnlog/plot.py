"""The spend plot of ``turnlog audit --plot``: tokens and cost per call over a session, or per day over
the store, as a PNG or SVG file. matplotlib (the ``plot`` extra) is imported only here, when a plot is
asked for, and drawn without a display (Agg) into a file whose bytes depend only on the data."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnlog.projections.prices import Prices
from turnlog.projections.spend import CallSpend, call_spend, spend_per_day
from turnlog.store import Store, StoreError

FORMATS = (".png", ".svg")
"""The file types a plot can be written as, by the file's suffix."""


class PlotError(StoreError):
    """A plot cannot be made: matplotlib is missing, the file type is unknown, or nothing was billed."""


@dataclass(frozen=True, slots=True)
class Series:
    """One line of the plot."""

    panel: str
    """``tokens`` or ``cost``."""
    label: str
    """What the legend calls it."""
    values: tuple[float, ...]
    """One value per point (NaN where it is unknown: a gap, never a 0)."""


def check_plot_path(path: str | os.PathLike[str]) -> None:
    """Refuse a file name the plot cannot be written as (before anything is read)."""
    if Path(path).suffix.lower() not in FORMATS:
        raise PlotError(f"cannot plot to {os.fspath(path)!r}: name a .png or .svg file")


def plot_spend(
    store: Store,
    path: str | os.PathLike[str],
    session_id: str | None = None,
    prices: Prices | None = None,
) -> list[Series]:
    """Write the spend plot of SESSION (per call) or of the store (per day) to ``path`` (.png or
    .svg); return the series drawn. PlotError when matplotlib is missing or nothing was billed."""
    check_plot_path(path)
    calls = call_spend(store, session_id, prices, estimates=True)
    if not calls:
        where = f"session {session_id!r}" if session_id is not None else "this store"
        raise PlotError(f"nothing to plot: {where} has no billed model calls")
    _require_matplotlib()
    labels, series = per_call_series(calls) if session_id is not None else per_day_series(calls)
    title = f"spend of session {session_id}" if session_id is not None else "spend per day"
    render(path, title, "call" if session_id is not None else "day (UTC)", labels, series)
    return series


def per_call_series(calls: Sequence[CallSpend]) -> tuple[list[str], list[Series]]:
    """The x labels (call numbers) and the series of a session's plot, from its per-call rows:
    billed tokens and costs, and the estimate of the prompt where the rows carry one."""
    labels = [str(n) for n in range(1, len(calls) + 1)]
    return labels, _series(
        [c.input for c in calls],
        [c.output for c in calls],
        [c.estimated_input for c in calls],
        [c.billed_cost for c in calls],
        [c.cost for c in calls],
    )


def per_day_series(calls: Sequence[CallSpend]) -> tuple[list[str], list[Series]]:
    """The x labels (days) and the series of the store's plot, from the per-call rows summed per day."""
    days = spend_per_day(calls)
    return [d.day for d in days], _series(
        [d.input for d in days],
        [d.output for d in days],
        [d.estimated_input for d in days],
        [d.billed_cost for d in days],
        [d.cost for d in days],
    )


def _series(
    input: list[int],
    output: list[int],
    estimated: list[int | None],
    billed_cost: list[float | None],
    cost: list[float | None],
) -> list[Series]:
    series = [
        Series("tokens", "billed input tokens", _values(input)),
        Series("tokens", "billed output tokens", _values(output)),
    ]
    if any(e is not None for e in estimated):
        series.append(Series("tokens", "estimated input tokens", _values(estimated)))
    if any(c is not None for c in billed_cost):
        series.append(Series("cost", "billed cost (source)", _values(billed_cost)))
    series.append(Series("cost", "priced cost (turnlog)", _values(cost)))
    return series


def _values(values: Sequence[float | None]) -> tuple[float, ...]:
    return tuple(math.nan if v is None else float(v) for v in values)


def render(
    path: str | os.PathLike[str], title: str, xlabel: str, labels: Sequence[str], series: Sequence[Series]
) -> None:
    """Draw the series (a tokens panel over a cost panel) into ``path``, PNG or SVG by its suffix,
    written whole or not at all."""
    import matplotlib
    from matplotlib.figure import Figure

    fmt = Path(path).suffix.lower()[1:]
    # No timestamps or random ids in the file, text kept as text in an SVG: the same data gives
    # the same bytes.
    style: Any = {"svg.hashsalt": "turnlog", "svg.fonttype": "none", "path.simplify": False}
    with matplotlib.rc_context(style):
        figure = Figure(figsize=(9, 6), dpi=100, layout="constrained")
        tokens, cost = figure.subplots(2, 1, sharex=True)
        x = list(range(len(labels)))
        for axes, panel in ((tokens, "tokens"), (cost, "cost")):
            drawn = [s for s in series if s.panel == panel]
            for one in drawn:
                (line,) = axes.plot(x, one.values, marker="o", markersize=3, label=one.label)
                line.set_gid("series-" + one.label.split(" (")[0].replace(" ", "-"))
            if drawn:
                axes.legend(loc="upper left", fontsize="small")
            axes.grid(True, alpha=0.3)
        tokens.set_title(title)
        tokens.set_ylabel("tokens")
        cost.set_ylabel("USD")
        cost.set_xlabel(xlabel)
        step = max(1, len(labels) // 20)  # at most about 20 tick labels
        cost.set_xticks(x[::step], [labels[i] for i in x[::step]], rotation=45 if xlabel != "call" else 0)
        metadata: dict[str, Any] = {"Date": None} if fmt == "svg" else {"Software": None}
        target = Path(path)
        partial = target.with_name(target.name + ".partial")
        try:
            figure.savefig(partial, format=fmt, metadata=metadata)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotError(
            "--plot needs matplotlib, which is not installed: pip install 'turnlog[plot]'"
        ) from None


__all__ = [
    "FORMATS",
    "PlotError",
    "Series",
    "check_plot_path",
    "per_call_series",
    "per_day_series",
    "plot_spend",
]
