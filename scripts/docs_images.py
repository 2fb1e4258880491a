"""Makes the README's images from the demo data: docs/img/audit-plot.png, the spend plot of the demo
session (`turnlog audit fix-rounding --plot ...`), deterministic (the same data and package versions
give the same bytes); and docs/img/viewer-timeline.png and docs/img/viewer-call.png, the web viewer
(`turnlog serve`) in headless Chromium: the session's timeline, and a model call replayed from its
recorded manifest (these show the times the events were recorded, so each run differs there).
Needs the plot, web and test extras and Chromium with chromedriver (scripts/_chromium.sh installs
them). Run: .venv/bin/python scripts/docs_images.py"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's turnlog, installed or not

from turnlog.plot import plot_spend  # noqa: E402
from turnlog.projections.context import ContextPolicy, build_context  # noqa: E402
from turnlog.store import MessageAppended, SQLiteStore, UsageRecorded  # noqa: E402
from turnlog.store.events import parse_events_json  # noqa: E402

SESSION = ROOT / "scripts" / "data" / "coding_session.jsonl"
OUT = ROOT / "docs" / "img"


def main() -> None:
    lines = [line for line in SESSION.read_text(encoding="utf-8").splitlines() if line.strip()]
    events = parse_events_json("[" + ",".join(lines) + "]")
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "demo.db"
        with SQLiteStore.open(db) as store:
            store.append("fix-rounding", events)
            plot_spend(store, OUT / "audit-plot.png", "fix-rounding")
            print(f"wrote {(OUT / 'audit-plot.png').relative_to(ROOT)}")
            record_a_call(store)
        screenshots(db)


def record_a_call(store: SQLiteStore) -> None:
    """One more model call whose context turnlog built and recorded (`turnlog context --record`), so
    the viewer replays it from its manifest."""
    store.append("fix-rounding", [MessageAppended(role="user", content="Add a changelog entry for the fix.")])
    build_context(store, "fix-rounding", ContextPolicy(budget=4000, max_tool_tokens=200), record=True,
                  run_id="run-4", model="gpt-4o-2024-08-06")  # fmt: skip
    store.append(
        "fix-rounding",
        [
            MessageAppended(role="assistant", content="Added it under Unreleased in CHANGELOG.md."),
            UsageRecorded(model="gpt-4o-2024-08-06", input_tokens=1561, output_tokens=14, run_id="run-4"),
        ],
    )


def screenshots(db: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    command = [sys.executable, "-c", "from turnlog.cli import main; main()", "--db", str(db), "serve",
               "--port", "0"]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                     "--window-size=1200,1250", "--force-device-scale-factor=1"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip().rstrip("/")
        for name, path, anchor in (
            ("viewer-timeline.png", "/sessions/fix-rounding", "timeline"),
            ("viewer-call.png", "/sessions/fix-rounding/calls/8", None),
        ):
            driver.get(url + path)
            if anchor:  # past the header and the calls table, to the first turns
                driver.execute_script(f"document.getElementById('{anchor}').scrollIntoView()")
            driver.save_screenshot(str(OUT / name))
            print(f"wrote {(OUT / name).relative_to(ROOT)}")
    finally:
        driver.quit()
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
