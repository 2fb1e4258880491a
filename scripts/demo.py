"""The demo: import a shipped agent transcript into a fresh store, then show its log, the sessions,
a refused bad append, and the hash-chain check. Each step runs the real `turnlog` command."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TURNLOG = str(Path(sys.executable).parent / "turnlog")


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
    transcript = str(ROOT / "scripts" / "data" / "openai_chat.json")
    print(f"turnlog demo: a fresh store at {os.environ['TURNLOG_DB']}")
    step("Create the store", "init")
    step("Import an OpenAI chat-completions transcript", "import", transcript, "--format", "openai")
    step("Import it again: nothing is written twice", "import", transcript, "--format", "openai")
    step("The session's events, with token counts", "log", "chat-1")
    step(
        "Append a user message, with optimistic concurrency",
        "append",
        "chat-1",
        "--expected-version",
        "11",
        stdin='{"type": "message_appended", "role": "user", "content": "Thanks! Now add a test."}',
    )
    step(
        "A stale writer is refused, and the store is unchanged",
        "append",
        "chat-1",
        "--expected-version",
        "11",
        stdin='{"type": "message_appended", "role": "user", "content": "late"}',
    )
    step(
        "Malformed events are refused with the field named",
        "append",
        "chat-1",
        stdin='{"type": "message_appended", "role": "robot", "content": "x"}',
    )
    step("Sessions", "sessions")
    step("Check the hash chain and the file", "verify")
    print(
        "\nNext: `turnlog --help`, or import your own transcript with `turnlog import FILE --format openai`."
    )
    if keep:
        print(f"The demo store is kept at {os.environ['TURNLOG_DB']}.")
    else:
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
        os.rmdir(folder)


if __name__ == "__main__":
    main()
