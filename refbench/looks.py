"""What the runner looks at when it decides a step: the contrasts of the builds' samples so far (each
contender against the baseline, per metric), the step's noise its most runs are planned from, and
its contrasts completed with `not supported` for the builds that have no command for it. Pure:
the samples in, figures out; the decision itself is the stopping rule's (refbench.stopping).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from . import figures, results as rs, stats
from .builds import BuiltRef
from .figures import Contrast, Criteria
from .rounds import BuildSamples
from .judge import contrast_metric
from .metrics import BUILTIN, table
from .verdict import asked

# What the stopping rule watches at each look (those measured): wall time, the primary metric, and
# the daemon's own figures, which online are the work the client only asks for (issue 36): a step
# whose wall time is decided goes on, within its share of the budget, while one of them is not.
# The table's `watched` metrics (metrics.Metric.watched): WATCHED the built-in ones, `watched()` those in use.
WATCHED = tuple(m.name for m in BUILTIN if m.watched)


def watched() -> tuple[str, ...]:
    return tuple(m.name for m in table() if m.watched)


def contrasts(builds: Sequence[BuiltRef], samples: Mapping[str, BuildSamples], measures: Sequence[str],
              criteria: Criteria, family_size: int, looks: tuple[float, ...] = (1.0,),
              spend: tuple[float, ...] | None = None, metrics: Sequence[str] | None = None) -> list[Contrast]:
    """One contrast per contender and metric (of `metrics`, default all the bench measures:
    `measures`, Bench.metrics, and the daemon's or server's figures where asked) with a figure for
    every run of both builds, wall first (the primary metric), each against its own threshold;
    spend: the looks' spending times (StepState.spend)."""
    base = builds[0].label
    b0 = samples[base]
    out = []
    measured = (*measures, *(m.name for m in table() if m.probed and m.name in b0.daemon
                             and asked(m.name, criteria.metric_thresholds)))
    for metric in measured if metrics is None else [m for m in measured if m in metrics]:
        x = b0.values(metric)
        for b in builds[1:]:
            y = samples[b.label].values(metric)
            if x is None or y is None or not rs.contrastable(x, y):
                continue
            # rounds are the blocks: runs are contrasted within a round only, so drift between rounds
            # cancels; inside a round the builds alternate run by run (ABBA), which cancels drift there
            out.append(contrast_metric(metric, base, x, b.label, y, criteria,
                                       base_rounds=b0.rounds or None, cont_rounds=samples[b.label].rounds or None,
                                       looks=looks, spend=spend, family_size=family_size))
    return out


def noise(builds: Sequence[BuiltRef], samples: Mapping[str, BuildSamples]) -> float | None:
    """The step's wall-time noise so far, the largest any contender's contrast sees: what its
    most runs are planned from (StopRule.plan, StopRule.replan)."""
    b0 = samples[builds[0].label]
    found = [stats.pair_noise(b0.times, b0.rounds or None, samples[b.label].times, samples[b.label].rounds or None)
             for b in builds[1:]]
    found = [v for v in found if v]
    return max(found) if found else None


def unsupported(builds: Sequence[BuiltRef]) -> tuple[Contrast, ...]:
    """A step the baseline, or every contender, has no command for: each contender `not supported`."""
    return tuple(figures.not_supported(builds[0].label, b.label) for b in builds[1:])


def with_unsupported(builds: Sequence[BuiltRef], comps: Sequence[Contrast]) -> list[Contrast]:
    """The step's contrasts in the builds' order (`builds`: the run's, baseline first), `not
    supported` for the contenders it has no command for."""
    base, by = builds[0].label, {}
    for c in comps:
        by.setdefault(c.contender, []).append(c)
    return [c for b in builds[1:] for c in by.get(b.label, [figures.not_supported(base, b.label)])]
