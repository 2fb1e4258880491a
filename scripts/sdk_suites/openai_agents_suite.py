"""Runs the OpenAI Agents SDK's own session and runner tests against TurnlogSession (through the
``openai_agents_swap`` plugin), from the sdist of the installed SDK version, and reads the outcome.

The SDK's tests are never copied into this repository: the sdist (which ships ``tests/``) is
downloaded with pip into ``.cache/sdk-suites/`` (gitignored) on first use and reused after.
``python scripts/sdk_suites/openai_agents_suite.py`` runs the suite and prints pytest's summary;
``tests/test_sdk_suites.py`` runs it as part of the test suite. This module imports no SDK code, so
importing it never swaps ``SQLiteSession`` in the importing process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = ROOT / ".cache" / "sdk-suites"

SUITE_FILES = (
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
    "tests/memory/test_session_context_wrapper.py",
    "tests/test_agent_runner.py",
    "tests/test_agent_runner_streamed.py",
    "tests/test_tool_failure_boundaries.py",
    "tests/test_tool_batch_failure_history.py",
    "tests/test_native_tool_failure_history.py",
    "tests/test_max_turns.py",
    "tests/test_run_impl_resume_paths.py",
    "tests/deferred_session_writes",
    "tests/test_hitl_session_scenario.py",
    "tests/test_soft_cancel.py",
)
"""The SDK's tests that use a session: its session tests and the runner tests that persist through one."""

SQLITE_INTERNALS = (
    "close_closes_worker_thread_connections",
    "reaps_connections_from_exited_worker_threads",
    "closes_retired_connections_before_the_next_allocation",
    "keeps_connections_of_live_worker_threads",
    "closed_rejects_empty_add_items",
    "pop_item_skips_corrupt_most_recent",
    "pop_item_returns_none_after_dropping_only_corrupt_rows",
    "get_items_limit_skips_corrupt_newest_rows",
    "get_items_session_settings_limit_skips_corrupt_rows",
    "file_lock_is_shared_across_instances",
    "failed_add_items_releases_write_lock",
    "failed_clear_session_rolls_back",
    "failed_pop_item_releases_write_lock",
    "rollback_failure_evicts_connection",
    "close_retries_quarantined_connection",
    "post_commit_cancellation_propagates_after_known_outcome",
    "handoff_resume_after_cancelled_compaction_commits",
)
"""Names (substrings) of the SDK tests that test SQLiteSession's implementation, not the protocol:
its thread-local connections, file locks, rollbacks, corrupt-row skipping, the literal message
"SQLiteSession is closed", and the compaction decorator patching SQLite's ``_insert_items``."""

DESELECTED_REPORT = "TURNLOG_SDK_SUITE_DESELECTED"
"""Environment variable: a file where the swap plugin writes the node ids it saw deselected (JSON)."""


@dataclass
class SuiteRun:
    """The outcome of one run of the SDK's tests."""

    returncode: int
    summary: str
    """pytest's last line, e.g. ``1085 passed, 22 deselected in 60.51s``."""
    counts: dict[str, int]
    """``passed``, ``failed``, ``errors``, ``skipped``, ``deselected``... as the summary gives them."""
    output: str
    deselected: list[str] = field(default_factory=list)
    """Node ids deselected by ``-k`` (only when run with the swap plugin)."""


def sdk_version() -> str:
    """The installed openai-agents version (its tests must be the ones of that exact release)."""
    return metadata.version("openai-agents")


def fetch_sdist(version: str, cache: Path = CACHE) -> Path:
    """The unpacked sdist of openai-agents ``version`` (downloaded with pip on first use)."""
    unpacked = cache / f"openai_agents-{version}"
    if (unpacked / "tests" / "conftest.py").is_file():
        return unpacked
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"openai_agents-{version}.tar.gz"
    if not archive.is_file():
        # --no-binary only for the SDK itself: its build backend still comes as a wheel (building
        # every build dependency from source too takes minutes).
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-binary",
                "openai-agents",
                f"openai-agents=={version}",
                "--dest",
                str(cache),
            ],
            check=True,
        )
    with tarfile.open(archive) as tar:
        tar.extractall(cache, filter="data")
    if not (unpacked / "tests" / "conftest.py").is_file():
        raise RuntimeError(f"{archive} holds no tests/: the SDK's sdist layout changed; update {__file__}")
    return unpacked


def start(sdist: Path, *, swap: bool, select: str, report: Path | None = None) -> subprocess.Popen[str]:
    """Start pytest on :data:`SUITE_FILES` in ``sdist`` (its own pytest settings apply), with
    ``-k select``; ``swap`` loads the plugin that makes every ``SQLiteSession`` a TurnlogSession."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    }
    env.pop("TURNLOG_NO_SKIP", None)  # the SDK's suite has its own rules; skips are counted instead
    plugins = ["-p", "openai_agents_swap"] if swap else []
    if report is not None:
        env[DESELECTED_REPORT] = str(report)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugins, *SUITE_FILES]
    return subprocess.Popen(
        [*command, "-k", select],
        cwd=sdist,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(process: subprocess.Popen[str], report: Path | None = None) -> SuiteRun:
    """Wait for a run started by :func:`start` and read its summary."""
    output, _ = process.communicate()
    lines = [line for line in output.splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else ""
    counts = {name: int(n) for n, name in re.findall(r"(\d+) (\w+)", summary)}
    if "error" in counts:
        counts["errors"] = counts.pop("error")
    deselected = json.loads(report.read_text()) if report is not None and report.is_file() else []
    return SuiteRun(process.returncode, summary, counts, output, deselected)


def without_internals() -> str:
    """The ``-k`` expression that leaves out :data:`SQLITE_INTERNALS`."""
    return " and ".join(f"not {name}" for name in SQLITE_INTERNALS)


def only_internals() -> str:
    """The ``-k`` expression that selects just :data:`SQLITE_INTERNALS`."""
    return " or ".join(SQLITE_INTERNALS)


def main() -> int:
    sdist = fetch_sdist(sdk_version())
    run = finish(start(sdist, swap=True, select=without_internals()))
    print(f"openai-agents {sdk_version()} own tests on TurnlogSession: {run.summary}")
    return run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
