"""User-facing progress: a rich progress bar with ETA on a terminal, plain log lines otherwise."""
from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
    TimeRemainingColumn


class Reporter:
    def __init__(self, quiet: bool = False, force_plain: bool = False):
        self.console = Console(stderr=True, highlight=False)
        self.quiet = quiet
        self.tty = self.console.is_terminal and not force_plain
        self._progress: Progress | None = None
        self._task = None
        self._t0 = time.monotonic()

    def info(self, msg: str) -> None:
        if self.quiet:
            return
        if self._progress is not None:
            self._progress.console.print(msg)
        elif self.tty:
            self.console.print(msg)
        else:
            print(f"[refbench {time.monotonic() - self._t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    def warn(self, msg: str) -> None:
        if self.tty:
            self.console.print(f"[yellow]warning:[/yellow] {msg}")
        else:
            print(f"refbench: warning: {msg}", file=sys.stderr, flush=True)

    def start(self, total_rounds: int) -> None:
        if self.tty and not self.quiet:
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                      console=self.console, transient=True)
            self._progress.start()
            self._task = self._progress.add_task("benchmarking", total=total_rounds)

    def status(self, msg: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=msg)
        else:
            self.info(msg)

    def advance(self) -> None:
        if self._progress is not None:
            self._progress.advance(self._task)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
