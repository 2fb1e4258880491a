"""verify: the full integrity check (and --quick), the immutability triggers, rows that cannot be
decoded (reported with their position, the rest still checked and readable), and the stored values
the hash chain does not cover (token counts, blob sizes) recomputed."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.helpers.forge import forge_row
from turnlog.cli import cli
from turnlog.projections.ledger import audit
from turnlog.store import (
    MAX_TOKENS,
    CorruptStoreError,
    InvalidEventError,
    MessageAppended,
    SQLiteStore,
    ToolReturned,
    UsageRecorded,
    parse_event,
)
from turnlog.store.schema import TRIGGERS


def msg(text: str) -> MessageAppended:
    return MessageAppended(role="user", content=text)


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def _insert_row(
    path: Path, session_id: str | bytes, event_type: str, payload: str | bytes, event_id: str = "forged"
) -> int:
    """Append a row by hand, with valid hash chains, as an older or buggy writer could have: only
    its content is bad. Plain inserts of new rows are allowed by the triggers."""
    return forge_row(path, session_id, event_type, payload, event_id)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


BAD_ROWS: dict[str, tuple[str, str | bytes]] = {
    "bad JSON": ("message_appended", '{"role": "user", "content": "unterminated'),
    "an int past the model's bound": (
        "usage_recorded",
        json.dumps({"model": "m", "input_tokens": 2**62, "output_tokens": 1}),
    ),
    "an int past 64 bits": (
        "usage_recorded",
        '{"model": "m", "input_tokens": 10000000000000000000, "output_tokens": 1}',
    ),
    "invalid UTF-8 in a TEXT column": ("message_appended", b'{"role": "user", "content": "caf\xe9 \xff"}'),
    "a payload nested too deep": ("session_started", '{"metadata": {"x": ' + _nested(300) + "}}"),
    "a payload nested 100,000 deep": ("session_started", '{"metadata": {"x": ' + _nested(100_000) + "}}"),
}


@pytest.mark.parametrize("kind", BAD_ROWS)
def test_a_row_that_cannot_be_decoded_is_reported_and_the_rest_stays_readable(
    db_path: Path, kind: str
) -> None:
    event_type, payload = BAD_ROWS[kind]
    with SQLiteStore.open(db_path) as store:
        store.append("s", [msg("before")])
        store.append("other", [msg("other session")])
    bad = _insert_row(db_path, "s", event_type, payload)
    with SQLiteStore.open(db_path) as store:
        store.append("s", [msg("after")])
        store.append("other", [msg("still fine")])
        # A read that meets the row gets our error naming its position, never a driver's error.
        with pytest.raises(CorruptStoreError, match=f"position {bad}"):
            store.read_session("s")
        with pytest.raises(CorruptStoreError, match=f"position {bad}"):
            list(store.iter_after(0))
        # Reads that do not meet it work.
        assert [r.event.content for r in store.read_session("other")] == ["other session", "still fine"]  # type: ignore[union-attr]
        assert [r.event.content for r in store.read_tail("s", 1)] == ["after"]  # type: ignore[union-attr]
        assert len(store.sessions()) == 2
        report = store.verify()
        assert not report.ok
        assert report.first_bad_position == bad
        assert report.events == 5  # it carried on past the bad row
        assert any(p.startswith(f"position {bad}:") for p in report.problems), report.problems
        assert all(f"position {bad}" in p for p in report.problems), report.problems


def test_the_cli_reports_an_undecodable_row_in_one_line(runner: CliRunner, db_path: Path) -> None:
    with SQLiteStore.open(db_path) as store:
        store.append("s", [msg("before")])
    bad = _insert_row(db_path, "s", *BAD_ROWS["invalid UTF-8 in a TEXT column"])
    result = runner.invoke(cli, ["--db", str(db_path), "verify"])
    assert result.exit_code == 1, result.output
    assert f"position {bad}: stored payload is not valid UTF-8" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    result = runner.invoke(cli, ["--db", str(db_path), "log", "s"])
    assert result.exit_code == 1
    assert f"position {bad}" in result.output and "Traceback" not in result.output


def test_invalid_utf8_in_a_session_id_is_reported(db_path: Path) -> None:
    with SQLiteStore.open(db_path) as store:
        store.append("s", [msg("before")])
    bad = _insert_row(db_path, b"s\xff", "message_appended", '{"role": "user"}')
    with SQLiteStore.open(db_path) as store:
        report = store.verify()
        assert report.first_bad_position == bad
        assert any("stored session_id is not valid UTF-8" in p for p in report.problems)
        assert [r.position for r in store.read_session("s")] == [1]


# --- numbers: refused at input, and sums that cannot overflow -----------------------------------


def test_huge_usage_is_refused_at_input(file_store: SQLiteStore) -> None:
    for value in (2**62, 2**63, 10**19):
        with pytest.raises(InvalidEventError, match="input_tokens"):
            file_store.append(
                "s",
                [{"type": "usage_recorded", "model": "m", "input_tokens": value, "output_tokens": 1}],  # type: ignore[list-item]
            )
    assert file_store.count_events() == 0


def test_two_usages_of_2_62_do_not_brick_audit(db_path: Path) -> None:
    # Written by an older turnlog, which accepted them: their sum overflows SQLite's integers. Now
    # the rows are reported by position (audit and verify), never an OverflowError, and the other
    # sessions' reads keep working.
    with SQLiteStore.open(db_path) as store:
        store.append("s", [msg("hi")])
        store.append("t", [msg("fine")])
    usage = json.dumps({"model": "gpt-4o", "input_tokens": 2**62, "output_tokens": 1})
    first = _insert_row(db_path, "s", "usage_recorded", usage, event_id="u1")
    second = _insert_row(db_path, "s", "usage_recorded", usage, event_id="u2")
    with SQLiteStore.open(db_path) as store:
        with pytest.raises(CorruptStoreError, match=f"position {first}"):
            audit(store)
        report = store.verify()
        assert report.first_bad_position == first
        assert any(f"position {second}:" in p for p in report.problems)
        assert [r.event.content for r in store.read_session("t")] == ["fine"]  # type: ignore[union-attr]


def test_the_largest_counts_sum_without_overflow(file_store: SQLiteStore) -> None:
    # The bound keeps sums safe: 2^31 events at the bound still sum below 2^63.
    assert MAX_TOKENS * 2**31 < 2**63
    top = MAX_TOKENS
    usage = UsageRecorded(
        model="gpt-4o",
        input_tokens=top,
        output_tokens=top,
        cache_read_tokens=top,
        cache_write_tokens=0,
        reasoning_tokens=top,
    )
    file_store.append("s", [usage, usage.model_copy(update={"event_id": "second"}), msg("x")])
    file_store.append("t", [usage.model_copy(update={"event_id": "third"})])
    report = audit(file_store)
    assert report.totals.input == report.totals.output == 3 * top
    assert report.totals.calls == 3
    assert file_store.verify().ok


# --- the database's own integrity ---------------------------------------------------------------


def _corrupt_event_id_index(path: Path) -> int:
    """Change one key inside the event-id index's pages, as a disk or a bug could: the table is
    intact, so only a full integrity_check (not quick_check) sees it. Returns the row's position."""
    conn = _raw(path)
    root = conn.execute(
        "SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_events_1'"
    ).fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    position, event_id = conn.execute("SELECT position, event_id FROM events WHERE position = 2").fetchone()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(path.read_bytes())
    page = slice((root - 1) * page_size, root * page_size)
    chunk = bytes(data[page])
    at = chunk.index(event_id.encode())
    assert chunk.count(event_id.encode()) == 1
    data[(root - 1) * page_size + at] = ord("z")
    path.write_bytes(bytes(data))
    return int(position)


def test_verify_runs_a_full_integrity_check_and_quick_skips_the_indexes(
    db_path: Path, runner: CliRunner
) -> None:
    with SQLiteStore.open(db_path) as store:
        store.append("s", [msg(f"message {i}") for i in range(5)])
    position = _corrupt_event_id_index(db_path)
    with SQLiteStore.open(db_path) as store:
        quick = store.verify(quick=True)
        full = store.verify()
    assert quick.ok, quick.problems
    assert not full.ok
    # A key out of order can also hide its neighbours from the index's search (event ids are random,
    # so which ones varies): the changed row is among the findings and the first finding is no later.
    assert full.first_bad_position is not None and full.first_bad_position <= position
    assert any("integrity_check" in p and f"position {position}" in p for p in full.problems)
    assert runner.invoke(cli, ["--db", str(db_path), "verify", "--quick"]).exit_code == 0
    result = runner.invoke(cli, ["--db", str(db_path), "verify"])
    assert result.exit_code == 1 and "integrity_check" in result.output


# --- the triggers -------------------------------------------------------------------------------


def test_verify_reports_missing_altered_and_foreign_triggers(file_store: SQLiteStore) -> None:
    file_store.append("s", [msg("x")])
    assert file_store.verify().ok
    conn = file_store.conn
    conn.execute("DROP TRIGGER events_no_replace")
    conn.execute("DROP TRIGGER events_no_delete")
    # Same name, weaker rule: deletes of the first event are let through.
    conn.execute(
        "CREATE TRIGGER events_no_delete BEFORE DELETE ON events WHEN OLD.position > 1 "
        "BEGIN SELECT RAISE(ABORT, 'turnlog: events are immutable; DELETE is refused'); END"
    )
    conn.execute("CREATE TRIGGER sneaky AFTER INSERT ON events BEGIN SELECT 1; END")
    problems = file_store.verify().problems
    assert "trigger events_no_replace is missing: the log is no longer protected against changes" in problems
    assert "trigger events_no_delete was altered: its SQL is not the one turnlog created" in problems
    assert "trigger sneaky on the log is not one turnlog created" in problems
    assert len(problems) == 3


def test_reopening_does_not_hide_a_dropped_trigger(db_path: Path) -> None:
    with SQLiteStore.open(db_path) as store:
        store.append("s", [msg("x")])
    conn = _raw(db_path)
    conn.execute("DROP TRIGGER events_no_update")
    conn.close()
    with SQLiteStore.open(db_path) as store:
        assert any("events_no_update is missing" in p for p in store.verify().problems)


# --- values the hash does not cover ----------------------------------------------------------------


def _with_trigger_off(store: SQLiteStore, name: str, statement: str, params: tuple[Any, ...] = ()) -> None:
    """Run a statement with one trigger dropped, then put the trigger back exactly: only the change
    is left to find."""
    store.conn.execute(f"DROP TRIGGER {name}")
    store.conn.execute(statement, params)
    store.conn.execute(TRIGGERS[name])


def test_verify_recomputes_every_token_count(file_store: SQLiteStore) -> None:
    file_store.append("s", [msg("one two three"), msg("four"), msg("five six")])
    file_store.catch_up_tokens()
    stored = dict(file_store.conn.execute("SELECT position, tokens FROM events"))
    assert file_store.verify().ok
    _with_trigger_off(
        file_store, "events_no_update", "UPDATE events SET tokens = tokens + 7 WHERE position = 2"
    )
    report = file_store.verify()
    name = file_store.tokenizer.name
    assert report.problems == [
        f"position 2: stored token count {stored[2] + 7}, recomputed {stored[2]} with {name}"
    ]
    assert report.first_bad_position == 2


def test_verify_finds_a_count_missing_below_the_watermark(file_store: SQLiteStore) -> None:
    file_store.append("s", [msg("one"), msg("two")])
    file_store.catch_up_tokens()
    _with_trigger_off(file_store, "events_no_update", "UPDATE events SET tokens = NULL WHERE position = 1")
    report = file_store.verify()
    assert report.first_bad_position == 1
    assert any("token count missing" in p for p in report.problems)


def test_verify_finds_a_changed_blob_size(file_store: SQLiteStore) -> None:
    file_store.append("s", [ToolReturned(tool_call_id="c", content="big output\n" * 200)])
    _with_trigger_off(file_store, "blobs_no_update", "UPDATE blobs SET size = size + 1")
    report = file_store.verify()
    assert report.first_bad_position == 1
    assert any("size" in p for p in report.problems)


def test_a_copy_of_a_store_verifies_like_the_original(db_path: Path, tmp_path: Path) -> None:
    # The checks are on the file, not on the connection that wrote it.
    with SQLiteStore.open(db_path) as store:
        store.append(
            "s",
            [
                msg("a"),
                parse_event({"type": "usage_recorded", "model": "m", "input_tokens": 5, "output_tokens": 1}),
            ],
        )
        store.catch_up_tokens()
    copy = tmp_path / "copy.db"
    shutil.copy(db_path, copy)
    with SQLiteStore.open(copy) as store:
        report = store.verify()
        assert report.ok and report.events == 2


def test_a_session_whose_first_event_cannot_be_read(db_path: Path, runner: CliRunner) -> None:
    # Every read of a session looks at its first event (is it a fork?): a bad one is our error.
    with SQLiteStore.open(db_path) as store:
        store.append("fine", [msg("x")])
    bad = _insert_row(db_path, "broken", "session_started", '{"parent": {"session_id": "fine", "version": ')
    with SQLiteStore.open(db_path) as store:
        with pytest.raises(CorruptStoreError, match="session 'broken'"):
            store.read_session("broken")
        assert [r.position for r in store.read_session("fine")] == [1]
        assert store.verify().first_bad_position == bad
    result = runner.invoke(cli, ["--db", str(db_path), "log", "broken"])
    assert result.exit_code == 1 and "Traceback" not in result.output and "broken" in result.output
