"""A turn at the floor of the database (issue 20): appending one turn through ``turnlog.open_store``
and building the next context (its catch-up of the token counts and every projection, then the
build) costs the same number of SQL statements and about the same SQLite work whatever the
session's length, also when the turn writes an artifact that the index preamble lists."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import turnlog
from tests.helpers.turns import tool_turn, traced_build, words_text
from turnlog import ContextPolicy, build_context
from turnlog.projections.artifact_index import cap_entries, chars_omitted, within_chars
from turnlog.store import MessageAppended, Store

POLICY = ContextPolicy(budget=8000)


def _session(rng: random.Random, turns: int) -> Iterator[Any]:
    yield MessageAppended(role="system", content=words_text(rng, 300))
    for i in range(turns):
        yield from tool_turn(rng, f"{i:05d}", path=f"src/module_{i % 97}/file_{i}.py", output_words=3000)


def _store(path: Path, turns: int) -> Store:
    store = turnlog.open_store(path)
    events = list(_session(random.Random(3), turns))
    for start in range(0, len(events), 400):
        store.append("s", events[start : start + 400], expected_version=start)
    build_context(store, "s", POLICY)  # caught up, and the caches warm
    return store


def _measure(store: Store, tag: str) -> tuple[list[str], int, list[dict[str, Any]]]:
    """One turn appended and the next context built: the statements run and SQLite's VM steps."""
    conn = store.conn  # type: ignore[attr-defined]
    statements: list[str] = []
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    conn.set_trace_callback(statements.append)
    conn.set_progress_handler(step, 1)
    try:
        turn = tool_turn(random.Random(9), tag, path="src/new.py", output_words=3000)
        store.append("s", turn, expected_version=store.head_version("s"))
        built = build_context(store, "s", POLICY)
    finally:
        conn.set_trace_callback(None)
        conn.set_progress_handler(None, 1)
    return statements, steps[0], built.rendered


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, Store]]:
    made = {n: _store(tmp_path_factory.mktemp(f"turn{n}") / "t.db", n) for n in (40, 400)}
    yield made
    for store in made.values():
        store.close()


def test_a_turn_then_a_build_does_not_grow_with_the_session(stores: dict[int, Store]) -> None:
    small, big = (_measure(stores[n], "probe1") for n in (40, 400))
    # The same turn's statements, but for the B-trees' depth the same work: none reads the session.
    assert len(big[0]) <= len(small[0]) + 2, (small[0], big[0])
    assert big[1] <= small[1] * 1.5, (small[1], big[1])
    # A second turn, as a session goes on: still the same.
    again = _measure(stores[400], "probe2")
    assert len(again[0]) <= len(small[0]) + 2
    assert again[1] <= small[1] * 1.5


def test_the_turns_context_is_a_fresh_stores(stores: dict[int, Store], tmp_path: Path) -> None:
    """The index brought forward turn by turn is the one a new store object renders from scratch."""
    store = stores[40]
    _measure(store, "probe3")
    kept = build_context(store, "s", POLICY).rendered
    fresh = turnlog.open_store(store.path)  # type: ignore[attr-defined]
    try:
        assert build_context(fresh, "s", POLICY).rendered == kept
    finally:
        fresh.close()
    assert any("Artifacts of this session" in str(m.get("content")) for m in kept)


@settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), max_size=30),
    cap=st.integers(0, 700),
    guess=st.none() | st.integers(-5, 40),
    shown=st.integers(0, 30),
)
def test_a_cut_from_a_guess_or_a_prefix_is_the_bisections(
    lengths: list[int], cap: int, guess: int | None, shown: int
) -> None:
    """However wrong the guess, and with only the entries within the cap given, the same cut."""
    entries = [f"- entry {i} " + "x" * n for i, n in enumerate(lengths)]
    fits, omitted = within_chars(cap), chars_omitted(cap)
    expected = cap_entries("header", entries, fits, omitted)
    assert cap_entries("header", entries, fits, omitted, guess=guess) == expected
    size, prefix = len("header"), 0
    for entry in entries:  # the entries within the cap, and perhaps a few past it
        size += 1 + len(entry)
        if size > cap and prefix >= shown:
            break
        prefix += 1
    got = cap_entries("header", entries[:prefix], fits, omitted, total=len(entries), guess=guess)
    assert got == expected


def test_a_turn_reads_what_it_knows_once(stores: dict[int, Store]) -> None:
    """After this process's own turn, the build catches up first and checks the projections once,
    in its own snapshot: no read of the session's or the log's head around the catch-up, no second
    token catch-up check, no validated record read for the output it caps, no read of the store's
    tokenizer for the artifact row."""
    store = stores[400]
    store.append("s", tool_turn(random.Random(4), "probe4", path="src/new.py", output_words=3000),
                 expected_version=store.head_version("s"))  # fmt: skip
    statements, _ = traced_build(store, "s", POLICY)  # type: ignore[arg-type]
    assert sum(s == "PRAGMA data_version" for s in statements) == 1, statements
    for read in (
        "SELECT max(version) FROM events",
        "SELECT max(position) FROM events",
        "SELECT version FROM events",
        "SELECT value FROM turnlog_meta WHERE key = 'tokenizer'",
        "SELECT e.position, e.session_id",  # a whole record (store.rows.EVENT_SELECT)
        "SELECT (SELECT coalesce((SELECT CAST(value AS INTEGER) FROM turnlog_meta",  # count_pending
    ):
        assert not any(s.startswith(read) for s in statements), (read, statements)
    # The turn's output was capped from its text, and the artifact it wrote is listed.
    assert any("SELECT e.type" in s and "c.whole = 0" in s for s in statements)
    assert any(s.startswith("SELECT session_id, position, version, event_id") for s in statements)
