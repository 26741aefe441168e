"""The views' analysis: what a view shows that takes computing beyond reading the typed results,
computed here before anything renders, so that render/ only formats and imports no `stats`
(benchstat's split: ToTables computes, ToText and ToCSV only write). Not a stage of pipeline.run:
`analyse` is called after a run, a merge or a report, for --html (commands/_args.write_views).

- the scoreboard: per build its verdict counts and the geometric mean of its time ratios to the
  baseline (a run of three or more builds stores one; for two, it is computed as the run would);
- the latency-vs-size fits of steps run at several sizes (bee-bench's view);
- each build's box of each step's run times (quartiles and whiskers: the summary stores none).

The records it fills (figures.Analysis and its parts) are plain, so the views read them without
importing this module, numpy or the statistics.

Verdict counts and regressions are plain queries of the results (`Results.verdict_counts`,
`Results.regressions`); only what takes arithmetic lives here.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from .figures import Analysis, Box, BuildScore, SizeFamily, SizeFit
from .judge import geomean_scoreboard
from .results import Results, Samples, Scenario, Step
from .verdict import count


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def build_scores(results: Results) -> tuple[BuildScore, ...]:
    """Per build: the geometric-mean scoreboard the run stored (runs of three or more builds store
    one; for two builds, judge.geomean_scoreboard over the stored ratios, as the run computes it),
    and its verdict counts."""
    labels = results.labels
    ratios: dict[str, list[float]] = {lab: [] for lab in labels}
    for _, _, c in results.comparisons():
        if c.ratio and c.ratio > 0 and math.isfinite(c.ratio):
            ratios[c.contender].append(c.ratio)
            ratios[labels[0]].append(1.0)
    board = results.scoreboard or geomean_scoreboard(ratios)
    return tuple(BuildScore(lab, i == 0, count(c.verdict for _, _, c in results.comparisons() if c.contender == lab),
                            _finite((board.get(lab) or {}).get("geomean_vs_baseline")),
                            _finite((board.get(lab) or {}).get("vs_fastest")))
                 for i, lab in enumerate(labels))


# ---- latency vs size ----------------------------------------------------------------------------
def size_fit(points) -> SizeFit:
    pts = tuple((float(b), float(t)) for b, t in points)
    if len({p[0] for p in pts}) < 2:
        return SizeFit(pts, None, None, None, None)
    xs = np.array([p[0] for p in pts])
    ys = np.array([p[1] for p in pts])
    slope, icpt = np.polyfit(xs, ys, 1)
    pred = icpt + slope * xs
    ss_tot = float(((ys - ys.mean()) ** 2).sum())
    return SizeFit(pts, overhead=float(icpt), slope=float(slope), throughput=float(1 / slope) if slope > 0 else None,
                   r2=1 - float(((ys - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else None)


def size_families(results: Results) -> list[SizeFamily]:
    """The run's steps of the same name and family (fixture kind and file count, e.g. upload of a
    large file and of a very large file) run at two or more sizes, each build's runs fitted. Different
    file counts are never mixed, as per-file cost would masquerade as size cost."""
    groups: dict[tuple[str, str], list[tuple[Scenario, Step]]] = {}
    for sc, st in results.steps():
        fx = sc.fixture
        family = f"{fx.kind}, {fx.files} file" + ("s" if fx.files != 1 else "")
        groups.setdefault((st.name, family), []).append((sc, st))
    out = []
    for (step, family), members in groups.items():
        sizes = {sc.fixture.bytes for sc, _ in members if sc.fixture.bytes}
        if len(sizes) < 2:
            continue
        builds = {lab: size_fit([(sc.fixture.bytes, t) for sc, st in members if lab in st.builds
                                 for t in st.builds[lab].times])
                  for lab in results.labels}
        out.append(SizeFamily(step, family, tuple(sc.name for sc, _ in members), tuple(sorted(sizes)), builds))
    return out


# ---- the distribution chart's boxes ---------------------------------------------------------------
def box(b: Samples) -> Box:
    """The box of one build's runs: quartiles (numpy's linear percentiles) and Tukey's whiskers,
    the furthest runs within 1.5 interquartile ranges of the box."""
    a = np.asarray(b.times, dtype=float)
    q1, q3 = (float(q) for q in np.percentile(a, [25, 75]))
    iqr = q3 - q1
    return Box(q1=q1, q3=q3, whisker_low=float(a[a >= q1 - 1.5 * iqr].min()),
               whisker_high=float(a[a <= q3 + 1.5 * iqr].max()))


def boxes(results: Results) -> Mapping[tuple[str, str], Mapping[str, Box]]:
    """(scenario, step) -> label -> the box of that build's runs, for every build that has runs."""
    return MappingProxyType({(sc.name, st.name): MappingProxyType({lab: box(b) for lab, b in st.builds.items()
                                                                   if b is not None and b.times})
                             for sc, st in results.steps()})


def analyse(results: Results) -> Analysis:
    """Everything the HTML report shows beyond the typed results, computed before it renders."""
    return Analysis(build_scores(results), tuple(size_families(results)), boxes(results))
