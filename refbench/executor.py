"""What starts processes for a run: the seam between scheduling (runner) and measuring.

The runner decides what runs when and when to stop; an Executor runs it. The real one,
`HyperfineExecutor`, is built once per run from a probed `hyperfine.HyperfineInfo`, so the
version, `--` support and counters are asked once, not per step; tests and `--executor mock` use
refbench.mock's MockExecutor, which returns per-run measurements without starting a process (as
hyperfine's own MockExecutor does).
"""
from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Protocol

from . import hyperfine, paths
from .backends.process import run_group
from .errors import RunError
from .hyperfine import CommandResult, HyperfineInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Call:
    """One hyperfine call: the commands in the order they run, each with its name and prepare."""
    names: tuple[str, ...]
    commands: tuple[str, ...]
    prepares: tuple[str | None, ...]
    runs: int
    warmup: int
    no_shell: str = "auto"
    flags: tuple[str, ...] = ()
    verbose: bool = False
    wrap: tuple[str, ...] = ()  # what hyperfine runs behind (entry into the run's network namespace)
    concludes: tuple[str | None, ...] = ()  # per command, after each run (the daemon probes, refbench.daemon)

    def argv(self, info: HyperfineInfo, jpath: Path) -> list[str]:
        return [*self.wrap] + hyperfine.command_line(jpath, list(self.names), list(self.commands), list(self.prepares), self.runs,
                                      self.warmup, info=info, verbose=self.verbose, no_shell=self.no_shell,
                                      extra_flags=list(self.flags), concludes=list(self.concludes))


@dataclass(frozen=True)
class Measurement:
    """One run's own figures, in hyperfine 2.0's shape: wall, user and system CPU seconds, peak
    memory, counters (instructions, where counted) and the exit code (None: killed by a signal).
    One record per run rather than one list per metric, so a new metric is a field here, not a
    list threaded through every module that carries samples. A figure the timer does not give
    each run of its own (1.x memory, 1.x CPU over several runs) is None."""
    wall: float
    user: float | None = None
    system: float | None = None
    memory: int | None = None
    counters: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    exit_code: int | None = 0


def measurements(res: CommandResult) -> tuple[Measurement, ...]:
    """A command's results as one Measurement per run (CPU only where every run has its own)."""
    n = res.runs
    cpu = len(res.user) == n and len(res.system) == n
    memory = res.memory_bytes or (None,) * n
    instructions = res.instructions or (None,) * n
    return tuple(Measurement(res.times[i], res.user[i] if cpu else None, res.system[i] if cpu else None,
                             memory[i], MappingProxyType({} if instructions[i] is None
                                                         else {"instructions": instructions[i]}),
                             res.exit_codes[i])
                 for i in range(n))


@dataclass(frozen=True)
class Shell:
    """A command refbench runs itself, untimed (setup, teardown, check, the per-build run)."""
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    rss_kb: int | None = None  # the command's own peak, when asked for and GNU time is there


class Executor(Protocol):
    info: HyperfineInfo

    def measure(self, where: str, call: Call, env: dict) -> tuple[tuple[CommandResult, ...], float]:
        """Run one hyperfine call; its results, checked against the call's names, and seconds."""

    def shell(self, cmd: str, env: dict, capture: bool = False, rss: bool = False,
              wrap: tuple[str, ...] = ()) -> Shell:
        """Run one shell command untimed (behind `wrap`); with rss, measure its own peak memory."""


def own_results(results: tuple[CommandResult, ...], info: HyperfineInfo, interleaved: bool
                ) -> tuple[CommandResult, ...]:
    """Results with only the figures that are each run's own: 1.x memory (a running maximum
    across every child) dropped, and 1.x CPU where a command ran more than once per call (a mean)."""
    keep = set(info.metrics(interleaved))
    out = []
    for r in results:
        mem = r.memory_bytes if "memory" in keep and r.own_memory else None
        cpu_ok = "cpu" in keep and (r.per_run_cpu or r.runs == 1)
        out.append(CommandResult(r.name, r.times, r.user if cpu_ok else (), r.system if cpu_ok else (), r.exit_codes,
                                 mem, cpu_ok, r.parameters,
                                 r.instructions if "instructions" in keep else None, mem is not None))
    return tuple(out)


class HyperfineExecutor:
    """Runs hyperfine calls and shell commands in their own process groups (run_group), logs every
    hyperfine command line and its stderr to `log_path`."""

    def __init__(self, info: HyperfineInfo, workdir: Path, *, cpus: frozenset[int] | None = None,
                 verbose: bool = False):
        self.info = info
        self.workdir = workdir
        self.cpus = cpus
        self.verbose = verbose
        self.log_path = workdir / "hyperfine.log"
        self._gnu_time: str | None | bool = False  # probed on first use

    @classmethod
    def probe(cls, workdir: Path, **kw) -> "HyperfineExecutor":
        info = HyperfineInfo.probe()
        if info is None:
            raise RunError("hyperfine not found on PATH: run `refbench setup` (`make setup` in a checkout)")
        return cls(info, workdir, **kw)

    def measure(self, where: str, call: Call, env: dict) -> tuple[tuple[CommandResult, ...], float]:
        jpath = self.workdir / f"hf-{os.getpid()}.json"
        argv = call.argv(self.info, jpath)
        log.debug("$ %s", shlex.join(argv))
        t0 = time.monotonic()
        with open(self.log_path, "a") as fh:
            fh.write(f"\n# {where}\n$ {shlex.join(argv)}\n")
            fh.flush()
            try:
                proc = run_group(argv, env=env, stdout=None if self.verbose else fh, stderr=subprocess.PIPE,
                                 text=True, cpus=self.cpus)
            except FileNotFoundError:
                raise RunError(f"hyperfine not found at {self.info.path}: run `refbench setup`") from None
            fh.write(proc.stderr)
        elapsed = time.monotonic() - t0
        if proc.returncode != 0:
            msg = hyperfine.failure_message(proc.stderr, proc.returncode)
            raise RunError(f"{where}: hyperfine failed: {msg}", detail=proc.stderr[-3000:])
        try:
            results = hyperfine.read_export(jpath)
        finally:
            jpath.unlink(missing_ok=True)
        results = hyperfine.match_results(results, list(call.names), where)
        return own_results(results, self.info, interleaved=call.runs == 1), elapsed

    def gnu_time(self) -> str | None:
        if self._gnu_time is False:
            path = shutil.which("time", path="/usr/bin:/usr/local/bin:" + paths.layout().environ.get("PATH", ""))
            ok = False
            if path:
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    ok = subprocess.run([path, "-f", "%M", "true"], capture_output=True, timeout=10).returncode == 0
            self._gnu_time = path if ok else None
            if not ok:
                log.warning("GNU time not found: peak RSS will not be measured (apt-get install time)")
        return self._gnu_time

    def shell(self, cmd: str, env: dict, capture: bool = False, rss: bool = False,
              wrap: tuple[str, ...] = ()) -> Shell:
        """GNU time forks the command from its own small process: measured from Python, a child's
        ru_maxrss would start at Python's own RSS (Linux keeps the pre-exec high-water mark)."""
        log.debug("$ %s", cmd)
        gnu_time = self.gnu_time() if rss else None
        out = self.workdir / f"rss-{os.getpid()}.txt"
        argv = [*wrap] + ([gnu_time, "-f", "%M", "-o", str(out)] if gnu_time else []) + ["sh", "-c", cmd]
        t0 = time.monotonic()
        proc = run_group(argv, env=env, text=True, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
        seconds = time.monotonic() - t0
        rss_kb = None
        if gnu_time:
            with contextlib.suppress(OSError, ValueError, IndexError):
                rss_kb = int(out.read_text().split()[-1])
            out.unlink(missing_ok=True)
        return Shell(proc.returncode, (proc.stdout or "").strip() if capture else "", proc.stderr or "", seconds,
                     rss_kb if proc.returncode == 0 else None)
