"""Importing aider chat histories: one session per run with a user turn, replies and user turns as
messages (aider commands left out), SEARCH/REPLACE blocks as artifact writes the way aider's own
parser reads them, one usage per ``> Tokens:`` line, idempotent re-imports, bad input refused whole."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import FIXTURES
from turnlog.importers import import_conversations, import_path
from turnlog.importers.from_aider import _edits, looks_like_aider, parse_aider
from turnlog.importers.registry import detect_format
from turnlog.store import (
    ArtifactWritten,
    InvalidEventError,
    MessageAppended,
    SessionStarted,
    SQLiteStore,
    UsageRecorded,
)

HISTORY = FIXTURES / "aider" / ".aider.chat.history.md"
F = "`" * 3


def _text() -> str:
    return HISTORY.read_text()


def test_detection() -> None:
    assert detect_format(HISTORY) == "aider"
    assert looks_like_aider(_text()[:4096])
    assert not looks_like_aider((FIXTURES / "openai_chat.json").read_text()[:4096])


def test_one_session_per_run_with_a_user_turn(file_store: SQLiteStore) -> None:
    result = import_conversations(file_store, parse_aider(_text()))
    # The first run (started, committed, quit) has no user turn.
    assert [s["session_id"] for s in result.sessions] == [
        "aider-2025-03-10T09:15:40",
        "aider-2025-03-11T17:02:11",
    ]
    first, second = (file_store.read_session(s["session_id"]) for s in result.sessions)
    started = first[0].event
    assert isinstance(started, SessionStarted)
    assert started.model == "claude-3-7-sonnet-20250219"
    assert first[0].recorded_at.startswith("2025-03-10T09:15:40")
    assert isinstance(second[0].event, SessionStarted) and second[0].event.model == "gpt-4o-mini"


def test_turns_and_replies() -> None:
    [first, _] = parse_aider(_text())
    messages = [e for e in first.events if isinstance(e, MessageAppended)]
    assert [(m.role, m.content[:24]) for m in messages] == [
        ("user", "Make add() add, not subt"),
        ("assistant", "I'll fix both functions "),
        ("user", "Add a test for add() and"),
        ("assistant", "Here is a new test file "),
        # '/diff' and '/ex' are aider commands; '/ask' sends its question.
        ("user", "why did mul() take ints?"),
        ("assistant", "Because it was written b"),
        ("user", "Also rename it to multip"),
        ("assistant", "<<<<<<< SEARCH\ndef mul(a"),
        ("assistant", "calc.py\n```python\n<<<<<<"),  # aider's retry, without a user turn
    ]
    assert messages[0].content == "Make add() add, not subtract,\nand make mul() handle floats."
    # Notes, the banner and the commit lines are not in the replies; code inside a block is.
    assert all("> Applied edit" not in m.content and "Cost:" not in m.content for m in messages)
    assert "#### add(a, b)\n\n> Returns the sum" in messages[3].content


def test_edit_blocks_are_artifact_writes_of_the_named_file() -> None:
    [first, _] = parse_aider(_text())
    artifacts = [e for e in first.events if isinstance(e, ArtifactWritten)]
    assert [(a.name, a.content) for a in artifacts] == [
        ("calc.py", "def add(a, b):\n    return a + b\n"),
        ("calc.py", "def mul(a: float, b: float) -> float:\n"),  # the file of the block before it
        ("tests/test_calc.py", "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"),
        ("README.md", "## Usage\n\n#### add(a, b)\n\n> Returns the sum of a and b.\n"),
        # The block without a file name: aider refused the reply; its retry is the edit.
        ("calc.py", "def multiply(a: float, b: float) -> float:\n"),
    ]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        # Filename above a fence with a language, and on the line of the fence's opening.
        (f"a.py\n{F}python\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n{F}\n", [("a.py", "y\n")]),
        # Filename inside the fence (Deepseek's way), and decorated names.
        (f"{F}python\n**b/c.py**\n<<<<<<< SEARCH\n=======\nz\n>>>>>>> REPLACE\n{F}\n", [("b/c.py", "z\n")]),
        (f"`d\\_e.py`:\n{F}\n<<<<<<< SEARCH\n=======\nw\n>>>>>>> REPLACE\n{F}\n", [("d_e.py", "w\n")]),
        # Several blocks; the second without a name edits the file of the first.
        (
            f"f.py\n{F}\n<<<<<<< SEARCH\n1\n=======\n2\n>>>>>>> REPLACE\n\n<<<<<<< SEARCH\n3\n=======\n4\n"
            f">>>>>>> REPLACE\n{F}\n",
            [("f.py", "2\n"), ("f.py", "4\n")],
        ),
        # No filename at all, an unclosed block: aider refuses the reply, so no edit.
        ("<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n", []),
        (f"g.py\n{F}\n<<<<<<< SEARCH\nx\n=======\ny\n", []),
        (f"g.py\n{F}\n<<<<<<< SEARCH\nx\n", []),
        # A shell block is not an edit, even holding markers.
        (f"{F}bash\n<<<<<<< SEARCH\n=======\n>>>>>>> REPLACE\n{F}\n", []),
        # A file name further than three lines up does not count.
        ("h.py\n\nsome text\n\n<<<<<<< SEARCH\n=======\nq\n>>>>>>> REPLACE\n", []),
    ],
)
def test_edit_blocks_read_as_aider_reads_them(reply: str, expected: list[tuple[str, str]]) -> None:
    assert _edits(reply) == expected


def test_one_usage_per_tokens_line(file_store: SQLiteStore) -> None:
    [first, second] = parse_aider(_text())
    usages = [e for e in first.events if isinstance(e, UsageRecorded)]
    assert [(u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens) for u in usages] == [
        # 4.2k sent + 8.0k written + 1.9k read: Anthropic's sent leaves the cache out.
        (4_200 + 8_000 + 1_900, 312, 1_900, 8_000),
        (5_244, 604, 0, 0),
        (1_200, 25, 1_000, 0),  # hits only: a part of sent
        (1_300, 40, 1_100, 0),
        (1_500, 41, 1_300, 0),
    ]
    # The cost of the message, from the same line or (both cache counts given) the next one.
    assert [u.cost_usd for u in usages] == [0.04, 0.02, 0.0012, 0.0013, 0.0014]
    assert {u.source for u in usages} == {"aider"}
    assert {u.model for u in usages} == {"claude-3-7-sonnet-20250219"}
    ids = {e.event_id: e for e in first.events}
    for usage in usages:
        reply = ids[usage.call_event_id]
        assert isinstance(reply, MessageAppended) and reply.role == "assistant"
    [other] = [e for e in second.events if isinstance(e, UsageRecorded)]
    assert (other.input_tokens, other.output_tokens, other.cost_usd, other.model) == (
        12_566,
        84,
        0.0019,
        "gpt-4o-mini",
    )


def test_reimport_writes_nothing_and_a_grown_history_appends_only_the_new(file_store: SQLiteStore) -> None:
    used, result = import_path(file_store, HISTORY)
    assert used == "aider" and result.appended > 0
    assert import_path(file_store, HISTORY)[1].appended == 0
    report = "> Tokens: 12.7k sent, 5 received. Cost: $0.0019 message, $0.0038 session.  "
    grown = _text() + f"\n#### thanks  \n\nYou're welcome!\n\n{report}\n"
    again = import_conversations(file_store, parse_aider(grown))
    assert [s["appended"] for s in again.sessions] == [0, 3]
    last = file_store.read_session("aider-2025-03-11T17:02:11")[-1].event
    assert isinstance(last, UsageRecorded) and last.input_tokens == 12_700


def test_session_option_names_the_runs() -> None:
    assert [c.session_id for c in parse_aider(_text(), session="mine")] == ["mine-1", "mine-2"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda t: t.replace("5,244 sent, 604 received", "5,244 sent, lots received"),
            r"line 90: Tokens: expected 'Tokens: N sent",
        ),
        (
            lambda t: t.replace("1.2k sent, 1.0k cache hit", "1.2k sent, 1.0k cache miss"),
            r"line \d+: Tokens: expected",
        ),
        (
            lambda t: t.replace("started at 2025-03-10 09:15:40", "started at yesterday"),
            r"line 13: '# aider chat started at' needs a time",
        ),
        (lambda t: "# just notes\n\n#### hi\n", r"holds no aider run with a user turn"),
    ],
)
def test_bad_input_names_the_line_and_writes_nothing(
    file_store: SQLiteStore, change: Callable[[str], str], message: str
) -> None:
    with pytest.raises(InvalidEventError, match=message):
        import_path(file_store, change(_text()).encode(), "aider")
    assert file_store.head_position() == 0


def test_the_port_finds_every_edit_aiders_own_parser_finds() -> None:
    """tests/fixtures/aider/parity.json: 150 replies and the edits aider's find_original_update_blocks
    found in each (made by scripts/aider_parity.py with aider-chat in a throwaway venv). The issue
    asks for at least 98% of them, never more than one write per block: the port finds them all."""
    import json
    from pathlib import Path

    from turnlog.importers.from_aider import _edits

    cases = json.loads((Path(__file__).parent / "fixtures" / "aider" / "parity.json").read_text())["cases"]
    found = missing = extra = 0
    for case in cases:
        ours = [tuple(edit) for edit in _edits(case["reply"])]
        reference = [tuple(edit) for edit in case["edits"]]
        found += sum(1 for edit in reference if edit in ours)
        missing += sum(1 for edit in reference if edit not in ours)
        extra += max(0, len(ours) - len(reference))
    assert found == sum(len(c["edits"]) for c in cases) == 296
    assert (missing, extra) == (0, 0)
