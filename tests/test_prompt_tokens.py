"""The input of a model call estimated from the log by OpenAI's chat rule: checked against the
cookbook's own example (whose count the API confirmed), by hand, and on stored events."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from turnlog.projections.prompt_tokens import (
    PromptMessage,
    call_estimates,
    message_tokens,
    prompt_messages,
    prompt_tokens,
)
from turnlog.store import (
    MessageAppended,
    SessionStarted,
    SQLiteStore,
    ToolCall,
    ToolReturned,
    UsageRecorded,
    load_tokenizer,
)

TOK = load_tokenizer()

# The OpenAI cookbook's example ("How to count tokens with tiktoken"): 129 prompt tokens, as
# counted by num_tokens_from_messages and by the API for gpt-3.5-turbo-0613 and gpt-4-0613.
COOKBOOK = [
    ("system", "You are a helpful, pattern-following assistant that translates corporate jargon "
     "into plain English.", None),
    ("system", "New synergies will help drive top-line growth.", "example_user"),
    ("system", "Things working well together will increase revenue.", "example_assistant"),
    ("system", "Let's circle back when we have more bandwidth to touch base on opportunities for "
     "increased leverage.", "example_user"),
    ("system", "Let's talk later when we're less busy about how to do better.", "example_assistant"),
    ("user", "This late pivot means we don't have time to boil the ocean for the client deliverable.",
     None),
]  # fmt: skip


def _message(role: str, content: str, name: str | None = None) -> PromptMessage:
    tokens = TOK.count(content) + (TOK.count(name) if name else 0)
    return PromptMessage(role, tokens, named=name is not None)


def test_the_cookbook_example_counts_129() -> None:
    assert prompt_tokens([_message(*m) for m in COOKBOOK], TOK) == 129


def test_message_cost_by_hand() -> None:
    # 3 per message, the role word, the values, 1 more for a name.
    assert message_tokens(PromptMessage("user", 10), TOK) == 3 + TOK.count("user") + 10
    assert message_tokens(PromptMessage("user", 10, named=True), TOK) == 3 + TOK.count("user") + 10 + 1
    assert message_tokens(PromptMessage("critic", 2), TOK) == 3 + TOK.count("critic") + 2
    assert prompt_tokens([], TOK) == 3


def test_each_call_is_estimated_from_the_messages_before_it() -> None:
    messages = [
        _message("system", "be brief"),
        _message("user", "hi"),
        _message("assistant", "hello"),
        _message("user", "bye"),
        _message("assistant", "goodbye"),
    ]
    assert call_estimates(messages, TOK) == [
        prompt_tokens(messages[:2], TOK),
        prompt_tokens(messages[:4], TOK),
    ]
    assert call_estimates(messages[:2], TOK) == []


def test_stored_events_give_the_messages_and_tool_results(tmp_path: Path) -> None:
    store = SQLiteStore.open(tmp_path / "t.db")
    try:
        store.append(
            "s",
            [
                SessionStarted(model="gpt-4o"),
                MessageAppended(role="user", content="list the files", name="ada"),
                MessageAppended(role="assistant", tool_calls=(ToolCall(id="c1", name="ls", arguments="{}"),)),
                ToolReturned(tool_call_id="c1", tool_name="ls", content="a.py b.py"),
                MessageAppended(role="assistant", content="a.py and b.py"),
                UsageRecorded(model="gpt-4o", input_tokens=1, output_tokens=1),
            ],
        )
        records = store.read_session("s")
    finally:
        store.close()
    messages = prompt_messages(records)
    assert [(m.role, m.named) for m in messages] == [
        ("user", True),
        ("assistant", False),
        ("tool", False),
        ("assistant", False),
    ]
    assert messages[0].tokens == TOK.count("list the files") + TOK.count("ada")
    assert messages[2].tokens == TOK.count("a.py b.py") + TOK.count("c1")
    with pytest.raises(ValueError, match="no token count"):
        prompt_messages([dataclasses.replace(records[1], tokens=None)])
