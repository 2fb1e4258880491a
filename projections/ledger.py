"""The token ledger: where tokens went and what they cost. It folds provider usage, the summarizers'
usage, the tokens each event adds to the log and the manifests of built contexts into small aggregate
tables and one row per billed call, and prices them (projections.prices: the billing convention and
the price sources).

Billed usage has a category: ``agent`` for the agent's own model calls (``usage_recorded``),
``summarization`` for what turnlog's summarizers were billed (the ``usage`` of a ``summary_recorded``,
the tokens of an ``output_condensed``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from turnlog.projections.materialize import Projection
from turnlog.projections.prices import (
    CallTokens,
    ModelPrice,
    Prices,
    PriceTable,
    PriceTableError,
    load_prices,
)
from turnlog.store import (
    ContextBuilt,
    OutputCondensed,
    RecordedEvent,
    RunFinished,
    RunStarted,
    Store,
    StoreError,
    SummaryRecorded,
    UsageRecorded,
)
from turnlog.store.dialect import Connection, dialect_of

NONE = ""
"""Stored in a key column for "no run" or "no model" (key columns cannot be NULL); reported as None."""

OVERHEAD = "overhead"
"""The category of a context's tokens that no manifest entry holds (the reply priming)."""

AGENT = "agent"
"""The billed category of the agent's model calls (``usage_recorded``)."""

SUMMARIZATION = "summarization"
"""The billed category of summarizer calls (``summary_recorded`` with usage, ``output_condensed`` with
tokens)."""

Grouping = Literal["session", "run", "model", "day", "category"]


# --- the projection --------------------------------------------------------------------------


class Ledger(Projection):
    """Aggregates, each keyed by session first so one session's audit reads a key range:

    - ``ledger_usage``: provider-billed tokens per session, run, model, day and billed category
      (``agent``, ``summarization``);
    - ``ledger_appended``: tokens added to the log per session, run, day and event type;
    - ``ledger_sent``: manifest tokens per session, run, model, day and category;
    - ``ledger_contexts``: built contexts and their total tokens per session, run, model and day;
    - ``ledger_calls``: one row per billed call (a ``usage_recorded``, a billed summarizer call) with
      its tokens, time and the cost its source recorded: prices depend on a call's date and size;
    - ``ledger_runs``: state, the run open in each session.

    The run of a usage or a context is the event's own ``run_id``, else the run open in its session;
    the run of an appended event, a summary or a condensed output is the run open in its session (a
    ``run_started`` and its ``run_finished`` belong to their run). A ``run_started`` while another run
    is open replaces it; a ``run_finished`` for a run that is not the open one changes nothing.

    A summarizer call is billed under its model, or the summarizer's name when it names no model. A
    summary with no usage (a reused one, or one made without a model) and a condensed output with no
    tokens were not billed: they add nothing. Like the agent's usage, spend stays in the ledger when
    a rewind or a removal takes the events that caused it out of the context: it was paid."""

    name: ClassVar[str] = "ledger"
    # 2: ledger_usage has a category (summarizer spend); 3: ledger_calls, and a run's totals count
    # the calls they cover
    version: ClassVar[int] = 3
    tables: ClassVar[tuple[str, ...]] = (
        "ledger_usage",
        "ledger_appended",
        "ledger_sent",
        "ledger_contexts",
        "ledger_runs",
        "ledger_calls",
    )
    types: ClassVar[tuple[str, ...] | None] = None  # every event adds (possibly zero) tokens

    def create(self, conn: Connection, schema: str = "main") -> None:
        dialect_of(conn).create(
            conn,
            """
            CREATE TABLE {schema}.ledger_usage (
                session_id TEXT NOT NULL,
                run_id TEXT NOT NULL,            -- '' when none
                model TEXT NOT NULL,
                day TEXT NOT NULL,               -- recorded_at[:10], UTC
                category TEXT NOT NULL,          -- 'agent' or 'summarization'
                calls INTEGER NOT NULL,
                input INTEGER NOT NULL,          -- includes cache_read and cache_write
                output INTEGER NOT NULL,         -- includes reasoning
                cache_read INTEGER NOT NULL,
                cache_write INTEGER NOT NULL,
                reasoning INTEGER NOT NULL,
                PRIMARY KEY (session_id, run_id, model, day, category)
            );
            CREATE TABLE {schema}.ledger_appended (
                session_id TEXT NOT NULL,
                run_id TEXT NOT NULL,
                day TEXT NOT NULL,
                event_type TEXT NOT NULL,
                events INTEGER NOT NULL,
                tokens INTEGER NOT NULL,
                PRIMARY KEY (session_id, run_id, day, event_type)
            );
            CREATE TABLE {schema}.ledger_sent (
                session_id TEXT NOT NULL,
                run_id TEXT NOT NULL,
                model TEXT NOT NULL,             -- the manifest's model, '' when none
                day TEXT NOT NULL,
                category TEXT NOT NULL,          -- a manifest category, or 'overhead'
                contexts INTEGER NOT NULL,       -- contexts with tokens in this category
                entries INTEGER NOT NULL,
                tokens INTEGER NOT NULL,
                PRIMARY KEY (session_id, run_id, model, day, category)
            );
            CREATE TABLE {schema}.ledger_contexts (
                session_id TEXT NOT NULL,
                run_id TEXT NOT NULL,
                model TEXT NOT NULL,
                day TEXT NOT NULL,
                contexts INTEGER NOT NULL,
                tokens INTEGER NOT NULL,         -- sum of total_tokens
                PRIMARY KEY (session_id, run_id, model, day)
            );
            CREATE TABLE {schema}.ledger_runs (
                session_id TEXT PRIMARY KEY,
                run_id TEXT NOT NULL
            );
            CREATE TABLE {schema}.ledger_calls (
                session_id TEXT NOT NULL,
                position INTEGER NOT NULL,       -- the billing event's
                run_id TEXT NOT NULL,
                model TEXT NOT NULL,
                day TEXT NOT NULL,
                category TEXT NOT NULL,
                recorded_at TEXT NOT NULL,
                calls INTEGER NOT NULL,          -- model calls covered (a run's totals: more than one)
                input INTEGER NOT NULL,
                output INTEGER NOT NULL,
                cache_read INTEGER NOT NULL,
                cache_write INTEGER NOT NULL,
                billed_cost REAL,                -- cost_usd the source recorded, NULL when none
                PRIMARY KEY (session_id, position)
            )
            """,
            schema,
        )

    def apply(self, conn: Connection, records: Sequence[RecordedEvent]) -> None:
        self.apply_remembering(conn, records, {})

    def apply_remembering(
        self, conn: Connection, records: Sequence[RecordedEvent], memo: dict[str, str]
    ) -> None:
        """The memo: each session's open run (ledger_runs; NONE for none)."""
        # Summed in memory, then added to the stored rows: sums do not depend on how the log is cut
        # into batches, which keeps incremental catch-up equal to a rebuild.
        runs: dict[str, str] = {}  # the sessions of these records
        before: dict[str, str] = {}  # their open run as the rows hold it, where it was looked up
        usage: dict[tuple[str, ...], list[int]] = {}
        appended: dict[tuple[str, ...], list[int]] = {}
        sent: dict[tuple[str, ...], list[int]] = {}
        contexts: dict[tuple[str, ...], list[int]] = {}
        calls: list[tuple[Any, ...]] = []

        def open_run(sid: str) -> str:
            found = runs.get(sid)
            if found is None:
                found = memo.get(sid)
                if found is None:
                    row = conn.execute(
                        "SELECT run_id FROM ledger_runs WHERE session_id = ?", (sid,)
                    ).fetchone()
                    found = row[0] if row else NONE
                runs[sid] = before[sid] = found
            return found

        for record in records:
            event = record.event
            sid = record.session_id
            day = record.recorded_at[:10]
            if isinstance(event, RunStarted):
                runs[sid] = event.run_id
            run = open_run(sid)
            _add(appended, (sid, run, day, record.type), 1, record.tokens or 0)
            if isinstance(event, RunFinished) and run == event.run_id:
                runs[sid] = NONE
            elif isinstance(event, UsageRecorded):
                run_id = event.run_id or run
                billed = (
                    event.input_tokens,
                    event.output_tokens,
                    event.cache_read_tokens,
                    event.cache_write_tokens,
                )
                # A run's totals (scope "run") count the calls they cover.
                _add(
                    usage,
                    (sid, run_id, event.model, day, AGENT),
                    event.calls or 1,
                    *billed,
                    event.reasoning_tokens,
                )
                calls.append(
                    (sid, record.position, run_id, event.model, day, AGENT, record.recorded_at,
                     event.calls or 1, *billed, event.cost_usd)
                )  # fmt: skip
            elif (bill := _summarizer_bill(event)) is not None:
                model, input, output = bill
                _add(usage, (sid, run, model, day, SUMMARIZATION), 1, input, output, 0, 0, 0)
                calls.append(
                    (sid, record.position, run, model, day, SUMMARIZATION, record.recorded_at, 1,
                     input, output, 0, 0, None)
                )  # fmt: skip
            elif isinstance(event, ContextBuilt):
                key = (sid, event.run_id or run, event.model or NONE, day)
                _add(contexts, key, 1, event.total_tokens)
                per_category: dict[str, list[int]] = {}
                for entry in event.entries:
                    _add(per_category, entry.category, 1, entry.tokens)
                listed = sum(tokens for _, tokens in per_category.values())
                if event.total_tokens > listed:
                    per_category[OVERHEAD] = [0, event.total_tokens - listed]
                for category, (entries, tokens) in per_category.items():
                    _add(sent, (*key, category), 1, entries, tokens)

        _upsert(conn, "ledger_usage", _USAGE_KEY, _USAGE_SUMS, usage)
        _upsert(
            conn,
            "ledger_appended",
            ("session_id", "run_id", "day", "event_type"),
            ("events", "tokens"),
            appended,
        )
        _upsert(conn, "ledger_sent", (*_CONTEXT_KEY, "category"), ("contexts", "entries", "tokens"), sent)
        _upsert(conn, "ledger_contexts", _CONTEXT_KEY, ("contexts", "tokens"), contexts)
        if calls:
            conn.executemany(
                f"INSERT INTO ledger_calls ({', '.join(_CALL_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(_CALL_COLUMNS))})",
                calls,
            )
        # Only the runs that changed: the rows of the others already say so.
        changed = [(sid, run) for sid, run in runs.items() if run != before.get(sid)]
        conn.executemany(
            "DELETE FROM ledger_runs WHERE session_id = ?", [(sid,) for sid, run in changed if not run]
        )
        conn.executemany(
            "INSERT INTO ledger_runs (session_id, run_id) VALUES (?, ?) "
            "ON CONFLICT (session_id) DO UPDATE SET run_id = excluded.run_id",
            [(sid, run) for sid, run in changed if run],
        )
        memo.update(runs)


def _summarizer_bill(event: object) -> tuple[str, int, int] | None:
    """(model, input, output) a summarizer was billed for this event, None when it was not billed:
    the model is the summarizer's, else its name (a price file can price that name)."""
    if isinstance(event, SummaryRecorded) and event.usage is not None:
        return (
            event.summarizer.model or event.summarizer.name,
            event.usage.input_tokens,
            event.usage.output_tokens,
        )
    if isinstance(event, OutputCondensed) and (event.input_tokens or event.output_tokens):
        return (event.condenser.model or event.condenser.name, event.input_tokens, event.output_tokens)
    return None


# --- the audit -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuditRow:
    """Tokens and cost of one group. A column the grouping cannot fill is None (appended tokens have
    no model; in the category view a billed category, ``agent`` or ``summarization``, has only the
    billed columns and cost, and a manifest category only sent tokens and contexts)."""

    key: str | None
    """The session, run, model, day or category; None for "no run" or "no model" (and for totals)."""
    calls: int | None
    """Model calls: ``usage_recorded`` events and summarizer calls that were billed."""
    input: int | None
    """Billed prompt tokens, cached ones included."""
    output: int | None
    """Billed completion tokens, reasoning included."""
    cache_read: int | None
    """Prompt tokens read from the provider's cache."""
    cache_write: int | None
    """Prompt tokens written to the provider's cache."""
    reasoning: int | None
    """Reasoning tokens (already part of ``output``)."""
    appended: int | None
    """Tokens the group's events added to the log (stored counts)."""
    sent: int | None
    """Tokens of the contexts built (``total_tokens``; in the category view, the entries' tokens)."""
    contexts: int | None
    """Contexts built (in the category view: contexts with tokens in that category)."""
    cost: float | None
    """USD as turnlog prices the billed tokens (each call at its date); None when a model of the group
    has no price (see ``unknown_models``): unknown, never 0."""
    billed_cost: float | None = None
    """USD the sources recorded for the group's calls (``cost_usd``: their own bill or estimate);
    None when no call of the group carries one."""
    billed_calls: int | None = 0
    """Calls whose source recorded a cost: fewer than ``calls`` when ``billed_cost`` covers only
    some (None where ``calls`` is)."""


@dataclass(frozen=True, slots=True)
class AuditReport:
    """The ledger, grouped one way, with totals that do not depend on the grouping."""

    by: Grouping
    """How the rows are grouped."""
    session_id: str | None
    """The session audited; None for the whole store."""
    rows: tuple[AuditRow, ...]
    """One per group, ordered by key (None last). The category view lists the manifest categories in
    their fixed order, after the billed categories ``agent`` and ``summarization`` when any
    summarizer call was billed (else every billed token is the agent's and the totals say so)."""
    totals: AuditRow
    """Every column over all the audited events (key None)."""
    summarization: AuditRow
    """The part of the totals' billed columns and cost that summarizer calls were billed (key
    ``summarization``; appended, sent and contexts None); zero calls when none was billed."""
    unknown_models: tuple[str, ...]
    """Billed models the prices have no price for: their cost is None."""
    prices_date: str | None
    """The date of the price table used; None for genai-prices (each call priced at its date)."""
    prices_source: str
    """Where the prices come from."""


CATEGORIES = ("system", "index", "pinned", "summary", "tool_output", "message", "notice", OVERHEAD)
"""The order of the category view's manifest categories."""

BILLED_CATEGORIES = (AGENT, SUMMARIZATION)
"""The order of the category view's billed categories."""

_DIMENSIONS: dict[str, str] = {"session": "session_id", "run": "run_id", "model": "model", "day": "day"}


def audit(
    store: Store,
    session_id: str | None = None,
    by: Grouping = "session",
    prices: Prices | None = None,
) -> AuditReport:
    """Where the tokens went, grouped by session, run, model, day or category, and what they cost.

    Reads only the ledger's tables (a key range of them for one session). ``prices`` defaults to
    genai-prices' data (:func:`load_prices`). Cost follows the module's convention: input includes
    the cached tokens, reasoning tokens are billed as output once; a row whose billed models are not
    all priced has cost None, and the report lists those models. The cost the sources recorded is
    summed beside it (``billed_cost``)."""
    if by not in (*_DIMENSIONS, "category"):
        raise StoreError(f"cannot group the audit by {by!r}; use session, run, model, day or category")
    table: Prices = prices if prices is not None else load_prices()
    if session_id is not None:
        store.require_session(session_id)
    from turnlog.projections.registry import materializer  # here: the registry imports this module

    materializer(store).catch_up()
    where, params = ("WHERE session_id = ?", (session_id,)) if session_id is not None else ("", ())
    unknown: set[str] = set()
    with store.reading() as conn:
        totals = _gather(conn, None, where, params, table, unknown, always=(None,))[None]
        billed = _gather(conn, "category", where, params, table, unknown, always=BILLED_CATEGORIES)
        summarization = billed[SUMMARIZATION]
        if by == "category":
            found = {
                category: _sent_only(category, tokens, contexts)
                for category, contexts, tokens in conn.execute(
                    "SELECT category, CAST(sum(contexts) AS BIGINT), CAST(sum(tokens) AS BIGINT) "
                    f"FROM ledger_sent {where} GROUP BY category",
                    params,
                )
            }
            order = [c for c in CATEGORIES if c in found] + sorted(set(found) - set(CATEGORIES))
            rows = tuple(found[c] for c in order)
            if summarization.calls:
                rows = tuple(billed[c] for c in BILLED_CATEGORIES) + rows
        else:
            grouped = _gather(conn, _DIMENSIONS[by], where, params, table, unknown)
            rows = tuple(grouped[k] for k in sorted(grouped, key=lambda k: (k is None, k or "")))
    return AuditReport(
        by=by,
        session_id=session_id,
        rows=rows,
        totals=totals,
        summarization=summarization,
        unknown_models=tuple(sorted(unknown)),
        prices_date=table.date,
        prices_source=table.source,
    )


def _gather(
    conn: Connection,
    dimension: str | None,
    where: str,
    params: tuple[Any, ...],
    prices: Prices,
    unknown: set[str],
    always: tuple[str | None, ...] = (),
) -> dict[str | None, AuditRow]:
    """Rows keyed by ``dimension`` (None: one row of totals, keyed None), and a row of zeros for each
    key of ``always`` that has none. By ``category`` (the billed category), only the billed columns."""
    group = dimension or "NULL"
    billed_only = dimension == "category"  # appended and sent tokens have no billed category
    usage: dict[str | None, list[int]] = {}
    for key, *sums in conn.execute(
        # Sums cast back to integers: PostgreSQL sums bigints as numeric.
        f"SELECT {group}, {', '.join(f'CAST(sum({c}) AS BIGINT)' for c in _USAGE_SUMS)} "
        f"FROM ledger_usage {where} GROUP BY 1",  # by position: the key may be the constant NULL
        params,
    ):
        _add(usage, key or None, *sums)
    costs, billed = _costs(conn, group, where, params, prices, unknown)
    appended: dict[str | None, int] = {}
    if dimension != "model" and not billed_only:  # appended events have no model
        for key, tokens in conn.execute(
            f"SELECT {group}, CAST(sum(tokens) AS BIGINT) FROM ledger_appended {where} GROUP BY 1", params
        ):
            appended[key or None] = tokens
    sent: dict[str | None, list[int]] = {}
    if not billed_only:
        for key, contexts, tokens in conn.execute(
            f"SELECT {group}, CAST(sum(contexts) AS BIGINT), CAST(sum(tokens) AS BIGINT) "
            f"FROM ledger_contexts {where} GROUP BY 1",
            params,
        ):
            sent[key or None] = [contexts, tokens]
    rows = {}
    for key in set(usage) | set(appended) | set(sent) | set(always):
        calls, input, output, cache_read, cache_write, reasoning = usage.get(key, [0] * len(_USAGE_SUMS))
        contexts, tokens = sent.get(key, [0, 0])
        rows[key] = AuditRow(
            key,
            calls=calls,
            input=input,
            output=output,
            cache_read=cache_read,
            cache_write=cache_write,
            reasoning=reasoning,
            appended=None if dimension == "model" or billed_only else appended.get(key, 0),
            sent=None if billed_only else tokens,
            contexts=None if billed_only else contexts,
            cost=costs.get(key, 0.0),
            billed_cost=billed[key][0] if key in billed else None,
            billed_calls=billed[key][1] if key in billed else 0,
        )
    return rows


def _costs(
    conn: Connection,
    group: str,
    where: str,
    params: tuple[Any, ...],
    prices: Prices,
    unknown: set[str],
) -> tuple[dict[str | None, float | None], dict[str | None, tuple[float, int]]]:
    """Per key: the priced cost of its calls (None when a model is unknown, adding it to
    ``unknown``), and the cost their sources recorded with how many recorded one. Calls are read
    one by one (a price may depend on a call's date and size) in log order, so sums of floats
    come out the same on every backend and after any rebuild."""
    calls: defaultdict[tuple[str | None, str], list[CallTokens]] = defaultdict(list)
    billed: dict[str | None, tuple[float, int]] = {}
    for key, model, at, covered, input, output, cache_read, cache_write, billed_cost in conn.execute(
        f"SELECT {group}, model, recorded_at, calls, input, output, cache_read, cache_write, "
        f"billed_cost FROM ledger_calls {where} ORDER BY session_id, position",
        params,
    ):
        key = key or None
        calls[key, model].append(CallTokens(at, input, output, cache_read, cache_write, covered))
        if billed_cost is not None:
            total, count = billed.get(key, (0.0, 0))
            billed[key] = (total + billed_cost, count + 1)
    costs: dict[str | None, float | None] = {}
    for (key, model), made in calls.items():
        cost = prices.cost(model, made)
        if cost is None:
            unknown.add(model)
        before = costs.get(key, 0.0)
        costs[key] = None if before is None or cost is None else before + cost
    return costs, billed


def _sent_only(category: str, tokens: int, contexts: int) -> AuditRow:
    return AuditRow(
        category,
        calls=None,
        input=None,
        output=None,
        cache_read=None,
        cache_write=None,
        reasoning=None,
        appended=None,
        sent=tokens,
        contexts=contexts,
        cost=None,
        billed_calls=None,
    )


_USAGE_KEY = ("session_id", "run_id", "model", "day", "category")
_USAGE_SUMS = ("calls", "input", "output", "cache_read", "cache_write", "reasoning")
_CONTEXT_KEY = ("session_id", "run_id", "model", "day")
_CALL_COLUMNS = (
    "session_id",
    "position",
    *_USAGE_KEY[1:],
    "recorded_at",
    "calls",
    "input",
    "output",
    "cache_read",
    "cache_write",
    "billed_cost",
)

K = TypeVar("K", bound=Hashable)


def _add(sums: dict[K, list[int]], key: K, *values: int) -> None:
    found = sums.get(key)
    if found is None:
        sums[key] = list(values)
    else:
        for i, value in enumerate(values):
            found[i] += value


def _upsert(
    conn: Connection,
    table: str,
    keys: tuple[str, ...],
    sums: tuple[str, ...],
    rows: dict[tuple[str, ...], list[int]],
) -> None:
    if not rows:
        return
    columns = (*keys, *sums)
    conn.executemany(
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET "
        # The target's column named with its table: PostgreSQL finds a bare name ambiguous here.
        + ", ".join(f"{name} = {table}.{name} + excluded.{name}" for name in sums),
        [(*key, *values) for key, values in rows.items()],
    )


__all__ = [
    "AGENT",
    "BILLED_CATEGORIES",
    "CATEGORIES",
    "NONE",
    "OVERHEAD",
    "SUMMARIZATION",
    "AuditReport",
    "AuditRow",
    "Grouping",
    "Ledger",
    "ModelPrice",
    "PriceTable",
    "PriceTableError",
    "Prices",
    "audit",
    "load_prices",
]
