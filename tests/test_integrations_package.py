"""The integrations package: importing it (or turnlog) imports no framework, and a missing framework
is an ImportError that names the extra to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from turnlog.integrations import open_for_adapter, require
from turnlog.store import SQLiteStore

FRAMEWORKS = ("agents", "langgraph", "langchain_core", "langchain_community", "pydantic_ai", "openai")


def test_importing_turnlog_and_its_integrations_imports_no_framework() -> None:
    code = (
        "import sys, turnlog, turnlog.integrations, turnlog.cli\n"
        f"loaded = sorted(m for m in {FRAMEWORKS!r} if m in sys.modules)\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_a_missing_framework_names_its_extra() -> None:
    with pytest.raises(ImportError, match=r"pip install 'turnlog\[langgraph\]'"):
        require("no_such_framework_for_turnlog.checkpoint", "langgraph")
    assert require("json", "none").dumps([]) == "[]"


def test_open_for_adapter_takes_a_path_or_an_open_store(tmp_path: Path) -> None:
    store, owned = open_for_adapter(tmp_path / "a.db")
    assert owned and isinstance(store, SQLiteStore)
    store.close()
    with SQLiteStore.open(tmp_path / "b.db") as given:
        same, owned = open_for_adapter(given)
        assert same is given and not owned
