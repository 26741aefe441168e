"""The verdict engine: every rule that turns figures into a verdict, in one place.

The figures of one contrast (shift, interval, p) come from stats (the runner's per look,
`compare`'s per saved pair of builds); what is decided from them is here: the verdict of one
contrast (decide; `contrast` and `contrast_metric` give stats' figures theirs, at each look),
the criteria a saved run is judged by again (figures.criteria builds them, from options or a
results file's settings), the adjustment of the whole family of contrasts (steps × contenders
× metrics, weighted Benjamini–Hochberg), the verdicts it settles, the N-way scoreboard, and which
verdicts fail a run (--fail-on-regression, --fail-on). Views (render/, analysis) only read what
this decided. `pipeline.run` (and so nightly, bisect and calibrate, which run it), `merge` and
`compare` all call it, so a sharded, merged or re-compared run cannot be judged differently
from the run itself.

Before measuring, `design_warnings` says which steps' designs cannot reach a verdict at all.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TypeVar

from . import results as rs
from .figures import IDENTICAL_RUNS, Contrast, Criteria
from .verdict import WALL_SHARE, Verdict, is_daemon_metric

# No numpy or scipy at import (each is imported where it computes, stats and stopping with them):
# the commands' argument checks read `failing` here, and reading a results file must not pay for
# the statistics (issue 28).

# written into results.json (settings.multiple_testing) as it always was: a file's text keeps its words
MULTIPLE_TESTING = "benjamini-hochberg across the run's comparisons (steps x contenders x metrics)"


# ---- the criteria ----------------------------------------------------------------------------
def recorded(settings: rs.Settings) -> Criteria:
    """The criteria a results file's settings record: how `merge` (and anything else re-judging a
    saved run) judges it as the run did, metric thresholds included."""
    return settings.criteria


# ---- one contrast's verdict --------------------------------------------------------------------
def decide(rel: float, lo: float | None, hi: float | None, p: float | None, criteria: Criteria) -> Verdict:
    """no significant change: the interval lies inside (−threshold, +threshold) — equivalence
    shown with the same interval (a 95% interval is two one-sided tests at 2.5% each: stricter
    than TOST's 90%, and valid at every look of a sequential run where the interval is the
    repeated one); slower/faster: otherwise, when significant (p < alpha) and the interval
    excludes 0, by the sign of rel, however small the change (a tight +5% is slower; equivalence
    margins decide what counts as nothing); otherwise inconclusive."""
    if lo is None or hi is None or p is None:
        return Verdict.INCONCLUSIVE
    t = criteria.threshold
    if -t < lo and hi < t:
        return Verdict.SAME
    if p < criteria.alpha and (lo > 0 or hi < 0):
        return Verdict.SLOWER if rel > 0 else Verdict.FASTER
    return Verdict.INCONCLUSIVE


def decided(c: Contrast, criteria: Criteria) -> Contrast:
    """The statistics' figures with their verdict: values the same in every run of both builds
    (IDENTICAL_RUNS) are no change, whatever the threshold; any other contrast is what decide says."""
    verdict = Verdict.SAME if c.method == IDENTICAL_RUNS else decide(c.rel, c.ci_low, c.ci_high, c.p_value, criteria)
    return replace(c, verdict=verdict)


def contrast(base_label: str, base_times, cont_label: str, cont_times, criteria: Criteria = Criteria(),
             **kw) -> Contrast:
    """stats.contrast (its keywords: rounds, looks, spend, family size, metric) with its verdict."""
    from . import stats  # here: stats needs numpy, which reading a verdict does not
    return decided(stats.contrast(base_label, base_times, cont_label, cont_times, criteria, **kw), criteria)


def contrast_metric(metric: str, base_label: str, base_values, cont_label: str, cont_values,
                    criteria: Criteria = Criteria(), **kw) -> Contrast:
    """stats.contrast_metric with its verdict, against that metric's threshold: the contrast each
    look of the runner and each pairing of two saved runs takes."""
    from . import stats  # here: stats needs numpy, which reading a verdict does not
    c = stats.contrast_metric(metric, base_label, base_values, cont_label, cont_values, criteria, **kw)
    return decided(c, criteria.for_metric(metric))


# ---- the family -------------------------------------------------------------------------------
def metric_weights(comps: list[Contrast]) -> list[float]:
    """Weights of a family's members for weighted Benjamini–Hochberg (Genovese, Roeder & Wasserman
    2006: any weights averaging 1 keep the false discovery rate, and so an A/A run's false alarms,
    at alpha). Wall time, the primary metric, holds WALL_SHARE of the family's weight and the other
    metrics share the rest: adding CPU and memory verdicts makes wall time's family at most 25%
    larger (plain BH would triple it with three metrics, and a 6-run smoke run of a +30% slow-down
    would no longer call it), while a clear change in CPU or memory (p far below alpha, as any
    real one is at the default 10 or 20 runs) still passes. One metric: all weights 1."""
    metrics = {c.metric for c in comps}
    if len(metrics) < 2 or "wall" not in metrics:
        return [1.0] * len(comps)
    n_wall = sum(1 for c in comps if c.metric == "wall")
    n_other = len(comps) - n_wall
    w_wall = WALL_SHARE * len(comps) / n_wall
    w_other = (1 - WALL_SHARE) * len(comps) / n_other
    return [w_wall if c.metric == "wall" else w_other for c in comps]


def adjust_family(comps: list[Contrast], criteria: Criteria = Criteria()) -> list[Contrast]:
    """A run's verdict table is a family of tests: with one test per step at alpha, an A/A run of
    nine steps would call some step slower or faster one time in three. Benjamini-Hochberg across
    the run's contrasts (steps x contenders x metrics) keeps that at alpha when nothing changed
    (the A/A case, where false discovery rate and family-wise error coincide) and loses less power
    than Bonferroni-Holm when something did; weighted (metric_weights) so the primary metric keeps
    most of its power. p_value becomes the adjusted p; p_raw keeps the step's own. The steps'
    p-values are repeated p-values when they looked more than once: valid at the look where they
    stopped, so BH applies unchanged. The daemon's metrics (verdict.DAEMON_METRICS) are a family
    of their own, adjusted apart: the client's family, and so wall time's power, is what it was
    without them (issue 36)."""
    daemon = [i for i, c in enumerate(comps) if is_daemon_metric(c.metric)]
    if daemon:
        client = [i for i in range(len(comps)) if i not in set(daemon)]
        out = list(comps)
        for part in (client, daemon):
            for i, c in zip(part, _adjust_one([comps[i] for i in part], criteria)):
                out[i] = c
        return out
    return _adjust_one(list(comps), criteria)


def _adjust_one(comps: list[Contrast], criteria: Criteria) -> list[Contrast]:
    """Weighted Benjamini-Hochberg over one family (adjust_family)."""
    idx = [i for i, c in enumerate(comps) if c.p_value is not None]
    if len(idx) < 2:
        return list(comps)
    from scipy.stats import false_discovery_control
    weights = metric_weights([comps[i] for i in idx])
    adjusted = false_discovery_control([min(1.0, comps[i].p_value / w) for i, w in zip(idx, weights)], method="bh")
    out = list(comps)
    for i, a in zip(idx, adjusted):
        c = comps[i]
        a = float(a)
        out[i] = replace(c, p_value=a, p_raw=c.p_value,
                         verdict=decide(c.rel, c.ci_low, c.ci_high, a, criteria.for_metric(c.metric)))
    return out


def adjust_groups(groups: list[list[Contrast]], criteria: Criteria,
                  per_contender: bool = False) -> list[list[Contrast]]:
    """Contrasts in groups (a step's, a paired step's) adjusted as one family: every contrast
    of the run, or (calibrate) each contender's apart. New lists; the contrasts given stay."""
    comps = [list(g) for g in groups]
    contenders = list(dict.fromkeys(c.contender for cs in comps for c in cs))
    for family in (contenders if per_contender else [None]):
        members = [(k, i) for k, cs in enumerate(comps) for i in range(len(cs))
                   if family is None or cs[i].contender == family]
        for (k, i), c in zip(members, adjust_family([comps[k][i] for k, i in members], criteria)):
            comps[k][i] = c
    return comps


def adjust(scenarios: Iterable[rs.Scenario], criteria: Criteria,
           per_contender: bool = False) -> tuple[rs.Scenario, ...]:
    """The run's p-value adjustment over its family; new scenarios, the measured ones unchanged."""
    scenarios = list(scenarios)
    adjusted = iter(adjust_groups([list(st.all_contrasts()) for sc in scenarios for st in sc.steps],
                                  criteria, per_contender))
    return tuple(dataclasses.replace(sc, steps=tuple(_with_contrasts(st, next(adjusted)) for st in sc.steps))
                 for sc in scenarios)


def _with_contrasts(st: rs.Step, comps: list) -> rs.Step:
    """The step with its contrasts replaced, wall apart from the other metrics as rs.Step keeps them."""
    return dataclasses.replace(st, comparisons=tuple(c for c in comps if c.metric == "wall"),
                               metric_comparisons=tuple(c for c in comps if c.metric != "wall"))


def unadjusted(c: Contrast) -> Contrast:
    """A contrast with its own p-value back (p_raw, where an adjustment replaced it): what a
    shard's contrast was before the shard adjusted it within itself. A plain Contrast, so its
    phrase is said again from the stored factor, as for any contrast judged again."""
    kw = {f.name: getattr(c, f.name) for f in dataclasses.fields(Contrast)}
    return Contrast(**{**kw, "p_value": c.p_value if c.p_raw is None else c.p_raw, "p_raw": None})


# ---- the run's verdicts -------------------------------------------------------------------------
@dataclass(frozen=True)
class Judged:
    """A run's scenarios with their family-adjusted verdicts, and its scoreboard (None for two builds)."""
    scenarios: tuple[rs.Scenario, ...]
    scoreboard: dict | None


def scoreboard(scenarios: Iterable[rs.Scenario], labels) -> dict[str, dict] | None:
    """The N-way scoreboard of a run (None with two builds, where each step's one contrast says it all),
    from each step's wall-time contrasts (each contender against the baseline, labels[0])."""
    labels = list(labels)
    if len(labels) <= 2:
        return None
    ratios: dict[str, list[float]] = {lab: [] for lab in labels}
    for contrasts in (st.comparisons for sc in scenarios for st in sc.steps):
        contrasts = list(contrasts)
        if any(c.verdict == Verdict.NOT_SUPPORTED for c in contrasts):
            continue  # over the steps every build ran: a geomean of other steps ranks nothing
        for c in contrasts:
            ratios[c.contender].append(c.ratio)
        ratios[labels[0]].append(1.0)
    return geomean_scoreboard(ratios)


def geomean_scoreboard(ratios: dict[str, list[float]]) -> dict[str, dict]:
    """Per build: geometric mean of its time ratios to the baseline across steps, and relative
    to the fastest build (bee-bench's "1.00x = fastest")."""
    import numpy as np  # here: reading a verdict (`failing`) needs no numpy
    gm = {label: float(np.exp(np.mean(np.log(r)))) if r else float("nan") for label, r in ratios.items()}
    finite = [v for v in gm.values() if math.isfinite(v)]
    best = min(finite) if finite else float("nan")
    return {label: {"geomean_vs_baseline": round(v, 6), "vs_fastest": round(v / best, 6) if best else None}
            for label, v in gm.items()}


def verdicts(scenarios: Iterable[rs.Scenario], labels, criteria: Criteria,
             per_contender: bool = False) -> Judged:
    """A run's last steps: its contrasts adjusted as one family (per contender for calibrate),
    which settles their verdicts, and the scoreboard."""
    adjusted = adjust(scenarios, criteria, per_contender)
    return Judged(adjusted, scoreboard(adjusted, labels))


def rejudge(scenarios: Iterable[rs.Scenario], labels, criteria: Criteria) -> Judged:
    """Saved contrasts judged again as one run: each from its own p-value (a shard adjusted
    within the shard only), then verdicts() over all of them (merge)."""
    raw = [dataclasses.replace(sc, steps=tuple(dataclasses.replace(
        st, comparisons=tuple(unadjusted(c) for c in st.comparisons),
        metric_comparisons=tuple(unadjusted(c) for c in st.metric_comparisons)) for st in sc.steps))
        for sc in scenarios]
    return verdicts(raw, labels, criteria)


# ---- what fails a run -------------------------------------------------------------------------
C = TypeVar("C")  # a contrast (figures.Contrast): anything with a verdict and a metric


def fail_metrics(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The metrics whose slower verdicts fail a run: wall time, widened by --fail-on."""
    return tuple(dict.fromkeys(("wall", *extra)))


def failing(contrasts: Iterable[C], fail_on: Iterable[str] = ()) -> list[C]:
    """The slower verdicts that fail a run with --fail-on-regression (wall) or --fail-on METRICS."""
    metrics = fail_metrics(fail_on)
    return [c for c in contrasts if c.verdict == Verdict.SLOWER and c.metric in metrics]


# ---- before measuring --------------------------------------------------------------------------
def design_warnings(units, rounds: int, criteria: Criteria) -> list[str]:
    """One line naming the judged steps whose planned rounds cannot reach alpha at all (1 round of
    1 + 1 runs: two arrangements and no noise to estimate), said before anything is measured."""
    from . import stats  # here: stats needs numpy, which reading a verdict does not
    from .stopping import split_runs  # the runner's own split of a step's runs into rounds (stopping: numpy too)
    lost = [u for u in units
            if not stats.reachable([(k, k) for k in split_runs(u.runs, rounds)], criteria)]
    if not lost:
        return []
    names = ", ".join(f"{u.scenario.name} / {u.step.name}" for u in lost[:3]) + (" ..." if len(lost) > 3 else "")
    return [f"{len(lost)} step(s) cannot reach a verdict at alpha {criteria.alpha:g} ({names}): one run per build "
            "gives no test anything to decide with; they are timed, not judged (-r 2 or more to judge them)"]
