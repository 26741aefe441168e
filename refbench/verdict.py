"""The six verdicts a contrast can reach, and what every view shows of each: one place, so the
statistics, results.json, the summary, the PR comment, the HTML report and the nightly never spell
a verdict, its marker or its rank differently.

A StrEnum, so a verdict *is* its string: results.json, the history database and an equality test
with a string read back from either stay exactly as they were before the enum existed. On the
bottom floor (of refbench it imports only the metrics' table, `metrics`, on that floor too), so `stats` and `render` both import it and
`render` needs no `stats` to know what a verdict looks like.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

from .metrics import BUILTIN, table

# The built-in metrics' names, by source, from the one table (refbench.metrics): wall time, CPU
# time, peak memory, instructions retired (hyperfine's, the timer's); what a build's daemon (kubo
# online/offline) spent during each run, read by probes around it and judged in an adjustment
# family of its own; the S3 server's CPU, context unless asked. What reads the metrics in use
# (a table a test or plug-in extended) asks `metrics.table()`; these stay the built-in ones.
METRICS = BUILTIN.names_of("timer")
DAEMON_METRICS = BUILTIN.names_of("probe")
SERVER_METRICS = BUILTIN.names_of("server")
ALL_METRICS = BUILTIN.names


def is_daemon_metric(metric: str) -> bool:
    """A long-lived process beside the client (kubo's daemon, the embedded MinIO): its own family."""
    m = table().get(metric)
    return m is not None and m.family == "daemon"


def asked(metric: str, metric_thresholds: Iterable[tuple[str, float]] | Mapping[str, float]) -> bool:
    """Whether a measured metric gets a verdict: all do but the `asked_only` ones (the S3 server's
    CPU), context unless the run's criteria give one a threshold (`--metric-threshold server-cpu=0.05`)."""
    m = table().get(metric)
    given = metric_thresholds if isinstance(metric_thresholds, Mapping) else dict(metric_thresholds)
    return m is None or not m.asked_only or metric in given


# The verdicts' defaults, written once: the command line, a run's request, the statistics' criteria
# and a results file read without them all take them from here. --threshold: wall time's
# equivalence margin (a change inside ±5% is no change worth a verdict); --alpha: the run's
# false-alarm rate; --noise-limit: the cv above which a step is flagged noisy.
THRESHOLD = 0.05
ALPHA = 0.05
NOISE_LIMIT = 0.10
# Default equivalence thresholds of the built-in metrics other than wall (wall's is --threshold).
METRIC_THRESHOLDS = BUILTIN.thresholds()  # (("cpu", 0.05), ("memory", 0.05), ("instructions", 0.02)), why: metrics.py
# Of a family's weight, what wall time holds when other metrics share the family (the weighted
# adjustment, judge.metric_weights). Here, below both, because the statistics plan with it too: the
# smallest level the adjustment can ask of one member (stats.member_level) follows from it.
WALL_SHARE = 0.8


class Verdict(StrEnum):
    """In the order the counts line says them (the order of the values in results.json's docs)."""
    SLOWER = "slower"
    FASTER = "faster"
    SAME = "no significant change"
    INCONCLUSIVE = "inconclusive"
    # a contender whose binary is byte-identical to the baseline's, with the same commands: not
    # measured, counted as no change (the same code cannot be slower; measuring would only add noise)
    IDENTICAL = "identical binary"
    # an implementation (implementations.py) that has no command for the step: nothing to compare,
    # never a failure of the run
    NOT_SUPPORTED = "not supported"

    @property
    def marker(self) -> str:
        """The emoji a table row and the counts line lead with."""
        return _MARKERS[self]

    @property
    def severity(self) -> int:
        """Rank in the order tables list verdicts: what needs attention first (0 = slower)."""
        return _SEVERITY[self]

    @property
    def word(self) -> str:
        """The one-word form the charts and CSS classes use ('same', 'unsure', 'identical')."""
        return _WORDS.get(self, self.value)

    @property
    def moved(self) -> bool:
        """A significant change either way: what a PR comment leads with and a profile explains."""
        return self in (Verdict.SLOWER, Verdict.FASTER)

    @property
    def no_change(self) -> bool:
        """Equivalent to the baseline, measured or known without measuring."""
        return self in (Verdict.SAME, Verdict.IDENTICAL)


_MARKERS = {Verdict.SLOWER: "🔴", Verdict.FASTER: "🟢", Verdict.SAME: "⚪", Verdict.INCONCLUSIVE: "🟡",
            Verdict.IDENTICAL: "🟰", Verdict.NOT_SUPPORTED: "➖"}
_SEVERITY = {Verdict.SLOWER: 0, Verdict.FASTER: 1, Verdict.INCONCLUSIVE: 2, Verdict.SAME: 3, Verdict.IDENTICAL: 4,
             Verdict.NOT_SUPPORTED: 5}
_WORDS = {Verdict.SAME: "same", Verdict.INCONCLUSIVE: "unsure", Verdict.IDENTICAL: "identical",
          Verdict.NOT_SUPPORTED: "unsupported"}
#: verdicts a counts line names only where some contrast has them
_ONLY_WHEN_PRESENT = (Verdict.IDENTICAL, Verdict.NOT_SUPPORTED)
# most severe first: the order a cut PR comment keeps rows in and says what it left out
BY_SEVERITY = tuple(sorted(Verdict, key=lambda v: v.severity))


def count(verdicts: Iterable[str]) -> dict[Verdict, int]:
    """How many of each verdict, every verdict present (0 where none), in the enum's order."""
    counts = dict.fromkeys(Verdict, 0)
    for v in verdicts:
        counts[Verdict(v)] += 1
    return counts


def counts_phrase(counts: Mapping[str, int], *, markers: bool = False, sep: str = " · ",
                  identical_note: str = "") -> str:
    """The verdict counts in words, '3 slower · 0 faster · …', each led by its marker if asked;
    identical binary only when a contender was not measured (with the note that says why)."""
    return sep.join(f"{v.marker + ' ' if markers else ''}{counts[v]} {v}"
                    + (f" {identical_note}" if v == Verdict.IDENTICAL and identical_note else "")
                    for v in Verdict if v not in _ONLY_WHEN_PRESENT or counts.get(v))


def counts_line(counts: Mapping[str, int]) -> str:
    """The counts as the commands' last line says them: '3 slower, 0 faster, …'."""
    return counts_phrase(counts, sep=", ")
