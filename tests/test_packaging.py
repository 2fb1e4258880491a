"""The import names are turnlog.store and turnlog.projections (the checkout keeps store/ and
projections/ at its top level; turnlog/store and turnlog/projections link to them), and no code
imports the top-level names: a second import of the same files would make two copies of every
class (an isinstance check across them fails)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP_LEVEL = re.compile(r"(^\s*|[\"';]\s*)(import|from)\s+(store|projections)\b(?![\w-])")
"""An import of the top-level name in code, or at the start of code in a string (a subprocess's)."""


def test_no_code_imports_the_top_level_folders() -> None:
    offenders = []
    for folder in ("store", "projections", "turnlog", "tests", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            if "turnlog/store" in path.as_posix() or "turnlog/projections" in path.as_posix():
                continue  # the same files, seen through the links
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                code = line.split("#", 1)[0]
                if TOP_LEVEL.search(code) and "TOP_LEVEL" not in code:
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_the_links_point_at_the_folders() -> None:
    for name in ("store", "projections"):
        link = ROOT / "turnlog" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve()


def test_one_copy_of_each_module() -> None:
    code = (
        "import sys, turnlog, turnlog.store, turnlog.projections.context\n"
        "assert 'store' not in sys.modules and 'projections' not in sys.modules, sorted(sys.modules)\n"
        "from turnlog.store import SQLiteStore\n"
        "assert turnlog.SQLiteStore is SQLiteStore\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
