"""User-facing progress: a rich progress bar with ETA on a terminal, plain log lines otherwise.

On a terminal: one live line with the current scenario / step / round (and build, where the
runner says), a bar over every interleaved round of the run, rounds done of total, elapsed time
and ETA. Not a terminal (CI logs, pipes): no control codes, one timestamped line per status,
with rounds done of total and the ETA once a round has finished.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from .units import fmt_duration


class _EtaColumn(ProgressColumn):
    """ETA at the average pace of the rounds done so far (rich's own estimate needs a window of
    samples and stays blank for the first, long rounds)."""

    def __init__(self, reporter: "Reporter"):
        super().__init__()
        self.reporter = reporter

    def render(self, task) -> Text:
        return Text(self.reporter.eta_text() or "ETA -:--", style="progress.remaining")


class Reporter:
    def __init__(self, quiet: bool = False, force_plain: bool = False, console: Console | None = None,
                 stream: TextIO | None = None):
        self.console = console or Console(stderr=True, highlight=False)
        self.stream = stream  # plain lines go here (default: sys.stderr at the time of writing)
        self.quiet = quiet
        self.tty = self.console.is_terminal and not force_plain
        self._progress: Progress | None = None
        self._task = None
        self._t0 = time.monotonic()
        self._t_start: float | None = None
        self._budget_end: float | None = None  # a budgeted run's measuring ends by then (monotonic)
        self.total = 0
        self.done = 0
        self.builds: list[str] = []

    def _plain(self, line: str) -> None:
        print(line, file=self.stream or sys.stderr, flush=True)

    def info(self, msg: str) -> None:
        if self.quiet:
            return
        if self._progress is not None:
            self._progress.console.print(msg, markup=False)
        elif self.tty:
            self.console.print(msg, markup=False)
        else:
            self._plain(f"[refbench {time.monotonic() - self._t0:7.1f}s] {msg}")

    def warn(self, msg: str) -> None:
        if self.tty:
            (self._progress.console if self._progress else self.console).print(f"[yellow]warning:[/yellow] {msg}")
        else:
            self._plain(f"refbench: warning: {msg}")

    # ---- the measured part of a run: interleaved rounds -------------------------------------
    def start(self, total_rounds: int, builds: list[str] | None = None, budget: float | None = None) -> None:
        """`total_rounds` planned; a budgeted run (`budget` seconds) adds rounds until its steps
        decide, so its rounds say little of when it ends: its budget does."""
        self.total, self.done = max(0, total_rounds), 0
        self.builds = list(builds or [])
        self._t_start = time.monotonic()
        self._budget_end = None if budget is None else self._t_start + budget
        if self.quiet:
            return
        if self.tty:
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("rounds"), TimeElapsedColumn(), _EtaColumn(self),
                                      console=self.console, transient=True)
            self._progress.start()
            if self.builds:
                self._progress.console.print(f"benchmarking {' vs '.join(self.builds)}: {self.total} interleaved "
                                             f"rounds", markup=False)
            self._task = self._progress.add_task("benchmarking", total=self.total or None)
        else:
            who = f" of {', '.join(self.builds)}" if self.builds else ""
            self._plain(f"[refbench {time.monotonic() - self._t0:7.1f}s] benchmarking: {self.total} "
                        f"interleaved rounds{who}")

    def not_measuring(self, seconds: float) -> None:
        """`seconds` went to building a state, which a budget does not count: its end moves."""
        if self._budget_end is not None:
            self._budget_end += seconds

    def eta_seconds(self) -> float | None:
        """Remaining time at the average pace of the rounds done so far (None before the first)."""
        if self._t_start is None or self.done == 0 or self.total == 0:
            return None
        per_round = (time.monotonic() - self._t_start) / self.done
        return per_round * max(0, self.total - self.done)

    def eta_text(self) -> str:
        """'ETA 12:30' at the pace so far; a budgeted run's end is bounded by its budget instead:
        'budget left 1:59:00' (the rounds' pace would promise minutes for a run of hours)."""
        if self._budget_end is not None:
            return f"budget left {fmt_duration(self._budget_end - time.monotonic())}"
        eta = self.eta_seconds()
        return f"ETA {fmt_duration(eta)}" if eta is not None else ""

    def progress_text(self) -> str:
        if not self.total:
            return ""
        eta = self.eta_text()
        return f"{self.done}/{self.total} rounds" + (f", {eta}" if eta else "")

    def status(self, msg: str) -> None:
        if self.quiet:
            return
        if self._progress is not None:
            self._progress.update(self._task, description=msg)
        elif self.tty:
            self.console.print(msg, markup=False)
        else:
            extra = self.progress_text() if self._t_start is not None else ""
            self._plain(f"[refbench {time.monotonic() - self._t0:7.1f}s] {msg}" + (f"  ({extra})" if extra else ""))

    def advance(self) -> None:
        self.done += 1
        if self.done > self.total:  # --until-decided adds rounds beyond the plan
            self.total = self.done
            if self._progress is not None:
                self._progress.update(self._task, total=self.total)
        if self._progress is not None:
            self._progress.advance(self._task)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        elif not self.tty and not self.quiet and self._t_start is not None and self.done:
            self._plain(f"[refbench {time.monotonic() - self._t0:7.1f}s] {self.done} rounds in "
                        f"{fmt_duration(time.monotonic() - self._t_start)}")
        self._t_start = None
