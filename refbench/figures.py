"""The plain figures the statistics produce and results.json stores: what a contrast is judged
by (Criteria), a sample's summary (Summary, summarize) and one contender against the baseline on
one metric (Contrast: two samples set against each other; results.json keeps a step's
under its "comparisons" key); and the plain records of what the views show beyond the results
(Analysis: the scoreboard's lines, size fits, boxes), which analysis.py computes.

Why apart from stats: reading a results file, and every view rendered from one (`report`, the PR
comment, HTML, CSV), needs these types but none of the tests that compute them. stats needs numpy
and scipy (about 0.4 s to import on a fast machine, more on a busy CI runner); this module needs
the standard library and verdict.py only, so `import refbench.results` loads neither. Code that
computes (stats, judge) and code that reads import these from here: one definition, one home.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace

from .metrics import table
from .verdict import ALPHA, METRIC_THRESHOLDS, NOISE_LIMIT, THRESHOLD, Verdict

POWER = 0.8


@dataclass(frozen=True)
class Criteria:
    """What a contrast is judged by: the equivalence thresholds, alpha, the noise limit, alpha
    spending and the power that planning aims for (results.Settings records a run's choice)."""
    threshold: float = THRESHOLD
    alpha: float = ALPHA
    noise_limit: float = NOISE_LIMIT
    confidence: float = 0.95
    spending: str = "obrien-fleming"  # alpha spending across looks: "obrien-fleming" or "pocock"
    power: float = POWER  # power the minimum detectable effect and runs_needed refer to
    metric_thresholds: tuple[tuple[str, float], ...] = METRIC_THRESHOLDS  # metric -> threshold, besides wall

    def threshold_for(self, metric: str) -> float:
        """The equivalence threshold of a metric: --threshold for wall, its own for the others."""
        if metric == "wall":
            return self.threshold
        given = dict(self.metric_thresholds)
        if metric in given:
            return given[metric]
        m = table().get(metric)  # a metric's default in the table (metrics.Metric.threshold), else --threshold's
        return m.threshold if m is not None and m.threshold is not None else self.threshold

    def for_metric(self, metric: str) -> "Criteria":
        return self if metric == "wall" else replace(self, threshold=self.threshold_for(metric))


def criteria(threshold: float = THRESHOLD, alpha: float = ALPHA, noise_limit: float = NOISE_LIMIT,
             metric_thresholds: Iterable[tuple[str, float]] | Mapping[str, float] = ()) -> Criteria:
    """What verdicts are judged by: the options given, each metric's threshold (--metric-threshold)
    over verdict.METRIC_THRESHOLDS. Every command that judges, and a results file's recorded
    settings (results.Settings.criteria), build their criteria here: one way, so a saved run is
    judged again as the run judged it."""
    given = dict(metric_thresholds.items() if isinstance(metric_thresholds, Mapping) else metric_thresholds)
    return Criteria(threshold=threshold, alpha=alpha, noise_limit=noise_limit,
                    metric_thresholds=tuple({**dict(METRIC_THRESHOLDS), **given}.items()))


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    stddev: float
    median: float
    min: float
    max: float
    p95: float
    cv: float

    def to_json(self) -> dict:
        return {k: (round(v, 9) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _percentile(ordered: list[float], q: float) -> float:
    """numpy's default (linear) percentile of sorted values: what summaries always stored."""
    h = (len(ordered) - 1) * q / 100
    lo = math.floor(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])


def summarize(times) -> Summary:
    """mean ± sd (n − 1), median, min, max, p95 and cv of a sample, in plain Python (math.fsum, so
    exactly rounded sums) so that a results file without stored summaries reads without numpy."""
    a = sorted(float(t) for t in times)
    if not a:
        raise ValueError("no samples")
    n = len(a)
    mean = math.fsum(a) / n
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in a) / (n - 1)) if n > 1 else 0.0
    return Summary(n=n, mean=mean, stddev=sd, median=_percentile(a, 50), min=a[0], max=a[-1],
                   p95=_percentile(a, 95), cv=(sd / mean if mean > 0 else 0.0))


@dataclass(frozen=True)
class Contrast:
    """One contender against the baseline on one metric of one step: two samples set against
    each other (stats.contrast computes its figures, judge decides and settles its verdict).
    Named apart from `refbench compare` (two saved runs) and the pairing of their steps (pairing.py)."""
    baseline: str
    contender: str
    ratio: float  # exp(shift): the typical contender/baseline time ratio (> 1: contender slower)
    rel: float  # ratio − 1
    ci_low: float | None  # of rel; None when the data cannot bound it
    ci_high: float | None
    p_value: float | None  # two-sided; after judge.adjust_family the run-wide adjusted p
    verdict: Verdict | None  # judge's; None in the statistics' figures; a string read back becomes its Verdict
    noisy: bool  # some build's cv (sd / mean over all runs) above noise_limit
    mde: float | None  # smallest |rel| this run could detect (α (family-adjusted), 80% power)
    runs_needed: int | None  # runs per build that would detect ±threshold at this noise
    factor: float  # hyperfine: how many times faster the faster one ran (means)
    factor_err: float
    faster: str  # label of the faster build (by mean, as hyperfine says)
    slower_label: str
    p_raw: float | None = None  # the step's own p before the run-wide adjustment (p_value is adjusted)
    method: str = ""  # e.g. "van Elteren, 5 rounds"
    noise: float | None = None  # robust within-round noise: σ of log times (≈ cv)
    look: int = 1  # looks so far (1 for a fixed-size run)
    fraction: float = 1.0  # spending time at this look (runs per build / the most runs planned then): 1 spends all alpha
    z: float | None = None  # standardized test statistic (> 0: contender slower)
    crit: float | None = None  # |z| the interval's level needs at this look
    metric: str = "wall"  # what was compared: wall, cpu, memory or instructions (see METRICS)

    def __post_init__(self):
        # typed whoever builds it (a results file, a test factory): views may ask verdict.marker
        if self.verdict is not None:
            object.__setattr__(self, "verdict", Verdict(self.verdict))

    @property
    def marker(self) -> str:
        return self.verdict.marker

    def phrase(self, quote: str = "'") -> str:
        """hyperfine's wording, e.g. "'B' ran 1.18 ± 0.23 times faster than 'A'"."""
        return (f"{quote}{self.faster}{quote} ran {self.factor:.2f} ± {self.factor_err:.2f} "
                f"times faster than {quote}{self.slower_label}{quote}")

    def to_json(self) -> dict:
        """Flat, JSON-safe: floats rounded, a non-finite float (an unbounded boundary) as None."""
        d = asdict(self)
        d["phrase"] = self.phrase()
        return {k: ((round(v, 9) if math.isfinite(v) else None) if isinstance(v, float) else v) for k, v in d.items()}


# Contrast.method where the values are the same in every run of both builds (stats.contrast_metric):
# nothing to rank, and no change (judge.decided)
IDENTICAL_RUNS = "identical in every run"


def identical(base_label: str, cont_label: str) -> Contrast:
    """The contrast of a contender that was not measured because its binary is the baseline's:
    ratio 1, no interval and no p (so the run's p adjustment leaves it out)."""
    return Contrast(baseline=base_label, contender=cont_label, ratio=1.0, rel=0.0, ci_low=None, ci_high=None,
                      p_value=None, verdict=Verdict.IDENTICAL, noisy=False, mde=None, runs_needed=None, factor=1.0,
                      factor_err=0.0, faster=base_label, slower_label=cont_label, method=Verdict.IDENTICAL.value,
                      look=0, fraction=0.0)


def not_supported(base_label: str, cont_label: str) -> Contrast:
    """The contrast of a step one side has no command for (an implementation's unsupported step):
    no figures, no p (left out of the run's adjustment), verdict `not supported`."""
    return Contrast(baseline=base_label, contender=cont_label, ratio=1.0, rel=0.0, ci_low=None, ci_high=None,
                      p_value=None, verdict=Verdict.NOT_SUPPORTED, noisy=False, mde=None, runs_needed=None, factor=1.0,
                      factor_err=0.0, faster=base_label, slower_label=cont_label, method=Verdict.NOT_SUPPORTED.value,
                      look=0, fraction=0.0)


def hyperfine_ratio(fast: Summary, slow: Summary) -> tuple[float, float]:
    """hyperfine's relative speed and its propagated standard error."""
    ratio = slow.mean / fast.mean
    err = ratio * math.sqrt((slow.stddev / slow.mean) ** 2 + (fast.stddev / fast.mean) ** 2) \
        if slow.mean > 0 and fast.mean > 0 else 0.0
    return ratio, err


# ---- what the views show beyond the results (analysis.analyse computes it, render/ reads it) ----
@dataclass(frozen=True)
class Box:
    """The box of one build's runs on the distribution chart (the summary stores no quartiles)."""
    q1: float
    q3: float
    whisker_low: float  # the lowest run within 1.5 interquartile ranges below q1
    whisker_high: float  # the highest run within 1.5 interquartile ranges above q3


@dataclass(frozen=True)
class BuildScore:
    """One build's line of the scoreboard."""
    label: str
    baseline: bool
    counts: Mapping[Verdict, int]  # its contrasts' verdicts against the baseline (none for the baseline)
    geomean: float | None  # geometric mean of its time ratios to the baseline across steps; None if unknown
    vs_fastest: float | None  # that, relative to the fastest build's (1.00 = fastest)


@dataclass(frozen=True)
class SizeFit:
    """Least-squares time = overhead + slope · bytes over every run of one build at several sizes
    (bee-bench's latency-vs-size view); the fields are None with fewer than two sizes."""
    points: tuple[tuple[float, float], ...]  # (bytes, seconds) of every run
    overhead: float | None  # seconds a run takes whatever its size
    slope: float | None  # seconds per byte
    throughput: float | None  # bytes per second (1 / slope; None unless the slope is positive)
    r2: float | None  # share of the variance the line explains


@dataclass(frozen=True)
class SizeFamily:
    """One step run at two or more sizes of the same shape, with each build's fit."""
    step: str
    kind: str  # what the sizes share, e.g. "sparse, 1 file"
    scenarios: tuple[str, ...]
    sizes: tuple[int, ...]  # ascending
    builds: Mapping[str, SizeFit]  # label -> fit, in the run's build order


@dataclass(frozen=True)
class Analysis:
    """What the HTML report shows beyond the typed results, computed before it renders."""
    scores: tuple[BuildScore, ...]
    families: tuple[SizeFamily, ...]
    boxes: Mapping[tuple[str, str], Mapping[str, Box]]  # (scenario, step) -> label -> its runs' box
