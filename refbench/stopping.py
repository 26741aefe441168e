"""The measuring loop as values: a step's sampling state, the run's progress, and the rule that
decides after each round whether a step stops. Pure: the runner measures, then asks
`StopRule.decide(state, contrasts, now, progress)` for (decision, new state), and keeps the
run's `Progress` as a value the pipeline reads, so no counter is set from outside and no query
changes what it reads.

Every round is a look; the alpha-spending boundaries in stats keep the false-alarm rate of looking
after every round at alpha. A step stops when every contrast is decided (significant at alpha /
family size, so it survives the run-wide adjustment, or shown equivalent), at its most runs, at
--max-time, or, with a budget, when its share of the time left cannot pay for the runs that would
decide it (futility: the rest goes to the steps after it). With a budget, the step's most runs are
set at its first look from its noise and its share (`StopRule.plan`, refbench.budget), and may
grow at every later look as the noise is known better (`StopRule.replan`): each look keeps the
spending time it had when it was taken (`StepState.spend`), so the alpha it spent stays spent.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Sequence

from . import budget as bg
from .sampling import UNTIL_DECIDED_RUNS, Sampling
from .figures import Contrast, Criteria
from .stats import should_stop
from .verdict import Verdict

CONTINUE = None  # the decision to run another round


@dataclass(frozen=True)
class StepState:
    """One step's sequential sampling as it goes: planned round sizes, whether it looks after each
    round, its most runs per build (fixed at the first look under a budget), the runs at every
    look, and the budget share it was given."""
    per_round: tuple[int, ...]
    on: bool
    n_max: int
    min_rounds: int
    n_max_cap: int  # --max-runs, or the budget's guard (budget.RUN_CAP)
    t_step: float  # when the step started (its setup and warm-ups count against its share)
    remaining: float  # the run's budget left when the step started
    t_rounds: float = 0.0  # when its first round started (the pace of a run is measured from here)
    allowance: float | None = None  # seconds the step may spend, fixed at its first look under a budget
    by_budget: bool = False  # whether the budget, not the noise or --max-runs, set its most runs
    look_runs: tuple[int, ...] = ()  # runs per build at every look so far
    look_max: tuple[int, ...] = ()  # the most runs in force at every look (its spending time's denominator)
    pilot_seconds: float | None = None  # seconds to its first look under a budget (fixed with the allowance)

    @property
    def rounds(self) -> int:
        return len(self.look_runs)

    @property
    def n_each(self) -> int:
        return self.look_runs[-1] if self.look_runs else 0

    def looks(self) -> tuple[float, ...]:
        """Information fractions of every look so far, against the step's most runs as now fixed."""
        return tuple(min(1.0, n / self.n_max) for n in self.look_runs) or (1.0,)

    def spend(self) -> tuple[float, ...]:
        """Alpha-spending time of every look so far: its runs over the most runs in force when it was
        taken. Where the most runs never grew, these are `looks()`; where they grew, the earlier
        looks keep the alpha they spent (stats._bounds), never less than the look before."""
        out, last = [], 0.0
        for n, m in zip(self.look_runs, self.look_max):
            last = max(last, min(1.0, n / m))
            out.append(last)
        return tuple(out) or (1.0,)

    def with_max(self, n_max: int, **kw) -> "StepState":
        """The state with its most runs set to `n_max` from the look just taken on (that look's
        spending time is read against it)."""
        return dataclasses.replace(self, n_max=n_max, look_max=self.look_max[:-1] + (n_max,), **kw)

    def next_runs(self) -> int:
        """Runs per build in the next round: the planned size, then growing extra rounds."""
        if self.rounds < len(self.per_round):
            return self.per_round[self.rounds]
        return bg.next_round(self.per_round[-1], self.n_each, self.n_max)

    def after_round(self, n_each: int, started: float) -> "StepState":
        """The state once a round that began at `started` ended with `n_each` runs per build."""
        return dataclasses.replace(self, look_runs=self.look_runs + (n_each,), look_max=self.look_max + (self.n_max,),
                                   t_rounds=started if not self.look_runs else self.t_rounds)

    def ended(self, why: str) -> "StepState":
        """A step that stops for time (its share, --max-time) makes its last look the final one: its
        most runs become the runs it has, so the last look spends what is left of alpha. Legitimate
        because that stop follows from the noise and the clock, never from the change seen (like a
        maximum re-estimated from a nuisance parameter); the earlier looks keep the spending times
        they had."""
        if why in ("budget", "max-time") and self.on and self.n_each:
            return self.with_max(self.n_each)
        return self


@dataclass(frozen=True)
class Progress:
    """The run's measuring so far, as the pipeline reads it: the steps planned and done, the
    seconds each budgeted step took to its first look (the budget's reserve per step still to
    come), hyperfine's seconds, the untimed commands' seconds by kind, and the scenarios that
    finished (with the steps that finished of one a watchdog stopped)."""
    steps_total: int = 0
    steps_done: int = 0
    pilots: tuple[float, ...] = ()
    hyperfine_seconds: float = 0.0
    # commands refbench runs itself, untimed, by kind: setup (scenario/step setup, teardown,
    # cleanup), warmup (each build's first warm-up with its prepare: peak RSS), check, state
    untimed: Mapping[str, float] = field(default_factory=lambda: MappingProxyType(
        {"setup": 0.0, "warmup": 0.0, "check": 0.0, "state": 0.0}))
    finished: tuple = ()  # runner.ScenarioResult, in the order they ran

    @property
    def untimed_seconds(self) -> float:
        return sum(self.untimed.values())

    @property
    def pending(self) -> int:
        """Steps still to come after the one running."""
        return max(0, self.steps_total - self.steps_done - 1)

    def timed(self, seconds: float) -> "Progress":
        return dataclasses.replace(self, hyperfine_seconds=self.hyperfine_seconds + seconds)

    def spent(self, kind: str, seconds: float) -> "Progress":
        return dataclasses.replace(self, untimed=MappingProxyType({**self.untimed,
                                                                   kind: self.untimed.get(kind, 0.0) + seconds}))

    def step_done(self, state: StepState) -> "Progress":
        pilots = self.pilots + ((state.pilot_seconds,) if state.pilot_seconds is not None else ())
        return dataclasses.replace(self, steps_done=self.steps_done + 1, pilots=pilots)

    def scenario_done(self, result) -> "Progress":
        return dataclasses.replace(self, finished=self.finished + (result,))


@dataclass(frozen=True)
class StopRule:
    """The run's stopping rule: its sampling and criteria, the family the verdicts share, and the
    number of builds (a run costs one of each)."""
    sampling: Sampling
    criteria: Criteria
    family_size: int
    n_builds: int
    t_begin: float = 0.0  # when the run's measuring began (its budget is spent from here)

    def start(self, runs: int, t_step: float, remaining: float) -> StepState:
        """A step's state before its first round: its planned rounds, whether it looks after each,
        its most runs; `remaining` is the run's budget left when it started (budget_left)."""
        sampling = self.sampling
        per_round = tuple(split_runs(runs, sampling.rounds))
        on = sampling.sequential and runs >= 2
        cap = sampling.max_runs or (bg.RUN_CAP if sampling.budget is not None else UNTIL_DECIDED_RUNS)
        min_rounds = len(per_round) if sampling.min_rounds is None else min(sampling.min_rounds, len(per_round))
        n_max = max(cap, runs) if on else runs
        return StepState(per_round, on, n_max, min_rounds, n_max, t_step, remaining)

    def budget_left(self, now: float, progress: Progress | None = None) -> float:
        """Seconds of the run's budget not yet spent at `now` (inf without a budget). Building a
        state (a million-block repo, a step's layer over it) is not measuring and is done once per
        machine and build: it spends none (a first full-size GC run here lost 15 of its 40 minutes
        to it, a second run none)."""
        budget = self.sampling.budget
        built = progress.untimed.get("state", 0.0) if progress is not None else 0.0
        return float("inf") if budget is None else budget - (now - self.t_begin - built)

    def needs_replan(self, state: StepState) -> bool:
        """Whether the step's most runs may be planned again at this look (StopRule.replan): under a
        budget, at a look after the one that planned them."""
        return (state.on and self.sampling.budget is not None and state.allowance is not None
                and state.rounds > state.min_rounds)

    def needs_plan(self, state: StepState) -> bool:
        """Whether the step just ended its planned minimum (-r, or the default budget's pilot)
        under a budget, and its plan is to be fixed now."""
        return (state.on and self.sampling.budget is not None and state.allowance is None and state.rounds > 0
                and state.rounds >= state.min_rounds)

    def plan(self, state: StepState, noise: float | None, now: float, progress: Progress) -> StepState:
        """Fix the step's share of the time left and its most runs, from the pilot's noise alone
        (never the change seen, so the looks keep their error rates)."""
        pilot = now - state.t_step
        pilots = progress.pilots + (pilot,)
        allowance = bg.share(state.remaining, progress.pending, sum(pilots) / len(pilots))
        cap = state.n_each + bg.affordable_runs(allowance - pilot, self.per_run(state, now), self.n_builds)
        n_max = bg.planned_max(noise, self.criteria, self.family_size, max(1, state.per_round[-1]),
                               min(sum(state.per_round), cap), min(state.n_max, cap))
        return state.with_max(n_max, allowance=allowance, pilot_seconds=pilot,
                              by_budget=n_max == cap < state.n_max_cap)  # its share set its most runs

    def replan(self, state: StepState, noise: float | None, now: float) -> StepState:
        """At a look after the plan: the step's most runs again from its noise as now estimated, the
        pilot's being too rough to bind (16 runs: a dag-pb GC step planned 22 runs a build from
        its pilot, stopped there undecided with a sixth of the run's budget unspent). Only
        upward, within its share and --max-runs, and never so far that this look's spending
        time falls below the last one's; from the noise alone, never the change seen, which
        varies independently of it (within-round spread), so the looks keep their error rates:
        variance-only re-estimation, as in an internal pilot design (Wittes & Brittain 1990),
        with each look's spent alpha kept (StepState.spend)."""
        if not self.needs_replan(state) or not noise:
            return state
        cap = state.n_each + bg.affordable_runs(state.allowance - (now - state.t_step), self.per_run(state, now),
                                                self.n_builds)
        prev_n, prev_m = state.look_runs[-2], state.look_max[-2]
        # this look's spending time stays above the last one's, so it still spends alpha
        cap = min(cap, state.n_max_cap, (state.n_each * prev_m - 1) // prev_n)
        want = bg.planned_max(noise, self.criteria, self.family_size, max(1, state.per_round[-1]), state.n_max, cap)
        if want <= state.n_max:
            return state
        return state.with_max(want, by_budget=want == cap < state.n_max_cap)

    def per_run(self, state: StepState, now: float) -> float:
        """Seconds per run at the step's pace so far."""
        return (now - state.t_rounds) / max(1, state.n_each * self.n_builds)

    def decide(self, state: StepState, contrasts: Sequence[Contrast], now: float,
               progress: Progress) -> tuple[str | None, StepState]:
        """(why the step stops now, or CONTINUE; the state after the decision). `contrasts` are
        the step's contrasts at `state.looks()` of the metrics the rule watches (looks.WATCHED:
        wall time, and the daemon's metrics where one runs): it stops once all are decided, or
        once none of those still undecided could be in the time left. Every metric's repeated
        p-values and intervals stay valid wherever it stops, so watching more costs no false alarms."""
        why = self._why(state, contrasts, now, progress)
        return why, state if why is CONTINUE else state.ended(why)

    def _why(self, state: StepState, comps: Sequence[Contrast], now: float, progress: Progress) -> str | None:
        sampling, n_each = self.sampling, state.n_each
        if not state.on:
            return CONTINUE if state.rounds < len(state.per_round) else "planned"
        if state.rounds == 0:
            return CONTINUE
        at_most = "budget" if state.by_budget else "max-runs"  # its most runs: what the budget paid for, or --max-runs
        if all(should_stop(c, self.criteria, self.family_size) for c in comps):
            undecided = n_each >= state.n_max and any(c.verdict == Verdict.INCONCLUSIVE for c in comps)
            return at_most if undecided else "decided"
        if n_each >= state.n_max:
            return at_most
        limit = sampling.step_seconds
        if limit is not None and now - state.t_step >= limit:
            return "max-time"
        if sampling.budget is None:
            return CONTINUE if sampling.until_decided or state.rounds < len(state.per_round) else "planned"
        if state.allowance is None:  # still in the planned minimum
            return CONTINUE
        # futility asks whether the step could show that nothing changed (runs_needed: the runs
        # that find a change of the threshold's size with the run's power, from the noise alone):
        # most changes are no change, and a real change larger than that is decided sooner
        if n_each < sum(state.per_round):  # a pilot's noise, from 8 runs, is too rough to give up on
            return CONTINUE
        # per metric still undecided, the runs its contrasts need (the most any contender's
        # needs); the step goes on while one of those metrics can be decided: with wall time
        # alone, what wall time needs, as before the daemon's metrics were watched
        open_metrics = {c.metric for c in comps if not should_stop(c, self.criteria, self.family_size)}
        need = min(max((c.runs_needed or state.n_max) for c in comps if c.metric == m) for m in open_metrics)
        left = min(state.allowance - (now - state.t_step), self.budget_left(now, progress))
        if bg.futile(need, n_each + bg.affordable_runs(left, self.per_run(state, now), self.n_builds)):
            return "budget"
        return CONTINUE


def split_runs(runs: int, rounds: int) -> list[int]:
    """`runs` over `rounds` rounds, as evenly as they go (the first rounds take the remainder)."""
    rounds = max(1, min(rounds, runs))
    per, extra = divmod(runs, rounds)
    return [per + (1 if i < extra else 0) for i in range(rounds)]
