"""From raw per-run times to the figures a verdict is decided from: estimates, intervals, p-values,
power. No verdict: judge alone turns these figures into one (judge.contrast, judge.decide).

- summary: mean ± σ, median, min, max, p95, cv; hyperfine's phrase "'B' ran 1.18 ± 0.23 times
  faster than 'A'" (same error propagation). Display data: the verdict does not use them.
- the effect: a Hodges–Lehmann-type shift of log times from the aligned-rank test within rounds
  (aligned_fit); `rel` = exp(shift) − 1 (contender / baseline − 1), its interval by inverting
  the test. With one run per build per round it is the signed-rank test on pairs, with one
  round (or no rounds given) the Mann–Whitney test.
- looks: Lan–DeMets alpha spending (O'Brien–Fleming by default, Pocock as an option), so the
  runner may look after every round and stop: the interval is then a repeated confidence
  interval and the p-value a repeated p-value, valid whenever sampling stops, so that
  Benjamini–Hochberg can still run across the run's steps at the end. One look at 1.0 is the
  fixed-size test exactly.
- no floor: a permutation test within rounds cannot give p below 2 / Π C(n + m, m) (3 rounds of
  2 + 2 runs: 0.0093), and the run's family may ask less of a member (memory beside wall and CPU:
  0.0044). Where the exact test cannot reach that level at this look, the blocked t-test on log
  values decides instead, with its own estimate and interval (shift_fit): the choice depends on
  the design, never on the data, so the false-alarm rate is each test's own
  (tests/test_stats_floor_sim.py: 1.6% of A/A contrasts at α 5% with drift, trend and outliers,
  4.9% without; +247% memory at 3 rounds of 2 + 2 decided in every simulated run).
- what a verdict is decided from (judge.decide, at every look): the interval against ±threshold
  (equivalence) and 0, and p against alpha; with the minimum detectable effect and the runs
  needed, from the robust noise the test sees.

Why (tests/test_stats_sim.py; 10 runs per build in 5 rounds, noise within a round lognormal,
a level per round with the same sd, a slow trend, 5% of runs ×1.5–3 slower): a mean ratio
with an unpaired interval carries drift and outliers into its width — with 8% outliers a
paired t-test on round means finds +10% at cv 4% a quarter of the time, the ranks 85%; under
drift of 2× the noise, ignoring rounds drops the power at +10% from 91% to 59%. Aligned ranks need no assumption on
the noise distribution (runs of a round are exchangeable between builds when nothing changed),
and the test at δ = 0 is counted exactly for up to 120 runs: per-step false alarms 3.9–5.0% at
alpha 5%. Power at +10% (1500 simulated runs each): 96% at cv 3%, 92% at 4%, 84% at 5%, 73%
at 6%, 52% at 8% (cv within a round); +5%: 76/53/39/29/20%; +20%: 98/98/97/95/90%. The default
run reaches 90% at +10% only up to a cv of about 4% within rounds: even a z-test on clean
normal data with known σ has 76% at 8%.

Limits: the test assumes runs of one round are exchangeable between builds when nothing
changed. What breaks that is a difference between the two builds' blocks of a round (hyperfine
runs A k times, then B k times): a trend within the round, or a disturbance lasting several
runs. Alternating rounds (ABBA) cancel a linear trend on average; with one round
(--rounds 1) nothing does, and a trend of one noise sd across the run made 15% of A/A runs
"significant" in simulation. More, shorter rounds are the cure, not a statistic.
"""
from __future__ import annotations

import itertools
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from scipy.interpolate import PchipInterpolator

# the plain records live in figures.py (results.py reads them without numpy); deciding a verdict
# from the figures computed here, and adjusting a family of them, is judge.py's, which imports this
from .figures import IDENTICAL_RUNS, Contrast, Criteria, Summary, hyperfine_ratio, summarize
from .metrics import table
from .verdict import WALL_SHARE

SPENDINGS = ("obrien-fleming", "pocock")
# Pitman efficiency of the Wilcoxon/HL estimate against the mean on normal data is 3/π: the
# standard error of the shift is sqrt(π/3) · σ / sqrt(S), S = Σ_rounds n m / (n + m + 1).
_HL_SE = math.sqrt(math.pi / 3)
_SQRT2PI = math.sqrt(2 * math.pi)


# scipy is imported where a function first needs it, not with this module: scipy.stats,
# .interpolate, .signal and .special were 0.65 s of the 1.05 s every `refbench` process took to
# start (--help and a refused flag included; the test suite starts hundreds of them)
def _sps():
    from scipy import stats
    return stats


def ndtr(x):
    """scipy.special.ndtr, Φ(x): on its first call this name becomes the ufunc itself (the boundary
    solver calls it thousands of times a look)."""
    global ndtr
    from scipy.special import ndtr
    return ndtr(x)


def ndtri(p):
    """scipy.special.ndtri, Φ⁻¹(p): on its first call this name becomes the ufunc itself."""
    global ndtri
    from scipy.special import ndtri
    return ndtri(p)


# median |x − y| of two draws of N(0, σ²) is 0.6745 · √2 · σ (Φ⁻¹(0.75) = 0.6744897501960817, as
# scipy.stats.norm.ppf and scipy.special.ndtri give it, written out so that importing needs no scipy)
_PAIR_MEDIAN = 0.6744897501960817 * math.sqrt(2)


def _z(p: float) -> float:
    return float(ndtri(p))


# ---- the within-round rank test --------------------------------------------------------------

def _log(times) -> np.ndarray:
    a = np.asarray(times, dtype=float)
    return np.log(np.maximum(a, 1e-300))


def _cells(logs: np.ndarray, rounds) -> dict:
    if rounds is None:
        return {0: logs}
    r = np.asarray(rounds)
    if r.shape != logs.shape:
        raise ValueError("rounds must give one round index per sample")
    return {k: logs[r == k] for k in dict.fromkeys(r.tolist())}


def _strata(x: np.ndarray, xr, y: np.ndarray, yr) -> list[tuple[np.ndarray, np.ndarray]]:
    """(baseline, contender) log times per round that holds both; one stratum without rounds
    (or when no round holds both builds)."""
    if xr is not None and yr is not None:
        cx, cy = _cells(x, xr), _cells(y, yr)
        strata = [(cx[k], cy[k]) for k in cx if k in cy]
        if strata:
            return strata
    return [(x, y)]


def _midranks(e: np.ndarray) -> np.ndarray:
    """Mid-ranks along the last axis (ties share their mean rank), as scipy's rankdata gives them,
    for every row at once: rankdata takes one row per call, and it was a third of the simulations'
    time (tests/test_stats_metrics_sim.py). Mid-ranks are half-integers, exact in floating point, so
    the two agree to the bit; a row holding NaN is left to rankdata (it propagates NaN)."""
    k = e.shape[-1]
    flat = e.reshape(-1, k)
    nan = np.isnan(flat).any(axis=1)
    order = np.argsort(flat, axis=1, kind="stable")
    v = np.take_along_axis(flat, order, axis=1)
    pos = np.arange(k)
    new = np.ones(v.shape, dtype=bool)
    new[:, 1:] = v[:, 1:] != v[:, :-1]  # a tie group starts here
    last = np.ones(v.shape, dtype=bool)
    last[:, :-1] = new[:, 1:]  # ... and ends here
    start = np.maximum.accumulate(np.where(new, pos, 0), axis=1)
    end = np.minimum.accumulate(np.where(last, pos, k - 1)[:, ::-1], axis=1)[:, ::-1]
    r = np.empty(flat.shape)
    np.put_along_axis(r, order, (start + end) / 2 + 1, axis=1)
    if nan.any():
        r[nan] = _sps().rankdata(flat[nan], axis=-1)
    return r.reshape(e.shape)


def _ranks(e: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Ranks along the last axis of aligned values (all ≥ 0; each round's fastest run is 0).
    The zeros tie by construction and share their mean rank; rows flagged in exact (data sets
    with repeated times, where other ties are possible) get mid-ranks throughout.
    The ordinal ranks are argsort's inverse permutation, written in place of a second argsort."""
    k = e.shape[-1]
    r = np.empty(e.shape)
    np.put_along_axis(r, np.argsort(e, axis=-1), np.arange(1.0, k + 1), axis=-1)
    zero = e == 0
    r = np.where(zero, (zero.sum(axis=-1, keepdims=True) + 1) / 2, r)
    if exact.any():
        r[exact] = _midranks(e[exact])
    return r


def _groups(strata: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Rounds of equal run counts stacked: (x (B, G, n), y (B, G, m)) per distinct (n, m)."""
    by: dict[tuple[int, int], list] = {}
    for x, y in strata:
        by.setdefault((x.shape[1], y.shape[1]), []).append((x, y))
    return [(np.stack([x for x, _ in g], axis=1), np.stack([y for _, y in g], axis=1)) for g in by.values()]


def _aligned_z(groups: list[tuple[np.ndarray, np.ndarray]], delta: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Standardized aligned-rank statistic of contender − delta vs baseline.

    groups: rounds stacked by run counts (see _groups), log times of B data sets; delta (B, D);
    exact (B,): data sets that need full tie handling (see _ranks).
    Returns Z (B, D): > 0 when the contender (shifted back by delta) still ranks high."""
    bn, dn = delta.shape
    parts = []
    for x, y in groups:
        n = x.shape[2]
        v = np.empty((bn, dn, x.shape[1], n + y.shape[2]))
        v[..., :n] = x[:, None]
        v[..., n:] = y[:, None] - delta[:, :, None, None]
        v -= v.min(axis=3, keepdims=True)
        parts.append(v)
    flat = parts[0].reshape(bn, dn, -1) if len(parts) == 1 else \
        np.concatenate([p.reshape(bn, dn, -1) for p in parts], axis=2)
    r = _ranks(flat, exact)
    num = np.zeros((bn, dn))
    var = np.zeros((bn, dn))
    off = 0
    for x, y in groups:
        g, n, m = x.shape[1], x.shape[2], y.shape[2]
        big = n + m
        rr = r[:, :, off:off + g * big].reshape(bn, dn, g, big)
        off += g * big
        rbar = rr.mean(axis=3)
        num += (rr[..., n:].sum(axis=3) - m * rbar).sum(axis=2)
        var += (n * m / (big * (big - 1)) * ((rr - rbar[..., None]) ** 2).sum(axis=3)).sum(axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(var > 0, num / np.sqrt(np.maximum(var, 1e-300)), 0.0)


@dataclass(frozen=True)
class RankFit:
    """The aligned-rank fit of B data sets (arrays of shape (B,)); log scale."""
    shift: np.ndarray  # Hodges–Lehmann-type estimate: where Z(δ) crosses 0
    low: np.ndarray  # interval {δ : |Z(δ)| < crit}; −inf / +inf when the data cannot bound it
    high: np.ndarray
    z: np.ndarray  # the test of δ = 0 as a normal z (exact where countable, see exact_z)
    s_eff: float  # Σ_rounds n m / (n + m + 1): the effective size the standard error scales with
    rounds: int


@lru_cache(maxsize=64)
def _subsets(n: int, m: int) -> np.ndarray | None:
    if math.comb(n, m) > 20000:
        return None
    return np.array(list(itertools.combinations(range(n), m)), dtype=int).reshape(-1, m)


def _sum_dp(q: np.ndarray, m: int) -> np.ndarray:
    """Probability of each sum of m of the integers q chosen at random (all subsets alike), by
    dynamic programming over the values: for rounds with too many subsets to list (_subsets)."""
    top = int(np.sort(q)[::-1][:m].sum())
    dp = np.zeros((m + 1, top + 1))
    dp[0, 0] = 1.0
    for v in q.astype(int):
        new = dp.copy()
        new[1:, v:] += dp[:-1, :top + 1 - v]
        dp = new
    return dp[m] / dp[m].sum()


def _sum_parts(q: np.ndarray, m: int) -> list[np.ndarray]:
    """For each row of q (B, n + m: a round's doubled mid-ranks in B data sets), the probability of
    each sum of m of them chosen at random (all subsets alike). Listed subsets are counted for all
    rows at once; each row's array ends at its largest sum, as np.bincount of that row alone does."""
    idx = _subsets(q.shape[1], m)
    if idx is None:
        return [_sum_dp(row, m) for row in q]
    sums = q[:, idx].sum(axis=2)  # (B, subsets)
    width = int(sums.max()) + 1
    counts = np.bincount((sums + width * np.arange(len(q))[:, None]).ravel(),
                         minlength=width * len(q)).reshape(len(q), width).astype(float)
    ends = sums.max(axis=1) + 1
    return [c[:e] / c[:e].sum() for c, e in zip(counts, ends)]


_EXACT_RUNS = 120  # runs of both builds; beyond, the normal approximation is close and counting slow


def exact_zs(strata: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray | None:
    """The aligned-rank test at δ = 0 by its exact permutation distribution, for B data sets
    (strata of arrays (B, n) and (B, m)): rounds are independent, so the contender's rank sum is a
    convolution over rounds of the sum of m_r of the round's ranks. Returned as the
    normal-equivalent z, sign(T − E)·Φ⁻¹(1 − p/2), p = P(|T − E| ≥ |t − E|): the normal
    approximation's tail is too thin for a few rounds (a look after round 3 of 2 + 2 runs has 216
    arrangements; OBF's boundary there asks for 1 in 10⁴), and with 1 round of 10 + 10 runs it calls
    5.3% at alpha 5%. None when there are too many runs to count quickly (the normal approximation
    is good there). The ranks, rank sums and subset counts are taken for all data sets at once, the
    convolutions one data set at a time, in the order they always were (the same floating point)."""
    if sum(x.shape[1] + y.shape[1] for x, y in strata) > _EXACT_RUNS or \
            max(x.shape[1] + y.shape[1] for x, y in strata) > 40:
        return None
    e = []
    for x, y in strata:
        v = np.concatenate([x, y], axis=1)
        e.append(v - v.min(axis=1, keepdims=True))
    q = np.rint(2 * _midranks(np.concatenate(e, axis=1))).astype(int)  # doubled mid-ranks: integers
    bn = q.shape[0]
    t = np.zeros(bn)
    mean = np.zeros(bn)
    parts = []
    off = 0
    for x, y in strata:
        n, m = x.shape[1], y.shape[1]
        qr = q[:, off:off + n + m]
        off += n + m
        t += qr[:, n:].sum(axis=1)
        mean += m * qr.mean(axis=1)
        parts.append(_sum_parts(qr, m))
    out = np.empty(bn)
    from scipy.signal import fftconvolve
    for b in range(bn):
        dist = np.ones(1)
        for part in parts:
            p_ = part[b]
            dist = np.convolve(dist, p_) if dist.size * p_.size < 3_000_000 else \
                np.maximum(fftconvolve(dist, p_), 0.0)
        dist /= dist.sum()
        dev = np.abs(np.arange(dist.size) - mean[b])
        p = min(1.0, float(dist[dev >= abs(t[b] - mean[b]) - 1e-7].sum()))
        out[b] = 0.0 if p >= 1.0 else math.copysign(float(-ndtri(max(p, 1e-300) / 2)), t[b] - mean[b])
    return out


def exact_z(strata: list[tuple[np.ndarray, np.ndarray]]) -> float | None:
    """exact_zs of one data set (strata of 1-D arrays)."""
    z = exact_zs([(x[None, :], y[None, :]) for x, y in strata])
    return None if z is None else float(z[0])


def aligned_fit(strata: list[tuple[np.ndarray, np.ndarray]], crit: float, steps: int = 8,
                points: int = 8, exact_test: bool = True) -> RankFit:
    """Hodges–Lehmann aligned-rank test, estimate and interval, within rounds.

    Each round's runs (baseline and contender − δ together) are aligned by subtracting the
    fastest of them, which removes the round's level: drift between rounds cancels. The fastest
    run, not the median: timing outliers are slow ones, and with 2 + 2 runs a round's median
    moves with two of them (in simulation, 5% of runs ×1.5–3: +20% found 97% of the time
    against 94% for median alignment). The aligned values of all rounds are ranked together, so
    runs are compared across rounds once aligned, and a run 3× slower is only the highest rank.
    Against van Elteren's stratified Wilcoxon (runs compared within rounds only) the power is the
    same, but with rounds of 2 + 2 runs van Elteren's statistic takes so few values that its
    normal approximation calls 5.5–5.7% false alarms at alpha 5%; aligned ranks stay under 5%. Under "no change", the runs of one round are
    exchangeable between builds; conditionally on the aligned values, the contender's rank sum
    then has a known mean and variance (permutations within rounds), whatever the noise
    distribution: Z is referred to the normal. With one run per build per round this is the
    signed-rank test; with one round, the Mann–Whitney test.

    The estimate is where Z(δ) crosses 0, the interval the δ with |Z(δ)| < crit: Z is
    non-increasing in δ (the contender's aligned values fall, the baseline's rise), found by a
    vectorised search (points^steps cells across at most 4× the data's span)."""
    bn = strata[0][0].shape[0]
    allv = np.concatenate([np.concatenate([x, y], axis=1) for x, y in strata], axis=1)
    xs = np.concatenate([x for x, _ in strata], axis=1)
    ys = np.concatenate([y for _, y in strata], axis=1)
    span = allv.max(axis=1) - allv.min(axis=1)
    # beyond these every aligned contender run sits above (below) every aligned baseline run
    # and Z no longer changes
    lo0 = ys.min(axis=1) - xs.max(axis=1) - span - 1e-9
    hi0 = ys.max(axis=1) - xs.min(axis=1) + span + 1e-9
    srt = np.sort(allv, axis=1)
    exact = (np.diff(srt, axis=1) == 0).any(axis=1)  # repeated times: ties beyond the aligned zeros
    z0 = _aligned_z(_groups(strata), np.zeros((bn, 1)), exact)[:, 0]
    # the four boundaries, searched together: sup{Z > 0}, sup{Z ≥ 0}, sup{Z ≥ c}, sup{Z > −c},
    # as each row held against its bound, strict or not, at once
    bound = np.repeat([0.0, 0.0, crit, -crit], bn)[:, None]
    strict = np.repeat([True, False, False, True], bn)[:, None]
    big = _groups([(np.tile(x, (4, 1)), np.tile(y, (4, 1))) for x, y in strata])
    lo = np.tile(lo0, 4)
    hi = np.tile(hi0, 4)
    grid_u = np.linspace(0.0, 1.0, points)

    def test(z):
        return np.where(strict, z > bound, z >= bound)

    ex4 = np.tile(exact, 4)
    ends = test(_aligned_z(big, np.stack([lo, hi], axis=1), ex4))
    lo_open, hi_closed = ~ends[:, 0], ends[:, 1]  # the set is empty / unbounded above
    rows = np.arange(lo.size)
    for _ in range(steps):
        grid = lo[:, None] + (hi - lo)[:, None] * grid_u[None, :]
        ok = test(_aligned_z(big, grid, ex4))
        ok[:, 0] = True
        first_false = np.where(ok.all(axis=1), points - 1, np.argmax(~ok, axis=1))
        lo, hi = grid[rows, np.maximum(first_false - 1, 0)], grid[rows, first_false]
    root = 0.5 * (lo + hi)
    root = np.where(lo_open, -np.inf, np.where(hi_closed, np.inf, root))
    r = root.reshape(4, bn)
    shift = 0.5 * (r[0] + r[1])
    lo_ci = np.where(lo_open[2 * bn:3 * bn], -np.inf, r[2])
    hi_ci = np.where(hi_closed[3 * bn:], np.inf, r[3])
    s_eff = sum(x.shape[1] * y.shape[1] / (x.shape[1] + y.shape[1] + 1) for x, y in strata)
    if exact_test:  # the test at δ = 0 by its exact distribution where it can be counted
        ze = exact_zs(strata)
        if ze is not None:
            z0 = ze
    return RankFit(shift, lo_ci, hi_ci, z0, float(s_eff), len(strata))


# ---- no floor under a clear change: the blocked t-test where the exact test cannot reach ------

def exact_floor(sizes) -> float:
    """The smallest two-sided p that any test permuting runs within rounds can give, for rounds of
    these (baseline runs, contender runs): its two most extreme of the Π C(n + m, m) equally likely
    arrangements. 3 rounds of 2 + 2 runs: 2/216 = 0.0093, whatever the data; 1 round of 1 + 1: 1.
    A permutation test's p never goes below it, however clear the change."""
    arrangements = math.prod(math.comb(n + m, m) for n, m in sizes)
    return min(1.0, 2.0 / arrangements)


def member_level(criteria: Criteria, metric: str, family_size: int) -> float:
    """The smallest level the run's weighted Benjamini–Hochberg can ask of one member: alpha · w / N
    (the first of its steps), w the least weight the member's metric gets in any family
    (metric_weights: wall 1 when it is alone, more beside other metrics; another metric at least
    (1 − WALL_SHARE) · M / (M − 1) with all M metrics of the client's family in metrics.table()).
    A p below it survives the adjustment whatever the other members' p-values are."""
    m = sum(1 for x in table() if x.family == "client")
    weight = 1.0 if metric == "wall" else (1 - WALL_SHARE) * m / (m - 1)
    return criteria.alpha * weight / max(1, family_size)


def exact_reaches(sizes, looks: tuple[float, ...], spending: str, level: float,
                  spend: tuple[float, ...] | None = None) -> bool:
    """Whether the exact test can reach `level` at this design and look: its floor, read as the
    repeated p of the look (alpha spending asks more of early looks). Beyond _EXACT_RUNS the test
    is the normal approximation, whose p has no floor."""
    if sum(n + m for n, m in sizes) > _EXACT_RUNS:
        return True
    top = -ndtri(exact_floor(sizes) / 2)
    return repeated_p(top, looks, spending, spend) <= level


@dataclass(frozen=True)
class TFit:
    """The blocked t-test of B data sets (arrays of shape (B,)), log scale."""
    shift: np.ndarray  # the least-squares shift: per-round mean differences, weighted n m / (n + m)
    se: np.ndarray  # its standard error
    df: int  # residual degrees of freedom: runs − rounds − 1


def blocked_t(strata: list[tuple[np.ndarray, np.ndarray]]) -> TFit:
    """The t-test of the additive model log value = round level + build shift + noise (two-way
    ANOVA without interaction): each round's level cancels, as it does for the rank test, so drift
    between rounds does not count. With one round it is the pooled two-sample t-test, with one
    run per build per round the paired t-test. Its p has no floor: a change many times the noise
    gives a p as small as that says. It assumes normal noise on the log scale with one variance;
    a slow outlier inflates that variance, which costs power, not false alarms (simulated in
    tests/test_stats_floor_sim.py)."""
    w = np.array([x.shape[1] * y.shape[1] / (x.shape[1] + y.shape[1]) for x, y in strata])
    d = np.stack([y.mean(axis=1) - x.mean(axis=1) for x, y in strata], axis=1)  # (B, R)
    shift = (d * w).sum(axis=1) / w.sum()
    within = sum(((v - v.mean(axis=1, keepdims=True)) ** 2).sum(axis=1) for x, y in strata for v in (x, y))
    between = (w * (d - shift[:, None]) ** 2).sum(axis=1)  # the rounds' differences around the shift
    df = sum(x.shape[1] + y.shape[1] for x, y in strata) - len(strata) - 1
    var = (within + between) / df if df >= 1 else np.full(shift.shape, np.nan)
    return TFit(shift, np.sqrt(np.maximum(var, 0.0) / w.sum()), df)


@dataclass(frozen=True)
class ShiftFit:
    """The test, estimate and interval of one design for B data sets (log scale): the exact rank
    test's (aligned_fit) where it can reach the level the run asks, else the blocked t-test's."""
    shift: np.ndarray
    low: np.ndarray
    high: np.ndarray
    z: np.ndarray
    s_eff: float
    method: str


def shift_fit(strata: list[tuple[np.ndarray, np.ndarray]], looks: tuple[float, ...], criteria: Criteria,
              level: float, spend: tuple[float, ...] | None = None) -> ShiftFit:
    """The shift's test and interval for B data sets of one design (strata as aligned_fit takes
    them). The aligned-rank test by its exact distribution where that can reach `level`
    (member_level: what the run's family asks of this member) at this look; where it cannot (its
    floor: 3 rounds of 2 + 2 runs never give p below 0.0093, and Benjamini–Hochberg over three
    metrics asks 0.0044 of memory), the blocked t-test on log values, with its own estimate and
    interval. The choice depends on the design, the look and the family alone, never on the data,
    so each design's false-alarm rate is its test's. With no residual degrees of freedom (1 + 1
    runs in one round) the rank test stays: nothing can be decided there (see reachable). spend:
    the looks' alpha-spending times where they differ from their information (sequential_bounds)."""
    crit = _crit(looks, 1 - criteria.confidence, criteria.spending, spend)
    sizes = [(x.shape[1], y.shape[1]) for x, y in strata]
    s_eff = sum(n * m / (n + m + 1) for n, m in sizes)
    t = None if exact_reaches(sizes, looks, criteria.spending, level, spend) else blocked_t(strata)
    if t is None or t.df < 1:
        fit = aligned_fit(strata, crit)
        return ShiftFit(fit.shift, fit.low, fit.high, fit.z, fit.s_eff,
                        _method(sizes, ("Mann-Whitney", "signed-rank", "aligned ranks")))
    with np.errstate(divide="ignore", invalid="ignore"):  # no noise at all: the shift is exact
        tstat = np.where(t.se > 0, t.shift / t.se, np.where(t.shift == 0, 0.0, np.sign(t.shift) * np.inf))
    # the t's tail as a normal z, so looks, repeated p-values and the family read it as the rank test's
    z = np.sign(tstat) * np.minimum(-ndtri(np.minimum(1.0, _sps().t.sf(np.abs(tstat), t.df))), _Z_CAP)
    # the interval at the rank interval's level; a look that may spend no alpha (a fraction of a
    # percent) has no bound at all, not inf x a zero se
    half = float(_sps().t.isf(ndtr(-crit), t.df)) * t.se if math.isfinite(crit) else np.full(t.se.shape, np.inf)
    low, high = t.shift - half, t.shift + half
    # an end beyond e^±_LOG_END (an early look's boundary asks for a t of thousands) is no bound
    return ShiftFit(t.shift, np.where(low < -_LOG_END, -np.inf, low), np.where(high > _LOG_END, np.inf, high), z,
                    s_eff, _method(sizes, ("t on log values", "paired t on log values", "blocked t on log values")))


def _method(sizes, names: tuple[str, str, str]) -> str:
    """The test's name for this design: (one round, one run per build per round, otherwise)."""
    if len(sizes) == 1:
        return names[0]
    return f"{names[1] if all(n == 1 and m == 1 for n, m in sizes) else names[2]}, {len(sizes)} rounds"


_Z_CAP = 38.0  # |z| beyond which Φ(−z) underflows: a zero-noise change is this far from nothing
_LOG_END = 50.0


def reachable(sizes, criteria: Criteria, level: float | None = None) -> bool:
    """Whether a design (rounds of (baseline runs, contender runs)) can reach a verdict at all:
    the exact test reaches the level, or the blocked t-test has a residual degree of freedom.
    1 round of 1 + 1 runs cannot: two arrangements, and nothing left to estimate the noise from."""
    level = criteria.alpha if level is None else level
    df = sum(n + m for n, m in sizes) - len(sizes) - 1
    return bool(sizes) and (df >= 1 or exact_floor(sizes) <= level)


@lru_cache(maxsize=256)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The (i, j), i < j, of n items, as np.triu_indices(n, 1) gives them: asked once per size, it
    was a tenth of a budgeted step's simulated time (every look computes the noise twice)."""
    i, j = np.triu_indices(n, 1)
    i.flags.writeable = j.flags.writeable = False  # shared by every caller
    return i, j


def _shamos(cells: list[np.ndarray]) -> float | None:
    """σ from the median |difference| of all pairs within a cell, pooled over cells: robust
    (an outlier spoils only its own pairs) and blind to level shifts between cells."""
    diffs = [np.abs(c[:, None] - c[None, :])[_pairs(len(c))] for c in cells if len(c) > 1]
    if not diffs:
        return None
    return float(np.median(np.concatenate(diffs))) / _PAIR_MEDIAN


def robust_noise(times, rounds=None) -> float:
    """Robust noise of one build's runs: σ of log times (≈ cv for small cv) from the median
    absolute difference of pairs of runs within the same round, so drift between rounds and
    outliers do not count. With one run per round (or one run), pairs across all runs."""
    logs = _log(times)
    if logs.size < 2:
        return 0.0
    s = _shamos(list(_cells(logs, rounds).values()))
    if s is None:
        s = _shamos([logs])
    return float(s)


def pair_noise(base_times, base_rounds, cont_times, cont_rounds) -> float | None:
    """The noise a contrast of these two builds' runs sees (Contrast.noise), without the test:
    what the budget plans a step's most runs from (refbench.stopping)."""
    if not len(base_times) or not len(cont_times):
        return None
    if (base_rounds is None) != (cont_rounds is None):
        base_rounds = cont_rounds = None
    return _noise(_log(base_times), base_rounds, _log(cont_times), cont_rounds)


def _noise(x: np.ndarray, xr, y: np.ndarray, yr) -> float | None:
    """Robust σ of log times within rounds, pooled over both builds. When every round holds one
    run per build, from the per-round differences (round effects cancel; each has variance 2σ²)."""
    cells = list(_cells(x, xr).values()) + list(_cells(y, yr).values()) if xr is not None and yr is not None \
        else [x, y]
    s = _shamos(cells)
    if s is None:
        strata = _strata(x, xr, y, yr)
        diff = np.array([b.mean() - a.mean() for a, b in strata])
        s2 = _shamos([diff])
        s = None if s2 is None else s2 / math.sqrt(2)
    return s


# ---- group-sequential boundaries ------------------------------------------------------------

def _spent(t: np.ndarray, alpha: np.ndarray, spending: str) -> np.ndarray:
    """Lan–DeMets cumulative two-sided alpha spent by information fraction t (capped at 1)."""
    t = np.minimum(np.asarray(t, float), 1.0)
    alpha = np.asarray(alpha, float)[:, None]
    if spending == "obrien-fleming":
        za = -ndtri(alpha / 4)
        with np.errstate(divide="ignore"):
            return np.where(t > 0, 4 * ndtr(-za / np.sqrt(np.maximum(t, 1e-300))), 0.0)
    if spending == "pocock":
        return alpha * np.log1p((math.e - 1) * t)
    raise ValueError(f"unknown alpha spending {spending!r}: one of {', '.join(SPENDINGS)}")


_GRID_HALF, _GRID_STEP, _GRID_MIN, _GRID_MAX = 7.0, 3.0, 41, 401


def _grid_size(half: float, dt: float) -> int:
    """Odd number of Simpson points over [−half, half]: spacing at most sd/_GRID_STEP of the
    next increment (the kernel's width), within [_GRID_MIN, _GRID_MAX]."""
    g = 2 * math.ceil(half / (math.sqrt(max(dt, 1e-12)) / _GRID_STEP) / 2) + 1
    return int(min(_GRID_MAX, max(_GRID_MIN, g)))


def _simpson(g: int) -> np.ndarray:
    w = np.ones(g)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return w / 3.0


@dataclass(frozen=True)
class _Look:
    """What _bounds knows once a look is solved, for the looks after it: the boundaries so far
    (A, looks), this look's boundary on the score scale, and where its sub-density comes from:
    None at the first look (a normal), else the previous look's grid, its mass and the increment."""
    bounds: np.ndarray
    b: np.ndarray
    source: tuple[np.ndarray, np.ndarray, float] | None


# A sequential step asks again at every look with one look more and the earlier fractions as they
# were: the solved looks are kept by prefix, so each call solves its new looks only (the same
# operations in the same order: the same floats as solving from the first look).
_LOOKS: OrderedDict = OrderedDict()
_LOOKS_MAX = 128
_LOOKS_LOCK = threading.Lock()


def _looks_get(key):
    with _LOOKS_LOCK:
        hit = _LOOKS.get(key)
        if hit is not None:
            _LOOKS.move_to_end(key)
        return hit


def _looks_put(key, look: _Look) -> None:
    for a in (look.bounds, look.b, *(look.source[:2] if look.source else ())):
        a.flags.writeable = False  # shared between calls
    with _LOOKS_LOCK:
        _LOOKS[key] = look
        _LOOKS.move_to_end(key)
        while len(_LOOKS) > _LOOKS_MAX:
            _LOOKS.popitem(last=False)


def _solve_look(prev: _Look, t: np.ndarray, k: int, inc_k: np.ndarray) -> _Look:
    """Look k from look k − 1: lay look k − 1's sub-density on a grid inside its boundary (spacing
    from this increment), then solve this look's boundary for the alpha it releases."""
    half = np.minimum(prev.b, _GRID_HALF * math.sqrt(t[k - 1]))
    g = _grid_size(float(np.max(half)), t[k] - t[k - 1])
    u = np.linspace(-1, 1, g)
    s = half[:, None] * u[None, :]
    if prev.source is None:  # S_1 ~ N(0, t_1)
        f = np.exp(-s * s / (2 * t[0])) / math.sqrt(2 * math.pi * t[0])
    else:  # carried from the grid before, through its N(0, dt) increment
        s_prev, mass_prev, dt_prev = prev.source
        kern = np.exp(-((s[:, :, None] - s_prev[:, None, :]) ** 2) / (2 * dt_prev)) / math.sqrt(2 * math.pi * dt_prev)
        f = np.einsum("agh,ah->ag", kern, mass_prev)
    wts = _simpson(g)[None, :] * (2 * half / (g - 1))[:, None]
    dt = t[k] - t[k - 1]
    sd = math.sqrt(dt)
    mass = wts * f  # (A, G): probability mass of each grid point still running
    bk = np.full(len(inc_k), np.inf)
    live = inc_k > 1e-15
    if np.any(live):
        target = inc_k[live]
        m, sl = mass[live], s[live]
        lo_b = np.zeros(target.size)
        hi_b = np.full(target.size, 40.0)
        # start: the boundary if nothing had stopped before (a little too high)
        x = np.minimum(-ndtri(np.clip(target, 1e-300, 1) / 2), 30.0) * math.sqrt(t[k])
        for _ in range(50):
            a1, a2 = (-x[:, None] - sl) / sd, (x[:, None] - sl) / sd
            err = (m * (ndtr(a1) + ndtr(-a2))).sum(1) - target
            dens = (m * (np.exp(-a1 * a1 / 2) + np.exp(-a2 * a2 / 2))).sum(1) / (sd * _SQRT2PI)
            lo_b = np.where(err > 0, x, lo_b)  # crossing too likely: the boundary must go up
            hi_b = np.where(err <= 0, x, hi_b)
            nx = x + err / np.maximum(dens, 1e-300)
            # inside the bracket or on its end: a root reached exactly steps by nothing (err's sign
            # made x an end), and halving from there again took up to 20 more rounds, ending 1e-8 off
            nx = np.where((nx >= lo_b) & (nx <= hi_b), nx, 0.5 * (lo_b + hi_b))
            done = np.abs(nx - x) < 1e-8
            x = nx
            if done.all():
                break
        bk[live] = x
    bounds = np.concatenate([prev.bounds, (bk / math.sqrt(t[k]))[:, None]], axis=1)
    return _Look(bounds, bk, (s, mass, dt))


def _bounds(fractions: tuple[float, ...], alphas: np.ndarray, spending: str,
            spend: tuple[float, ...] | None = None) -> np.ndarray:
    """Two-sided critical |z| per look (columns) for each total alpha (rows).

    Armitage–McPherson–Rowe recursion on the score scale S_k = Z_k·sqrt(t_k), a Brownian motion
    with independent N(0, Δt) increments under the null: the sub-density of S_k on the region
    not yet stopped is carried on a Simpson grid from look to look; at each look the boundary
    is solved (Newton, bracketed) so that the probability of first crossing there equals the
    alpha the spending function releases there. `spend`: the spending time of every look where
    it is not its information fraction (a step whose most runs grew after a look keeps the alpha
    that look spent: Lan & DeMets' calendar-time use, gsDesign's usTime); non-decreasing, and a
    look that releases no alpha has no boundary (inf). Looks solved before with the same earlier
    fractions, spending times and alphas are taken from _LOOKS."""
    t = np.asarray(fractions, float)
    if t.ndim != 1 or t.size == 0 or np.any(t <= 0) or np.any(np.diff(t) <= 0):
        raise ValueError("information fractions must be positive and increasing")
    st = t if spend is None else np.asarray(spend, float)
    if st.shape != t.shape or np.any(st < 0) or np.any(np.diff(st) < 0):
        raise ValueError("spending times must be one per look, non-negative and non-decreasing")
    alphas = np.asarray(alphas, float)
    a_n, k_n = len(alphas), t.size
    cum = _spent(st, alphas, spending)
    inc = np.diff(np.concatenate([np.zeros((a_n, 1)), cum], axis=1), axis=1)
    tk, sk, ak = tuple(t.tolist()), tuple(st.tolist()), (alphas.tobytes(), spending)

    def key(n):
        return ak, tk[:n], sk[:n]

    done, look = 0, None
    for n in range(k_n, 0, -1):
        look = _looks_get(key(n))
        if look is not None:
            done = n
            break
    if look is None:
        with np.errstate(divide="ignore"):
            first = np.where(inc[:, 0] > 0, -ndtri(np.clip(inc[:, 0], 1e-300, 1) / 2), np.inf)
        look, done = _Look(first[:, None], first * math.sqrt(t[0]), None), 1
        _looks_put(key(1), look)
    for k in range(done, k_n):
        look = _solve_look(look, t, k, inc[:, k])
        _looks_put(key(k + 1), look)
    return np.array(look.bounds)


@lru_cache(maxsize=256)
def _bounds_cached(fractions: tuple[float, ...], alpha: float, spending: str,
                   spend: tuple[float, ...] | None = None) -> tuple[float, ...]:
    return tuple(float(v) for v in _bounds(fractions, np.array([alpha]), spending, spend)[0])


def _spend_key(fractions: tuple[float, ...], spend) -> tuple[float, ...] | None:
    """The spending times as a cache key: None where they are the information fractions."""
    st = None if spend is None else tuple(float(v) for v in spend)
    return None if st == fractions else st


def sequential_bounds(fractions, alpha: float, spending: str = "obrien-fleming", spend=None) -> list[float]:
    """Two-sided critical |z| at each look for Lan–DeMets alpha spending, α/2 per side as in
    gsDesign / rpact ("obrien-fleming": each side spends 2 − 2Φ(z_{1−α/4}/√t), nearly nothing
    early, almost the fixed-size test at the end — 5 equal looks: 4.877 3.357 2.680 2.290 2.031;
    "pocock": α(t) = α·ln(1 + (e − 1)t), even boundaries). Fractions: information at each look,
    increasing, the last usually 1; a single look at 1.0 gives z_{1−α/2}, the fixed-size test.
    spend: each look's spending time where it differs from its fraction (_bounds)."""
    fr = tuple(float(f) for f in fractions)
    return list(_bounds_cached(fr, float(alpha), spending, _spend_key(fr, spend)))


_P_GRID = np.concatenate([np.logspace(-10, -1, 28), np.linspace(0.15, 0.95, 9)])


@lru_cache(maxsize=256)
def _p_table(fractions: tuple[float, ...], spending: str,
             spend: tuple[float, ...] | None = None) -> tuple[float, float, PchipInterpolator | None]:
    """log alpha as a function of the last look's boundary, from boundaries on a grid of alphas:
    (smallest boundary, largest boundary, interpolator)."""
    from scipy.interpolate import PchipInterpolator
    c = _bounds(fractions, _P_GRID, spending, spend)[:, -1]
    ok = np.isfinite(c)
    # c falls as alpha grows; keep a strictly decreasing run for the interpolation
    cs, ls = c[ok], np.log(_P_GRID[ok])
    if cs.size < 2:  # looks so early (a fraction of a percent) that no alpha on the grid has a boundary
        return math.inf, math.inf, None
    keep = np.concatenate([[True], np.diff(cs) < 0])
    cs, ls = cs[keep][::-1], ls[keep][::-1]
    if cs.size < 2:
        return math.inf, math.inf, None
    return float(cs[0]), float(cs[-1]), PchipInterpolator(cs, ls)


def repeated_p(z: float, fractions, spending: str = "obrien-fleming", spend=None) -> float:
    """The smallest total alpha at which this look's boundary is crossed (Jennison & Turnbull's
    repeated p-value). Valid however the looks and stopping were chosen: P(some look has
    p ≤ u) ≤ u under the null, so the p of the look where sampling stopped can enter
    Benjamini–Hochberg. One look at fraction 1 gives the fixed-size two-sided p exactly.
    spend: each look's spending time where it differs from its fraction (_bounds)."""
    fr = tuple(float(f) for f in fractions)
    st = _spend_key(fr, spend)
    az = abs(z)
    if len(fr) == 1:
        tail = 2 * float(ndtr(-az))  # alpha spent at look 1 must reach this
        t1 = min((st or fr)[0], 1.0)
        if t1 <= 0:
            return 1.0
        if spending == "obrien-fleming":  # 4·Φ̄(z_{1−α/4}/√t1) = tail
            return min(1.0, 4 * float(ndtr(math.sqrt(t1) * ndtri(tail / 4))))
        if spending == "pocock":
            return min(1.0, tail / math.log1p((math.e - 1) * t1))
        raise ValueError(f"unknown alpha spending {spending!r}")
    c_min, c_max, log_alpha = _p_table(fr, spending, st)
    if log_alpha is None or az <= c_min:
        return 1.0
    if az >= c_max:
        return float(_P_GRID[0])
    return float(min(1.0, math.exp(float(log_alpha(az)))))


def _crit(fractions: tuple[float, ...], alpha: float, spending: str, spend=None) -> float:
    st = _spend_key(fractions, spend)
    if len(fractions) == 1 and (st or fractions)[0] >= 1:
        return _z(1 - alpha / 2)
    return _bounds_cached(fractions, float(alpha), spending, st)[-1]


# ---- planning --------------------------------------------------------------------------------

def detectable(noise: float, s_eff: float, criteria: Criteria, family_size: int = 1, crit: float | None = None,
               power: float | None = None) -> float | None:
    """Smallest |rel| found significant with the given power: (c + z_power)·se, se of the shift
    from the robust noise (the same figure the interval width follows)."""
    if noise is None or s_eff <= 0:
        return None
    c = crit if crit is not None else _z(1 - criteria.alpha / (2 * max(1, family_size)))
    pw = criteria.power if power is None else power
    return math.expm1((c + _z(pw)) * _HL_SE * noise / math.sqrt(s_eff))


def runs_for(effect: float, power: float, noise: float, criteria: Criteria, family_size: int = 1,
             per_round: int | None = 2) -> int | None:
    """Runs per build for a change of `effect` (relative) to be found significant with `power`
    at α/family_size (the level that survives Benjamini–Hochberg for sure), by the within-round
    rank test, at the robust noise σ of log times. per_round: runs per build in each round
    (None: one block). Fixed-size; O'Brien–Fleming looks every round add about 3%."""
    if not noise or noise <= 0 or effect == 0 or not math.isfinite(noise):
        return None
    delta = abs(math.log1p(effect))
    c = _z(1 - criteria.alpha / (2 * max(1, family_size))) + _z(power)
    need_s = (c * _HL_SE * noise / delta) ** 2  # S that gives se = delta / c
    # S grows as n·k/(2k + 1) with rounds of k + k runs, as n²/(2n + 1) in one block
    if per_round is None:
        n = need_s + math.sqrt(need_s * need_s + need_s)
    else:
        n = need_s * (2 * per_round + 1) / per_round
    return max(2, math.ceil(n - 1e-9))


# ---- contrasting two builds' samples (one metric of one step) ------------------------------

def contrast(base_label: str, base_times, cont_label: str, cont_times, criteria: Criteria = Criteria(), *,
             base_rounds=None, cont_rounds=None, looks: tuple[float, ...] = (1.0,),
             spend: tuple[float, ...] | None = None, family_size: int = 1, metric: str = "wall") -> Contrast:
    """The contender's samples against the baseline's: the shift, its interval and p, as a Contrast
    with no verdict yet (judge.contrast decides it; "compare" is `refbench compare` of two saved
    runs). base_rounds / cont_rounds: the round of every sample (runs are compared within rounds
    only); looks: information fractions (runs per build so far / n_max) of every look at this step
    so far, the last being now — (1.0,) for a fixed-size run; spend: the looks' alpha-spending
    times where a re-plan of the step's most runs made them differ from `looks` (the fraction each
    look had when it was taken; None: the same); family_size: contrasts in the run (steps ×
    contenders × metrics), for mde / runs_needed and the level its test must be able to reach
    (shift_fit); metric: what the values are (its weight in the family)."""
    b: Summary = summarize(base_times)
    c: Summary = summarize(cont_times)
    if c.mean <= b.mean:
        factor, err = hyperfine_ratio(c, b)
        faster, slower_label = cont_label, base_label
    else:
        factor, err = hyperfine_ratio(b, c)
        faster, slower_label = base_label, cont_label
    noisy = max(b.cv, c.cv) > criteria.noise_limit
    looks = tuple(float(f) for f in looks) or (1.0,)
    spend = _spend_key(looks, spend)
    x, y = _log(base_times), _log(cont_times)
    if (base_rounds is None) != (cont_rounds is None):
        base_rounds = cont_rounds = None
    noise = _noise(x, base_rounds, y, cont_rounds) if b.n >= 1 and c.n >= 1 else None
    strata = _strata(x, base_rounds, y, cont_rounds)
    per_round = None
    if len(strata) > 1:
        per_round = max(1, round(sum(min(len(a), len(b_)) for a, b_ in strata) / len(strata)))
    needed = runs_for(criteria.threshold, criteria.power, noise, criteria, family_size, per_round) \
        if noise and criteria.threshold > 0 else None
    common = dict(factor=factor, factor_err=err, faster=faster, slower_label=slower_label,
                  noise=noise, look=len(looks), fraction=(spend or looks)[-1], metric=metric)
    if sum(len(a) for a, _ in strata) < 2 or sum(len(b_) for _, b_ in strata) < 2:
        ratio = c.median / b.median if b.median > 0 else float("inf")
        return Contrast(base_label, cont_label, ratio, ratio - 1.0, None, None, None, None, noisy, None,
                          needed, method="too few runs", **common)
    level = member_level(criteria, metric, family_size)
    fit = shift_fit([(a[None, :], b_[None, :]) for a, b_ in strata], looks, criteria, level, spend)
    shift, lo, hi, z = float(fit.shift[0]), float(fit.low[0]), float(fit.high[0]), float(fit.z[0])
    p = repeated_p(z, looks, criteria.spending, spend)
    rel = math.expm1(shift)
    rlo = math.expm1(lo) if math.isfinite(lo) else None
    rhi = math.expm1(hi) if math.isfinite(hi) else None
    mcrit = _crit(looks, criteria.alpha / max(1, family_size), criteria.spending, spend)
    mde = detectable(noise, fit.s_eff, criteria, family_size, crit=mcrit) if noise is not None else None
    return Contrast(base_label, cont_label, math.exp(shift), rel, rlo, rhi, p, None, noisy, mde, needed,
                      method=fit.method, z=z, crit=_crit(looks, 1 - criteria.confidence, criteria.spending, spend),
                      **common)


def contrast_metric(metric: str, base_label: str, base_values, cont_label: str, cont_values,
                    criteria: Criteria = Criteria(), **kw) -> Contrast:
    """contrast() for one metric, against that metric's threshold. Values that are the same in every
    run of both builds (peak memory of a small program, to the byte) have nothing for the rank test
    to rank: their figures say so (IDENTICAL_RUNS), and judge calls them no change."""
    s = criteria.for_metric(metric)
    values = set(float(v) for v in base_values) | set(float(v) for v in cont_values)
    if len(values) == 1 and len(base_values) >= 2 and len(cont_values) >= 2:
        c = contrast(base_label, base_values, cont_label, cont_values, s, **kw)
        return replace(c, ratio=1.0, rel=0.0, ci_low=0.0, ci_high=0.0, p_value=1.0, noise=0.0,
                       method=IDENTICAL_RUNS, metric=metric)
    return contrast(base_label, base_values, cont_label, cont_values, s, metric=metric, **kw)


def should_stop(comp: Contrast, criteria: Criteria, family_size: int) -> bool:
    """Whether the runner can stop sampling this step: the step's own p is below
    alpha/family_size (Benjamini–Hochberg will keep it, whatever the other steps do), the
    interval shows equivalence, or the information fraction reached 1 (n_max)."""
    p = comp.p_raw if comp.p_raw is not None else comp.p_value
    lo, hi = comp.ci_low, comp.ci_high
    if p is not None and lo is not None and hi is not None:
        if p < criteria.alpha / max(1, family_size) and (lo > 0 or hi < 0):
            return True
        t = criteria.threshold_for(comp.metric)
        if -t < lo and hi < t:
            return True
    return comp.fraction >= 1.0
