"""The seeds in the loop (turnlog.loop): a session's policy as an event, per-output modes made on the
write path and only read by builds, run-end compaction after run_finished commits, and failures
recorded as events without losing the run."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.helpers.fake_openai import FakeOpenAI, completion, fake_server  # noqa: F401  (the fixture)
from turnlog.cli import cli
from turnlog.loop import Handlers, after_commit, get_policy, set_policy
from turnlog.projections.context import ContextPolicy, build_context
from turnlog.recorder import SessionRecorder, session
from turnlog.store import (
    CompactionFailed,
    OutputCondensed,
    PolicySet,
    SessionPolicy,
    SQLiteStore,
    SummarizerUsage,
    SummaryRecorded,
)
from turnlog.summarizers import SummaryRequest, SummaryResult

BIG = "\n".join(f"src/mod{i}.py:{i}: error: check {i} failed (expected 4, got {i})" for i in range(500))
"""A tool output of about 10,000 tokens: far over the default cap of 1,000."""
UPPER = [sys.executable, "-c", "import sys; print(sys.stdin.read()[:300].upper())"]


def write_config(path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    config = path / "config.toml"
    config.write_text(text, encoding="utf-8")
    monkeypatch.setenv("TURNLOG_CONFIG", str(config))
    return config


def one_call(rec: SessionRecorder, tool: str, output: str, call_id: str = "c1") -> None:
    rec.assistant("", tool_calls=[{"id": call_id, "name": tool, "arguments": {"q": "x"}}])
    rec.tool_result(call_id, output)


def of_type(store: SQLiteStore, sid: str, cls: type) -> list[Any]:
    return [r.event for r in store.read_session(sid) if isinstance(r.event, cls)]


def file_digest(path: Path) -> str:
    """The store's file and its WAL (the -shm index is shared memory readers use)."""
    files = [p for p in sorted(path.parent.glob(path.name + "*")) if not p.name.endswith("-shm")]
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()


# --- the policy ------------------------------------------------------------------------------------


def test_policy_is_an_event_merged_field_by_field(file_store: SQLiteStore) -> None:
    file_store.append("s", [{"type": "message_appended", "role": "user", "content": "hi"}])
    assert get_policy(file_store, "s") == SessionPolicy()
    set_policy(file_store, "s", SessionPolicy(budget=8000, tool_output_modes={"search": "auto"}))
    set_policy(
        file_store, "s", SessionPolicy(compact_on_run_end=True, tool_output_modes={"grep": "custom:g"})
    )
    policy = get_policy(file_store, "s")
    assert policy.budget == 8000 and policy.compact_on_run_end is True
    assert policy.tool_output_modes == {"search": "auto", "grep": "custom:g"}
    assert policy.mode_for("search") == "auto" and policy.mode_for("other") == "simple"
    set_policy(file_store, "s", SessionPolicy(tool_output_modes={"default": "auto"}), replace=True)
    assert get_policy(file_store, "s") == SessionPolicy(tool_output_modes={"default": "auto"})
    assert get_policy(file_store, "s").mode_for("anything") == "auto"
    assert len(of_type(file_store, "s", PolicySet)) == 3
    # As of a position before the last policy, the earlier one holds.
    second = [r for r in file_store.read_session("s") if r.type == "policy_set"][1]
    assert get_policy(file_store, "s", at=second.position).budget == 8000


@pytest.mark.parametrize(
    "policy",
    [
        {"summarizer": "rm -rf /"},
        {"summarizer": "https://evil.example/steal"},
        {"tool_output_modes": {"x": "custom:sh -c id"}},
        {"tool_output_modes": {"x": "fancy"}},
        {"budget": 0},
        {"command": ["sh"]},
    ],
)
def test_a_policy_holds_names_only(file_store: SQLiteStore, policy: dict[str, Any]) -> None:
    file_store.append("s", [{"type": "message_appended", "role": "user", "content": "hi"}])
    from turnlog.store import InvalidEventError

    with pytest.raises(InvalidEventError):
        file_store.append("s", [{"type": "policy_set", "policy": policy}])
    assert file_store.head_version("s") == 1


def test_a_fork_inherits_the_policy_and_a_rewind_undoes_it(file_store: SQLiteStore) -> None:
    from turnlog.actions import fork_session, rewind_session

    file_store.append("s", [{"type": "message_appended", "role": "user", "content": "hi"}])
    set_policy(file_store, "s", SessionPolicy(budget=1234))
    fork_session(file_store, "s", 2, "f")
    assert get_policy(file_store, "f").budget == 1234
    rewind_session(file_store, "s", 1)
    assert get_policy(file_store, "s") == SessionPolicy()
    assert get_policy(file_store, "f").budget == 1234


# --- per-output modes ------------------------------------------------------------------------------


def test_auto_mode_condenses_on_the_write_path_and_builds_only_read(file_store: SQLiteStore) -> None:
    with session(file_store, "s") as rec:
        rec.system("You are a coder.")
        rec.user("Find the failing checks.")
        set_policy(file_store, "s", SessionPolicy(tool_output_modes={"search": "auto"}))
        rec.sync()
        with rec.run():
            one_call(rec, "search", BIG)
            one_call(rec, "other", BIG, "c2")
    views = of_type(file_store, "s", OutputCondensed)
    assert len(views) == 1  # only the tool whose mode is auto
    view = views[0]
    assert view.condenser.mode == "auto" and view.condenser.name == "extractive"
    assert view.source_tokens > 9000 and "src/mod" in view.text
    built = build_context(file_store, "s", ContextPolicy(budget=8000))
    modes = {m.tool_call_id: m.mode for m in built.messages if m.role == "tool"}
    assert modes == {"c1": "condensed", "c2": "capped"}
    shown = next(m for m in built.messages if m.tool_call_id == "c1")
    assert shown.content.startswith("[turnlog: summary of a tool output of")
    assert "the full text is artifact" in shown.content and shown.tokens <= 1000 + 20
    assert shown.tokens == 3 + 1 + file_store.tokenizer.count(shown.content) + file_store.tokenizer.count(
        "c1"
    )
    # Override what is shown, for one tool or all: the simple cap.
    for modes_override in ({"search": "simple"}, {"default": "simple"}):
        simple = build_context(file_store, "s", ContextPolicy(budget=8000, tool_output_modes=modes_override))
        assert next(m for m in simple.messages if m.tool_call_id == "c1").mode == "capped"
    assert built.total_tokens <= 8000


def test_a_build_never_summarizes_or_writes(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with SQLiteStore.open(db) as store:
        store.append("s", [{"type": "message_appended", "role": "user", "content": "go"}])
        store.append("s", [{"type": "policy_set", "policy": {"tool_output_modes": {"default": "auto"}}}])
        rec = SessionRecorder(store, "s", loop=False)  # an importer-like writer: no loop
        one_call(rec, "search", BIG)
    before = file_digest(db)
    with SQLiteStore.open(db, readonly=True) as store:
        built = build_context(store, "s", ContextPolicy(budget=4000))
        assert [m.mode for m in built.messages if m.role == "tool"] == ["capped"]
    assert file_digest(db) == before
    with SQLiteStore.open(db) as store:
        assert of_type(store, "s", OutputCondensed) == []


def test_custom_mode_runs_the_configured_command(
    file_store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(tmp_path, monkeypatch, f"[custom.upper]\ncommand = {json.dumps(UPPER)}\n")
    with session(file_store, "s") as rec:
        rec.user("go")
        set_policy(file_store, "s", SessionPolicy(tool_output_modes={"grep": "custom:upper"}))
        rec.sync()
        one_call(rec, "grep", BIG)
    (view,) = of_type(file_store, "s", OutputCondensed)
    assert view.condenser.mode == "custom" and view.condenser.name == "upper"
    assert view.text.startswith("SRC/MOD0.PY:0: ERROR")
    built = build_context(file_store, "s", ContextPolicy(budget=4000, cap_open_run=True))
    assert "SRC/MOD0.PY" in next(m for m in built.messages if m.role == "tool").content


def test_custom_mode_with_an_api_callable_and_run_end_timing(file_store: SQLiteStore) -> None:
    seen: list[int] = []

    def first_line(text: str) -> str:
        seen.append(len(text))
        return text.splitlines()[0]

    handlers = Handlers(custom={"first": first_line})
    with session(file_store, "s", handlers=handlers) as rec:
        rec.user("go")
        set_policy(
            file_store,
            "s",
            SessionPolicy(tool_output_modes={"default": "custom:first"}, condense_at="run_end"),
        )
        rec.sync()
        with rec.run():
            one_call(rec, "grep", BIG)
            assert of_type(file_store, "s", OutputCondensed) == []  # not before the run ends
        (view,) = of_type(file_store, "s", OutputCondensed)
    assert seen == [len(BIG)]  # the whole output, once
    assert view.text == BIG.splitlines()[0]


def test_a_failing_handler_never_loses_the_run(file_store: SQLiteStore) -> None:
    def broken(text: str) -> str:
        raise RuntimeError("the handler is broken\nsecond line")

    handlers = Handlers(custom={"broken": broken})
    with session(file_store, "s", handlers=handlers) as rec:
        rec.user("go")
        set_policy(
            file_store, "s", SessionPolicy(tool_output_modes={"grep": "custom:broken", "x": "custom:none"})
        )
        rec.sync()
        one_call(rec, "grep", BIG)
        one_call(rec, "x", BIG, "c2")
        rec.user("still recording")  # the recorder adopted the failure events: no conflict
        assert rec.last_report is not None and len(rec.last_report.errors) == 1
    failures = of_type(file_store, "s", CompactionFailed)
    assert [(f.stage, f.handler) for f in failures] == [("output", "broken"), ("output", "none")]
    assert failures[0].error == "RuntimeError: the handler is broken"
    assert "custom output handler 'none' is not configured" in failures[1].error
    assert of_type(file_store, "s", OutputCondensed) == []
    built = build_context(file_store, "s", ContextPolicy(budget=4000, cap_open_run=True))
    assert [m.mode for m in built.messages if m.role == "tool"] == ["capped", "capped"]


def test_outputs_under_the_threshold_are_left_alone(file_store: SQLiteStore) -> None:
    with session(file_store, "s") as rec:
        rec.user("go")
        set_policy(
            file_store, "s", SessionPolicy(tool_output_modes={"default": "auto"}, max_tool_tokens=5000)
        )
        rec.sync()
        one_call(rec, "a", "short output")
        one_call(rec, "b", BIG[:8000], "c2")  # ~1,700 tokens: under 5,000
        one_call(rec, "c", BIG, "c3")
    (view,) = of_type(file_store, "s", OutputCondensed)
    assert view.source_tokens > 5000


def test_the_openai_summarizer_of_the_configuration_bills_the_ledger(
    file_store: SQLiteStore, fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.reply = completion("500 checks failed in src/mod*.py; all expected 4.")
    write_config(
        tmp_path,
        monkeypatch,
        f'[summarizers.local]\nkind = "openai"\nmodel = "gpt-4o-mini"\nbase_url = "{fake.url}"\n'
        'api_key_env = "LOCAL_KEY"\n',
    )
    monkeypatch.setenv("LOCAL_KEY", "sk-local")
    with session(file_store, "s") as rec:
        rec.user("go")
        set_policy(file_store, "s", SessionPolicy(summarizer="local", tool_output_modes={"search": "auto"}))
        rec.sync()
        one_call(rec, "search", BIG)
    (view,) = of_type(file_store, "s", OutputCondensed)
    assert view.condenser.name == "local" and view.condenser.model == "gpt-4o-mini"
    assert (view.input_tokens, view.output_tokens) == (321, 45)
    assert fake.headers[0]["Authorization"] == "Bearer sk-local"
    assert "Output of search" in fake.requests[0]["messages"][1]["content"]


# --- run-end compaction ------------------------------------------------------------------------------


def long_run(rec: SessionRecorder, turns: int = 30) -> None:
    with rec.run():
        for i in range(turns):
            rec.user(f"step {i}: look at module {i} and say what is wrong with it in detail " * 2)
            rec.assistant(f"Module {i} divides by zero when the list is empty; fixed in src/m{i}.py. " * 2)


def test_compaction_runs_when_a_run_finishes(file_store: SQLiteStore) -> None:
    usage_seen: list[SummaryRequest] = []

    def summarize(request: SummaryRequest) -> SummaryResult:
        usage_seen.append(request)
        return SummaryResult(f"versions {request.first_version}-{request.last_version}: modules fixed.",
                             SummarizerUsage(input_tokens=100, output_tokens=10))  # fmt: skip

    from turnlog.summarizers import CallableSummarizer

    handlers = Handlers(summarizer=CallableSummarizer(summarize, name="mine", model="m-1"))
    with session(file_store, "s", handlers=handlers) as rec:
        rec.system("You are a coder.")
        set_policy(file_store, "s", SessionPolicy(compact_on_run_end=True, budget=1500))
        rec.sync()
        long_run(rec)
        report = rec.last_report
    assert report is not None and report.compaction is not None and report.compaction.met
    summaries = of_type(file_store, "s", SummaryRecorded)
    assert summaries and all(s.summarizer.name == "mine" for s in summaries)
    built = build_context(file_store, "s", ContextPolicy(budget=1500))
    assert built.omitted_messages == 0 and built.total_tokens <= 1500
    assert any(m.mode == "summary" for m in built.messages)


def test_a_stored_tool_cap_below_the_builders_least_still_compacts(file_store: SQLiteStore) -> None:
    """A policy may store max_tool_tokens 16 to 31; builds and run-end compaction read it as 32
    (it once raised a ValidationError at the run's end)."""
    with session(file_store, "s") as rec:
        rec.system("You are a coder.")
        set_policy(file_store, "s", SessionPolicy(compact_on_run_end=True, budget=1500, max_tool_tokens=16))
        rec.sync()
        long_run(rec)
        report = rec.last_report
    assert report is not None and not report.errors
    assert report.compaction is not None and report.compaction.met


def test_a_failing_run_end_summarizer_is_recorded(
    file_store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail = [sys.executable, "-c", "import sys; sys.stderr.write('model offline\\n'); sys.exit(3)"]
    write_config(
        tmp_path, monkeypatch, f'[summarizers.flaky]\nkind = "command"\ncommand = {json.dumps(fail)}\n'
    )
    with session(file_store, "s") as rec:
        rec.system("You are a coder.")
        set_policy(file_store, "s", SessionPolicy(compact_on_run_end=True, budget=1500, summarizer="flaky"))
        rec.sync()
        long_run(rec)
        rec.user("next run")  # the recorder goes on
    (failure,) = of_type(file_store, "s", CompactionFailed)
    assert failure.stage == "run_end" and failure.handler == "flaky" and failure.run_id
    assert "exited with 3: model offline" in failure.error
    assert of_type(file_store, "s", SummaryRecorded) == []
    types = [r.type for r in file_store.read_session("s")]
    assert types.index("run_finished") < types.index("compaction_failed") < len(types) - 1


def test_an_imported_policy_cannot_run_anything(file_store: SQLiteStore, tmp_path: Path) -> None:
    """A log from elsewhere names a summarizer this machine does not define: an import runs nothing,
    and a later run end records that the name is unknown here instead of running anything."""
    from turnlog.exporters import export_sessions
    from turnlog.importers import import_file

    with SQLiteStore.open(tmp_path / "elsewhere.db") as elsewhere:
        elsewhere.append(
            "imported",
            [
                {"type": "message_appended", "role": "user", "content": "hi"},
                {
                    "type": "policy_set",
                    "policy": {"compact_on_run_end": True, "budget": 100, "summarizer": "evil"},
                },
                {"type": "run_started", "run_id": "r"},
                {"type": "run_finished", "run_id": "r"},
            ],
        )
        text = "".join(export_sessions(elsewhere, ["imported"], "jsonl"))
    import_file(file_store, text, "jsonl")
    assert [r.type for r in file_store.read_session("imported")][
        -1
    ] == "run_finished"  # the import ran nothing
    report = after_commit(file_store, "imported", file_store.read_session("imported")[-1:])
    assert "summarizer 'evil' is not configured" in report.errors[0]
    (failure,) = of_type(file_store, "imported", CompactionFailed)
    assert failure.handler == "evil"


# --- the CLI ----------------------------------------------------------------------------------------


def cli_run(runner: CliRunner, db: Path, *args: str, input: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(cli, ["--db", str(db), *args], input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def test_cli_policy_show_set_and_errors(runner: CliRunner, db_path: Path) -> None:
    cli_run(
        runner, db_path, "append", "s", input='{"type": "message_appended", "role": "user", "content": "hi"}'
    )
    code, out, _ = cli_run(runner, db_path, "policy", "s")
    assert code == 0 and out.startswith("no policy set")
    code, out, err = cli_run(
        runner, db_path, "policy", "s", "--compact-on-run-end", "--budget", "8000",
        "--summarizer", "extractive", "--tool-output-mode", "search=auto",
        "--tool-output-mode", "default=simple",
    )  # fmt: skip
    assert (
        code == 0 and "compact on run end: yes" in out and "search=auto, default=simple" in out and err == ""
    )
    code, out, _ = cli_run(runner, db_path, "policy", "s", "--json")
    data = json.loads(out)
    assert data["policy"]["budget"] == 8000 and data["policy"]["tool_output_modes"]["search"] == "auto"
    code, out, err = cli_run(runner, db_path, "policy", "s", "--tool-output-mode", "grep=custom:mine")
    assert code == 0 and "custom handler 'mine' not defined" in err
    for bad in (["--tool-output-mode", "nomode"], ["--tool-output-mode", "x=shell"], ["--budget", "0"]):
        code, out, err = cli_run(runner, db_path, "policy", "s", *bad)
        assert code == 2 and "Traceback" not in out + err
    code, out, err = cli_run(runner, db_path, "policy", "nope", "--budget", "5")
    assert code == 1 and len((out + err).strip().splitlines()) == 1
    code, out, _ = cli_run(runner, db_path, "policy", "nope", "--budget", "5", "--json")
    assert code == 1 and "error" in json.loads(out)


def test_cli_append_run_finished_compacts_and_context_uses_the_policy_budget(
    runner: CliRunner, db_path: Path
) -> None:
    events = [{"type": "message_appended", "role": "system", "content": "You are a coder."}]
    events.append({"type": "run_started", "run_id": "r1"})
    for i in range(30):
        events.append(
            {"type": "message_appended", "role": "user", "content": f"step {i}: check module {i} " * 3}
        )
        events.append(
            {"type": "message_appended", "role": "assistant", "content": f"module {i} is fine " * 3}
        )
    cli_run(runner, db_path, "append", "s", input=json.dumps(events))
    cli_run(runner, db_path, "policy", "s", "--compact-on-run-end", "--budget", "1500")
    code, _, err = cli_run(runner, db_path, "append", "s", input='{"type": "run_finished", "run_id": "r1"}')
    assert code == 0 and err == ""
    with SQLiteStore.open(db_path) as store:
        assert of_type(store, "s", SummaryRecorded)
    code, out, _ = cli_run(runner, db_path, "context", "s", "--json")
    assert code == 0 and json.loads(out)["manifest"]["budget"] == 1500
    assert json.loads(out)["manifest"]["omitted_messages"] == 0


def test_cli_failing_summarizer_warns_and_keeps_the_append(
    runner: CliRunner, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail = [sys.executable, "-c", "import sys; sys.exit(4)"]
    write_config(
        tmp_path, monkeypatch, f'[summarizers.bad]\nkind = "command"\ncommand = {json.dumps(fail)}\n'
    )
    events = [{"type": "run_started", "run_id": "r1"}]
    events += [
        {"type": "message_appended", "role": "user", "content": f"message {i} " * 40} for i in range(40)
    ]
    cli_run(runner, db_path, "append", "s", input=json.dumps(events))
    cli_run(runner, db_path, "policy", "s", "--compact-on-run-end", "--budget", "900", "--summarizer", "bad")
    code, out, err = cli_run(runner, db_path, "append", "s", input='{"type": "run_finished", "run_id": "r1"}')
    assert code == 0 and "run_finished" in out
    assert err.startswith("warning: run-end compaction failed: summarizer command exited with 4")
    assert len(err.strip().splitlines()) == 1
    with SQLiteStore.open(db_path) as store:
        assert [r.type for r in store.read_session("s")][-2:] == ["run_finished", "compaction_failed"]


def test_cli_context_budget_needs_a_policy_or_an_option(runner: CliRunner, db_path: Path) -> None:
    cli_run(
        runner, db_path, "append", "s", input='{"type": "message_appended", "role": "user", "content": "hi"}'
    )
    code, out, err = cli_run(runner, db_path, "context", "s")
    assert code == 2 and "--budget is required" in out + err and "turnlog policy s --budget" in out + err


def test_cli_context_tool_output_mode_override(runner: CliRunner, db_path: Path) -> None:
    with SQLiteStore.open(db_path) as store, session(store, "s") as rec:
        rec.user("go")
        set_policy(store, "s", SessionPolicy(tool_output_modes={"search": "auto"}))
        rec.sync()
        one_call(rec, "search", BIG)
    code, out, _ = cli_run(
        runner, db_path, "context", "s", "--budget", "4000", "--cap-open-run", "--manifest"
    )
    assert "condensed" in [e["mode"] for e in json.loads(out)["manifest"]["entries"]]
    code, out, _ = cli_run(
        runner, db_path, "context", "s", "--budget", "4000", "--cap-open-run", "--manifest",
        "--tool-output-mode", "search=simple",
    )  # fmt: skip
    assert "condensed" not in [e["mode"] for e in json.loads(out)["manifest"]["entries"]]
    code, out, err = cli_run(runner, db_path, "context", "s", "--budget", "4000", "--tool-output-mode", "x=y")
    assert code == 2 and "output mode must be simple, auto or custom:NAME" in out + err


def test_run_end_compaction_honours_a_stored_cache_stable_policy(
    file_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop compacts for the contexts' own policy (cache-stable, as stored), and the summaries
    it appends do not move the prefix of the next call: they enter at the cut's next move."""
    import turnlog.loop as loop_module

    seen: list[ContextPolicy] = []
    real = loop_module.compact

    def spy(store: Any, sid: str, policy: ContextPolicy, *args: Any, **kwargs: Any) -> Any:
        seen.append(policy)
        return real(store, sid, policy, *args, **kwargs)

    monkeypatch.setattr(loop_module, "compact", spy)
    stored = SessionPolicy(compact_on_run_end=True, budget=1500, cache_stable=True, refill_to=0.5)
    with session(file_store, "s") as rec:
        rec.system("You are a coder.")
        set_policy(file_store, "s", stored)
        rec.sync()
        long_run(rec)
        rec.sync()
        last_call = file_store.head_position() - 1  # before the run's last answer
        report = rec.last_report
        assert report is not None and report.compaction is not None
        assert of_type(file_store, "s", SummaryRecorded)  # the run end compacted
        rec.user("and now module 99?")
        rec.sync()
        next_call = file_store.head_position()
    assert seen and seen[0].cache_stable and seen[0].refill_to == 0.5 and seen[0].budget == 1500
    policy = ContextPolicy(budget=1500, cache_stable=True, refill_to=0.5)
    before = build_context(file_store, "s", policy, last_call)
    after = build_context(file_store, "s", policy, next_call)
    assert after.cut == before.cut
    assert after.rendered[: len(before.rendered)] == before.rendered
    assert not any(m.mode == "summary" for m in after.messages)
