"""A warm context build at the floor of the database (issue 20): a handful of statements whatever
the session's length, no tokenizer call, nothing re-validated, and the same context as a build that
reads every event (a new store object, whose caches are empty)."""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.turns import traced_build
from turnlog import ContextPolicy, build_context
from turnlog.projections import context_capping
from turnlog.projections.capping import cap_text
from turnlog.projections.context_capping import output_notice
from turnlog.projections.context_rows import INLINE_CHARS, Item, item_of, whole_of
from turnlog.projections.registry import materializer
from turnlog.store import MessageAppended, SQLiteStore, ToolCall, ToolReturned
from turnlog.store.errors import CorruptStoreError
from turnlog.store.rows import PAYLOAD_COLUMNS, PAYLOAD_JOIN, payload_fields
from turnlog.store.tokenizer import Tokenizer, load_tokenizer

_WORD_TEXT = (
    "the store keeps every event of a session and the context builder reads the newest rows "
    "def build(self, policy): return self.rows[-1] if policy else None  # a line of code\n"
    '{"path": "src/app.py", "line": 42, "match": "raise ValueError(msg)"}'
)
WORDS = _WORD_TEXT.split(" ")

POLICIES = [
    ContextPolicy(budget=8000),
    ContextPolicy(budget=4000),
    ContextPolicy(budget=3000, max_tool_tokens=200, max_message_tokens=300),
    ContextPolicy(budget=6000, format="anthropic", fill=False),
]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _session(rng: random.Random, n: int) -> Iterator[MessageAppended | ToolReturned]:
    """A coding agent's session: a system prompt, then turns of user messages, assistant texts and
    tool calls with their outputs, some far over the caps (and over the body's inline limit)."""
    yield MessageAppended(role="system", content=_text(rng, 600))
    count, call = 1, 0
    while count < n:
        yield MessageAppended(role="user", content=_text(rng, rng.randint(5, 200)))
        count += 1
        for _ in range(rng.randint(1, 4)):
            call += 1
            call_id = f"call_{call:05d}"
            said = _text(rng, 10) if rng.random() < 0.3 else ""
            yield MessageAppended(
                role="assistant",
                content=said,
                tool_calls=(ToolCall(id=call_id, name="read_file", arguments=json.dumps({"path": "a.py"})),),
            )
            words = rng.choice([20, 150, 900, 3000])
            yield ToolReturned(tool_call_id=call_id, tool_name="read_file", content=_text(rng, words))
            count += 2
        yield MessageAppended(role="assistant", content=_text(rng, rng.choice([30, 400, 5000])))
        count += 1


def _store(path: Path, n: int, seed: int = 7) -> SQLiteStore:
    store = SQLiteStore.open(path)
    events = list(_session(random.Random(seed), n))
    for start in range(0, len(events), 200):
        store.append("s", events[start : start + 200], expected_version=start)
    return store


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, SQLiteStore]]:
    made = {n: _store(tmp_path_factory.mktemp(f"floor{n}") / "t.db", n) for n in (60, 600)}
    yield made
    for store in made.values():
        store.close()


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.budget}-{p.max_tool_tokens}-{p.format}")
@pytest.mark.parametrize("n", [60, 600])
def test_a_warm_build_makes_at_most_eight_statements(
    stores: dict[int, SQLiteStore], n: int, policy: ContextPolicy
) -> None:
    store = stores[n]
    first = build_context(store, "s", policy).rendered  # catches the projections up
    statements, built = traced_build(store, "s", policy)
    rendered = built.rendered
    assert rendered == first
    assert len(statements) <= 8, statements
    # Transaction control included: one snapshot for the whole build.
    assert sum(s.strip().upper() == "BEGIN" for s in statements) == 1


def test_the_statements_of_a_warm_build_do_not_grow_with_the_session(stores: dict[int, SQLiteStore]) -> None:
    policy = ContextPolicy(budget=8000)
    counts = []
    for n in (60, 600):
        build_context(stores[n], "s", policy)
        counts.append(len(traced_build(stores[n], "s", policy)[0]))
    assert counts[1] <= counts[0] + 1


def test_a_warm_build_calls_no_tokenizer(
    stores: dict[int, SQLiteStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores[600]
    before = {p.budget: build_context(store, "s", p).rendered for p in POLICIES}

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the tokenizer was called by a warm build")

    for method in ("count", "count_all", "encode", "head", "tail", "decode"):
        monkeypatch.setattr(Tokenizer, method, refuse)
    for policy in POLICIES:
        assert build_context(store, "s", policy).rendered == before[policy.budget]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.budget}-{p.max_tool_tokens}-{p.format}")
def test_a_warm_build_is_the_build_that_reads_every_event(
    stores: dict[int, SQLiteStore], policy: ContextPolicy
) -> None:
    """A new store object starts with empty caches: its long texts come from the events and its
    caps are made anew; the result is the same context, byte for byte, and so is a rebuild."""
    store = stores[600]
    warm = build_context(store, "s", policy)
    warm = build_context(store, "s", policy)
    context_capping._COUNTS.clear()
    with SQLiteStore.open(store.path) as cold:
        fresh = build_context(cold, "s", policy)
    assert fresh.rendered == warm.rendered
    assert fresh.manifest() == warm.manifest()


def test_capped_outputs_are_the_caps_made_from_the_whole_text(stores: dict[int, SQLiteStore]) -> None:
    """Each capped output of a warm build is what capping its whole text says, for each cap (no
    fill: the oldest unit is not squeezed under a cap of its own)."""
    store = stores[600]
    tok = store.tokenizer
    outputs = {r.event_id: r.event for r in store.read_session("s") if isinstance(r.event, ToolReturned)}
    seen = 0
    for cap in (200, 500, 1000):
        policy = ContextPolicy(budget=40_000, max_tool_tokens=cap, fill=False)
        build_context(store, "s", policy)
        for message in build_context(store, "s", policy).messages:
            if message.mode != "capped" or message.role != "tool":
                continue
            event = outputs[message.event_ids[0]]
            total = tok.count(event.content)
            ref = event.artifact_id or message.event_ids[0]
            notice = output_notice(ref, is_artifact=event.artifact_id is not None)
            expected = cap_text(event.content, cap, tok, notice, total_tokens=total)
            assert message.content == expected.text and message.shown_tokens == expected.shown_tokens
            seen += 1
    assert seen >= 3


class _Doubled:
    """An encoding that counts every token twice (another tokenizer, as far as counts go)."""

    def __init__(self) -> None:
        self.real = load_tokenizer()._encoding

    def encode_ordinary(self, text: str) -> list[int]:
        return [t for real in self.real.encode_ordinary(text) for t in (real, -1)]

    def decode_bytes(self, tokens: list[int]) -> bytes:
        return bytes(self.real.decode_bytes([t for t in tokens if t >= 0]))

    def decode(self, tokens: list[int], errors: str = "replace") -> str:
        return self.decode_bytes(tokens).decode("utf-8", errors=errors)


def test_remembered_counts_and_caps_are_the_tokenizers_own(tmp_path: Path) -> None:
    """Two stores with the same session and different tokenizers: what one remembers (counts of
    call ids and notices, capped texts) is never used by the other."""
    policy = ContextPolicy(budget=6000, max_tool_tokens=300)
    with _store(tmp_path / "a.db", 120) as a:
        one = build_context(a, "s", policy)
        doubled = SQLiteStore.open(tmp_path / "b.db")
        doubled.tokenizer = Tokenizer("doubled_test", _Doubled())
        events = list(_session(random.Random(7), 120))
        doubled.append("s", events)
        warm = build_context(doubled, "s", policy)
        warm = build_context(doubled, "s", policy)
        doubled.close()
    assert warm.total_tokens != one.total_tokens
    context_capping._COUNTS.clear()
    cold = SQLiteStore.open(tmp_path / "b.db")
    cold.tokenizer = Tokenizer("doubled_test", _Doubled())
    with cold:
        fresh = build_context(cold, "s", policy)
    assert fresh.rendered == warm.rendered and fresh.total_tokens == warm.total_tokens


_texts = st.text(min_size=0, max_size=40) | st.builds(
    lambda n, c: c * n, st.integers(0, 3 * INLINE_CHARS), st.sampled_from("ab\n é")
)
_ids = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True)


def _stored_item(event: MessageAppended | ToolReturned) -> tuple[Item, bool, int]:
    """The item a build reads for ``event``, appended to a new store: from its context index row
    joined to the log (the payload, and its blob when wanted); whether it is read whole, and the
    tokens the index stored."""
    with tempfile.TemporaryDirectory() as folder, SQLiteStore.open(Path(folder) / "s.db") as store:
        store.append("s", [event])
        materializer(store).catch_up()
        with store.reading() as conn:
            join = PAYLOAD_JOIN.format(table="c", wanted="c.whole = 1")
            row = conn.execute(
                f"SELECT c.event_id, c.length, c.whole, c.role, c.tokens, {PAYLOAD_COLUMNS} "
                f"FROM ctx_messages c {join} WHERE c.session_id = 's'"
            ).fetchone()
        fields = payload_fields(*row[5:])
        assert fields is not None
        item = item_of(row[0], row[1], bool(row[2]), fields, tool=row[3] == "tool")
        return item, bool(row[2]), row[4]


@settings(max_examples=40, deadline=None)
@given(
    content=_texts,
    name=st.none() | _ids,
    calls=st.none()
    | st.lists(st.tuples(_ids, _ids, st.text(max_size=30)), min_size=1, max_size=3, unique_by=lambda c: c[0]),
)
def test_a_message_read_with_its_row_says_what_the_event_says(
    content: str, name: str | None, calls: list[tuple[str, str, str]] | None
) -> None:
    tool_calls = None if calls is None else tuple(ToolCall(id=i, name=n, arguments=a) for i, n, a in calls)
    event = MessageAppended(role="assistant", content=content, name=name, tool_calls=tool_calls)
    item, whole, tokens = _stored_item(event)
    kept = len(content) <= INLINE_CHARS or tokens <= ContextPolicy(budget=1).max_message_tokens
    assert whole == kept == whole_of(event, tokens)
    assert item.content == (content if kept else None)
    assert item.length == len(content) and item.name == name and item.event_id == event.event_id
    assert item.tool_calls == event.tool_calls


@settings(max_examples=40, deadline=None)
@given(content=_texts, call_id=_ids, tool=st.none() | _ids, is_error=st.booleans())
def test_a_tool_output_read_with_its_row_says_what_the_event_says(
    content: str, call_id: str, tool: str | None, is_error: bool
) -> None:
    event = ToolReturned(tool_call_id=call_id, tool_name=tool, content=content, is_error=is_error)
    item, whole, tokens = _stored_item(event)
    kept = len(content) <= INLINE_CHARS or tokens <= ContextPolicy(budget=1).max_tool_tokens
    assert whole == kept == whole_of(event, tokens)
    # Over 1,024 bytes the text is in a blob, joined only when the build reads it whole.
    assert item.content == (content if kept else None)
    assert (item.length, item.tool_call_id, item.tool_name, item.is_error) == (
        len(content),
        call_id,
        tool,
        is_error,
    )
    big = len(content.encode("utf-8")) > 1024
    assert (item.artifact_id is not None) == big


def test_a_payload_is_decoded_only_at_the_current_schema_and_a_damaged_blob_is_reported() -> None:
    payload = '{"role":"user","content":"hi"}'
    assert payload_fields("message_appended", 1, payload, None, None) == {"role": "user", "content": "hi"}
    # Another schema version is left to the validating mapper, which upcasts it.
    assert payload_fields("message_appended", 2, payload, None, None) is None
    with pytest.raises(CorruptStoreError, match="tool_returned event cannot be read"):
        payload_fields("tool_returned", 1, '{"tool_call_id":"c"}', "zstd", b"not zstd")
