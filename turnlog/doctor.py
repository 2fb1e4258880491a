"""What is wrong with a store, if anything, and the command that fixes it (`turnlog doctor`).

Every check reads and never writes: the file is opened read-only (no migration, no catch-up), so a
doctor run leaves the store exactly as it found it. Each finding is one line with the command to
run; a *problem* needs that command, a *note* is fine as it is and says what it means."""

from __future__ import annotations

import os
import shlex
import stat
import urllib.parse
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from turnlog import is_postgres_url, open_backend
from turnlog.store.errors import StoreError
from turnlog.store.readonly import SQLITE_HEADER
from turnlog.store.schema import LATEST_VERSION
from turnlog.store.sqlite_inspect import (
    DamagedFile,
    FileInspection,
    UnreadableFile,
    inspect_sqlite_file,
    postgres_driver_installed,
)

Level = Literal["problem", "note"]


@dataclass(frozen=True)
class Finding:
    check: str
    """A stable name for what was found (``missing``, ``schema_older``, ``wal``, ...)."""
    level: Level
    message: str
    fix: str | None = None
    """The command to run, when one fixes it."""
    hint: str | None = None
    """What to do otherwise (or what it means), when no one command does."""

    def line(self) -> str:
        then = f"; run `{self.fix}`" if self.fix else f"; {self.hint}" if self.hint else ""
        return f"{self.level}: {self.message}{then}"


@dataclass
class Diagnosis:
    path: str
    """The store, as shown (a server's URL without its password)."""
    findings: list[Finding] = field(default_factory=list)
    events: int | None = None
    schema_version: int | None = None
    tokenizer: str | None = None

    @property
    def healthy(self) -> bool:
        return not any(f.level == "problem" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "healthy": self.healthy,
            "events": self.events,
            "schema_version": self.schema_version,
            "tokenizer": self.tokenizer,
            "findings": [asdict(f) for f in self.findings],
        }


def hide_password(url: str) -> str:
    """``url`` with the password (if any) shown as ``***``."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def diagnose(path: str) -> Diagnosis:
    """Every finding about the store at ``path`` (a SQLite file or a PostgreSQL URL)."""
    if is_postgres_url(path):
        return _diagnose_server(path)
    diagnosis = Diagnosis(path)
    _diagnose_file(path, diagnosis)
    return diagnosis


def _command(path: str, *args: str) -> str:
    return " ".join(["turnlog", "--db", shlex.quote(path), *args])


def _diagnose_file(path: str, d: Diagnosis) -> None:
    problem = _adder(d, "problem")
    note = _adder(d, "note")
    if not os.path.exists(path):
        problem("missing", f"no turnlog store at {path}", _command(path, "init"))
        return
    if os.path.isdir(path):
        problem("not_a_store", f"{path} is a directory, not a store file", "turnlog --db FILE init")
        return
    try:
        with open(path, "rb") as file:
            head = file.read(len(SQLITE_HEADER))
    except OSError as exc:
        problem("unreadable", f"cannot read {path}: {exc.strerror or exc}", f"chmod u+r {shlex.quote(path)}")
        return
    other = "turnlog --db OTHER.db init"
    if not head:
        problem("not_a_store", f"{path} is empty (0 bytes), not a turnlog store", _command(path, "init"))
        return
    if head != SQLITE_HEADER:
        problem("not_a_store", f"{path} is not a turnlog store (not an SQLite database)", other)
        return
    try:
        found = inspect_sqlite_file(path)
    except UnreadableFile as exc:
        problem("unreadable", f"cannot open {path} read-only: {exc}", f"ls -l {shlex.quote(path)}*")
        return
    except DamagedFile as exc:
        problem(
            "damaged",
            f"{path} is damaged: {exc}",
            hint="restore it from a copy; `turnlog copy` makes one of a sound store",
        )
        return
    if not _check_schema(found, path, d, problem):
        return
    mode = os.stat(path).st_mode
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(path, os.W_OK):
        note(
            "readonly_file",
            f"{path} is read-only: every read works, appends are refused",
            f"chmod u+w {shlex.quote(path)}",
        )
    wal = path + "-wal"
    if os.path.exists(wal) and os.path.getsize(wal) > 0:
        note(
            "wal",
            f"{wal} holds {os.path.getsize(wal):,} bytes of committed writes not yet copied into the "
            "file: fine, SQLite folds them in at its next checkpoint",
            hint="keep it beside the file: copy the store with `turnlog copy`, not the file alone",
        )
    _check_open_store(path, d, problem)


def _check_schema(found: FileInspection, path: str, d: Diagnosis, problem: Any) -> bool:
    """The schema checks; False when the others cannot run."""
    rows = found.quick_check
    if rows != ["ok"]:
        first = rows[0] if rows else "no answer"
        problem(
            "damaged",
            f"{path} is damaged: SQLite's quick_check finds {len(rows)} problem(s), the first: {first}",
            _command(path, "verify"),
        )
        return False
    if found.schema_version is None:
        shown = ", ".join(sorted(found.tables)[:5]) or "none"
        problem(
            "not_a_store",
            f"{path} is an SQLite database but not a turnlog store (tables: {shown})",
            "turnlog --db OTHER.db init",
        )
        return False
    version = found.schema_version
    d.schema_version = version
    if version > LATEST_VERSION:
        problem(
            "schema_newer",
            f"{path} has schema version {version}, newer than this turnlog knows ({LATEST_VERSION})",
            "pip install --upgrade turnlog",
        )
        return False
    if version < LATEST_VERSION:
        problem(
            "schema_older",
            f"{path} has schema version {version}, older than this turnlog's ({LATEST_VERSION}): it "
            "is migrated on its first write, and reads refuse it until then",
            _command(path, "init"),
        )
        return False
    return True


def _diagnose_server(url: str) -> Diagnosis:
    shown = hide_password(url)
    d = Diagnosis(shown)
    problem = _adder(d, "problem")
    if not postgres_driver_installed():
        problem(
            "postgres_extra",
            "a PostgreSQL store needs the postgres extra, which is not installed",
            "pip install 'turnlog[postgres]'",
        )
        return d
    _check_open_store(url, d, problem, shown=shown)
    return d


def _check_open_store(path: str, d: Diagnosis, problem: Any, *, shown: str | None = None) -> None:
    """The checks that need the store open (read-only, nothing caught up): its tokenizer, its
    projections against the log, and a quick verify."""
    server = shown is not None
    try:
        store = open_backend(path, create=False, readonly=True)
    except StoreError as exc:
        message = str(exc).replace(path, shown) if server and shown else str(exc)
        if server:
            problem(
                "postgres_unreachable",
                f"cannot open the store at {shown}: {message.splitlines()[0] if message else exc}",
                hint="start the server, or check the URL's host, port, user and database",
            )
        else:
            problem("cannot_open", message, _command(path, "verify"))
        return
    with store:
        d.tokenizer = store.tokenizer.name
        d.events = store.head_position()
        _check_tokenizer(store.tokenizer.name, d, problem)
        _check_projections(store, path if not server else "URL", d, problem)
        _check_verify(store, path if not server else "URL", d, problem)


def _check_tokenizer(name: str, d: Diagnosis, problem: Any) -> None:
    from turnlog.store.tokenizer import load_tokenizer

    try:
        load_tokenizer(name)
    except StoreError as exc:
        problem(
            "tokenizer",
            f"the store counts tokens with {name!r}, which cannot be loaded here: {str(exc).split('. ')[0]}",
            hint="connect to the network once, or set TIKTOKEN_CACHE_DIR to a folder holding the encoding",
        )


def _check_projections(store: Any, path: str, d: Diagnosis, problem: Any) -> None:
    from turnlog.projections.materialize import DEFERRED
    from turnlog.projections.registry import all_projections
    from turnlog.store.dialect import dialect_of

    head = store.head_position()
    with store.reading() as conn:
        main = dialect_of(conn).main
        try:
            stored = dict(
                conn.execute(f"SELECT name, position FROM {main}.projection_checkpoints").fetchall()
            )
        except Exception:  # no table yet: nothing materialized
            stored = {}
    behind = [p.name for p in all_projections() if int(stored.get(p.name, 0)) < head]
    if behind and head:
        lowest = min(int(stored.get(name, 0)) for name in behind)
        which = f"{len(behind)} materialized projection(s) stop at position {lowest:,} of {head:,} " + (
            f"({', '.join(sorted(behind)[:4])}{', ...' if len(behind) > 4 else ''})"
        )
        if head - lowest <= DEFERRED and all(name in stored for name in behind):
            # A writer applies its appends at its next read or when it closes: a short gap is a
            # writer at work (or one stopped before it closed), caught up by the next writer's read.
            _adder(d, "note")(
                "projections_behind",
                f"{which}: the last appends are applied at a writer's next read or close; "
                "meanwhile reads fold them in memory",
            )
            return
        problem(
            "projections_behind",
            f"{which}; reads fold the rest in memory each time",
            _command(path, "rebuild"),
        )


def _check_verify(store: Any, path: str, d: Diagnosis, problem: Any) -> None:
    from turnlog.checks import verify_all

    try:
        report = verify_all(store, quick=True)
    except StoreError as exc:
        problem("verify", f"verify cannot finish: {exc}", _command(path, "verify"))
        return
    if not report.ok:
        count = len(report.problems)
        where = f" at position {report.first_bad_position}" if report.first_bad_position else ""
        problem(
            "verify",
            f"verify finds {count} problem{'s' if count != 1 else ''}{where}: "
            f"{report.problems[0].splitlines()[0][:200]}",
            _command(path, "verify"),
        )


def _adder(d: Diagnosis, level: Level) -> Any:
    def add(check: str, message: str, fix: str | None = None, *, hint: str | None = None) -> None:
        d.findings.append(Finding(check, level, message, fix, hint))

    return add
