"""Importing Claude Code transcripts: messages and paired tool events, subagents as linked child
sessions, compaction as a summary, usage once per API response (each trap of the format), re-imports
that append only what is new, and bad input refused whole."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from turnlog.importers import import_conversations
from turnlog.importers.from_claude_code import looks_like_claude_code, read_claude_code
from turnlog.store import (
    InvalidEventError,
    MessageAppended,
    SessionStarted,
    SQLiteStore,
    SummaryRecorded,
    ToolReturned,
    UsageRecorded,
)

PROJECT = FIXTURES / "claude-code" / "-home-dev-invoice"
SID = "7d3f2a10-5b8e-4c21-9f4a-2e6b8c0d1a55"
MAIN = PROJECT / f"{SID}.jsonl"
SUBAGENTS = PROJECT / SID / "subagents"


def _stored(store: SQLiteStore, session_id: str) -> list[Any]:
    return [r.event for r in store.read_session(session_id)]


def _usages(store: SQLiteStore) -> list[UsageRecorded]:
    return [e for s in store.sessions() for e in _stored(store, s.session_id) if isinstance(e, UsageRecorded)]


def _deduplicated_sums(files: list[Path]) -> dict[str, int]:
    """The billed totals computed straight from the files, independently of the importer: every
    assistant line that is a real API response (not a progress line, not <synthetic>), grouped by
    message id (unique per response in these fixtures), largest output per response."""
    responses: dict[str, dict[str, int]] = {}
    for file in files:
        for line in file.read_text().splitlines():
            data = json.loads(line)
            message = data.get("message")
            if data.get("type") != "assistant" or message["model"] == "<synthetic>":
                continue
            usage = message["usage"]
            seen = responses.setdefault(message["id"], dict(usage))
            seen["output_tokens"] = max(seen["output_tokens"], usage["output_tokens"])
    totals: dict[str, int] = defaultdict(int)
    for usage in responses.values():
        totals["input"] += (
            usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
        )
        totals["output"] += usage["output_tokens"]
        totals["cache_read"] += usage["cache_read_input_tokens"]
        totals["cache_write"] += usage["cache_creation_input_tokens"]
        totals["responses"] += 1
    return dict(totals)


def _sums(usages: list[UsageRecorded]) -> dict[str, int]:
    return {
        "input": sum(u.input_tokens for u in usages),
        "output": sum(u.output_tokens for u in usages),
        "cache_read": sum(u.cache_read_tokens for u in usages),
        "cache_write": sum(u.cache_write_tokens for u in usages),
        "responses": len(usages),
    }


def test_detection() -> None:
    assert looks_like_claude_code(PROJECT)
    assert looks_like_claude_code(MAIN)
    assert looks_like_claude_code(FIXTURES / "claude-code")
    assert not looks_like_claude_code(FIXTURES / "openai_chat.json")
    assert not looks_like_claude_code(FIXTURES / "events_v1.jsonl")
    assert not looks_like_claude_code(FIXTURES / "codex")


def test_project_folder_imports_session_and_linked_subagents(file_store: SQLiteStore) -> None:
    result = import_conversations(file_store, read_claude_code(PROJECT))
    ids = [s["session_id"] for s in result.sessions]
    assert ids == [SID, f"{SID}/agent-5e6f7a8b", f"{SID}/agent-a1b2c3d4", f"{SID}/agent-acompact-7f3e21"]
    main = _stored(file_store, SID)
    started = main[0]
    assert isinstance(started, SessionStarted)
    assert started.title == "Fix the rounding bug in invoice/money.py"
    assert started.model == "claude-sonnet-4-5-20250929"
    assert started.parent is None
    for child in ids[1:]:
        first = _stored(file_store, child)[0]
        assert isinstance(first, SessionStarted)
        # Linked, not forked: a subagent shares none of its parent's history.
        assert first.parent is None
        assert first.metadata is not None and first.metadata["parent_session_id"] == SID
        assert child.endswith(first.metadata["agent_id"])
    messages = [e for e in main if isinstance(e, MessageAppended)]
    roles = ["user", "assistant", "assistant", "assistant", "assistant", "user", "assistant", "user"]
    assert [m.role for m in messages] == roles
    # Thinking and the <synthetic> "No response requested." are left out; the tool result is not a prompt.
    texts = [m.content for m in messages]
    assert not any("read the file first" in t for t in texts)
    assert "No response requested." not in texts
    assert texts[0] == "Fix the rounding bug in invoice/money.py"
    times = [r.recorded_at for r in file_store.read_session(SID)]
    assert times[1].startswith("2025-10-02T09:00")


def test_tool_calls_are_paired_with_their_results(file_store: SQLiteStore) -> None:
    import_conversations(file_store, read_claude_code(PROJECT))
    for session in file_store.sessions():
        events = _stored(file_store, session.session_id)
        calls = {c.id: c.name for e in events if isinstance(e, MessageAppended) for c in e.tool_calls or ()}
        results = {e.tool_call_id: e.tool_name for e in events if isinstance(e, ToolReturned)}
        assert calls == results, session.session_id
    main = _stored(file_store, SID)
    task = next(e for e in main if isinstance(e, ToolReturned) and e.tool_call_id == "toolu_02Task")
    assert task.content.startswith("round_cents is called from")


def test_compaction_is_a_summary_of_everything_before_it(file_store: SQLiteStore) -> None:
    import_conversations(file_store, read_claude_code(PROJECT))
    records = file_store.read_session(SID)
    [summary] = [r for r in records if isinstance(r.event, SummaryRecorded)]
    assert isinstance(summary.event, SummaryRecorded)
    assert (summary.event.first_version, summary.event.last_version) == (2, summary.version - 1)
    assert "round_cents, which truncates" in summary.event.text
    assert summary.event.summarizer.name == "claude-code"
    # The summary is not also a user prompt.
    assert not any(
        isinstance(r.event, MessageAppended) and "continued from" in r.event.content for r in records
    )


def test_usage_sums_equal_the_deduplicated_per_response_sums(file_store: SQLiteStore) -> None:
    import_conversations(file_store, read_claude_code(PROJECT))
    files = [MAIN, *sorted(SUBAGENTS.glob("agent-*.jsonl"))]
    expected = _deduplicated_sums(files)
    assert _sums(_usages(file_store)) == expected
    # Summing every line instead would count far more (the trap this avoids).
    every_line = sum(
        json.loads(line)["message"]["usage"]["cache_read_input_tokens"]
        for f in files
        for line in f.read_text().splitlines()
        if json.loads(line).get("type") == "assistant"
    )
    assert every_line > 2 * expected["cache_read"]
    assert expected == {
        "input": 12003 + 12305 + 5010 + 8002 + 3004 + 3206 + 20000,
        "output": 85 + 40 + 120 + 12 + 60 + 150 + 900,
        "cache_read": 10000 + 12000 + 3000,
        "cache_write": 2000 + 300 + 5000 + 8000 + 3000 + 200,
        "responses": 7,
    }


def test_usage_once_per_response_tied_to_its_first_message(file_store: SQLiteStore) -> None:
    import_conversations(file_store, read_claude_code(PROJECT))
    main = _stored(file_store, SID)
    usages = [e for e in main if isinstance(e, UsageRecorded)]
    assert [u.response_id for u in usages] == ["msg_01AbcRounding", "msg_01BcdDelegate", "msg_01CdeFinal"]
    first = usages[0]
    # Three lines repeat msg_01AbcRounding's usage; the largest (final) output is kept.
    assert (first.input_tokens, first.cache_read_tokens, first.cache_write_tokens) == (12003, 10000, 2000)
    assert (first.output_tokens, first.output_lower_bound) == (85, False)
    called = next(e for e in main if e.event_id == first.call_event_id)
    assert isinstance(called, MessageAppended) and called.content == "Let me read the file."
    assert all(u.source == "claude-code" and u.scope == "call" for u in usages)


def test_without_request_id_and_without_final_count_output_is_a_lower_bound(file_store: SQLiteStore) -> None:
    import_conversations(file_store, read_claude_code(MAIN))
    usage = next(
        e
        for e in _stored(file_store, SID)
        if isinstance(e, UsageRecorded) and e.response_id == "msg_01BcdDelegate"
    )
    assert (usage.output_tokens, usage.output_lower_bound) == (40, True)
    assert usage.input_tokens == 5 + 12000 + 300


def test_gateway_reusing_one_message_id_keeps_responses_apart(tmp_path: Path) -> None:
    lines = [
        _user("u1", "hi"),
        _assistant("a1", "msg_same", "one", usage=_usage(10, 0, 100, 5), stop="end_turn"),
        _user("u2", "again"),
        _assistant("a2", "msg_same", "two", usage=_usage(12, 0, 200, 7), stop="end_turn"),
    ]
    path = _write(tmp_path / "s1.jsonl", lines)
    [conv] = read_claude_code(path)
    usages = [e for e in conv.events if isinstance(e, UsageRecorded)]
    assert [(u.input_tokens, u.output_tokens) for u in usages] == [(110, 5), (212, 7)]


def test_parent_progress_lines_are_not_counted_again(file_store: SQLiteStore) -> None:
    import_conversations(file_store, read_claude_code(PROJECT))
    grep = [u for u in _usages(file_store) if u.response_id == "msg_01SubGrep"]
    assert len(grep) == 1
    assert grep[0].call_event_id in {e.event_id for e in _stored(file_store, f"{SID}/agent-a1b2c3d4")}
    assert not any(
        u.response_id == "msg_01SubGrep" for u in _stored(file_store, SID) if isinstance(u, UsageRecorded)
    )


def test_compaction_and_start_up_calls_in_agent_files_are_billed(file_store: SQLiteStore) -> None:
    import_conversations(file_store, read_claude_code(PROJECT))
    compact = [e for e in _stored(file_store, f"{SID}/agent-acompact-7f3e21") if isinstance(e, UsageRecorded)]
    # The compaction agent's replay of the parent's response is billed in the parent only.
    assert [(u.response_id, u.input_tokens, u.output_tokens) for u in compact] == [
        ("msg_01Compact", 20000, 900)
    ]
    warm = [e for e in _stored(file_store, f"{SID}/agent-5e6f7a8b") if isinstance(e, UsageRecorded)]
    assert [(u.model, u.input_tokens, u.cache_write_tokens) for u in warm] == [
        ("claude-haiku-4-5-20251001", 8002, 8000)
    ]


def test_lines_copied_from_another_session_keep_messages_but_not_usage(tmp_path: Path) -> None:
    copied = _assistant(
        "a1", "msg_old", "from before", usage=_usage(10, 0, 100, 5), stop="end_turn", session="other-session"
    )
    lines = [_user("u1", "resume", session="s2"), copied, _user("u2", "go on", session="s2")]
    lines += [_assistant("a2", "msg_new", "new", usage=_usage(3, 0, 0, 4), stop="end_turn", session="s2")]
    [conv] = read_claude_code(_write(tmp_path / "s2.jsonl", lines))
    assert conv.session_id == "s2"
    assert [m.content for m in conv.events if isinstance(m, MessageAppended)] == [
        "resume",
        "from before",
        "go on",
        "new",
    ]
    assert [u.response_id for u in conv.events if isinstance(u, UsageRecorded)] == ["msg_new"]


def test_model_fills_in_when_a_response_names_none(tmp_path: Path) -> None:
    line = _assistant("a1", "msg_1", "hi", usage=_usage(1, 0, 0, 1), stop="end_turn")
    del line["message"]["model"]
    [conv] = read_claude_code(
        _write(tmp_path / "s.jsonl", [_user("u1", "hi"), line]), model="claude-opus-4-1"
    )
    [usage] = [u for u in conv.events if isinstance(u, UsageRecorded)]
    assert usage.model == "claude-opus-4-1"


def test_reimport_writes_nothing(file_store: SQLiteStore) -> None:
    import_conversations(file_store, read_claude_code(PROJECT))
    head = file_store.head_position()
    again = import_conversations(file_store, read_claude_code(PROJECT))
    assert again.appended == 0
    assert file_store.head_position() == head


def test_a_grown_folder_appends_only_the_new(tmp_path: Path) -> None:
    full = SQLiteStore.open(tmp_path / "full.db")
    import_conversations(full, read_claude_code(PROJECT))
    expected = {s.session_id: [r.event_id for r in full.read_session(s.session_id)] for s in full.sessions()}
    lines = MAIN.read_text().splitlines(keepends=True)
    # Cut after every line: mid-response (only thinking so far, or a placeholder count), between
    # responses, before the subagents exist. Each cut then grows to the whole folder.
    for cut in range(2, len(lines)):  # line 1 is a file-history snapshot: no conversation yet
        project = tmp_path / f"cut{cut}" / "-home-dev-invoice"
        project.mkdir(parents=True)
        (project / MAIN.name).write_text("".join(lines[:cut]))
        store = SQLiteStore.open(tmp_path / f"cut{cut}.db")
        try:
            first = import_conversations(store, read_claude_code(project)).appended
            shutil.copytree(PROJECT / SID, project / SID)
            (project / MAIN.name).write_text("".join(lines))
            second = import_conversations(store, read_claude_code(project))
            assert all(s["skipped"] + s["appended"] == s["events"] for s in second.sessions)
            grown = {
                s.session_id: [r.event_id for r in store.read_session(s.session_id)] for s in store.sessions()
            }
            assert grown == expected, cut
            assert first + second.appended == sum(len(v) for v in expected.values())
        finally:
            store.close()
    full.close()


def test_a_line_still_being_written_is_left_for_later(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.jsonl", [_user("u1", "hi")])
    with path.open("a") as file:
        file.write('{"type":"assistant","mess')
    [conv] = read_claude_code(path)
    assert [type(e).__name__ for e in conv.events] == ["SessionStarted", "MessageAppended"]


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"type":"user", "uuid": ', "malformed JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"uuid":"x","sessionId":"s","message":{"role":"user","content":"hi"}}', "type"),
        ('{"type":"user","uuid":"x","sessionId":"s","message":"hi"}', "message must be an object"),
        ('{"type":"user","uuid":"x","sessionId":"s","message":{"content":7}}', "message.content"),
        ('{"type":"user","sessionId":"s","message":{"content":"hi"}}', "uuid"),
        (
            '{"type":"assistant","uuid":"x","sessionId":"s","message":{"id":"m","model":"c",'
            '"content":[],"usage":{"input_tokens":"12","output_tokens":1}}}',
            "input_tokens",
        ),
        (
            '{"type":"assistant","uuid":"x","sessionId":"s","message":{"id":"m","model":"c",'
            '"content":[{"type":"tool_use","name":"Read","input":{}}]}}',
            "content[0]",
        ),
        (
            '{"type":"user","uuid":"x","sessionId":"s","message":{"content":[{"type":"tool_result"}]}}',
            "tool_use_id",
        ),
        ('{"type":"user","uuid":"x","sessionId":"s b","message":{"content":"hi"}}', "sessionId"),
        (
            '{"type":"user","uuid":"x","sessionId":"s","timestamp":"yesterday","message":{"content":"hi"}}',
            "timestamp",
        ),
    ],
)
def test_bad_input_names_file_line_and_field_and_writes_nothing(
    tmp_path: Path, file_store: SQLiteStore, line: str, field: str
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    shutil.copy(MAIN, project / MAIN.name)  # a good session beside the bad one: nothing of it is written
    path = project / "zz-bad.jsonl"
    path.write_text(json.dumps(_user("u0", "first", session="s")) + "\n" + line + "\n")
    with pytest.raises(InvalidEventError) as caught:
        import_conversations(file_store, read_claude_code(project))
    message = str(caught.value)
    assert str(path) in message and "line 2" in message and field in message
    assert file_store.head_position() == 0


def test_missing_path_and_empty_folder_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidEventError, match="no such file"):
        read_claude_code(tmp_path / "nope")
    with pytest.raises(InvalidEventError, match="no Claude Code transcript"):
        read_claude_code(tmp_path)


# --- small transcripts written in the tests ---------------------------------------------------


def _user(uuid: str, text: str, *, session: str = "s1") -> dict[str, Any]:
    return {"type": "user", "uuid": uuid, "sessionId": session, "timestamp": "2025-10-02T10:00:00Z",
            "isSidechain": False, "message": {"role": "user", "content": text}}  # fmt: skip


def _usage(inp: int, write: int, read: int, out: int) -> dict[str, int]:
    return {"input_tokens": inp, "cache_creation_input_tokens": write, "cache_read_input_tokens": read,
            "output_tokens": out}  # fmt: skip


def _assistant(
    uuid: str, mid: str, text: str, *, usage: dict[str, int], stop: str | None, session: str = "s1"
) -> dict[str, Any]:
    message = {"id": mid, "model": "claude-sonnet-4-5-20250929", "role": "assistant", "type": "message",
               "content": [{"type": "text", "text": text}], "stop_reason": stop, "usage": usage}  # fmt: skip
    return {"type": "assistant", "uuid": uuid, "sessionId": session, "timestamp": "2025-10-02T10:00:01Z",
            "isSidechain": False, "message": message}  # fmt: skip


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path
