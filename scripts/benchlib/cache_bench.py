"""The prompt-cache section of scripts/bench (issue 21): at every model call of long sessions (the
bench's generator, fixed seeds, with a system prompt of a few thousand characters) and of the real
transcripts in the tests' fixtures, the context each strategy sends, at budgets of 4,000 and 8,000
tokens: turnlog's default policy, its cache-stable policy, LangChain ``trim_messages(strategy=
"last")`` and the OpenAI Agents SDK session with ``SessionSettings(limit=N)``. For each: the share of
sent tokens that a prompt cache can reuse (the leading run of messages identical to the previous
call's), uncached tokens per call, budget use, contexts over budget, and the input cost with cache
prices. ``--only cache`` runs it alone and splices it into bench-results/RESULTS.md."""

from __future__ import annotations

import asyncio
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib.config import ROOT
from benchlib.counting import PRIME, count_message
from benchlib.peer_openai_agents import to_chat_messages
from benchlib.peer_turnlog import to_event
from benchlib.workload import SYSTEM_PROMPT, TOOLS, Workload

HEADING = "## Prompt-cache stability (issue 21)"
BUDGETS = (4000, 8000)
REAL_BUDGETS = ("half",)
"""The fixtures' real transcripts are short (tens to a few thousand tokens: every one fits 4,000 and
8,000 whole but the one whose system prompt alone is over 8,000), so each is measured at half its
own length, where the budget binds, and they are reported together."""
STRATEGIES = (
    "turnlog",
    "turnlog-cache-stable",
    "turnlog-cache-stable-0.6",
    "turnlog-cache-stable-0.1",
    "langchain",
    "openai-agents",
)
LABELS = {
    "turnlog": "turnlog default policy",
    "turnlog-cache-stable": "turnlog cache_stable (refill_to 0.4, the default)",
    "turnlog-cache-stable-0.6": "turnlog cache_stable, refill_to 0.6",
    "turnlog-cache-stable-0.1": "turnlog cache_stable, refill_to 0.1 (a move re-sends almost nothing)",
    "langchain": 'LangChain trim_messages(strategy="last")',
    "openai-agents": "OpenAI Agents SDK SessionSettings(limit=N)",
}
PRICED = (("claude-sonnet-4", "writes"), ("gpt-4.1", "reads"))
"""Models the cost is estimated for: Anthropic (the uncached part is written to the cache, at 1.25×
the input price, with a breakpoint at the end) and OpenAI (automatic caching of prefixes of 1,024
tokens and more, no write premium)."""
OPENAI_MINIMUM = 1024
TARGETS = {"cacheable": 0.85, "use": 0.55}
REAL = (
    ("swe-agent", "tests/fixtures/swe-agent"),
    ("swe-agent", "tests/fixtures/swe_agent_native.traj"),
    ("swe-agent", "tests/fixtures/swe_agent_thought_action.traj"),
    ("tau-bench", "tests/fixtures/tau_bench_results.json"),
    ("openhands", "tests/fixtures/openhands/trajectory.json"),
    ("claude-code", "tests/fixtures/claude-code"),
    ("codex", "tests/fixtures/codex/sessions"),
    ("pydantic-ai", "tests/fixtures/pydantic_ai_coding_run.json"),
    ("claude-code (real log)", "tests/fixtures/real/claude-code-log/sidechain_integrated.jsonl"),
    ("codex (real log)", "tests/fixtures/real/localpush-codex"),
    ("aider", "tests/fixtures/aider/.aider.chat.history.md"),
)


@dataclass
class Tally:
    """One strategy's figures over the calls of a group of sessions at one budget."""

    calls: int = 0
    sent: int = 0
    cacheable: int = 0
    breaks: int = 0
    """Calls whose context does not start with the whole previous context (a cut move)."""
    resent: int = 0
    """Uncached tokens of those calls: what a break sends again (the rest is new messages)."""
    over: int = 0
    use: list[float] = field(default_factory=list)
    costs: dict[str, float] = field(default_factory=dict)

    def add(
        self,
        sent: int,
        cacheable: int,
        before: int,
        budget: int,
        price: Callable[[int, int], dict[str, float]],
    ) -> None:
        """One call: ``sent`` tokens, ``cacheable`` of them shared with the previous call's context of
        ``before`` tokens."""
        if cacheable < before:
            self.breaks += 1
            self.resent += sent - cacheable
        self.calls += 1
        self.sent += sent
        self.cacheable += cacheable
        self.over += sent > budget
        self.use.append(sent / budget)
        for model, usd in price(sent, cacheable).items():
            self.costs[model] = self.costs.get(model, 0.0) + usd

    def figures(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "mean_sent": self.sent / self.calls if self.calls else 0.0,
            "cacheable": self.cacheable / self.sent if self.sent else 0.0,
            "uncached_per_call": (self.sent - self.cacheable) / self.calls if self.calls else 0.0,
            "breaks": self.breaks,
            "resent_per_call": self.resent / self.calls if self.calls else 0.0,
            "mean_use": statistics.fmean(self.use) if self.use else 0.0,
            "over_budget": self.over,
            "cost_per_1000_calls": {m: usd * 1000 / self.calls for m, usd in self.costs.items()}
            if self.calls
            else {},
        }


def long_system_prompt() -> str:
    """The generator's system prompt with tool documentation: a few thousand characters."""
    docs = [
        f"- {tool}: "
        + " ".join(f"{tool} usage rule {i}: be precise about paths, ranges and errors." for i in range(6))
        for tool in TOOLS
    ]
    return SYSTEM_PROMPT + "\n\nTools:\n" + "\n".join(docs)


# -- sessions ------------------------------------------------------------------------------------------


def generated(store: Any, count: int, messages: int) -> list[str]:
    """``count`` generated sessions of about ``messages`` messages each (seeds fixed)."""
    workload = Workload()
    system = long_system_prompt()
    sids = []
    for k in range(count):
        sid = f"generated-{k}"
        stream = workload.stream(salt=k + 1, call_prefix=f"s{k}")
        msgs = []
        for msg in stream:
            msgs.append(msg)
            if len(msgs) >= messages and msg.kind != "call":
                break
        events = [to_event(m) for m in msgs]
        from turnlog.store.events import MessageAppended

        store.append(sid, [MessageAppended(role="system", content=system), *events])
        sids.append(sid)
    return sids


def real(store: Any) -> dict[str, str]:
    """The fixtures' transcripts imported: session id -> source name."""
    from turnlog.importers import import_path
    from turnlog.projections.sessions import list_sessions

    found: dict[str, str] = {}
    for name, relative in REAL:
        path = ROOT / relative
        if path.is_dir() and not any(path.glob("*.traj")) and name == "swe-agent":
            path = next(path.rglob("*.traj"))
        before = {s.session_id for s in list_sessions(store)}
        import_path(store, Path(path))
        for info in list_sessions(store):
            if info.session_id not in before:
                found[info.session_id] = name
    return found


def history(store: Any, sid: str) -> list[tuple[int, dict[str, Any]]]:
    """The session's messages as OpenAI chat messages, with their log positions."""
    from turnlog.store import MessageAppended, ToolReturned

    out: list[tuple[int, dict[str, Any]]] = []
    for record in store.read_session(sid):
        event = record.event
        if isinstance(event, MessageAppended):
            chat: dict[str, Any] = {"role": event.role, "content": event.content}
            if event.tool_calls:
                chat["content"] = event.content or None
                chat["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in event.tool_calls
                ]
            out.append((record.position, chat))
        elif isinstance(event, ToolReturned):
            chat = {"role": "tool", "tool_call_id": event.tool_call_id, "content": event.content}
            out.append((record.position, chat))
    return out


# -- the strategies ------------------------------------------------------------------------------------


def turnlog_contexts(
    store: Any, sid: str, budget: int, points: list[int], stable: bool, refill_to: float | None = None
) -> list[list[Any]]:
    from turnlog.projections.context import ContextPolicy, build_context

    chosen = {} if refill_to is None else {"refill_to": refill_to}
    policy = ContextPolicy(budget=budget, cache_stable=stable, **chosen)
    return [build_context(store, sid, policy, at=at).rendered for at in points]


def langchain_contexts(
    chats: list[tuple[int, dict[str, Any]]], budget: int, points: list[int]
) -> list[list[Any]]:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    from benchlib.peer_langchain import lc_to_chat, trim

    def to_lc(chat: dict[str, Any]) -> Any:
        if chat["role"] == "system":
            return SystemMessage(chat["content"])
        if chat["role"] == "user":
            return HumanMessage(chat["content"])
        if chat["role"] == "tool":
            return ToolMessage(chat["content"], tool_call_id=chat["tool_call_id"])
        calls = []
        for call in chat.get("tool_calls") or ():
            try:
                args = json.loads(call["function"]["arguments"] or "{}")
            except json.JSONDecodeError:
                args = {"raw": call["function"]["arguments"]}
            calls.append(
                {
                    "name": call["function"]["name"],
                    "args": args if isinstance(args, dict) else {"value": args},
                    "id": call["id"],
                }
            )
        return AIMessage(chat["content"] or "", tool_calls=calls)

    lc = [(p, to_lc(c)) for p, c in chats]
    counts = {id(m): count_message(lc_to_chat(m)) for _, m in lc}

    def counter(messages: list[Any]) -> int:
        return PRIME + sum(counts[id(m)] for m in messages)

    out = []
    for at in points:
        upto = [m for p, m in lc if p <= at]
        out.append([lc_to_chat(m) for m in trim(upto, budget, counter)])
    return out


def agents_contexts(
    chats: list[tuple[int, dict[str, Any]]], budget: int, points: list[int]
) -> list[list[Any]]:
    """The SDK session holds the conversation's items and returns the last N; the system prompt is the
    agent's instructions, sent on every call. N: the items a budget holds at the session's mean item
    size (a fixed number, as the setting is)."""
    from agents import SQLiteSession
    from agents.memory import SessionSettings

    system = [c for _, c in chats if c["role"] == "system"]
    rest = [(p, c) for p, c in chats if c["role"] != "system"]
    items_of = [(p, _items(c, i)) for i, (p, c) in enumerate(rest)]
    sizes = [count_message(c) for _, c in rest]
    head = PRIME + sum(count_message(c) for c in system)
    per_item = statistics.fmean(sizes) * len(rest) / max(1, sum(len(i) for _, i in items_of)) if rest else 1
    limit = max(1, int((budget - head) / per_item))
    session = SQLiteSession("bench", ":memory:", session_settings=SessionSettings(limit=limit))
    loop = asyncio.new_event_loop()
    out = []
    added = 0
    try:
        for at in points:
            new = [item for p, items in items_of[added:] if p <= at for item in items]
            added += sum(1 for p, _ in items_of[added:] if p <= at)
            if new:
                loop.run_until_complete(session.add_items(new))  # type: ignore[arg-type]
            items = loop.run_until_complete(session.get_items())
            out.append(system + to_chat_messages([dict(i) for i in items]))
    finally:
        session.close()
        loop.close()
    return out


def _items(chat: dict[str, Any], index: int) -> list[dict[str, Any]]:
    if chat["role"] == "user":
        return [{"role": "user", "content": chat["content"]}]
    if chat["role"] == "tool":
        return [{"type": "function_call_output", "call_id": chat["tool_call_id"], "output": chat["content"]}]
    items: list[dict[str, Any]] = []
    if chat.get("content"):
        items.append(
            {
                "id": f"msg_{index:08d}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": chat["content"], "annotations": []}],
            }
        )
    for k, call in enumerate(chat.get("tool_calls") or ()):
        items.append(
            {
                "id": f"fc_{index:08d}_{k}",
                "type": "function_call",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
        )
    return items or [{"role": "assistant", "content": ""}]


# -- measuring -----------------------------------------------------------------------------------------


def shared_prefix(before: list[Any], after: list[Any]) -> int:
    """Tokens of the leading run of messages of ``after`` identical to ``before``'s."""
    tokens = 0
    for old, new in zip(before, after, strict=False):
        if json.dumps(old, sort_keys=True) != json.dumps(new, sort_keys=True):
            break
        tokens += count_message(new)
    return tokens


def pricer() -> Callable[[int, int], dict[str, float]]:
    from turnlog.projections.prices import CallTokens, PackagePrices

    prices = PackagePrices()
    at = "2025-09-01T00:00:00+00:00"

    def price(sent: int, cacheable: int) -> dict[str, float]:
        out = {}
        for model, kind in PRICED:
            if kind == "writes":
                call = CallTokens(at, sent, 0, cache_read=cacheable, cache_write=sent - cacheable)
            else:
                call = CallTokens(at, sent, 0, cache_read=cacheable if cacheable >= OPENAI_MINIMUM else 0)
            cost = prices.cost(model, [call])
            if cost is not None:
                out[model] = cost
        return out

    return price


def run(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from turnlog.projections.context import ContextBudgetError
    from turnlog.projections.context_cache import call_points
    from turnlog.store import SQLiteStore

    store = SQLiteStore.open(":memory:")
    count, size = (1, 150) if quick else (4, 600)
    log(f"cache: {count} generated sessions of {size} messages, and the fixtures' transcripts")
    groups: dict[str, str] = {sid: "generated" for sid in generated(store, count, size)}
    groups |= real(store)
    price = pricer()
    tallies: dict[tuple[str, int | str, str], Tally] = {}
    sessions: dict[tuple[str, int | str], int] = {}
    too_big: set[str] = set()
    few: set[str] = set()
    for sid, group in groups.items():
        chats = history(store, sid)
        points = [p for p, _ in call_points(store, sid, 0, store.head_position())]
        whole = PRIME + sum(count_message(c) for _, c in chats)
        labels: tuple[int | str, ...] = BUDGETS if group == "generated" else REAL_BUDGETS
        for label in labels:
            budget = label if isinstance(label, int) else max(1, whole // 2)
            if whole <= budget or len(points) < 2:
                if group != "generated":
                    few.add(f"{sid[:24]} ({group})")
                continue  # the budget does not bind (or one call: nothing to share)
            if group != "generated":
                group = "real"
            try:
                ours = {
                    "turnlog": turnlog_contexts(store, sid, budget, points, stable=False),
                    "turnlog-cache-stable": turnlog_contexts(store, sid, budget, points, stable=True),
                    "turnlog-cache-stable-0.6": turnlog_contexts(store, sid, budget, points, True, 0.6),
                    "turnlog-cache-stable-0.1": turnlog_contexts(store, sid, budget, points, True, 0.1),
                }
            except ContextBudgetError:
                too_big.add(f"{sid} ({groups[sid]}) at {budget:,}")
                continue
            sessions[(group, label)] = sessions.get((group, label), 0) + 1
            log(f"  {sid} ({group}): {len(points)} calls at {budget:,}")
            contexts = ours | {
                "langchain": langchain_contexts(chats, budget, points),
                "openai-agents": agents_contexts(chats, budget, points),
            }
            for name, built in contexts.items():
                tally = tallies.setdefault((group, label, name), Tally())
                previous: list[Any] = []
                before = 0
                for context in built:
                    sent = PRIME + sum(count_message(m) for m in context)
                    tally.add(sent, shared_prefix(previous, context), before, budget, price)
                    previous, before = context, sent - PRIME
    store.close()
    return {
        "quick": quick,
        "sessions": {f"{g}|{b}": n for (g, b), n in sessions.items()},
        "figures": {f"{g}|{b}|{n}": t.figures() for (g, b, n), t in tallies.items()},
        "skipped": sorted(few),
        "too_big": sorted(too_big),
    }


def render(result: dict[str, Any], command: str) -> str:
    figures = result["figures"]
    lines = [
        HEADING,
        "",
        f"Measured by `{command}`: at every model call (the position before each assistant message) "
        "of each session whose whole history exceeds the budget, the context each strategy sends, counted "
        "with one counter (tiktoken cl100k, OpenAI's chat rule). cacheable: the share of sent tokens in the "
        "leading run of messages identical to the previous call's (what a prompt cache can reuse). "
        "Cost: input only, per 1,000 calls, at genai-prices' prices — Claude Sonnet 4 with a breakpoint at "
        "the end (cacheable tokens read at 0.1×, the rest written at 1.25×), GPT-4.1 with its automatic "
        "caching (cacheable prefixes of 1,024 tokens or more at its cached price). The Agents SDK's N is "
        "the items the budget holds at the session's mean item size. The fixtures' real transcripts (tens "
        "to a few thousand tokens each) are measured at half their own length, where the budget binds. "
        "Targets for cache_stable: "
        f"≥ {TARGETS['cacheable']:.0%} cacheable, mean budget use ≥ {TARGETS['use']:.0%}, no context over "
        "budget.",
        "",
        "prefix breaks: calls whose context does not start with the whole previous one (for cache_stable, "
        "the cut's moves); re-sent: their uncached tokens, per call of all — the rest of the uncached "
        "tokens are the messages new since the previous call, which no strategy can send from a cache.",
        "",
        "| sessions | budget | strategy | calls | cacheable | uncached tokens / call | prefix breaks "
        "| re-sent / call | mean budget use | over budget | Sonnet 4 $ / 1k calls | GPT-4.1 $ / 1k calls |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    for key in sorted(result["sessions"], key=lambda k: (k.split("|")[0] != "generated", k)):
        group, budget = key.split("|")
        for name in STRATEGIES:
            f = figures.get(f"{group}|{budget}|{name}")
            if f is None:
                continue
            costs = f["cost_per_1000_calls"]
            sonnet, gpt = (costs.get(m, float("nan")) for m in ("claude-sonnet-4", "gpt-4.1"))
            lines.append(
                f"| {group} ({result['sessions'][key]}) | {_budget(budget)} | {LABELS[name]} | "
                f"{f['calls']:,} | {f['cacheable']:.1%} | {f['uncached_per_call']:,.0f} | "
                f"{f['breaks']:,} | {f['resent_per_call']:,.0f} | "
                f"{f['mean_use']:.1%} | {f['over_budget']} | {sonnet:,.2f} | {gpt:,.2f} |"
            )
            if name == "turnlog-cache-stable":
                met = (
                    f["cacheable"] >= TARGETS["cacheable"]
                    and f["mean_use"] >= TARGETS["use"]
                    and f["over_budget"] == 0
                )
                verdicts.append(f"{group} at {_budget(budget)}: {'met' if met else 'NOT met'}")
    lines += ["", "Targets (cache_stable): " + "; ".join(verdicts) + "."]
    lines += _why(result)
    if result["skipped"]:
        lines += [
            "",
            "Real transcripts left out (one model call: nothing to share, or no budget under their length "
            "binds): " + ", ".join(result["skipped"]) + ".",
        ]
    if result.get("too_big"):
        lines += [
            "",
            "Left out where the messages every strategy keeps (system prompt, first request) exceed the "
            "budget on their own: " + ", ".join(result["too_big"]) + ".",
        ]
    return "\n".join(lines)


def _budget(label: str) -> str:
    return f"{int(label):,}" if label.isdigit() else "½ of each"


def _why(result: dict[str, Any]) -> list[str]:
    """Where cache_stable's uncached tokens come from, per group and budget that misses the target,
    and what the refill-to-0.1 row (a move that re-sends almost nothing) shows of the ceiling."""
    figures = result["figures"]
    out = []
    for key in sorted(result["sessions"], key=lambda k: (k.split("|")[0] != "generated", k)):
        group, budget = key.split("|")
        stable = figures.get(f"{group}|{budget}|turnlog-cache-stable")
        least = figures.get(f"{group}|{budget}|turnlog-cache-stable-0.1")
        if stable is None or least is None or stable["cacheable"] >= TARGETS["cacheable"]:
            continue
        new = stable["uncached_per_call"] - stable["resent_per_call"]
        mean_sent = stable["mean_sent"]
        text = (
            f"Why {group} at {_budget(budget)} misses: the messages new at each call are {new:,.0f} tokens "
            f"(about {new / mean_sent:.0%} of the {mean_sent:,.0f} tokens cache_stable sends on average), "
            f"never cacheable; its {stable['breaks']:,} cut moves re-send {stable['resent_per_call']:,.0f} "
            f"tokens a call. A move to 0.1 of the budget re-sends {least['resent_per_call']:,.0f} a call and "
            f"reaches {least['cacheable']:.1%} cacheable at {least['mean_use']:.1%} mean use"
        )
        if least["cacheable"] < TARGETS["cacheable"]:
            text += (
                f": even then under {TARGETS['cacheable']:.0%}, so with new messages this large against "
                "the budget no cut placement reaches the target (a lower refill point only trades budget "
                "use for a little more)."
            )
        else:
            text += "."
        out += ["", text]
    return out


__all__ = ["HEADING", "render", "run"]
