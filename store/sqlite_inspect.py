"""What `turnlog doctor` needs to know of an SQLite file before opening it as a store: SQLite's own
quick check, the tables it holds and the schema version it records — read-only, never migrating."""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from dataclasses import dataclass


class UnreadableFile(Exception):
    """The file cannot be opened read-only by SQLite."""


class DamagedFile(Exception):
    """SQLite cannot read the file's pages."""


@dataclass(frozen=True, slots=True)
class FileInspection:
    quick_check: list[str]
    """SQLite's ``PRAGMA quick_check`` rows: ``["ok"]`` for a sound file."""
    tables: frozenset[str]
    schema_version: int | None
    """The highest turnlog migration applied; None when the file has no migrations table."""


def inspect_sqlite_file(path: str) -> FileInspection:
    """Inspect the SQLite file at ``path`` read-only (it is never written to)."""
    try:
        conn = sqlite3.connect(f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise UnreadableFile(str(exc)) from None
    try:
        rows = [str(row[0]) for row in conn.execute("PRAGMA quick_check").fetchall()]
        if rows != ["ok"]:
            return FileInspection(rows, frozenset(), None)
        listed = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        tables = frozenset(row[0] for row in listed)
        version = None
        if "turnlog_migrations" in tables:
            version = int(conn.execute("SELECT max(version) FROM turnlog_migrations").fetchone()[0] or 0)
        return FileInspection(rows, tables, version)
    except sqlite3.DatabaseError as exc:
        raise DamagedFile(str(exc)) from None
    finally:
        conn.close()


def postgres_driver_installed() -> bool:
    """Whether psycopg (the ``postgres`` extra) can be imported, without importing it."""
    import importlib.util

    return importlib.util.find_spec("psycopg") is not None
