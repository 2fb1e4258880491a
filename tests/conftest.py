"""Shared fixtures: a fresh store file per test, and a CliRunner bound to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from store import SQLiteStore

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
