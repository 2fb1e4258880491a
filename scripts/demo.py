"""The demo: records the coding-agent session shipped in scripts/data into a fresh store, then shows
what turnlog does with it — the context under a small budget with its manifest, the artifact index,
the todos, a compaction, a replay of the model calls, the token audit, a fork, and verify. Each step
runs the real `turnlog` command and prints it first."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TURNLOG = str(Path(sys.executable).parent / "turnlog")


# The open run's end: the linter's long output, the answer, run_finished (the README appends it too).
FINISH_RUN_3 = ROOT / "scripts" / "data" / "finish_run_3.jsonl"


def step(title: str, *args: str, stdin: str | None = None) -> None:
    shown = "turnlog " + " ".join(shlex.quote(a) for a in args)
    if stdin is not None:
        shown = f"echo {shlex.quote(stdin)} | {shown}"
    heading = f"\033[1m## {title}\033[0m" if sys.stdout.isatty() else f"## {title}"
    print(f"\n{heading}\n$ {shown}", flush=True)
    result = subprocess.run([TURNLOG, *args], input=stdin, text=True, capture_output=True)
    print((result.stdout + result.stderr).rstrip())
    if result.returncode:
        print(f"(exit status {result.returncode})")


def main() -> None:
    keep = "--keep" in sys.argv
    folder = tempfile.mkdtemp(prefix="turnlog-demo-")
    os.environ["TURNLOG_DB"] = str(Path(folder) / "demo.db")
    session_file = str(ROOT / "scripts" / "data" / "coding_session.jsonl")
    print(f"turnlog demo: a fresh store at {os.environ['TURNLOG_DB']}")
    print("A coding agent fixed a rounding bug in three runs; its last tool call never got a result.")
    step("Create the store", "init")
    step(
        "Record the session: 38 events, appended atomically", "append", "fix-rounding", "--file", session_file
    )
    step("The log, with token counts stored at append time", "log", "fix-rounding", "--to-version", "12")
    step(
        "The context for the next model call under a 1,500-token budget, with its manifest:\n"
        "system prompt and pinned request kept, pairs whole, outputs capped by tokens,\n"
        "the interrupted call given a marked result",
        "context",
        "fix-rounding",
        "--budget",
        "1500",
        "--max-tool-tokens",
        "120",
        "--format",
        "text",
        "--manifest",
        "--record",
    )
    step("The artifact index the agent reads instead of every file", "index", "fix-rounding")
    step("The todo list, as the model is shown it", "todos", "fix-rounding")
    step(
        "Compact for a 1,200-token budget: a summary event replaces the oldest span in contexts\n"
        "built from now on; nothing is deleted (it waits for open runs unless told otherwise)",
        "compact",
        "fix-rounding",
        "--budget",
        "1200",
        "--max-tool-tokens",
        "200",
        "--keep-last",
        "6",
        "--during-run",
    )
    step("The summary tree", "summaries", "fix-rounding")
    step(
        "Give the session a run-time policy (an event): the linter's long outputs are summarized\n"
        "as they arrive, and the session is compacted when a run finishes",
        "policy",
        "fix-rounding",
        "--compact-on-run-end",
        "--budget",
        "1200",
        "--max-tool-tokens",
        "200",
        "--keep-last",
        "6",
        "--tool-output-mode",
        "run_linter=auto",
    )
    step(
        "The open run ends: the linter's 1,400-token output, the answer, run_finished",
        "append",
        "fix-rounding",
        "--file",
        str(FINISH_RUN_3),
    )
    step("What the policy appended after that commit", "log", "fix-rounding", "--from-version", "42")
    step(
        "Replay every model call: what it was sent and what changed since the call before",
        "replay",
        "fix-rounding",
        "--budget",
        "3000",
        "--max-tool-tokens",
        "200",
        "--at",
        "38",
    )
    step("Where the tokens went, and what they cost", "audit", "fix-rounding", "--by", "run")
    step(
        "Fork the session before the fix, to try another way",
        "fork",
        "fix-rounding",
        "--at",
        "16",
        "--into",
        "retry",
    )
    step(
        "The fork sees the shared history as it was at version 16",
        "todos",
        "retry",
    )
    step(
        "Import an OpenAI chat-completions transcript too",
        "import",
        str(ROOT / "scripts" / "data" / "openai_chat.json"),
        "--format",
        "openai",
    )
    step("Sessions", "sessions")
    step("Check the hash chain, the blobs, and every projection against a fresh rebuild", "verify")
    print(
        "\nWhat to try next:\n"
        "  .venv/bin/turnlog --help                        every command\n"
        "  .venv/bin/turnlog import FILE                   your own transcript (see import --help)\n"
        "  .venv/bin/turnlog import ~/.claude/projects     then audit: your Claude Code spend\n"
        "  .venv/bin/turnlog context SESSION --budget 8000 --format anthropic\n"
        "  .venv/bin/turnlog tool schema --format openai   give your agent access to its own log\n"
        "  .venv/bin/python scripts/example_agent.py      record an agent loop from Python\n"
        "  scripts/demo --keep                             keep this demo's store to explore it"
    )
    if keep:
        print(f"\nThe demo store is kept at {os.environ['TURNLOG_DB']} (export TURNLOG_DB to use it).")
    else:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
