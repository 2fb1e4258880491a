"""Summarizers: the extractive default, the OpenAI-compatible client against a fake server on
127.0.0.1, an external command, and plain callables; every failure is a SummarizerError."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.helpers.fake_openai import FakeOpenAI, completion, fake_server  # noqa: F401  (the fixture)
from turnlog.store import load_tokenizer
from turnlog.summarizers import (
    CallableSummarizer,
    CommandSummarizer,
    ExtractiveSummarizer,
    OpenAISummarizer,
    SummarizerError,
    SummaryRequest,
    SummaryResult,
    TranscriptItem,
    as_summarizer,
)

TOK = load_tokenizer()


def request(items: list[TranscriptItem], target: int = 200) -> SummaryRequest:
    return SummaryRequest(
        session_id="s",
        first_version=1,
        last_version=len(items),
        level=0,
        items=tuple(items),
        transcript="\n".join(f"{i.role}: {i.text}" for i in items),
        target_tokens=target,
        count=TOK.count,
    )


ITEMS = [
    TranscriptItem(1, "user", "Please fix the crash in src/parser.py when the input is empty."),
    TranscriptItem(
        2, "assistant", "Let me look at the parser.", tool_calls=('read_file({"path": "src/parser.py"})',)
    ),
    TranscriptItem(3, "tool", "def parse(text):\n    return text.split()[0]\n", tool_name="read_file"),
    TranscriptItem(4, "assistant", "Found it: `parse()` indexes [0] of an empty list. I will guard it."),
    TranscriptItem(
        5,
        "tool",
        "======= FAILURES =======\nE   IndexError: list index out of range\n======",
        tool_name="pytest",
        is_error=True,
    ),
]


def test_extractive_keeps_requests_decisions_tools_errors_paths() -> None:
    result = ExtractiveSummarizer().summarize(request(ITEMS))
    text = result.text
    assert "User: Please fix the crash in src/parser.py" in text
    assert "Found it" in text
    assert 'read_file({"path": "src/parser.py"})' in text
    assert "pytest failed: E   IndexError: list index out of range" in text
    assert "src/parser.py" in text.split("Files:")[1]
    assert "parse()" in text.split("Identifiers:")[1]
    assert result.usage is None


def test_extractive_is_deterministic_and_fits_the_target() -> None:
    many = ITEMS * 40
    first = ExtractiveSummarizer().summarize(request(many, target=80)).text
    again = ExtractiveSummarizer().summarize(request(many, target=80)).text
    assert first == again
    assert TOK.count(first) <= 80


def test_extractive_condenses_summaries() -> None:
    summaries = [
        TranscriptItem(1, "summary", "User: do A\nAssistant: decided B\nFiles: a.py"),
        TranscriptItem(9, "summary", "User: do C\nrun failed: ValueError"),
    ]
    text = ExtractiveSummarizer().summarize(request(summaries)).text
    assert text.splitlines()[:2] == ["User: do A", "User: do C"]
    assert "run failed: ValueError" in text


# --- OpenAI-compatible endpoint on 127.0.0.1 ----------------------------------------------------


def test_openai_request_shape_and_usage(fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_KEY", "sk-test")
    fake.reply = completion("The user asked to fix src/parser.py; the fix guards empty input.")
    summarizer = OpenAISummarizer("gpt-4o-mini", base_url=fake.url, api_key_env="TEST_KEY", timeout=5)
    result = summarizer.summarize(request(ITEMS, target=150))
    assert result.text.startswith("The user asked")
    assert result.usage is not None and (result.usage.input_tokens, result.usage.output_tokens) == (321, 45)
    sent = fake.requests[0]
    assert sent["model"] == "gpt-4o-mini" and sent["max_tokens"] == 150 and sent["temperature"] == 0
    assert sent["messages"][0]["role"] == "system" and "150 tokens" in sent["messages"][0]["content"]
    assert "src/parser.py" in sent["messages"][1]["content"]
    assert fake.headers[0]["Authorization"] == "Bearer sk-test"
    assert summarizer.info.name == "openai" and summarizer.info.model == "gpt-4o-mini"


@pytest.mark.parametrize(
    ("status", "reply", "message"),
    [
        (500, {"error": "boom"}, "answered 500"),
        (401, {"error": "no key"}, "is $OPENAI_API_KEY set?"),
        (200, b"not json", "did not answer JSON"),
        (200, {"choices": []}, "without choices"),
    ],
)
def test_openai_failures(fake: FakeOpenAI, status: int, reply: Any, message: str) -> None:
    fake.status, fake.reply = status, reply
    with pytest.raises(SummarizerError, match=message.replace("$", r"\$").replace("?", r"\?")):
        OpenAISummarizer("m", base_url=fake.url, timeout=5).summarize(request(ITEMS))


def test_openai_timeout(fake: FakeOpenAI) -> None:
    fake.reply, fake.delay = completion("late"), 2.0
    with pytest.raises(SummarizerError, match=r"timed out after 0\.3 s"):
        OpenAISummarizer("m", base_url=fake.url, timeout=0.3).summarize(request(ITEMS))


def test_openai_unreachable() -> None:
    with pytest.raises(SummarizerError, match="cannot reach"):
        OpenAISummarizer("m", base_url="http://127.0.0.1:9/v1", timeout=2).summarize(request(ITEMS))


# --- command and callables ----------------------------------------------------------------------


def test_command_reads_stdin_writes_stdout() -> None:
    script = (
        "import os, sys; data = sys.stdin.read(); "
        "print(f'{len(data)} chars, target {os.environ[\"TURNLOG_TARGET_TOKENS\"]}')"
    )
    summarizer = CommandSummarizer([sys.executable, "-c", script])
    req = request(ITEMS, target=77)
    assert summarizer.summarize(req).text.strip() == f"{len(req.transcript)} chars, target 77"


def test_command_failures() -> None:
    with pytest.raises(SummarizerError, match="exited with 3: nope"):
        CommandSummarizer(
            [sys.executable, "-c", "import sys; sys.stderr.write('nope\\n'); sys.exit(3)"]
        ).summarize(request(ITEMS))
    with pytest.raises(SummarizerError, match="not found"):
        CommandSummarizer("/no/such/program").summarize(request(ITEMS))
    with pytest.raises(SummarizerError, match="timed out"):
        CommandSummarizer([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.3).summarize(
            request(ITEMS)
        )
    with pytest.raises(SummarizerError, match="empty"):
        CommandSummarizer("")


def test_callables() -> None:
    def mine(req: SummaryRequest) -> str:
        return f"{len(req.items)} items"

    wrapped = as_summarizer(mine)
    assert wrapped.info.name == "mine" and wrapped.summarize(request(ITEMS)).text == "5 items"
    full = CallableSummarizer(lambda r: SummaryResult("x"), name="lambda-sum", model="local")
    assert full.summarize(request(ITEMS)).text == "x" and full.info.model == "local"
    with pytest.raises(TypeError):
        as_summarizer(42)
