"""`turnlog mcp`: the agent tool over MCP on stdio, driven by the mcp package's own stdio client
against the real `turnlog` process; and `import turnlog` exposing the tool and context API."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from click.testing import CliRunner
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import turnlog
from turnlog.cli import cli
from turnlog.mcp_server import OUTPUT_SCHEMA, TOOL_CALL_ID_META
from turnlog.projections.artifacts import list_artifacts
from turnlog.projections.todos import current_todos
from turnlog.store import MessageAppended, TodosUpdated, ToolCall, ToolReturned
from turnlog.tool import help_card

ROOT = Path(__file__).parent.parent
SESSION_FILE = ROOT / "scripts" / "data" / "coding_session.jsonl"
SID = "fix-rounding"
OTHER = "other"
T = TypeVar("T")


@pytest.fixture
def db(tmp_path: Path, runner: CliRunner) -> Path:
    path = tmp_path / "t.db"
    result = runner.invoke(cli, ["--db", str(path), "append", SID, "--file", str(SESSION_FILE)])
    assert result.exit_code == 0, result.output
    with turnlog.open_store(path) as store:
        store.append(OTHER, [MessageAppended(role="user", content="another session")])
    return path


def _command(db: Path, session: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "turnlog.cli", "--db", str(db), "mcp", "--session", session, *extra]


@asynccontextmanager
async def _connected(db: Path, session: str, *extra: str) -> AsyncIterator[ClientSession]:
    command, *args = _command(db, session, *extra)
    params = StdioServerParameters(command=command, args=args, cwd=str(ROOT))
    with open(db.parent / "server.err", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as client:
            yield client


def serve(db: Path, session: str, scenario: Callable[[ClientSession], Awaitable[T]], *extra: str) -> T:
    """Start `turnlog mcp` for ``session``, initialize a client session, run ``scenario`` in it."""

    async def main() -> T:
        async with _connected(db, session, *extra) as client:
            await client.initialize()
            return await scenario(client)

    return anyio.run(main)


def cli_call(db: Path, session: str, envelope: Any) -> tuple[int, str]:
    """What `turnlog tool call` prints for this envelope (not recorded, so the log is unchanged)."""
    args = ["--db", str(db), "tool", "call", session, "--no-record"]
    result = CliRunner().invoke(cli, args, input=json.dumps(envelope))
    return result.exit_code, result.output.removesuffix("\n")


def events(db: Path) -> int:
    with turnlog.open_store(db, readonly=True) as store:
        return store.count_events()


def head(db: Path, session: str = SID) -> int:
    with turnlog.open_store(db, readonly=True) as store:
        return store.head_version(session)


def text_of(result: Any) -> str:
    [content] = result.content
    assert content.type == "text"
    return str(content.text)


def test_initialize_and_list_tools_gives_one_tool_with_the_strict_envelope_schema(db: Path) -> None:
    async def scenario(client: ClientSession) -> tuple[Any, Any]:
        init = await client.initialize()
        return init, await client.list_tools()

    init, listed = serve(db, SID, scenario)
    assert init.server_info.name == "turnlog" and init.capabilities.tools is not None
    schema = json.loads(CliRunner().invoke(cli, ["tool", "schema"]).output)["function"]["parameters"]
    [tool] = listed.tools
    assert tool.name == "turnlog"
    assert tool.input_schema == schema  # the same JSON value, key order aside
    assert tool.input_schema["additionalProperties"] is False
    assert tool.input_schema["required"] == ["module", "method", "input"]
    assert tool.description == help_card(None)  # the index card
    assert tool.output_schema == OUTPUT_SCHEMA


def test_read_calls_answer_as_the_cli_and_are_recorded(db: Path) -> None:
    before = head(db)
    reads = [
        {"module": "todos", "method": "read", "input": {}},
        {"module": "tool", "method": "help", "input": {}},
        {"module": "tool", "method": "help", "input": {"method": "history.read"}},
    ]
    expected = [cli_call(db, SID, envelope) for envelope in reads]

    async def scenario(client: ClientSession) -> list[Any]:
        return [await client.call_tool("turnlog", envelope) for envelope in reads]

    results = serve(db, SID, scenario)
    for envelope, (code, printed), result in zip(reads, expected, results, strict=True):
        assert code == 0 and not result.is_error
        assert text_of(result) == printed
        data = result.structured_content
        assert data["result"] == printed and data["is_error"] is False and data["retried"] is False
        assert data["method"] == f"{envelope['module']}.{envelope['method']}"
        assert [r["type"] for r in data["recorded"]] == ["message_appended", "tool_returned"]
    # The index card and a help card, through the tool (seed 003's progressive disclosure).
    assert text_of(results[1]) == help_card(None) and text_of(results[2]) == help_card("history.read")
    with turnlog.open_store(db, readonly=True) as store:
        assert store.head_version(SID) == before + 6
        call, returned = store.read_session(SID, from_version=before + 1, to_version=before + 2)
        assert isinstance(call.event, MessageAppended) and call.event.tool_calls is not None
        assert json.loads(call.event.tool_calls[0].arguments) == reads[0]
        assert isinstance(returned.event, ToolReturned) and returned.event.content == expected[0][1]


def test_a_write_call_lands_in_the_store(db: Path) -> None:
    envelope = {
        "module": "todos",
        "method": "write",
        "input": {"todos": [{"content": "Ship the MCP server", "status": "in_progress"}]},
    }

    async def scenario(client: ClientSession) -> Any:
        return await client.call_tool("turnlog", envelope)

    result = serve(db, SID, scenario)
    assert not result.is_error, text_of(result)
    recorded = result.structured_content["recorded"]
    assert [r["type"] for r in recorded] == ["message_appended", "todos_updated", "tool_returned"]
    with turnlog.open_store(db, readonly=True) as store:
        [item] = current_todos(store, SID)
        assert (item.content, item.status) == ("Ship the MCP server", "in_progress")
        assert [r.event_id for r in store.read_session(SID, from_version=recorded[0]["version"])] == [
            r["event_id"] for r in recorded
        ]
        assert store.verify().ok


INVALID = [
    pytest.param({"module": "nope", "method": "read", "input": {}}, id="bad-module"),
    pytest.param({"method": "read", "input": {}}, id="missing-module"),
    pytest.param({"module": "todos", "method": "read", "input": {}, "extra": 1}, id="extra-key"),
    pytest.param({"module": "todos", "method": "fetch", "input": {}}, id="bad-method"),
    pytest.param({"module": "todos", "method": "read"}, id="missing-input"),
    pytest.param({"module": "todos", "method": "read", "input": [1]}, id="input-not-object"),
    pytest.param({"module": "history", "method": "read", "input": {"mode": "tail", "n": "5"}}, id="bad-type"),
    pytest.param({"module": 5, "method": "read", "input": {}}, id="module-not-string"),
    pytest.param(
        {"module": "todos", "method": "write", "input": {"todos": [{"content": "x", "status": "done"}]}},
        id="bad-enum",
    ),
    pytest.param({}, id="empty"),
]


def test_invalid_calls_are_tool_errors_with_the_clis_text(db: Path) -> None:
    envelopes = [p.values[0] for p in INVALID]
    expected = [cli_call(db, SID, envelope) for envelope in envelopes]
    before = events(db)

    async def scenario(client: ClientSession) -> list[Any]:
        results = [await client.call_tool("turnlog", envelope) for envelope in envelopes]
        # No arguments at all is the empty call; an unknown tool name is a tool error too.
        return [*results, await client.call_tool("turnlog", None), await client.call_tool("todos", {})]

    *results, no_arguments, unknown_tool = serve(db, SID, scenario)
    for envelope, (code, printed), result in zip(envelopes, expected, results, strict=True):
        assert code == 1, envelope
        assert result.is_error, envelope
        text = text_of(result)
        assert text.split("\n")[0] == printed.split("\n")[0], envelope
        assert text == printed, envelope
        assert result.structured_content["is_error"] is True and result.structured_content["recorded"] == []
    assert no_arguments.is_error and text_of(no_arguments) == expected[-1][1]
    assert unknown_tool.is_error and text_of(unknown_tool).startswith("error: unknown tool 'todos'")
    assert events(db) == before  # a refused call writes nothing


def test_the_server_sees_only_its_own_session(db: Path) -> None:
    with turnlog.open_store(db, readonly=True) as store:
        event_id = store.read_session(SID, from_version=2, to_version=2)[0].event_id
        artifact = list_artifacts(store, SID)[0].short_id
    naming = [
        {"module": "todos", "method": "read", "input": {}, "session": SID},
        {"module": "history", "method": "read", "input": {"mode": "tail", "session_id": SID}},
    ]
    foreign = [
        {"module": "history", "method": "read", "input": {"mode": "event", "event_id": event_id}},
        {"module": "artifacts", "method": "read", "input": {"id": artifact}},
        {"module": "context", "method": "pin", "input": {"event_id": event_id, "reason": "mine now"}},
    ]
    expected = [cli_call(db, OTHER, envelope) for envelope in naming]
    before = events(db)

    async def scenario(client: ClientSession) -> list[Any]:
        return [await client.call_tool("turnlog", envelope) for envelope in [*naming, *foreign]]

    results = serve(db, OTHER, scenario)
    for (_, printed), result in zip(expected, results, strict=False):
        assert result.is_error and text_of(result) == printed
        assert "serves only the session it was started for" in printed
    read_event, read_artifact, pin = results[len(naming) :]
    assert read_event.is_error and "in this session" in text_of(read_event)
    assert read_artifact.is_error and "no artifact of this session" in text_of(read_artifact)
    assert pin.is_error and "in this session" in text_of(pin)
    assert events(db) == before


def test_a_call_id_in_meta_is_answered_exactly_once(db: Path) -> None:
    envelope = {"module": "todos", "method": "write", "input": {"todos": [{"content": "once"}]}}
    with turnlog.open_store(db) as store:
        call = ToolCall(id="call_mcp_1", name="turnlog", arguments=json.dumps(envelope))
        store.append(SID, [MessageAppended(role="assistant", tool_calls=(call,))])
    before = head(db)
    meta = {TOOL_CALL_ID_META: "call_mcp_1"}

    async def scenario(client: ClientSession) -> list[Any]:
        first = await client.call_tool("turnlog", envelope, meta=meta)  # type: ignore[arg-type]
        again = await client.call_tool("turnlog", envelope, meta=meta)  # type: ignore[arg-type]
        other = {**envelope, "input": {"todos": []}}
        changed = await client.call_tool("turnlog", other, meta=meta)  # type: ignore[arg-type]
        return [first, again, changed]

    first, again, changed = serve(db, SID, scenario)
    assert not first.is_error and not again.is_error and text_of(again) == text_of(first)
    assert first.structured_content["retried"] is False and again.structured_content["retried"] is True
    assert again.structured_content["recorded"] == []
    assert changed.is_error and "already answered for another input" in text_of(changed)
    with turnlog.open_store(db, readonly=True) as store:
        written = [r.event for r in store.read_session(SID, from_version=before + 1)]
    assert [type(e) for e in written] == [TodosUpdated, ToolReturned]
    assert isinstance(written[1], ToolReturned) and written[1].tool_call_id == "call_mcp_1"


def test_no_record_writes_only_the_effects(db: Path) -> None:
    before = events(db)
    envelope = {"module": "todos", "method": "write", "input": {"todos": [{"content": "quiet"}]}}

    async def scenario(client: ClientSession) -> list[Any]:
        read = await client.call_tool("turnlog", {"module": "todos", "method": "read", "input": {}})
        return [read, await client.call_tool("turnlog", envelope)]

    read, write = serve(db, SID, scenario, "--no-record")
    assert not read.is_error and not write.is_error
    assert read.structured_content["recorded"] == []
    assert [r["type"] for r in write.structured_content["recorded"]] == ["todos_updated"]
    assert events(db) == before + 1


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("unknown-session", "Error: no session 'nope' in this store"),
        ("missing-db", "Error: no turnlog store at"),
        ("not-a-store", "is not a turnlog store"),
    ],
)
def test_a_bad_session_or_store_is_one_line_before_serving(db: Path, case: str, message: str) -> None:
    path = {"unknown-session": db, "missing-db": db.parent / "none.db", "not-a-store": db.parent / "x.db"}[
        case
    ]
    if case == "not-a-store":
        path.write_text("not a database")
    before = path.read_bytes() if path.exists() else None
    result = subprocess.run(
        _command(path, "nope" if case == "unknown-session" else SID),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert message in line
    assert (path.read_bytes() if path.exists() else None) == before


def test_without_the_mcp_package_it_says_what_to_install(db: Path) -> None:
    # As on an install without the extra: the SDK's packages cannot be imported.
    code = (
        "import sys\n"
        "sys.modules['mcp'] = None\n"
        "sys.modules['mcp_types'] = None\n"
        "from turnlog.cli import cli\n"
        f"cli(['--db', {str(db)!r}, 'mcp', '--session', {SID!r}], prog_name='turnlog')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "Error: turnlog mcp needs the mcp package, which is not installed: pip install 'turnlog[mcp]'"
    ]


def test_help_says_stdio_and_no_json(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["mcp", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "--session" in text and "stdio" in text and "There is no --json" in text
    assert "pip install 'turnlog[mcp]'" in text
    assert "mcp" in runner.invoke(cli, ["--help"]).output


def test_import_turnlog_exposes_the_tool_and_context_api_lazily() -> None:
    code = (
        "import sys, turnlog\n"
        "light = [m for m in ('turnlog.tool', 'mcp', 'turnlog.mcp_server') if m in sys.modules]\n"
        "import turnlog.projections.context as pc, turnlog.tool as tool, turnlog.loop as loop\n"
        "assert turnlog.build_context is pc.build_context and turnlog.ContextPolicy is pc.ContextPolicy\n"
        "assert turnlog.ContextBudgetError is pc.ContextBudgetError\n"
        "assert turnlog.BuiltContext is pc.BuiltContext\n"
        "assert turnlog.set_policy is loop.set_policy and turnlog.Handlers is loop.Handlers\n"
        "assert turnlog.tool is tool and turnlog.call_tool is tool.call\n"
        "assert turnlog.invoke_tool is tool.invoke\n"
        "assert turnlog.tool_definition is tool.tool_definition and turnlog.ToolResult is tool.ToolResult\n"
        "assert set(turnlog.__all__) >= {'build_context', 'ContextPolicy', 'call_tool', 'tool'}\n"
        "from turnlog.cli import cli\n"
        "print(light, 'mcp' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "[] False"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        turnlog.nope  # noqa: B018


def test_call_tool_through_import_turnlog(db: Path) -> None:
    with turnlog.open_store(db) as store:
        text = turnlog.call_tool(store, SID, {"module": "todos", "method": "read", "input": {}}, record=False)
        policy = turnlog.ContextPolicy(budget=8000)
        built = turnlog.build_context(store, SID, policy)
    assert text.startswith("Todos: 3 of 3 completed")
    assert built.messages


def test_the_server_sees_what_other_writers_append_while_it_runs(db: Path) -> None:
    search = {"module": "history", "method": "search", "input": {"query": "zebra-crossing"}}

    async def scenario(client: ClientSession) -> list[Any]:
        missing = await client.call_tool("turnlog", search)
        with turnlog.open_store(db) as store:  # another writer (the agent's framework)
            store.append(SID, [MessageAppended(role="user", content="Mind the zebra-crossing.")])
        return [missing, await client.call_tool("turnlog", search)]

    missing, found = serve(db, SID, scenario)
    assert not missing.is_error and "Mind the" not in text_of(missing)
    assert not found.is_error and "Mind the zebra-crossing." in text_of(found)
