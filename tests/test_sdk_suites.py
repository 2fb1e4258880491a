"""The OpenAI Agents SDK's own session and runner tests, run against TurnlogSession.

The SDK's sdist (which ships its tests) is downloaded once into ``.cache/sdk-suites/``; see
``scripts/sdk_suites/``. The tests that check SQLiteSession's own internals are left out by name,
and the same names are run against the SDK's real SQLiteSession to show they pass there: what is
left out is SQLite plumbing, not a behaviour of the Session protocol.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("agents")
pytest.importorskip("pytest_mock")  # the SDK's tests use these two
pytest.importorskip("inline_snapshot")

ROOT = Path(__file__).resolve().parents[1]
PASSED_FLOOR = 1050
"""openai-agents 0.24.0 gives 1,085 passed; a patch release may move a few tests, not hundreds."""


def _suite() -> ModuleType:
    # Loaded from its file: importing the swap plugin itself would replace SQLiteSession here too.
    path = ROOT / "scripts" / "sdk_suites" / "openai_agents_suite.py"
    spec = importlib.util.spec_from_file_location("openai_agents_suite", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("openai_agents_suite", module)
    spec.loader.exec_module(module)
    return module


def test_openai_agents_own_tests_pass_on_turnlog_session(tmp_path: Path) -> None:
    suite = _suite()
    sdist = suite.fetch_sdist(suite.sdk_version())
    report = tmp_path / "deselected.json"
    # Both runs at once: each is one process, and the rest of the suite leaves the second core idle.
    on_turnlog = suite.start(sdist, swap=True, select=suite.without_internals(), report=report)
    on_sqlite = suite.start(sdist, swap=False, select=suite.only_internals())
    turnlog_run = suite.finish(on_turnlog, report)
    sqlite_run = suite.finish(on_sqlite)
    print(f"openai-agents {suite.sdk_version()} on TurnlogSession: {turnlog_run.summary}")
    print(f"the left-out SQLiteSession internals on SQLiteSession: {sqlite_run.summary}")

    counts = turnlog_run.counts
    assert turnlog_run.returncode == 0, turnlog_run.output[-6000:]
    assert counts.get("failed", 0) == counts.get("errors", 0) == counts.get("skipped", 0) == 0
    assert counts["passed"] >= PASSED_FLOOR, turnlog_run.summary
    # Left out: exactly the tests named in SQLITE_INTERNALS, each name matching at least one test.
    left_out = turnlog_run.deselected
    assert len(left_out) == counts["deselected"]
    assert all(any(name in node for name in suite.SQLITE_INTERNALS) for node in left_out), left_out
    assert all(any(name in node for node in left_out) for name in suite.SQLITE_INTERNALS), left_out

    # The same names on the SDK's real SQLiteSession all pass: they are the reference's own plumbing.
    assert sqlite_run.returncode == 0, sqlite_run.output[-6000:]
    assert sqlite_run.counts == {"passed": len(left_out), "deselected": counts["passed"]}, sqlite_run.summary
