"""No floor under a clear change (issue 27, part 3), on simulated runs with fixed seeds.

The exact within-round permutation test cannot give a p below 2 / Π C(n + m, m): 3 rounds of
2 + 2 runs have 216 arrangements, so p ≥ 0.0093 however clear the change, and the run's weighted
Benjamini–Hochberg over wall, CPU and memory asks 0.0044 of memory before it can call it alone. A
+247% memory change came out `inconclusive`. Where the exact test cannot reach the level its
family asks (stats.member_level), stats.shift_fit uses the blocked t-test on log values (round
levels cancel as before). These tests show that this keeps the false-alarm rate and decides
complete separation at 3 rounds of 2 + 2 runs, and say what remains (1 round of 1 + 1 runs).

Runs are simulated as in test_stats_sim (drift between rounds, a trend across the run, 5% slow
outliers ×1.5–3, builds in blocks within a round: the worst case of ABBA), CPU and memory as in
test_stats_metrics_sim. Run with -s to see the figures.
"""
from __future__ import annotations

import math

import numpy as np

from refbench import judge, stats
from refbench.verdict import Verdict
from test_stats_metrics_sim import families, judged, metrics_of
from test_stats_sim import alarm_bound, at_least, count, decide_all, simulate

ALPHA = stats.Criteria().alpha
ROUNDS, K = 3, 2  # -r 6 --rounds 3: the run of the issue


def any_false(fams) -> int:
    return sum(any(c.verdict.moved for c in f) for f in fams)


def test_the_exact_tests_floor_and_what_a_design_can_reach():
    assert stats.exact_floor([(2, 2)] * 3) == 2 / 216  # the 0.0093 (0.031 with its ties)
    assert stats.exact_floor([(1, 1)]) == 1.0 and stats.exact_floor([(2, 2)] * 5) == 2 / 6 ** 5
    family = stats.member_level(stats.Criteria(), "memory", 3)  # one step, three metrics
    assert family < stats.exact_floor([(2, 2)] * 3)  # why memory came out inconclusive
    assert not stats.exact_reaches([(2, 2)] * 3, (1.0,), "obrien-fleming", family)
    assert stats.exact_reaches([(2, 2)] * 5, (1.0,), "obrien-fleming", family)  # the default run: ranks stay
    assert not stats.reachable([(1, 1)], stats.Criteria())  # two arrangements, no noise to estimate
    assert stats.reachable([(1, 1)] * 2, stats.Criteria()) and stats.reachable([(2, 2)], stats.Criteria())


def test_complete_separation_at_3_rounds_of_2_plus_2_runs_is_decided():
    """The issue's run: every contender run peaks at 110–112 MiB, every baseline run at 30–34 MiB
    (+247%), wall time and CPU unchanged (unclear, as A/A); one step, so the family is its three
    metrics. Memory must be `slower` in every simulated run, after the family's adjustment."""
    n = 1000
    data = metrics_of(31, n, rounds=ROUNDS)
    rng = np.random.default_rng(32)
    mib = 2 ** 20
    data["memory"] = (np.log(rng.uniform(30, 34, (n, ROUNDS, K)) * mib),
                      np.log(rng.uniform(110, 112, (n, ROUNDS, K)) * mib))
    by = {m: decide_all(*xy, family_size=3, metric=m) for m, xy in data.items()}
    fams = [judge.adjust_family([replace_metric(by[m][i], m) for m in by]) for i in range(n)]
    memory = [f[2] for f in fams]
    print(f"\n+247% memory at 3 rounds of 2 + 2 runs, wall and CPU unchanged: memory slower in "
          f"{count(memory, Verdict.SLOWER) / n:.1%} of runs (exact test alone: p ≥ "
          f"{stats.exact_floor([(2, 2)] * 3):.4f}, level {stats.member_level(stats.Criteria(), 'memory', 3):.4f})")
    assert all(c.verdict == Verdict.SLOWER for c in memory)
    assert all(c.method == "blocked t on log values, 3 rounds" for c in memory)
    # the batch is what contrast_metric gives one run
    r = np.repeat(np.arange(ROUNDS), K)
    one = judge.contrast_metric("memory", "A", np.exp(data["memory"][0][0]).ravel(), "B",
                                np.exp(data["memory"][1][0]).ravel(), base_rounds=r, cont_rounds=r, family_size=3)
    assert one.method == memory[0].method and math.isclose(one.rel, memory[0].rel, rel_tol=1e-9)
    assert one.p_value < 1e-6 and one.verdict == Verdict.SLOWER


def replace_metric(c, metric):
    from dataclasses import replace
    return replace(c, metric=metric)


def test_false_alarms_hold_where_the_blocked_t_test_decides():
    """A/A runs of 4 steps × 3 metrics at 3 rounds of 2 + 2 runs: the family asks 0.0042 of wall
    and 0.0011 of CPU and memory, below the exact test's floor, so every comparison is the blocked
    t-test's. Per comparison at alpha, and per run after the family's adjustment, the false
    alarms stay within alpha (alarm_bound)."""
    n_runs = 1000
    data = metrics_of(33, 4 * n_runs, rounds=ROUNDS)
    by = {m: judged(m, *xy) for m, xy in data.items()}
    assert all(c.method.startswith("blocked t") for m in ("wall", "cpu") for c in by[m])
    measured = [c for m in by for c in by[m] if c.method.startswith("blocked t")]
    wrong = count(measured, Verdict.SLOWER, Verdict.FASTER)
    fams = families(by)
    runs_wrong = any_false(fams)
    print(f"\nA/A at 3 rounds of 2 + 2 runs (drift, trend, 5% outliers), blocked t: {wrong / len(measured):.2%} of "
          f"{len(measured)} comparisons slower/faster at alpha (bound {alarm_bound(len(measured), ALPHA)}); "
          f"{runs_wrong / len(fams):.2%} of {len(fams)} runs of 4 steps x 3 metrics with any "
          f"(bound {alarm_bound(len(fams), ALPHA) / len(fams):.1%})")
    assert wrong <= alarm_bound(len(measured), ALPHA)
    assert runs_wrong <= alarm_bound(len(fams), ALPHA)
    # without outliers and trend (normal noise and drift between rounds: the t-test's own model)
    # the rate is alpha itself, not a conservative test's lower one
    clean = decide_all(*simulate(35, 4000, ROUNDS, K, noise=0.05, outliers=0.0, trend=0.0), family_size=12)
    clean_wrong = count(clean, Verdict.SLOWER, Verdict.FASTER)
    print(f"the same without outliers or trend: {clean_wrong / len(clean):.2%} of {len(clean)}")
    assert clean_wrong <= alarm_bound(len(clean), ALPHA) and clean_wrong >= at_least(len(clean), ALPHA / 2)


def test_power_of_the_blocked_t_test_at_3_rounds():
    """What the companion buys short of complete separation: +20% wall time at cv 3% within
    rounds (with drift, trend and outliers), in a family of 4 steps × 3 metrics. The exact test
    could call none of these (its floor is above the family's level); a slow outlier inflates the
    t-test's variance, which costs power there, never false alarms."""
    n = 1000
    x, y = simulate(34, n, ROUNDS, K, effect=0.20, noise=0.03)
    comps = decide_all(x, y, family_size=12)
    hit = count(comps, Verdict.SLOWER)
    clean = decide_all(*simulate(34, n, ROUNDS, K, effect=0.20, noise=0.03, outliers=0.0), family_size=12)
    print(f"\n+20% at cv 3%, 3 rounds of 2 + 2 runs, family of 12: slower {hit / n:.1%} "
          f"(without outliers {count(clean, Verdict.SLOWER) / n:.1%}); faster {count(comps, Verdict.FASTER)}")
    assert hit >= at_least(n, 0.55) and count(clean, Verdict.SLOWER) >= at_least(n, 0.95)
    assert count(comps, Verdict.FASTER) == 0
