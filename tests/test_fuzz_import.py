"""Hostile input to the importers (jsonl, openai, pydantic-ai): bytes that are not UTF-8, JSON nested
to any depth, lone surrogates, arbitrary bytes and JSON-ish structures. Each gives imported sessions
or one clear error of the project's hierarchy, never another exception, and nothing stored; the CLI
prints one line and exits non-zero."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from store import InvalidEventError, SQLiteStore, StoreError
from turnlog.cli import cli
from turnlog.importers import IMPORT_FORMATS, import_file
from turnlog.importers.base import MAX_JSON_DEPTH, load_json

FORMATS = sorted(IMPORT_FORMATS)

# One valid document per format, with a slot (TEXT) for a string value.
TEMPLATES = {
    "openai": '{"id": "c1", "messages": [{"role": "user", "content": "TEXT"}]}',
    "pydantic-ai": '[{"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "TEXT"}]}]',
    "jsonl": '{"session_id": "s1", "version": 1, "event_id": "e1", "type": "message_appended", '
    '"event": {"role": "user", "content": "TEXT"}}',
}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def hostile_inputs(fmt: str) -> dict[str, bytes]:
    template = TEMPLATES[fmt]
    deep_value = template.replace('"TEXT"', '"x", "extra": ' + nested(MAX_JSON_DEPTH))
    return {
        "invalid UTF-8": template.replace("TEXT", "caf\xe9").encode("latin-1"),
        "a truncated UTF-8 sequence": template.encode() + b"\xe2\x82",
        "100,000 levels of nesting": nested(100_000).encode(),
        "nesting just over the limit": deep_value.encode(),
        "a lone surrogate escape": template.replace("TEXT", "a\\ud800b").encode(),
        "a lone low surrogate in a key": template.replace('"TEXT"', '"x", "\\udc00": 1').encode(),
    }


CASES = [(fmt, name) for fmt in FORMATS for name in hostile_inputs(fmt)]
MESSAGES = {
    "invalid UTF-8": "not UTF-8 text",
    "a truncated UTF-8 sequence": "not UTF-8 text",
    "100,000 levels of nesting": "nested more than 128 levels",
    "nesting just over the limit": "nested more than 128 levels",
    "a lone surrogate escape": "lone surrogate",
    "a lone low surrogate in a key": "lone surrogate",
}


def test_the_templates_import() -> None:
    for fmt in FORMATS:
        with SQLiteStore.open(":memory:") as store:
            assert import_file(store, TEMPLATES[fmt].replace("TEXT", "hi").encode(), fmt).appended >= 1


@pytest.mark.parametrize(("fmt", "name"), CASES)
def test_hostile_input_is_one_clear_error_and_stores_nothing(fmt: str, name: str) -> None:
    data = hostile_inputs(fmt)[name]
    with SQLiteStore.open(":memory:") as store:
        import_file(store, TEMPLATES["openai"].replace("TEXT", "keep"), "openai")
        before = store.count_events()
        with pytest.raises(InvalidEventError, match=MESSAGES[name]) as caught:
            import_file(store, data, fmt)
        assert "\n" not in str(caught.value)
        assert store.count_events() == before and store.verify().ok


@pytest.mark.parametrize(("fmt", "name"), CASES)
def test_cli_import_of_hostile_input_is_one_line(fmt: str, name: str, tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    source = tmp_path / "input"
    source.write_bytes(hostile_inputs(fmt)[name])
    result = CliRunner().invoke(cli, ["--db", str(db), "import", str(source), "--format", fmt])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and MESSAGES[name] in lines[0], result.output
    assert "Traceback" not in result.output
    with SQLiteStore.open(db) as store:
        assert store.count_events() == 0


def test_cli_import_from_standard_input_reads_bytes(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", "-", "--format", "openai"], input=b"[\xff]")
    assert result.exit_code == 1 and "byte 0xff at offset 1" in result.output


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    with SQLiteStore.open(":memory:") as store:
        data = "\ufeff".encode() + TEMPLATES["openai"].replace("TEXT", "hi").encode()
        assert import_file(store, data, "openai").appended == 2


def test_a_session_name_that_is_not_unicode_is_refused() -> None:
    with SQLiteStore.open(":memory:") as store, pytest.raises(InvalidEventError, match="--session"):
        import_file(store, TEMPLATES["openai"].replace("TEXT", "hi"), "openai", session="s\udcff")


def test_nesting_limit_is_exact() -> None:
    assert load_json(nested(MAX_JSON_DEPTH), "x") is not None
    assert load_json(json.dumps({"a": json.loads(nested(MAX_JSON_DEPTH - 1))}), "x")
    with pytest.raises(InvalidEventError, match="x: JSON nested more than 128"):
        load_json(nested(MAX_JSON_DEPTH + 1), "x")
    with pytest.raises(InvalidEventError, match="nested more than 128"):
        load_json(json.dumps({"a": json.loads(nested(MAX_JSON_DEPTH))}), "x")
    # A surrogate pair escaped is fine; only a lone one is refused.
    assert load_json('"\\ud83d\\ude00"', "x") == "\U0001f600"


def test_errors_are_store_errors() -> None:
    assert issubclass(InvalidEventError, StoreError)
