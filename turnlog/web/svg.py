"""Bar charts drawn on the server as SVG: no script, no CDN, so the pages work offline under a
strict Content-Security-Policy. Colours come from classes in the viewer's stylesheet; every text is
escaped."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

WIDTH, HEIGHT = 880, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 28, 40


@dataclass(frozen=True)
class Series:
    """One set of bars: a name for the legend, a stylesheet class, a value per label (None: none)."""

    name: str
    css: str
    values: Sequence[float | None]


def nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5 or 5 times a power of ten that is at least ``value`` (1 for 0)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return float(next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= value))


def tokens_label(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if value >= 1000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def usd_label(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.1 or value == 0 else f"${value:.4f}"


def bar_chart(
    title: str,
    labels: Sequence[str],
    series: Sequence[Series],
    *,
    axis: Callable[[float], str] = tokens_label,
    value: Callable[[float], str] = lambda v: f"{v:,.0f}",
) -> Markup:
    """Grouped bars, one group per label; each bar has a tooltip (an SVG ``<title>``) with its exact
    value. The y axis starts at 0 and ends at a round number."""
    top = nice_max(max((v for s in series for v in s.values if v is not None), default=0.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    group = plot_w / max(len(labels), 1)
    bar = min(max(group * 0.8 / max(len(series), 1), 0.5), 48.0)  # thin bars for many calls, not fat for few
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f'<text class="chart-title" x="{LEFT}" y="16">{escape(title)}</text>',
    ]
    for i in range(5):
        y = TOP + plot_h - plot_h * i / 4
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(
            f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(axis(top * i / 4))}</text>"
        )
    every = max(1, math.ceil(len(labels) / 12))  # at most a dozen labels under the axis
    for index, label in enumerate(labels):
        x0 = LEFT + group * index + (group - bar * len(series)) / 2
        for number, s in enumerate(series):
            v = s.values[index]
            if v is None:
                continue
            h = plot_h * v / top
            x = x0 + bar * number
            parts.append(
                f'<rect class="bar {escape(s.css)}" x="{x:.2f}" y="{TOP + plot_h - h:.2f}" '
                f'width="{bar:.2f}" height="{h:.2f}"><title>{escape(label)} · {escape(s.name)}: '
                f"{escape(value(v))}</title></rect>"
            )
        if index % every == 0:
            parts.append(
                f'<text class="tick" x="{LEFT + group * (index + 0.5):.1f}" y="{HEIGHT - BOTTOM + 16}" '
                f'text-anchor="middle">{escape(label)}</text>'
            )
    x = LEFT
    for s in series:
        parts.append(f'<rect class="bar {escape(s.css)}" x="{x}" y="{HEIGHT - 14}" width="10" height="10"/>')
        parts.append(f'<text class="legend" x="{x + 14}" y="{HEIGHT - 5}">{escape(s.name)}</text>')
        x += 24 + 7 * len(s.name)
    parts.append("</svg>")
    return Markup("".join(parts))
