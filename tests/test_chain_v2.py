"""The v2 chain (store.chain): per-session chains over payload digests, the order chain, the same
hash for the same event on both backends, verify finding every kind of change, and the migration of
v1 stores on both backends."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import turnlog
from tests.helpers.postgres import drop_schema, new_schema_name, pg_url, require_pg
from tests.helpers.v1_store import AT, write_pg_v1, write_sqlite_v1
from turnlog.store import CorruptStoreError, SQLiteStore
from turnlog.store.chain import GENESIS_HASH, canonical_time, event_hash, order_hash, payload_digest
from turnlog.store.events import MessageAppended, SessionStarted, ToolReturned

# Computed by the released store (commit f9fa201, the v1 chain) for BATCHES appended at AT.
V1_HASHES = [
    "924c5f3a0f13611f0a3f5d87fb59d0d591b74e43834cb0ff55e8bb36de2cc418",
    "eb93fd9889120bcddcaa0739fae4d455967129f1c4f420e65a48d8e1d3834ee4",
    "bcfa55e74ba2694830f8059250815cb99ccfb5b0d754608d678d039c29cbe7ec",
    "be41387ae3478ea416586945605704d777ee4cc08c47977ad584fc5e751d0055",
]


def batches() -> list[tuple[str, list[object]]]:
    return [
        (
            "p",
            [
                SessionStarted(event_id="e1", title="t"),
                MessageAppended(event_id="e2", role="user", content="hi"),
            ],
        ),
        ("f", [SessionStarted(event_id="e3", parent={"session_id": "p", "version": 2})]),
        ("p", [ToolReturned(event_id="e4", tool_call_id="c1", content="x" * 5000)]),
    ]


def _rows(conn: sqlite3.Connection) -> list[tuple[object, ...]]:
    return conn.execute(
        "SELECT position, session_id, version, event_id, recorded_at, prev_hash, hash, payload_digest, "
        "order_hash FROM events ORDER BY position"
    ).fetchall()


def test_the_v1_helper_writes_what_the_released_code_wrote(tmp_path: Path) -> None:
    rows = write_sqlite_v1(tmp_path / "v1.db", batches())  # type: ignore[arg-type]
    assert [row[11] for row in rows] == V1_HASHES


def test_a_v1_store_is_migrated_to_v2_on_open(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    write_sqlite_v1(path, batches())  # type: ignore[arg-type]
    with SQLiteStore.open(path) as store:
        assert [row[0] for row in store.conn.execute("SELECT version FROM turnlog_migrations")] == [
            1,
            2,
            3,
            4,
            5,
        ]
        meta = dict(store.conn.execute("SELECT key, value FROM turnlog_meta").fetchall())
        assert meta["chain"] == "v2" and len(meta["salt"]) == 64
        assert (meta["v1_head_hash"], meta["v1_head_position"]) == (V1_HASHES[-1], "4")
        rows = _rows(store.conn)
        assert [r[:5] for r in rows] == [
            (1, "p", 1, "e1", AT), (2, "p", 2, "e2", AT), (3, "f", 3, "e3", AT), (4, "p", 3, "e4", AT)
        ]  # fmt: skip
        by_position = {r[0]: r for r in rows}
        # Each session chained on its own; the fork to its parent's event at the fork version.
        assert by_position[1][5] == GENESIS_HASH
        assert by_position[2][5] == by_position[1][6]
        assert by_position[4][5] == by_position[2][6]
        assert by_position[3][5] == by_position[2][6]
        assert store.verify().ok
        store.append("p", [MessageAppended(role="user", content="after the migration")])
        store.append("f", [MessageAppended(role="user", content="in the fork")])
        report = store.verify()
        assert report.ok, report.problems
        assert report.head_hash == _rows(store.conn)[-1][8]


def test_a_v1_store_whose_chain_is_broken_is_not_migrated(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    write_sqlite_v1(path, batches())  # type: ignore[arg-type]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TRIGGER events_no_update")
    conn.execute("UPDATE events SET payload = replace(payload, 'hi', 'ho') WHERE position = 2")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(CorruptStoreError, match="position 2: content does not match its v1 hash") as caught:
        SQLiteStore.open(path)
    assert "not migrated" in str(caught.value)
    assert path.read_bytes() == before


def test_a_hash_is_the_same_whatever_form_the_time_is_kept_in() -> None:
    assert canonical_time("2026-01-01T00:00:00.000000+00:00") == "2026-01-01T00:00:00.000000Z"
    assert canonical_time("2026-01-01T01:00:00.000000+01:00") == "2026-01-01T00:00:00.000000Z"
    assert canonical_time("2026-01-01T00:00:00Z") == "2026-01-01T00:00:00.000000Z"
    args = ("s", 1, GENESIS_HASH, "e", "message_appended", 1, "d" * 64, None)
    assert event_hash(*args, "2026-01-01T00:00:00.000000+00:00") == event_hash(
        *args, "2026-01-01T00:00:00.000000Z"
    )
    assert event_hash(*args, "2026-01-01T00:00:00.000000+00:00") != event_hash(
        *args, "2026-01-01T00:00:00.000001Z"
    )


def test_the_payload_is_hashed_through_its_salted_digest(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "a.db") as one, SQLiteStore.open(tmp_path / "b.db") as two:
        a = one.append("s", [MessageAppended(event_id="m", role="user", content="same")], recorded_at=[AT])
        b = two.append("s", [MessageAppended(event_id="m", role="user", content="same")], recorded_at=[AT])
        assert one.salt != two.salt and a[0].hash != b[0].hash  # another salt, another digest
        digest = one.conn.execute("SELECT payload_digest FROM events").fetchone()[0]
        payload = one.conn.execute("SELECT payload FROM events").fetchone()[0]
        assert digest == payload_digest(one.salt, payload)
        assert a[0].hash == event_hash("s", 1, GENESIS_HASH, "m", "message_appended", 1, digest, None, AT)


def _tampered(tmp_path: Path, change: str) -> list[str]:
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "t.db"
    with SQLiteStore.open(path) as store:
        for i in range(3):
            store.append("a", [MessageAppended(role="user", content=f"a{i}")])
            store.append("b", [MessageAppended(role="user", content=f"b{i}")])
        assert store.verify().ok
    conn = sqlite3.connect(path, isolation_level=None)
    for name in ("events_no_update", "events_no_delete", "events_no_replace"):
        conn.execute(f"DROP TRIGGER {name}")
    conn.executescript(change)
    conn.close()
    with SQLiteStore.open(path) as store:
        return store.verify().problems


def test_verify_finds_a_reordering(tmp_path: Path) -> None:
    # Two events of different sessions swap places: each session's chain still checks.
    problems = _tampered(
        tmp_path,
        "UPDATE events SET position = 100 WHERE position = 3; "
        "UPDATE events SET position = 3 WHERE position = 4;"
        "UPDATE events SET position = 4 WHERE position = 100;",
    )
    assert any("position 3: the order chain does not check" in p for p in problems), problems


def test_verify_finds_a_deletion_and_a_changed_payload(tmp_path: Path) -> None:
    problems = _tampered(tmp_path, "DELETE FROM events WHERE position = 4")
    assert any("position 4: missing" in p for p in problems), problems
    problems = _tampered(
        tmp_path / "again", "UPDATE events SET payload = replace(payload, 'a1', 'a9') WHERE position = 3"
    )
    assert any("position 3: payload does not match its digest" in p for p in problems), problems


def test_verify_finds_a_session_chain_relinked(tmp_path: Path) -> None:
    problems = _tampered(tmp_path, "UPDATE events SET prev_hash = hash WHERE position = 3")
    assert any("position 3: prev_hash does not match the session's previous event" in p for p in problems)


@pytest.fixture
def pg_v1_schema() -> object:
    require_pg()
    name = new_schema_name()
    yield name
    drop_schema(name)


def test_a_postgresql_v1_store_is_migrated_as_on_sqlite(tmp_path: Path, pg_v1_schema: str) -> None:
    rows = write_pg_v1(pg_url(), pg_v1_schema, batches())  # type: ignore[arg-type]
    assert [row[11] for row in rows] == V1_HASHES
    store = turnlog.open_backend(f"{pg_url()}?schema={pg_v1_schema}")
    try:
        assert store.verify().ok
        store.append("f", [MessageAppended(role="user", content="in the fork")])
        report = store.verify()
        assert report.ok, report.problems
        records = list(store.iter_after(0))
        assert [(r.position, r.session_id, r.version, r.event_id) for r in records[:4]] == [
            (1, "p", 1, "e1"), (2, "p", 2, "e2"), (3, "f", 3, "e3"), (4, "p", 3, "e4")
        ]  # fmt: skip
        assert records[2].prev_hash == records[1].hash
        # The same rows migrated on SQLite with the same salt hash the same.
        path = tmp_path / "v1.db"
        write_sqlite_v1(path, batches())  # type: ignore[arg-type]
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("INSERT INTO turnlog_meta (key, value) VALUES ('salt', ?)", (store.salt.hex(),))
        conn.close()
        with SQLiteStore.open(path) as lite:
            assert [r.hash for r in lite.iter_after(0)] == [r.hash for r in records[:4]]
    finally:
        store.close()


def test_order_hash_chains_positions() -> None:
    first = order_hash(GENESIS_HASH, 1, "a" * 64)
    assert order_hash(first, 2, "b" * 64) != order_hash(first, 3, "b" * 64)
