"""Random texts from a small vocabulary of prose and code, for tests that build turns of a session."""

from __future__ import annotations

import random

_WORD_TEXT = (
    "the store keeps every event of a session and the context builder reads the newest rows def "
    "build(self, policy): return self.rows[-1] if policy else None"
)
WORDS = _WORD_TEXT.split(" ")


def words_text(rng: random.Random, words: int) -> str:
    """``words`` words drawn from :data:`WORDS` with ``rng``."""
    return " ".join(rng.choice(WORDS) for _ in range(words))
