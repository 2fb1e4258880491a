"""The artifact index, rendered once for every reader: one line per artifact,
`` - `id12` · source · `name` — abstract ``, sorted by name in code-point order, and the cut that keeps
whole lines under a cap (characters or tokens) with a closing line that says how many were left out.
``artifact_index`` (the API and ``turnlog index``), the agent tool's ``artifacts.index`` and the
index preamble of a built context all render with these functions."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turnlog.projections.artifacts import ArtifactInfo

INDEX_MAX_CHARS = 32768
"""Default size cap of an index, in characters (the preamble's cap too)."""

AGENT_TOOL = "turnlog"
"""The agent tool's name: its own large results, kept as artifacts like any tool output, are left
out of the indexes a model reads (they only repeat the log)."""

_SPACE = re.compile(r"\s+")


def is_own_output(info: ArtifactInfo) -> bool:
    """Whether ``info`` is a result of the agent tool itself, kept as an artifact."""
    return info.kind == "tool_output" and info.name.startswith(f"{AGENT_TOOL} output ")


def index_header(session_id: str, count: int, at: int | None = None) -> str:
    """The first line of a session's index (``at``: the position it is as of, when not now)."""
    when = "" if at is None else f" as of position {at:,}"
    if not count:
        return f"Artifacts of session {session_id}{when} (0): none"
    return f"Artifacts of session {session_id}{when} ({count:,}): fetch one with its id"


def index_entries(infos: Iterable[ArtifactInfo], *, latest_only: bool = False) -> list[str]:
    """One line per artifact write, sorted by name (plain code-point order) then log position.

    A name written several times is listed once per write, all but the newest marked
    ``(overwritten later)``; with ``latest_only``, only its newest write is listed."""
    ordered = sorted(infos, key=lambda info: (info.name, info.position))
    lines = []
    for i, info in enumerate(ordered):
        later = i + 1 < len(ordered) and ordered[i + 1].name == info.name
        if later and latest_only:
            continue
        lines.append(
            f"- {code_span(info.short_id)} · {info.source} · {code_span(collapse(info.name))}"
            + (" (overwritten later)" if later else "")
            + (f" — {info.abstract}" if info.abstract else " — (empty)")
        )
    return lines


def cap_entries(
    header: str,
    entries: Sequence[str],
    fits: Callable[[str], bool],
    omitted: Callable[[int], str],
    *,
    total: int | None = None,
    guess: int | None = None,
) -> tuple[str, int] | None:
    """The header and every entry when that ``fits``; else the header, as many whole entries as fit
    and the closing line ``omitted(count left out)``, and the count shown. None when even the header
    and the closing line do not fit. ``fits`` must grow stricter as the text grows (a length or a
    token cap): the entries kept are found by bisection, so a cut costs a few checks, not one per
    entry. ``total``: ``entries`` are the first of that many, the others known not to fit (past a
    character cap), so a long index is cut without joining every entry. ``guess``: about how many
    entries fit (an estimate, right or wrong): the search starts there and widens step by step, so a
    good guess costs two or three checks whatever the length of the index."""
    whole_given = total is None or total == len(entries)
    count = len(entries) if total is None else total
    if whole_given:
        whole = "\n".join([header, *entries])
        if fits(whole):
            return whole, len(entries)

    def text(kept: int) -> str:
        return "\n".join([header, *entries[:kept], omitted(count - kept)])

    if not fits(text(0)):
        return None
    # fits(text(low)); the answer is in [low, high]
    low, high = 0, len(entries) - 1 if whole_given else len(entries)
    if guess is not None and low < high:
        low, high = _around(min(max(guess, 1), high), low, high, lambda kept: fits(text(kept)))
    while low < high:
        mid = (low + high + 1) // 2
        if fits(text(mid)):
            low = mid
        else:
            high = mid - 1
    return text(low), low


def _around(start: int, low: int, high: int, fits: Callable[[int], bool]) -> tuple[int, int]:
    """The range [low, high] narrowed around ``start`` by steps of 1, 1, 1, then doubling
    (``fits(low)`` holds, ``fits`` holds up to the answer and not past it): the answer stays in the
    range returned. A guess is most often one entry short (a preamble's, on the bench's sessions):
    single steps settle it with one check fewer than doubling at once (each check counts a text of
    the cap's size), and cost no more up to four entries off; a far guess costs a few more."""
    steps = _steps()
    if fits(start):
        low = start
        while low < high:
            probe = min(high, low + next(steps))
            if not fits(probe):
                return low, probe - 1
            low = probe
        return low, high
    high = start - 1
    while low < high:
        probe = max(low, high - next(steps) + 1)
        if fits(probe):
            return probe, high
        high = probe - 1
    return low, high


def _steps() -> Iterator[int]:
    yield from (1, 1)
    step = 1
    while True:
        yield step
        step *= 2


def chars_omitted(max_chars: int, then: str = "") -> Callable[[int], str]:
    """The closing line of an index cut at ``max_chars`` characters (``then`` follows it)."""
    return lambda count: f"… {count:,} more not listed (index capped at {max_chars:,} characters){then}"


def within_chars(max_chars: int) -> Callable[[str], bool]:
    """The test of a character cap, for :func:`cap_entries`."""
    return lambda text: len(text) <= max_chars


def collapse(text: str) -> str:
    """``text`` on one line: whitespace runs as one space, ends stripped."""
    return _SPACE.sub(" ", text).strip()


def code_span(text: str) -> str:
    """``text`` as a Markdown code span, wide enough for the backticks it holds."""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


__all__ = [
    "AGENT_TOOL",
    "INDEX_MAX_CHARS",
    "cap_entries",
    "chars_omitted",
    "code_span",
    "collapse",
    "index_entries",
    "index_header",
    "is_own_output",
    "within_chars",
]
