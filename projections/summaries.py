"""Summaries as a projection: a session's summary tree (levels, ranges, token savings) as of any
position, and lookup by reuse key."""

from __future__ import annotations

from dataclasses import dataclass

from turnlog.store import Store, SummaryRecorded


@dataclass(frozen=True, slots=True)
class SummaryInfo:
    """One summary of a session."""

    event_id: str
    version: int
    position: int
    first_version: int
    last_version: int
    level: int
    tokens: int
    """Tokens of its context message."""
    covered_tokens: int
    """Stored tokens of the messages it covers."""
    covered_messages: int
    active: bool
    """Shown by contexts (not replaced by a later summary of its range)."""
    summarizer: str
    key: str
    reused: bool

    @property
    def saved_tokens(self) -> int:
        return self.covered_tokens - self.tokens


def list_summaries(store: Store, session_id: str, at: int | None = None) -> list[SummaryInfo]:
    """Every summary of the session recorded at or before ``at``, in range order, highest level
    first within a range."""
    from turnlog.projections.registry import materializer

    store.require_session(session_id)
    materializer(store).catch_up()
    at = store.head_position() if at is None else at
    with store.reading() as conn:
        rows = conn.execute(
            "SELECT s.version, s.position, s.event_id, s.first_version, s.last_version, s.level, s.tokens, "
            "s.superseded_at, "
            "(SELECT coalesce(max(cum_tokens), 0) FROM ctx_messages m WHERE m.session_id = s.session_id "
            " AND m.version <= s.last_version) - "
            "(SELECT coalesce(max(cum_tokens), 0) FROM ctx_messages m WHERE m.session_id = s.session_id "
            " AND m.version < s.first_version), "
            "(SELECT coalesce(max(cum_messages), 0) FROM ctx_messages m WHERE m.session_id = s.session_id "
            " AND m.version <= s.last_version) - "
            "(SELECT coalesce(max(cum_messages), 0) FROM ctx_messages m WHERE m.session_id = s.session_id "
            " AND m.version < s.first_version) "
            "FROM ctx_summaries s WHERE s.session_id = ? AND s.position <= ? "
            "ORDER BY s.first_version, s.level DESC, s.version",
            (session_id, at),
        ).fetchall()
    events = {r.version: r.event for r in store.read_versions(session_id, [row[0] for row in rows])}
    found = []
    for version, position, event_id, first, last, level, tokens, superseded, covered, messages in rows:
        event = events[version]
        assert isinstance(event, SummaryRecorded)
        found.append(
            SummaryInfo(
                event_id=event_id,
                version=version,
                position=position,
                first_version=first,
                last_version=last,
                level=level,
                tokens=tokens,
                covered_tokens=int(covered),
                covered_messages=int(messages),
                active=superseded is None or superseded > at,
                summarizer=event.summarizer.name,
                key=event.key,
                reused=event.reused_from is not None,
            )
        )
    return found


def find_summary_by_key(store: Store, key: str) -> SummaryRecorded | None:
    """A summary anywhere in the store with this reuse key (the first one written), if any."""
    from turnlog.projections.registry import materializer

    materializer(store).catch_up()
    with store.reading() as conn:
        row = conn.execute(
            "SELECT event_id FROM ctx_summaries WHERE key = ? ORDER BY position LIMIT 1", (key,)
        ).fetchone()
    if row is None:
        return None
    event = store.get_event(row[0]).event
    return event if isinstance(event, SummaryRecorded) else None
