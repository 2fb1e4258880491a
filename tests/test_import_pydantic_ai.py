"""Importing pydantic-ai message histories: every part kind of the committed fixtures (serialised by
pydantic-ai itself, current and 0.4 versions), usage of both generations, session naming, idempotent
re-imports, and clear errors that leave the store unchanged.

The fixtures were made by serialising real ``ModelRequest`` / ``ModelResponse`` objects with
``ModelMessagesTypeAdapter.dump_json``: regenerate them with
``python -m tests.test_import_pydantic_ai current|native PATH`` with pydantic-ai-slim 2.x installed,
or ``... legacy PATH`` in an environment with pydantic-ai-slim 0.4.x and turnlog's test dependencies
(they give the committed files byte for byte). pydantic-ai is not a dependency of turnlog: the
importer reads the JSON on its own."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from turnlog.importers import import_file, parse_pydantic_ai
from turnlog.projections.context import ContextPolicy, build_context
from turnlog.store import (
    Event,
    InvalidEventError,
    MessageAppended,
    MessageRemoved,
    SessionStarted,
    SQLiteStore,
    ToolReturned,
    UsageRecorded,
)

CURRENT = (FIXTURES / "pydantic_ai_coding_run.json").read_text()
LEGACY = (FIXTURES / "pydantic_ai_legacy_v0.json").read_text()
NATIVE = (FIXTURES / "pydantic_ai_native_tools.json").read_text()
CONVERSATION_ID = "0195a3c2-7e10-7c4e-9d2b-3f1a5e6b7c80"


@pytest.fixture
def store() -> Iterator[SQLiteStore]:
    with SQLiteStore.open(":memory:") as opened:
        yield opened


def shape(events: tuple[Event, ...]) -> list[str]:
    """Each event as a short tag: its type, and for messages the role."""
    tags = []
    for event in events:
        if isinstance(event, MessageAppended):
            tags.append(f"{event.role}{'+calls' if event.tool_calls else ''}")
        elif isinstance(event, ToolReturned):
            tags.append("tool_error" if event.is_error else "tool")
        else:
            tags.append(event.type)
    return tags


def test_current_history_maps_every_part() -> None:
    [conv] = parse_pydantic_ai(CURRENT)
    assert conv.session_id == CONVERSATION_ID
    assert shape(conv.events) == [
        "session_started",
        "system",  # the request's instructions, once
        "system",  # system-prompt
        "user",  # user-prompt (text)
        "assistant+calls",  # thinking left out, text, two tool calls
        "usage_recorded",
        "tool",  # tool-return, text
        "tool",  # tool-return, dict content
        "assistant+calls",
        "usage_recorded",
        "tool_error",  # outcome failed
        "assistant+calls",
        "usage_recorded",
        "tool_error",  # outcome retried, validation errors
        "assistant",  # two text parts, one message
        "usage_recorded",
        "user",  # a list of user content
        "assistant",
        "usage_recorded",
        "user",  # retry-feedback
        "assistant",
        "usage_recorded",
    ]
    events = conv.events
    started = events[0]
    assert isinstance(started, SessionStarted)
    assert started.model == "claude-sonnet-4-5-20250929"
    assert started.title == "Invoice totals are off by one cent. Find and fix the rounding bug."
    assert started.metadata == {"imported_from": "pydantic-ai", "conversation_id": CONVERSATION_ID}
    assert [e.content for e in events[1:4] if isinstance(e, MessageAppended)] == [
        "You are a coding agent. Use the tools to read and edit files and to run the tests.",
        "Repository: invoice-tool (Python 3.12).",
        "Invoice totals are off by one cent. Find and fix the rounding bug.",
    ]
    first = events[4]
    assert isinstance(first, MessageAppended) and first.tool_calls
    assert first.content == "I'll read the totals module and run the tests."
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("toolu_01A", "read_file", '{"path": "invoice/totals.py"}'),
        ("toolu_01B", "run_tests", '{"path": "tests/test_totals.py"}'),  # a JSON string stays verbatim
    ]
    assert not any("probably rounded per line" in getattr(e, "content", "") for e in events)
    usage = events[5]
    assert isinstance(usage, UsageRecorded)
    assert (usage.model, usage.input_tokens, usage.output_tokens) == ("claude-sonnet-4-5-20250929", 1850, 142)
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (1536, 120)
    assert usage.run_id == "0195a3c2-7e10-7c4e-9d2b-3f1a5e6b7c81"
    assert usage.response_id == "msg_01XFDUDYJgAACzvnptvVoYEL"
    source, tests = events[6], events[7]
    assert isinstance(source, ToolReturned) and source.content.startswith("def line_0(")
    assert (source.tool_call_id, source.tool_name) == ("toolu_01A", "read_file")
    assert isinstance(tests, ToolReturned)
    assert json.loads(tests.content) == {
        "passed": 11,
        "failed": 1,
        "failures": ["test_totals.py::test_half_cent"],
    }
    failed, retried = events[10], events[13]
    assert isinstance(failed, ToolReturned) and failed.content.startswith("patch rejected")
    assert isinstance(retried, ToolReturned) and retried.tool_name == "run_tests"
    assert json.loads(retried.content)[0]["msg"] == "Input should be a valid string"
    answer = events[14]
    assert isinstance(answer, MessageAppended)
    assert answer.content.endswith("which is what it does now.\n\nAll 12 tests pass.")
    reasoning = events[15]
    assert isinstance(reasoning, UsageRecorded) and reasoning.reasoning_tokens == 12
    media = events[16]
    assert isinstance(media, MessageAppended)
    assert media.content == (
        "Here is the invoice that was wrong:\n"
        "[image-url omitted: https://example.com/invoices/1042.png]\n"
        "[binary omitted: application/pdf]\n"
        "Does it total correctly now?"
    )
    feedback = events[19]
    assert isinstance(feedback, MessageAppended) and feedback.content == "the total must not be negative"


def test_legacy_history_with_retry_prompts_and_old_usage_fields() -> None:
    [conv] = parse_pydantic_ai(LEGACY)
    assert conv.session_id.startswith("pydantic-ai-")
    assert shape(conv.events) == [
        "session_started",
        "system",
        "user",
        "assistant+calls",
        "usage_recorded",
        "tool_error",  # retry-prompt with a tool name
        "assistant+calls",
        "usage_recorded",
        "tool",
        "assistant",
        "usage_recorded",
        "user",  # retry-prompt without a tool name
        "assistant",
        "usage_recorded",
    ]
    usage = conv.events[4]
    assert isinstance(usage, UsageRecorded)
    assert (usage.input_tokens, usage.output_tokens) == (310, 24)  # request_tokens, response_tokens
    assert (usage.cache_read_tokens, usage.reasoning_tokens) == (256, 8)  # from details
    assert usage.response_id == "chatcmpl-Bq1" and usage.run_id is None
    retry = conv.events[5]
    assert isinstance(retry, ToolReturned)
    assert (retry.tool_call_id, retry.tool_name, retry.is_error) == ("call_Xq1", "get_forecast", True)
    assert json.loads(retry.content)[0]["type"] == "int_parsing"
    plain = conv.events[11]
    assert isinstance(plain, MessageAppended) and plain.content == "Answer in one word: yes or no."


def test_native_tools_files_changed_instructions_and_compaction() -> None:
    [conv] = parse_pydantic_ai(NATIVE)
    assert shape(conv.events) == [
        "session_started",
        "system",
        "user",
        "assistant+calls",  # builtin tool call, text and a file
        "tool",  # builtin tool return, after the message that made the call
        "usage_recorded",
        "message_removed",  # the instructions changed: the old ones are replaced...
        "system",  # ...by the new ones
        "user",
        "assistant",  # compaction left out
        "usage_recorded",
    ]
    user = conv.events[2]
    assert isinstance(user, MessageAppended)
    assert user.content == "What is the weather in Lyon? \nAnswer with a picture."  # cache point dropped
    reply = conv.events[3]
    assert isinstance(reply, MessageAppended) and reply.tool_calls
    assert reply.content == "It is 18°C and cloudy in Lyon.\n\n[file omitted: image/png]"
    assert reply.tool_calls[0].name == "web_search"
    result = conv.events[4]
    assert isinstance(result, ToolReturned) and result.tool_call_id == "ws_1"
    usage = conv.events[5]
    assert isinstance(usage, UsageRecorded) and usage.reasoning_tokens == 128 and usage.run_id == "run-a"
    removed, changed = conv.events[6], conv.events[7]
    assert isinstance(removed, MessageRemoved) and removed.target_event_ids == (conv.events[1].event_id,)
    assert isinstance(changed, MessageAppended) and changed.content.endswith("Today is 2025-09-02.")


def test_import_then_context_audit_and_verify(store: SQLiteStore) -> None:
    result = import_file(store, CURRENT, "pydantic-ai")
    assert result.sessions == [{"session_id": CONVERSATION_ID, "events": 22, "appended": 22, "skipped": 0}]
    built = build_context(store, CONVERSATION_ID, ContextPolicy(budget=3000, format="anthropic"))
    blocks = [b for turn in built.rendered["messages"] for b in turn["content"]]
    uses = {b["id"] for b in blocks if b["type"] == "tool_use"}
    results = {b["tool_use_id"] for b in blocks if b["type"] == "tool_result"}
    assert uses == results == {"toolu_01A", "toolu_01B", "toolu_01C", "toolu_01D"}
    assert store.verify().ok


def test_reimport_is_idempotent_and_a_grown_history_appends_the_rest(store: SQLiteStore) -> None:
    history = json.loads(LEGACY)
    first = import_file(store, json.dumps(history[:4]), "pydantic-ai")
    [conv] = parse_pydantic_ai(LEGACY)
    assert first.sessions[0]["session_id"] == conv.session_id  # named by the first message
    grown = import_file(store, LEGACY, "pydantic-ai")
    assert grown.sessions[0]["skipped"] == first.appended
    assert grown.appended == len(conv.events) - first.appended
    again = import_file(store, LEGACY, "pydantic-ai")
    assert again.appended == 0
    assert [r.event_id for r in store.read_session(conv.session_id)] == [e.event_id for e in conv.events]


def test_several_histories_and_session_names(store: SQLiteStore) -> None:
    both = json.dumps([json.loads(CURRENT), json.loads(LEGACY)])
    assert [c.session_id for c in parse_pydantic_ai(both, session="agent")] == ["agent-1", "agent-2"]
    lines = "\n".join(json.dumps(json.loads(text)) for text in (CURRENT, LEGACY, NATIVE))
    conversations = parse_pydantic_ai(lines)
    assert len(conversations) == 3 and conversations[0].session_id == CONVERSATION_ID
    [named] = parse_pydantic_ai(LEGACY, session="weather")
    assert named.session_id == "weather"
    result = import_file(store, lines, "pydantic-ai", session="batch")
    assert [s["session_id"] for s in result.sessions] == ["batch-1", "batch-2", "batch-3"]


def _message(*parts: dict[str, Any], kind: str = "request") -> dict[str, Any]:
    return {"kind": kind, "parts": list(parts)}


USER = {"part_kind": "user-prompt", "content": "hi"}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("", "no message history"),
        ("{not json", "malformed JSON"),
        ('{"kind": "request"}', "expected a JSON list of pydantic-ai messages"),
        ("[]", "holds no messages"),
        (json.dumps([{"role": "user", "content": "hi"}]), "message 1: expected a pydantic-ai message"),
        (json.dumps([{"kind": "request", "parts": {}}]), "'parts' must be a list"),
        (json.dumps([_message({"content": "x"})]), "part 1: expected a part"),
        (
            json.dumps([_message(USER, {"part_kind": "mystery"})]),
            "part 2: unknown request part_kind 'mystery'",
        ),
        (
            json.dumps([_message(USER), _message({"part_kind": "holo"}, kind="response")]),
            "message 2, part 1: unknown response part_kind 'holo'",
        ),
        (json.dumps([_message({"part_kind": "user-prompt", "content": 5})]), "must be a string or a list"),
        (
            json.dumps([_message({"part_kind": "tool-return", "tool_name": "f", "content": "x"})]),
            "needs 'tool_call_id'",
        ),
        (
            json.dumps(
                [_message({"part_kind": "tool-call", "tool_name": "", "tool_call_id": "c"}, kind="response")]
            ),
            "name",
        ),
        (
            json.dumps(
                [
                    {
                        "kind": "response",
                        "parts": [{"part_kind": "text", "content": "x"}],
                        "usage": {"input_tokens": -3},
                    }
                ]
            ),
            "input_tokens must be a whole number of tokens",
        ),
        *[
            (
                json.dumps(
                    [{"kind": "response", "parts": [{"part_kind": "text", "content": "x"}], "usage": usage}]
                ),
                message,
            )
            for usage, message in [
                ({"output_tokens": 2**63}, "output_tokens must be a whole number"),
                ({"input_tokens": 1.5}, "input_tokens must be a whole number"),
                ({"input_tokens": "12"}, "input_tokens must be a whole number"),
                ({"details": {"reasoning_tokens": 10**19}}, "reasoning_tokens must be a whole number"),
                ("lots", "usage must be an object"),
            ]
        ],
        (json.dumps([_message(USER)]) + "\n" + "{broken", "line 2: malformed JSON"),
        (
            json.dumps(
                [_message({"part_kind": "tool-return", "tool_call_id": "c1", "content": "x", "outcome": []})]
            ),
            "'outcome' must be a string",
        ),
    ],
)
def test_bad_histories_are_refused_and_store_unchanged(
    store: SQLiteStore, document: str, message: str
) -> None:
    import_file(store, LEGACY, "pydantic-ai", session="keep")
    before = store.count_events()
    with pytest.raises(InvalidEventError, match=message):
        import_file(store, document, "pydantic-ai")
    assert store.count_events() == before
    assert store.verify().ok


def test_the_fixtures_are_what_pydantic_ai_reads() -> None:
    messages = pytest.importorskip("pydantic_ai.messages")
    for text in (CURRENT, LEGACY, NATIVE):
        loaded = messages.ModelMessagesTypeAdapter.validate_json(text)
        assert len(loaded) == len(json.loads(text))


# --- how the fixtures were made ------------------------------------------------------------------------


def _write(path: str, messages: list[Any]) -> None:
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    Path(path).write_bytes(ModelMessagesTypeAdapter.dump_json(messages, indent=2) + b"\n")


def make_current(path: str) -> None:  # pragma: no cover - run by hand, with pydantic-ai-slim 2.x
    """A two-run coding session: every request and response part of the current pydantic-ai."""
    from datetime import UTC, datetime, timedelta

    from pydantic_ai import messages as m
    from pydantic_ai.usage import RequestUsage

    t0 = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)
    model = "claude-sonnet-4-5-20250929"
    instructions = "You are a coding agent. Use the tools to read and edit files and to run the tests."
    run1, run2 = "0195a3c2-7e10-7c4e-9d2b-3f1a5e6b7c81", "0195a3c2-9a44-7b10-8e21-0c9d8e7f6a52"
    source = "".join(
        f"def line_{i}(amount: Decimal) -> Decimal:\n    return amount.quantize(CENT, ROUND_HALF_UP)\n\n"
        for i in range(30)
    )

    def at(seconds: float) -> datetime:
        return t0 + timedelta(seconds=seconds)

    def req(parts: list[Any], seconds: float, run: str) -> Any:
        return m.ModelRequest(
            parts=parts,
            timestamp=at(seconds),
            instructions=instructions,
            run_id=run,
            conversation_id=CONVERSATION_ID,
        )

    def resp(parts: list[Any], seconds: float, run: str, usage: Any, response_id: str) -> Any:
        calls = any(isinstance(p, m.ToolCallPart) for p in parts)
        return m.ModelResponse(
            parts=parts,
            usage=usage,
            model_name=model,
            timestamp=at(seconds),
            provider_name="anthropic",
            provider_response_id=response_id,
            finish_reason="tool_call" if calls else "stop",
            run_id=run,
            conversation_id=CONVERSATION_ID,
        )

    errors = [{"type": "string_type", "loc": ("path",), "msg": "Input should be a valid string", "input": 3}]
    history = [
        req(
            [
                m.SystemPromptPart("Repository: invoice-tool (Python 3.12).", timestamp=at(0)),
                m.UserPromptPart(
                    "Invoice totals are off by one cent. Find and fix the rounding bug.", timestamp=at(0)
                ),
            ],
            0,
            run1,
        ),
        resp(
            [
                m.ThinkingPart(
                    "The totals are probably rounded per line with float arithmetic.",
                    signature="EqQBCkYIBxgCKkA",
                    provider_name="anthropic",
                ),
                m.TextPart("I'll read the totals module and run the tests."),
                m.ToolCallPart("read_file", {"path": "invoice/totals.py"}, tool_call_id="toolu_01A"),
                m.ToolCallPart("run_tests", '{"path": "tests/test_totals.py"}', tool_call_id="toolu_01B"),
            ],
            3,
            run1,
            RequestUsage(
                input_tokens=1850, output_tokens=142, cache_read_tokens=1536, cache_write_tokens=120
            ),
            "msg_01XFDUDYJgAACzvnptvVoYEL",
        ),
        req(
            [
                m.ToolReturnPart("read_file", source, tool_call_id="toolu_01A", timestamp=at(4)),
                m.ToolReturnPart(
                    "run_tests",
                    {"passed": 11, "failed": 1, "failures": ["test_totals.py::test_half_cent"]},
                    tool_call_id="toolu_01B",
                    timestamp=at(6),
                ),
            ],
            6,
            run1,
        ),
        resp(
            [
                m.ToolCallPart(
                    "edit_file",
                    {
                        "path": "invoice/totals.py",
                        "old": "round(x, 2)",
                        "new": "x.quantize(CENT, ROUND_HALF_UP)",
                    },
                    tool_call_id="toolu_01C",
                )
            ],
            9,
            run1,
            RequestUsage(input_tokens=3320, output_tokens=96, cache_read_tokens=1850),
            "msg_01Y",
        ),
        req(
            [
                m.ToolReturnPart(
                    "edit_file",
                    "patch rejected: 'round(x, 2)' not found in invoice/totals.py",
                    tool_call_id="toolu_01C",
                    timestamp=at(10),
                    outcome="failed",
                )
            ],
            10,
            run1,
        ),
        resp(
            [m.ToolCallPart("run_tests", {"path": 3}, tool_call_id="toolu_01D")],
            12,
            run1,
            RequestUsage(input_tokens=3480, output_tokens=40, cache_read_tokens=3320),
            "msg_01Z",
        ),
        req(
            [
                m.ToolReturnPart(
                    "run_tests",
                    errors,
                    tool_call_id="toolu_01D",
                    timestamp=at(12),
                    outcome="retried",
                    retry=m.RetryInfo("validation_error", attempt=1, max_retries=3),
                )
            ],
            12,
            run1,
        ),
        resp(
            [
                m.TextPart(
                    "The code already uses Decimal; the failing test expects ROUND_HALF_UP, "
                    "which is what it does now."
                ),
                m.TextPart("All 12 tests pass."),
            ],
            15,
            run1,
            RequestUsage(
                input_tokens=3600, output_tokens=61, cache_read_tokens=3480, output_reasoning_tokens=12
            ),
            "msg_020",
        ),
        req(
            [
                m.UserPromptPart(
                    [
                        "Here is the invoice that was wrong:",
                        m.ImageUrl("https://example.com/invoices/1042.png"),
                        m.BinaryContent(data=b"%PDF-1.7 fake", media_type="application/pdf"),
                        "Does it total correctly now?",
                    ],
                    timestamp=at(60),
                )
            ],
            60,
            run2,
        ),
        resp(
            [m.TextPart('{"total": "-12.50"}')],
            64,
            run2,
            RequestUsage(input_tokens=4100, output_tokens=20, cache_read_tokens=3600),
            "msg_021",
        ),
        req(
            [
                m.RetryFeedbackPart(
                    "the total must not be negative",
                    retry=m.RetryInfo("model_retry", attempt=1, max_retries=1),
                    timestamp=at(64),
                )
            ],
            64,
            run2,
        ),
        resp(
            [m.TextPart('{"total": "12.50"}')],
            66,
            run2,
            RequestUsage(input_tokens=4160, output_tokens=20, cache_read_tokens=4100),
            "msg_022",
        ),
    ]
    _write(path, history)


def make_native(path: str) -> None:  # pragma: no cover - run by hand, with pydantic-ai-slim 2.x
    """Provider-side tools, a file from the model, a cache point, changed instructions, compaction."""
    from datetime import UTC, datetime, timedelta

    from pydantic_ai import messages as m
    from pydantic_ai.usage import RequestUsage

    t0 = datetime(2025, 9, 2, 8, 0, tzinfo=UTC)
    model = "gpt-5-2025-08-07"
    history = [
        m.ModelRequest(
            parts=[
                m.UserPromptPart(
                    [
                        "What is the weather in Lyon? ",
                        m.TextContent("Answer with a picture.", metadata={"source": "app"}),
                        m.CachePoint(),
                    ],
                    timestamp=t0,
                )
            ],
            timestamp=t0,
            instructions="You are a helpful assistant.",
            run_id="run-a",
        ),
        m.ModelResponse(
            parts=[
                m.NativeToolCallPart(
                    "web_search", {"query": "weather Lyon"}, tool_call_id="ws_1", provider_name="openai"
                ),
                m.NativeToolReturnPart(
                    "web_search",
                    {"status": "completed", "results": [{"title": "Lyon: 18°C, cloudy"}]},
                    tool_call_id="ws_1",
                    provider_name="openai",
                    timestamp=t0 + timedelta(seconds=3),
                ),
                m.TextPart("It is 18°C and cloudy in Lyon."),
                m.FilePart(
                    m.BinaryImage(data=b"\x89PNG fake", media_type="image/png"), provider_name="openai"
                ),
            ],
            usage=RequestUsage(input_tokens=900, output_tokens=300, output_reasoning_tokens=128),
            model_name=model,
            timestamp=t0 + timedelta(seconds=4),
            provider_name="openai",
            provider_response_id="resp_68b6a1",
            run_id="run-a",
        ),
        m.ModelRequest(
            parts=[m.UserPromptPart("And tomorrow?", timestamp=t0 + timedelta(seconds=30))],
            timestamp=t0 + timedelta(seconds=30),
            instructions="You are a helpful assistant. Today is 2025-09-02.",
            run_id="run-b",
        ),
        m.ModelResponse(
            parts=[
                m.CompactionPart(
                    content="User asked about Lyon weather; answered 18°C.", provider_name="openai"
                ),
                m.TextPart("Showers are likely tomorrow."),
            ],
            usage=RequestUsage(input_tokens=1000, output_tokens=20),
            model_name=model,
            timestamp=t0 + timedelta(seconds=33),
            provider_name="openai",
            run_id="run-b",
        ),
    ]
    _write(path, history)


def make_legacy(path: str) -> None:  # pragma: no cover - run by hand, with pydantic-ai-slim 0.4.x
    """pydantic-ai 0.4: RetryPromptPart, request_tokens / response_tokens and provider details."""
    import importlib
    from datetime import UTC, datetime, timedelta

    m: Any = importlib.import_module("pydantic_ai.messages")  # the 0.4 API, not the installed one's types
    Usage: Any = importlib.import_module("pydantic_ai.usage").Usage

    t0 = datetime(2025, 7, 1, 12, 0, tzinfo=UTC)
    model = "gpt-4o-2024-08-06"

    def at(seconds: float) -> datetime:
        return t0 + timedelta(seconds=seconds)

    def usage(request: int, response: int, cached: int = 0, reasoning: int = 0) -> Any:
        details = {k: v for k, v in {"cached_tokens": cached, "reasoning_tokens": reasoning}.items() if v}
        return Usage(
            requests=1,
            request_tokens=request,
            response_tokens=response,
            total_tokens=request + response,
            details=details or None,
        )

    errors = [
        {
            "type": "int_parsing",
            "loc": ("days",),
            "msg": "Input should be a valid integer, unable to parse string as an integer",
            "input": "one",
        }
    ]
    history = [
        m.ModelRequest(
            parts=[
                m.SystemPromptPart("You are a weather assistant.", timestamp=at(0)),
                m.UserPromptPart("Will it rain in Paris tomorrow?", timestamp=at(0)),
            ]
        ),
        m.ModelResponse(
            parts=[
                m.ThinkingPart("Need the forecast for Paris.", signature="rs_abc"),
                m.ToolCallPart("get_forecast", {"city": "Paris", "days": "one"}, tool_call_id="call_Xq1"),
            ],
            usage=usage(310, 24, cached=256, reasoning=8),
            model_name=model,
            timestamp=at(2),
            vendor_id="chatcmpl-Bq1",
        ),
        m.ModelRequest(
            parts=[
                m.RetryPromptPart(errors, tool_name="get_forecast", tool_call_id="call_Xq1", timestamp=at(2))
            ]
        ),
        m.ModelResponse(
            parts=[m.ToolCallPart("get_forecast", '{"city": "Paris", "days": 1}', tool_call_id="call_Xq2")],
            usage=usage(420, 22, cached=256),
            model_name=model,
            timestamp=at(4),
            vendor_id="chatcmpl-Bq2",
        ),
        m.ModelRequest(
            parts=[
                m.ToolReturnPart(
                    "get_forecast",
                    {"city": "Paris", "rain_probability": 0.7, "summary": "showers"},
                    tool_call_id="call_Xq2",
                    timestamp=at(5),
                )
            ]
        ),
        m.ModelResponse(
            parts=[m.TextPart("Probably: 70% chance of showers.")],
            usage=usage(480, 12, cached=384),
            model_name=model,
            timestamp=at(6),
            vendor_id="chatcmpl-Bq3",
        ),
        m.ModelRequest(
            parts=[
                m.RetryPromptPart(
                    "Answer in one word: yes or no.",
                    tool_call_id="pyd_ai_93138580c53846668f37b99ded9a22ac",  # random when generated
                    timestamp=at(6),
                )
            ]
        ),
        m.ModelResponse(
            parts=[m.TextPart("Yes.")],
            usage=usage(500, 2, cached=480),
            model_name=model,
            timestamp=at(7),
            vendor_id="chatcmpl-Bq4",
        ),
    ]
    _write(path, history)


if __name__ == "__main__":  # pragma: no cover
    {"current": make_current, "native": make_native, "legacy": make_legacy}[sys.argv[1]](sys.argv[2])


def test_grown_history_reimports_when_the_prefix_had_no_response_yet(store: SQLiteStore) -> None:
    # The session's model comes from the first response; an export made before any response has
    # none, and the re-import of the grown history must still recognise it (it raised
    # DuplicateEventError: the session_started id was derived from the model too).
    history = json.loads(CURRENT)
    assert history[0]["kind"] == "request"
    first = import_file(store, json.dumps(history[:1]), "pydantic-ai")
    [conv] = parse_pydantic_ai(CURRENT)
    grown = import_file(store, CURRENT, "pydantic-ai")
    assert grown.sessions[0]["skipped"] == first.appended
    assert first.appended + grown.appended == len(conv.events)
    assert [r.event_id for r in store.read_session(conv.session_id)] == [e.event_id for e in conv.events]
    assert import_file(store, CURRENT, "pydantic-ai").appended == 0
