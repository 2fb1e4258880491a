"""The core works without the frameworks: every test file that is not about an integration collects,
and the core's fast feature tests pass, in a process where the ``integrations`` extra's packages
cannot be imported (as after ``pip install turnlog``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
FRAMEWORK_TESTS = ("test_integration", "test_sdk_suites", "test_core_without_frameworks")
FAST_CORE = (
    "test_events.py",
    "test_context.py",
    "test_import_openai.py",
    "test_integrations_package.py",
    "test_recorder.py",
)


def _core_files() -> list[str]:
    files = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    return [f"tests/{name}" for name in files if not name.startswith(FRAMEWORK_TESTS)]


def _pytest(*args: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "tests.helpers.no_frameworks",
        "-o",
        "addopts=",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    return subprocess.run([*command, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_blocker_really_blocks() -> None:
    code = (
        "import tests.helpers.no_frameworks\n"
        "try:\n import langchain_core\nexcept ImportError as e:\n print(e)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "blocked: a core install" in result.stdout


def test_every_core_test_file_collects_without_the_frameworks() -> None:
    result = _pytest("--collect-only", *_core_files())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " tests collected" in result.stdout or "tests collected" in result.stdout


def test_the_core_feature_tests_pass_without_the_frameworks() -> None:
    result = _pytest(*(f"tests/{name}" for name in FAST_CORE))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and " failed" not in result.stdout
