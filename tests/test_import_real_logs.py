"""On logs real agents wrote (tests/fixtures/real: a Claude Code transcript and a Codex rollout
published under the MIT license, see each SOURCE.md), the audit's billed tokens equal the sums
computed here straight from the files, one usage per model response."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import FIXTURES
from turnlog.importers import import_path
from turnlog.projections.ledger import audit
from turnlog.store import SQLiteStore

REAL = FIXTURES / "real"
CLAUDE = REAL / "claude-code-log" / "sidechain_integrated.jsonl"
CODEX = REAL / "localpush-codex"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _billed(store: SQLiteStore) -> dict[str, int | None]:
    totals = audit(store).totals
    return {
        "calls": totals.calls,
        "input": totals.input,
        "output": totals.output,
        "cache_read": totals.cache_read,
        "cache_write": totals.cache_write,
    }


def test_claude_code_billed_tokens_are_the_per_response_sums(file_store: SQLiteStore) -> None:
    # Anthropic's input_tokens leave out the cached tokens; turnlog's input includes them.
    responses: dict[str, dict] = {}
    for data in _lines(CLAUDE):
        if data.get("type") != "assistant":
            continue
        usage = data["message"]["usage"]
        seen = responses.setdefault(data["message"]["id"], dict(usage))
        seen["output_tokens"] = max(seen["output_tokens"], usage["output_tokens"])
    expected = {
        "calls": len(responses),
        "input": sum(
            u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
            for u in responses.values()
        ),
        "output": sum(u["output_tokens"] for u in responses.values()),
        "cache_read": sum(u["cache_read_input_tokens"] for u in responses.values()),
        "cache_write": sum(u["cache_creation_input_tokens"] for u in responses.values()),
    }
    import_path(file_store, CLAUDE)
    assert _billed(file_store) == expected
    assert expected["calls"] == 3
    # The subagent's response is written on two lines: summing every line would over-count it.
    assistant = [d["message"]["usage"] for d in _lines(CLAUDE) if d["type"] == "assistant"]
    every_line = sum(u["cache_creation_input_tokens"] for u in assistant)
    assert every_line == expected["cache_write"] + 19830


def test_codex_billed_tokens_follow_the_changes_of_the_running_total(file_store: SQLiteStore) -> None:
    # Codex's input_tokens include the cached ones, as turnlog's do.
    [rollout] = sorted(CODEX.glob("rollout-*.jsonl"))
    totals = [
        d["payload"]["info"]["total_token_usage"]
        for d in _lines(rollout)
        if d["type"] == "event_msg" and d["payload"]["type"] == "token_count" and d["payload"]["info"]
    ]
    changes = [t for n, t in enumerate(totals) if n == 0 or t != totals[n - 1]]
    last = totals[-1]
    expected = {
        "calls": len(changes),
        "input": last["input_tokens"],
        "output": last["output_tokens"],
        "cache_read": last["cached_input_tokens"],
        "cache_write": 0,
    }
    import_path(file_store, CODEX)
    assert _billed(file_store) == expected
    assert expected["calls"] == 6
    # Each count but the last is re-sent with the rate limits: summing every last_token_usage
    # would bill those responses twice.
    every_event = sum(
        d["payload"]["info"]["last_token_usage"]["input_tokens"]
        for d in _lines(rollout)
        if d["type"] == "event_msg" and d["payload"]["type"] == "token_count" and d["payload"]["info"]
    )
    last_response = changes[-1]["input_tokens"] - changes[-2]["input_tokens"]
    assert every_event == 2 * expected["input"] - last_response
    assert audit(file_store).totals.reasoning == last["reasoning_output_tokens"]


def test_real_logs_reimport_writes_nothing(file_store: SQLiteStore) -> None:
    for path in (CLAUDE, CODEX):
        import_path(file_store, path)
        again = import_path(file_store, path)[1]
        assert again.appended == 0
