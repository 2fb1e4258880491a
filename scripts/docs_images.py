"""Makes the README's images from the demo data: docs/img/audit-plot.png, the spend plot of the demo
session (`turnlog audit fix-rounding --plot ...`). Deterministic: the same data and package versions
give the same bytes. Needs the plot extra. Run: .venv/bin/python scripts/docs_images.py"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's turnlog, installed or not

from turnlog.plot import plot_spend  # noqa: E402
from turnlog.store import SQLiteStore  # noqa: E402
from turnlog.store.events import parse_events_json  # noqa: E402

SESSION = ROOT / "scripts" / "data" / "coding_session.jsonl"
OUT = ROOT / "docs" / "img"


def main() -> None:
    lines = [line for line in SESSION.read_text(encoding="utf-8").splitlines() if line.strip()]
    events = parse_events_json("[" + ",".join(lines) + "]")
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder, SQLiteStore.open(Path(folder) / "demo.db") as store:
        store.append("fix-rounding", events)
        plot_spend(store, OUT / "audit-plot.png", "fix-rounding")
    print(f"wrote {(OUT / 'audit-plot.png').relative_to(ROOT)}")


if __name__ == "__main__":
    main()
