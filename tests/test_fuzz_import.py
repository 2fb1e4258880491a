"""Hostile input to the importers (jsonl, openai, pydantic-ai): bytes that are not UTF-8, JSON nested
to any depth, lone surrogates, arbitrary bytes and JSON-ish structures. Each gives imported sessions
or one clear error of the project's hierarchy, never another exception, and nothing stored; the CLI
prints one line and exits non-zero."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.cli import cli
from turnlog.importers import IMPORT_FORMATS, import_file
from turnlog.importers.base import MAX_JSON_DEPTH, load_json
from turnlog.store import InvalidEventError, SQLiteStore, StoreError

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


# --- fuzz: any input gives sessions or a StoreError, never another exception -----------------------


FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(["", "\x00", "x" * 300, "user", "tool", "call_1"])
)
json_values = st.recursive(
    _leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def _mostly(good: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """Mostly well-formed values, now and then anything: deep enough into the importers to reach
    every check, and still hostile."""
    return st.integers(0, 9).flatmap(lambda n: json_values if n == 0 else good)


def _obj(
    required: dict[str, st.SearchStrategy[object]],
    optional: dict[str, st.SearchStrategy[object]] | None = None,
) -> st.SearchStrategy[object]:
    return _mostly(st.fixed_dictionaries(required, optional=optional or {}))


_texts = st.integers(0, 19).flatmap(
    lambda n: st.sampled_from(["\ud800", "x" * 2000, "\x1b[2J", "", 7]) if n == 0 else st.text(max_size=20)
)
_ids = _mostly(st.sampled_from(["c1", "c2", "c3"]))
_counts = (
    _mostly(st.integers(0, 2**63 - 1)) | st.integers(-5, 2**64) | st.sampled_from([1.5, "12", True, None])
)
_call = _obj(
    {
        "id": _ids,
        "function": _obj({"name": _mostly(st.sampled_from(["ls", "cat"])), "arguments": json_values}),
    }
)
_openai_message = _mostly(
    st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"]).flatmap(
        lambda role: st.fixed_dictionaries(
            {"role": st.just(role), "content": _texts},
            optional={
                "tool_calls": st.lists(_call, max_size=3),
                "tool_call_id": _ids,
                "name": _mostly(st.sampled_from(["ls", "ana"])),
                "function_call": _obj({"name": _mostly(st.just("ls")), "arguments": json_values}),
                "refusal": _texts,
            },
        )
    )
)
_usage = _obj(
    {},
    {
        "prompt_tokens": _counts,
        "completion_tokens": _counts,
        "input_tokens": _counts,
        "prompt_tokens_details": _obj({}, {"cached_tokens": _counts}),
        "completion_tokens_details": _obj({}, {"reasoning_tokens": _counts}),
    },
)
openai_documents = st.lists(_openai_message, max_size=6) | _obj(
    {"messages": _mostly(st.lists(_openai_message, max_size=6))},
    {"id": _mostly(st.sampled_from(["conv-1", "conv-2"])), "title": _texts, "model": _texts, "usage": _usage},
)
_pai_part = _mostly(
    st.sampled_from(
        [
            "system-prompt",
            "user-prompt",
            "tool-return",
            "retry-prompt",
            "text",
            "tool-call",
            "thinking",
            "builtin-tool-call",
            "builtin-tool-return",
            "file",
            "instruction",
            "holo",
        ]
    ).flatmap(
        lambda kind: st.fixed_dictionaries(
            {"part_kind": st.just(kind)},
            optional={
                "content": _texts | json_values,
                "tool_name": _mostly(st.sampled_from(["f", "g"])),
                "tool_call_id": _ids,
                "args": json_values,
                "outcome": _mostly(st.sampled_from(["success", "failed", "retried"])),
            },
        )
    )
)
_pai_message = _obj(
    {
        "kind": _mostly(st.sampled_from(["request", "response"])),
        "parts": _mostly(st.lists(_pai_part, max_size=4)),
    },
    {
        "instructions": _texts,
        "model_name": _texts,
        "conversation_id": _mostly(st.sampled_from(["conv-1", "conv-2"])),
        "run_id": _texts,
        "usage": _obj(
            {},
            {
                "input_tokens": _counts,
                "output_tokens": _counts,
                "details": _obj({}, {"reasoning_tokens": _counts}),
            },
        ),
    },
)
pai_documents = st.lists(_pai_message, max_size=5)
_event_bodies = {
    "session_started": _obj({}, {"title": _texts, "metadata": json_values}),
    "message_appended": _obj(
        {"role": _mostly(st.sampled_from(["user", "assistant", "system"])), "content": _texts}
    ),
    "tool_returned": _obj({"tool_call_id": _ids, "content": _texts}),
    "usage_recorded": _obj({"model": st.just("m")}, {"input_tokens": _counts, "output_tokens": _counts}),
    "wizard_cast": json_values,
}
_jsonl_event = st.sampled_from(sorted(_event_bodies)).flatmap(
    lambda kind: st.fixed_dictionaries(
        {"type": st.just(kind), "event": _event_bodies[kind]},
        optional={
            "schema_version": _mostly(st.just(1)),
            "recorded_at": _mostly(st.sampled_from(["2025-01-01T00:00:00+00:00", "yesterday"])),
        },
    )
)


@st.composite
def jsonl_files(draw: st.DrawFn) -> str:
    """Lines of one or two sessions, numbered as an export numbers them, then now and then one
    line replaced by anything (a wrong version, a stray object, garbage)."""
    lines = []
    versions: dict[str, int] = {}
    for index in range(draw(st.integers(1, 6))):
        sid = draw(st.sampled_from(["s1", "s2"]))
        versions[sid] = versions.get(sid, 0) + 1
        line = {"session_id": sid, "version": versions[sid], "event_id": f"e{index}", **draw(_jsonl_event)}
        lines.append(draw(_mostly(st.just(line))))
    return "\n".join(json.dumps(line) for line in lines)


STRUCTURES = {
    "openai": openai_documents.map(json.dumps)
    | st.lists(openai_documents, max_size=3).map(lambda docs: "\n".join(json.dumps(d) for d in docs)),
    "pydantic-ai": pai_documents.map(json.dumps) | st.lists(pai_documents, max_size=3).map(json.dumps),
    "jsonl": jsonl_files(),
}


def check_outcome(data: str | bytes, fmt: str) -> StoreError | None:
    """Import ``data``; return the error (nothing stored) or None (sessions stored and readable)."""
    with SQLiteStore.open(":memory:") as store:
        try:
            result = import_file(store, data, fmt)
        except StoreError as exc:
            assert str(exc) and "\n" not in str(exc).strip(), str(exc)
            assert store.count_events() == 0
            return exc
        assert result.appended == store.count_events()
        for session in result.sessions:
            store.read_session(session["session_id"])
        assert store.verify().ok
        return None


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes(fmt: str, data: bytes) -> None:
    check_outcome(data, fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(value=json_values)
def test_arbitrary_json(fmt: str, value: object) -> None:
    check_outcome(json.dumps(value), fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_format_shaped_structures(fmt: str, data: st.DataObject) -> None:
    check_outcome(data.draw(STRUCTURES[fmt]), fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_cli_import_of_fuzzed_input_is_one_line(
    fmt: str, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    text = data.draw(STRUCTURES[fmt] | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
    error = check_outcome(text, fmt)
    folder = tmp_path_factory.mktemp("cli")
    source = folder / "input"
    source.write_bytes(text.encode("utf-8", "surrogatepass"))
    result = CliRunner().invoke(
        cli, ["--db", str(folder / "a.db"), "import", str(source), "--format", fmt, "--json"]
    )
    if error is None:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1, result.output  # --json: the error as one JSON line
        assert json.loads(lines[0])["error"]["type"] == "bad_input", result.output
