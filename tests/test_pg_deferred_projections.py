"""On PostgreSQL an append commits the log alone, as on SQLite: the projections' rows are applied at
the writer's next read or close, and any reader (any process) catches them up from the checkpoints
before it answers, so a writer killed between its commits and the projections' loses nothing. Where
other writers keep moving the order, an append inserts its rows unplaced and places them after its
commit without holding the placing lock through a flush (store.pg_chain.place_durably)."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
from typing import Any

import pytest

import turnlog
from tests.helpers.postgres import pg_schema, pg_url, sent_queries, sql
from turnlog.projections.ledger import audit
from turnlog.projections.registry import materializer
from turnlog.projections.sessions import list_sessions
from turnlog.store import MessageAppended, UsageRecorded

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'turnlog[postgres]')")

__all__ = ["pg_schema"]  # the fixture, imported for this module's tests

_PROJECTION_TABLES = ("ctx_", "sess_", "ledger_", "projection_checkpoints", "todo", "artifact")


def _open(schema: str) -> Any:
    return turnlog.open_store(f"{pg_url()}?schema={schema}")


def _turn(i: int) -> list[Any]:
    return [
        MessageAppended(role="user", content=f"question {i}"),
        UsageRecorded(model="gpt-4o", input_tokens=10, output_tokens=1),
    ]


def _checkpoint(schema: str) -> int:
    (row,) = sql("SELECT coalesce(min(position), 0) FROM projection_checkpoints", schema)
    return int(row[0])


def test_an_append_is_one_query_of_the_log_alone(pg_schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _open(pg_schema)
    try:
        store.append("s", _turn(0))  # the long way: nothing known yet
        list_sessions(store)  # a read: the projections' tables made and caught up
        store.append("s", _turn(1))
        import psycopg

        sent = sent_queries(monkeypatch)
        params: list[Any] = []
        execute = psycopg.Cursor.execute

        def recording(self: Any, query: Any, values: Any = None, **kwargs: Any) -> Any:
            params.extend(values or ())
            return execute(self, query, values, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", recording)
        for i in range(2, 5):
            store.append("s", _turn(i))
        monkeypatch.undo()
        assert len(sent) == 3  # one statement each: the check of the heads and the inserts
        assert all(q.startswith("WITH ok AS") and ";" not in q for q in sent)
        assert not [q for q in sent if any(table in q for table in _PROJECTION_TABLES)]
        assert store.lock_key not in params  # the projections' lock is not taken
        assert str(store.lock_key) not in "".join(sent)
        assert _checkpoint(pg_schema) == 2  # the rows wait for the next read
        (listed,) = list_sessions(store)
        assert (listed.user_messages, listed.event_count) == (5, 10)
        assert _checkpoint(pg_schema) == 10
        assert materializer(store).differences() == []
    finally:
        store.close()


def test_a_reader_in_another_store_object_catches_up_and_close_finishes(pg_schema: str) -> None:
    writer, reader = _open(pg_schema), _open(pg_schema)
    try:
        for i in range(4):
            writer.append("s", _turn(i))
        report = audit(reader)  # the writer has not read: the reader catches up first
        assert (report.totals.calls, report.totals.input) == (4, 40)
        writer.append("s", _turn(4))
        writer.close()  # a writer leaves the store caught up
        assert _checkpoint(pg_schema) == 10
        assert materializer(reader).differences() == []
    finally:
        writer.close()
        reader.close()


def _killed_writer(url: str, turns: int, ready: Any) -> None:
    store = turnlog.open_store(url)
    for i in range(turns):
        store.append(f"w{os.getpid()}", _turn(i))
    ready.set()
    signal.pause()  # killed here: acknowledged appends, projections never applied, never closed


def test_writers_killed_before_applying_their_projections_lose_nothing(pg_schema: str) -> None:
    url = f"{pg_url()}?schema={pg_schema}"
    with turnlog.open_store(url) as store:
        list_sessions(store)  # the projections' tables made
    context = multiprocessing.get_context("spawn")
    events = [context.Event() for _ in range(3)]
    procs = [context.Process(target=_killed_writer, args=(url, 6, ready)) for ready in events]
    for proc in procs:
        proc.start()
    for proc, ready in zip(procs, events, strict=True):
        assert ready.wait(120), "a writer did not finish its appends"
        os.kill(proc.pid or 0, signal.SIGKILL)
        proc.join(30)
        assert proc.exitcode == -signal.SIGKILL
    assert _checkpoint(pg_schema) < 36  # the killed writers applied nothing after their last read
    with turnlog.open_store(url) as store:
        report = audit(store)
        assert (report.totals.calls, report.totals.input) == (18, 180)
        assert sorted(s.event_count for s in list_sessions(store)) == [12, 12, 12]
        assert materializer(store).differences() == []
        assert store.verify().ok


def test_an_append_beside_other_writers_places_without_a_flush_under_the_lock(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = _open(pg_schema), _open(pg_schema)
    try:
        first.append("s", _turn(0))
        first.append("s", _turn(1))  # first knows the heads
        second.append("t", _turn(0))  # the order moved: first's next try misses
        assert [r.position for r in first.append("s", _turn(2))] == [7, 8]
        second.append("t", _turn(1))
        sent = sent_queries(monkeypatch)
        records = first.append("s", _turn(3))  # other writers seen: placed by the server
        monkeypatch.undo()
        assert [(r.version, r.position) for r in records] == [(7, 11), (8, 12)]
        # One call (store.pg_sequenced): the procedure's first transaction commits without waiting
        # for the disk (the placing lock, taken before the rows are inserted, is released at once),
        # the rows inserted placed (no unplaced insert, no update); its second waits for the flush
        # that makes them durable, before the call returns.
        assert len(sent) == 1 and sent[0].startswith("CALL turnlog_append_sequenced(")
        (source,) = sql(
            "SELECT prosrc FROM pg_proc WHERE oid = 'turnlog_append_sequenced'::regproc", pg_schema
        )
        body = str(source[0])
        assert "set_config('synchronous_commit', 'off', true)" in body
        assert "pg_advisory_xact_lock(place_key)" in body and "INSERT INTO event_log" in body
        assert "UPDATE" not in body.upper()
        assert body.index("INSERT INTO event_log") < body.index("COMMIT;")
        assert body.index("COMMIT;") < body.index("pg_logical_emit_message(true, 'turnlog', 'placed')")
        assert [r.position for r in first.iter_after(0)] == list(range(1, 13))
        assert first.verify().ok
        for store in (first, second):
            assert materializer(store).differences() == []
    finally:
        first.close()
        second.close()


def test_a_contended_append_places_waiting_rows_first_and_stores_its_blobs(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnlog.store import ArtifactWritten

    first, second = _open(pg_schema), _open(pg_schema)
    try:
        first.append("s", _turn(0))
        first.append("s", _turn(1))
        second.append("t", _turn(0))
        first.append("s", _turn(2))  # the order moved: first now appends the contended way
        # Rows another writer committed unplaced (it lost its connection before placing them)
        # wait: the placing function in first's statement places them before first's rows.
        import psycopg

        from turnlog.store import StoreError, pg_append

        def lost(*args: Any, **kwargs: Any) -> Any:
            raise psycopg.OperationalError("connection lost")

        second._tips().misses = 1  # other writers seen: its rows go in unplaced (the long way)
        monkeypatch.setattr(pg_append, "place_durably", lost)
        with pytest.raises(StoreError):
            second.append("u", _turn(0))
        monkeypatch.undo()
        (waiting,) = sql("SELECT count(*) FROM event_log WHERE position IS NULL", pg_schema)
        assert waiting[0] == 2
        body = "line \x01 with bytes é\n" * 400  # over the inline limit: a blob
        sent = sent_queries(monkeypatch)
        records = first.append("s", [ArtifactWritten(name="x", content=body), *_turn(3)])
        monkeypatch.undo()
        assert len(sent) == 1 and sent[0].startswith("CALL turnlog_append_sequenced(")
        assert re.search(r"ARRAY\[\$\d+::bytea\]", sent[0])  # the blob goes in the same call
        assert [r.position for r in records] == [11, 12, 13]
        assert [r.position for r in first.iter_after(0)] == list(range(1, 14))
        stored = [r.event for r in first.read_session("s")]
        assert getattr(stored[-3], "content", None) == body
        assert first.verify().ok and second.verify().ok
        for store in (first, second):
            assert materializer(store).differences() == []
    finally:
        first.close()
        second.close()
