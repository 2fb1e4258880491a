"""The cache-stable fold, materialized for each session's stored policy: the cut after every model
call (projections.context_cache) of a session whose stored policy (``turnlog policy``, the
``policy_set`` events) asks for cache-stable contexts with a budget, so a build under that policy
reads its cut with one indexed query instead of folding the session's calls again in each process.

Advanced one step per assistant message (the call before it); a change of the stored policy (a
``policy_set``, or a rewind or removal that takes one back or out, a fork that starts with its
parent's) folds the session again from its start under the new policy, as the on-the-fly fold of
that policy would. The steps are context_fold's, on the rows being written (the store's readings
use the transaction's connection meanwhile), so the stored cuts are the on-the-fly fold's."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from turnlog.projections.capping import MIN_CAP
from turnlog.projections.context_fold import call_points_on, fold_key, step
from turnlog.projections.context_types import ContextBudgetError, ContextPolicy, StableCut
from turnlog.projections.live import COMPENSATING_TYPES
from turnlog.projections.live_index import live_condition
from turnlog.projections.materialize import Projection, quiet_catch_up
from turnlog.projections.runtime import session_policy
from turnlog.store import MessageAppended, RecordedEvent, SessionPolicy, Store, StoreError
from turnlog.store.dialect import Connection, dialect_of

DEFAULT_TOOL_CAP: int = ContextPolicy.model_fields["max_tool_tokens"].default

_POLICY = (
    "SELECT policy FROM rt_policies t WHERE session_id = ? AND position <= ? AND "
    f"{live_condition('t')} ORDER BY version DESC LIMIT 1"
)
_LAST_CUT = (
    "SELECT cut, moved_at, moved_head FROM ctx_stable_cuts WHERE session_id = ? "
    "ORDER BY position DESC LIMIT 1"
)
_INSERT = (
    "INSERT INTO ctx_stable_cuts (session_id, position, head, cut, moved_at, moved_head) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)


def fold_policy(stored: SessionPolicy) -> ContextPolicy | None:
    """The context policy a session's stored policy builds with, when it is cache-stable and sets a
    budget (the cut is materialized for it); None otherwise."""
    if not stored.cache_stable or stored.budget is None:
        return None
    return policy_of(stored, stored.budget)


def policy_of(stored: SessionPolicy, budget: int) -> ContextPolicy:
    """The context policy of a stored policy with ``budget``: as ``turnlog context SESSION --budget
    BUDGET`` builds it with no other option (the stored tool cap, 1,000 unset, a cap below the
    builder's least read as that least; the stored cache-stable setting and refill share)."""
    cap = stored.max_tool_tokens
    fields: dict[str, Any] = {
        "budget": budget,
        "max_tool_tokens": DEFAULT_TOOL_CAP if cap is None else max(MIN_CAP, cap),
    }
    if stored.cache_stable:
        fields["cache_stable"] = True
        if stored.refill_to is not None:
            fields["refill_to"] = stored.refill_to
    return ContextPolicy(**fields)


def session_context_policy(store: Store, session_id: str, budget: int | None = None) -> ContextPolicy:
    """The context policy the session's stored policy (``turnlog policy``) gives a build with
    ``budget`` (None: the stored budget): what every builder of a session's contexts (the framework
    integrations, run-end compaction) uses, so a stored ``cache_stable`` is honoured everywhere;
    with the stored budget, its cuts are read from this projection."""
    stored = session_policy(store, session_id)
    chosen = budget if budget is not None else stored.budget
    if chosen is None:
        raise StoreError(
            f"session {session_id!r} has no policy budget: give one, or set it with "
            f"`turnlog policy {session_id} --budget N`"
        )
    return policy_of(stored, chosen)


@dataclass(slots=True)
class _State:
    """What a session's rows hold: the policy they are folded for (None: none) and the last cut."""

    policy: ContextPolicy | None
    key: str | None
    cut: StableCut


class StableCutsProjection(Projection):
    """``ctx_stable_policies``: per session, the policy (its fold key) the cuts are folded for;
    ``ctx_stable_cuts``: the cut after each of its calls."""

    name: ClassVar[str] = "stable_cuts"
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[str, ...]] = ("ctx_stable_policies", "ctx_stable_cuts")
    types: ClassVar[tuple[str, ...] | None] = (
        "message_appended",
        "policy_set",
        "session_started",
        *COMPENSATING_TYPES,
    )

    def __init__(self, store: Store | None = None) -> None:
        # Weak: the store holds its materializer, which holds this.
        self._store = None if store is None else weakref.ref(store)

    def create(self, conn: Connection, schema: str = "main") -> None:
        dialect_of(conn).create(
            conn,
            """
            CREATE TABLE {schema}.ctx_stable_policies (
                session_id TEXT PRIMARY KEY,
                policy TEXT NOT NULL            -- the ContextPolicy folded for (format left out)
            );
            CREATE TABLE {schema}.ctx_stable_cuts (
                session_id TEXT NOT NULL,
                position INTEGER NOT NULL,      -- the call: the position before an assistant message
                head INTEGER NOT NULL,          -- the session's head version there
                cut INTEGER NOT NULL,           -- StableCut after the call
                moved_at INTEGER NOT NULL,
                moved_head INTEGER NOT NULL,
                PRIMARY KEY (session_id, position)
            )
            """,
            schema,
        )

    def apply(self, conn: Connection, records: Sequence[RecordedEvent]) -> None:
        self.apply_remembering(conn, records, {})

    def apply_remembering(
        self, conn: Connection, records: Sequence[RecordedEvent], memo: dict[Any, Any]
    ) -> None:
        store: Store | None = None
        for record in records:
            sid = record.session_id
            event = record.event
            if isinstance(event, MessageAppended):
                if event.role != "assistant" or record.version <= 1:
                    continue
                state = memo.get(sid)
                if state is None:
                    # Most sessions have no stored cache-stable policy: the set of those that do
                    # is read once (on a server, an append then costs no read of its own).
                    folded = _folded_sessions(conn, memo)
                    state = memo[sid] = (
                        _read_state(conn, sid) if sid in folded else _State(None, None, StableCut())
                    )
                if state.policy is None:
                    continue
                store = store or self._the_store()
                with _on(store, conn):
                    state.cut = _fold_one(
                        store, conn, sid, state.policy, record.position - 1, record.version - 1, state.cut, {}
                    )
            else:
                store = store or self._the_store()
                memo[sid] = state = self._reset(store, conn, sid, record.position)
                folded = _folded_sessions(conn, memo)
                if state.key is None:
                    folded.discard(sid)
                else:
                    folded.add(sid)

    def _the_store(self) -> Store:
        store = None if self._store is None else self._store()
        if store is None:
            raise StoreError("the stable_cuts projection is applied through its store's materializer")
        return store

    def _reset(self, store: Store, conn: Connection, sid: str, position: int) -> _State:
        """The session's rows for its stored policy as of ``position``: kept if that policy is the
        one they are folded for, else folded again from the session's start."""
        row = conn.execute(_POLICY, (sid, position, position, position)).fetchone()
        policy = None if row is None else fold_policy(SessionPolicy.model_validate_json(row[0]))
        key = None if policy is None else fold_key(policy)
        state = _read_state(conn, sid)
        if state.key == key:
            return state
        conn.execute("DELETE FROM ctx_stable_cuts WHERE session_id = ?", (sid,))
        conn.execute("DELETE FROM ctx_stable_policies WHERE session_id = ?", (sid,))
        if policy is None or key is None:
            return _State(None, None, StableCut())
        conn.execute("INSERT INTO ctx_stable_policies (session_id, policy) VALUES (?, ?)", (sid, key))
        cut = StableCut()
        events: dict[int, RecordedEvent] = {}
        with _on(store, conn):
            # The calls before this event (an assistant message after it in the same batch is
            # folded when it is applied).
            for at, head in call_points_on(conn, sid, 0, position - 1):
                cut = _fold_one(store, conn, sid, policy, at, head, cut, events)
        return _State(policy, key, cut)


def _fold_one(
    store: Store,
    conn: Connection,
    sid: str,
    policy: ContextPolicy,
    at: int,
    head: int,
    cut: StableCut,
    events: dict[int, RecordedEvent],
) -> StableCut:
    """One step of the fold at the call ``at``, its row written; the cut after it."""
    before = cut
    # A call no context fitted (its kept messages alone are over the budget) leaves the cut.
    with contextlib.suppress(ContextBudgetError):
        cut = step(store, sid, policy, at, head, cut, events)[0]
    if cut.cut != before.cut:
        for version in [v for v in events if v < cut.cut]:
            del events[version]
    conn.execute(_INSERT, (sid, at, head, cut.cut, cut.moved_at, cut.moved_head))
    return cut


_FOLDED = ("folded sessions",)
"""The memo's key for the set of sessions with rows (a tuple: every other key is a session id)."""


def _folded_sessions(conn: Connection, memo: dict[Any, Any]) -> set[str]:
    found: set[str] | None = memo.get(_FOLDED)
    if found is None:
        rows = conn.execute("SELECT session_id FROM ctx_stable_policies").fetchall()
        found = memo[_FOLDED] = {str(r[0]) for r in rows}
    return found


def _read_state(conn: Connection, sid: str) -> _State:
    row = conn.execute("SELECT policy FROM ctx_stable_policies WHERE session_id = ?", (sid,)).fetchone()
    if row is None:
        return _State(None, None, StableCut())
    key = str(row[0])
    last = conn.execute(_LAST_CUT, (sid,)).fetchone()
    cut = StableCut() if last is None else StableCut(int(last[0]), int(last[1]), int(last[2]))
    return _State(ContextPolicy.model_validate_json(key), key, cut)


@contextlib.contextmanager
def _on(store: Store, conn: Connection) -> Iterator[None]:
    """The builds of a step read the rows being written: the store's readings use ``conn``, and a
    build's catch-up of the projections (they are being applied) does nothing."""
    with store.reading_on(conn), quiet_catch_up():
        yield


@dataclass(frozen=True, slots=True)
class StoredCuts:
    """What a build as of a position needs of the stored fold."""

    before: StableCut
    """The cut after the last call at or before the position (the start when none)."""
    previous: int | None
    """The head version of the last call before the position, when the cut has not moved since."""


def stored_cuts(store: Store, session_id: str, policy: ContextPolicy, at: int) -> StoredCuts | None:
    """The stored fold's cuts as of ``at`` when it is folded for ``policy`` (the session's stored
    policy), else None: the caller folds on the fly. The projections must be caught up."""
    key = fold_key(policy)
    with store.reading() as conn:
        row = conn.execute(
            "SELECT policy FROM ctx_stable_policies WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None or row[0] != key:
            return None
        rows = conn.execute(
            "SELECT position, head, cut, moved_at, moved_head FROM ctx_stable_cuts "
            "WHERE session_id = ? AND position <= ? ORDER BY position DESC LIMIT 2",
            (session_id, at),
        ).fetchall()
    cuts = [(int(p), int(h), StableCut(int(c), int(m), int(mh))) for p, h, c, m, mh in rows]
    before = cuts[0][2] if cuts else StableCut()
    earlier = [c for c in cuts if c[0] < at][:1]
    previous = earlier[0][1] if earlier and earlier[0][2] == before else None
    return StoredCuts(before, previous)


__all__ = [
    "StableCutsProjection",
    "StoredCuts",
    "fold_policy",
    "policy_of",
    "session_context_policy",
    "stored_cuts",
]
