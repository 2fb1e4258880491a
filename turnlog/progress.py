"""The command line's one progress bar (rich), on standard error and only when it is a terminal:
import, copy, rebuild and compact. Piped or redirected, nothing is drawn, so scripts read clean
output; rich is imported only when a bar is drawn."""

from __future__ import annotations

import sys
from typing import Any


class ProgressBar:
    """A bar for ``done`` of ``total`` items, drawn once a job reaches ``min_total`` items, only on a
    terminal; ``update`` is the ``progress`` callback the library's long jobs take."""

    def __init__(self, label: str, *, enabled: bool, min_total: int = 20) -> None:
        self.label = label
        self.enabled = enabled and sys.stderr.isatty()
        self.min_total = min_total
        self._progress: Any = None
        self._task: Any = None

    def update(self, done: int, total: int) -> None:
        if not self.enabled or total < self.min_total:
            return
        if self._progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            # Whether to draw was decided above (a terminal, not --quiet, not --json): rich draws.
            console = Console(file=sys.stderr, force_terminal=True)
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=console,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.label, total=total)
        self._progress.update(self._task, completed=done, total=total)

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
