"""The metrics, as one table: what a run measures per timed run, where each figure comes from, how
it is judged and how it is shown. Everything that names metrics (the runner's samples and looks,
the judge's families, results.json's samples, the views, `--metric-threshold`, `--fail-on`,
compare and merge) reads this table, so a new metric is one `Metric` record plus the code of its
source that reads its value (`Metric.read`).

On the bottom floor (it imports nothing of refbench): `verdict`, `results` and the views all read
it. The table in use is `table()`; `extended(*metrics)` puts more records in place for a block,
as `pins.installed` does a pin table: the seam a test (or a plug-in) adds a metric through.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

SOURCES = ("timer", "probe", "server")
FAMILIES = ("client", "daemon")


@dataclass(frozen=True, kw_only=True)
class Metric:
    """One metric. `source`: who reads it: "timer" (hyperfine's export, an executor.Measurement
    per run), "probe" (the daemon's probes around each run, a daemon.Usage) or "server" (the same
    probes of the embedded S3 server). `read` takes that record and gives the run's figure (None
    where it has none). `family`: the adjustment family ("client": with wall time, weighted;
    "daemon": a long-lived process's, apart). `threshold`: its default equivalence threshold (None:
    --threshold's, as wall's). `asked_only`: context unless a run gives it a threshold (the S3
    server's CPU). `watched`: the stopping rule waits for it (looks.watched). `key`: its key among
    results.json's samples and its CSV columns' prefix (the name with underscores), unless `stored`
    says the timer's raw fields hold it already (wall, cpu, memory, instructions)."""
    name: str
    display: str  # what the views call it ("daemon CPU")
    unit: str  # "s", "bytes", "count"
    source: str
    read: Callable[[object], float | int | None]
    better: str = "lower"  # which way is better: every metric so far is a cost
    family: str = "client"
    threshold: float | None = None
    asked_only: bool = False
    watched: bool = False
    stored: bool = False  # the file's raw timer fields hold it (times, user + system, memory_bytes, instructions)

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"metric {self.name}: source {self.source!r} is not one of {', '.join(SOURCES)}")
        if self.family not in FAMILIES:
            raise ValueError(f"metric {self.name}: family {self.family!r} is not one of {', '.join(FAMILIES)}")

    @property
    def key(self) -> str:
        return self.name.replace("-", "_")

    @property
    def probed(self) -> bool:
        """Read by probes around each run (a daemon's or the S3 server's), not by the timer."""
        return self.source != "timer"


@dataclass(frozen=True)
class Table:
    """The metrics in the order the outputs show them, wall (the primary) first."""
    metrics: tuple[Metric, ...]

    def __iter__(self) -> Iterator[Metric]:
        return iter(self.metrics)

    def __contains__(self, name: object) -> bool:
        return any(m.name == name for m in self.metrics)

    def get(self, name: str) -> Metric | None:
        return next((m for m in self.metrics if m.name == name), None)

    def __getitem__(self, name: str) -> Metric:
        m = self.get(name)
        if m is None:
            raise KeyError(name)
        return m

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.metrics)

    def of(self, *sources: str) -> tuple[Metric, ...]:
        return tuple(m for m in self.metrics if m.source in sources)

    def names_of(self, *sources: str) -> tuple[str, ...]:
        return tuple(m.name for m in self.of(*sources))

    def by_key(self) -> dict[str, Metric]:
        """The stored-by-key metrics (every one the timer's raw fields do not hold) by sample key."""
        return {m.key: m for m in self.metrics if not m.stored}

    def thresholds(self) -> tuple[tuple[str, float], ...]:
        """The default thresholds the table gives (wall's and the daemon's are --threshold's)."""
        return tuple((m.name, m.threshold) for m in self.metrics if m.threshold is not None)

    def with_metrics(self, more: Iterable[Metric]) -> "Table":
        more = tuple(more)
        clash = [m.name for m in more if m.name in self]
        if clash:
            raise ValueError(f"metric {clash[0]} is in the table already")
        return Table(self.metrics + more)


def _cpu(m) -> float | None:
    return None if m.user is None or m.system is None else m.user + m.system


# The built-in metrics. The timer's: wall time, CPU time (user + system), peak memory (the run's
# own peak RSS), instructions retired (where the kernel lets hyperfine count them); CPU varies less
# than wall time but carries the same scheduler noise, so wall's 5%; a Go program's peak memory
# moves with the garbage collector's timing by a few percent, so 5% too; instructions retired vary
# by well under 1% between runs of one binary, so 2% is already a real change. The daemon's
# (kubo online/offline, refbench.daemon), in a family of their own, --threshold's. The S3 server's
# CPU: context unless asked.
BUILTIN = Table((
    Metric(name="wall", display="time", unit="s", source="timer", read=lambda m: m.wall, watched=True, stored=True),
    Metric(name="cpu", display="CPU", unit="s", source="timer", read=_cpu, threshold=0.05, stored=True),
    Metric(name="memory", display="memory", unit="bytes", source="timer", read=lambda m: m.memory, threshold=0.05,
           stored=True),
    Metric(name="instructions", display="instructions", unit="count", source="timer",
           read=lambda m: m.counters.get("instructions"), threshold=0.02, stored=True),
    Metric(name="daemon-cpu", display="daemon CPU", unit="s", source="probe", family="daemon", watched=True,
           read=lambda u: u.cpu),
    Metric(name="daemon-memory", display="daemon memory", unit="bytes", source="probe", family="daemon",
           watched=True, read=lambda u: u.memory),
    Metric(name="daemon-writes", display="daemon writes", unit="bytes", source="probe", family="daemon",
           watched=True, read=lambda u: u.writes),
    Metric(name="daemon-alloc", display="daemon allocations", unit="bytes", source="probe", family="daemon",
           watched=True, read=lambda u: u.alloc),
    Metric(name="server-cpu", display="server CPU", unit="s", source="server", family="daemon", asked_only=True,
           read=lambda u: u.cpu),
))

_IN_USE: list[Table] = [BUILTIN]


def table() -> Table:
    """The metrics in use."""
    return _IN_USE[-1]


@contextlib.contextmanager
def extended(*metrics: Metric) -> Iterator[Table]:
    """The table with `metrics` added, in use for the block."""
    t = table().with_metrics(metrics)
    _IN_USE.append(t)
    try:
        yield t
    finally:
        _IN_USE.remove(t)
