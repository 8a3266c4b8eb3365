"""Live progress of a run: done / errors / ETA per target, with rich."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as _RichProgress

from qualitycheck.generation._runner import Progress

__all__ = ["RichProgress"]


class RichProgress(Progress):
    """Draws a bar per target on stderr; in CI logs (no TTY) it prints a line per 10%."""

    def __init__(self) -> None:
        self._console = Console(stderr=True)
        self._bars: _RichProgress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._errors: dict[str, int] = {}
        self._done: dict[str, int] = {}
        self._totals: dict[str, int] = {}
        self._next_note: dict[str, int] = {}

    def start(self, totals: dict[str, int]) -> None:
        self._totals = dict(totals)
        self._errors = {t: 0 for t in totals}
        self._done = {t: 0 for t in totals}
        self._next_note = {t: max(1, n // 10) for t, n in totals.items()}
        if not totals:
            print("qualitycheck: nothing to request (every response is already stored)", file=sys.stderr)
            return
        if self._console.is_terminal:
            self._bars = _RichProgress(
                TextColumn("{task.fields[target]:<9}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("errors {task.fields[errors]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=self._console,
                transient=False,
            )
            for t, n in totals.items():
                self._tasks[t] = self._bars.add_task(t, total=n, target=t, errors=0)
            self._bars.start()

    def advance(self, target: str, ok: bool) -> None:
        self._done[target] = self._done.get(target, 0) + 1
        if not ok:
            self._errors[target] = self._errors.get(target, 0) + 1
        if self._bars is not None:
            self._bars.update(self._tasks[target], advance=1, errors=self._errors[target])
        elif self._done[target] >= self._next_note.get(target, 1) or self._done[target] == self._totals.get(target):
            step = max(1, self._totals.get(target, 1) // 10)
            self._next_note[target] = self._done[target] + step
            print(f"  {target}: {self._done[target]}/{self._totals.get(target, 0)} done, {self._errors[target]} errors", file=sys.stderr)

    def stop(self) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None
