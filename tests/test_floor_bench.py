"""The bench's `floor` section (issue 20) runs end to end at tiny sizes and renders every figure
beside its target. (Its ratios are measured by `scripts/bench --only floor`, never asserted here.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def floor_bench():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from benchlib import floor_bench

        yield floor_bench
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def test_the_floor_section_measures_both_sides_and_renders(floor_bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    msgs = floor_bench.session(80)
    assert msgs[0].kind == "system" and len(msgs[0].content) > 2000  # a system prompt of a few thousand
    durable = floor_bench.durable(tmp_path, msgs[:20], 10)
    batch = floor_bench.batch(tmp_path, msgs, 30)
    assert durable["blocks"] == 2 and batch["blocks"] >= 2
    for res in (durable, batch):
        assert res["turnlog_s"] > 0 and res["floor_s"] > 0 and res["rows_s"] > 0 and res["least_s"] > 0
        assert res["in_place_s"] > 0
    # The rows side replayed every row turnlog's own append stored, blobs and all, into a turnlog
    # store that verifies: the schema's cost measured on exactly turnlog's rows.
    import turnlog

    for name, count in (("durable-r", 20), ("batch-r", len(msgs)), ("durable-p", 20), ("batch-p", len(msgs))):
        replayed = turnlog.open_store(tmp_path / f"{name}.db")
        try:
            assert replayed.head_version(floor_bench.SESSION) == count
            assert replayed.verify().ok
        finally:
            replayed.close()
    ours, floor = floor_bench.written(tmp_path, msgs, lambda _: None)
    probe = floor_bench.Workload().probe_turns(4, salt=7)
    builds = {}
    for budget in floor_bench.BUDGETS:
        warm = floor_bench.builds(ours, floor, budget, 2, 2)
        # Both sides fill the same budget from the same session (turnlog keeps the first request too).
        assert 0 < warm["tokens"]["floor"] <= budget and 0 < warm["tokens"]["turnlog"] <= budget
        turn = floor_bench.turns(ours, floor, budget, probe[:2] if budget == 4000 else probe[2:], 1)
        assert turn["blocks"] == 2
        builds[f"80|{budget}"] = {"warm": warm, "turn": turn}
    # Every turn reached both stores, as one more transaction each.
    assert ours.version == len(msgs) + sum(len(t) for t in probe)
    assert floor.conn.execute("SELECT count(*) FROM floor").fetchone()[0] == ours.version
    ours.close()
    floor.close()
    result = {
        "load": 1.0,
        "durable": {**durable, "counted_floor_s": durable["counted_floor_s"]},
        "batch": batch,
        "builds": builds,
        "rebuild": {"events": 1000, "seconds": 1.0, "peak_bytes": 2**27, "when": "this run"},
    }
    text = floor_bench.render(result, "scripts/bench --only floor")
    assert text.startswith(floor_bench.HEADING)
    for figure in floor_bench.TARGETS:
        assert text.count(f"| {figure} |") == (1 if "append," in figure else len(floor_bench.BUDGETS))
    assert "| rebuild of every projection, 1,000 events |" in text and "≤ 30 s, ≤ 150 MiB | met |" in text
    assert "turnlog's own rows" in text and "durable " in text.split("turnlog's own rows")[1]
    rows = [line for line in text.splitlines() if line.startswith("| ") and "×" in line]
    assert all(line.rstrip(" |").endswith(("met", "**missed**", "(below)")) for line in rows)
    # The least work's bound is printed for both appends, timed apart and in place, and a missed
    # target the bound in place puts out of reach says so in the table.
    assert text.count("an event timed apart, so at best ") == 2 and text.count("; done in place, ") == 2
    far = {**durable, "in_place_s": durable["floor_s"] * 2, "turnlog_s": durable["floor_s"] * 3}
    text = floor_bench.render({**result, "durable": far}, "scripts/bench --only floor")
    assert "**missed**; out of reach: at best 0.50× (below)" in text
    # Without the side in place (an older result), the bound is the two timed apart, added.
    apart = {k: v for k, v in far.items() if k != "in_place_s"}
    apart.update(rows_s=durable["floor_s"] * 0.5, least_s=durable["floor_s"] * 0.75)
    text = floor_bench.render({**result, "durable": apart}, "scripts/bench --only floor")
    assert "**missed**; out of reach: at best 0.80× (below)" in text and text.count("; done in place, ") == 1


def test_the_least_work_is_the_stores_own_hashing(floor_bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # LeastWork checks each digest it makes against the row the store made: the same salt gives
    # the same hashes; another salt, or a row changed, is refused (so the bound is no likeness).
    from benchlib.floor_rows import LeastWork

    msgs = floor_bench.session(30)
    made, least = floor_bench._made_rows(tmp_path, msgs, "least-r")
    least.run(msgs, 0)
    least.run(msgs[10:], 10)
    with pytest.raises(RuntimeError, match="row 0's hashes differ"):
        LeastWork(floor_bench.to_event, made, b"another salt").run(msgs[:1], 0)
    event, blob = made[3]
    changed = [*made[:3], ((*event[:6], event[6] + " ", *event[7:]), blob)]
    with pytest.raises(RuntimeError, match="row 3's hashes differ"):
        LeastWork(floor_bench.to_event, changed, least.salt).run(msgs[3:4], 3)


def test_the_rebuild_figure_is_quoted_from_the_results_when_not_measured(floor_bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    quoted = floor_bench.rebuild_figure(False, tmp_path, [], lambda _: None)
    text = (ROOT / "bench-results" / "RESULTS.md").read_text()
    assert quoted["events"] == 1_000_000
    assert f"{quoted['seconds']:.2f} s" in text
    assert quoted["when"].startswith("the rebuild section of bench-results/RESULTS.md")


def test_the_floor_stores_messages_capped_as_a_build_sends_them(floor_bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from benchlib.counting import count_text
    from benchlib.workload import Msg

    long_output = "line of a long tool output 0123456789\n" * 4000
    chat = floor_bench.capped({"role": "tool", "tool_call_id": "c1", "content": long_output})
    assert count_text(chat["content"]) <= floor_bench.TOOL_CAP
    short = {"role": "user", "content": "hello"}
    assert floor_bench.capped(short) == short
    # A session ending in a tool output over the budget: the floor of whole texts stops there and
    # shows the system prompt alone; the capped floor fills the budget as turnlog does.
    msgs = floor_bench.session(40)
    msgs.append(Msg("call", "", call_id="c_long", tool_name="read_file", arguments="{}"))
    msgs.append(Msg("tool", long_output, call_id="c_long", tool_name="read_file"))
    whole = floor_bench.Floor(tmp_path / "whole.db", counted=True)
    cut = floor_bench.Floor(tmp_path / "cut.db", counted=True, capped=True)
    for side in (whole, cut):
        side.append(msgs)
    first = count_text(msgs[0].content)
    assert whole.build(4000) < first + 20
    assert cut.build(4000) > first + 1000
    whole.close()
    cut.close()
