"""Makes tests/fixtures/aider/parity.json: a deterministic corpus of aider replies (edit blocks with
the file name above, inside, bold or quoted around the fence, three or four backticks, several blocks
a reply, shell blocks between, replacement text holding fences, `#### ` and `> ` lines) and, for each,
the edits aider's own parser finds (``find_original_update_blocks`` in aider/coders/editblock_coder.py).
tests/test_import_aider.py checks turnlog's port against it.

aider pins versions the frameworks clash with, so it runs in a throwaway venv, never turnlog's:

    python3 -m venv /tmp/aider-venv && /tmp/aider-venv/bin/pip install aider-chat
    /tmp/aider-venv/bin/python scripts/aider_parity.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "aider" / "parity.json"
NAMES = ["src/app.py", "README.md", "lib/util/strings.ts", "tests/test_x.py", "a b/c.txt", "main.go"]
LANGS = ["", "python", "ts", "go", "markdown", "diff"]


def _block(fname: str, lang: str, search: str, replace: str, style: int) -> str:
    fence = "````" if style == 4 else "```"
    head = {
        0: f"{fname}\n{fence}{lang}\n",
        1: f"{fence}{lang}\n{fname}\n",
        2: f"**{fname}**\n{fence}{lang}\n",
        3: f"`{fname}`\n{fence}{lang}\n",
        4: f"{fname}\n{fence}{lang}\n",
    }[style]
    return f"{head}<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n{fence}\n"


def corpus(count: int = 150, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    replies = []
    for _ in range(count):
        parts = [
            rng.choice(["Here is the change.\n\n", "I'll update the file:\n\n", "", "Let me fix that.\n"])
        ]
        for _ in range(rng.randint(1, 3)):
            name, style = rng.choice(NAMES), rng.randint(0, 4)
            search = "".join(f"line {k} of {name}\n" for k in range(rng.randint(0, 3)))
            odd = ["x", "y", "```", "#### not a turn", "> quoted"]
            replace = "".join(f"new {k} {rng.choice(odd)}\n" for k in range(rng.randint(0, 3)))
            parts.append(_block(name, rng.choice(LANGS), search, replace, style))
            parts.append(rng.choice(["\n", "\nThen:\n\n", "\n```bash\npytest\n```\n\n", ""]))
        replies.append("".join(parts))
    return replies


def main() -> None:
    from aider.coders.editblock_coder import find_original_update_blocks  # type: ignore[import-not-found]

    cases = []
    for reply in corpus():
        edits = [[e[0], e[2]] for e in find_original_update_blocks(reply) if e[0] is not None and len(e) == 3]
        cases.append({"reply": reply, "edits": edits})
    OUT.write_text(
        json.dumps({"source": "aider-chat find_original_update_blocks", "cases": cases}, indent=1) + "\n"
    )
    print(f"{len(cases)} replies, {sum(len(c['edits']) for c in cases)} edits -> {OUT}")


if __name__ == "__main__":
    main()
