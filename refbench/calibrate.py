"""What a machine and a set of settings can detect, measured without a second build.

One build is measured against itself (A/A) and against itself made P% slower, in the same
interleaved run: every arm runs the same binary through a small shim that sleeps P% of the
binary's own elapsed time after it exits (P = 0 for the baseline and the A/A arm, so all arms pay
the shim's few milliseconds alike). Repeated K times, that gives per step the noise, the rate of
false verdicts, the power at each P, the time a verdict takes, and the runs that would reach 90%
power at 10%. Each arm's verdicts form their own family, as in an ordinary two-build run.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from scipy.stats import t as scipy_t

from . import figures, judge, stats
from .results import Results, Step
from .verdict import Verdict

SHIM = """#!/usr/bin/env bash
# refbench calibrate: run the binary, then sleep {percent}% of its elapsed time (an injected,
# proportional slow-down; 0 for the baseline and A/A arms, which pay the same shim cost)
s=${{EPOCHREALTIME//[.,]/}}
{binary} "$@"
rc=$?
e=${{EPOCHREALTIME//[.,]/}}
us=$(( (e - s) * {percent} / 100 ))
sleep "$((us / 1000000)).$(printf '%06d' $((us % 1000000)))"
exit $rc
"""

BASE, AA = "base", "A/A"


@dataclass(frozen=True)
class Arm:
    label: str
    percent: int  # injected slow-down in percent of the binary's own time


def arms(slowdowns: list[int]) -> list[Arm]:
    """The baseline, the A/A arm, then one arm per slow-down."""
    return [Arm(BASE, 0), Arm(AA, 0)] + [Arm(f"+{p}%", p) for p in slowdowns]


def aa_builds(built: list, workdir: Path, arm_list: list[Arm]) -> list:
    """calibrate --aa: the first build itself under each arm's label, no shim: its CPU time and
    memory are the binary's own, as in an ordinary run, so every metric's bias can be read."""
    return [replace(built[0], label=a.label) for a in arm_list]


def write_shims(binary: Path, arm_list: list[Arm], where: Path) -> list[Path]:
    import shlex
    out = []
    for i, arm in enumerate(arm_list):
        path = Path(where) / f"calibrate-shim-{i}"
        path.write_text(SHIM.format(binary=shlex.quote(str(binary)), percent=arm.percent))
        path.chmod(0o755)
        out.append(path)
    return out


def shim_builds(built: list, workdir: Path, arm_list: list[Arm]) -> list:
    """Every arm is the first build behind its shim, under the arm's label."""
    shims = write_shims(built[0].binary, arm_list, workdir)
    return [replace(built[0], label=a.label, binary=s) for a, s in zip(arm_list, shims)]


# ---- analysis ------------------------------------------------------------------------------------
TRUST_LADDER = (0.01, 0.02, 0.03, 0.05, 0.10, 0.20, 0.50)  # thresholds a step's trust is said in


@dataclass(frozen=True)
class Bias:
    """One step's A/A shift in one metric over the K repetitions: identical builds should measure
    identical, so a mean shift whose interval excludes 0 is bias the statistics cannot see (issue 34)."""
    metric: str
    mean: float  # mean relative shift of the A/A arm against the baseline
    low: float | None  # its 95% interval (t over the repetitions; one repetition: the run's own interval)
    high: float | None
    biased: bool  # the interval, widened for every step and metric checked (Bonferroni), excludes 0
    false_verdicts: int  # repetitions whose A/A verdict in this metric was slower or faster
    reps: int

    @property
    def bound(self) -> float | None:
        """The largest shift the interval allows either way: the bias a user must allow for."""
        return None if self.low is None or self.high is None else max(abs(self.low), abs(self.high))

    def to_json(self) -> dict:
        return {"metric": self.metric, "mean_shift": _r(self.mean), "low": _r(self.low), "high": _r(self.high),
                "biased": self.biased, "false_verdicts": self.false_verdicts, "reps": self.reps}


def bias_of(metric: str, comps: list, checked: int) -> Bias | None:
    """The A/A contrasts of one step and metric over the repetitions as a Bias: the mean of
    their log shifts with a t interval (each repetition one observation; the runs inside one are
    not independent of its state), or with one repetition its own interval. `checked`: the step
    and metric pairs judged in all, over which `biased` is adjusted."""
    comps = [c for c in comps if c is not None and c.rel is not None]
    if not comps:
        return None
    false = sum(c.verdict.moved for c in comps)
    logs = [math.log1p(c.rel) for c in comps]
    mean = statistics.fmean(logs)
    if len(comps) == 1:
        c = comps[0]
        return Bias(metric, c.rel, c.ci_low, c.ci_high, c.verdict.moved, false, 1)
    se = statistics.stdev(logs) / math.sqrt(len(logs))
    t95 = float(scipy_t.ppf(0.975, len(logs) - 1))
    t_adj = float(scipy_t.ppf(1 - 0.025 / max(1, checked), len(logs) - 1))
    biased = se > 0 and abs(mean) > t_adj * se or se == 0 and mean != 0
    return Bias(metric, math.expm1(mean), math.expm1(mean - t95 * se), math.expm1(mean + t95 * se), biased, false,
                len(comps))


def trusted_at(bias: Bias | None, threshold: float) -> float | None:
    """The smallest threshold (of TRUST_LADDER, at least the run's) at which a step's wall verdicts
    can be trusted: twice the bias its A/A interval allows, so that a bias cannot make half of the
    change a user asks about. None: no figure, or more than the ladder's last."""
    if bias is None or bias.bound is None:
        return None
    need = max(threshold, 2 * bias.bound)
    return next((t for t in TRUST_LADDER if t >= need - 1e-12), None)


@dataclass(frozen=True)
class StepCalibration:
    scenario: str
    step: str
    runs: float  # median runs per build
    cv: float  # classic coefficient of variation of the baseline
    robust_cv: float  # the noise the verdicts see (within blocks, outliers discounted)
    false_alarms: int  # repetitions whose A/A verdict was slower or faster
    reps: int
    power: dict[int, float]  # slow-down percent -> share of repetitions called slower
    seconds_to_verdict: dict[int, float | None]  # median measured seconds (baseline + arm) to a verdict
    runs_for_90_at_10: int | None  # runs per build for 90% power at +10%
    seconds_for_90_at_10: float | None  # measured seconds a 2-build step would take at those runs
    bias: tuple[Bias, ...] = ()  # the A/A arm's shift per metric, wall first
    trust: float | None = None  # the threshold its wall verdicts can be trusted at (trusted_at)

    @property
    def biased(self) -> bool:
        return any(b.biased for b in self.bias)

    @property
    def false_alarm_rate(self) -> float:
        return self.false_alarms / self.reps if self.reps else 0.0

    def to_json(self) -> dict:
        return {"scenario": self.scenario, "step": self.step, "runs": self.runs, "cv": _r(self.cv),
                "robust_cv": _r(self.robust_cv), "false_alarms": self.false_alarms, "reps": self.reps,
                "false_alarm_rate": _r(self.false_alarm_rate),
                "power": {str(k): _r(v) for k, v in self.power.items()},
                "seconds_to_verdict": {str(k): _r(v) for k, v in self.seconds_to_verdict.items()},
                "runs_for_90_at_10": self.runs_for_90_at_10,
                "seconds_for_90_at_10": _r(self.seconds_for_90_at_10),
                "bias": [b.to_json() for b in self.bias], "biased": self.biased, "trusted_at": _r(self.trust)}


@dataclass(frozen=True)
class Calibration:
    target: str
    ref: str
    reps: int
    slowdowns: tuple[int, ...]
    settings: dict
    steps: tuple[StepCalibration, ...]
    runs_with_false_alarm: int  # repetitions in which any step's A/A verdict was slower or faster
    wall_seconds: tuple[float, ...]  # per repetition (all arms)
    # per slow-down: the median over multi-run steps of their median measured time to a verdict
    median_seconds_to_verdict: dict[int, float | None]
    runs_with_false_verdict: int = 0  # repetitions in which any step's A/A verdict in any metric moved

    @property
    def false_verdict_interval(self) -> tuple[float, float]:
        """The 95% (Clopper-Pearson) interval of the share of runs with any false verdict."""
        return clopper_pearson(self.runs_with_false_verdict, self.reps)

    @property
    def biased_steps(self) -> tuple[StepCalibration, ...]:
        return tuple(s for s in self.steps if s.biased)

    @property
    def multi_run_steps(self) -> tuple[StepCalibration, ...]:
        return tuple(s for s in self.steps if s.runs >= 2)

    def power_overall(self, percent: int) -> float | None:
        """Share of (multi-run step, repetition) pairs called slower at this slow-down."""
        steps = self.multi_run_steps
        return sum(s.power[percent] for s in steps) / len(steps) if steps else None

    def to_json(self) -> dict:
        return {"schema": "refbench/calibration", "version": 1, "target": self.target, "ref": self.ref,
                "reps": self.reps, "slowdowns": list(self.slowdowns), "settings": self.settings,
                "runs_with_false_alarm": self.runs_with_false_alarm,
                "runs_with_false_verdict": self.runs_with_false_verdict,
                "false_verdict_interval": [_r(x) for x in self.false_verdict_interval],
                "power_overall": {str(p): _r(self.power_overall(p)) for p in self.slowdowns},
                "wall_seconds": [round(w, 1) for w in self.wall_seconds],
                "steps": [s.to_json() for s in self.steps]}


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval of k successes in n trials."""
    from scipy.stats import beta
    if n <= 0:
        return (0.0, 1.0)
    a = (1 - confidence) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return (lo, hi)


def _r(x):
    return round(x, 6) if isinstance(x, float) else x


def analyse(results: list[Results], arm_list: list[Arm], criteria: figures.Criteria, *, target: str, ref: str,
            run_settings: dict) -> Calibration:
    """Aggregate K results of calibration runs (arms as builds) into per-step figures."""
    slowdowns = tuple(a.percent for a in arm_list[2:])
    keyed: dict[tuple[str, str], list[Step]] = {}
    false_runs = 0
    for res in results:
        any_false = False
        for sc, st in res.steps():
            keyed.setdefault((sc.name, st.name), []).append(st)
            any_false |= any(c.contender == AA and c.verdict.moved for c in st.comparisons)
        false_runs += any_false
    n_max = run_settings.get("max_runs") if run_settings.get("sequential") else None
    family = max(1, sum(1 for sts in keyed.values() if sts and _runs(sts[0]) >= 2))
    per_round = max(1, run_settings.get("runs", 2) // max(1, run_settings.get("rounds", 1)))
    steps = [_step(sc, name, sts, slowdowns, criteria, n_max, family, per_round) for (sc, name), sts in keyed.items()]
    checked = sum(len(aa_contrasts(sts)) for sts in keyed.values())
    steps = [with_bias(s, sts, checked, criteria.threshold) for s, sts in zip(steps, keyed.values())]
    any_false = sum(any(c.contender == AA and c.verdict.moved
                        for _, st in res.steps() for c in (*st.comparisons, *st.metric_comparisons))
                    for res in results)
    return Calibration(target, ref, len(results), slowdowns, run_settings, tuple(steps), false_runs,
                       tuple(_wall(r) for r in results), _median_seconds(steps, slowdowns), any_false)


def with_bias(step: StepCalibration, reps: list[Step], checked: int, threshold: float) -> StepCalibration:
    """The step with its A/A bias per metric and the threshold its wall verdicts can be trusted at."""
    found = [bias_of(m, comps, checked) for m, comps in aa_contrasts(reps).items()]
    bias = tuple(b for b in found if b is not None)
    wall = next((b for b in bias if b.metric == "wall"), None)
    return replace(step, bias=bias, trust=trusted_at(wall, threshold))


def aa_contrasts(reps: list[Step]) -> dict[str, list]:
    """metric -> the A/A arm's contrast in each repetition of a step (wall first), for the
    metrics every repetition judged."""
    out: dict[str, list] = {}
    for st in reps:
        for c in (*st.comparisons, *st.metric_comparisons):
            if c.contender == AA:
                out.setdefault(c.metric, []).append(c)
    return {m: comps for m, comps in out.items() if len(comps) == len(reps)}


def _median_seconds(steps: list[StepCalibration], slowdowns: tuple[int, ...]) -> dict[int, float | None]:
    """Per slow-down, the median of the multi-run steps' times to a verdict (None if none was decided)."""
    out = {}
    for p in slowdowns:
        values = [v for s in steps if s.runs >= 2 and (v := s.seconds_to_verdict.get(p)) is not None]
        out[p] = statistics.median(values) if values else None
    return out


def _wall(r: Results) -> float:
    return r.timing.wall_seconds if r.timing and r.timing.wall_seconds is not None else 0.0


def _runs(st: Step) -> int:
    return len(st.builds[BASE].times)


def _step(scenario: str, name: str, reps: list[Step], slowdowns: tuple[int, ...], criteria: figures.Criteria,
          n_max: int | None, family: int, per_round: int) -> StepCalibration:
    def verdict(st, label):
        return next((c.verdict for c in st.comparisons if c.contender == label), None)

    base = [st.builds[BASE] for st in reps]
    cvs = [figures.summarize(list(b.times)).cv for b in base if len(b.times) >= 2]
    # the noise the test itself sees: the A/A contrast's (within blocks, outliers discounted)
    robust = [c.noise for st in reps for c in st.comparisons if c.contender == AA and c.noise]
    noise = statistics.median(robust) if robust else 0.0
    mean_run = statistics.median(statistics.fmean(b.times) for b in base)
    power = {p: sum(verdict(st, f"+{p}%") == Verdict.SLOWER for st in reps) / len(reps) for p in slowdowns}
    seconds = {}
    for p in slowdowns:
        times = [t for st in reps if (t := seconds_to_verdict(st, f"+{p}%", criteria, n_max, family)) is not None]
        seconds[p] = statistics.median(times) if times else None
    need = stats.runs_for(0.10, 0.9, noise, criteria, family, per_round) if noise else None
    return StepCalibration(
        scenario, name, statistics.median(_runs(st) for st in reps), statistics.median(cvs) if cvs else 0.0,
        noise, sum(verdict(st, AA) in (Verdict.SLOWER, Verdict.FASTER) for st in reps), len(reps), power, seconds,
        need, need * 2 * mean_run * 1.05 if need else None)


def seconds_to_verdict(st: Step, label: str, criteria: figures.Criteria, n_max: int | None,
                       family: int) -> float | None:
    """Replay the step's looks for one arm against the baseline, as a two-build run would have
    made them, and return the measured time (both builds' runs) up to the first look at which the
    arm's contrast was decided; None if it never was. Without sequential sampling there is one
    look, at the end."""
    b, c = st.builds[BASE], st.builds[label]
    rounds = sorted(set(b.rounds or [0]))
    looks_at = rounds if n_max else rounds[-1:]
    looks: list[float] = []
    for r in looks_at:
        bi = [i for i, x in enumerate(b.rounds or [0] * len(b.times)) if x <= r]
        ci = [i for i, x in enumerate(c.rounds or [0] * len(c.times)) if x <= r]
        if len(bi) < 2 or len(ci) < 2:
            continue
        n = min(len(bi), len(ci))
        looks.append(min(1.0, n / n_max) if n_max else 1.0)
        comp = judge.contrast(BASE, [b.times[i] for i in bi], label, [c.times[i] for i in ci], criteria,
                              base_rounds=_pick(b.rounds, bi), cont_rounds=_pick(c.rounds, ci),
                              looks=tuple(looks), family_size=family)
        if stats.should_stop(comp, criteria, family) and comp.verdict != Verdict.INCONCLUSIVE:
            return sum(b.times[i] for i in bi) + sum(c.times[i] for i in ci)
    return None


def _pick(values, idx):
    return [values[i] for i in idx] if values else None

