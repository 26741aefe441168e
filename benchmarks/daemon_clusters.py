#!/usr/bin/env python3
"""What a daemon's own level does to the per-run test (issue 36): not a test, prints figures.

An online kubo step's runs are served in parts: a fresh pair of daemons per part, at most a
planned round's runs a build (4 at --quick; Runner.pair_cap). Every run a daemon serves shares
that daemon's level (docs/kubo.md: 20-40% apart at times, same allocations), so runs are
independent only between parts. The statistics (stats.contrast) treat them as independent
within rounds. This simulates A/A steps with that structure and gives the share of steps whose
raw p is below alpha, by the intraclass correlation (ICC: the share of a run's log variance that
is its daemon's), beside the same with the test's z divided by the design effect's root
sqrt(1 + (m - 1) ICC), ICC known (an oracle: what a correction could reach at best), and the
power of both at +10%.

Measured ICCs (benchmarks/kubo_daemon.py prints them): daemon CPU 0.12 mean over 12 steps in the
five-minute A/A `aa-60m`, 0.24 in a --quick `aa`, up to 0.43-0.90 on single steps (the tree add
with --raw-leaves --pin=false, small files / add).

Usage: .venv/bin/python benchmarks/daemon_clusters.py [--trials N] [--rounds R] [--part M]
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from refbench.stats import contrast, repeated_p  # noqa: E402

NOISE = 0.10  # a run's total log spread (daemon CPU's 7-19% per step)


def step(rng: np.random.Generator, rounds: int, part: int, icc: float, effect: float):
    """One simulated step: `rounds` rounds of one part each (`part` runs a build on one fresh
    pair), a round level both builds share, a daemon level per build and part, run noise."""
    sb, sw = NOISE * math.sqrt(icc), NOISE * math.sqrt(1 - icc)
    x, y, r = [], [], []
    for k in range(rounds):
        level = rng.normal(0, 0.2)  # the round's drift: cancels within rounds
        x += list(np.exp(level + rng.normal(0, sb) + rng.normal(0, sw, part)))
        y += list(np.exp(level + math.log1p(effect) + rng.normal(0, sb) + rng.normal(0, sw, part)))
        r += [k] * part
    return x, y, r


def rates(trials: int, rounds: int, part: int, icc: float, effect: float, alpha: float = 0.05,
          seed: int = 36) -> tuple[float, float]:
    """Share of steps with p < alpha: as the test stands, and with z / sqrt(design effect)."""
    rng = np.random.default_rng(seed)
    deff = 1 + (part - 1) * icc
    plain = corrected = 0
    for _ in range(trials):
        x, y, r = step(rng, rounds, part, icc, effect)
        c = contrast("a", x, "b", y, base_rounds=r, cont_rounds=r)
        plain += c.p_value is not None and c.p_value < alpha
        if c.z is not None:
            corrected += repeated_p(c.z / math.sqrt(deff), (1.0,)) < alpha
    return plain / trials, corrected / trials


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--part", type=int, default=4)
    a = ap.parse_args()
    se = math.sqrt(0.05 * 0.95 / a.trials)
    print(f"{a.rounds} rounds of {a.part} + {a.part} runs (one pair of daemons a round), run noise {NOISE:.0%}, "
          f"{a.trials} steps a cell (a 5% rate's standard error {se:.1%}); share with p < 0.05:")
    print("| ICC | A/A, the test as it is | A/A, z / sqrt(design effect) | +10%, as it is | +10%, corrected |")
    print("|---|---|---|---|---|")
    for icc in (0.0, 0.12, 0.24, 0.43, 0.9):
        aa = rates(a.trials, a.rounds, a.part, icc, 0.0)
        pw = rates(a.trials, a.rounds, a.part, icc, 0.10)
        print(f"| {icc:.2f} | {aa[0]:.1%} | {aa[1]:.1%} | {pw[0]:.1%} | {pw[1]:.1%} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
