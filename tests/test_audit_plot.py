"""`turnlog audit --plot`: tokens and cost per call over a session and per day over the store, as PNG or
SVG files whose bytes depend only on the data; a clear line without matplotlib or for a bad file name."""

from __future__ import annotations

import dataclasses
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from turnlog.cli import cli
from turnlog.plot import PlotError, per_call_series, per_day_series, plot_spend, render
from turnlog.projections.spend import call_spend, spend_per_day
from turnlog.store import SQLiteStore, UsageRecorded

DAY1 = "2025-08-01T10:00:00.000000+00:00"
DAY2 = "2025-08-02T09:30:00.000000+00:00"


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    now = [DAY1]
    monkeypatch.setattr("turnlog.store.sqlite_append.now", lambda: now[0])
    path = tmp_path / "plot.db"
    with SQLiteStore.open(path) as store:
        store.append(
            "s",
            [
                UsageRecorded(model="gpt-4o", input_tokens=1000, output_tokens=100, cost_usd=0.004),
                UsageRecorded(model="gpt-4o", input_tokens=1500, output_tokens=120, cost_usd=0.005),
            ],
        )
        now[0] = DAY2
        store.append("s", [UsageRecorded(model="mystery-model", input_tokens=2500, output_tokens=90)])
        store.append("t", [UsageRecorded(model="gpt-4o-mini", input_tokens=800, output_tokens=80)])
    yield path


def labels(series: list[object]) -> list[str]:
    return [s.label for s in series]  # type: ignore[attr-defined]


def test_per_call_and_per_day_series(db: Path) -> None:
    with SQLiteStore.open(db) as store:
        calls = call_spend(store, "s")
        everything = call_spend(store)
    x, series = per_call_series(calls)
    assert x == ["1", "2", "3"]
    assert labels(series) == [
        "billed input tokens", "billed output tokens", "billed cost (source)", "priced cost (turnlog)",
    ]  # fmt: skip
    by_label = {s.label: s.values for s in series}
    assert by_label["billed input tokens"] == (1000.0, 1500.0, 2500.0)
    billed = by_label["billed cost (source)"]
    assert billed[:2] == (0.004, 0.005) and billed[2] != billed[2]  # NaN: not recorded, a gap
    priced = by_label["priced cost (turnlog)"]
    assert priced[0] == pytest.approx((1000 * 2.5 + 100 * 10) / 1e6) and priced[2] != priced[2]  # unknown
    days, series = per_day_series(everything)
    assert days == ["2025-08-01", "2025-08-02"]
    by_label = {s.label: s.values for s in series}
    assert by_label["billed input tokens"] == (2500.0, 3300.0)
    assert by_label["priced cost (turnlog)"][1] != by_label["priced cost (turnlog)"][1]  # a day with unknown
    assert [d.calls for d in spend_per_day(everything)] == [2, 2]


def test_the_estimate_is_drawn_once_rows_carry_it(db: Path) -> None:
    with SQLiteStore.open(db) as store:
        calls = call_spend(store, "s")
    estimated = [dataclasses.replace(c, estimated_input=c.input - 10) for c in calls]
    _, series = per_call_series(estimated)
    assert "estimated input tokens" in labels(series)
    assert {s.label: s.values for s in series}["estimated input tokens"] == (990.0, 1490.0, 2490.0)
    assert spend_per_day(estimated)[0].estimated_input == 990 + 1490


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_renders_valid_png_and_svg_with_the_series(db: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from xml.etree import ElementTree

    with SQLiteStore.open(db) as store:
        session = plot_spend(store, tmp_path / "session.svg", "s")
        daily = plot_spend(store, tmp_path / "days.png")
        plot_spend(store, tmp_path / "session.png", "s")
        again = tmp_path / "again.svg"
        plot_spend(store, again, "s")
    assert "billed cost (source)" in labels(session) and "priced cost (turnlog)" in labels(daily)
    svg = (tmp_path / "session.svg").read_bytes()
    root = ElementTree.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    ids = {e.get("id") for e in root.iter()}
    for gid in ("series-billed-input-tokens", "series-billed-output-tokens", "series-billed-cost",
                "series-priced-cost"):  # fmt: skip
        assert gid in ids, gid
    text = svg.decode()
    assert "spend of session s" in text and "billed input tokens" in text  # text kept as text
    assert "<dc:date>" not in text
    assert again.read_bytes() == svg  # the same data, the same bytes
    assert _png_size((tmp_path / "days.png").read_bytes()) == (900, 600)
    assert _png_size((tmp_path / "session.png").read_bytes()) == (900, 600)
    assert not list(tmp_path.glob("*.partial"))


def test_render_draws_the_estimated_series(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from turnlog.plot import Series

    render(
        tmp_path / "e.svg", "t", "call", ["1", "2"], [Series("tokens", "estimated input tokens", (1.0, 2.0))]
    )
    assert 'id="series-estimated-input-tokens"' in (tmp_path / "e.svg").read_text()


def test_cli_plot(db: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "cli.svg"
    result = CliRunner().invoke(cli, ["--db", str(db), "audit", "s", "--plot", str(out)])
    assert result.exit_code == 0, result.output
    assert f"plot written to {out}" in result.output
    assert out.read_text().lstrip().startswith("<?xml")


def test_without_matplotlib_one_clear_line(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    out = tmp_path / "x.png"
    result = CliRunner().invoke(cli, ["--db", str(db), "audit", "--plot", str(out)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: --plot needs matplotlib, which is not installed: pip install 'turnlog[plot]'"
    ]
    assert not out.exists()


def test_bad_plot_file_name_and_nothing_to_plot(db: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", str(db), "audit", "--plot", str(tmp_path / "x.jpg")])
    assert result.exit_code == 1 and "name a .png or .svg file" in result.output
    assert not (tmp_path / "x.jpg").exists()
    with SQLiteStore.open(db) as store:
        store.append("quiet", [UsageRecorded(model="gpt-4o", input_tokens=0, output_tokens=0)])
        with pytest.raises(PlotError, match="cannot plot to"):
            plot_spend(store, tmp_path / "x.pdf")
    with SQLiteStore.open(tmp_path / "empty.db") as empty:
        from turnlog.store import MessageAppended

        empty.append("e", [MessageAppended(role="user", content="hi")])
        with pytest.raises(PlotError, match="no billed model calls"):
            plot_spend(empty, tmp_path / "e.png", "e")
    assert not (tmp_path / "e.png").exists()
