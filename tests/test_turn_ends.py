"""A long text counted (as a turn's catch-up counts it) is capped by the build that follows from the
ids its count made: the head and tail are not encoded again, and the capped text is the same."""

from __future__ import annotations

import random

import pytest

from turnlog.projections.capping import cap_text
from turnlog.projections.context_capping import output_notice
from turnlog.store import tokenizer as tokenizer_module
from turnlog.store.tokenizer import forget_counts, load_tokenizer

WORDS = [
    "alpha",
    "beta",
    "  ",
    "\n",
    "\t",
    "42",
    "1234567",
    "é",
    "日本語",
    "::",
    "'s",
    "//",
    "\r\n",
    "😀",
    "x" * 30,
]


def _texts() -> list[str]:
    rng = random.Random(20)
    texts = []
    for _ in range(40):
        texts.append(
            "".join(
                rng.choice(WORDS) + rng.choice(["", " ", "\n", "-"]) for _ in range(rng.randint(300, 3000))
            )
        )
    texts.append("\n".join(f"line {i}: value={i * 7}" for i in range(3000)))
    texts.append(" " * 5000 + "end")
    return texts


def _capped(text: str, cap: int, counted_first: bool) -> tuple[str, int, int, int]:
    """Capped after a count that remembered the text's ids, or (not ``counted_first``) with no ids
    remembered at all: every head and tail encoded from the text, as before."""
    tok = load_tokenizer()
    forget_counts()
    kept = tokenizer_module.ENDS_MIN
    if counted_first:
        tok.count(text)
    else:
        tokenizer_module.ENDS_MIN = 10**9
    try:
        got = cap_text(
            text, cap, tok, output_notice("e" * 26, is_artifact=False), total_tokens=tok.count(text)
        )
    finally:
        tokenizer_module.ENDS_MIN = kept
    return got.text, got.tokens, got.total_tokens, got.shown_tokens


@pytest.mark.parametrize("cap", [64, 1000, 4000])
def test_capped_the_same_from_remembered_ids(cap: int) -> None:
    tok = load_tokenizer()
    hits = 0
    for text in _texts():
        fresh = _capped(text, cap, counted_first=False)
        assert _capped(text, cap, counted_first=True) == fresh
        assert fresh[1] == tok.count(fresh[0])  # the count given is the text's
        hits += tok._known_head(text, 50, 316) is not None
    assert hits > 20  # most of these texts are capped from their remembered ids


def test_head_and_tail_not_encoded_again_after_a_count(monkeypatch: pytest.MonkeyPatch) -> None:
    tok = load_tokenizer()
    text = "\n".join(f"row {i}: status ok, took {i % 97} ms" for i in range(4000))
    forget_counts()
    tok.count(text)
    encoded: list[int] = []
    real = tok._encoding

    class Watch:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def encode_ordinary(self, piece: str) -> list[int]:
            encoded.append(len(piece))
            return list(real.encode_ordinary(piece))

    monkeypatch.setattr(tok, "_loaded", Watch())
    head, _ = tok.head_counted(text, 600)
    tail, _ = tok.tail_counted(text, 300)
    assert encoded == []  # without the remembered ids each encodes a slice of thousands of characters
    monkeypatch.setattr(tok, "_loaded", real)
    forget_counts()
    assert (head, tail) == (tok.head(text, 600), tok.tail(text, 300))


def test_ends_kept_are_bounded() -> None:
    tok = load_tokenizer()
    forget_counts()
    for i in range(tokenizer_module.ENDS_KEPT + 5):
        tok.count(f"{i} " + "word " * 400)
    assert len(tokenizer_module._ENDS) == tokenizer_module.ENDS_KEPT
    forget_counts()
