"""The log's own check behind `turnlog verify`: the database's integrity, the immutability triggers,
the hash chain, every row decoded, every stored token count recomputed, and the content blobs. It
reports every finding, with its position where it has one, and carries on past a bad row."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from turnlog.store.base import VerifyReport
from turnlog.store.chain import GENESIS_HASH, event_hash, order_hash, payload_digest
from turnlog.store.chain_migration import fork_of
from turnlog.store.errors import CorruptStoreError
from turnlog.store.events import ArtifactWritten, Event, SummaryRecorded, ToolReturned
from turnlog.store.limits import MAX_TOKENS
from turnlog.store.rows import (
    TEXT_AS_BYTES,
    TEXT_COLUMNS,
    BlobDecodeError,
    decode_blob,
    record_from_row,
    sqlite_hash_at,
)
from turnlog.store.schema import TRIGGERS
from turnlog.store.tokenizer import Tokenizer

MAX_PROBLEMS = 100
"""The most findings a report lists (the count of the rest is added)."""

# An integrity_check line about a row of an events index names the row by its rowid: the position.
_EVENTS_ROW = re.compile(r"\brow (\d+) missing from index sqlite_autoindex_events_\d+")


class Findings:
    """The problems found so far, and the positions they name."""

    def __init__(self, report: VerifyReport) -> None:
        self.report = report
        self.positions: list[int] = []
        self.dropped = 0

    def add(self, position: int | None, text: str) -> None:
        if len(self.report.problems) < MAX_PROBLEMS:
            self.report.problems.append(text)
        else:
            self.dropped += 1
        if position is not None:
            self.positions.append(position)

    def finish(self) -> VerifyReport:
        if self.dropped:
            self.report.problems.append(f"... and {self.dropped} more problems")
        self.report.first_bad_position = min(self.positions) if self.positions else None
        return self.report


def verify_log(
    conn: sqlite3.Connection,
    count: Callable[[Event], int],
    tokenizer: Tokenizer,
    *,
    salt: bytes,
    quick: bool = False,
    counted_through: int = 0,
) -> VerifyReport:
    """Check the log on ``conn`` inside the caller's read transaction. ``count`` is the store's token
    count of one event; ``counted_through`` the position up to which every count is filled in."""
    findings = Findings(VerifyReport())
    _check_database(conn, findings, quick)
    _check_triggers(conn, findings)
    _check_events(conn, findings, count, tokenizer, counted_through, salt)
    _check_blobs(conn, findings)
    return findings.finish()


def _check_database(conn: sqlite3.Connection, findings: Findings, quick: bool) -> None:
    pragma = "quick_check" if quick else "integrity_check"
    for (line,) in conn.execute(f"PRAGMA {pragma}(1000)"):
        if line == "ok":
            continue
        found = _EVENTS_ROW.search(line)
        position = int(found.group(1)) if found else None
        where = f"position {position}: " if position is not None else ""
        findings.add(position, f"{where}SQLite {pragma}: {line}")


def _check_triggers(conn: sqlite3.Connection, findings: Findings) -> None:
    stored = dict(
        conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name IN ('events', 'blobs')"
        )
    )
    for name, sql in TRIGGERS.items():
        if name not in stored:
            findings.add(None, f"trigger {name} is missing: the log is no longer protected against changes")
        elif _normal(stored[name]) != _normal(sql):
            findings.add(None, f"trigger {name} was altered: its SQL is not the one turnlog created")
    for name in sorted(set(stored) - set(TRIGGERS)):
        findings.add(None, f"trigger {name} on the log is not one turnlog created")


def _normal(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";").strip()


class ChainCheck:
    """The checks of the events, one row at a time in position order, the same on every backend:
    gapless positions and the order chain, each session's chain and versions, the payload digests,
    each row decoded, and what was derived from it (token counts, artifact ids and sizes).
    ``hash_at(session, version)`` gives the stored hash of a session's event (following its fork
    lineage): where a fork's chain starts."""

    def __init__(
        self,
        findings: Findings,
        count: Callable[[Event], int],
        tokenizer: Tokenizer,
        counted_through: int,
        salt: bytes,
        hash_at: Callable[[str, int], str | None],
    ) -> None:
        self.findings = findings
        self.count = count
        self.tokenizer = tokenizer
        self.counted_through = counted_through
        self.salt = salt
        self.hash_at = hash_at
        self.expected_pos = 1
        self.order = GENESIS_HASH
        self.last_hash: dict[str, str] = {}
        self.versions: dict[str, int] = {}
        findings.report.head_hash = GENESIS_HASH

    def row(self, row: Sequence[Any], tokens: int | None, digest: str | None, order: str | None) -> None:
        """One stored row in record_from_row's order (its tokens, payload digest and order hash apart)."""
        findings = self.findings
        findings.report.events += 1
        pos, sid, version, event_id, etype, sv, payload, blob_id, _, at, prev, stored_hash = row[:12]
        if pos != self.expected_pos:
            missing = f"{self.expected_pos}" + (f"-{pos - 1}" if pos - 1 > self.expected_pos else "")
            findings.add(self.expected_pos, f"position {missing}: missing (rows were deleted)")
        self.order = order_hash(self.order, pos, stored_hash)
        if order != self.order:
            findings.add(
                pos, f"position {pos}: the order chain does not check (events reordered, inserted or removed)"
            )
            self.order = order or ""
        expected_prev = self.last_hash.get(sid)
        if expected_prev is None:
            parent = fork_of(etype, payload)
            expected_prev = GENESIS_HASH if parent is None else self.hash_at(*parent) or ""
        if prev != expected_prev:
            findings.add(pos, f"position {pos}: prev_hash does not match the session's previous event")
        if digest != payload_digest(self.salt, payload):
            findings.add(pos, f"position {pos}: payload does not match its digest (tampered)")
        if event_hash(sid, version, prev, event_id, etype, sv, digest or "", blob_id, at) != stored_hash:
            findings.add(pos, f"position {pos}: content does not match its hash (tampered)")
        expected_version = self.versions.get(sid)
        if expected_version is None:
            expected_version = _fork_version(etype, payload)
        if version != expected_version + 1:
            findings.add(pos, f"position {pos}: session {sid!r} version {version} out of order")
        self.versions[sid] = version
        self.last_hash[sid] = stored_hash
        self.expected_pos = pos + 1
        findings.report.head_hash = self.order
        try:
            event = record_from_row(row, trusted=False).event
        except CorruptStoreError as exc:
            findings.add(pos, str(exc).removesuffix("; run `turnlog verify`"))
            return
        _check_derived(
            findings, pos, event, tokens, blob_id, self.count, self.tokenizer, self.counted_through
        )


def _check_events(
    conn: sqlite3.Connection,
    findings: Findings,
    count: Callable[[Event], int],
    tokenizer: Tokenizer,
    counted_through: int,
    salt: bytes,
) -> None:
    check = ChainCheck(findings, count, tokenizer, counted_through, salt, sqlite_hash_at(conn))
    # Text read as bytes: a row that is not UTF-8 is reported, and the rows after it still checked.
    rows = conn.execute(
        f"SELECT e.position, e.version, e.schema_version, e.tokens, e.payload_digest, e.order_hash, "
        f"{TEXT_AS_BYTES}, CAST(b.codec AS BLOB), b.data FROM events e LEFT JOIN blobs b ON b.id = e.blob_id "
        "ORDER BY e.position"
    )
    for pos, version, sv, tokens, digest_column, order_column, *raw in rows:
        texts = dict(zip(TEXT_COLUMNS, raw[: len(TEXT_COLUMNS)], strict=True))
        codec, data = raw[len(TEXT_COLUMNS)], raw[len(TEXT_COLUMNS) + 1]
        decoded: dict[str, str | None] = {}
        for name, value in texts.items():
            if value is None:
                decoded[name] = None
                continue
            try:
                decoded[name] = bytes(value).decode("utf-8")
            except UnicodeDecodeError as exc:
                findings.add(pos, f"position {pos}: stored {name} is not valid UTF-8 (byte {exc.start})")
                decoded[name] = bytes(value).decode("utf-8", "surrogateescape")
        sid, event_id, etype, payload = (
            decoded[k] or "" for k in ("session_id", "event_id", "type", "payload")
        )
        blob_id, at, prev, digest = (decoded[k] for k in ("blob_id", "recorded_at", "prev_hash", "hash"))
        codec_text = bytes(codec).decode("utf-8", "replace") if codec is not None else None
        at, prev, digest = at or "", prev or "", digest or ""
        check.row(
            (
                pos,
                sid,
                version,
                event_id,
                etype,
                sv,
                payload,
                blob_id,
                None,
                at,
                prev,
                digest,
                codec_text,
                data,
            ),
            tokens,
            digest_column if isinstance(digest_column, str) else None,
            order_column if isinstance(order_column, str) else None,
        )


def _check_derived(
    findings: Findings,
    pos: int,
    event: Event,
    tokens: int | None,
    blob_id: str | None,
    count: Callable[[Event], int],
    tokenizer: Tokenizer,
    counted_through: int,
) -> None:
    """The values the hash does not cover (the token count column) or that were derived from the
    content when it was stored: recomputed and compared."""
    if tokens is None:
        if pos <= counted_through:
            findings.add(pos, f"position {pos}: token count missing, though counted up to {counted_through}")
    elif not 0 <= tokens <= MAX_TOKENS:
        findings.add(pos, f"position {pos}: stored token count {tokens} is out of range")
    else:
        recomputed = count(event)
        if recomputed != tokens:
            findings.add(
                pos,
                f"position {pos}: stored token count {tokens}, recomputed {recomputed} with {tokenizer.name}",
            )
    if isinstance(event, SummaryRecorded):
        counted = tokenizer.count(event.context_text())
        if event.tokens != counted:
            findings.add(pos, f"position {pos}: summary tokens {event.tokens}, recomputed {counted}")
    elif isinstance(event, (ToolReturned, ArtifactWritten)) and blob_id is not None:
        if event.artifact_id != blob_id:
            findings.add(
                pos, f"position {pos}: artifact_id {event.artifact_id} differs from its blob {blob_id}"
            )
        if isinstance(event, ArtifactWritten):
            size = len(event.content.encode("utf-8"))
            if event.size != size:
                findings.add(pos, f"position {pos}: size {event.size}, but the content has {size} bytes")


def _check_blobs(conn: sqlite3.Connection, findings: Findings) -> None:
    for blob_id, size, codec, data in conn.execute(
        "SELECT CAST(id AS BLOB), size, CAST(codec AS BLOB), data FROM blobs"
    ):
        name = bytes(blob_id).decode("utf-8", "replace")
        if not blob_matches(name, size, bytes(codec).decode("utf-8", "replace"), data):
            where = conn.execute("SELECT min(position) FROM events WHERE blob_id = ?", (name,)).fetchone()[0]
            findings.add(where, f"blob {name[:12]}…: content does not match its sha256 (or its size)")
    for (pos,) in conn.execute(
        "SELECT e.position FROM events e LEFT JOIN blobs b ON b.id = e.blob_id "
        "WHERE e.blob_id IS NOT NULL AND b.id IS NULL"
    ):
        findings.add(pos, f"position {pos}: its content blob is missing")


def blob_matches(blob_id: str, size: int, codec: str, data: bytes) -> bool:
    """Whether a stored blob decodes to content of its sha256 id and size."""
    try:
        raw = decode_blob(codec, data)
    except BlobDecodeError:
        raw = b""
    return hashlib.sha256(raw).hexdigest() == blob_id and len(raw) == size


def _fork_version(event_type: str, payload: str) -> int:
    """The parent version a session's first event forks at (0 for a session that is no fork)."""
    if event_type != "session_started":
        return 0
    try:
        parent = json.loads(payload).get("parent")
        return int(parent["version"]) if parent else 0
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return 0
