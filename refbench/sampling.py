"""How a run samples: one Sampling record (runs, warm-up, rounds, interleaving, when to stop), and
how many runs each selected step gets, said once.

A step may pin its runs and warm-up (a 300 GB upload runs once), else its scenario, else the
run's -r / -w. `pipeline.validate` resolves the selection into StepUnits once; the runner, the
shard planner, the family size and the progress count all read the same rule. The request builds
the Sampling, the runner's plan carries it, results.json and calibrate record it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .config import ScenarioSpec, StepSpec, selected
from .units import fmt_duration

UNTIL_DECIDED_RUNS = 60  # --until-decided without a budget: most runs per build and step
UNTIL_DECIDED_SECONDS = 600.0  # --until-decided without a budget: most time per step


@dataclass(frozen=True)
class Sampling:
    runs: int  # per build and step, unless the step or its scenario pins its own
    warmup: int
    rounds: int  # interleaved rounds per step (one hyperfine call each)
    interleave: str = "runs"  # "runs": builds alternate run by run (A B B A ...); "rounds": k A runs, then k B
    until_decided: bool = False
    # most runs per build and step when sequential; None: UNTIL_DECIDED_RUNS for --until-decided
    # alone, and with a budget the budget's own limit (--max-runs must not bind before it)
    max_runs: int | None = None
    # most seconds per step; None: UNTIL_DECIDED_SECONDS for --until-decided alone, and with a
    # budget the step's share of it alone (a fixed cap would stop a step of 40 s rounds, a GC at
    # full size, at a dozen runs with half the budget unspent)
    max_time: float | None = None
    budget: float | None = None  # seconds for the whole run's measuring; sampling is sequential when set
    # rounds every step runs before it may stop; None: all planned rounds (-r is everyone's minimum)
    min_rounds: int | None = None
    # draws which order each pair of interleaved rounds starts with (runner.round_orders); None:
    # the fixed rotation. A run draws one (RunEnv.order_seed) unless --order-seed pins it
    order_seed: int | None = None
    # most runs a build makes on one pair of fresh daemons in a round, where the backend refreshes
    # them (kubo online and offline): a longer round is served by several pairs in turn. None: the
    # step's planned round size (Runner.pair_cap)
    pair_runs: int | None = None

    @property
    def step_seconds(self) -> float | None:
        """The most time a step may take (None: as long as its share of the budget lasts)."""
        if self.max_time is not None:
            return self.max_time
        return None if self.budget is not None else UNTIL_DECIDED_SECONDS

    @property
    def sequential(self) -> bool:
        """Look after every round and stop a step once it is decided (alpha spending keeps the
        error rates): with --until-decided or a --budget."""
        return self.until_decided or self.budget is not None

    def describe(self) -> str:
        """How the run samples, in one line for the dry run and the run's first lines: a budgeted
        run's length is its budget, not its planned rounds, and a newcomer should know it before
        starting one of hours."""
        if self.budget is not None:
            cap = f", {fmt_duration(self.max_time)} a step at most" if self.max_time is not None else ""
            return (f"sequential within a budget of {fmt_duration(self.budget)} of measuring (set it with --budget): "
                    f"each step stops once decided, or when its share is spent{cap}; warm-up {self.warmup}")
        if self.until_decided:
            return (f"sequential (--until-decided): each step stops once decided, at most "
                    f"{self.max_runs or UNTIL_DECIDED_RUNS} runs a build or {fmt_duration(self.step_seconds)} a step; "
                    f"warm-up {self.warmup}")
        return f"fixed: {self.runs} runs a build, warm-up {self.warmup}, in {self.rounds} rounds"

    def record(self) -> dict:
        """The keys results.json's settings (and calibrate's) store these under."""
        d = asdict(self)
        d["budget_seconds"] = d.pop("budget")
        d.pop("max_time")
        for key in ("min_rounds", "order_seed", "pair_runs"):  # absent where unset: the settings files always had
            if d[key] is None:
                d.pop(key)
        return d

    def unit(self, scenario: ScenarioSpec, step: StepSpec) -> "StepUnit":
        return StepUnit(scenario, step, effective_runs(scenario, step, self.runs),
                        effective_warmup(scenario, step, self.warmup))


def effective_runs(scenario: ScenarioSpec, step: StepSpec, runs: int) -> int:
    return step.runs or scenario.runs or runs


def effective_warmup(scenario: ScenarioSpec, step: StepSpec, warmup: int) -> int:
    if step.warmup is not None:
        return step.warmup
    return scenario.warmup if scenario.warmup is not None else warmup


@dataclass(frozen=True)
class StepUnit:
    """One selected step with the runs and warm-up it gets in this run."""
    scenario: ScenarioSpec
    step: StepSpec
    runs: int
    warmup: int

    @property
    def judged(self) -> bool:
        """Whether it can reach a verdict (2+ runs per build): a member of the run's family."""
        return self.runs >= 2


def step_units(scenarios, step_filter, runs: int, warmup: int) -> tuple[StepUnit, ...]:
    return tuple(StepUnit(s, st, effective_runs(s, st, runs), effective_warmup(s, st, warmup))
                 for s, st in selected(scenarios, step_filter))
