"""The SQL views a SQLite store holds (schema migration 5), read with plain sqlite3, and the Datasette
metadata `turnlog datasette-metadata` prints, loaded by Datasette itself (`datasette --get`)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from turnlog import open_store
from turnlog.store import (
    MessageAppended,
    SessionStarted,
    SQLiteStore,
    ToolCall,
    ToolReturned,
    UsageRecorded,
)
from turnlog.store.schema import VIEWS

ROOT = Path(__file__).resolve().parent.parent
BIG = "".join(f"line {i}: some tool output\n" for i in range(3000))  # over 32 KB: kept compressed
MIDDLE = "m" * 5000  # over the inline limit, under 32 KB: a raw blob


def _fill(db: Path) -> None:
    with open_store(db) as store:
        store.append(
            "chat",
            [
                SessionStarted(title="a chat"),
                MessageAppended(role="user", content="list the files <b>please</b>"),
                MessageAppended(
                    role="assistant",
                    tool_calls=(
                        ToolCall(id="c1", name="ls", arguments='{"path": "."}'),
                        ToolCall(id="c2", name="cat", arguments='{"path": "big.log"}'),
                        ToolCall(id="c3", name="grep"),
                    ),
                ),
                ToolReturned(tool_call_id="c1", tool_name="ls", content="a.txt\nb.txt"),
                ToolReturned(tool_call_id="c2", tool_name="cat", content=BIG),
                UsageRecorded(
                    model="gpt-4o",
                    input_tokens=1000,
                    output_tokens=50,
                    cache_read_tokens=200,
                    cost_usd=0.0125,
                ),
                MessageAppended(role="assistant", content="two files", name="helper"),
            ],
        )
        store.append(
            "other",
            [
                MessageAppended(role="user", content="hi"),
                ToolReturned(tool_call_id="x", tool_name="read", content=MIDDLE, is_error=True),
                UsageRecorded(model="claude-x", input_tokens=10, output_tokens=5, scope="run", calls=3),
            ],
        )


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    db = tmp_path / "agent.db"
    _fill(db)
    return db


def rows(db: Path, sql: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def test_messages_show_their_text(filled: Path) -> None:
    got = rows(
        filled, "SELECT session, version, role, text, name, tool_calls FROM messages ORDER BY position"
    )
    assert got == [
        {"session": "chat", "version": 2, "role": "user", "text": "list the files <b>please</b>",
         "name": None, "tool_calls": None},
        {"session": "chat", "version": 3, "role": "assistant", "text": "", "name": None, "tool_calls": 3},
        {"session": "chat", "version": 7, "role": "assistant", "text": "two files", "name": "helper",
         "tool_calls": None},
        {"session": "other", "version": 1, "role": "user", "text": "hi", "name": None, "tool_calls": None},
    ]  # fmt: skip
    assert all(isinstance(r["tokens"], int) for r in rows(filled, "SELECT tokens FROM messages"))


def test_tool_calls_with_their_returns(filled: Path) -> None:
    got = rows(
        filled,
        "SELECT tool_call_id, tool_name, arguments, is_error, output, output_bytes, return_position "
        "FROM tool_calls ORDER BY tool_call_id",
    )
    assert [r["tool_call_id"] for r in got] == ["c1", "c2", "c3"]
    c1, c2, c3 = got
    assert c1["arguments"] == '{"path": "."}' and c1["output"] == "a.txt\nb.txt" and c1["is_error"] == 0
    assert c1["output_bytes"] == len("a.txt\nb.txt") and c1["return_position"] == 4
    # Over 32 KB, the blob is compressed: no text in SQL, its size still known.
    assert c2["output"] is None and c2["output_bytes"] == len(BIG.encode())
    assert c3["return_position"] is None and c3["output"] is None and c3["arguments"] == "{}"


def test_tool_returns_read_inline_and_raw_blobs(filled: Path) -> None:
    got = rows(
        filled,
        "SELECT session, tool_name, is_error, text, bytes, blob_id FROM tool_returns ORDER BY position",
    )
    assert [(r["tool_name"], r["is_error"], r["bytes"]) for r in got] == [
        ("ls", 0, 11),
        ("cat", 0, len(BIG.encode())),
        ("read", 1, 5000),
    ]
    assert got[2]["text"] == MIDDLE and got[2]["blob_id"] is not None
    assert got[0]["blob_id"] is None


def test_usage_per_call(filled: Path) -> None:
    got = rows(filled, "SELECT * FROM usage ORDER BY position")
    first, run = got
    assert {k: first[k] for k in ("session", "model", "input_tokens", "output_tokens", "cache_read_tokens",
                                  "cache_write_tokens", "cost_usd", "scope", "calls")} == {
        "session": "chat", "model": "gpt-4o", "input_tokens": 1000, "output_tokens": 50,
        "cache_read_tokens": 200, "cache_write_tokens": 0, "cost_usd": 0.0125, "scope": "call", "calls": None,
    }  # fmt: skip
    assert first["day"] == first["recorded_at"][:10]
    assert run["scope"] == "run" and run["calls"] == 3 and run["cost_usd"] is None


def test_views_are_read_only_and_the_log_stays_immutable(filled: Path) -> None:
    conn = sqlite3.connect(filled)
    try:
        with pytest.raises(sqlite3.OperationalError, match="cannot modify messages because it is a view"):
            conn.execute("DELETE FROM messages")
        with pytest.raises(sqlite3.IntegrityError, match="immutable"):
            conn.execute("DELETE FROM events")
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
    finally:
        conn.close()
    assert names == set(VIEWS)
    with SQLiteStore.open(filled, readonly=True) as store:
        assert store.verify().ok


def test_an_older_store_gets_the_views_on_its_first_write(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    _fill(db)
    conn = sqlite3.connect(db)  # as the previous turnlog left it
    conn.execute("DELETE FROM turnlog_migrations WHERE version = 5")
    for name in VIEWS:
        conn.execute(f"DROP VIEW {name}")
    conn.commit()
    conn.close()
    with SQLiteStore.open(db) as store:
        assert store.verify().ok
    assert len(rows(db, "SELECT * FROM messages")) == 4


def turnlog_cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", "from turnlog.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    return done.stdout


def test_the_metadata_names_the_database_and_hides_derived_tables(filled: Path) -> None:
    data = json.loads(turnlog_cli("--db", str(filled), "datasette-metadata"))
    assert list(data["databases"]) == ["agent"]
    entry = data["databases"]["agent"]
    assert set(entry["queries"]) == {
        "spend_per_session",
        "spend_per_model",
        "spend_per_day",
        "biggest_tool_outputs",
        "sessions_with_most_calls",
    }
    assert entry["tables"]["sess_sessions"]["hidden"] is True and entry["tables"]["blobs"]["hidden"] is True
    assert "hidden" not in entry["tables"]["messages"]
    renamed = json.loads(turnlog_cli("--db", str(filled), "datasette-metadata", "--database", "prod"))
    assert list(renamed["databases"]) == ["prod"]
    assert yaml.safe_load(turnlog_cli("--db", str(filled), "datasette-metadata", "--yaml")) == data


def test_every_canned_query_runs_in_plain_sqlite(filled: Path) -> None:
    data = json.loads(turnlog_cli("--db", str(filled), "datasette-metadata"))
    queries = data["databases"]["agent"]["queries"]
    spend = rows(filled, queries["spend_per_session"]["sql"])
    assert spend[0]["session"] == "chat" and spend[0]["cost_usd"] == 0.0125 and spend[0]["model_calls"] == 1
    assert spend[1]["session"] == "other" and spend[1]["cost_usd"] is None and spend[1]["model_calls"] == 3
    models = {r["model"]: r for r in rows(filled, queries["spend_per_model"]["sql"])}
    assert models["gpt-4o"]["input_tokens"] == 1000 and models["claude-x"]["model_calls"] == 3
    days = rows(filled, queries["spend_per_day"]["sql"])
    assert sum(d["model_calls"] for d in days) == 4 and all(len(d["day"]) == 10 for d in days)
    biggest = rows(filled, queries["biggest_tool_outputs"]["sql"])
    assert [b["tool_name"] for b in biggest] == ["cat", "read", "ls"]
    most = rows(filled, queries["sessions_with_most_calls"]["sql"])
    assert [(m["session"], m["model_calls"], m["tool_calls"]) for m in most] == [
        ("other", 3, 0),
        ("chat", 1, 3),
    ]


@pytest.mark.skipif(
    shutil.which("datasette", path=os.path.dirname(sys.executable)) is None, reason="no datasette"
)
def test_datasette_loads_the_metadata_and_shows_text(filled: Path, tmp_path: Path) -> None:
    meta = tmp_path / "meta.json"
    meta.write_text(turnlog_cli("--db", str(filled), "datasette-metadata"))
    datasette = os.path.join(os.path.dirname(sys.executable), "datasette")

    def get(path: str) -> Any:
        done = subprocess.run(
            [datasette, str(filled), "-m", str(meta), "--get", path],
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(done.stdout)

    messages = get("/agent/messages.json?_shape=array")
    assert [m["text"] for m in messages][:2] == ["list the files <b>please</b>", ""]
    calls = get("/agent/sessions_with_most_calls.json?_shape=array")
    assert calls[0] == {"session": "other", "messages": 1, "model_calls": 3, "tool_calls": 0}
    info = get("/agent.json")
    hidden = {t["name"] for t in info["tables"] if t["hidden"]}
    assert {"blobs", "sess_sessions"} <= hidden and "events" not in hidden
    assert {v["name"] for v in info["views"]} == set(VIEWS)
    queries = {q["name"] for q in info["queries"]}
    assert "spend_per_day" in queries
