"""Many writer processes on one PostgreSQL store: gapless positions, every acknowledged batch stored
exactly once and whole, verify passing; SIGKILL of writers mid-append loses no acknowledged event;
a writer whose connection the server terminates mid-append gets one clear StoreError and leaves no
partial batch.

Writers are real processes (tests/helpers/pg_writer.py) that write each acknowledged batch to a
side file after ``append`` returns, as tests/test_crash.py does for SQLite."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.postgres import pg_schema, pg_url
from tests.store_contract import msg, snapshot
from turnlog.store import MessageAppended, StoreError

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'turnlog[postgres]')")

import psycopg

from turnlog.store.postgres import PostgresStore

__all__ = ["pg_schema"]  # the fixture, imported for this module's tests

REPO_ROOT = Path(__file__).resolve().parent.parent
WRITER = Path(__file__).resolve().parent / "helpers" / "pg_writer.py"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


def _start(
    schema: str, writer: int, session: str, batches: int, side: Path, size: int = 1, fsync: bool = False
):  # type: ignore[no-untyped-def]
    args = [
        sys.executable, str(WRITER), "--url", pg_url(), "--schema", schema, "--writer", str(writer),
        "--session", session, "--batches", str(batches), "--size", str(size), "--side", str(side),
    ]  # fmt: skip
    if fsync:
        args.append("--fsync")
    return subprocess.Popen(args, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _acknowledged(side: Path) -> list[str]:
    """The batch ids of the complete lines of a side file (a line cut by a kill was never acked)."""
    if not side.exists():
        return []
    return [line.split()[0] for line in side.read_text(encoding="utf-8").split("\n")[:-1] if line]


def _check_store(store: PostgresStore, acked: list[str], size: int) -> dict[str, int]:
    """Positions gapless, no event twice, every batch whole, every acknowledged batch stored, verify
    passing. Returns the number of events of each stored batch."""
    records = list(store.iter_after(0))
    assert [r.position for r in records] == list(range(1, len(records) + 1))
    ids = [r.event_id for r in records]
    assert len(set(ids)) == len(ids)
    batches = Counter(event_id.rsplit("-", 1)[0] for event_id in ids)
    assert set(batches.values()) <= {size}, "a batch was stored in part"
    missing = set(acked) - set(batches)
    assert not missing, f"acknowledged batches lost: {sorted(missing)[:5]}"
    report = store.verify()
    assert report.ok, report.problems
    return dict(batches)


def _finish(procs: list[subprocess.Popen[str]]) -> list[float]:
    """Wait for the writers; each must succeed. Returns each one's append time in seconds."""
    times = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        last = out.strip().splitlines()[-1]
        print(last)
        times.append(float(last.split()[4]))
    return times


@pytest.fixture
def created(pg_schema: str) -> str:
    """A schema holding an empty store (made before the writers start, so they race on appends)."""
    PostgresStore.open(pg_url(), schema=pg_schema).close()
    return pg_schema


Start = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def writers(created: str, tmp_path: Path) -> Iterator[tuple[Start, Callable[[int], Path]]]:
    """Start writer processes on the store in ``created`` (writer n acknowledges in side(n)); any
    still running after the test is killed before its schema is dropped."""
    procs: list[subprocess.Popen[str]] = []

    def side(writer: int) -> Path:
        return tmp_path / f"w{writer}.txt"

    def start(
        writer: int, session: str, batches: int, size: int = 1, fsync: bool = False
    ) -> subprocess.Popen[str]:
        procs.append(_start(created, writer, session, batches, side(writer), size, fsync))
        return procs[-1]

    yield start, side
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def test_eight_writers_on_one_session_with_expected_version_retries(
    created: str, writers: tuple[Start, Callable[[int], Path]]
) -> None:
    start, side = writers
    sides = [side(n) for n in range(8)]
    procs = [start(n, "shared", 500) for n in range(8)]
    seconds = _finish(procs)
    acked = [batch for side in sides for batch in _acknowledged(side)]
    assert len(acked) == 4000
    with PostgresStore.open(pg_url(), schema=created) as store:
        stored = _check_store(store, acked, 1)
        assert len(stored) == 4000
        assert store.head_version("shared") == 4000
        versions = [r.version for r in store.read_session("shared")]
        assert versions == list(range(1, 4001))
    print(f"8 writers x 500 on one session: {4000 / max(seconds):.0f} appends/s in aggregate")


def test_eight_writers_on_eight_sessions(created: str, writers: tuple[Start, Callable[[int], Path]]) -> None:
    start, side = writers
    sides = [side(n) for n in range(8)]
    procs = [start(n, f"own-{n}", 500, size=2) for n in range(8)]
    seconds = _finish(procs)
    acked = [batch for side in sides for batch in _acknowledged(side)]
    with PostgresStore.open(pg_url(), schema=created) as store:
        assert len(_check_store(store, acked, 2)) == 4000
        assert {s.session_id: s.head_version for s in store.sessions()} == {
            f"own-{n}": 1000 for n in range(8)
        }
    print(f"8 writers x 500 batches of 2 on 8 sessions: {4000 / max(seconds):.0f} appends/s in aggregate")


def test_sigkill_of_writers_mid_append_loses_no_acknowledged_event(
    created: str, writers: tuple[Start, Callable[[int], Path]]
) -> None:
    rng = random.Random(17)
    start, side = writers
    sides = [side(n) for n in range(4)]
    procs = [start(n, f"s{n}", 5000, size=3, fsync=True) for n in range(4)]
    deadline = time.monotonic() + 30
    while min(len(_acknowledged(side)) for side in sides) < 5:
        assert time.monotonic() < deadline, "writers acknowledged nothing"
        assert all(p.poll() is None for p in procs), [
            p.communicate()[1][-2000:] for p in procs if p.poll() is not None
        ]
        time.sleep(0.05)
    for proc in procs:
        time.sleep(rng.uniform(0.0, 0.2))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
    acked = [batch for side in sides for batch in _acknowledged(side)]
    with PostgresStore.open(pg_url(), schema=created) as store:
        stored = _check_store(store, acked, 3)
        assert len(stored) >= len(acked)
        store.append("s0", [msg("after the kills")])  # the store keeps working
        assert store.verify().ok


def _wait_for_lock_waiter(conn: psycopg.Connection, key: int, second: int | None = None) -> int:
    """The pid of the backend waiting for an advisory lock: the store's (one bigint ``key``), or a
    session's (``key`` and ``second``, two int4 keys)."""
    if second is None:
        unsigned = key & 0xFFFF_FFFF_FFFF_FFFF  # a bigint key shows as classid (high half), objid (low)
        keys = (unsigned >> 32, unsigned & 0xFFFF_FFFF, 1)
    else:
        keys = (key & 0xFFFF_FFFF, second & 0xFFFF_FFFF, 2)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = %s",
            keys,
        ).fetchone()
        if row:
            return int(row[0])
        time.sleep(0.01)
    raise AssertionError("the append never waited for the lock")


def test_a_terminated_connection_mid_append_is_a_clear_error_and_stores_nothing(pg_schema: str) -> None:
    with PostgresStore.open(pg_url(), schema=pg_schema, pool_size=1) as store:
        store.append("s", [msg("before")])
        before = snapshot(store)
        batch = [MessageAppended(role="user", content=f"m{i}") for i in range(50)]
        outcome: list[BaseException | None] = []

        def append() -> None:
            try:
                store.append("s", batch)
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        # Another connection holds the session's lock, so the append waits inside its transaction
        # (its BEGIN sent): the moment a server-side failure can leave a partial batch, if anything can.
        with psycopg.connect(pg_url(), autocommit=True) as other:
            second = other.execute("SELECT hashtext('s')").fetchone()[0]
            other.execute("SELECT pg_advisory_lock(%s, %s)", (store.session_lock_space, second))
            thread = threading.Thread(target=append)
            thread.start()
            pid = _wait_for_lock_waiter(other, store.session_lock_space, second)
            assert other.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
            thread.join(timeout=20)
            other.execute("SELECT pg_advisory_unlock(%s, %s)", (store.session_lock_space, second))
        (error,) = outcome
        assert isinstance(error, StoreError), repr(error)
        text = str(error)
        assert "\n" not in text
        assert (
            text.startswith(f"PostgreSQL at 127.0.0.1:5432/test (schema {pg_schema})")
            or "PostgreSQL at" in text
        )
        assert "connection to the server failed or was lost" in text
        assert "nothing of the batch was stored; retry it" in text
        assert snapshot(store) == before
        # The pool replaced the connection: the same batch, retried, is stored once and whole.
        records = store.append("s", batch)
        assert [r.version for r in records] == list(range(2, 52))
        assert store.append("s", batch) == records
        assert store.verify().ok


def test_a_connection_lost_before_its_rows_are_placed_is_said_and_healed(pg_schema: str) -> None:
    """Another writer holds the placing lock: the append commits its rows unplaced, then waits to
    place them. Lost there, the batch is stored but unseen; the error says so; a retry of the same
    batch, any later append, or verify places it, once and whole."""
    with PostgresStore.open(pg_url(), schema=pg_schema, pool_size=2) as store:
        store.append("s", [msg("before")])
        before = snapshot(store)
        batch = [MessageAppended(role="user", content=f"m{i}") for i in range(20)]
        outcome: list[BaseException | None] = []

        def append() -> None:
            try:
                store.append("s", batch)
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        with psycopg.connect(pg_url(), autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (store.place_key,))
            thread = threading.Thread(target=append)
            thread.start()
            pid = _wait_for_lock_waiter(other, store.place_key)
            unplaced = other.execute(
                f"SELECT count(*) FROM {pg_schema}.event_log WHERE position IS NULL"
            ).fetchone()
            assert unplaced == (20,)
            assert snapshot(store) == before  # readers see only placed rows
            assert other.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
            thread.join(timeout=20)
            other.execute("SELECT pg_advisory_unlock(%s)", (store.place_key,))
        (error,) = outcome
        assert isinstance(error, StoreError) and "\n" not in str(error)
        assert "stored but not yet placed in the global order" in str(error)
        assert snapshot(store) == before
        records = store.append("s", batch)  # the retry finds the batch and places it
        assert [r.position for r in records] == list(range(2, 22))
        assert [r.version for r in records] == list(range(2, 22))
        assert store.append("s", batch) == records
        assert store.verify().ok and store.head_position() == 21


def test_a_connection_ended_while_idle_in_the_pool_is_replaced(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from turnlog.store import pg_connection

    with PostgresStore.open(pg_url(), schema=pg_schema, pool_size=1) as store:
        store.append("s", [msg("one")])

        def end_the_pooled_connection() -> None:
            with store.connection() as conn:
                pid = conn.info.backend_pid
            with psycopg.connect(pg_url(), autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", (pid,))
                while other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
                    time.sleep(0.01)

        # Used a moment ago, it is handed out unchecked: its loss is one clear line, and the next
        # call gets a new connection.
        end_the_pooled_connection()
        with pytest.raises(StoreError) as caught:
            store.head_position()
        assert "connection to the server failed or was lost" in str(caught.value)
        assert "\n" not in str(caught.value)
        assert store.head_position() == 1
        # Idle past CHECK_AFTER_IDLE, it is checked first and replaced: the caller sees nothing.
        monkeypatch.setattr(pg_connection, "CHECK_AFTER_IDLE", 0.0)
        end_the_pooled_connection()
        assert store.head_position() == 1
        assert store.read_session("s")[0].event.content == "one"  # type: ignore[union-attr]


def _projected_writer(url: str, session: str, count: int) -> None:
    import turnlog

    store = turnlog.open_store(url)  # every append also advances the projections
    try:
        for i in range(count):
            store.append(
                session,
                [
                    {"type": "message_appended", "role": "user", "content": f"turn {i}"},
                    {"type": "usage_recorded", "model": "gpt-4o", "input_tokens": 10, "output_tokens": 1},
                ],
            )
    finally:
        store.close()


def test_writer_processes_advance_the_projections_exactly_once(pg_schema: str) -> None:
    """Processes appending through open_store each advance the projections after their commits:
    they take turns (the store's lock), so no event is applied twice — the ledger's sums are exact
    and every projection equals a fresh rebuild."""
    import multiprocessing

    import turnlog
    from turnlog.projections.ledger import audit

    url = f"{pg_url()}?schema={pg_schema}"
    turnlog.open_store(url).close()
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_projected_writer, args=(url, f"w{i}", 40)) for i in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    with turnlog.open_store(url) as store:
        report = audit(store)
        assert (report.totals.calls, report.totals.input) == (4 * 40, 4 * 40 * 10)
        assert store.verify().ok


def _catcher(url: str, start_at: float) -> None:
    import time

    import turnlog
    from turnlog.projections.registry import materializer

    store = turnlog.open_store(url)
    try:
        time.sleep(max(0.0, start_at - time.time()))  # all start together
        materializer(store).catch_up()
    finally:
        store.close()


def test_processes_catching_up_a_backlog_together_apply_it_once(pg_schema: str) -> None:
    """A backlog the projections have not seen (written by a plain PostgresStore), caught up by four
    processes at the same moment: they take turns on the store's lock, so each event is applied once."""
    import multiprocessing
    import time

    import turnlog
    from turnlog.projections.ledger import audit

    url = f"{pg_url()}?schema={pg_schema}"
    turnlog.open_store(url).close()  # the projections' tables, caught up on an empty log
    with PostgresStore.open(pg_url(), schema=pg_schema) as raw:  # no projection hooks
        for i in range(60):
            raw.append(f"s{i % 3}", [
                {"type": "message_appended", "role": "user", "content": f"turn {i}"},
                {"type": "usage_recorded", "model": "gpt-4o", "input_tokens": 10, "output_tokens": 1},
            ])  # fmt: skip
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 3
    procs = [context.Process(target=_catcher, args=(url, start_at)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    with turnlog.open_store(url) as store:
        report = audit(store)
        assert (report.totals.calls, report.totals.input) == (60, 600)
        assert store.verify().ok


def test_a_writer_does_not_queue_behind_a_catch_up_and_a_read_catches_up(pg_schema: str) -> None:
    """While another connection holds the store's (projections') lock, atomic(wait=False) refuses at
    once and an append leaves its projection work to the next one who can: its events commit and are
    placed all the same, and the next read brings every projection up to them, once."""
    import turnlog
    from turnlog.projections.sessions import list_sessions
    from turnlog.store.errors import LockBusy

    store = turnlog.open_store(f"{pg_url()}?schema={pg_schema}")
    try:
        store.append("s", [msg("first")])
        list_sessions(store)  # a read: the projections' tables made, and caught up to the append
        with psycopg.connect(pg_url(), autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (store.lock_key,))
            with pytest.raises(LockBusy), store.atomic(wait=False):
                pass
            done: list[Any] = []
            thread = threading.Thread(target=lambda: done.append(store.append("s", [msg("2"), msg("3")])))
            thread.start()
            thread.join(timeout=15)  # it must not wait for the lock (released only below)
            assert done, "the append queued behind the lock"
            assert [r.position for r in done[0]] == [2, 3]
            other.execute("SELECT pg_advisory_unlock(%s)", (store.lock_key,))
        with store.reading() as conn:
            behind = conn.execute("SELECT min(position) FROM projection_checkpoints").fetchone()[0]
        assert behind == 1  # the append left its projection work: the lock was taken
        (listed,) = list_sessions(store)
        assert (listed.session_id, listed.user_messages, listed.event_count) == ("s", 3, 3)
    finally:
        store.close()
