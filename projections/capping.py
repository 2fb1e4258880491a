"""Capping text by real tokens: the head and tail of the text around a notice, where the notice
counts against the cap. Used for tool outputs and over-long messages in the context, and for every
result the agent-facing tool returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from turnlog.store import Tokenizer

MIN_CAP = 32
"""The smallest cap that leaves room for a notice and some text."""

Notice = Callable[[int, int], str]
"""(tokens shown, tokens in all) -> the notice text put between head and tail."""


@dataclass(frozen=True, slots=True)
class Capped:
    """Text after capping."""

    text: str
    """What to show."""
    tokens: int
    """Exact tokens of ``text``."""
    total_tokens: int
    """Tokens of the original text."""
    capped: bool
    """False when the text fitted and is shown whole."""
    shown_tokens: int
    """Tokens of the original text still shown (0: only the notice is left)."""


def cap_text(
    text: str,
    max_tokens: int,
    tokenizer: Tokenizer,
    notice: Notice,
    *,
    total_tokens: int | None = None,
    head_share: float = 0.7,
) -> Capped:
    """``text`` whole if it has at most ``max_tokens`` tokens; otherwise its head and tail around
    ``notice(shown, total)``, the whole result (notice included) at most ``max_tokens`` tokens.

    ``total_tokens`` is the text's stored count, when known, so that a text that fits is never
    tokenized again. The cost of capping follows ``max_tokens``, not the length of the text."""
    if max_tokens < MIN_CAP:
        raise ValueError(f"a token cap must be at least {MIN_CAP}, got {max_tokens}")
    total = total_tokens if total_tokens is not None else tokenizer.count(text)
    if total <= max_tokens:
        return Capped(text, total, total, False, total)
    # Reserve room for the notice as it will read with the largest numbers it can show.
    reserve = tokenizer.count(notice(total, total)) + 2
    available = max_tokens - reserve
    for _ in range(6):
        if available <= 0:
            break
        head_n = max(1, int(available * head_share))
        tail_n = max(0, available - head_n)
        head, head_tokens = tokenizer.head_counted(text, head_n, _to_line_end)
        tail, tail_tokens = tokenizer.tail_counted(text, tail_n, _from_line_start)
        for part, known in ((head, head_tokens), (tail, tail_tokens)):
            if known is not None:  # read from the encoding that cut it: not tokenized again
                tokenizer.remember(part, known)
        shown = tokenizer.count(head) + tokenizer.count(tail)
        # Counted from its parts where their joins split (Tokenizer.splits): the head and tail
        # are not tokenized a second time inside the result.
        middle = f"\n{notice(shown, total)}\n" if tail else f"\n{notice(shown, total)}"
        result = f"{head}{middle}{tail}"
        tokens = tokenizer.count_joined((head, middle, tail))
        if tokens <= max_tokens:
            return Capped(result, tokens, total, True, shown)
        available -= tokens - max_tokens
    # No room for any of the text: the notice alone, always whole (a notice cut short can end in
    # the middle of the id it names); where even that does not fit, a short one that names nothing.
    only = notice(0, total)
    tokens = tokenizer.count(only)
    if tokens > max_tokens:
        only = short_notice(total)
        tokens = tokenizer.count(only)
    return Capped(only, tokens, total, True, 0)


def short_notice(total: int) -> str:
    """The notice of a text of which nothing is shown, when the full notice does not fit: at most
    ``MIN_CAP`` tokens whatever ``total`` is."""
    return f"[turnlog: capped: 0 of {total:,} tokens shown]"


def _to_line_end(head: str) -> str:
    """The head cut back to its last line break when one is near its end: code and logs read
    better in whole lines, and the few tokens given up are not worth a broken line."""
    cut = head.rfind("\n")
    return head[: cut + 1] if cut >= len(head) * 3 // 4 else head


def _from_line_start(tail: str) -> str:
    """The tail started after its first line break when one is near its start."""
    cut = tail.find("\n")
    return tail[cut + 1 :] if 0 <= cut <= len(tail) // 4 else tail
