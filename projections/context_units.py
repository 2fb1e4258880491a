"""Rendering of one unit of the context (a message, or a call with its returns), capped as the
policy says, from the context index's rows: the event is read only for a long text that must be
shown whole or capped anew, or for a condensed view."""

from __future__ import annotations

from turnlog.projections.capping import Capped, cap_text
from turnlog.projections.context_capping import (
    cached_capped,
    cap_call_arguments,
    cap_output,
    count_short,
    message_notice,
)
from turnlog.projections.context_condensed import CondensedViews, condensed_content
from turnlog.projections.context_reader import ContextReader, Row
from turnlog.projections.context_rows import Item, other_texts
from turnlog.projections.context_types import (
    INTERRUPTED,
    PER_MESSAGE,
    Category,
    ContextMessage,
    StableCut,
    message_cost,
    tool_output_cost,
)
from turnlog.store import OutputCondensed, ToolCall


class UnitRenderer(ContextReader):
    """The messages of one unit, for the builder."""

    _views: CondensedViews | None = None
    stable: StableCut | None = None
    """Set for a cache-stable build (projections.context_cache): the history starts at its cut,
    and what it does not fit raises CacheOverflow instead of being left out."""

    def _unit(
        self,
        head: Row,
        returns: list[Row],
        *,
        category: Category | None,
        tool_cap: int | None,
        message_cap: int | None,
    ) -> list[ContextMessage]:
        """A message, or a call with its returns (and synthesized results for calls that got
        none), each capped as asked (None: whole)."""
        item = self._item(head)
        out = [self._message(head, item, category, message_cap, tool_cap)]
        if not returns and not item.tool_calls:
            return out  # most units: a message alone (a build makes one for each row it shows)
        answered: set[str] = set()
        for sub, ret in enumerate(sorted(returns, key=lambda r: r.version), 1):
            ret_item = self._item(ret)
            answered.add(ret_item.tool_call_id)
            out.append(self._tool_output(ret, ret_item, category, tool_cap, head, sub))
        for sub, call in enumerate(item.tool_calls or (), len(out)):
            if call.id in answered:
                continue
            text = INTERRUPTED
            tok = self.tok
            tokens = PER_MESSAGE + self.costs["tool"] + count_short(tok, text) + count_short(tok, call.id)
            out.append(
                ContextMessage(
                    role="tool",
                    content=text,
                    tokens=tokens,
                    mode="synthesized",
                    category=category or "tool_output",
                    event_ids=(item.event_id,),
                    order=(head.version, sub + 1000),
                    tool_call_id=call.id,
                    is_error=True,
                )
            )
        return out

    def _message(
        self,
        row: Row,
        item: Item,
        category: Category | None,
        cap: int | None,
        arguments_cap: int | None = None,
    ) -> ContextMessage:
        role = row.role
        calls = item.tool_calls or ()
        full = message_cost(self.costs, role, row.tokens, bool(item.name), len(calls))
        content, tokens, shown = item.content, full, None
        if cap is not None and row.tokens > cap and self._over(row, item, cap):
            tok, event_id = self.tok, item.event_id

            def make() -> Capped:
                other = tok.count_all(other_texts(item))
                notice = message_notice(event_id)
                return cap_text(self._content(row), cap, tok, notice, total_tokens=row.tokens - other)

            # Capped once per store and cap: the oldest message a build squeezes in is capped the
            # same way on every build until the session grows.
            capped = cached_capped(self.store, ("message", event_id, cap, item.length, row.tokens), make)
            if capped.capped:
                content, shown = capped.text, capped.shown_tokens
                tokens = full - capped.total_tokens + capped.tokens
        if content is None:
            content = self._content(row)
        if arguments_cap is not None and calls:
            calls, saved, arguments_shown = self._cap_arguments(item.event_id, calls, arguments_cap)
            if saved:
                tokens -= saved
                if shown is None:
                    shown = self.tok.count(content) if content else 0
                shown += arguments_shown
        default: Category = "system" if role == "system" else "message"
        return ContextMessage(
            role=role,  # type: ignore[arg-type]
            content=content,
            tokens=tokens,
            mode="full" if shown is None else "capped",
            category=category or default,
            event_ids=(item.event_id,),
            order=(row.version, 0),
            name=item.name,
            tool_calls=calls,
            shown_tokens=shown,
        )

    def _over(self, row: Row, item: Item, cap: int) -> bool:
        """Whether the text has more UTF-8 bytes than ``cap`` (which bound its tokens from above),
        read from its event only when its length in characters does not already say."""
        if item.content is None and item.length > cap:
            return True  # each character is at least one byte
        return len(self._content(row).encode("utf-8")) > cap

    def _cap_arguments(
        self, event_id: str, calls: tuple[ToolCall, ...], cap: int
    ) -> tuple[tuple[ToolCall, ...], int, int]:
        """The calls with their arguments capped to ``cap`` tokens each, the tokens that saved, and
        the tokens of arguments still shown."""
        out: list[ToolCall] = []
        saved = shown = 0
        for index, call in enumerate(calls):
            # UTF-8 bytes bound the tokens from above: most calls are never counted.
            if len(call.arguments.encode("utf-8")) <= cap:
                out.append(call)
                continue
            capped = cap_call_arguments(self.store, event_id, index, call.arguments, cap)
            if capped.capped:
                out.append(call.model_copy(update={"arguments": capped.text}))
                saved += capped.total_tokens - capped.tokens
                shown += capped.shown_tokens
            else:
                out.append(call)
        return (tuple(out), saved, shown) if saved else (calls, 0, 0)

    def _tool_output(
        self,
        row: Row,
        item: Item,
        category: Category | None,
        cap: int | None,
        head: Row,
        sub: int,
    ) -> ContextMessage:
        full = tool_output_cost(self.costs, row.tokens)
        content, mode, tokens, shown = item.content, "full", full, None
        condensed = None
        if cap is not None and row.tokens > cap:
            condensed = self._condensed(item, cap, row.version)
        if condensed is not None:
            id_tokens = count_short(self.tok, item.tool_call_id)
            content, mode, shown = condensed.text, "condensed", condensed.shown_tokens
            tokens = PER_MESSAGE + self.costs["tool"] + id_tokens + condensed.tokens
        elif cap is not None:
            id_tokens = count_short(self.tok, item.tool_call_id)
            capped = cap_output(
                self.store,
                item.event_id,
                lambda: self._content(row),
                item.length,
                cap,
                row.tokens - id_tokens,
                item.artifact_id,
            )
            if capped.capped:
                content, mode, shown = capped.text, "capped", capped.shown_tokens
                tokens = PER_MESSAGE + self.costs["tool"] + id_tokens + capped.tokens
        if content is None:
            content = self._content(row)
        return ContextMessage(
            role="tool",
            content=content,
            tokens=tokens,
            mode=mode,  # type: ignore[arg-type]
            category=category or "tool_output",
            event_ids=(item.event_id,),
            order=(head.version, sub),
            tool_call_id=item.tool_call_id,
            is_error=item.is_error,
            shown_tokens=shown,
        )

    def _condensed(self, item: Item, cap: int, version: int) -> Capped | None:
        """The condensed view of an output over the cap that the effective mode asks for, if made."""
        if self._views is None:
            self._views = CondensedViews(self.store, self.sid, self.at, self.policy.tool_output_modes)
            known = self.known()
            if known is not None and not known.condensed:
                self._views.none_made()
        view = self._views.wanted(item.event_id, item.tool_name)
        if view is None or not self._view_is_stable(view.version, version):
            return None
        self._load([view.version])
        stored = self.events[view.version].event
        assert isinstance(stored, OutputCondensed)
        ref = item.artifact_id or item.event_id
        return condensed_content(
            self.store, stored, view.event_id, ref, is_artifact=item.artifact_id is not None, cap=cap
        )

    def _view_is_stable(self, view_version: int, output_version: int) -> bool:
        """Under a cache-stable policy a view replaces the simple cap only where that moves no
        prefix: made by the time the output was first sent (before the next assistant message), or
        folded in at a cut move since."""
        stable = self.stable
        if stable is None or view_version <= stable.moved_head:
            return True
        with self.reading() as conn:
            row = conn.execute(
                "SELECT MIN(version) FROM ctx_messages WHERE session_id = ? AND role = 'assistant' "
                "AND version > ? AND version <= ?",
                (self.sid, output_version, self.head_version),
            ).fetchone()
        return row[0] is None or view_version < row[0]
