"""The event models: frozen, strict, documented field by field, and every stored schema version keeps
loading (committed fixtures, upcasting in one place)."""

from __future__ import annotations

import ast
import inspect
import json
import os
import textwrap
import uuid
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from tests.store_contract import EVENT_STRATEGIES, PIN_TYPES, example_events, identifiers, summaries, texts
from turnlog.store import (
    CURRENT_VERSIONS,
    EVENT_ADAPTER,
    EVENT_CLASSES,
    ForkPoint,
    InvalidEventError,
    ManifestEntry,
    MessageAppended,
    Pin,
    SessionStarted,
    SQLiteStore,
    SummarizerInfo,
    SummarizerUsage,
    TodoItem,
    ToolCall,
    ToolReturned,
    UsageRecorded,
    events_loop,
    events_policy,
    events_usage,
    limits,
    parse_event,
)
from turnlog.store import events as events_module
from turnlog.store.events import dump_payload, load_stored, new_event_id

FIXTURE = Path(__file__).parent / "fixtures" / "events_v1.jsonl"
# Every model the events module defines, found rather than listed, so a new one cannot slip past.
ALL_MODELS: tuple[type[BaseModel], ...] = tuple(
    cls
    for module in (events_module, events_loop, events_policy, events_usage)
    for cls in vars(module).values()
    if isinstance(cls, type)
    and issubclass(cls, BaseModel)
    and cls.__module__ == module.__name__
    and not cls.__name__.startswith("_")
)


def _fixture_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines() if line.strip()]


def _instances() -> list[BaseModel]:
    values: list[BaseModel] = [
        ForkPoint(session_id="p", version=3),
        Pin(reason="r"),
        ToolCall(id="c", name="f"),
        TodoItem(id="t", content="do"),
        ManifestEntry(event_ids=("e",), role="tool", mode="capped", category="tool_output", tokens=3),
        SummarizerInfo(name="openai", model="gpt-4o-mini"),
        SummarizerUsage(input_tokens=1, output_tokens=2),
        events_loop.Origin(framework="openai-agents", item={"type": "message", "content": [None]}),
        events_policy.SessionPolicy(budget=8000, tool_output_modes={"search": "auto"}),
        events_policy.CondenserInfo(mode="custom", name="grep-errors"),
        UsageRecorded(model="m", input_tokens=10, output_tokens=2, scope="run", calls=3, source="swe-agent"),
    ]
    return [*example_events(), *values]


def test_the_model_list_is_complete() -> None:
    assert set(EVENT_CLASSES.values()) < set(ALL_MODELS)
    assert {ForkPoint, Pin, ToolCall, TodoItem} < set(ALL_MODELS)
    assert {type(i) for i in _instances()} == set(ALL_MODELS)


# --- the models' shape -----------------------------------------------------------------------------


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_models_are_frozen_and_forbid_extra_fields(model: type[BaseModel]) -> None:
    assert model.model_config.get("frozen") is True
    assert model.model_config.get("extra") == "forbid"
    instance = next(i for i in _instances() if type(i) is model)
    field = next(iter(model.model_fields))
    with pytest.raises(ValidationError, match="frozen"):
        setattr(instance, field, getattr(instance, field))
    data = instance.model_dump()
    assert model.model_validate(data) == instance
    with pytest.raises(ValidationError, match="extra"):
        model.model_validate({**data, "surprise": 1})


def _documented_fields(cls: type) -> tuple[set[str], set[str]]:
    """(annotated fields in the class body, those followed by a docstring)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0]
    assert isinstance(body, ast.ClassDef)
    annotated: set[str] = set()
    documented: set[str] = set()
    for statement, following in zip(body.body, [*body.body[1:], None], strict=True):
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            annotated.add(statement.target.id)
            if (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
                and following.value.value.strip()
            ):
                documented.add(statement.target.id)
    return annotated, documented


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_every_field_has_a_docstring(model: type[BaseModel]) -> None:
    seen: set[str] = set()
    for cls in model.__mro__:
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        annotated, documented = _documented_fields(cls)
        assert annotated == documented, f"{cls.__name__}: undocumented {sorted(annotated - documented)}"
        seen |= annotated
    assert set(model.model_fields) <= seen
    assert model.__doc__ and model.__doc__.strip()


def test_the_docstring_check_can_fail() -> None:
    class Undocumented(BaseModel):
        documented: int
        """Yes."""
        bare: str

    annotated, documented = _documented_fields(Undocumented)
    assert annotated - documented == {"bare"}


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_no_field_invents_data_for_old_rows(model: type[BaseModel]) -> None:
    # A default factory would give every old row a fresh made-up value; only the event id may have one,
    # and stored rows always carry theirs.
    factories = {name for name, f in model.model_fields.items() if f.default_factory is not None}
    assert factories <= {"event_id"}


@pytest.mark.parametrize(("name", "model"), EVENT_CLASSES.items())
def test_discriminator_and_schema_version(name: str, model: type[BaseModel]) -> None:
    type_field = model.model_fields["type"]
    assert type_field.default == name
    assert get_origin(type_field.annotation) is Literal and get_args(type_field.annotation) == (name,)
    version_field = model.model_fields["schema_version"]
    assert version_field.default == CURRENT_VERSIONS[name]
    assert get_args(version_field.annotation) == (CURRENT_VERSIONS[name],)


def test_non_finite_numbers_are_refused() -> None:
    # JSON cannot hold them: stored, they would silently turn into null.
    for value in (float("inf"), float("-inf"), float("nan")):
        with pytest.raises(ValidationError):
            SessionStarted(metadata={"x": value})
        with pytest.raises(ValidationError):
            SessionStarted(metadata={"x": [1, {"y": value}]})
    assert SessionStarted(metadata={"x": 1e308}).metadata == {"x": 1e308}


def test_token_texts() -> None:
    message = MessageAppended(
        role="assistant", content="hi", name="bot", tool_calls=(ToolCall(id="c1", name="f", arguments="{}"),)
    )
    assert message.token_texts() == ("hi", "bot", "c1", "f", "{}")
    assert ToolReturned(tool_call_id="c1", content="out").token_texts() == ("out", "c1")
    assert SessionStarted(title="not sent to the model").token_texts() == ()


_any_event = st.one_of(
    *EVENT_STRATEGIES.values(),
    *(st.builds(cls, target_event_id=identifiers, reason=st.none() | texts) for cls in PIN_TYPES.values()),
    st.integers(2, 10**6).flatmap(lambda before: summaries(before_version=before)),
)


@settings(max_examples=60, deadline=None)
@given(event=_any_event)
def test_events_round_trip_through_json(event: Any) -> None:
    assert parse_event(event.model_dump(mode="json")) == event
    assert EVENT_ADAPTER.validate_json(EVENT_ADAPTER.dump_json(event)) == event
    stored = load_stored(event.type, event.schema_version, event.event_id, dump_payload(event))
    assert stored == event


# --- stored rows of old versions -----------------------------------------------------------------


def test_the_v1_fixture_has_one_row_of_every_type() -> None:
    rows = _fixture_rows()
    assert sorted(row["type"] for row in rows) == sorted(EVENT_CLASSES)
    assert all(row["schema_version"] == 1 for row in rows)
    assert all(set(row) == {"type", "schema_version", "event_id", "payload"} for row in rows)


@pytest.mark.parametrize("row", _fixture_rows(), ids=lambda row: row["type"])
def test_v1_rows_load(row: dict[str, Any]) -> None:
    event = load_stored(row["type"], row["schema_version"], row["event_id"], dict(row["payload"]))
    assert isinstance(event, EVENT_CLASSES[row["type"]])
    assert event.event_id == row["event_id"]
    if CURRENT_VERSIONS[row["type"]] == 1:
        # While version 1 is current, loading is lossless: nothing dropped, nothing invented.
        assert dump_payload(event) == row["payload"]
    envelope = {"type": row["type"], "schema_version": 1, "event_id": row["event_id"], **row["payload"]}
    assert parse_event(envelope) == event


def test_v1_fixture_appends_as_one_session() -> None:
    rows = _fixture_rows()
    given_rows = [
        {"type": r["type"], "schema_version": 1, "event_id": r["event_id"], **r["payload"]} for r in rows
    ]
    with SQLiteStore.open(":memory:") as s:
        # The fixture's session_started forks "parent-session" at version 12: it must exist.
        s.append(
            "parent-session",
            [{"type": "message_appended", "role": "user", "content": f"m{i}"} for i in range(12)],
        )
        records = s.append("fixture", given_rows)
        loaded = [load_stored(r["type"], 1, r["event_id"], dict(r["payload"])) for r in rows]
        assert [r.event for r in records] == loaded
        assert records[0].version == 13
        assert [r.event for r in s.read_session("fixture", from_version=13)] == loaded
        assert len(s.read_session("fixture")) == 12 + len(loaded)
        assert s.verify().ok


@pytest.mark.parametrize("name", sorted(EVENT_CLASSES))
def test_a_newer_schema_version_is_refused(name: str) -> None:
    newer = CURRENT_VERSIONS[name] + 1
    with pytest.raises(InvalidEventError) as info:
        load_stored(name, newer, "e1", {})
    message = str(info.value)
    assert name in message and f"schema_version {newer}" in message and "upgrade turnlog" in message
    with pytest.raises(InvalidEventError, match=rf"event: {name}: schema_version {newer} is newer"):
        parse_event({"type": name, "schema_version": newer})


@pytest.mark.parametrize("version", [0, -1, "1", True, 1.0, None])
def test_a_malformed_schema_version_is_refused(version: object) -> None:
    with pytest.raises(InvalidEventError, match="schema_version"):
        parse_event({"type": "run_started", "run_id": "r", "schema_version": version})


def test_unknown_types_are_refused_everywhere() -> None:
    with pytest.raises(InvalidEventError, match=r"unknown event type 'message_edited'.*message_appended"):
        load_stored("message_edited", 1, "e1", {})
    with pytest.raises(InvalidEventError, match="unknown event type 'message_edited'"):
        parse_event({"type": "message_edited"})


@pytest.fixture
def message_v3(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Pretend message_appended is at schema version 3: v1 called the text ``text``, v2 lacked the
    final mark that v3 adds. Returns the log of upcasters run."""
    ran: list[int] = []

    def v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
        ran.append(1)
        out = dict(payload)
        out["content"] = out.pop("text")
        return out

    def v2_to_v3(payload: dict[str, Any]) -> dict[str, Any]:
        ran.append(2)
        return {**payload, "content": payload["content"] + "!"}

    monkeypatch.setitem(events_module.CURRENT_VERSIONS, "message_appended", 3)
    monkeypatch.setitem(events_module.UPCASTERS, ("message_appended", 1), v1_to_v2)
    monkeypatch.setitem(events_module.UPCASTERS, ("message_appended", 2), v2_to_v3)
    return ran


def test_upcasters_are_applied_in_order(message_v3: list[int]) -> None:
    event = load_stored("message_appended", 1, "e1", {"role": "user", "text": "hi"})
    assert event == MessageAppended(role="user", content="hi!", event_id="e1")
    assert message_v3 == [1, 2]
    message_v3.clear()
    assert load_stored("message_appended", 2, "e2", {"role": "user", "content": "yo"}).content == "yo!"
    assert message_v3 == [2]
    message_v3.clear()
    assert load_stored("message_appended", 3, "e3", {"role": "user", "content": "as is"}).content == "as is"
    assert message_v3 == []
    parsed = parse_event({"type": "message_appended", "schema_version": 1, "role": "user", "text": "x"})
    assert parsed.content == "x!"


def test_a_missing_upcaster_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(events_module.CURRENT_VERSIONS, "run_started", 2)
    with pytest.raises(InvalidEventError, match="run_started: no upcaster from schema_version 1"):
        load_stored("run_started", 1, "e1", {"run_id": "r"})


def test_the_store_reads_old_rows_through_the_upcasters(monkeypatch: pytest.MonkeyPatch) -> None:
    with SQLiteStore.open(":memory:") as s:
        stored = s.append("s", [MessageAppended(role="user", content="old")])[0]
        monkeypatch.setitem(events_module.CURRENT_VERSIONS, "message_appended", 2)
        monkeypatch.setitem(
            events_module.UPCASTERS,
            ("message_appended", 1),
            lambda payload: {**payload, "content": payload["content"].upper()},
        )
        assert s.read_session("s")[0].event.content == "OLD"
        assert s.get_event(stored.event_id).event.content == "OLD"
        assert s.verify().ok  # upcasting never touches the stored row


def test_new_event_ids_are_uuid4_hex_and_unique() -> None:
    ids = {new_event_id() for _ in range(50_000)}
    assert len(ids) == 50_000
    for event_id in list(ids)[:500]:
        parsed = uuid.UUID(event_id)
        assert parsed.hex == event_id
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


def test_the_events_of_one_batch_have_distinct_short_ids(tmp_path: Path) -> None:
    """`turnlog log`, the agent tool and error messages show an event by the first 12 characters of
    its id, and take such a prefix back: ids made within one millisecond must still differ there
    (which is why ids are not time-first, like version 7 UUIDs, whose first 12 are the millisecond)."""
    store = SQLiteStore.open(tmp_path / "ids.db")
    try:
        records = store.append("s", [MessageAppended(role="user", content=f"m{i}") for i in range(200)])
        found = store.find_event("s", records[137].event_id[:12])
    finally:
        store.close()
    assert len({r.event_id[:12] for r in records}) == 200
    assert found.event_id == records[137].event_id


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_repeat_its_parents_event_ids() -> None:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send its next ids and leave without running pytest's cleanup
        os.write(write_end, " ".join(new_event_id() for _ in range(3)).encode())
        os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    child = os.read(read_end, 4096).decode().split()
    os.close(read_end)
    parent = [new_event_id() for _ in range(3)]
    assert len(child) == 3
    assert not set(child) & set(parent)


# --- bounds: no number, no nesting that the store could not hold or sum ------------------------


def _has_int(annotation: object) -> bool:
    if annotation is int:
        return True
    return any(_has_int(arg) for arg in get_args(annotation) if arg is not bool)


def _int_fields(model: type[BaseModel]) -> list[str]:
    return [
        name
        for name, field in model.model_fields.items()
        if name != "schema_version" and _has_int(field.annotation)
    ]


def test_every_model_with_an_int_field_has_an_instance_here() -> None:
    covered = {type(instance) for instance in _instances()}
    assert {m for m in ALL_MODELS if _int_fields(m)} <= covered
    # The finder itself finds what it must (so the bound test below cannot pass on nothing).
    assert set(_int_fields(events_module.UsageRecorded)) >= {"input_tokens", "reasoning_tokens"}
    assert set(_int_fields(events_module.ArtifactWritten)) == {"size"}


@pytest.mark.parametrize("instance", _instances(), ids=lambda i: type(i).__name__)
def test_every_int_field_is_bounded(instance: BaseModel) -> None:
    # A value past SQLite's 64-bit integers bricked the store; a negative count is nonsense.
    data = instance.model_dump()
    for name in _int_fields(type(instance)):
        for value in (2**63, 2**63 - 1, limits.MAX_VERSION + 1, -1):
            if name in ("at_position", "head_version") and value == -1:
                pass  # 0 is allowed ("none"), -1 is not: checked like the others
            with pytest.raises(ValidationError):
                type(instance).model_validate({**data, name: value})
        # The bound refuses no realistic value: a billion tokens, a version in the billions.
        ok = 10**9 if name != "level" else 32
        if name in ("first_version", "last_version"):
            continue  # the range check ties these two together
        if name == "calls" and getattr(instance, "scope", None) == "call":
            continue  # only a run's totals count calls (test_usage_scope_fields)
        type(instance).model_validate({**data, name: ok})


@pytest.mark.parametrize(
    "field", ["input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"]
)
def test_a_huge_usage_count_is_refused_with_our_error(field: str) -> None:
    usage = {"type": "usage_recorded", "model": "m", "input_tokens": 1, "output_tokens": 1}
    for value in (2**62, 2**63, 10**19, -1):
        with pytest.raises(InvalidEventError, match=field):
            parse_event({**usage, field: value})
    with pytest.raises(InvalidEventError, match=field):
        parse_event({**usage, field: 1.5})  # a fractional count is refused, never truncated
    assert parse_event({**usage, field: limits.MAX_TOKENS}) is not None


def test_context_built_counts_are_bounded() -> None:
    entry = {"event_ids": ["e"], "role": "user", "mode": "full", "category": "message", "tokens": 1}
    built = {
        "type": "context_built",
        "at_position": 1,
        "head_version": 1,
        "format": "openai",
        "tokenizer": "t",
        "budget": 10,
        "total_tokens": 1,
        "policy": {},
        "entries": [entry],
    }
    parse_event(built)
    for field in ("at_position", "head_version", "budget", "total_tokens"):
        with pytest.raises(InvalidEventError, match=field):
            parse_event({**built, field: 2**63})
    with pytest.raises(InvalidEventError, match="tokens"):
        parse_event({**built, "entries": [{**entry, "tokens": 2**63}]})


def _text(value: Any) -> str:
    """JSON text of a nested value, written without recursion (json.dumps recurses)."""
    opened = closed = ""
    while isinstance(value, (list, dict)):
        opened += "[" if isinstance(value, list) else '{"k": '
        closed = ("]" if isinstance(value, list) else "}") + closed
        value = value[0] if isinstance(value, list) else value["k"]
    return opened + json.dumps(value) + closed


def _nested(depth: int, kind: str = "list") -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda v: {"type": "session_started", "metadata": {"x": v}}, id="metadata"),
        pytest.param(
            lambda v: {
                "type": "context_built",
                "at_position": 1,
                "head_version": 1,
                "format": "text",
                "tokenizer": "t",
                "budget": 1,
                "total_tokens": 0,
                "policy": {"x": v},
                "entries": [],
            },
            id="policy",
        ),
        pytest.param(
            lambda v: {
                "type": "message_appended",
                "role": "assistant",
                "tool_calls": [{"id": "c", "name": "f", "arguments": _text(v)}],
            },
            id="tool-call-arguments",
        ),
        pytest.param(
            lambda v: {
                "type": "message_appended",
                "role": "user",
                "origin": {"framework": "f", "item": {"x": v}},
            },
            id="origin-item",
        ),
        pytest.param(
            lambda v: {
                "type": "state_recorded",
                "framework": "f",
                "namespace": "",
                "key": "k",
                "media_type": "application/json",
                "content": "{}",
                "metadata": {"x": v},
            },
            id="state-metadata",
        ),
    ],
)
def test_json_nested_too_deep_is_refused_at_input(make: Any) -> None:
    for kind in ("list", "dict"):
        parse_event(make(_nested(127, kind)))  # 128 levels with the field's own object: accepted
        for depth in (129, 300, 100_000):
            with pytest.raises(InvalidEventError, match="nested more than 128 levels"):
                parse_event(make(_nested(depth, kind)))


def test_deep_json_text_is_refused_not_a_recursion_error() -> None:
    deep = '{"type": "session_started", "metadata": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    with pytest.raises(InvalidEventError, match="nested more than 128 levels"):
        events_module.parse_events_json(deep)
    with pytest.raises(InvalidEventError, match="line 2: JSON nested more than 128"):
        events_module.parse_events_json('{"type": "session_started"}\n' + "[" * 100_000)


def test_the_depth_helper_for_importers() -> None:
    check = limits.check_json_depth
    check(_nested(128), "x")
    check(json.dumps(_nested(128)), "x")
    check('["' + "[" * 500 + '"]', "x")  # brackets inside a string do not nest
    check('["\\"' + "[" * 500 + '"]', "x")  # nor after an escaped quote
    for value in (_nested(129), json.dumps(_nested(129, "dict")), "[" * 200_000):
        with pytest.raises(InvalidEventError, match="where: JSON nested more than 128"):
            check(value, "where")


def test_text_that_is_not_json_is_not_refused_for_its_brackets() -> None:
    # Tool-call arguments are kept verbatim and need not be JSON: braces in code are no nesting.
    text = "{" * 500 + " not json"
    assert ToolCall(id="c", name="f", arguments=text).arguments == text
    limits.check_json_depth("function f() {" * 300, "x")
    with pytest.raises(ValidationError, match="nested more than 128"):
        ToolCall(id="c", name="f", arguments="[" * 100_000)  # a JSON parser would recurse into it


def test_usage_scope_fields() -> None:
    """usage_recorded 2: calls only with a run's totals, call_event_id only with one call; a
    version-1 payload reads as one call with the new fields at their defaults."""
    with pytest.raises(ValidationError, match="scope 'run' only"):
        UsageRecorded(model="m", input_tokens=1, output_tokens=1, calls=2)
    with pytest.raises(ValidationError, match="have none"):
        UsageRecorded(model="m", input_tokens=1, output_tokens=1, scope="run", call_event_id="e1")
    with pytest.raises(ValidationError):
        UsageRecorded(model="m", input_tokens=1, output_tokens=1, cost_usd=float("nan"))
    old = parse_event({"type": "usage_recorded", "schema_version": 1, "model": "m", "input_tokens": 5,
                       "output_tokens": 2})  # fmt: skip
    assert isinstance(old, UsageRecorded) and old.schema_version == 2
    assert (old.scope, old.calls, old.call_event_id, old.cost_usd, old.output_lower_bound) == (
        "call",
        None,
        None,
        None,
        False,
    )


def test_usage_names_the_call_it_belongs_to_in_its_session(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "t.db") as store:
        answer = MessageAppended(role="assistant", content="done")
        store.append("s", [MessageAppended(role="user", content="go"), answer])
        usage = UsageRecorded(model="m", input_tokens=9, output_tokens=1, call_event_id=answer.event_id)
        store.append("s", [usage])  # the message stored before it
        other = MessageAppended(role="assistant", content="in the same batch")
        store.append(
            "s",
            [other, UsageRecorded(model="m", input_tokens=1, output_tokens=1, call_event_id=other.event_id)],
        )
        with pytest.raises(InvalidEventError, match="call_event_id names no message"):
            store.append(
                "t",
                [UsageRecorded(model="m", input_tokens=1, output_tokens=1, call_event_id=answer.event_id)],
            )
        with pytest.raises(InvalidEventError, match="call_event_id names no message"):
            store.append(
                "s", [UsageRecorded(model="m", input_tokens=1, output_tokens=1, call_event_id=usage.event_id)]
            )
        assert store.head_version("s") == 5 and store.head_version("t") == 0


def test_a_field_name_with_a_line_break_keeps_the_error_on_one_line() -> None:
    with pytest.raises(InvalidEventError) as caught:
        parse_event({"type": "message_appended", "content": "x", "\n": None, "\x1b[2J": 1})
    text = str(caught.value)
    assert "\n" not in text and "\x1b" not in text
    assert "'\\n': unknown field" in text and "role: required field is missing" in text
