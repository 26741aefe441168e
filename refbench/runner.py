"""Schedule each scenario's steps, interleaving rounds between builds, and decide when to stop.

One hyperfine call per round runs every build's command (warm-ups only before the first round);
the order of builds changes from round to round (A B, B A, ...), so drift of the machine over
time does not land on one side. The runner starts no process itself: the plan's Executor runs
hyperfine and the untimed commands (refbench.executor). Every metric the executor measures per
run (wall, CPU, memory, instructions) gets a comparison of its own.
"""
from __future__ import annotations

import contextlib
import logging
import shlex
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Callable

from . import fixtures as fx, results as rs
from .backends.process import child_env
from .builds import BuiltRef
from .config import ScenarioSpec, StepSpec, render
from .errors import RunError
from .executor import Call, Executor, Measurement, Shell, measurements
from .hyperfine import CommandResult
from . import budget as bg
from .sampling import UNTIL_DECIDED_RUNS, Sampling
from .stats import Comparison, Criteria, contrast_metric, should_stop
from .verdict import Verdict
from .units import slug
from .watchdog import WatchdogStop

log = logging.getLogger(__name__)

@dataclass
class Plan:
    builds: list[BuiltRef]
    backend: object
    executor: Executor
    workdir: Path
    cache_dir: Path
    sampling: Sampling
    settings: Criteria
    target_flags: list[str] = field(default_factory=list)
    hyperfine_flags: list[str] = field(default_factory=list)
    verbose: bool = False
    measure_rss: bool = True
    family_size: int = 1  # comparisons in the run (steps x contenders x metrics): the family the verdicts share
    no_shell: str = "auto"  # hyperfine -N: "auto" where every command and prepare needs no shell, "on", "off"
    client_cpus: frozenset[int] | None = None  # CPUs hyperfine and the target run on (None: any)
    clock: Callable[[], float] = time.monotonic  # the budget's clock (the RunEnv's: a mock run's is simulated)
    pass_env: frozenset[str] = frozenset()  # more names the commands see (REFBENCH_PASS_ENV, via MachineSettings)
    # named variants (variants.py), by build label: target flags after -sf's, and environment
    build_flags: dict[str, tuple[str, ...]] = field(default_factory=dict)
    build_env: dict[str, dict[str, str]] = field(default_factory=dict)
    # why a step changed (explain.Explainer): called around each build's untimed run and at the
    # end of each step; what it returns goes into the step's record
    observer: object | None = None

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics every run gets its own figure of, and so a verdict (wall first)."""
        return self.executor.info.metrics(interleaved=self.sampling.interleave == "runs")


@dataclass
class BuildSamples:
    """One build's runs in a step so far: a Measurement per run and the round it ran in. The
    per-metric lists results.json stores are read off the measurements."""
    runs: list[Measurement] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)  # round index of every run
    rss_kb: int | None = None
    check: str | None = None
    command: str = ""
    prepare: str | None = None

    @property
    def times(self) -> list[float]:
        return [m.wall for m in self.runs]

    @property
    def user(self) -> list[float]:
        """Every run's user CPU, or none where a run lacks its own (1.x, --rounds 1)."""
        return _every(m.user for m in self.runs)

    @property
    def system(self) -> list[float]:
        return _every(m.system for m in self.runs)

    @property
    def exit_codes(self) -> list[int | None]:
        return [m.exit_code for m in self.runs]

    @property
    def memory(self) -> list[int | None]:
        return [m.memory for m in self.runs]  # the run's own peak bytes, where measured

    def counter(self, name: str) -> list[int | None]:
        return [m.counters.get(name) for m in self.runs]

    def record(self) -> rs.Samples:
        return rs.Samples.measured(self.times, self.user, self.system, self.exit_codes, self.rounds, self.memory,
                                   rss_kb=self.rss_kb, check=self.check, command=self.command, prepare=self.prepare,
                                   instructions=self.counter("instructions"))

    def values(self, metric: str) -> list[float] | None:
        """Per-run values of a metric, or None unless every run has one (results.metric_values)."""
        v = rs.metric_values(metric, self.times, self.user, self.system, self.memory, self.counter("instructions"))
        return None if v is None else list(v)

    def add(self, res: CommandResult, r: int) -> None:
        runs = measurements(res)
        self.runs += runs
        self.rounds += [r] * len(runs)


def _every(values) -> list:
    """All the values, or [] when any is missing: a metric counts only where every run has it."""
    out = list(values)
    return [] if any(v is None for v in out) else out


@dataclass
class StepResult:
    scenario: str
    step: str
    runs: int
    warmup: int
    rounds: int
    samples: dict[str, BuildSamples]
    comparisons: list[Comparison]
    hyperfine_seconds: float
    check_differs: bool = False
    looks: tuple[float, ...] = (1.0,)  # information fractions at which the verdict was looked at
    stopped: str = "planned"  # why sampling ended: planned, decided, max-runs, max-time, budget
    explain: dict = field(default_factory=dict)  # the observer's fields of rs.Step (requests, profiles, ...)
    network: str | None = None  # S3: the network profile its commands ran under

    def record(self) -> rs.Step:
        """The step as the results file holds it."""
        return rs.Step(name=self.step, runs=self.runs, warmup=self.warmup, rounds=self.rounds,
                       looks=tuple(round(x, 6) for x in self.looks), stopped=self.stopped,
                       builds=MappingProxyType({k: v.record() for k, v in self.samples.items()}),
                       comparisons=tuple(c for c in self.comparisons if c.metric == "wall"),
                       metric_comparisons=tuple(c for c in self.comparisons if c.metric != "wall"),
                       check_differs=self.check_differs,
                       hyperfine_seconds=round(self.hyperfine_seconds, 3), network=self.network, **self.explain)


@dataclass
class ScenarioResult:
    scenario: ScenarioSpec
    fixture: fx.FixtureFiles
    steps: list[StepResult]
    daemon: str | None = None  # kubo: the daemon mode it ran in

    def record(self) -> rs.Scenario:
        return rs.Scenario(name=self.scenario.name, slug=self.scenario.slug, description=self.scenario.description,
                           fixture=self.fixture.record(), steps=tuple(s.record() for s in self.steps),
                           daemon=self.daemon)


@dataclass
class Sequence:
    """One step's sequential sampling as it goes: planned round sizes, whether it looks after each
    round, its most runs per build (fixed at the first look under a budget), the runs at every
    look, and the budget share it was given."""
    per_round: list[int]
    on: bool
    n_max: int
    min_rounds: int
    n_max_cap: int  # --max-runs, or the budget's guard (budget.RUN_CAP)
    t_step: float  # when the step started (its setup and warm-ups count against its share)
    remaining: float  # the run's budget left when the step started
    t_rounds: float = 0.0  # when its first round started (the pace of a run is measured from here)
    allowance: float | None = None  # seconds the step may spend, fixed at its first look under a budget
    by_budget: bool = False  # whether the budget, not the noise or --max-runs, set its most runs
    look_runs: list[int] = field(default_factory=list)

    def end(self, why: str, n_each: int) -> None:
        """A step that stops for time (futility, its share, --max-time) makes its last look the
        final one: its most runs become the runs it has, so the last look spends what is left of
        alpha. Legitimate because that stop follows from the noise and the clock, never from the
        change seen (like a maximum re-estimated from a nuisance parameter); the earlier looks were
        held to stricter boundaries than the new fractions assume, which only errs on the safe side."""
        if why in ("budget", "max-time") and self.on and n_each:
            self.n_max = n_each

    def looks(self) -> tuple[float, ...]:
        """Information fractions of every look so far, against the step's most runs as now fixed."""
        return tuple(min(1.0, n / self.n_max) for n in self.look_runs) or (1.0,)


def round_orders(n_builds: int, rounds: int) -> list[list[int]]:
    """Build order per round: rotate the start, reverse every other round (A B, B A, ...)."""
    base = list(range(n_builds))
    orders = []
    for r in range(rounds):
        k = (r // 2) % n_builds
        order = base[k:] + base[:k]
        if r % 2 == 1:
            order = list(reversed(order))
        orders.append(order)
    return orders


def split_runs(runs: int, rounds: int) -> list[int]:
    rounds = max(1, min(rounds, runs))
    per, extra = divmod(runs, rounds)
    return [per + (1 if i < extra else 0) for i in range(rounds)]


def template_values(scenario: ScenarioSpec, fixture: fx.FixtureFiles, i: int, build: BuiltRef, step: StepSpec | None,
                    workdir: Path, target_flags: list[str], backend) -> dict:
    """The values a command template of build `i` sees (the list is in scenarios.toml's header).
    Pure: a run creates the `work` dir itself; a dry run renders with placeholders for what only
    a started run knows (its workdir, the backend's context)."""
    sdir = workdir / scenario.slug
    v = {
        "bin": str(build.binary), "extra": list(target_flags), "label": build.label, "index": i,
        "fixture": str(fixture.root), "file": str(fixture.first_file), "count": fixture.files,
        "size": fixture.spec.size, "seed": fixture.spec.seed, "work": str(sdir / f"b{i}"),
        # the slug, never the raw name: a step named `x/../../..` must not reach outside the workdir
        "dest": str(sdir / ("dest-" + (slug(step.name) if step else "scenario"))),
        "scenario": scenario.slug, "step": step.name if step else "",
    }
    v.update(backend.context_values(scenario.slug, build.label))
    for key, options in scenario.vary.items():
        v[key] = options[min(i, len(options) - 1)]
    return v


def shell_command(template: str, values: dict, env: dict[str, str]) -> str:
    """A template rendered into the shell command that runs, with the backend's per-build
    environment (IPFS_PATH) exported in front."""
    cmd = render(template, values)
    if env:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        cmd = f"export {exports}; {cmd}"
    return cmd


class Runner:
    def __init__(self, plan: Plan, progress: Callable[[str], None] | None = None, on_round=None):
        self.plan = plan
        self.progress = progress or (lambda msg: None)
        self.on_round = on_round or (lambda: None)
        self.hyperfine_seconds = 0.0
        # commands refbench runs itself, untimed, by kind: setup (scenario/step setup, teardown,
        # cleanup), warmup (each build's first warm-up with its prepare: peak RSS), check
        self.untimed = {"setup": 0.0, "warmup": 0.0, "check": 0.0, "state": 0.0}
        # the budget's bookkeeping: steps to run and done, and the time the done ones took
        self.clock = plan.clock
        self.t_begin = self.clock()
        self.steps_total = 0
        self.steps_done = 0
        self.pilots: list[float] = []  # seconds each step took up to its first look (a budget's reserve per step)
        # allow-listed: no token or secret of refbench's reaches the benchmarked commands
        self.base_env = {**child_env(getattr(plan.backend, "pass_env", frozenset()), extra=plan.pass_env),
                         **plan.backend.env}

    # ---- template values ------------------------------------------------------------------
    def values(self, scenario: ScenarioSpec, fixture: fx.FixtureFiles, i: int, build: BuiltRef, step: StepSpec | None) -> dict:
        v = template_values(scenario, fixture, i, build, step, self.plan.workdir,
                            self.plan.target_flags + list(self.plan.build_flags.get(build.label, ())), self.plan.backend)
        Path(v["work"]).mkdir(parents=True, exist_ok=True)
        return v

    def shell(self, scenario: ScenarioSpec, build: BuiltRef, template: str, values: dict) -> str:
        return shell_command(template, values, {**self.plan.backend.context_env(scenario.slug, build.label),
                                                **self.plan.build_env.get(build.label, {})})

    @property
    def untimed_seconds(self) -> float:
        return sum(self.untimed.values())

    def sh(self, cmd: str, what: str, capture: bool = False, kind: str = "setup", rss: bool = False) -> Shell:
        """An untimed command through the executor; its time counted under `kind`, a failure raised."""
        res = self.plan.executor.shell(cmd, self.base_env, capture=capture, rss=rss, wrap=self.wrap())
        self.untimed[kind] += res.seconds
        if res.returncode != 0:
            raise _failed(what, cmd, res)
        return res

    # ---- scenario -------------------------------------------------------------------------
    def run_scenario(self, scenario: ScenarioSpec, fixture: fx.FixtureFiles, step_filter=None) -> ScenarioResult:
        plan, builds = self.plan, self.plan.builds
        backend = plan.backend
        backend.open_scenario(scenario, [b.label for b in builds], [str(b.binary) for b in builds], plan.workdir)
        daemon = scenario.daemon_mode if backend.kind == "ipfs" else None
        results = []
        try:
            for i, b in enumerate(builds):
                self.build_state(scenario, fixture, i, b, None)
            setup_builds = builds[:1] if backend.shared_context else builds
            if scenario.setup:
                for i, b in enumerate(setup_builds):
                    self.progress(f"{scenario.name}: setup ({b.label})")
                    self.sh(self.shell(scenario, b, scenario.setup, self.values(scenario, fixture, i, b, None)),
                            f"{scenario.name}: setup for {b.label}")
            for step in scenario.selected_steps(step_filter):
                results.append(self.run_step(scenario, fixture, step))
                self.steps_done += 1
            self.use_network(None)
            if scenario.teardown:
                for i, b in enumerate(setup_builds):
                    self.sh(self.shell(scenario, b, scenario.teardown, self.values(scenario, fixture, i, b, None)),
                            f"{scenario.name}: teardown for {b.label}")
        except WatchdogStop as stop:  # the watchdog ended the run: keep the steps that finished
            if results:
                stop.partial.append(ScenarioResult(scenario, fixture, results, daemon))
            raise
        finally:
            backend.close_scenario()
            shutil.rmtree(plan.workdir / scenario.slug, ignore_errors=True)
        return ScenarioResult(scenario, fixture, results, daemon)

    def build_state(self, scenario: ScenarioSpec, fixture: fx.FixtureFiles, i: int, build: BuiltRef,
                    step: StepSpec | None) -> None:
        """The scenario's cached state (step None) or the step's layer over it, for one build,
        where the cache lacks it: its template runs once, untimed, on the repo being built."""
        backend = self.plan.backend
        job = backend.state_job(build.label, step) if scenario.state else None  # only IPFS keeps states
        if job is None:
            return
        what = f"{scenario.name}{f' / {step.name}' if step else ''}: state for {build.label}"
        self.progress(f"{what} (built once, then cached)")
        values = {**self.values(scenario, fixture, i, build, step), "ipfs_path": str(job.path)}
        env = {**backend.context_env(scenario.slug, build.label), "IPFS_PATH": str(job.path)}
        try:
            self.sh(shell_command(job.template, values, env), what, kind="state")
        except BaseException:
            backend.state_done(job, ok=False)
            raise
        backend.state_done(job)

    def use_network(self, step: StepSpec | None) -> None:
        """S3: every command of `step` reaches the server through the network profile it names
        (a shaped proxy, backends/s3.py); None: the scenario's own commands, directly."""
        use = getattr(self.plan.backend, "use_network", None)
        if use is not None:
            use(step.network if step else None)

    # ---- step -----------------------------------------------------------------------------
    def run_step(self, scenario: ScenarioSpec, fixture: fx.FixtureFiles, step: StepSpec) -> StepResult:
        plan, builds, sampling = self.plan, self.plan.builds, self.plan.sampling
        self.use_network(step)
        t_step, remaining = self.clock(), self.budget_remaining()  # setup and warm-ups count against its share
        unit = sampling.unit(scenario, step)  # a scenario may pin its runs (300G: 1 run)
        runs, warmup = unit.runs, unit.warmup
        if scenario.state:  # the state every run of this step restores: built once per build, cached
            for i, b in enumerate(builds):
                self.build_state(scenario, fixture, i, b, step)
                plan.backend.use_state(b.label, step)
        vals = [self.values(scenario, fixture, i, b, step) for i, b in enumerate(builds)]
        cmds = [self.shell(scenario, b, step.command, v) for b, v in zip(builds, vals)]
        preps = [self.shell(scenario, b, step.prepare, v) if step.prepare else None for b, v in zip(builds, vals)]
        samples = {b.label: BuildSamples(command=c, prepare=p) for b, c, p in zip(builds, cmds, preps)}
        where = f"{scenario.name} / {step.name}"
        # setup/cleanup run once per backend context: once for a shared bucket, per build for IPFS
        ctx = list(zip(builds, vals))[:1] if plan.backend.shared_context else list(zip(builds, vals))
        if step.setup:
            for b, v in ctx:
                self.sh(self.shell(scenario, b, step.setup, v), f"{where}: setup for {b.label}")
        hf_seconds = 0.0
        # One untimed run per build here when the step has a check (it reads what that build's own
        # run produced) or when the timer cannot give each run its own peak memory (GNU time
        # measures it on this run); it counts as the first warm-up.
        hf_warmup = warmup
        rss_by_warmup = plan.measure_rss and "memory" not in plan.metrics
        obs = plan.observer
        if (warmup >= 1 and rss_by_warmup) or step.check or (obs is not None and obs.wants_run()):
            for b, c, p, v in zip(builds, cmds, preps, vals):
                self.untimed_build_run(scenario, step, b, samples[b.label], c, p, v, rss=rss_by_warmup,
                                       around=obs.around_run(b.label) if obs is not None else None)
            hf_warmup = max(0, warmup - 1)
        if hf_warmup:
            hf_seconds += self.hyperfine_warmup(where, builds, cmds, preps, hf_warmup)
        seq = self.sequence(runs, t_step, remaining)
        stopped = "planned"
        r = 0
        while True:
            n_each = min(len(s.times) for s in samples.values())
            if r >= len(seq.per_round) or seq.on:
                stop = self.stop_reason(seq, r, n_each, builds, samples) if seq.on else "planned"
                if stop:
                    stopped = stop
                    seq.end(stop, n_each)
                    break
            k = seq.per_round[r] if r < len(seq.per_round) else bg.next_round(seq.per_round[-1], n_each, seq.n_max)
            order = round_orders(len(builds), r + 1)[r]
            self.progress(f"{where}: round {r + 1}" + (f"/{len(seq.per_round)}" if r < len(seq.per_round) else " (extra)"))
            if r == 0:
                seq.t_rounds = self.clock()
            hf_seconds += self.hyperfine_round(where, r, order, builds, cmds, preps, samples, k)
            seq.look_runs.append(min(len(s.times) for s in samples.values()))
            self.on_round()
            r += 1
        for s in samples.values():
            measured = [m for m in s.memory if m is not None]
            if measured and plan.measure_rss:
                s.rss_kb = max(measured) // 1024
        checks = {s.check for s in samples.values()}
        looks_t = seq.looks() if seq.on and seq.look_runs else (1.0,)
        comps = self.comparisons(builds, samples, looks_t)
        explain = {} if obs is None else obs.step_done(
            [b.label for b in builds], [str(b.binary) for b in builds], cmds, preps, comps,
            [sum(s.times) / len(s.times) if s.times else None for s in samples.values()], self.run_untimed, where)
        if step.cleanup:  # after the observer's profiled runs, which leave what a timed run leaves
            for b, v in ctx:
                self.sh(self.shell(scenario, b, step.cleanup, v), f"{where}: cleanup for {b.label}")
        return StepResult(scenario.name, step.name, runs, warmup, r, samples, comps, hf_seconds,
                          check_differs=bool(step.check) and len(checks) > 1, looks=looks_t, stopped=stopped,
                          explain=explain, network=step.network)

    def sequence(self, runs: int, t_step: float, remaining: float) -> "Sequence":
        """A step's sampling state: its planned rounds, whether it looks after each, its most runs."""
        sampling = self.plan.sampling
        per_round = split_runs(runs, sampling.rounds)
        on = sampling.sequential and runs >= 2
        cap = sampling.max_runs or (bg.RUN_CAP if sampling.budget is not None else UNTIL_DECIDED_RUNS)
        min_rounds = len(per_round) if sampling.min_rounds is None else min(sampling.min_rounds, len(per_round))
        n_max = max(cap, runs) if on else runs
        return Sequence(per_round, on, n_max, min_rounds, n_max, t_step, remaining)

    def stop_reason(self, seq: "Sequence", r: int, n_each: int, builds: list[BuiltRef],
                    samples: dict[str, BuildSamples]) -> str | None:
        """Sequential sampling: why this step stops now, or None to run another round.

        Every round is a look; the alpha-spending boundaries in stats keep the false-alarm rate of
        looking after every round at alpha. A step stops when every comparison is decided
        (significant at alpha / family size, so it survives the run-wide adjustment, or shown
        equivalent), at its most runs, at --max-time, or, with a budget, when its share of the
        time left cannot pay for the runs that would decide it (futility: the rest goes to the
        steps after it). With a budget, the step's most runs are fixed at its first look from
        its noise and its share (refbench.budget)."""
        plan, sampling = self.plan, self.plan.sampling
        if r == 0:
            return None
        now = self.clock()
        per_run = (now - seq.t_rounds) / max(1, n_each * len(builds))
        if sampling.budget is not None and seq.allowance is None and r >= seq.min_rounds:
            # the end of the planned minimum (-r, or the default budget's pilot): fix the step's plan
            self.pilots.append(now - seq.t_step)
            pending = max(0, self.steps_total - self.steps_done - 1)
            seq.allowance = bg.share(seq.remaining, pending, sum(self.pilots) / len(self.pilots))
            noise = next((c.noise for c in self.comparisons(builds, samples) if c.metric == "wall"), None)
            cap = n_each + bg.affordable_runs(seq.allowance - (now - seq.t_step), per_run, len(builds))
            seq.n_max = bg.planned_max(noise, plan.settings, plan.family_size, max(1, seq.per_round[-1]),
                                       min(sum(seq.per_round), cap), min(seq.n_max, cap))
            seq.by_budget = seq.n_max == cap < seq.n_max_cap  # what its share pays for set its most runs
        # the stopping rule watches wall time, the primary metric; the others' repeated p-values and
        # intervals stay valid wherever sampling stops
        comps = [c for c in self.comparisons(builds, samples, seq.looks()) if c.metric == "wall"]
        at_most = "budget" if seq.by_budget else "max-runs"  # its most runs: what the budget paid for, or --max-runs
        if all(should_stop(c, plan.settings, plan.family_size) for c in comps):
            undecided = n_each >= seq.n_max and any(c.verdict == Verdict.INCONCLUSIVE for c in comps)
            return at_most if undecided else "decided"
        if n_each >= seq.n_max:
            return at_most
        if now - seq.t_step >= sampling.max_time:
            return "max-time"
        if sampling.budget is None:
            return None if sampling.until_decided or r < len(seq.per_round) else "planned"
        if seq.allowance is None:  # still in the planned minimum
            return None
        # futility asks whether the step could show that nothing changed (runs_needed: the runs
        # that find a change of the threshold's size with the run's power, from the noise alone):
        # most changes are no change, and a real change larger than that is decided sooner
        if n_each < sum(seq.per_round):  # a pilot's noise, from 8 runs, is too rough to give up on
            return None
        need = max((c.runs_needed or seq.n_max) for c in comps)
        left = min(seq.allowance - (now - seq.t_step), self.budget_remaining())
        if bg.futile(need, n_each + bg.affordable_runs(left, per_run, len(builds))):
            return "budget"
        return None

    def budget_remaining(self) -> float:
        """Seconds of the run's budget not yet spent (inf without a budget)."""
        budget = self.plan.sampling.budget
        return float("inf") if budget is None else budget - (self.clock() - self.t_begin)

    def comparisons(self, builds: list[BuiltRef], samples: dict[str, BuildSamples],
                    looks: tuple[float, ...] = (1.0,)) -> list[Comparison]:
        """One comparison per contender and metric with a figure for every run of both builds,
        wall first (the primary metric), each against its own threshold."""
        base = builds[0].label
        b0 = samples[base]
        out = []
        for metric in self.plan.metrics:
            x = b0.values(metric)
            for b in builds[1:]:
                y = samples[b.label].values(metric)
                if x is None or y is None:
                    continue
                # rounds are the blocks: runs are compared within a round only, so drift between rounds
                # cancels; inside a round the builds alternate run by run (ABBA), which cancels drift there
                out.append(contrast_metric(metric, base, x, b.label, y, self.plan.settings,
                                           base_rounds=b0.rounds or None, cont_rounds=samples[b.label].rounds or None,
                                           looks=looks, family_size=self.plan.family_size))
        return out

    def call(self, names: list[str], cmds: list[str], preps: list[str | None], runs: int, warmup: int) -> Call:
        plan = self.plan
        return Call(tuple(names), tuple(cmds), tuple(preps), runs, warmup, no_shell=plan.no_shell,
                    flags=tuple(plan.hyperfine_flags), verbose=plan.verbose, wrap=self.wrap())

    def wrap(self) -> tuple[str, ...]:
        """What the open scenario's commands run behind (hyperfine and untimed ones alike): entry
        into the run's network namespace where the backend keeps one, else nothing."""
        return self.plan.backend.command_prefix()

    def run_hyperfine(self, where: str, call: Call) -> tuple[tuple[CommandResult, ...], float]:
        results, elapsed = self.plan.executor.measure(where, call, self.base_env)
        self.hyperfine_seconds += elapsed
        return results, elapsed

    def hyperfine_warmup(self, where: str, builds: list[BuiltRef], cmds: list[str], preps: list[str | None],
                         warmup: int) -> float:
        """The warm-up runs, by hyperfine (one run each is timed and thrown away with them); a build
        that fails there fails the step already."""
        results, elapsed = self.run_hyperfine(f"{where} warm-up", self.call([b.label for b in builds], cmds, preps,
                                                                             1, warmup - 1))
        warm = {b.label: BuildSamples(command=c) for b, c in zip(builds, cmds)}
        for b, r in zip(builds, results):
            warm[b.label].add(r, 0)
        self.check_exits(f"{where} warm-up", warm)
        return elapsed

    def hyperfine_round(self, where: str, r: int, order: list[int], builds: list[BuiltRef], cmds: list[str],
                        preps: list[str | None], samples: dict[str, BuildSamples], runs: int) -> float:
        """One round: `runs` runs of every build. Interleaved run by run (A B, B A, ... in one
        hyperfine call, so drift between two neighbouring runs is all that lands on a comparison),
        or, with interleave = "rounds", all of a build's runs in a row as plain hyperfine does."""
        if self.plan.sampling.interleave == "runs":
            seq, per_cmd = [i for j in range(runs) for i in (order if j % 2 == 0 else order[::-1])], 1
        else:
            seq, per_cmd = order, runs
        call = self.call([builds[i].label for i in seq], [cmds[i] for i in seq], [preps[i] for i in seq], per_cmd, 0)
        # the executor checked the results' names against the call's, so position is the build
        results, elapsed = self.run_hyperfine(f"{where} round {r + 1}", call)
        for pos, res in zip(seq, results):
            samples[builds[pos].label].add(res, r)
        self.check_exits(f"{where} round {r + 1}", samples)
        return elapsed

    def check_exits(self, where: str, samples: dict[str, BuildSamples]) -> None:
        """A run that exited non-zero (hyperfine -i lets it through) never enters a verdict: a
        crashing contender is fast, not better. The step is an error naming the build."""
        for label, s in samples.items():
            bad = [c for c in s.exit_codes if c != 0]
            if bad:
                code = "a signal" if bad[0] is None else f"exit code {bad[0]}"
                raise RunError(f"{where}: build {label} failed in {len(bad)} of {len(s.exit_codes)} runs ({code})",
                               detail=f"command: {s.command}")

    def run_untimed(self, argv: list[str], what: str, kind: str = "profiled_runs") -> None:
        """An argv run untimed in the run's environment (the observer's profiled runs), by the executor."""
        cmd = shlex.join(argv)
        res = self.plan.executor.shell(cmd, self.base_env, wrap=self.wrap())
        self.untimed[kind] = self.untimed.get(kind, 0.0) + res.seconds
        if res.returncode != 0:
            raise _failed(what, cmd, res)

    def untimed_build_run(self, scenario: ScenarioSpec, step: StepSpec, build: BuiltRef, s: BuildSamples, cmd: str,
                          prep: str | None, values: dict, rss: bool, around=None) -> None:
        """The untimed per-build run before hyperfine's warm-ups: prepare + command once (its own
        peak RSS under GNU time with rss, where the timer cannot give it), then the step's check,
        which reads what this build's own run produced."""
        where = f"{scenario.name} / {step.name}"
        what = f"{where}: warm-up of {build.label}"
        if prep:
            self.sh(prep, f"{what} (prepare)", kind="warmup")
        with around if around is not None else contextlib.nullcontext():  # the observer's counters, if any
            s.rss_kb = self.sh(cmd, what, kind="warmup", rss=rss).rss_kb
        if step.check:
            s.check = self.sh(self.shell(scenario, build, step.check, values), f"{where}: check for {build.label}",
                              capture=True, kind="check").stdout


def _failed(what: str, cmd: str, proc: Shell) -> RunError:
    """One line naming what failed and the command's last word; the command and stderr as detail."""
    stderr = proc.stderr or ""
    tail = stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    return RunError(f"{what} failed: {tail[0]}", detail=f"command: {cmd}\n{stderr[-2000:]}")
