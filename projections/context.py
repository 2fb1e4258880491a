"""The context builder: the messages to send to the model for a session, as of any position, under
a token budget. System messages, the first user message and pinned messages are always kept whole;
then the newest messages, newest first, until the budget is reached. A tool call and its returns
are kept or dropped together; tool outputs, tool-call arguments and over-long messages are capped by
real tokens with a notice that counts; what is left out is said. Only the retained messages and the
tail are read, with the token counts stored at append time, so a build costs the same at any session
length. The work is split: context_types (vocabulary), context_reader (reads), context_builder (the
build), context_capping (notices and the per-store cache); this module is the public entry."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from turnlog.projections.context_builder import ContextBuilder
from turnlog.projections.context_cache import build_stable
from turnlog.projections.context_fold import calibrated
from turnlog.projections.context_header import Header
from turnlog.projections.context_index import ContextIndex
from turnlog.projections.context_reader import Retained
from turnlog.projections.context_start import read_start
from turnlog.projections.context_types import (
    FILL_MIN,
    INTERRUPTED,
    PER_MESSAGE,
    PER_NAME,
    PRIME_TOKENS,
    Block,
    BuiltContext,
    Category,
    ContextBudgetError,
    ContextMessage,
    ContextPolicy,
    Format,
    Mode,
)
from turnlog.projections.registry import materializer
from turnlog.store import Store, StoreError
from turnlog.store.dialect import Connection, dialect_of


def build_context(
    store: Store,
    session_id: str,
    policy: ContextPolicy,
    at: int | None = None,
    *,
    record: bool = False,
    run_id: str | None = None,
    model: str | None = None,
) -> BuiltContext:
    """Build the context of ``session_id`` as of global position ``at`` (default: now).

    With ``record=True`` a ``context_built`` event with the manifest is appended to the session, so
    an audit can show exactly what the model saw on each call."""
    if at is None and not policy.calibrate:
        # A warm build: one snapshot for the freshness check and the build's reads (on SQLite, one
        # statement says the projections are current and where the session's head is; none
        # while the database has not changed since the last build of the session). When this
        # process's own appends wait for the catch-up (a turn), the check could only say so: the
        # catch-up runs first, and the check after it, in the build's snapshot, says where the
        # head is (no reads of the session's head, the log's head and its version there).
        caught_up = False
        if materializer(store).owed():
            materializer(store).catch_up()
            caught_up = True
        built = _warm(store, session_id, policy, model)
        if built is None and not caught_up:
            materializer(store).catch_up()
            built = _warm(store, session_id, policy, model)
        if built is not None:
            if record:
                store.append(session_id, [built.to_event(run_id=run_id, model=model)])
            return built
    store.require_session(session_id)
    materializer(store).catch_up()
    head_position = store.head_position()
    if at is None:
        at = head_position
    elif at < 1 or at > head_position:
        raise StoreError(f"position {at} is outside the log (1 to {head_position})")
    head_version = store.version_at(session_id, at)
    if head_version == 0:
        raise StoreError(f"session {session_id!r} has no events at or before position {at}")
    if policy.calibrate and model is None:
        raise StoreError("a calibrated budget needs the model the context is for (model=...)")
    if policy.calibrate and not policy.cache_stable:
        policy = calibrated(store, session_id, policy, at, model)
    # One snapshot for the build's reads: on a server, one BEGIN and one connection rather than one
    # a read (SQLite's nested readings share its transaction the same way).
    with store.reading() as conn:
        built = _build(store, session_id, policy, at, head_version, model, conn, None)
    if record:
        store.append(session_id, [built.to_event(run_id=run_id, model=model)])
    return built


def _warm(store: Store, session_id: str, policy: ContextPolicy, model: str | None) -> BuiltContext | None:
    """The build in one snapshot with the check that the projections are current (None: they
    are not, or the session has no events: the general path then says why, or catches up)."""
    with store.reading() as conn:
        current, fresh = _current_head(store, conn, session_id, policy)
        if current is None or current[1] <= 0:
            return None
        return _build(store, session_id, policy, *current, model, conn, fresh)


_FRESH = "_turnlog_context_fresh"
"""The store attribute that remembers what the warm builds' first reads said (_Fresh)."""
_FRESH_SESSIONS = 1024


@dataclass(slots=True)
class _Fresh:
    """What the first reads of a session's warm build said, in a snapshot of a database that has
    not changed since: the materializer's current head, and the build's header and retained rows
    as of it."""

    current: tuple[int, int]
    header: Header | None = None
    retained: Retained | None = None


def _current_head(
    store: Store, conn: Connection, session_id: str, policy: ContextPolicy
) -> tuple[tuple[int, int] | None, _Fresh | None]:
    """(head position, head version) when the projections are current, else None. On a server the
    same statement reads the build's first rows too (context_start): a warm build's one round trip.
    In process, the materializer's current_head, remembered (with the header a build read as of
    it) while the database says nothing has changed since (a one-step pragma instead of the
    check's statement): the same database gives the same answers. Only an answer that says the
    projections are current is kept; None as the second value: nothing is kept."""
    dialect = dialect_of(conn)
    if dialect.remote:
        watched = materializer(store).watched()
        return (None if watched is None else read_start(conn, session_id, watched, policy, store)), None
    token = dialect.unchanged_token(conn)
    attributes = vars(store)
    memo: tuple[Hashable, dict[str, _Fresh]] | None = attributes.get(_FRESH)
    if token is not None and memo is not None and memo[0] == token:
        found = memo[1].get(session_id)
        if found is not None:
            return found.current, found
    current = materializer(store).current_head(session_id)
    if token is None or current is None:
        return current, None
    if memo is None or memo[0] != token or len(memo[1]) >= _FRESH_SESSIONS:
        memo = attributes[_FRESH] = (token, {})
    fresh = memo[1][session_id] = _Fresh(current)
    return current, fresh


def _build(
    store: Store,
    session_id: str,
    policy: ContextPolicy,
    at: int,
    head_version: int,
    model: str | None,
    snapshot: Any,
    fresh: _Fresh | None,
) -> BuiltContext:
    if policy.cache_stable:
        # (Calibrated as of each call of the fold, when it is calibrated.)
        return build_stable(store, session_id, policy, at, head_version, model=model)
    header, retained = (None, None) if fresh is None else (fresh.header, fresh.retained)
    builder = ContextBuilder(
        store, session_id, policy, at, head_version, snapshot=snapshot, header=header, retained=retained
    )
    built = builder.build()
    if fresh is not None:
        fresh.header, fresh.retained = builder.header, builder.retained
    return built


def timeline(store: Store, session_id: str, policy: ContextPolicy) -> list[Block]:
    """The session as compaction sees it now, in version order: retained messages, active summaries
    (their covered messages are not read), and every other message grouped with its tool results."""
    store.require_session(session_id)
    materializer(store).catch_up()
    at = store.head_position()
    builder = ContextBuilder(store, session_id, policy, at, store.version_at(session_id, at))
    return builder.timeline()


def open_run(store: Store, session_id: str, at: int | None = None) -> str | None:
    """The id of the session's run that is still open (as of ``at``), if any."""
    materializer(store).catch_up()
    at = store.head_position() if at is None else at
    with store.reading() as conn:
        row = conn.execute(
            "SELECT run_id FROM ctx_runs WHERE session_id = ? AND started_position <= ? "
            "AND (finished_position IS NULL OR finished_position > ?) ORDER BY started_position DESC LIMIT 1",
            (session_id, at, at),
        ).fetchone()
    return str(row[0]) if row else None


def run_start_version(store: Store, session_id: str, run_id: str | None) -> int | None:
    """The session version of the newest ``run_started`` of ``run_id`` (of any run: None), if any."""
    materializer(store).catch_up()
    which, params = ("", (session_id,)) if run_id is None else (" AND run_id = ?", (session_id, run_id))
    with store.reading() as conn:
        row = conn.execute(
            f"SELECT started_version FROM ctx_runs WHERE session_id = ?{which} "
            "ORDER BY started_position DESC LIMIT 1",
            params,
        ).fetchone()
    return int(row[0]) if row else None


__all__ = [
    "FILL_MIN",
    "INTERRUPTED",
    "PER_MESSAGE",
    "PER_NAME",
    "PRIME_TOKENS",
    "Block",
    "BuiltContext",
    "Category",
    "ContextBudgetError",
    "ContextIndex",
    "ContextMessage",
    "ContextPolicy",
    "Format",
    "Mode",
    "build_context",
    "open_run",
    "run_start_version",
    "timeline",
]
