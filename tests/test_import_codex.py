"""Importing Codex CLI rollouts: messages and paired tool events, compaction as a summary, usage from
the changes of the running totals (re-sent counts not counted again, no counts = unknown usage),
re-imports that append only what is new, and bad input refused whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from turnlog.importers import import_conversations
from turnlog.importers.from_codex import looks_like_codex, read_codex
from turnlog.store import (
    InvalidEventError,
    MessageAppended,
    SessionStarted,
    SQLiteStore,
    SummaryRecorded,
    ToolReturned,
    UsageRecorded,
)

SESSIONS = FIXTURES / "codex" / "sessions"
RID = "0199a213-81c0-7a52-b4d1-3f6c2e8a9b10"
ROLLOUT = SESSIONS / "2025" / "10" / "03" / f"rollout-2025-10-03T14-00-00-{RID}.jsonl"


def _stored(store: SQLiteStore, session_id: str = RID) -> list[Any]:
    return [r.event for r in store.read_session(session_id)]


def _lines(path: Path = ROLLOUT) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_detection() -> None:
    assert looks_like_codex(SESSIONS)
    assert looks_like_codex(ROLLOUT)
    assert not looks_like_codex(FIXTURES / "claude-code")
    assert not looks_like_codex(FIXTURES / "openai_chat.json")


def test_rollout_tree_imports_messages_and_paired_calls(file_store: SQLiteStore) -> None:
    result = import_conversations(file_store, read_codex(SESSIONS))
    assert [s["session_id"] for s in result.sessions] == [RID]
    events = _stored(file_store)
    started = events[0]
    assert isinstance(started, SessionStarted)
    assert (started.title, started.model) == ("Make round_cents round half up", "gpt-5-codex")
    assert started.metadata is not None and started.metadata["cli_version"] == "0.44.0"
    messages = [e for e in events if isinstance(e, MessageAppended)]
    # The event_msg copies (user_message, agent_message) and the reasoning are not messages.
    assert [(m.role, m.content[:12]) for m in messages] == [
        ("user", "<environment"),
        ("user", "Make round_c"),
        ("assistant", ""),
        ("assistant", ""),
        ("assistant", "round_cents "),
    ]
    calls = {c.id: c.name for m in messages for c in m.tool_calls or ()}
    results = {e.tool_call_id: e.tool_name for e in events if isinstance(e, ToolReturned)}
    assert calls == results == {"call_7Qm2cat": "shell", "call_Zp41patch": "apply_patch"}
    patch = next(c for m in messages for c in m.tool_calls or () if c.name == "apply_patch")
    assert patch.arguments.startswith("*** Begin Patch")


def test_compaction_is_a_summary_of_everything_before_it(file_store: SQLiteStore) -> None:
    import_conversations(file_store, read_codex(ROLLOUT))
    [summary] = [r for r in file_store.read_session(RID) if isinstance(r.event, SummaryRecorded)]
    assert isinstance(summary.event, SummaryRecorded)
    assert (summary.event.first_version, summary.event.last_version) == (2, summary.version - 1)
    assert summary.event.text.startswith("The user asked to make round_cents")


def test_usage_from_changes_of_the_totals_not_every_resent_count(file_store: SQLiteStore) -> None:
    import_conversations(file_store, read_codex(ROLLOUT))
    usages = [e for e in _stored(file_store) if isinstance(e, UsageRecorded)]
    counts = [
        line["payload"]["info"]
        for line in _lines()
        if line["type"] == "event_msg"
        and line["payload"]["type"] == "token_count"
        and line["payload"]["info"]
    ]
    final = counts[-1]["total_token_usage"]
    # One usage per model call: the totals' changes add up to the final totals...
    assert len(usages) == 3
    assert sum(u.input_tokens for u in usages) == final["input_tokens"]
    assert sum(u.output_tokens for u in usages) == final["output_tokens"]
    assert sum(u.cache_read_tokens for u in usages) == final["cached_input_tokens"]
    assert sum(u.reasoning_tokens for u in usages) == final["reasoning_output_tokens"]
    # ...while summing every count's last_token_usage would count the re-sent ones again.
    assert len(counts) == 5
    assert counts[1]["total_token_usage"] == counts[0]["total_token_usage"]
    # Codex's input already includes the cached tokens: kept as they are.
    first = usages[0]
    assert (first.input_tokens, first.cache_read_tokens, first.output_tokens) == (4210, 3072, 96)
    assert all(u.model == "gpt-5-codex" and u.source == "codex" and not u.output_lower_bound for u in usages)


def test_usage_is_tied_to_the_call_it_follows(file_store: SQLiteStore) -> None:
    import_conversations(file_store, read_codex(ROLLOUT))
    events = _stored(file_store)
    by_id = {e.event_id: e for e in events}
    tied = [by_id[u.call_event_id] for u in events if isinstance(u, UsageRecorded)]
    assert [m.tool_calls[0].name if m.tool_calls else m.content for m in tied] == [
        "shell",
        "apply_patch",
        "round_cents now rounds half up.",
    ]


def test_a_rollout_without_token_counts_has_unknown_usage(tmp_path: Path) -> None:
    lines = [line for line in _lines() if line["payload"].get("type") != "token_count"]
    path = _write(tmp_path / f"rollout-x-{RID}.jsonl", lines)
    [conv] = read_codex(path)
    assert not any(isinstance(e, UsageRecorded) for e in conv.events)
    assert any(isinstance(e, MessageAppended) for e in conv.events)


def test_totals_that_start_over_take_the_last_usage(tmp_path: Path) -> None:
    lines = _lines()[:9]  # up to the first count (4210 in)
    lines.append(_count(total=(100, 0, 10, 0), last=(100, 0, 10, 0)))
    [conv] = read_codex(_write(tmp_path / f"rollout-x-{RID}.jsonl", lines))
    usages = [e for e in conv.events if isinstance(e, UsageRecorded)]
    assert [(u.input_tokens, u.output_tokens) for u in usages] == [(4210, 96), (100, 10)]


def test_model_fills_in_when_no_turn_context_names_one(tmp_path: Path) -> None:
    lines = [line for line in _lines() if line["type"] != "turn_context"]
    [conv] = read_codex(_write(tmp_path / f"rollout-x-{RID}.jsonl", lines), model="gpt-5")
    assert {u.model for u in conv.events if isinstance(u, UsageRecorded)} == {"gpt-5"}


def test_session_renames_and_file_name_gives_the_id(tmp_path: Path) -> None:
    lines = [line for line in _lines() if line["type"] != "session_meta"]
    path = _write(tmp_path / f"rollout-2025-10-03T14-00-00-{RID}.jsonl", lines)
    assert read_codex(path)[0].session_id == RID
    assert read_codex(path, session="fix-rounding")[0].session_id == "fix-rounding"


def test_reimport_writes_nothing(file_store: SQLiteStore) -> None:
    import_conversations(file_store, read_codex(SESSIONS))
    head = file_store.head_position()
    assert import_conversations(file_store, read_codex(SESSIONS)).appended == 0
    assert file_store.head_position() == head


def test_a_grown_rollout_appends_only_the_new(tmp_path: Path) -> None:
    full = SQLiteStore.open(tmp_path / "full.db")
    import_conversations(full, read_codex(ROLLOUT))
    expected = [r.event_id for r in full.read_session(RID)]
    full.close()
    text = ROLLOUT.read_text().splitlines(keepends=True)
    for cut in range(2, len(text)):
        folder = tmp_path / f"cut{cut}"
        folder.mkdir()
        path = folder / ROLLOUT.name
        path.write_text("".join(text[:cut]))
        store = SQLiteStore.open(tmp_path / f"cut{cut}.db")
        try:
            first = import_conversations(store, read_codex(folder)).appended
            path.write_text("".join(text))
            second = import_conversations(store, read_codex(folder)).appended
            assert [r.event_id for r in store.read_session(RID)] == expected, cut
            assert first + second == len(expected)
        finally:
            store.close()


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"type":"response_item","payload":', "malformed JSON"),
        ('"just a string"', "expected a JSON object"),
        ('{"payload":{}}', "type"),
        ('{"type":"response_item","payload":[]}', "payload must be an object"),
        ('{"type":"response_item","payload":{"type":"message","role":"robot","content":[]}}', "role"),
        ('{"type":"response_item","payload":{"type":"message","role":"user","content":7}}', "content"),
        ('{"type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{}"}}', "id"),
        ('{"type":"response_item","payload":{"type":"function_call_output","output":"x"}}', "call_id"),
        (
            '{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":'
            '{"input_tokens":-5,"output_tokens":1},"last_token_usage":{}}}}',
            "input_tokens",
        ),
        (
            '{"type":"event_msg","payload":{"type":"token_count","info":{"last_token_usage":{}}}}',
            "total_token_usage",
        ),
        ('{"type":"turn_context","timestamp":"soon","payload":{"model":"gpt-5"}}', "timestamp"),
    ],
)
def test_bad_input_names_file_line_and_field_and_writes_nothing(
    tmp_path: Path, file_store: SQLiteStore, line: str, field: str
) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / ROLLOUT.name).write_text(ROLLOUT.read_text())  # a good rollout beside: not written either
    bad = folder / "rollout-2025-10-04T09-00-00-0199a300-0000-7000-8000-000000000001.jsonl"
    bad.write_text(
        '{"type":"response_item","payload":{"type":"message","role":"user","content":"hi"}}\n' + line + "\n"
    )
    with pytest.raises(InvalidEventError) as caught:
        import_conversations(file_store, read_codex(folder))
    message = str(caught.value)
    assert str(bad) in message and "line 2" in message and field in message
    assert file_store.head_position() == 0


def test_missing_path_and_empty_folder_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidEventError, match="no such file"):
        read_codex(tmp_path / "nope")
    with pytest.raises(InvalidEventError, match="no Codex rollout"):
        read_codex(tmp_path)


def _count(*, total: tuple[int, int, int, int], last: tuple[int, int, int, int]) -> dict[str, Any]:
    names = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
    info = {
        "total_token_usage": dict(zip(names, total, strict=True)),
        "last_token_usage": dict(zip(names, last, strict=True)),
    }
    return {
        "timestamp": "2025-10-03T15:00:00Z",
        "type": "event_msg",
        "payload": {"type": "token_count", "info": info},
    }


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path
