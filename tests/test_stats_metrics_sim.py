"""The multi-metric procedure on simulated runs, fixed seeds: every step gets a wall, a CPU and a
memory comparison, and a run's family is its steps x metrics with (weighted) Benjamini–Hochberg.

A run here has 4 steps. Wall time is simulated as in test_stats_sim (drift, trend, 5% outliers,
cv 6%); CPU time shares a quarter of wall time's noise and drift and has its own (cv 2%), so the two
are correlated as on a real machine; peak memory is near-constant: a few 4 KiB pages of jitter
around 30 MiB, and identical to the byte in every run on one step of each run. Rates are asserted
within binomial bounds (test_stats_sim.at_most / at_least).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from refbench import stats
from refbench.verdict import Verdict
from test_stats_sim import at_least, at_most, count, decide_all, sequential, simulate

STEPS, ROUNDS, K = 4, 5, 2  # the default run: 10 runs per build in 5 rounds
PAGE, BASE = 4096, 30 * 2 ** 20


def metrics_of(seed: int, n: int, rounds: int = ROUNDS, cpu_effect: float = 0.0, mem_bytes: int = 0):
    """Per metric, (baseline, contender) log values of n steps, each (n, rounds, K)."""
    rng = np.random.default_rng(seed)
    wx, wy = simulate(seed, n, rounds, K, noise=0.06)
    own_x, own_y = (0.02 * rng.standard_normal((n, rounds, K)) for _ in range(2))
    cx, cy = 0.25 * wx + own_x, 0.25 * wy + own_y + math.log1p(cpu_effect)
    mx = np.log(BASE + PAGE * rng.integers(0, 3, (n, rounds, K)))
    my = np.log(BASE + mem_bytes + PAGE * rng.integers(0, 3, (n, rounds, K)))
    if not mem_bytes:
        flat = np.arange(n) % STEPS == 0  # one step per run: memory identical to the byte
        mx[flat] = my[flat] = math.log(BASE)
    return {"wall": (wx, wy), "cpu": (cx, cy), "memory": (mx, my)}


def judged(metric: str, x, y, looks=(1.0,)) -> list:
    """stats' decision per step for one metric as the runner asks it (a family of STEPS x 3): the
    batch decide_all, or compare_metric where the values are the same in every run (what the
    runner calls for such a step)."""
    out = decide_all(x, y, looks, family_size=STEPS * 3, metric=metric)
    rounds = np.repeat(np.arange(x.shape[1]), x.shape[2])
    for i in range(x.shape[0]):
        if np.ptp(x[i]) == 0 and np.ptp(y[i]) == 0 and x[i].flat[0] == y[i].flat[0]:
            out[i] = stats.compare_metric(metric, "A", np.exp(x[i]).ravel(), "B", np.exp(y[i]).ravel(),
                                          base_rounds=rounds, cont_rounds=rounds, looks=looks,
                                          family_size=STEPS * 3)
    return [replace(c, metric=metric) for c in out]


def families(by_metric: dict[str, list]) -> list[list]:
    """Runs of STEPS steps, each a family of steps x metrics, adjusted together."""
    n = len(by_metric["wall"])
    return [stats.adjust_family([by_metric[m][i] for i in range(r, r + STEPS) for m in by_metric])
            for r in range(0, n, STEPS)]


def any_false(fams) -> int:
    return sum(any(c.verdict in (Verdict.SLOWER, Verdict.FASTER) for c in f) for f in fams)


def test_a_a_runs_false_alarms_within_alpha_across_steps_and_metrics():
    n = 1600  # 400 runs of 4 steps x 3 metrics
    data = metrics_of(21, n)
    by = {m: judged(m, *xy) for m, xy in data.items()}
    fams = families(by)
    wrong = any_false(fams)
    same_mem = np.mean([c.verdict == Verdict.SAME for c in by["memory"]])
    print(f"\nA/A runs of 4 steps x 3 metrics, weighted BH: {wrong / len(fams):.2%} with any false "
          f"slower/faster; memory no significant change on {same_mem:.0%} of steps")
    assert wrong <= at_most(len(fams), stats.Criteria().alpha)
    flat = [c for i, c in enumerate(by["memory"]) if i % STEPS == 0]
    assert all(c.verdict == Verdict.SAME and c.method == "identical in every run" for c in flat)


def test_a_a_runs_with_sequential_looks_keep_false_alarms_within_alpha():
    """Each step stops by wall time's rule (should_stop); the other metrics are judged at that
    look with the repeated p-value and interval, then the run is adjusted as one family."""
    n, rounds = 600, 8
    data = metrics_of(22, n, rounds=rounds)
    wall, stopped = sequential(*data["wall"], family_size=STEPS * 3)
    by = {"wall": [replace(c, metric="wall") for c in wall], "cpu": [], "memory": []}
    for m in ("cpu", "memory"):
        x, y = data[m]
        for i in range(n):
            r = int(stopped[i])
            looks = tuple((j + 1) / rounds for j in range(r))
            by[m].append(judged(m, x[i:i + 1, :r], y[i:i + 1, :r], looks)[0])
    fams = families(by)
    wrong = any_false(fams)
    print(f"\nA/A, looks after every round, runs of 4 steps x 3 metrics: {wrong / len(fams):.2%} with any false "
          f"slower/faster (median stop round {np.median(stopped):.0f} of {rounds})")
    assert wrong <= at_most(len(fams), stats.Criteria().alpha)


def test_power_per_metric_in_a_family():
    """+10% CPU on one step of each run, wall unchanged: CPU slower on most runs, nothing else
    flagged; 64 MiB more memory: memory slower on every run."""
    n = 800
    data = metrics_of(23, n)
    x, y = data["cpu"]
    y = y.copy()
    y[np.arange(n) % STEPS == 1] += math.log1p(0.10)
    data["cpu"] = (x, y)
    by = {m: judged(m, *xy) for m, xy in data.items()}
    fams = families(by)
    cpu_hits = sum(f[1 * 3 + 1].verdict == Verdict.SLOWER for f in fams)  # step 1, metric cpu
    print(f"\n+10% CPU (cv 2% own + a quarter of wall's noise) on one step of 4: CPU slower in "
          f"{cpu_hits / len(fams):.1%} of runs")
    assert cpu_hits >= at_least(len(fams), 0.65)
    others = sum(c.verdict in (Verdict.SLOWER, Verdict.FASTER) for f in fams for k, c in enumerate(f) if k != 4)
    assert others <= at_most(len(fams) * (STEPS * 3 - 1), stats.Criteria().alpha)

    data = metrics_of(24, 200, mem_bytes=64 * 2 ** 20)
    by = {m: judged(m, *xy) for m, xy in data.items()}
    fams = families(by)
    mem_hits = [c.verdict == Verdict.SLOWER for f in fams for c in f if c.metric == "memory"]
    print(f"64 MiB more memory: memory slower on {np.mean(mem_hits):.0%} of steps")
    assert all(mem_hits)


def test_weights_average_one_and_favour_wall_time():
    comps = [replace(stats.compare("A", [1, 2, 3], "B", [1, 2, 3]), metric=m) for m in ("wall", "cpu", "memory") * 4]
    w = stats.metric_weights(comps)
    assert sum(w) == pytest.approx(len(comps)) and w[0] == pytest.approx(2.4) and w[1] == w[2] == pytest.approx(0.3)
    assert stats.metric_weights(comps[::3]) == [1.0] * 4
