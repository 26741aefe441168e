"""The multi-metric procedure on simulated runs, fixed seeds: every step gets a wall, a CPU and a
memory comparison, and a run's family is its steps x metrics with (weighted) Benjamini–Hochberg.

A run here has 4 steps. Wall time is simulated as in test_stats_sim (drift, trend, 5% outliers,
cv 6%); CPU time shares a quarter of wall time's noise and drift and has its own (cv 2%), so the two
are correlated as on a real machine; peak memory is near-constant: a few 4 KiB pages of jitter
around 30 MiB, and identical to the byte in every run on one step of each run. Rates are asserted
within binomial bounds (test_stats_sim.alarm_bound / at_least): a false-alarm bound fails a
procedure at twice alpha with ≥ 99% probability, so it takes ≥ 600 runs, and each A/A simulation
has a power test beside it.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from refbench import judge, stats
from refbench.verdict import Verdict
from test_stats_sim import alarm_bound, at_least, count, decide_all, sequential, simulate

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
    batch decide_all, or contrast_metric where the values are the same in every run (what the
    runner calls for such a step)."""
    out = decide_all(x, y, looks, family_size=STEPS * 3, metric=metric)
    rounds = np.repeat(np.arange(x.shape[1]), x.shape[2])
    for i in range(x.shape[0]):
        if np.ptp(x[i]) == 0 and np.ptp(y[i]) == 0 and x[i].flat[0] == y[i].flat[0]:
            out[i] = judge.contrast_metric(metric, "A", np.exp(x[i]).ravel(), "B", np.exp(y[i]).ravel(),
                                           base_rounds=rounds, cont_rounds=rounds, looks=looks,
                                           family_size=STEPS * 3)
    return [replace(c, metric=metric) for c in out]


def families(by_metric: dict[str, list]) -> list[list]:
    """Runs of STEPS steps, each a family of steps x metrics, adjusted together."""
    n = len(by_metric["wall"])
    return [judge.adjust_family([by_metric[m][i] for i in range(r, r + STEPS) for m in by_metric])
            for r in range(0, n, STEPS)]


def any_false(fams) -> int:
    return sum(any(c.verdict in (Verdict.SLOWER, Verdict.FASTER) for c in f) for f in fams)


def test_a_a_runs_false_alarms_within_alpha_across_steps_and_metrics():
    n = 2560  # 640 runs of 4 steps x 3 metrics (alarm_bound needs 600)
    data = metrics_of(21, n)
    by = {m: judged(m, *xy) for m, xy in data.items()}
    fams = families(by)
    wrong = any_false(fams)
    same_mem = np.mean([c.verdict == Verdict.SAME for c in by["memory"]])
    print(f"\nA/A runs of 4 steps x 3 metrics, weighted BH: {wrong / len(fams):.2%} with any false "
          f"slower/faster; memory no significant change on {same_mem:.0%} of steps")
    assert wrong <= alarm_bound(len(fams), stats.Criteria().alpha)
    flat = [c for i, c in enumerate(by["memory"]) if i % STEPS == 0]
    assert all(c.verdict == Verdict.SAME and c.method == "identical in every run" for c in flat)


def sequential_run(data: dict, rounds: int) -> tuple[dict[str, list], np.ndarray]:
    """Each step stops by wall time's rule (should_stop, as the runner does); the other metrics are
    judged at that look with the repeated p-value and interval. Per metric, the step's comparisons;
    and the round each step stopped at."""
    wall, stopped = sequential(*data["wall"], family_size=STEPS * 3)
    n = len(wall)
    by = {"wall": [replace(c, metric="wall") for c in wall], "cpu": [None] * n, "memory": [None] * n}
    for m in ("cpu", "memory"):
        x, y = data[m]
        for r in np.unique(stopped):  # the steps that stopped at round r, judged at once
            idx = np.flatnonzero(stopped == r)
            looks = tuple((j + 1) / rounds for j in range(int(r)))
            for i, c in zip(idx, judged(m, x[idx, :r], y[idx, :r], looks)):
                by[m][i] = c
    return by, stopped


def test_a_a_runs_with_sequential_looks_keep_false_alarms_within_alpha():
    """Each step stops by wall time's rule, the other metrics judged where it stopped, then the run
    is adjusted as one family."""
    n, rounds = 2560, 8  # 640 runs of 4 steps
    by, stopped = sequential_run(metrics_of(22, n, rounds=rounds), rounds)
    fams = families(by)
    wrong = any_false(fams)
    print(f"\nA/A, looks after every round, runs of 4 steps x 3 metrics: {wrong / len(fams):.2%} with any false "
          f"slower/faster (median stop round {np.median(stopped):.0f} of {rounds})")
    assert wrong <= alarm_bound(len(fams), stats.Criteria().alpha)


def test_power_with_sequential_looks_in_a_family():
    """The same sequential runs with a change on three of the four steps: +10% wall time on step 1
    (CPU follows a quarter of it), +10% CPU alone on step 2, 64 MiB more memory on step 3. The
    steps stop by wall time's rule, so step 1 stops early once called, while CPU and memory are
    judged wherever wall time stopped: each change is called on most runs, and the unchanged
    members keep false alarms within alpha."""
    n, rounds = 800, 8  # 200 runs of 4 steps
    data = metrics_of(25, n, rounds=rounds)
    step = np.arange(n) % STEPS
    (wx, wy), (cx, cy), (mx, my) = data["wall"], data["cpu"], data["memory"]
    wy, cy, my = wy.copy(), cy.copy(), my.copy()
    wy[step == 1] += math.log1p(0.10)
    cy[step == 1] += 0.25 * math.log1p(0.10)
    cy[step == 2] += math.log1p(0.10)
    my[step == 3] = np.log(np.exp(my[step == 3]) + 64 * 2 ** 20)
    by, stopped = sequential_run({"wall": (wx, wy), "cpu": (cx, cy), "memory": (mx, my)}, rounds)
    fams = families(by)  # each family: step-major, metrics wall, cpu, memory
    wall_hits = sum(f[1 * 3 + 0].verdict == Verdict.SLOWER for f in fams)
    cpu_hits = sum(f[2 * 3 + 1].verdict == Verdict.SLOWER for f in fams)
    mem_hits = sum(f[3 * 3 + 2].verdict == Verdict.SLOWER for f in fams)
    faster = sum(c.verdict == Verdict.FASTER for f in fams for c in f)
    # unchanged: step 0's three metrics, step 1's memory (its CPU moves with wall time), step 2's
    # wall and memory, step 3's wall and CPU
    unchanged = [f[s * 3 + k] for f in fams for s, k in ((0, 0), (0, 1), (0, 2), (1, 2), (2, 0), (2, 2), (3, 0), (3, 1))]
    false = count(unchanged, Verdict.SLOWER, Verdict.FASTER)
    print(f"\nsequential runs of 4 steps x 3 metrics: +10% wall slower in {wall_hits / len(fams):.1%} of runs "
          f"(median stop round {np.median(stopped[step == 1]):.0f} of {rounds}), +10% CPU alone "
          f"{cpu_hits / len(fams):.1%}, +64 MiB memory {mem_hits / len(fams):.1%}; faster {faster}; "
          f"{false / len(unchanged):.2%} of {len(unchanged)} unchanged members slower/faster")
    assert wall_hits >= at_least(len(fams), 0.75)  # 86% at this seed
    assert cpu_hits >= at_least(len(fams), 0.90)  # 98%
    assert mem_hits == len(fams)
    assert false <= alarm_bound(len(unchanged), stats.Criteria().alpha)
    assert np.mean(stopped[step == 1]) < rounds  # called steps stop before n_max


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
    assert others <= alarm_bound(len(fams) * (STEPS * 3 - 1), stats.Criteria().alpha)

    data = metrics_of(24, 200, mem_bytes=64 * 2 ** 20)
    by = {m: judged(m, *xy) for m, xy in data.items()}
    fams = families(by)
    mem_hits = [c.verdict == Verdict.SLOWER for f in fams for c in f if c.metric == "memory"]
    print(f"64 MiB more memory: memory slower on {np.mean(mem_hits):.0%} of steps")
    assert all(mem_hits)


def test_weights_average_one_and_favour_wall_time():
    comps = [replace(stats.contrast("A", [1, 2, 3], "B", [1, 2, 3]), metric=m) for m in ("wall", "cpu", "memory") * 4]
    w = judge.metric_weights(comps)
    assert sum(w) == pytest.approx(len(comps)) and w[0] == pytest.approx(2.4) and w[1] == w[2] == pytest.approx(0.3)
    assert judge.metric_weights(comps[::3]) == [1.0] * 4
