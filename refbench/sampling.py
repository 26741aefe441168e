"""How many runs each selected step gets: the rule, said once.

A step may pin its runs and warm-up (a 300 GB upload runs once), else its scenario, else the
run's -r / -w. `pipeline.validate` resolves the selection into StepUnits once; the runner, the
shard planner, the family size and the progress count all read them.
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import Scenario, Step


def effective_runs(scenario: Scenario, step: Step, runs: int) -> int:
    return step.runs or scenario.runs or runs


def effective_warmup(scenario: Scenario, step: Step, warmup: int) -> int:
    if step.warmup is not None:
        return step.warmup
    return scenario.warmup if scenario.warmup is not None else warmup


@dataclass(frozen=True)
class StepUnit:
    """One selected step with the runs and warm-up it gets in this run."""
    scenario: Scenario
    step: Step
    runs: int
    warmup: int

    @property
    def judged(self) -> bool:
        """Whether it can reach a verdict (2+ runs per build): a member of the run's family."""
        return self.runs >= 2


def step_units(scenarios, step_filter, runs: int, warmup: int) -> tuple[StepUnit, ...]:
    return tuple(StepUnit(s, st, effective_runs(s, st, runs), effective_warmup(s, st, warmup))
                 for s in scenarios for st in s.steps if not step_filter or step_filter(s, st))
