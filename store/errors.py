"""The store's exceptions: one small hierarchy, so callers never see a driver's errors."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error turnlog's store raises. The message says what was wrong and what to do."""


class InvalidEventError(StoreError):
    """An event or a batch is malformed: unknown type, bad field, unsupported schema version, too large."""


class VersionConflictError(StoreError):
    """The session's head version is not the one the caller expected (optimistic concurrency)."""

    def __init__(self, session_id: str, expected: object, actual: int) -> None:
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"version conflict on session {session_id!r}: expected {_describe(expected)}, "
            f"but its head version is {actual}; re-read the session and retry with "
            f"expected_version={actual}"
        )


class DuplicateEventError(StoreError):
    """An event id is already stored with other content, or a batch is only partly stored already."""


class UnknownSessionError(StoreError):
    """No session has that id."""

    def __init__(self, session_id: str, suggestions: list[str] | None = None) -> None:
        self.session_id = session_id
        self.suggestions = suggestions or []
        hint = ""
        if self.suggestions:
            hint = "; did you mean " + ", ".join(repr(s) for s in self.suggestions) + "?"
        else:
            hint = "; `turnlog sessions` lists them"
        super().__init__(f"no session {session_id!r} in this store{hint}")


class UnknownEventError(StoreError):
    """No event has that id (or it is not of the kind the caller needs)."""


class UnknownArtifactError(StoreError):
    """No artifact (content blob) has that id."""


class CorruptStoreError(StoreError):
    """The file is not a turnlog store, is damaged, or was written by a newer turnlog."""


class TokenizerError(StoreError):
    """The tokenizer cannot be loaded, or differs from the one the store was created with."""


class LockBusy(StoreError):
    """``atomic(wait=False)``: another connection holds the store's lock (nothing was done)."""


class StoreClosedError(StoreError):
    """The store was used after close()."""


def _describe(expected: object) -> str:
    if isinstance(expected, int):
        return f"version {expected}"
    return str(expected)
