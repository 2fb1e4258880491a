"""Condensed tool outputs in the context: a build shows, for an output over the cap, the view the
session's policy (or the build's own ``tool_output_modes``) asks for — ``auto`` (a summarizer's
summary) or ``custom:NAME`` (what a custom handler made) — when that view was made on the write path;
otherwise the simple cap. Builds only read: they never call a summarizer and never write."""

from __future__ import annotations

from turnlog.projections.capping import MIN_CAP, Capped, cap_text
from turnlog.projections.context_capping import cached_capped
from turnlog.projections.runtime import Condensed, condensed_outputs, session_policy
from turnlog.store import OutputCondensed, SessionPolicy, Store


class CondensedViews:
    """The condensed views one build may show: read once per build, and only when an output over the
    cap asks for one."""

    def __init__(self, store: Store, session_id: str, at: int, overrides: dict[str, str] | None) -> None:
        self.store = store
        self.session_id = session_id
        self.at = at
        self.overrides = overrides
        self._policy: SessionPolicy | None = None
        self._views: dict[str, list[Condensed]] | None = None

    def none_made(self) -> None:
        """Told by the build's first read: the session has no condensed views (none to read)."""
        self._views = {}

    def wanted(self, event_id: str, tool_name: str | None) -> Condensed | None:
        """The view of output ``event_id`` the effective mode asks for, if it was made."""
        if self._views is None:
            self._views = condensed_outputs(self.store, self.session_id, self.at, caught_up=True)
        views = self._views.get(event_id)
        if not views and self.overrides is None:
            return None  # the common case: nothing condensed, no need for the policy
        mode = self._mode(tool_name)
        if mode == "simple" or not views:
            return None
        kind, _, name = mode.partition(":")
        for view in reversed(views):  # the newest view of the wanted kind
            if view.mode == kind and (kind == "auto" or view.name == name):
                return view
        return None

    def _mode(self, tool_name: str | None) -> str:
        """The build's own mode for the tool (or its ``default``) first, then the stored policy's."""
        overrides = self.overrides or {}
        if tool_name is not None and tool_name in overrides:
            return overrides[tool_name]
        if "default" in overrides:
            return overrides["default"]
        if self._policy is None:
            self._policy = session_policy(self.store, self.session_id, self.at)
        return self._policy.mode_for(tool_name)


def condensed_content(
    store: Store, view: OutputCondensed, view_id: str, ref: str, *, is_artifact: bool, cap: int
) -> Capped | None:
    """The condensed text under a header that says what it is and where the full output is, in at
    most ``cap`` tokens (the text capped when it must be); None when the cap leaves no room for it."""
    where = f"artifact {ref[:12]}" if is_artifact else f"event {ref}"
    condenser = view.condenser
    by = "summary" if condenser.mode == "auto" else "custom view"
    header = (
        f"[turnlog: {by} of a tool output of {view.source_tokens:,} tokens, made by {condenser.name}; "
        f"the full text is {where}]"
    )
    tok = store.tokenizer

    def make() -> Capped:
        whole = f"{header}\n{view.text}"
        total = tok.count(whole)
        if total <= cap:
            return Capped(whole, total, total, True, total)
        room = cap - tok.count(header) - 1
        if room < MIN_CAP:
            return Capped("", 0, total, False, 0)

        def notice(shown: int, all_tokens: int) -> str:
            return f"[turnlog: {by} capped: {shown:,} of {all_tokens:,} tokens shown; it is event {view_id}]"

        capped = cap_text(view.text, room, tok, notice)
        text = f"{header}\n{capped.text}"
        tokens = tok.count(text)
        return (
            Capped(text, tokens, total, True, capped.shown_tokens)
            if tokens <= cap
            else Capped("", 0, total, False, 0)
        )

    found = cached_capped(store, ("condensed", view_id, cap, ref), make)
    return found if found.capped else None
