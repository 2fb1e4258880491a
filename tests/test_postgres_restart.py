"""A real PostgreSQL server restart (``pg_ctlcluster ... restart -m fast``) while writer processes
append: each writer gets a clear one-line error, retries the same batch with the same ids, and
afterwards every acknowledged batch is stored once and whole, positions have no gaps and verify
passes. Needs the local server and the right to restart it (root, pg_ctlcluster): CI has both."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.helpers.postgres import pg_schema, pg_url
from tests.test_postgres_writers import _acknowledged, _check_store, _start

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'turnlog[postgres]')")

from turnlog.store.postgres import PostgresStore  # noqa: E402

__all__ = ["pg_schema"]


def _cluster() -> str:
    """The local cluster's version, or a skip saying why the server cannot be restarted here."""
    host = urlparse(pg_url()).hostname
    if host not in ("127.0.0.1", "localhost") or shutil.which("pg_ctlcluster") is None or os.geteuid() != 0:
        pytest.skip("restarting PostgreSQL needs the local server, pg_ctlcluster and root")
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    if not versions:
        pytest.skip("no PostgreSQL cluster under /etc/postgresql")
    return versions[-1]


def _restart(version: str) -> None:
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart", "-m", "fast"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            psycopg.connect(pg_url(), connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            time.sleep(0.2)
    raise AssertionError("the server did not come back within 30 s")


def test_a_server_restart_during_appends_loses_nothing_acknowledged(pg_schema: str, tmp_path: Path) -> None:
    version = _cluster()
    PostgresStore.open(pg_url(), schema=pg_schema).close()
    sides = [tmp_path / f"w{i}.acks" for i in range(3)]
    procs = [_start(pg_schema, i, f"s{i}", 400, sides[i], size=20) for i in range(3)]
    try:
        deadline = time.monotonic() + 60
        while min(len(_acknowledged(side)) for side in sides) < 10:
            assert time.monotonic() < deadline, "the writers never got going"
            assert all(proc.poll() is None for proc in procs), "a writer ended before the restart"
            time.sleep(0.05)
        _restart(version)
        errors = []
        for proc in procs:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
            errors += [line for line in err.splitlines() if line.startswith("retry after:")]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    # Every writer met the restart, and was told so in one clear line naming the server.
    assert errors, "no writer saw the restart"
    assert all("PostgreSQL at 127.0.0.1" in line or "PostgreSQL at localhost" in line for line in errors), (
        errors[:3]
    )
    assert not any("Traceback" in line for line in errors)
    acked = [batch for side in sides for batch in _acknowledged(side)]
    assert len(acked) == 3 * 400
    with PostgresStore.open(pg_url(), schema=pg_schema) as store:
        batches = _check_store(store, acked, 20)
        assert len(batches) == 3 * 400
