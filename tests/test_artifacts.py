"""Artifacts: the materialized listing, replay with ``at``, the index, and paged reads by id or prefix."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import turnlog.store.append_rules
import turnlog.store.tokenizer
from tests.store_contract import EVENT_STRATEGIES
from turnlog.projections.artifacts import (
    ArtifactPage,
    ArtifactsProjection,
    InvalidArgumentError,
    artifact_index,
    list_artifacts,
    read_artifact,
)
from turnlog.projections.materialize import Materializer
from turnlog.projections.registry import materializer
from turnlog.projections.todos import TodosProjection
from turnlog.store import (
    ArtifactWritten,
    MessageAppended,
    SQLiteStore,
    TodoItem,
    TodosUpdated,
    ToolReturned,
    UnknownArtifactError,
    UnknownSessionError,
)
from turnlog.store.tokenizer import estimate_tokens


@pytest.fixture
def db() -> Iterator[SQLiteStore]:
    s = SQLiteStore.open(":memory:")
    try:
        yield s
    finally:
        s.close()


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write(db: SQLiteStore, event: ArtifactWritten | ToolReturned, session_id: str = "s") -> str:
    """Append one event kept as an artifact; return its artifact id."""
    stored = db.append(session_id, [event])[0].event
    assert isinstance(stored, ArtifactWritten | ToolReturned) and stored.artifact_id is not None
    return stored.artifact_id


def numbered(n: int, width: int = 20) -> str:
    return "".join(f"line {i} " + "x" * width + "\n" for i in range(n))


def read_all(
    db: SQLiteStore, artifact_id: str, limit: int, max_tokens: int | None = None
) -> list[ArtifactPage]:
    pages = [read_artifact(db, artifact_id, 0, limit, max_tokens)]
    while pages[-1].next_offset is not None:
        assert len(pages) < 10_000
        pages.append(read_artifact(db, artifact_id, pages[-1].next_offset, limit, max_tokens))
    return pages


# --- listing ---------------------------------------------------------------------------------------


def test_lists_tool_outputs_and_written_artifacts(db: SQLiteStore) -> None:
    output = numbered(60)
    notes = "# Notes\n\n   several   words\tand\n\nlines  \n"
    records = db.append(
        "s1",
        [
            MessageAppended(role="user", content="hello"),
            ToolReturned(tool_call_id="call_small", tool_name="ls", content="a\nb\n"),  # inline
            ToolReturned(tool_call_id="call_big", tool_name="grep", content=output),
            ToolReturned(tool_call_id="call_anon", content=output + "tail"),
            ArtifactWritten(name="notes.md", content=notes, media_type="text/markdown"),
            ArtifactWritten(name="out/report.json", content='{"a": 1}', tool_call_id="call_big",
                            media_type="application/json"),
        ],
    )  # fmt: skip
    db.append("other", [ArtifactWritten(name="elsewhere.txt", content="not in s1")])
    infos = list_artifacts(db, "s1")
    assert [(i.kind, i.name, i.source, i.tool_call_id, i.media_type) for i in infos] == [
        ("tool_output", "grep output call_big", "tool", "call_big", "text/plain"),
        ("tool_output", "tool output call_anon", "tool", "call_anon", "text/plain"),
        ("artifact", "notes.md", "user", None, "text/markdown"),
        ("artifact", "out/report.json", "tool", "call_big", "application/json"),
    ]
    by_name = {i.name: i for i in infos}
    tok = db.tokenizer
    grep = by_name["grep output call_big"]
    assert (grep.session_id, grep.position, grep.version) == ("s1", 3, 3)
    assert grep.event_id == records[2].event_id
    assert grep.recorded_at == records[2].recorded_at
    assert isinstance(records[2].event, ToolReturned)
    assert grep.artifact_id == sha(output) == records[2].event.artifact_id
    assert grep.short_id == grep.artifact_id[:12]
    assert grep.size == len(output.encode())
    # The stored count covers content and call id; the listing shows the content's alone.
    assert grep.tokens == tok.count(output)
    stored = db.get_event(records[2].event_id).tokens
    assert stored == tok.count(output) + tok.count("call_big")
    assert grep.tokens_exact
    assert grep.lines == 60
    assert grep.abstract.startswith("line 0 xxx") and grep.abstract.endswith("…")
    assert len(grep.abstract) == 121
    assert by_name["tool output call_anon"].lines == 61
    note = by_name["notes.md"]
    assert note.abstract == "# Notes several words and lines"
    assert note.tokens == tok.count(notes)
    assert (note.size, note.lines) == (len(notes.encode()), 5)
    assert [i.name for i in list_artifacts(db, "other")] == ["elsewhere.txt"]


def test_same_content_written_twice_is_listed_twice_with_one_id(db: SQLiteStore) -> None:
    db.append(
        "s", [ArtifactWritten(name="a.txt", content="same"), ArtifactWritten(name="b.txt", content="same")]
    )
    infos = list_artifacts(db, "s")
    assert [i.name for i in infos] == ["a.txt", "b.txt"]
    assert infos[0].artifact_id == infos[1].artifact_id == sha("same")


def test_large_content_tokens_are_marked_estimated(db: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # The store reads its imported name, the projection reads the tokenizer module's: patch both.
    monkeypatch.setattr(turnlog.store.tokenizer, "EXACT_COUNT_LIMIT", 2000)
    monkeypatch.setattr(turnlog.store.append_rules, "EXACT_COUNT_LIMIT", 2000)
    small = "word " * 300  # 1,500 bytes: still counted
    large = "word " * 700  # 3,500 bytes: estimated from its size
    db.append(
        "s",
        [
            ArtifactWritten(name="small", content=small),
            ArtifactWritten(name="large", content=large),
            ToolReturned(tool_call_id="c1", tool_name="cat", content=large),
        ],
    )
    small_info, large_info, output_info = list_artifacts(db, "s")
    assert (small_info.tokens, small_info.tokens_exact) == (db.tokenizer.count(small), True)
    assert (large_info.tokens, large_info.tokens_exact) == (estimate_tokens(3500), False)
    assert (output_info.tokens, output_info.tokens_exact) == (estimate_tokens(3500), False)


def test_at_replays_the_listing(db: SQLiteStore) -> None:
    first = db.append("s", [ArtifactWritten(name="a", content="1")])
    db.append("t", [ArtifactWritten(name="t", content="other session")])
    second = db.append(
        "s", [MessageAppended(role="user", content="go"), ArtifactWritten(name="b", content="2")]
    )
    assert [i.name for i in list_artifacts(db, "s", at=0)] == []
    assert [i.name for i in list_artifacts(db, "s", at=first[0].position)] == ["a"]
    assert [i.name for i in list_artifacts(db, "s", at=second[0].position)] == ["a"]
    assert [i.name for i in list_artifacts(db, "s", at=second[1].position)] == ["a", "b"]
    assert [i.name for i in list_artifacts(db, "s")] == ["a", "b"]
    assert "(1)" in artifact_index(db, "s", at=first[0].position)


def test_unknown_session_and_bad_at(db: SQLiteStore) -> None:
    db.append("session-one", [ArtifactWritten(name="a", content="1")])
    with pytest.raises(UnknownSessionError, match="session-one"):
        list_artifacts(db, "session-onf")
    with pytest.raises(UnknownSessionError):
        artifact_index(db, "nope")
    with pytest.raises(InvalidArgumentError, match="at"):
        list_artifacts(db, "session-one", at=-1)


def test_session_without_artifacts(db: SQLiteStore) -> None:
    db.append("s", [MessageAppended(role="user", content="hi")])
    assert list_artifacts(db, "s") == []
    assert artifact_index(db, "s") == "Artifacts of session s (0): none"


# --- reading ---------------------------------------------------------------------------------------


def test_pages_by_lines_with_notices(db: SQLiteStore) -> None:
    content = numbered(1234, width=2)
    aid = write(db, ArtifactWritten(name="big", content=content))
    page = read_artifact(db, aid, offset=200, limit=200)
    assert page.notice == "[lines 201–400 of 1,234; next: offset=400]"
    assert (page.offset, page.lines, page.total_lines, page.next_offset) == (200, 200, 1234, 400)
    assert page.text == "".join(content.splitlines(keepends=True)[200:400])
    assert page.render() == page.text + page.notice
    assert page.artifact_id == aid and page.size == len(content) and not page.capped
    last = read_artifact(db, aid, offset=1200, limit=200)
    assert last.notice == "[lines 1,201–1,234 of 1,234; end of artifact]"
    assert (last.lines, last.next_offset) == (34, None)
    one = read_artifact(db, aid, offset=5, limit=1)
    assert one.notice == "[line 6 of 1,234; next: offset=6]"
    assert one.text == "line 5 xx\n"


def test_lines_split_at_newlines_only(db: SQLiteStore) -> None:
    content = "a\r\nb\rc\x0cd\u2028e\n\nlast"
    aid = write(db, ArtifactWritten(name="odd", content=content))
    page = read_artifact(db, aid)
    assert (page.total_lines, page.lines, page.text) == (4, 4, content)
    assert page.render() == content + "\n[lines 1–4 of 4; end of artifact]"
    assert read_artifact(db, aid, offset=1, limit=1).text == "b\rc\x0cd\u2028e\n"
    assert list_artifacts(db, "s")[0].lines == 4


def test_empty_artifact(db: SQLiteStore) -> None:
    aid = write(db, ArtifactWritten(name="empty", content=""))
    page = read_artifact(db, aid, max_tokens=50)
    assert (page.text, page.lines, page.total_lines, page.next_offset) == ("", 0, 0, None)
    assert page.render() == "[empty artifact: 0 lines]"
    assert list_artifacts(db, "s")[0].abstract == ""
    assert "— (empty)" in artifact_index(db, "s")
    with pytest.raises(InvalidArgumentError, match="empty"):
        read_artifact(db, aid, offset=1)


line_texts = st.lists(
    st.text(max_size=30).map(lambda t: t.replace("\n", "")),
    max_size=40,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=line_texts, trailing=st.booleans(), limit=st.integers(1, 12))
def test_paging_never_skips_or_repeats_a_line(
    db: SQLiteStore, lines: list[str], trailing: bool, limit: int
) -> None:
    content = "\n".join(lines) + ("\n" if trailing and lines else "")
    aid = write(db, ArtifactWritten(name="f", content=content))
    pages = read_all(db, aid, limit)
    assert "".join(p.text for p in pages) == content
    expected_offset = 0
    for page in pages:
        assert page.offset == expected_offset
        assert 1 <= page.lines <= limit or page.total_lines == 0
        expected_offset += page.lines
        assert page.next_offset in (expected_offset, None)
    assert expected_offset == pages[0].total_lines


# Some lines longer than a small budget, so that capped pages come up too.
mixed_line_texts = st.lists(
    st.text(max_size=300).map(lambda t: t.replace("\n", "")),
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=mixed_line_texts, limit=st.integers(1, 50), max_tokens=st.integers(60, 200))
def test_max_tokens_pages_fit_and_still_cover_every_line(
    db: SQLiteStore, lines: list[str], limit: int, max_tokens: int
) -> None:
    content = "\n".join(lines)
    aid = write(db, ArtifactWritten(name="f", content=content))
    pages = read_all(db, aid, limit, max_tokens)
    for page in pages:
        assert db.tokenizer.count(page.render()) <= max_tokens
        assert page.lines <= limit
        if page.capped:
            assert page.lines == 1
    event("a page was capped" if any(p.capped for p in pages) else "no page was capped")
    if not any(p.capped for p in pages):
        assert "".join(p.text for p in pages) == content
    assert sum(p.lines for p in pages) == pages[0].total_lines


def test_max_tokens_returns_fewer_whole_lines(db: SQLiteStore) -> None:
    content = numbered(300)
    aid = write(db, ArtifactWritten(name="f", content=content))
    full = read_artifact(db, aid, offset=10, limit=100)
    fitted = read_artifact(db, aid, offset=10, limit=100, max_tokens=120)
    assert 0 < fitted.lines < full.lines
    assert full.text.startswith(fitted.text) and fitted.text.endswith("\n")
    assert fitted.next_offset == 10 + fitted.lines
    assert fitted.notice == f"[lines 11–{10 + fitted.lines} of 300; next: offset={10 + fitted.lines}]"
    assert db.tokenizer.count(fitted.render()) <= 120
    # One more line would not have fitted: the page is as full as the budget allows.
    bigger = full.text.splitlines(keepends=True)[: fitted.lines + 1]
    notice = f"[lines 11–{11 + fitted.lines} of 300; next: offset={11 + fitted.lines}]"
    assert db.tokenizer.count("".join(bigger) + notice) > 120
    # A budget large enough for everything changes nothing.
    assert read_artifact(db, aid, offset=10, limit=100, max_tokens=100_000) == full


def test_a_line_too_long_for_max_tokens_is_capped(db: SQLiteStore) -> None:
    long_line = " ".join(f"word{i}" for i in range(3000))
    content = f"short\n{long_line}\nafter\n"
    aid = write(db, ArtifactWritten(name="f", content=content))
    page = read_artifact(db, aid, offset=1, limit=10, max_tokens=100)
    assert page.capped and page.lines == 1 and page.next_offset == 2
    assert db.tokenizer.count(page.render()) <= 100
    assert page.notice == "[line 2 of 3, cut to fit max_tokens=100; next: offset=2]"
    assert page.text.startswith("word0 word1") and "tokens shown]" in page.text
    assert page.text.rstrip("\n").endswith("word2999")
    # The page before stops short of the long line rather than cutting it.
    before = read_artifact(db, aid, offset=0, limit=10, max_tokens=100)
    assert (before.text, before.lines, before.next_offset, before.capped) == ("short\n", 1, 1, False)
    last = read_artifact(db, aid, offset=1, limit=1, max_tokens=100)
    assert last.capped
    with pytest.raises(InvalidArgumentError, match="too small"):
        read_artifact(db, aid, offset=1, max_tokens=20)


def test_reading_a_huge_line_under_a_budget_does_not_count_it_all(db: SQLiteStore) -> None:
    content = "y" * 3_000_000
    aid = write(db, ToolReturned(tool_call_id="c", content=content))
    page = read_artifact(db, aid, max_tokens=200)
    assert page.capped and page.next_offset is None
    assert page.notice == "[line 1 of 1, cut to fit max_tokens=200; end of artifact]"
    assert db.tokenizer.count(page.render()) <= 200


def test_argument_validation(db: SQLiteStore) -> None:
    aid = write(db, ArtifactWritten(name="f", content="a\nb\n"))
    with pytest.raises(InvalidArgumentError, match="offset must be 0 or more"):
        read_artifact(db, aid, offset=-1)
    with pytest.raises(InvalidArgumentError, match="limit must be 1 or more"):
        read_artifact(db, aid, limit=0)
    with pytest.raises(InvalidArgumentError, match="max_tokens must be 1 or more"):
        read_artifact(db, aid, max_tokens=0)
    with pytest.raises(InvalidArgumentError, match="limit must be an integer"):
        read_artifact(db, aid, limit=True)
    with pytest.raises(InvalidArgumentError, match=r"offset 2 is past the end: .* has 2 lines"):
        read_artifact(db, aid, offset=2)


# --- ids and prefixes ------------------------------------------------------------------------------


def test_fetch_by_full_id_or_unique_prefix(db: SQLiteStore) -> None:
    aid = write(db, ArtifactWritten(name="f", content="hello\n"))
    for given_id in (aid, aid[:12], aid[:8], aid[:12].upper(), f"  {aid[:20]} "):
        page = read_artifact(db, given_id)
        assert (page.artifact_id, page.text) == (aid, "hello\n")


def test_prefix_errors(db: SQLiteStore) -> None:
    # These two contents have sha256 digests that share their first 8 hex characters.
    one, two = "collision 19141", "collision 62696"
    assert sha(one)[:8] == sha(two)[:8] == "4ee5d8e6" and sha(one)[:9] != sha(two)[:9]
    db.append("s", [ArtifactWritten(name="one", content=one), ArtifactWritten(name="two", content=two)])
    with pytest.raises(UnknownArtifactError, match=r"prefix '4ee5d8e6' is ambiguous: it matches 4ee5d8e6"):
        read_artifact(db, "4ee5d8e6")
    assert read_artifact(db, sha(one)[:10]).text == one
    with pytest.raises(UnknownArtifactError, match="no artifact id starts with 'ffffffff'"):
        read_artifact(db, "ffffffff")
    with pytest.raises(UnknownArtifactError, match="no artifact with id"):
        read_artifact(db, "f" * 64)
    with pytest.raises(InvalidArgumentError, match="too short"):
        read_artifact(db, "4ee5d8e")
    with pytest.raises(InvalidArgumentError, match="not an artifact id"):
        read_artifact(db, "artifact 4ee5d8e6")
    with pytest.raises(InvalidArgumentError, match="not an artifact id"):
        read_artifact(db, "a" * 65)


# --- the index -------------------------------------------------------------------------------------


def test_index_format_and_order(db: SQLiteStore) -> None:
    db.append(
        "s",
        [
            ArtifactWritten(name="src/b.py", content="print('b')\n"),
            ToolReturned(tool_call_id="call_9", tool_name="pytest", content="=" * 2000),
            ArtifactWritten(name="README.md", content="# Title\n\nBody   text\n", tool_call_id="call_9"),
            ArtifactWritten(name="src/b.py", content="print('b2')\n"),
            ArtifactWritten(name="odd`name\nx", content="z"),
        ],
    )
    infos = {(i.name, i.position): i for i in list_artifacts(db, "s")}
    index = artifact_index(db, "s")
    b1, b2 = infos[("src/b.py", 1)], infos[("src/b.py", 4)]
    odd = infos[("odd`name\nx", 5)]
    assert index.splitlines() == [
        "Artifacts of session s (5): fetch one with its id",
        f"- `{infos[('README.md', 3)].short_id}` · tool · `README.md` — # Title Body text",
        f"- `{odd.short_id}` · user · ``odd`name x`` — z",
        f"- `{infos[('pytest output call_9', 2)].short_id}` · tool · `pytest output call_9` — {'=' * 120}…",
        f"- `{b1.short_id}` · user · `src/b.py` (overwritten later) — print('b')",
        f"- `{b2.short_id}` · user · `src/b.py` — print('b2')",
    ]
    # Every id shown fetches its artifact.
    assert read_artifact(db, b1.short_id).text == "print('b')\n"


def test_index_is_capped_with_a_notice_that_fits(db: SQLiteStore) -> None:
    db.append("s", [ArtifactWritten(name=f"file{i:03}.txt", content=f"content {i}") for i in range(50)])
    full = artifact_index(db, "s")
    assert len(full.splitlines()) == 51
    for max_chars in (120, 300, 1000, len(full) - 1):
        index = artifact_index(db, "s", max_chars=max_chars)
        assert len(index) <= max_chars
        lines = index.splitlines()
        shown = len(lines) - 2
        assert lines[0] == full.splitlines()[0]
        assert lines[1 : 1 + shown] == full.splitlines()[1 : 1 + shown]
        assert lines[-1] == f"… {50 - shown:,} more not listed (index capped at {max_chars:,} characters)"
        # As many entries as fit: one more would have broken the cap.
        assert len(index) + len(full.splitlines()[1 + shown]) + 1 > max_chars
    assert artifact_index(db, "s", max_chars=len(full)) == full
    with pytest.raises(InvalidArgumentError, match="too small"):
        artifact_index(db, "s", max_chars=60)


# --- incremental == rebuild -------------------------------------------------------------------------


def test_incremental_catch_up_equals_rebuild(db: SQLiteStore) -> None:
    db.append(
        "a", [ArtifactWritten(name="x", content="1"), ToolReturned(tool_call_id="c", content="o" * 3000)]
    )
    assert len(list_artifacts(db, "a")) == 2
    db.append(
        "b", [TodosUpdated(todos=(TodoItem(id="1", content="t"),)), ArtifactWritten(name="y", content="")]
    )
    assert len(list_artifacts(db, "b")) == 1
    db.append("a", [ToolReturned(tool_call_id="d", content="small"), ArtifactWritten(name="x", content="2")])
    db.append("b", [ToolReturned(tool_call_id="e", tool_name="t", content="p\n" * 900)])
    assert artifact_index(db, "b").count("\n") == 2
    mine = Materializer(db, [ArtifactsProjection(), TodosProjection()])
    assert mine.differences() == []
    assert materializer(db).differences() == []


events_of_interest = st.one_of(
    EVENT_STRATEGIES["artifact_written"],
    EVENT_STRATEGIES["tool_returned"],
    EVENT_STRATEGIES["todos_updated"],
    EVENT_STRATEGIES["message_appended"],
)


@settings(max_examples=15, deadline=None)
@given(
    batches=st.lists(
        st.tuples(st.sampled_from(["s1", "s2"]), st.lists(events_of_interest, min_size=1, max_size=4)),
        min_size=1,
        max_size=5,
    )
)
def test_random_batches_incremental_equals_rebuild(
    batches: list[tuple[str, list[ArtifactWritten | ToolReturned]]],
) -> None:
    with SQLiteStore.open(":memory:") as db:
        assert isinstance(db, SQLiteStore)
        mine = Materializer(db, [ArtifactsProjection(), TodosProjection()])
        for session_id, events in batches:
            db.append(session_id, events)
            mine.catch_up()
        assert mine.differences() == []
