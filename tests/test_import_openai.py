"""Importing OpenAI chat-completions transcripts: every accepted shape, the mapping of each role,
idempotent re-imports, and clear errors that leave the store unchanged."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FIXTURES
from turnlog.importers import import_file, parse_openai
from turnlog.store import (
    MAX_TOKENS,
    InvalidEventError,
    MessageAppended,
    SessionStarted,
    SQLiteStore,
    ToolReturned,
    UsageRecorded,
)
from turnlog.store.errors import DuplicateEventError

CHAT = (FIXTURES / "openai_chat.json").read_text()
SIMPLE = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hello"},
    {"role": "assistant", "content": "hi there"},
]


def test_object_with_messages_maps_every_role() -> None:
    [conv] = parse_openai(CHAT)
    assert conv.session_id == "chat-1"
    types = [type(e).__name__ for e in conv.events]
    assert types == [
        "SessionStarted",
        "MessageAppended",
        "MessageAppended",
        "MessageAppended",
        "ToolReturned",
        "ToolReturned",
        "MessageAppended",
        "MessageAppended",
        "ToolReturned",
        "MessageAppended",
        "UsageRecorded",
    ]
    started = conv.events[0]
    assert isinstance(started, SessionStarted)
    assert (started.title, started.model) == ("Fix a failing test", "gpt-4o")
    user = conv.events[2]
    assert isinstance(user, MessageAppended)
    assert user.content == "Fix the failing test in tests/test_io.py\n[image_url omitted]"
    call = conv.events[3]
    assert isinstance(call, MessageAppended) and call.tool_calls
    assert [c.name for c in call.tool_calls] == ["read_file", "run_tests"]
    assert call.tool_calls[0].arguments == '{"path": "tests/test_io.py"}'
    ret = conv.events[4]
    assert isinstance(ret, ToolReturned)
    assert (ret.tool_call_id, ret.tool_name) == ("call_1", "read_file")
    named = conv.events[6]
    assert isinstance(named, MessageAppended) and named.name == "coder"
    legacy_call, legacy_ret = conv.events[7], conv.events[8]
    assert isinstance(legacy_call, MessageAppended) and legacy_call.tool_calls
    assert isinstance(legacy_ret, ToolReturned)
    assert legacy_ret.tool_call_id == legacy_call.tool_calls[0].id
    assert legacy_ret.tool_name == "run_tests"
    developer = conv.events[9]
    assert isinstance(developer, MessageAppended) and developer.role == "system"
    usage = conv.events[10]
    assert isinstance(usage, UsageRecorded)
    assert (usage.input_tokens, usage.output_tokens) == (1200, 80)
    assert (usage.cache_read_tokens, usage.reasoning_tokens) == (1024, 12)


def test_plain_list_gets_a_content_derived_session_id() -> None:
    [a] = parse_openai(json.dumps(SIMPLE))
    [b] = parse_openai(json.dumps(SIMPLE))
    assert a.session_id == b.session_id and a.session_id.startswith("openai-")
    [c] = parse_openai(json.dumps([*SIMPLE, {"role": "user", "content": "more"}]))
    assert c.session_id != a.session_id
    [named] = parse_openai(json.dumps(SIMPLE), session="mine")
    assert named.session_id == "mine"


def test_json_lines_and_lists_of_conversations_give_one_session_each() -> None:
    lines = "\n".join(json.dumps({"messages": SIMPLE[: i + 1]}) for i in range(3))
    convs = parse_openai(lines, session="batch")
    assert [c.session_id for c in convs] == ["batch-1", "batch-2", "batch-3"]
    listed = parse_openai(json.dumps([{"messages": SIMPLE}, {"messages": SIMPLE[:1]}]))
    assert len(listed) == 2


def test_import_is_atomic_per_session_and_idempotent(file_store: SQLiteStore) -> None:
    first = import_file(file_store, CHAT, "openai")
    assert first.appended == 11
    again = import_file(file_store, CHAT, "openai")
    assert again.appended == 0 and again.sessions[0]["skipped"] == 11
    assert file_store.count_events() == 11
    assert file_store.verify().ok


def test_grown_transcript_appends_only_new_messages(file_store: SQLiteStore) -> None:
    import_file(file_store, json.dumps(SIMPLE), "openai", session="s")
    grown = [*SIMPLE, {"role": "user", "content": "and now?"}]
    result = import_file(file_store, json.dumps(grown), "openai", session="s")
    assert result.appended == 1
    contents = [r.event.content for r in file_store.read_session("s") if isinstance(r.event, MessageAppended)]
    assert contents == ["sys", "hello", "hi there", "and now?"]


def test_name_clash_with_another_session_is_refused(file_store: SQLiteStore) -> None:
    import_file(file_store, json.dumps(SIMPLE), "openai", session="s")
    other = [{"role": "user", "content": "something else entirely"}]
    with pytest.raises(DuplicateEventError, match="--session"):
        import_file(file_store, json.dumps(other), "openai", session="s")
    assert file_store.count_events() == 4


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("{not json", "malformed JSON"),
        ('{"messages": 3}', "'messages' list"),
        ("42", "expected a list of messages"),
        (json.dumps([{"role": "robot", "content": "x"}]), "unknown role 'robot'"),
        (json.dumps([{"role": "tool", "content": "x"}]), "tool_call_id"),
        (json.dumps([{"role": "function", "name": "f", "content": "x"}]), "without an earlier"),
        (json.dumps([{"role": "user", "content": 5}]), "content must be"),
        (
            json.dumps([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}]),
            "name",
        ),
        ("", "no conversation"),
    ],
)
def test_bad_transcripts_are_refused_and_store_unchanged(
    file_store: SQLiteStore, document: str, message: str
) -> None:
    import_file(file_store, json.dumps(SIMPLE), "openai", session="keep")
    before = file_store.count_events()
    with pytest.raises(InvalidEventError, match=message):
        import_file(file_store, document, "openai")
    assert file_store.count_events() == before
    assert file_store.verify().ok


def test_orphan_tool_result_is_kept_without_a_name(file_store: SQLiteStore) -> None:
    # Transcripts trimmed by other tools contain orphaned results; the log keeps them as they are
    # and the context projection never shows a result without its call.
    doc = [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "gone", "content": "r"}]
    [conv] = parse_openai(json.dumps(doc))
    orphan = conv.events[-1]
    assert isinstance(orphan, ToolReturned) and orphan.tool_name is None


def test_unknown_format_is_refused(file_store: SQLiteStore) -> None:
    with pytest.raises(InvalidEventError, match="unknown import format"):
        import_file(file_store, CHAT, "csv")


# --- usage values are refused unless they are token counts ------------------------------------------

BAD_USAGE = [
    ({"prompt_tokens": 10**19}, "prompt_tokens"),
    ({"prompt_tokens": 2**63}, "prompt_tokens"),
    ({"completion_tokens": 1e19}, "completion_tokens"),
    ({"completion_tokens": -1}, "completion_tokens"),
    ({"prompt_tokens": 1.5}, "prompt_tokens"),
    ({"prompt_tokens": 2.0}, "prompt_tokens"),
    ({"prompt_tokens": "12"}, "prompt_tokens"),
    ({"completion_tokens": True}, "completion_tokens"),
    ({"input_tokens": [1]}, "input_tokens"),
    ({"prompt_tokens_details": {"cached_tokens": 1.5}}, "cached_tokens"),
    ({"completion_tokens_details": {"reasoning_tokens": 2**64}}, "reasoning_tokens"),
    ({"prompt_tokens_details": "many"}, "prompt_tokens_details"),
    ({"completion_tokens_details": [1]}, "completion_tokens_details"),
]


@pytest.mark.parametrize(("usage", "field"), BAD_USAGE)
def test_usage_out_of_range_or_not_an_integer_is_refused(
    file_store: SQLiteStore, usage: dict[str, object], field: str
) -> None:
    import_file(file_store, json.dumps(SIMPLE), "openai", session="keep")
    before = file_store.count_events()
    good = {"id": "fine", "messages": SIMPLE}
    bad = {"id": "conv-7", "messages": SIMPLE, "usage": usage}
    text = json.dumps(good) + "\n" + json.dumps(bad)
    with pytest.raises(InvalidEventError) as caught:
        import_file(file_store, text, "openai")
    message = str(caught.value)
    assert field in message and "line 2" in message and "conv-7" in message, message
    assert "\n" not in message
    assert file_store.count_events() == before  # the good conversation before it is not stored either
    assert file_store.head_version("fine") == 0
    assert file_store.verify().ok


def test_usage_that_is_not_an_object_is_refused(file_store: SQLiteStore) -> None:
    with pytest.raises(InvalidEventError, match="usage must be an object"):
        import_file(file_store, json.dumps({"messages": SIMPLE, "usage": 12}), "openai")
    assert file_store.count_events() == 0


def test_largest_usage_values_are_kept(file_store: SQLiteStore) -> None:
    usage = {"prompt_tokens": MAX_TOKENS, "completion_tokens": 0, "prompt_tokens_details": None}
    import_file(file_store, json.dumps({"messages": SIMPLE, "usage": usage}), "openai", session="s")
    recorded = file_store.read_session("s")[-1].event
    assert isinstance(recorded, UsageRecorded) and recorded.input_tokens == MAX_TOKENS
    usage["prompt_tokens"] = MAX_TOKENS + 1
    with pytest.raises(InvalidEventError, match="prompt_tokens must be a whole number"):
        import_file(file_store, json.dumps({"messages": SIMPLE, "usage": usage}), "openai", session="t")


def test_a_tool_messages_name_survives_the_openai_round_trip() -> None:
    from turnlog.exporters import export_openai

    doc = {
        "id": "c",
        "messages": [
            {"role": "user", "content": "find it"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "grep", "arguments": "{}"}},
                {"id": "t2", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "t1", "name": "grep", "content": "found"},
            {"role": "tool", "tool_call_id": "t2", "content": "a b"},
        ],
    }  # fmt: skip
    with SQLiteStore.open(":memory:") as store:
        import_file(store, json.dumps(doc), "openai")
        tools = [m for m in export_openai(store, "c")["messages"] if m["role"] == "tool"]
        # The name given is kept; one not given is the call's function name.
        assert [(m["tool_call_id"], m.get("name")) for m in tools] == [("t1", "grep"), ("t2", "ls")]
