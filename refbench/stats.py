"""From raw per-run times to a verdict.

- summary: mean ± σ, median, min, max, p95, cv
- hyperfine's phrase: "'B' ran 1.18 ± 0.23 times faster than 'A'" (same error propagation)
- the relative difference of means (contender / baseline − 1) with a 95% bootstrap interval
- Mann-Whitney U two-sided p-value
- verdict: slower / faster (significant AND beyond the threshold), no significant change
  (the interval sits inside ±threshold), inconclusive (too wide to tell), with the minimum
  detectable effect at the observed noise and the runs that would resolve the threshold.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy import stats as sps

SLOWER, FASTER, SAME, INCONCLUSIVE = "slower", "faster", "no significant change", "inconclusive"
VERDICTS = (SLOWER, FASTER, SAME, INCONCLUSIVE)
MARKERS = {SLOWER: "🔴", FASTER: "🟢", SAME: "⚪", INCONCLUSIVE: "🟡"}
POWER = 0.8


@dataclass(frozen=True)
class Settings:
    threshold: float = 0.05
    alpha: float = 0.05
    noise_limit: float = 0.10
    confidence: float = 0.95
    resamples: int = 4000


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


def summarize(times) -> Summary:
    a = np.asarray(times, dtype=float)
    if a.size == 0:
        raise ValueError("no samples")
    mean = float(a.mean())
    sd = float(a.std(ddof=1)) if a.size > 1 else 0.0
    return Summary(n=int(a.size), mean=mean, stddev=sd, median=float(np.median(a)), min=float(a.min()),
                   max=float(a.max()), p95=float(np.percentile(a, 95)), cv=(sd / mean if mean > 0 else 0.0))


@dataclass(frozen=True)
class Comparison:
    baseline: str
    contender: str
    ratio: float  # contender mean / baseline mean (> 1: contender slower)
    rel: float  # ratio − 1
    ci_low: float | None  # of rel
    ci_high: float | None
    p_value: float | None
    verdict: str
    noisy: bool
    mde: float | None  # smallest |rel| this run could detect (α, 80% power)
    runs_needed: int | None  # runs per build that would resolve ±threshold at this noise
    factor: float  # hyperfine: how many times faster the faster one ran
    factor_err: float
    faster: str  # label of the faster build
    slower_label: str
    p_raw: float | None = None  # the step's own p before the run-wide adjustment (p_value is adjusted)

    @property
    def marker(self) -> str:
        return MARKERS[self.verdict]

    def phrase(self, quote: str = "'") -> str:
        """hyperfine's wording, e.g. "'B' ran 1.18 ± 0.23 times faster than 'A'"."""
        return (f"{quote}{self.faster}{quote} ran {self.factor:.2f} ± {self.factor_err:.2f} "
                f"times faster than {quote}{self.slower_label}{quote}")

    def to_json(self) -> dict:
        d = asdict(self)
        d["phrase"] = self.phrase()
        return {k: (round(v, 9) if isinstance(v, float) else v) for k, v in d.items()}


def hyperfine_ratio(fast: Summary, slow: Summary) -> tuple[float, float]:
    """hyperfine's relative speed and its propagated standard error."""
    ratio = slow.mean / fast.mean
    err = ratio * math.sqrt((slow.stddev / slow.mean) ** 2 + (fast.stddev / fast.mean) ** 2) \
        if slow.mean > 0 and fast.mean > 0 else 0.0
    return ratio, err


def _z(p: float) -> float:
    return float(sps.norm.ppf(p))


def rel_interval(base, cont, confidence: float, resamples: int, seed: int = 0) -> tuple[float, float]:
    """Bootstrap (BCa, falling back to percentile) interval of mean(cont)/mean(base) − 1."""
    base = np.asarray(base, dtype=float)
    cont = np.asarray(cont, dtype=float)

    def stat(b, c, axis=-1):
        return np.mean(c, axis=axis) / np.mean(b, axis=axis) - 1.0

    rng = np.random.default_rng(seed)
    for method in ("BCa", "percentile"):
        try:
            res = sps.bootstrap((base, cont), stat, n_resamples=resamples, confidence_level=confidence,
                                method=method, vectorized=True, paired=False, random_state=rng)
            lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
            if math.isfinite(lo) and math.isfinite(hi):
                return lo, hi
        except Exception:  # degenerate samples (all equal) make BCa fail
            continue
    r = stat(base, cont)
    return float(r), float(r)


def compare(base_label: str, base_times, cont_label: str, cont_times, settings: Settings = Settings()) -> Comparison:
    b, c = summarize(base_times), summarize(cont_times)
    ratio = c.mean / b.mean if b.mean > 0 else float("inf")
    rel = ratio - 1.0
    if c.mean <= b.mean:
        factor, err = hyperfine_ratio(c, b)
        faster, slower_label = cont_label, base_label
    else:
        factor, err = hyperfine_ratio(b, c)
        faster, slower_label = base_label, cont_label
    noisy = max(b.cv, c.cv) > settings.noise_limit
    t = settings.threshold
    if b.n < 2 or c.n < 2:
        return Comparison(base_label, cont_label, ratio, rel, None, None, None, INCONCLUSIVE, noisy, None,
                          _runs_needed(b, c, settings), factor, err, faster, slower_label)
    lo, hi = rel_interval(base_times, cont_times, settings.confidence, settings.resamples)
    if b.stddev == 0 and c.stddev == 0:
        p = 1.0 if b.mean == c.mean else 0.0
    else:
        p = float(sps.mannwhitneyu(cont_times, base_times, alternative="two-sided").pvalue)
    verdict = decide(rel, lo, hi, p, settings)
    se = math.sqrt(b.cv ** 2 / b.n + c.cv ** 2 / c.n)
    mde = (_z(1 - settings.alpha / 2) + _z(POWER)) * se
    return Comparison(base_label, cont_label, ratio, rel, lo, hi, p, verdict, noisy, mde,
                      _runs_needed(b, c, settings), factor, err, faster, slower_label)


def decide(rel: float, lo: float, hi: float, p: float, settings: Settings) -> str:
    """slower/faster: significant (p < alpha, interval excludes 0) and beyond the threshold;
    no significant change: the interval inside ±threshold; otherwise inconclusive."""
    t = settings.threshold
    if p < settings.alpha and (lo > 0 or hi < 0) and abs(rel) > t:
        return SLOWER if rel > 0 else FASTER
    if -t < lo and hi < t:
        return SAME
    return INCONCLUSIVE


def adjust_family(comps: list[Comparison], settings: Settings = Settings()) -> list[Comparison]:
    """A run's verdict table is a family of tests: with one test per step at alpha, an A/A run of
    nine steps would call some step slower or faster one time in three. Benjamini-Hochberg across
    the run's comparisons keeps that at alpha when nothing changed (the A/A case, where false
    discovery rate and family-wise error coincide) and loses less power than Bonferroni-Holm
    when something did. p_value becomes the adjusted p; p_raw keeps the step's own."""
    idx = [i for i, c in enumerate(comps) if c.p_value is not None]
    if len(idx) < 2:
        return list(comps)
    from scipy.stats import false_discovery_control
    adjusted = false_discovery_control([comps[i].p_value for i in idx], method="bh")
    out = list(comps)
    for i, a in zip(idx, adjusted):
        c = comps[i]
        a = float(a)
        out[i] = replace(c, p_value=a, p_raw=c.p_value, verdict=decide(c.rel, c.ci_low, c.ci_high, a, settings))
    return out


def _runs_needed(b: Summary, c: Summary, settings: Settings) -> int | None:
    """Runs per build for a change of ±threshold to be detected (two-sample, α, 80% power)."""
    cv2 = (b.cv ** 2 + c.cv ** 2) / 2
    if cv2 == 0 or settings.threshold <= 0:
        return None
    z = _z(1 - settings.alpha / 2) + _z(POWER)
    return max(2, math.ceil(2 * z * z * cv2 / settings.threshold ** 2))


def geomean_scoreboard(ratios: dict[str, list[float]]) -> dict[str, dict]:
    """Per build: geometric mean of its time ratios to the baseline across steps, and relative
    to the fastest build (bee-bench's "1.00x = fastest")."""
    gm = {label: float(np.exp(np.mean(np.log(r)))) if r else float("nan") for label, r in ratios.items()}
    finite = [v for v in gm.values() if math.isfinite(v)]
    best = min(finite) if finite else float("nan")
    return {label: {"geomean_vs_baseline": round(v, 6), "vs_fastest": round(v / best, 6) if best else None}
            for label, v in gm.items()}
