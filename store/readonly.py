"""Opening a store file read-only, so a read never writes a byte, never waits for a writer, and works
on a file or folder it may not write; and folding deferred token counts in memory for such a read."""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from collections.abc import Sequence

from turnlog.store.errors import CorruptStoreError, StoreError
from turnlog.store.schema import LATEST_VERSION

SQLITE_HEADER = b"SQLite format 3\x00"

TOKEN_FOLD = "turnlog_token_fold"
"""The temp table holding the counts a read-only store made in memory."""


def check_store_file(path: str) -> None:
    """Refuse, without touching it, a path that cannot hold a store: missing, a folder, empty, or
    not an SQLite database."""
    if not os.path.exists(path):
        raise StoreError(
            f"no turnlog store at {path}; create one with `turnlog init` "
            "(or choose another with --db / $TURNLOG_DB)"
        )
    if os.path.isdir(path):
        raise StoreError(f"{path} is a directory, not a turnlog store")
    try:
        with open(path, "rb") as file:
            head = file.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if not head:
        raise CorruptStoreError(
            f"{path} is empty (0 bytes), not a turnlog store; create one with `turnlog init`, "
            "or choose another path"
        )
    if head != SQLITE_HEADER:
        raise CorruptStoreError(
            f"{path} is not a turnlog store (not an SQLite database); choose another path"
        )


def connect_readonly(path: str, busy_timeout: float) -> tuple[sqlite3.Connection, str | None]:
    """A read-only connection to the store file at ``path``, and the private folder of a copy to
    remove when it closes (None when the file itself is open).

    SQLite reads a WAL database read-only when its ``-shm`` exists or can be made beside it. Where
    neither holds (a folder this process may not write): with no ``-wal`` (or an empty one) nothing
    is waiting to be checkpointed, so the main file is the whole store and is opened ``immutable``
    (no locks, no ``-shm``); with a ``-wal`` holding frames, the file and its ``-wal`` are copied to
    a private folder and the copy is read, so committed events not yet checkpointed are not missed.
    """
    check_store_file(path)
    quoted = urllib.parse.quote(os.path.abspath(path))
    try:
        return _connect(f"file:{quoted}?mode=ro", busy_timeout), None
    except sqlite3.DatabaseError as exc:
        folder = os.path.dirname(os.path.abspath(path))
        if not isinstance(exc, sqlite3.OperationalError) or os.access(folder, os.W_OK):
            raise _open_error(path, exc) from exc
        first = exc
    wal = path + "-wal"
    try:
        if not os.path.exists(wal) or os.path.getsize(wal) == 0:
            return _connect(f"file:{quoted}?mode=ro&immutable=1", busy_timeout), None
        import shutil  # here: most reads never copy (the quick commands start without it)
        import tempfile

        scratch = tempfile.mkdtemp(prefix="turnlog-read-")
        try:
            copy = os.path.join(scratch, "turnlog.store.db")
            shutil.copyfile(path, copy)
            shutil.copyfile(wal, copy + "-wal")
            return _connect(f"file:{urllib.parse.quote(copy)}?mode=ro", busy_timeout), scratch
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
    except (sqlite3.DatabaseError, OSError) as exc:
        raise _open_error(path, first) from exc


def schema_for_reading(conn: sqlite3.Connection, path: str) -> str:
    """Check, without writing, that a file opened read-only is a turnlog store this code can read;
    return the tokenizer it records."""
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if names and "turnlog_migrations" not in names:
        raise CorruptStoreError(
            f"{path} is an SQLite database but not a turnlog store (tables: "
            f"{', '.join(sorted(names)[:5])}); choose another path"
        )
    if not names:
        raise CorruptStoreError(
            f"{path} is an empty SQLite database, not a turnlog store; create one with `turnlog init`"
        )
    newest = conn.execute("SELECT max(version) FROM turnlog_migrations").fetchone()[0] or 0
    if newest > LATEST_VERSION:
        raise CorruptStoreError(
            f"{path} has schema version {newest}, newer than this turnlog knows ({LATEST_VERSION}); "
            "upgrade turnlog"
        )
    if newest < LATEST_VERSION:
        raise StoreError(
            f"{path} has schema version {newest}; this turnlog reads version {LATEST_VERSION}. Open it "
            "once for writing to upgrade it (e.g. `turnlog init`), then read it"
        )
    row = conn.execute("SELECT value FROM turnlog_meta WHERE key = 'tokenizer'").fetchone()
    if row is None:
        raise CorruptStoreError(f"{path}: the store records no tokenizer; run `turnlog verify`")
    return str(row[0])


def _connect(uri: str, busy_timeout: float) -> sqlite3.Connection:
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=busy_timeout)
    try:
        # Temp tables (the in-memory folds) stay in memory: a full disk must not stop a read.
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file and its WAL now
    except BaseException:
        conn.close()
        raise
    return conn


def _open_error(path: str, exc: sqlite3.Error) -> StoreError:
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError):
        return StoreError(
            f"cannot open {path} read-only: {text}; check that the file (and its -wal and -shm, if "
            "any) can be read"
        )
    return CorruptStoreError(f"{path} is not a turnlog store or is damaged: {text}")


def remove_scratch(scratch: str | None) -> None:
    if scratch is not None:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)


def fold_token_counts(conn: sqlite3.Connection, counts: Sequence[tuple[int, int]]) -> None:
    """Keep (tokens, position) counts in this connection's memory and show them as the events' token
    counts: a temp view named ``events`` shadows the table (SQLite resolves unqualified names in the
    temp schema first), so every read on this connection sees them and the file is never written."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_temp_master WHERE type = 'table' AND name = ?", (TOKEN_FOLD,)
    ).fetchone()
    if not exists:
        conn.execute(
            f"CREATE TEMP TABLE {TOKEN_FOLD} (position INTEGER PRIMARY KEY, tokens INTEGER NOT NULL)"
        )
        columns = [row[1] for row in conn.execute("PRAGMA main.table_info(events)")]
        select = ", ".join(
            "coalesce(e.tokens, f.tokens) AS tokens" if c == "tokens" else f"e.{c} AS {c}" for c in columns
        )
        conn.execute(
            f"CREATE TEMP VIEW events AS SELECT {select} FROM main.events e "
            f"LEFT JOIN temp.{TOKEN_FOLD} f ON f.position = e.position"
        )
    conn.executemany(
        f"INSERT OR IGNORE INTO temp.{TOKEN_FOLD} (tokens, position) VALUES (?, ?)", list(counts)
    )
