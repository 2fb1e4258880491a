"""Shared fixtures: a fresh store file per test, and a CliRunner bound to it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from turnlog.store import SQLiteStore

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "turnlog.db"


@pytest.fixture
def file_store(db_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore.open(db_path)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under the README's test command (TURNLOG_NO_SKIP=1, as in CI) a skipped test fails: every
    dependency and service the suite needs is installed or started by that command, so a skip can
    only mean a missing install step."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and os.environ.get("TURNLOG_NO_SKIP") == "1" and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under TURNLOG_NO_SKIP=1 (the test command must skip nothing): {reason}"


@pytest.fixture(autouse=True)
def _no_local_configuration(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads the machine's own turnlog configuration (~/.config/turnlog/config.toml)."""
    monkeypatch.delenv("TURNLOG_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
