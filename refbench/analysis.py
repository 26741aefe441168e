"""The analyse stage's view data: what a view shows that takes computing beyond reading the typed
results, computed here before anything renders, so that render/ only formats and imports no
`stats` (benchstat's split: ToTables computes, ToText and ToCSV only write).

- the scoreboard: per build its verdict counts and the geometric mean of its time ratios to the
  baseline (a run of three or more builds stores one; for two, it is computed as the run would);
- the latency-vs-size fits of steps run at several sizes (bee-bench's view).

Verdict counts and regressions are plain queries of the results (`Results.verdict_counts`,
`Results.regressions`); only what takes arithmetic lives here.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .results import Results, Scenario, Step
from .judge import geomean_scoreboard
from .verdict import Verdict, count


@dataclass(frozen=True)
class BuildScore:
    """One build's line of the scoreboard."""
    label: str
    baseline: bool
    counts: Mapping[Verdict, int]  # its comparisons' verdicts against the baseline (none for the baseline)
    geomean: float | None  # geometric mean of its time ratios to the baseline across steps; None if unknown
    vs_fastest: float | None  # that, relative to the fastest build's (1.00 = fastest)


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
@dataclass(frozen=True)
class SizeFit:
    """Least-squares time = overhead + slope · bytes over every run of one build at several sizes
    (bee-bench's latency-vs-size view); the fields are None with fewer than two sizes."""
    points: tuple[tuple[float, float], ...]  # (bytes, seconds) of every run
    overhead: float | None  # seconds a run takes whatever its size
    slope: float | None  # seconds per byte
    throughput: float | None  # bytes per second (1 / slope; None unless the slope is positive)
    r2: float | None  # share of the variance the line explains


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


@dataclass(frozen=True)
class SizeFamily:
    """One step run at two or more sizes of the same shape, with each build's fit."""
    step: str
    kind: str  # what the sizes share, e.g. "sparse, 1 file"
    scenarios: tuple[str, ...]
    sizes: tuple[int, ...]  # ascending
    builds: dict[str, SizeFit]  # label -> fit, in the run's build order


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


@dataclass(frozen=True)
class Analysis:
    """What the HTML report shows beyond the typed results, computed before it renders."""
    scores: tuple[BuildScore, ...]
    families: tuple[SizeFamily, ...]


def analyse(results: Results) -> Analysis:
    return Analysis(build_scores(results), tuple(size_families(results)))
