"""How a budgeted run spends its time: the default budget, each step's share, the most runs a step
plans for, and when a step stops because it cannot be decided in time. Pure functions over
numbers; the runner calls them at every look.

The shape follows group-sequential practice: a pilot (two rounds) estimates the step's noise, a
nuisance parameter; the step's maximum runs, which the alpha-spending looks are fractions of, are
then fixed from that noise alone (the runs that decide a change of the threshold's size with 80%
power), never from the observed change, so the looks keep their error rates. Stopping early for
futility, when after its planned runs the step's share of the time left cannot pay for showing
that nothing changed, only ever drops verdicts, so it cannot raise the false-alarm rate.
"""
from __future__ import annotations

import math

from .figures import Criteria
from .stats import runs_for

# The default budget per judged step (2+ runs per build), --quick and full size. 60 s decides a
# --quick s5cmd step of 0.02-0.75 s per run at cv up to ~12% (the demo's noisiest needs ~190 runs
# a build of 18 ms); a full-size step runs ~10x longer per run.
DEFAULT_STEP_SECONDS = {True: 60.0, False: 600.0}
PILOT_ROUNDS = 2  # rounds every step gets before it may stop: the first look needs a noise estimate
SHARE_FACTOR = 2.0  # a step may take up to twice its fair share of the time left, if the others' pilots fit
RUN_CAP = 2000  # runs per build and step, a guard against a step of microseconds; the budget binds first
HORIZON = 2.0  # most runs = this x the runs a fixed-size test needs: room for looks and an unlucky start
FUTILITY = 2.0  # a step stops when showing 'no change' needs more than this x the runs it can still pay for
GROWTH = 0.25  # extra rounds grow with the runs so far: looks ~25% apart, a dozen on the way to 200 runs


def default_budget(judged_steps: int, quick: bool) -> float:
    """Seconds of measuring a run gets when the user sets neither -r nor --budget."""
    return DEFAULT_STEP_SECONDS[bool(quick)] * max(1, judged_steps)


def share(remaining: float, pending: int, pilot_seconds: float) -> float:
    """Seconds the current step may still spend: up to SHARE_FACTOR times its fair share of what is
    left, but never so much that the steps still to come could not run their pilots."""
    fair = remaining / (pending + 1)
    return max(0.0, min(remaining - pending * pilot_seconds, SHARE_FACTOR * fair))


def affordable_runs(seconds: float, seconds_per_run: float, n_builds: int) -> int:
    """Runs per build that `seconds` pays for at the step's pace so far."""
    if seconds_per_run <= 0:
        return RUN_CAP
    return max(0, min(RUN_CAP, int(seconds / (seconds_per_run * n_builds))))


def planned_max(noise: float | None, criteria: Criteria, family_size: int, per_round: int,
                n_now: int, cap: int) -> int:
    """The step's maximum runs per build, from its noise only: what decides a change of the
    threshold's size (or shows none) with the run's power, within `cap`, and at least `n_now`
    (the planned runs, where the budget pays for them: a pilot's noise may be low by chance)."""
    need = runs_for(criteria.threshold, criteria.power, noise, criteria, family_size, per_round) if noise else None
    want = cap if need is None else math.ceil(need * HORIZON)
    return max(n_now, min(cap, want))


def next_round(per_round: int, n_now: int, n_max: int) -> int:
    """Runs per build in the next extra round: the planned round size, growing with the runs so far
    so a step that needs hundreds of runs looks a dozen times, not a hundred."""
    return max(1, min(max(per_round, math.ceil(GROWTH * n_now)), n_max - n_now))


def futile(need: int, reachable: int) -> bool:
    """Whether a step cannot decide in the time left: `need`, the runs that find a change of the
    threshold's size with the run's power (from the noise alone), is more than FUTILITY times the
    runs its share of the time left can still pay for (at those runs the chance is well under half). Stopping here only ever drops a verdict, so
    it cannot raise the false-alarm rate; the time it leaves goes to the steps after it."""
    return need > FUTILITY * reachable
