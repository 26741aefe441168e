"""Schedule each scenario's steps, interleaving rounds between builds, and decide when to stop.

One hyperfine call per round runs every build's command (warm-ups only before the first round);
the order of builds changes from round to round (A B, B A, ...), so drift of the machine over
time does not land on one side. The runner starts no process itself: the bench's Executor runs
hyperfine and the untimed commands (refbench.executor). Every metric the executor measures per
run (wall, CPU, memory, instructions) gets a contrast of its own. A round's shape and its
hyperfine call are rounds.py's, what a look sees (the contrasts so far, the noise) looks.py's: the
runner keeps the schedule, the decisions and the untimed commands around them.
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
from typing import Any, Callable, ContextManager, Mapping, Protocol

from . import fixtures as fx, implementations as impls, results as rs
from .backends import Backend
from .backends.process import child_env, settle_page_cache
from .builds import BuiltRef
from .config import ScenarioSpec, StepSpec, render
from .errors import RunError
from .executor import Call, Executor, Shell  # Call: also the name tests import from here
from .figures import Contrast, Criteria
from .looks import WATCHED, contrasts, noise, unsupported, watched, with_unsupported  # WATCHED: the built-in ones
from .rounds import (  # also the names tests and benchmarks import from here, where they were
    BuildSamples, Rounds, check_exits, collect_usages, interleave_seq, pair_cap, pair_parts, round_hooks,
    round_orders, round_parts, with_probe)
from .sampling import Sampling
from .stopping import CONTINUE, Progress, StepState, StopRule
from .units import slug
from .watchdog import WatchdogStop

log = logging.getLogger(__name__)


class Observer(Protocol):
    """Why a step changed (explain.Explainer): called around each build's untimed run and at the end
    of each step; what step_done returns goes into the step's record (rs.Step's fields)."""

    def wants_run(self) -> bool: ...

    def around_run(self, label: str) -> ContextManager[None]: ...

    def step_done(self, labels: list[str], binaries: list[str], cmds: list[str], preps: list[str | None],
                  contrasts: list[Contrast], means: list[float | None],
                  execute: Callable[[list[str], str], None], where: str) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class Bench:
    """What a Runner measures with: the builds, the backend, the executor, the workdir, the sampling
    and the criteria its stop rule and contrasts use (pipeline.make_bench). A run's plan, what it
    will do, is the pipeline's (pipeline.plan, shard.plan, the dry run)."""
    builds: tuple[BuiltRef | impls.ImplBuild, ...]
    backend: Backend
    executor: Executor
    workdir: Path
    cache_dir: Path
    sampling: Sampling
    criteria: Criteria
    target_flags: tuple[str, ...] = ()
    hyperfine_flags: tuple[str, ...] = ()
    verbose: bool = False
    measure_rss: bool = True
    family_size: int = 1  # contrasts in the run (steps x contenders x metrics): the family the verdicts share
    no_shell: str = "auto"  # hyperfine -N: "auto" where every command and prepare needs no shell, "on", "off"
    client_cpus: frozenset[int] | None = None  # CPUs hyperfine and the target run on (None: any)
    clock: Callable[[], float] = time.monotonic  # the budget's clock (the RunEnv's: a mock run's is simulated)
    steps: int = 1  # steps the run measures: the budget's share of the time left is per step still to come
    pass_env: frozenset[str] = frozenset()  # more names the commands see (REFBENCH_PASS_ENV, via MachineSettings)
    # named variants (variants.py), by build label: target flags after -sf's, and environment
    build_flags: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    build_env: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: MappingProxyType({}))
    observer: Observer | None = None  # why a step changed (explain.Explainer); None: not asked

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics every run gets its own figure of, and so a verdict (wall first)."""
        return self.executor.info.metrics(interleaved=self.sampling.interleave == "runs")


@dataclass(frozen=True)
class StepResult:
    scenario: str
    step: str
    runs: int
    warmup: int
    rounds: int
    samples: Mapping[str, BuildSamples]  # by build label
    # every metric's contrasts, contender by contender: record() splits them into results.Step's
    # `comparisons` (results.json's key) and `metric_comparisons`
    comparisons: tuple[Contrast, ...]
    hyperfine_seconds: float
    check_differs: bool = False
    looks: tuple[float, ...] = (1.0,)  # information fractions at which the verdict was looked at
    spend: tuple[float, ...] | None = None  # their spending times (StepState.spend)
    stopped: str = "planned"  # why sampling ended: planned, decided, max-runs, max-time, budget
    # the observer's fields of rs.Step (requests, profiles, ...)
    explain: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    network: str | None = None  # S3: the network profile its commands ran under

    def record(self) -> rs.Step:
        """The step as the results file holds it."""
        return rs.Step(name=self.step, runs=self.runs, warmup=self.warmup, rounds=self.rounds,
                       looks=tuple(round(x, 6) for x in self.looks), stopped=self.stopped,
                       spend=_spend_record(self.looks, self.spend),
                       builds=MappingProxyType({k: v.record() for k, v in self.samples.items()}),
                       comparisons=tuple(c for c in self.comparisons if c.metric == "wall"),
                       metric_comparisons=tuple(c for c in self.comparisons if c.metric != "wall"),
                       check_differs=self.check_differs,
                       hyperfine_seconds=round(self.hyperfine_seconds, 3), network=self.network, **self.explain)


@dataclass(frozen=True)
class ScenarioResult:
    scenario: ScenarioSpec
    fixture: fx.FixtureFiles
    steps: tuple[StepResult, ...]
    daemon: str | None = None  # kubo: the daemon mode it ran in

    def record(self) -> rs.Scenario:
        return rs.Scenario(name=self.scenario.name, slug=self.scenario.slug, description=self.scenario.description,
                           fixture=self.fixture.record(), steps=tuple(s.record() for s in self.steps),
                           daemon=self.daemon)


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
    """Runs a bench's scenarios. Its one piece of state across steps is `progress`, a Progress value
    (refbench.stopping) it replaces as it goes and the pipeline reads; each step's sampling is a
    StepState the StopRule advances."""

    def __init__(self, bench: Bench, status: Callable[[str], None] | None = None, on_round=None,
                 on_state: Callable[[float], None] | None = None, stop_rule: type[StopRule] = StopRule):
        self.bench = bench
        self.status = status or (lambda msg: None)
        self.on_round = on_round or (lambda: None)
        self.on_state = on_state or (lambda seconds: None)  # seconds a state took to build, cached from then on
        self.clock = bench.clock
        # `stop_rule`: the stopping rule's kind, made from the bench here (a test's variant of it)
        self.rule = stop_rule(bench.sampling, bench.criteria, bench.family_size, len(bench.builds), t_begin=self.clock())
        self.progress = Progress(steps_total=bench.steps)
        # allow-listed: no token or secret of refbench's reaches the benchmarked commands
        self.base_env = {**child_env(getattr(bench.backend, "pass_env", frozenset()), extra=bench.pass_env),
                         **bench.backend.env}
        self.rounds = Rounds(executor=bench.executor, backend=bench.backend, env=self.base_env,
                             interleave=bench.sampling.interleave, no_shell=bench.no_shell,
                             flags=tuple(bench.hyperfine_flags), verbose=bench.verbose, timed=self.timed)

    def timed(self, seconds: float) -> None:
        """A hyperfine call's seconds, counted in the run's progress (Rounds calls it)."""
        self.progress = self.progress.timed(seconds)

    # ---- template values ------------------------------------------------------------------
    def values(self, scenario: ScenarioSpec, fixture: fx.FixtureFiles, i: int, build: BuiltRef, step: StepSpec | None) -> dict:
        v = template_values(scenario, fixture, i, build, step, self.bench.workdir,
                            impls.extra_flags(build, self.bench.target_flags, self.bench.build_flags.get(build.label, ())),
                            self.bench.backend)
        Path(v["work"]).mkdir(parents=True, exist_ok=True)
        return v

    def shell(self, scenario: ScenarioSpec, build: BuiltRef, template: str, values: dict) -> str:
        return shell_command(template, values, {**self.bench.backend.context_env(scenario.slug, build.label),
                                                **self.bench.build_env.get(build.label, {})})

    def sh(self, cmd: str, what: str, capture: bool = False, kind: str = "setup", rss: bool = False) -> Shell:
        """An untimed command through the executor; its time counted under `kind`, a failure raised."""
        res = self.bench.executor.shell(cmd, self.base_env, capture=capture, rss=rss, wrap=self.wrap())
        self.progress = self.progress.spent(kind, res.seconds)
        if res.returncode != 0:
            raise _failed(what, cmd, res)
        return res

    # ---- scenario -------------------------------------------------------------------------
    def run_scenario(self, scenario: ScenarioSpec, fixture: fx.FixtureFiles, step_filter=None) -> ScenarioResult:
        bench, builds = self.bench, self.bench.builds
        backend = bench.backend
        if backend.kind == "ipfs":  # Helia is its own node: a fresh repo directory, no kubo daemon
            backend.in_process = frozenset(b.label for b in builds if impls.in_process(b))
        backend.open_scenario(scenario, [b.label for b in builds], [str(b.binary) for b in builds], bench.workdir)
        daemon = scenario.daemon_mode if backend.kind == "ipfs" else None
        results = []
        try:
            for i, b in enumerate(builds):
                self.build_state(scenario, fixture, i, b, None)
            setup_builds = builds[:1] if backend.shared_context else builds
            self.scenario_setup(scenario, fixture)
            for step in scenario.selected_steps(step_filter):
                results.append(self.run_step(scenario, fixture, step))
            self.use_network(None)
            for i, b in enumerate(setup_builds):
                if teardown := impls.scenario_template(b, scenario, "teardown"):
                    self.sh(self.shell(scenario, b, teardown, self.values(scenario, fixture, i, b, None)),
                            f"{scenario.name}: teardown for {b.label}")
        except (WatchdogStop, KeyboardInterrupt):  # the watchdog or the user ended the run: the steps that finished stay
            if results:
                self.progress = self.progress.scenario_done(ScenarioResult(scenario=scenario, fixture=fixture, steps=tuple(results), daemon=daemon))
            raise
        finally:
            backend.close_scenario()
            shutil.rmtree(bench.workdir / scenario.slug, ignore_errors=True)
        done = ScenarioResult(scenario=scenario, fixture=fixture, steps=tuple(results), daemon=daemon)
        self.progress = self.progress.scenario_done(done)
        return done

    def scenario_setup(self, scenario: ScenarioSpec, fixture: fx.FixtureFiles) -> int:
        """The scenario's setup (an implementation's own, where it is one): once per backend
        context, and again on the fresh repos of a daemon restart (fresh_daemons). How many ran."""
        builds, ran = self.bench.builds, 0
        for i, b in enumerate(builds[:1] if self.bench.backend.shared_context else builds):
            if setup := impls.scenario_template(b, scenario, "setup"):
                self.status(f"{scenario.name}: setup ({b.label})")
                self.sh(self.shell(scenario, b, setup, self.values(scenario, fixture, i, b, None)),
                        f"{scenario.name}: setup for {b.label}")
                ran += 1
        return ran

    def step_setup(self, scenario: ScenarioSpec, step: StepSpec, ctx: list, where: str) -> int:
        """The step's setup for each (build, template values) of ctx. How many ran."""
        ran = 0
        for b, v in ctx:
            if setup := impls.step_template(b, scenario, step, "setup"):
                self.sh(self.shell(scenario, b, setup, v), f"{where}: setup for {b.label}")
                ran += 1
        return ran

    def build_state(self, scenario: ScenarioSpec, fixture: fx.FixtureFiles, i: int, build: BuiltRef,
                    step: StepSpec | None) -> None:
        """The scenario's cached state (step None) or the step's layer over it, for one build,
        where the cache lacks it: its template runs once, untimed, on the repo being built."""
        backend = self.bench.backend
        job = backend.state_job(build.label, step) if scenario.state else None  # only IPFS keeps states
        if job is None:
            return
        what = f"{scenario.name}{f' / {step.name}' if step else ''}: state for {build.label}"
        self.status(f"{what} (built once, then cached)")
        values = {**self.values(scenario, fixture, i, build, step), "ipfs_path": str(job.path)}
        env = {**backend.context_env(scenario.slug, build.label), "IPFS_PATH": str(job.path)}
        try:
            seconds = self.sh(shell_command(job.template, values, env), what, kind="state").seconds
        except BaseException:
            backend.state_done(job, ok=False)
            raise
        backend.state_done(job)
        self.on_state(seconds)  # not measuring: the budget's end moves by as much

    def use_network(self, step: StepSpec | None) -> None:
        """S3: every command of `step` reaches the server through the network profile it names
        (a shaped proxy, backends/s3.py); None: the scenario's own commands, directly."""
        use = getattr(self.bench.backend, "use_network", None)
        if use is not None:
            use(step.network if step else None)

    # ---- step -----------------------------------------------------------------------------
    def run_step(self, scenario: ScenarioSpec, fixture: fx.FixtureFiles, step: StepSpec) -> StepResult:
        bench, sampling = self.bench, self.bench.sampling
        # the builds that can do the step: an implementation without a command for it is `not
        # supported` (no run, no failure); without the baseline, or with no contender, nothing is compared
        builds = [b for b in bench.builds if impls.supports(b, scenario, step)]
        if builds[:1] != list(bench.builds[:1]) or len(builds) < 2:
            return self.unsupported_step(scenario, step)
        self.use_network(step)
        if scenario.state:  # the state every run of this step restores: built once per build, cached
            for i, b in enumerate(builds):
                self.build_state(scenario, fixture, i, b, step)
                bench.backend.use_state(b.label, step)
        t_step = self.clock()  # setup and warm-ups count against its share; a state built once does not
        remaining = self.rule.budget_left(t_step, self.progress)
        unit = sampling.unit(scenario, step)  # a scenario may pin its runs (300G: 1 run)
        runs, warmup = unit.runs, unit.warmup
        vals = [self.values(scenario, fixture, i, b, step) for i, b in enumerate(builds)]
        cmds = [self.shell(scenario, b, impls.step_template(b, scenario, step, "command"), v) for b, v in zip(builds, vals)]
        preps = [self.shell(scenario, b, p, v) if (p := impls.step_template(b, scenario, step, "prepare")) else None
                 for b, v in zip(builds, vals)]
        samples = {b.label: BuildSamples(command=c, prepare=p) for b, c, p in zip(builds, cmds, preps)}
        where = f"{scenario.name} / {step.name}"
        # setup/cleanup run once per backend context: once for a shared bucket, per build for IPFS
        ctx = list(zip(builds, vals))[:1] if bench.backend.shared_context else list(zip(builds, vals))
        self.step_setup(scenario, step, ctx, where)
        hf_seconds = 0.0
        for b in builds:  # every build's binary in the page cache the same way for the runs below
            settle_page_cache(b.binary)
        fresh = (scenario, fixture, step, ctx, where)
        # the warm-ups warm the repos and daemons the rounds use; restarted in the warm-ups' order
        warm_order = round_orders(len(builds), 2, sampling.order_seed)[1]
        self.fresh_daemons(*fresh, timed=False, order=[builds[i].label for i in warm_order])
        # One untimed run per build here when the step has a check (it reads what that build's own
        # run produced) or when the timer cannot give each run its own peak memory (GNU time
        # measures it on this run); it counts as the first warm-up.
        hf_warmup = warmup
        rss_by_warmup = bench.measure_rss and "memory" not in bench.metrics
        obs = bench.observer
        if (warmup >= 1 and rss_by_warmup) or step.check or (obs is not None and obs.wants_run()):
            for b, c, p, v in zip(builds, cmds, preps, vals):
                self.untimed_build_run(scenario, step, b, samples[b.label], c, p, v, rss=rss_by_warmup,
                                       around=obs.around_run(b.label) if obs is not None else None)
            hf_warmup = max(0, warmup - 1)
        if hf_warmup:
            hf_seconds += self.rounds.warmup(where, builds, cmds, preps, hf_warmup, warm_order)
        rule, state = self.rule, self.rule.start(runs, t_step, remaining)
        while True:
            now = self.clock()
            if rule.needs_plan(state):  # the end of its pilot under a budget: fix its share and most runs
                state = rule.plan(state, noise(builds, samples), now, self.progress)
            elif rule.needs_replan(state):  # a later look: its most runs again, from the noise as now known
                state = rule.replan(state, noise(builds, samples), now)
            # the rule watches wall time and the daemon's metrics where one runs (what kubo's users
            # pay for online); the client's CPU and memory are contrasted once, at the end
            comps = contrasts(builds, samples, bench.metrics, bench.criteria, bench.family_size, state.looks(),
                              state.spend(), metrics=watched()) if state.on and state.rounds else []
            stopped, state = rule.decide(state, comps, now, self.progress)
            if stopped is not CONTINUE:
                break
            r, k = state.rounds, state.next_runs()
            order = round_orders(len(builds), r + 1, sampling.order_seed)[r]
            self.status(f"{where}: round {r + 1}" + (f"/{len(state.per_round)}" if r < len(state.per_round)
                                                      else " (extra)"))
            started = None
            for part, n in round_parts(order, k, self.pair_cap(state)):
                # a fresh repo's first add is a cold one
                if self.fresh_daemons(*fresh, timed=True, order=[builds[i].label for i in part]) and warmup:
                    # in the part's order reversed: the build that leads it warms up last, as
                    # before the first round, and no build holds one place in every refreshed round
                    hf_seconds += self.rounds.warmup(where, builds, cmds, preps, 1, part[::-1])
                started = self.clock() if started is None else started
                hf_seconds += self.rounds.round(where, r, part, builds, cmds, preps, samples, n)
            state = state.after_round(min(len(s.times) for s in samples.values()), started)
            self.on_round()
        self.progress = self.progress.step_done(state)
        for s in samples.values():
            measured = [m for m in s.memory if m is not None]
            if measured and bench.measure_rss:
                s.rss_kb = max(measured) // 1024
        checks = {s.check for s in samples.values()}
        looks_t = state.looks() if state.on and state.look_runs else (1.0,)
        spend_t = state.spend() if state.on and state.look_runs else None
        comps = contrasts(builds, samples, bench.metrics, bench.criteria, bench.family_size, looks_t, spend_t)
        explain = {} if obs is None else obs.step_done(
            [b.label for b in builds], [str(b.binary) for b in builds], cmds, preps, comps,
            [sum(s.times) / len(s.times) if s.times else None for s in samples.values()], self.run_untimed, where)
        for b, v in ctx:  # after the observer's profiled runs, which leave what a timed run leaves
            if cleanup := impls.step_template(b, scenario, step, "cleanup"):
                self.sh(self.shell(scenario, b, cleanup, v), f"{where}: cleanup for {b.label}")
        comps = with_unsupported(bench.builds, comps)
        return StepResult(scenario=scenario.name, step=step.name, runs=runs, warmup=warmup, rounds=state.rounds,
                          samples=MappingProxyType(samples), comparisons=tuple(comps), hyperfine_seconds=hf_seconds,
                          check_differs=bool(step.check) and len(checks) > 1, looks=looks_t, spend=spend_t,
                          stopped=stopped, explain=MappingProxyType(dict(explain)), network=step.network)

    def unsupported_step(self, scenario: ScenarioSpec, step: StepSpec) -> StepResult:
        """A step the baseline, or every contender, has no command for: each contender `not supported`."""
        return StepResult(scenario=scenario.name, step=step.name, runs=0, warmup=0, rounds=0,
                          samples=MappingProxyType({}), comparisons=unsupported(self.bench.builds),
                          hyperfine_seconds=0.0, stopped="not supported", network=step.network)

    def wrap(self) -> tuple[str, ...]:
        """What the open scenario's commands run behind (hyperfine and untimed ones alike): entry
        into the run's network namespace where the backend keeps one, else nothing."""
        return self.bench.backend.command_prefix()

    def fresh_daemons(self, scenario: ScenarioSpec, fixture: fx.FixtureFiles, step: StepSpec, ctx: list, where: str,
                      timed: bool, order: list[str] | None = None) -> bool:
        """The backend's hook before a step's warm-ups and before each round (IpfsBackend.before_round):
        every K rounds each build gets a fresh repo and daemon, untimed, so one repo's drift is noise
        between rounds, not a build's (issue 36); what the scenario's and the step's setup put in
        the old repo is put back. Whether it restarted them (before a round, the caller then
        warms them up: the first add into a fresh repo costs its daemon 30-60% more CPU). `order`:
        the builds' labels in the order the coming round (or warm-up) runs them, which the restart
        follows, so no build is always the first restarted."""
        hook = getattr(self.bench.backend, "before_round", None)
        seconds = hook(timed, order=order or ()) if hook is not None else 0.0
        if seconds:
            self.status(f"{where}: fresh repos and daemons ({seconds:.1f} s)")
            self.progress = self.progress.spent("daemon_restart", seconds)
            if self.scenario_setup(scenario, fixture) + self.step_setup(scenario, step, ctx, where):
                # the setup's work (an add) leaves its daemon's heap grown, and a step's runs would
                # start from that peak: the runs get daemons that did not do it, on the same repos
                self.progress = self.progress.spent("daemon_restart",
                                                    self.bench.backend.restart_daemons(fresh=False, order=order or ()))
        return bool(seconds)

    def pair_cap(self, state: StepState) -> int | None:
        """The most runs a build makes on one pair of daemons in a round (rounds.pair_cap says why)."""
        return pair_cap(getattr(self.bench.backend, "refreshes_daemons", False), self.bench.sampling.pair_runs,
                        state.per_round)

    def run_untimed(self, argv: list[str], what: str, kind: str = "profiled_runs") -> None:
        """An argv run untimed in the run's environment (the observer's profiled runs), by the executor."""
        self.sh(shlex.join(argv), what, kind=kind)

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
        if step.check:  # the scenario's own check for every build: one check, whatever made the files
            s.check = self.sh(self.shell(scenario, build, step.check, values), f"{where}: check for {build.label}",
                              capture=True, kind="check").stdout


def _spend_record(looks: tuple[float, ...], spend: tuple[float, ...] | None) -> tuple[float, ...] | None:
    """The spending times results.json keeps, where they differ from the looks: a look taken before
    the plan (read against the budget's guard) or under a smaller plan than the last."""
    if spend is None or all(abs(a - b) < 1e-9 for a, b in zip(looks, spend)):
        return None
    return tuple(round(x, 6) for x in spend)


def _failed(what: str, cmd: str, proc: Shell) -> RunError:
    """One line naming what failed and the command's last word; the command and stderr as detail."""
    stderr = proc.stderr or ""
    tail = stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    return RunError(f"{what} failed: {tail[0]}", detail=f"command: {cmd}\n{stderr[-2000:]}")
