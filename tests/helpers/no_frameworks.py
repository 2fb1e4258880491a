"""A pytest plugin (``-p tests.helpers.no_frameworks``) that makes the agent frameworks of the
``integrations`` extra unimportable, as on a core install: the core test files must collect and pass
without them."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

BLOCKED = ("agents", "langgraph", "langchain", "langchain_core", "langchain_community")
"""The top-level packages the ``integrations`` extra installs (and nothing of the core needs)."""


class _Blocker(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(
                f"No module named {fullname!r} (blocked: a core install)", name=fullname
            )
        return None


for _name in [m for m in sys.modules if m.split(".")[0] in BLOCKED]:
    del sys.modules[_name]
sys.meta_path.insert(0, _Blocker())
