"""Drop-in stores for agent frameworks: each module plugs turnlog into one framework's own storage
interface, so that framework's agents get turnlog's immutable log, replay, audit and budgeted context
by changing one line.

Importing this package imports no framework; each adapter module imports its framework when it is
imported, and says which extra to install when it is missing.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from turnlog.store import Store

__all__ = ["StoreLike", "open_for_adapter", "require"]

StoreLike = str | os.PathLike[str] | Store
"""What every adapter's ``db=`` takes: a store's path (or, later, a database URL), or an open store."""


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` of a framework, or raise ImportError naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"this turnlog adapter needs {module.split('.')[0]!r}, which is not installed; "
            f"install it with: pip install 'turnlog[{extra}]'"
        ) from exc


def open_for_adapter(db: StoreLike) -> tuple[Store, bool]:
    """The store an adapter works on, and whether the adapter opened it (and so must close it).

    A path is opened with :func:`turnlog.open_store`, so the projections are advanced with the
    appends (at the next read or close); an open store is used as it is, and stays the caller's to
    close."""
    if isinstance(db, Store):
        from turnlog.projections.registry import keep_caught_up

        keep_caught_up(db)
        return db, False
    from turnlog import open_store  # here: turnlog imports nothing of its integrations

    return open_store(db), True
