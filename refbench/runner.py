"""Run each scenario's steps through hyperfine, interleaving rounds between builds.

One hyperfine process per round runs every build's command (warm-ups only in the first round);
the order of builds changes from round to round (A B, B A, ...), so drift of the machine over
time does not land on one side. Samples are read from hyperfine's --export-json, never stdout.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import fixtures as fx
from .builds import Build
from .config import Scenario, Step, render
from .errors import RunError
from .stats import INCONCLUSIVE, Comparison, Settings, compare, summarize
from .watchdog import WatchdogStop

log = logging.getLogger(__name__)

# hyperfine options refbench sets itself; passing them through -hf would contradict the plan
MANAGED_HF_FLAGS = {"--runs", "-r", "--warmup", "-w", "--export-json", "--prepare", "-p", "-n",
                    "--command-name", "--min-runs", "-m", "--max-runs", "-M", "--style",
                    "--parameter-scan", "-P", "--parameter-list", "-L", "--export-markdown"}


def check_hyperfine_flags(flags: list[str]) -> None:
    for f in flags:
        name = f.split("=", 1)[0]
        if name in MANAGED_HF_FLAGS:
            raise RunError(f"hyperfine flag {name} is managed by refbench; use refbench's own option instead")


@dataclass
class Plan:
    builds: list[Build]
    backend: object
    workdir: Path
    cache_dir: Path
    runs: int
    warmup: int
    rounds: int
    settings: Settings
    target_flags: list[str] = field(default_factory=list)
    hyperfine_flags: list[str] = field(default_factory=list)
    until_decided: bool = False
    max_runs: int = 60
    max_time: float = 600.0
    verbose: bool = False
    measure_rss: bool = True


@dataclass
class BuildSamples:
    times: list[float] = field(default_factory=list)
    user: list[float] = field(default_factory=list)
    system: list[float] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)  # round index of every sample
    rss_kb: int | None = None
    check: str | None = None
    command: str = ""
    prepare: str | None = None

    def to_json(self) -> dict:
        s = summarize(self.times) if self.times else None
        cpu = [u + k for u, k in zip(self.user, self.system)]
        return {
            "times": [round(t, 9) for t in self.times], "user": [round(t, 9) for t in self.user],
            "system": [round(t, 9) for t in self.system], "exit_codes": self.exit_codes, "rounds": self.rounds,
            "stats": s.to_json() if s else None,
            "cpu_mean": round(sum(cpu) / len(cpu), 9) if cpu else None,
            "cpu_wall_ratio": round(sum(cpu) / sum(self.times), 4) if cpu and sum(self.times) > 0 else None,
            "rss_kb": self.rss_kb, "check": self.check, "command": self.command, "prepare": self.prepare,
        }


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

    def to_json(self) -> dict:
        return {"name": self.step, "runs": self.runs, "warmup": self.warmup, "rounds": self.rounds,
                "builds": {k: v.to_json() for k, v in self.samples.items()},
                "comparisons": [c.to_json() for c in self.comparisons],
                "check_differs": self.check_differs, "hyperfine_seconds": round(self.hyperfine_seconds, 3)}


@dataclass
class ScenarioResult:
    scenario: Scenario
    fixture: fx.FixtureFiles
    steps: list[StepResult]

    def to_json(self) -> dict:
        return {"name": self.scenario.name, "slug": self.scenario.slug, "description": self.scenario.description,
                "fixture": self.fixture.to_json(), "steps": [s.to_json() for s in self.steps]}


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


class Runner:
    def __init__(self, plan: Plan, progress: Callable[[str], None] | None = None, on_round=None):
        self.plan = plan
        self.progress = progress or (lambda msg: None)
        self.on_round = on_round or (lambda: None)
        self.hyperfine_seconds = 0.0
        # commands refbench runs itself, untimed, by kind: setup (scenario/step setup, teardown,
        # cleanup), warmup (each build's first warm-up with its prepare: peak RSS), check
        self.untimed = {"setup": 0.0, "warmup": 0.0, "check": 0.0}
        self.hf_log = plan.workdir / "hyperfine.log"
        self.base_env = {**os.environ, **plan.backend.env}

    # ---- template values ------------------------------------------------------------------
    def values(self, scenario: Scenario, fixture: fx.FixtureFiles, i: int, build: Build, step: Step | None) -> dict:
        sdir = self.plan.workdir / scenario.slug
        work = sdir / f"b{i}"
        work.mkdir(parents=True, exist_ok=True)
        v = {
            "bin": str(build.binary), "extra": list(self.plan.target_flags), "label": build.label, "index": i,
            "fixture": str(fixture.root), "file": str(fixture.first_file), "count": fixture.files,
            "size": fixture.spec.size, "seed": fixture.spec.seed, "work": str(work),
            "dest": str(sdir / ("dest-" + (step.name if step else "scenario")).replace(" ", "-")),
            "scenario": scenario.slug, "step": step.name if step else "",
        }
        v.update(self.plan.backend.context_values(scenario.slug, build.label))
        for key, options in scenario.vary.items():
            v[key] = options[min(i, len(options) - 1)]
        return v

    def shell(self, scenario: Scenario, build: Build, template: str, values: dict) -> str:
        cmd = render(template, values)
        env = self.plan.backend.context_env(scenario.slug, build.label)
        if env:
            exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
            cmd = f"export {exports}; {cmd}"
        return cmd

    @property
    def untimed_seconds(self) -> float:
        return sum(self.untimed.values())

    def sh(self, cmd: str, what: str, capture: bool = False, kind: str = "setup") -> str:
        log.debug("$ %s", cmd)
        t0 = time.monotonic()
        proc = run_group(["sh", "-c", cmd], env=self.base_env, text=True,
                         stdout=subprocess.PIPE if capture else subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.untimed[kind] += time.monotonic() - t0
        if proc.returncode != 0:
            raise _failed(what, cmd, proc)
        return proc.stdout.strip() if capture else ""

    # ---- scenario -------------------------------------------------------------------------
    def run_scenario(self, scenario: Scenario, fixture: fx.FixtureFiles, step_filter=None) -> ScenarioResult:
        plan, builds = self.plan, self.plan.builds
        backend = plan.backend
        backend.open_scenario(scenario, [b.label for b in builds], [str(b.binary) for b in builds], plan.workdir)
        results = []
        try:
            setup_builds = builds[:1] if backend.shared_context else builds
            if scenario.setup:
                for i, b in enumerate(setup_builds):
                    self.progress(f"{scenario.name}: setup ({b.label})")
                    self.sh(self.shell(scenario, b, scenario.setup, self.values(scenario, fixture, i, b, None)),
                            f"{scenario.name}: setup for {b.label}")
            for step in scenario.steps:
                if step_filter and not step_filter(scenario, step):
                    continue
                results.append(self.run_step(scenario, fixture, step))
            if scenario.teardown:
                for i, b in enumerate(setup_builds):
                    self.sh(self.shell(scenario, b, scenario.teardown, self.values(scenario, fixture, i, b, None)),
                            f"{scenario.name}: teardown for {b.label}")
        except WatchdogStop as stop:  # the watchdog ended the run: keep the steps that finished
            if results:
                stop.partial.append(ScenarioResult(scenario, fixture, results))
            raise
        finally:
            backend.close_scenario()
            shutil.rmtree(plan.workdir / scenario.slug, ignore_errors=True)
        return ScenarioResult(scenario, fixture, results)

    # ---- step -----------------------------------------------------------------------------
    def run_step(self, scenario: Scenario, fixture: fx.FixtureFiles, step: Step) -> StepResult:
        plan, builds = self.plan, self.plan.builds
        runs = step.runs or scenario.runs or plan.runs  # a scenario may pin its runs (300G: 1 run)
        warmup = step.warmup if step.warmup is not None else (
            scenario.warmup if scenario.warmup is not None else plan.warmup)
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
        # The first warm-up of each build runs here, untimed: it measures the peak RSS (hyperfine
        # cannot), and the step's check reads what that build's own run produced. Without warm-ups,
        # a check costs one extra untimed run.
        hf_warmup = warmup
        if (warmup >= 1 and plan.measure_rss) or step.check:
            for b, c, p, v in zip(builds, cmds, preps, vals):
                s = samples[b.label]
                s.rss_kb = self.measure_rss(c, p, f"{where}: warm-up of {b.label}")
                if step.check:
                    s.check = self.sh(self.shell(scenario, b, step.check, v), f"{where}: check for {b.label}",
                                      capture=True, kind="check")
            hf_warmup = max(0, warmup - 1)
        per_round = split_runs(runs, plan.rounds)
        orders = round_orders(len(builds), len(per_round))
        t_start = time.monotonic()
        r = 0
        while True:
            if r < len(per_round):
                k, order = per_round[r], orders[r]
            else:  # --until-decided: extra rounds while a comparison is inconclusive
                comps = self.comparisons(builds, samples)
                n_each = min(len(s.times) for s in samples.values())
                if (not plan.until_decided or all(c.verdict != INCONCLUSIVE for c in comps)
                        or n_each >= plan.max_runs or time.monotonic() - t_start >= plan.max_time):
                    break
                k = min(per_round[-1] if per_round else 2, plan.max_runs - n_each)
                order = round_orders(len(builds), r + 1)[r]
            self.progress(f"{where}: round {r + 1}" + (f"/{len(per_round)}" if r < len(per_round) else " (extra)"))
            hf_seconds += self.hyperfine_round(where, r, order, builds, cmds, preps, samples, k,
                                               hf_warmup if r == 0 else 0)
            self.on_round()
            r += 1
        if step.cleanup:
            for b, v in ctx:
                self.sh(self.shell(scenario, b, step.cleanup, v), f"{where}: cleanup for {b.label}")
        checks = {s.check for s in samples.values()}
        comps = self.comparisons(builds, samples)
        return StepResult(scenario.name, step.name, runs, warmup, r, samples, comps, hf_seconds,
                          check_differs=bool(step.check) and len(checks) > 1)

    def comparisons(self, builds: list[Build], samples: dict[str, BuildSamples]) -> list[Comparison]:
        base = builds[0].label
        return [compare(base, samples[base].times, b.label, samples[b.label].times, self.plan.settings)
                for b in builds[1:]]

    def hyperfine_round(self, where: str, r: int, order: list[int], builds: list[Build], cmds: list[str],
                        preps: list[str | None], samples: dict[str, BuildSamples], runs: int, warmup: int) -> float:
        jpath = self.plan.workdir / f"round-{os.getpid()}.json"
        argv = ["hyperfine", "--export-json", str(jpath), "--runs", str(runs), "--warmup", str(warmup),
                "--style", "basic" if self.plan.verbose else "none"]
        for i in order:
            argv += ["-n", builds[i].label]
        if any(preps):
            for i in order:
                argv += ["--prepare", preps[i] or ":"]
        argv += self.plan.hyperfine_flags
        argv += ["--", *[cmds[i] for i in order]] if _hf_supports_dashdash() else [cmds[i] for i in order]
        log.debug("$ %s", shlex.join(argv))
        t0 = time.monotonic()
        with open(self.hf_log, "a") as fh:
            fh.write(f"\n# {where} round {r + 1}\n$ {shlex.join(argv)}\n")
            fh.flush()
            try:
                proc = run_group(argv, env=self.base_env, stdout=None if self.plan.verbose else fh,
                                 stderr=subprocess.PIPE, text=True)
            except FileNotFoundError:
                raise RunError("hyperfine not found on PATH: run `make setup` (or apt-get install hyperfine)") from None
            fh.write(proc.stderr)
        elapsed = time.monotonic() - t0
        self.hyperfine_seconds += elapsed
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            msg = next((ln for ln in lines if "rror" in ln), lines[-1] if lines else f"exit {proc.returncode}")
            raise RunError(f"{where}: hyperfine failed: {msg.strip()}", detail=proc.stderr[-3000:])
        data = json.loads(jpath.read_text())
        jpath.unlink()
        for pos, res in zip(order, data["results"]):
            s = samples[builds[pos].label]
            n = len(res["times"])
            s.times += res["times"]
            s.user += _per_run(res, "user", n)
            s.system += _per_run(res, "system", n)
            s.exit_codes += list(res.get("exit_codes") or [0] * n)
            s.rounds += [r] * n
        return elapsed

    def measure_rss(self, cmd: str, prep: str | None, what: str) -> int | None:
        """Run prepare + command once (untimed); return the command's peak RSS in KiB.

        GNU time forks the command from its own small process: measured from Python, a child's
        ru_maxrss would start at Python's own RSS (Linux keeps the pre-exec high-water mark).
        """
        if prep:
            self.sh(prep, f"{what} (prepare)", kind="warmup")
        gnu_time = _gnu_time()
        t0 = time.monotonic()
        out = self.plan.workdir / f"rss-{os.getpid()}.txt"
        argv = ([gnu_time, "-f", "%M", "-o", str(out)] if gnu_time else []) + ["sh", "-c", cmd]
        proc = run_group(argv, env=self.base_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.untimed["warmup"] += time.monotonic() - t0
        if proc.returncode != 0:
            raise _failed(what, cmd, proc)
        if not gnu_time:
            return None
        try:
            return int(out.read_text().split()[-1])
        except (OSError, ValueError, IndexError):
            return None
        finally:
            out.unlink(missing_ok=True)


_GNU_TIME: str | None | bool = False


def _gnu_time() -> str | None:
    global _GNU_TIME
    if _GNU_TIME is False:
        path = shutil.which("time", path="/usr/bin:/usr/local/bin:" + os.environ.get("PATH", ""))
        ok = False
        if path:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                ok = subprocess.run([path, "-f", "%M", "true"], capture_output=True, timeout=10).returncode == 0
        _GNU_TIME = path if ok else None
        if not ok:
            log.warning("GNU time not found: peak RSS will not be measured (apt-get install time)")
    return _GNU_TIME


def _failed(what: str, cmd: str, proc: subprocess.CompletedProcess) -> RunError:
    """One line naming what failed and the command's last word; the command and stderr as detail."""
    stderr = proc.stderr or ""
    tail = stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    return RunError(f"{what} failed: {tail[0]}", detail=f"command: {cmd}\n{stderr[-2000:]}")


def run_group(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run in a process group of its own. On any exception (Ctrl-C, SIGTERM turned
    into KeyboardInterrupt) the whole group is killed and reaped before the exception goes on,
    so no orphaned upload can write under the prefix while cleanup removes it."""
    capture = kwargs.pop("capture_output", False)
    if capture:
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
    proc = subprocess.Popen(argv, start_new_session=True, **kwargs)
    try:
        out, err = proc.communicate()
    except BaseException:
        for sig, wait in ((signal.SIGINT, 5), (signal.SIGTERM, 5), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):  # grandchildren that outlived the leader
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _per_run(res: dict, key: str, n: int) -> list[float]:
    """hyperfine ≥ 1.15 exports only the mean user/system time; spread it over the runs."""
    v = res.get(key)
    if isinstance(v, list):
        return list(v)
    return [float(v or 0.0)] * n


_DASHDASH: bool | None = None


def _hf_supports_dashdash() -> bool:
    """Whether hyperfine accepts `--` before the commands (so a command may start with '-')."""
    global _DASHDASH
    if _DASHDASH is None:
        try:
            p = subprocess.run(["hyperfine", "--runs", "1", "--style", "none", "--", "true"],
                               capture_output=True, timeout=30)
            _DASHDASH = p.returncode == 0
        except (FileNotFoundError, subprocess.TimeoutExpired):
            _DASHDASH = False
    return _DASHDASH

