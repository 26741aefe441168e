"""The decision procedure on simulated runs: false alarms and power, fixed-size and sequential.

Runs are simulated the way the runner collects them: R rounds, k runs per build per round, the
builds in ABBA order (runner.round_orders), so within a round one build's k runs come before
the other's. Log times = a level per round (drift, sd comparable to the noise within a round)
+ a slow linear trend over the whole sequence + lognormal noise; 5% of runs are outliers,
×1.5–3 slower; the contender is multiplied by (1 + effect). Fixed seeds.

Rates are asserted within binomial bounds: a limit the true rate passes with ≥ 99%
probability, so a test fails when the property is broken, not by chance. Every false-alarm
bound (alarm_bound) also fails a procedure at twice alpha with ≥ 99% probability, which takes
≥ 600 independent trials; every simulation of false alarms has a power test beside it, so a
procedure that never calls anything fails. Run with -s to see the figures.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import binom

from refbench import judge, stats
from refbench.runner import round_orders
from refbench.verdict import Verdict

ALPHA = 0.05
CRITERIA = stats.Criteria()


# ---- binomial bounds -------------------------------------------------------------------------

def binomial_tail(n: int, k: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p) (tests/test_verdicts.py's helper, by scipy for large n)."""
    return float(binom.sf(k - 1, n, p))


MISS = 0.01  # the chance a bound misjudges a procedure: a correct one failing, or a broken one passing


def at_most(n: int, p: float, miss: float = MISS) -> int:
    """The largest count a Binomial(n, p) exceeds with < miss probability: a rate ≤ p passes."""
    return next(k for k in range(n + 1) if binomial_tail(n, k + 1, p) < miss)


def at_least(n: int, p: float, miss: float = MISS) -> int:
    """The smallest count a Binomial(n, p) falls below with < miss probability: a rate ≥ p passes."""
    return next(k for k in range(n, -1, -1) if 1 - binomial_tail(n, k, p) < miss)


def alarm_bound(n: int, alpha: float = ALPHA, miss: float = MISS) -> int:
    """The most false alarms n independent A/A trials may show, derived from alpha and the binomial.

    bound = at_most(n, alpha): a Binomial(n, alpha) exceeds it with probability < miss, so a
    procedure whose false-alarm rate is alpha (or less) passes with probability ≥ 1 - miss.
    The bound is only worth asserting if it also fails a broken procedure: one at twice alpha stays
    within it with probability P(Binomial(n, 2 alpha) ≤ bound), asserted ≤ miss here, so it fails
    with ≥ 1 - miss. At alpha 5% and miss 1% that needs n ≥ 600 trials (bound 43, P = 0.0099;
    at 500 trials a 10% procedure would pass 2.7% of the time, at 150 trials 46%): a test with
    too few trials fails here rather than passing a broken procedure."""
    bound = at_most(n, alpha, miss)
    assert binom.cdf(bound, n, 2 * alpha) <= miss, f"{n} trials cannot tell alpha {alpha} from {2 * alpha}"
    return bound


# ---- simulated runs --------------------------------------------------------------------------

def simulate(seed: int, seqs: int, rounds: int, k: int, effect: float = 0.0, noise: float = 0.06,
             drift: float | None = None, trend: float | None = None, outliers: float = 0.05):
    """(baseline, contender) log times, each (seqs, rounds, k). drift: sd of the per-round level
    (default = noise); trend: total linear change over the sequence (default = noise)."""
    rng = np.random.default_rng(seed)
    drift = noise if drift is None else drift
    trend = noise if trend is None else trend
    first = np.array([o[0] for o in round_orders(2, rounds)])
    slot = np.stack([(first != 0).astype(int), (first == 0).astype(int)], axis=1)  # (R, 2): block position
    pos = np.arange(rounds)[:, None, None] * 2 * k + slot[:, :, None] * k + np.arange(k)[None, None, :]
    logs = (drift * rng.standard_normal((seqs, rounds, 1, 1)) + trend * (pos / max(1, 2 * k * rounds - 1) - 0.5)
            + noise * rng.standard_normal((seqs, rounds, 2, k)))
    slow = rng.random((seqs, rounds, 2, k)) < outliers
    logs = logs + slow * np.log(rng.uniform(1.5, 3.0, (seqs, rounds, 2, k)))
    logs[:, :, 1, :] += math.log1p(effect)
    return logs[:, :, 0, :], logs[:, :, 1, :]


def decide_all(x, y, looks=(1.0,), criteria=CRITERIA, blocked=True, family_size=1, metric="wall"):
    """judge.contrast's decision for every sequence at once: the same shift_fit (the exact rank
    test, or the blocked t-test where that cannot reach the family's level), repeated_p and
    decide (test_batch_matches_compare checks that it is the same)."""
    seqs, rounds, _ = x.shape
    strata = [(x[:, r, :], y[:, r, :]) for r in range(rounds)] if blocked else \
        [(x.reshape(seqs, -1), y.reshape(seqs, -1))]
    fit = stats.shift_fit(strata, tuple(looks), criteria, stats.member_level(criteria, metric, family_size))
    out = []
    for shift, lo, hi, z in zip(fit.shift, fit.low, fit.high, fit.z):
        p = stats.repeated_p(z, looks, criteria.spending)
        rel = math.expm1(shift)
        rlo = math.expm1(lo) if math.isfinite(lo) else None
        rhi = math.expm1(hi) if math.isfinite(hi) else None
        out.append(comparison(rel, rlo, rhi, p, judge.decide(rel, rlo, rhi, p, criteria), looks, fit.method))
    return out


def comparison(rel, lo, hi, p, verdict, looks=(1.0,), method=""):
    return stats.Contrast("A", "B", 1 + rel, rel, lo, hi, p, verdict, False, None, None, 1.0, 0.0, "A", "B",
                            look=len(looks), fraction=looks[-1], method=method)


def rate(comps, *verdicts) -> float:
    return float(np.mean([c.verdict in verdicts for c in comps]))


def count(comps, *verdicts) -> int:
    return sum(c.verdict in verdicts for c in comps)


def sequential(x, y, criteria=CRITERIA, family_size=1, naive=False):
    """Look after every round up to the last (n_max), stop when should_stop says so. naive:
    every look at the fixed-size level (no spending) and stop at the first verdict."""
    seqs, rounds, _ = x.shape
    final: list = [None] * seqs
    stopped_at = np.full(seqs, rounds)
    live = np.arange(seqs)
    for r in range(1, rounds + 1):
        looks = (1.0,) if naive else tuple((i + 1) / rounds for i in range(r))
        comps = decide_all(x[live, :r], y[live, :r], looks, criteria, family_size=family_size)
        keep = []
        for i, c in zip(live, comps):
            if naive:
                stop = c.verdict != Verdict.INCONCLUSIVE or r == rounds
            else:
                c = replace(c, fraction=r / rounds, look=r)
                stop = stats.should_stop(c, criteria, family_size)
            if stop:
                final[i] = c
                stopped_at[i] = r
            else:
                keep.append(i)
        live = np.array(keep, dtype=int)
        if live.size == 0:
            break
    return final, stopped_at


# ---- the batch is compare ----------------------------------------------------------------------

def test_batch_matches_compare():
    x, y = simulate(1, 40, 5, 2, effect=0.08)
    rounds = np.repeat(np.arange(5), 2)
    batch = decide_all(x, y)
    for i in range(40):
        c = judge.contrast("A", np.exp(x[i]).ravel(), "B", np.exp(y[i]).ravel(), base_rounds=rounds,
                           cont_rounds=rounds)
        assert c.verdict == batch[i].verdict and c.method == "aligned ranks, 5 rounds"
        assert c.rel == pytest.approx(batch[i].rel, abs=1e-9) and c.p_value == pytest.approx(batch[i].p_value)
        assert c.ci_low <= c.rel <= c.ci_high


# ---- fixed size: the default run (10 runs per build in 5 rounds) -----------------------------

def test_fixed_size_false_alarms_within_alpha_per_step_and_per_family():
    n = 4800  # 600 runs of 8 steps: alarm_bound needs 600 trials per rate
    x, y = simulate(2, n, 5, 2, noise=0.06)
    comps = decide_all(x, y)
    wrong = count(comps, Verdict.SLOWER, Verdict.FASTER)
    print(f"\nA/A, 10 runs in 5 rounds, cv 6% + drift + trend + 5% outliers: "
          f"{wrong / n:.3%} slower/faster per step")
    assert wrong <= alarm_bound(n)
    # a run's steps are one family: 8 steps each, Benjamini-Hochberg across them
    fams = [judge.adjust_family(comps[i:i + 8]) for i in range(0, n, 8)]
    any_wrong = sum(any(c.verdict in (Verdict.SLOWER, Verdict.FASTER) for c in f) for f in fams)
    print(f"families of 8 steps with BH: {any_wrong / len(fams):.2%} with any false slower/faster "
          f"(without BH: {np.mean([count(comps[i:i + 8], Verdict.SLOWER, Verdict.FASTER) > 0 for i in range(0, n, 8)]):.1%})")
    assert any_wrong <= alarm_bound(len(fams))


@pytest.mark.parametrize("effect, noise, floor", [(0.10, 0.04, 0.85), (0.10, 0.05, 0.78), (0.20, 0.06, 0.92),
                                                  (0.05, 0.04, 0.45)])
def test_fixed_size_power(effect, noise, floor):
    n = 1000
    x, y = simulate(3, n, 5, 2, effect=effect, noise=noise)
    comps = decide_all(x, y)
    hit = count(comps, Verdict.SLOWER)
    print(f"\n+{effect:.0%} at cv {noise:.0%} within rounds (+ drift, trend, outliers), 10 runs in 5 rounds: "
          f"called slower {hit / n:.1%}, faster {rate(comps, Verdict.FASTER):.1%}")
    assert hit >= at_least(n, floor)
    assert count(comps, Verdict.FASTER) == 0


def test_mde_and_runs_for_match_the_simulated_power():
    # at the minimum detectable effect the test has about 80% power, and runs_for's run count
    # gives about the power asked for: the summary's "could detect X%" stays true
    noise = 0.05
    x, y = simulate(4, 400, 5, 2, noise=noise, outliers=0.0, drift=0.0, trend=0.0)
    rounds = np.repeat(np.arange(5), 2)
    c = stats.contrast("A", np.exp(x[0]).ravel(), "B", np.exp(y[0]).ravel(), base_rounds=rounds, cont_rounds=rounds)
    assert c.noise == pytest.approx(noise, rel=0.5)
    mde = stats.detectable(noise, c_s_eff(5, 2), CRITERIA)
    x, y = simulate(5, 1000, 5, 2, effect=mde, noise=noise, outliers=0.0, drift=0.0, trend=0.0)
    power = rate(decide_all(x, y), Verdict.SLOWER)
    print(f"\nmde at cv 5%, 10 runs in 5 rounds: {mde:.1%}; simulated power there {power:.1%}")
    assert 0.65 <= power <= 0.92
    n = stats.runs_for(0.10, 0.9, noise, CRITERIA, per_round=2)
    # the fewest runs per build whose power formula reaches +10% at 90% (S = n·k/(2k + 1) with k = 2)
    assert isinstance(n, int) and n >= 2
    assert stats.detectable(noise, n * 2 / 5, CRITERIA, power=0.9) <= 0.10
    assert stats.detectable(noise, (n - 1) * 2 / 5, CRITERIA, power=0.9) > 0.10
    r = math.ceil(n / 2)
    x, y = simulate(6, 600, r, 2, effect=0.10, noise=noise, outliers=0.0, drift=0.0, trend=0.0)
    comps = decide_all(x, y)
    print(f"runs_for(+10%, 90%, cv 5%) = {n} runs per build; simulated power with {2 * r}: "
          f"{rate(comps, Verdict.SLOWER):.1%}")
    assert count(comps, Verdict.SLOWER) >= at_least(600, 0.82)


def c_s_eff(rounds: int, k: int) -> float:
    return rounds * k * k / (2 * k + 1)


# ---- sequential: a look after every round ------------------------------------------------------

def test_sequential_looks_keep_false_alarms_within_alpha_and_naive_looks_do_not():
    n = 640
    x, y = simulate(7, n, 10, 2, noise=0.06)  # n_max = 20 runs per build, a look after each round
    final, stopped = sequential(x, y)
    wrong = count(final, Verdict.SLOWER, Verdict.FASTER)
    print(f"\nA/A, looks after each of 10 rounds (O'Brien-Fleming): {wrong / n:.2%} false slower/faster, "
          f"{rate(final, Verdict.SAME):.0%} stopped as no significant change, median stop round {np.median(stopped):.0f}")
    assert wrong <= alarm_bound(n)
    naive, _ = sequential(x, y, naive=True)
    naive_wrong = count(naive, Verdict.SLOWER, Verdict.FASTER)
    print(f"the same looks at the fixed-size level, stopping at the first verdict: {naive_wrong / n:.2%}")
    assert naive_wrong >= at_least(n, 0.10)  # repeated looking without spending inflates the rate
    assert naive_wrong > alarm_bound(n)


def test_sequential_pocock_keeps_false_alarms_within_alpha():
    n = 640
    x, y = simulate(8, n, 6, 2, noise=0.06)
    final, _ = sequential(x, y, stats.Criteria(spending="pocock"))
    wrong = count(final, Verdict.SLOWER, Verdict.FASTER)
    print(f"\nA/A, 6 looks, Pocock: {wrong / n:.2%} false slower/faster")
    assert wrong <= alarm_bound(n)


def test_sequential_pocock_power():
    # the same design with +10% at cv 6%: Pocock spends alpha evenly, so it stops early and
    # calls the change (a procedure that never calls anything passes the A/A test above, not this)
    n = 300
    x, y = simulate(36, n, 6, 2, effect=0.10, noise=0.06)
    final, stopped = sequential(x, y, stats.Criteria(spending="pocock"))
    hit = count(final, Verdict.SLOWER)
    print(f"\n+10% at cv 6%, 6 looks, Pocock: slower {hit / n:.1%}, faster {count(final, Verdict.FASTER)}, "
          f"median stop round {np.median(stopped):.0f}")
    assert hit >= at_least(n, 0.6)  # 70% at this seed
    assert count(final, Verdict.FASTER) == 0
    assert np.mean(stopped) < 6  # some steps stop before n_max


def test_sequential_power_and_early_stops():
    # a budget of 40 runs per build (20 rounds of 2), stopping when decided: +5% at cv 5%
    n = 150
    x, y = simulate(9, n, 20, 2, effect=0.05, noise=0.05)
    final, stopped = sequential(x, y, family_size=1)
    hit = count(final, Verdict.SLOWER)
    print(f"\n+5% at cv 5%, up to 40 runs per build, looks every round: slower {hit / n:.1%}, "
          f"median stop after {2 * np.median(stopped):.0f} runs per build")
    assert hit >= at_least(n, 0.75)
    n = 150
    x, y = simulate(10, n, 10, 2, effect=0.10, noise=0.06)
    final, stopped = sequential(x, y, family_size=8)
    hit = count(final, Verdict.SLOWER)
    print(f"+10% at cv 6%, up to 20 runs per build, family of 8: slower {hit / n:.1%}, "
          f"median stop after {2 * np.median(stopped):.0f} runs per build")
    assert hit >= at_least(n, 0.80) and np.mean(stopped) < 10  # some steps stop before n_max


# ---- what the design buys --------------------------------------------------------------------

def test_blocking_by_round_beats_ignoring_rounds_under_drift():
    n = 600
    x, y = simulate(11, n, 5, 2, effect=0.10, noise=0.04, drift=0.08)
    blocked, pooled = decide_all(x, y), decide_all(x, y, blocked=False)
    wb = np.median([c.ci_high - c.ci_low for c in blocked])
    wp = np.median([c.ci_high - c.ci_low for c in pooled])
    pb, pp = rate(blocked, Verdict.SLOWER), rate(pooled, Verdict.SLOWER)
    print(f"\n+10%, cv 4% within rounds, drift sd 8%: blocked power {pb:.1%} (interval {wb:.1%}), "
          f"rounds ignored {pp:.1%} (interval {wp:.1%})")
    assert wb < 0.8 * wp and pb > pp + 0.2


def test_ranks_beat_the_mean_under_outliers():
    # the mean ratio (what compare used to test): a blocked t-test on per-round mean log times
    n = 1000
    x, y = simulate(12, n, 5, 2, effect=0.10, noise=0.04, outliers=0.08)
    ranks = rate(decide_all(x, y), Verdict.SLOWER)
    d = np.log(np.exp(y).mean(axis=2)) - np.log(np.exp(x).mean(axis=2))  # per round: log mean ratio
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(d.shape[1]))
    from scipy import stats as sps
    means = float(np.mean((sps.t.sf(np.abs(t), d.shape[1] - 1) * 2 < ALPHA) & (t > 0)))
    print(f"\n+10%, cv 4%, 8% outliers ×1.5–3: aligned ranks {ranks:.1%}, mean ratio (paired t) {means:.1%}")
    assert ranks > means + 0.2


def test_identical_builds_with_enough_runs_reach_no_significant_change():
    n = 640
    x, y = simulate(13, n, 5, 4, noise=0.02)  # 20 runs per build in 5 rounds, cv 2%
    comps = decide_all(x, y)
    same = count(comps, Verdict.SAME)
    print(f"\nA/A, cv 2%, 20 runs per build: no significant change {same / n:.1%}")
    assert same >= at_least(n, 0.85)
    assert count(comps, Verdict.SLOWER, Verdict.FASTER) <= alarm_bound(n)


# ---- sequential boundaries ---------------------------------------------------------------------

def test_sequential_bounds_match_published_values_and_reduce_to_the_fixed_test():
    # Lan-DeMets, two-sided alpha 0.05, five equal looks (gsDesign / rpact)
    assert stats.sequential_bounds([0.2, 0.4, 0.6, 0.8, 1.0], 0.05) == pytest.approx(
        [4.877, 3.357, 2.680, 2.290, 2.031], abs=2e-3)
    assert stats.sequential_bounds([0.2, 0.4, 0.6, 0.8, 1.0], 0.05, "pocock") == pytest.approx(
        [2.438, 2.427, 2.410, 2.397, 2.386], abs=2e-3)
    assert stats.sequential_bounds([1.0], 0.05) == [pytest.approx(1.959964)]
    assert stats.repeated_p(2.5, (1.0,)) == pytest.approx(2 * (1 - 0.9937903), rel=1e-5)
    for fr in [(0.25, 0.5, 1.0), (0.1, 0.15, 0.5, 0.55, 0.9, 1.0)]:
        for a in (0.001, 0.01, 0.05):
            c = stats.sequential_bounds(fr, a)[-1]
            assert stats.repeated_p(c, fr) == pytest.approx(a, rel=0.01)
            assert stats.repeated_p(c + 0.3, fr) < a < stats.repeated_p(c - 0.3, fr)
    with pytest.raises(ValueError):
        stats.sequential_bounds([0.5, 0.4], 0.05)


def test_spending_times_apart_from_information_keep_each_looks_alpha():
    """Boundaries whose looks spend alpha by spending times other than their information fractions
    (a step's most runs grew after its first looks, StepState.spend): on simulated Brownian paths,
    the chance of crossing by each look is what the spending function released by then, and all
    of alpha at the end. Where the times are the fractions, the boundaries are the old ones."""
    fr, st = (0.2, 0.35, 0.6, 1.0), (0.4, 0.55, 0.75, 1.0)
    assert stats.sequential_bounds(fr, 0.05, spend=fr) == stats.sequential_bounds(fr, 0.05)
    c = np.array(stats.sequential_bounds(fr, 0.05, spend=st))
    rng = np.random.default_rng(7)
    n = 400_000
    s = np.cumsum(rng.normal(size=(n, len(fr))) * np.sqrt(np.diff((0.0,) + fr)), axis=1)
    crossed = np.maximum.accumulate(np.abs(s / np.sqrt(fr)) >= c, axis=1).sum(axis=0)
    spent = stats._spent(np.array(st), np.array([0.05]), "obrien-fleming")[0]
    for k, alpha_k in enumerate(spent):  # each within a 99.9% binomial interval around its alpha
        sd = math.sqrt(n * alpha_k * (1 - alpha_k))
        assert abs(crossed[k] - n * alpha_k) <= 3.3 * sd + 1, (k, crossed[k] / n, alpha_k)
    # read as if the looks had spent by their fractions, the same crossings are held to too little
    naive = np.array(stats.sequential_bounds(fr, 0.05))
    assert naive[0] > c[0] and stats.repeated_p(c[-1], fr, spend=st) == pytest.approx(0.05, rel=0.02)
    # a look that releases no alpha (spending time as the last one's) has no boundary
    assert math.isinf(stats.sequential_bounds((0.3, 0.5, 1.0), 0.05, spend=(0.5, 0.5, 1.0))[1])
    with pytest.raises(ValueError):
        stats.sequential_bounds((0.3, 0.5), 0.05, spend=(0.6, 0.5))


def test_sequential_bounds_are_fast():
    fr = [(i + 1) / 30 for i in range(30)]
    stats._bounds(tuple(fr), np.array([0.05]), "obrien-fleming")  # warm up
    t0 = time.perf_counter()
    for _ in range(5):
        stats._LOOKS.clear()  # every look solved anew, not read from the looks solved before
        stats._bounds(tuple(fr), np.array([0.05]), "obrien-fleming")
    per = (time.perf_counter() - t0) / 5
    print(f"\nsequential_bounds, 30 looks: {per * 1000:.1f} ms")
    assert per < 0.2  # ~20-60 ms on a shared 2-core machine; generous for CI


def test_boundaries_grown_look_by_look_are_those_solved_at_once():
    """A step asks at every look with one look more (stats._LOOKS keeps the looks solved): each
    answer is, to the bit, what solving every look from the first gives."""
    fr = tuple((i + 1) / 12 for i in range(12))
    spend = (0.01,) + fr[1:]  # a first look that spent by calendar time, as a replanned step's
    for st in (None, spend):
        stats._LOOKS.clear()
        grown = [stats._bounds(fr[:k], stats._P_GRID, "obrien-fleming", st and st[:k]) for k in range(1, 13)]
        stats._LOOKS.clear()
        whole = stats._bounds(fr, stats._P_GRID, "obrien-fleming", st)
        assert all(np.array_equal(b, whole[:, :k + 1]) for k, b in enumerate(grown))
        assert np.array_equal(stats._bounds(fr, stats._P_GRID, "obrien-fleming", st), whole)  # read back


def test_should_stop():
    sig = comparison(0.2, 0.1, 0.3, 0.001, Verdict.SLOWER, (0.2, 0.4))
    assert stats.should_stop(sig, CRITERIA, 1) and stats.should_stop(sig, CRITERIA, 9)
    weak = comparison(0.2, 0.01, 0.3, 0.03, Verdict.SLOWER, (0.2, 0.4))
    assert stats.should_stop(weak, CRITERIA, 1) and not stats.should_stop(weak, CRITERIA, 9)
    same = comparison(0.0, -0.02, 0.02, 0.9, Verdict.SAME, (0.5,))
    assert stats.should_stop(same, CRITERIA, 9)
    open_ = comparison(0.03, -0.05, 0.11, 0.4, Verdict.INCONCLUSIVE, (0.5,))
    assert not stats.should_stop(open_, CRITERIA, 1)
    assert stats.should_stop(replace(open_, fraction=1.0), CRITERIA, 1)


# ---- edge cases ------------------------------------------------------------------------------

def test_robust_noise_sees_through_drift_and_outliers():
    # within-round cv 5%, drift between rounds sd 20%: 40 runs in 10 rounds, 100 times
    rounds = np.repeat(np.arange(10), 4)
    x, _ = simulate(14, 100, 10, 4, noise=0.05, drift=0.2, trend=0.0, outliers=0.0)
    clean = [stats.robust_noise(np.exp(s).ravel(), rounds) for s in x]
    x, _ = simulate(14, 100, 10, 4, noise=0.05, drift=0.2, trend=0.05, outliers=0.05)
    dirty = [stats.robust_noise(np.exp(s).ravel(), rounds) for s in x]
    print(f"\nrobust noise at cv 5%: {np.mean(clean):.4f}; with trend and 5% outliers {np.mean(dirty):.4f}")
    assert np.mean(clean) == pytest.approx(0.05, rel=0.1)
    assert np.mean(dirty) == pytest.approx(0.05, rel=0.25)
    assert stats.robust_noise(np.exp(x[0]).ravel()) > 0.1  # across rounds the drift counts
    assert stats.robust_noise([1.0]) == 0.0 and stats.robust_noise([2.0, 2.0, 2.0]) == 0.0


def test_edge_cases():
    r = [0, 0, 1, 1, 2, 2]
    # fewer than 2 runs: no test, but still a ratio and hyperfine's phrase
    c = judge.contrast("A", [1.0], "B", [1.1, 1.2])
    assert c.verdict == Verdict.INCONCLUSIVE and c.p_value is None and c.ci_low is None
    # all equal: nothing changed, and the interval says so
    c = judge.contrast("A", [1.0] * 6, "B", [1.0] * 6, base_rounds=r, cont_rounds=r)
    assert (c.verdict, c.p_value) == (Verdict.SAME, 1.0)
    assert c.rel == pytest.approx(0, abs=1e-9) and c.ci_low == pytest.approx(0, abs=1e-6)
    assert c.ci_high == pytest.approx(0, abs=1e-6)
    # no spread at all but a clear difference: significant, the interval the difference itself
    r5 = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    c = judge.contrast("A", [1.0] * 10, "B", [1.2] * 10, base_rounds=r5, cont_rounds=r5)
    assert c.verdict == Verdict.SLOWER and c.rel == pytest.approx(0.2, abs=1e-6) and c.p_value < 0.001
    assert c.ci_low == pytest.approx(0.2, abs=1e-6) and c.ci_high == pytest.approx(0.2, abs=1e-6)
    # one round: the plain two-sample test
    base, cont = [1.0, 1.02, 0.98, 1.01, 0.99] * 2, [1.1, 1.12, 1.08, 1.11, 1.09] * 2
    c = judge.contrast("A", base, "B", cont, base_rounds=[0] * 10, cont_rounds=[0] * 10)
    assert c.method == "Mann-Whitney" and c.verdict == Verdict.SLOWER
    assert c.rel == pytest.approx(stats.contrast("A", base, "B", cont).rel)
    # unequal runs per round, and a round only one build reached (it cannot be compared within)
    c = stats.contrast("A", [1.0, 1.01, 0.99, 1.2, 1.21, 0.8, 0.5], "B", [1.1, 1.3, 1.31, 1.32, 0.88, 0.87, 0.86],
                       base_rounds=[0, 0, 0, 1, 1, 2, 3], cont_rounds=[0, 1, 1, 1, 2, 2, 2])
    assert c.method == "aligned ranks, 3 rounds" and c.rel == pytest.approx(0.09, abs=0.02)
    # one run per build per round: the signed-rank test on pairs
    c = stats.contrast("A", [1.0, 1.2, 0.9, 1.1, 1.0, 1.3], "B", [1.1, 1.32, 0.99, 1.21, 1.1, 1.43],
                       base_rounds=range(6), cont_rounds=range(6))
    assert c.method == "signed-rank, 6 rounds" and c.rel == pytest.approx(0.1, abs=1e-6) and c.p_value < 0.05
    # rounds for one side only: ignored
    assert stats.contrast("A", base, "B", cont, base_rounds=[0] * 10).method == "Mann-Whitney"
    with pytest.raises(ValueError):
        stats.contrast("A", base, "B", cont, base_rounds=[0] * 9, cont_rounds=[0] * 10)


def test_json_is_flat_and_strict():
    import json
    x, y = simulate(15, 1, 5, 2, effect=0.1)
    rounds = np.repeat(np.arange(5), 2)
    for looks in [(1.0,), (0.04, 0.08), (0.2, 0.4, 0.6)]:
        c = judge.contrast("A", np.exp(x[0]).ravel(), "B", np.exp(y[0]).ravel(), base_rounds=rounds,
                           cont_rounds=rounds, looks=looks, family_size=6)
        d = c.to_json()
        json.dumps(d, allow_nan=False)
        assert all(not isinstance(v, (dict, list)) for v in d.values())
        assert {"method", "noise", "look", "fraction", "z", "crit", "p_raw"} <= set(d)
    assert d["look"] == 3 and d["fraction"] == 0.6


# ---- who leads a round: position effects as bias, or as noise (issue 34) ------------------------

def _aa_with_position_effects(orders: list[list[list[int]]], k: int, seed: int, lead: float, first: float,
                              noise: float = 0.04) -> tuple[np.ndarray, np.ndarray]:
    """A/A log times, (seqs, rounds, k) per build, laid out as the runner runs them: one hyperfine
    call per round, the builds interleaved A B, B A, ... in each sequence's own round orders. The
    first run of every call is `lead` slower (log), and the step's very first run `first` more:
    what a server settling after the step before, or a call's cold start, would do."""
    rng = np.random.default_rng(seed)
    seqs, rounds = len(orders), len(orders[0])
    x, y = noise * rng.standard_normal((2, seqs, rounds, k))
    for s, step_orders in enumerate(orders):
        for r, order in enumerate(step_orders):
            leader = order[0]  # the interleaved call's first run is the leader's first
            bump = lead + (first if r == 0 else 0.0)
            (x if leader == 0 else y)[s, r, 0] += bump
    return x, y


def test_random_round_orders_turn_a_position_effect_into_noise_not_bias():
    """With the fixed rotation, whatever the first run of a step pays lands on the baseline in every
    run, and an odd round count leaves one more baseline-led round: identical builds measure apart,
    the contender 'faster' (issue 34's remove steps). Drawn per pair of rounds from a seed per run,
    the same effect lands on either build at random: the mean shift over many A/A runs is 0 within
    its interval, and no larger than the noise it adds."""
    seqs, rounds, k = 600, 5, 4
    fixed = [round_orders(2, rounds)] * seqs
    drawn = [round_orders(2, rounds, seed) for seed in range(seqs)]
    shifts = {}
    for name, orders in (("fixed", fixed), ("drawn", drawn)):
        x, y = _aa_with_position_effects(orders, k, seed=34, lead=0.10, first=0.40)
        fit = stats.shift_fit([(x[:, r, :], y[:, r, :]) for r in range(rounds)], (1.0,), CRITERIA,
                              stats.member_level(CRITERIA, "wall", 1))
        shifts[name] = np.asarray(fit.shift)
    for name, s in shifts.items():
        half = 2.58 * s.std(ddof=1) / math.sqrt(len(s))
        print(f"{name}: mean A/A shift {s.mean():+.4f} ± {half:.4f} (99%)")
    fixed_s, drawn_s = shifts["fixed"], shifts["drawn"]
    assert fixed_s.mean() + 2.58 * fixed_s.std(ddof=1) / math.sqrt(seqs) < 0  # the contender looks faster
    assert abs(drawn_s.mean()) < 2.58 * drawn_s.std(ddof=1) / math.sqrt(seqs)  # no bias left
    # both start the pairs of rounds evenly over the runs: the baseline leads the first pair about half the time
    leads = sum(o[0][0] == 0 for o in drawn)
    assert at_least(seqs, 0.5) <= leads <= at_most(seqs, 0.5)


def test_round_orders_from_a_seed_are_pairs_and_repeat():
    for seed in (0, 1, 34, 2**31 - 1):
        orders = round_orders(3, 9, seed)
        assert orders == round_orders(3, 9, seed)  # a run's orders can be repeated (--order-seed)
        assert all(sorted(o) == [0, 1, 2] for o in orders)
        assert all(orders[r + 1] == orders[r][::-1] for r in range(0, 8, 2))  # each pair: an order and its reverse
        assert round_orders(3, 4, seed) == orders[:4]  # a round's order does not depend on the rounds after it
    assert len({tuple(map(tuple, round_orders(2, 8, s))) for s in range(50)}) > 10
