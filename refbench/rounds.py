"""A step's rounds as hyperfine calls: the order of the builds in each, its parts, the interleaving of
their runs, the daemon's probes around each run, and what a call gives back (each build's runs, its
exit codes checked). The runner decides how many rounds and runs (refbench.stopping); this module
runs one warm-up or one round through the bench's executor, apart from that decision, so the
shape of a round is said once and tested without a runner.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np

from . import results as rs
from .backends import Backend
from .builds import BuiltRef
from .errors import RunError
from .executor import Call, Executor, Measurement, measurements
from .hyperfine import CommandResult, use_no_shell
from .metrics import table
from .stopping import split_runs

if TYPE_CHECKING:
    from .daemon import Probe


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
    daemon: dict[str, list] = field(default_factory=dict)  # daemon metric -> per-run figures (refbench.daemon)

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
                                   instructions=self.counter("instructions"),
                                   daemon={**self.daemon, **{m.name: [m.read(r) for r in self.runs]
                                                             for m in table().of("timer") if not m.stored}})

    def values(self, metric: str) -> list[float] | None:
        """Per-run values of a metric, or None unless every run has one (results.metric_values): a
        timer's metric read off each run's Measurement by its record (metrics.Metric.read), a
        probed one from what the probes gave (`daemon`)."""
        m = table().get(metric)
        if m is None:
            return None
        raw = {"wall": self.times, metric: [m.read(r) for r in self.runs] if m.source == "timer" else self.daemon.get(metric)}
        v = rs.metric_values(metric, raw)
        return None if v is None else list(v)

    def add(self, res: CommandResult, r: int) -> None:
        runs = measurements(res)
        self.runs += runs
        self.rounds += [r] * len(runs)

    def add_daemon(self, usages: list, role: str = "daemon") -> None:
        """The daemon's (or, role "server", the S3 server's) figures of the runs just added
        (refbench.daemon.Usage, in run order)."""
        for u in usages:
            for metric, value in u.values(role).items():
                self.daemon.setdefault(metric, []).append(value)

    def probed(self, role: str) -> int:
        """How many runs have the daemon's (or the server's) figures so far."""
        return len(self.daemon.get(f"{role}-cpu", ()))


def _every(values) -> list:
    """All the values, or [] when any is missing: a metric counts only where every run has it."""
    out = list(values)
    return [] if any(v is None for v in out) else out


@dataclass(frozen=True)
class Rounds:
    """A step's hyperfine calls (its warm-ups and its rounds) through the bench's executor, in the
    run's environment, behind the open scenario's prefix (backend.command_prefix, asked per call:
    the scenario changes). `timed` counts each call's seconds into the run's progress as soon as it
    returns, before a failed run's error is raised, so the time spent is never lost with the step."""
    executor: Executor
    backend: Backend
    env: Mapping[str, str]  # the run's allow-listed environment (Runner.base_env)
    interleave: str  # Sampling.interleave
    no_shell: str  # Bench.no_shell
    flags: tuple[str, ...]  # Bench.hyperfine_flags
    verbose: bool
    timed: Callable[[float], None]

    def call(self, names: list[str], cmds: list[str], preps: list[str | None], runs: int, warmup: int) -> Call:
        return Call(tuple(names), tuple(cmds), tuple(preps), runs, warmup, no_shell=self.no_shell,
                    flags=self.flags, verbose=self.verbose, wrap=self.backend.command_prefix())

    def run(self, where: str, call: Call) -> tuple[tuple[CommandResult, ...], float]:
        results, elapsed = self.executor.measure(where, call, self.env)
        self.timed(elapsed)
        return results, elapsed

    def warmup(self, where: str, builds: list[BuiltRef], cmds: list[str], preps: list[str | None],
               warmup: int, order: list[int]) -> float:
        """The warm-up runs, by hyperfine, thrown away; a build that fails there fails the step
        already. Interleaved like a round (interleave_seq), in `order`: before a step's rounds, the
        second order of its first pair of rounds, so that no build warms up in the server's wake of
        the other's warm-up and then leads the first round (issue 34); before a refreshed round,
        that round's reversed."""
        seq, per_cmd = interleave_seq(order, warmup, self.interleave)
        results, elapsed = self.run(f"{where} warm-up", self.call(
            [builds[i].label for i in seq], [cmds[i] for i in seq], [preps[i] for i in seq], per_cmd, 0))
        warm = {b.label: BuildSamples(command=c) for b, c in zip(builds, cmds)}
        for pos, res in zip(seq, results):
            warm[builds[pos].label].add(res, 0)
        check_exits(f"{where} warm-up", warm)
        return elapsed

    def round(self, where: str, r: int, order: list[int], builds: list[BuiltRef], cmds: list[str],
              preps: list[str | None], samples: dict[str, BuildSamples], runs: int) -> float:
        """One round: `runs` runs of every build. Interleaved run by run (A B, B A, ... in one
        hyperfine call, so drift between two neighbouring runs is all that lands on a contrast),
        or, with interleave = "rounds", all of a build's runs in a row as plain hyperfine does."""
        seq, per_cmd = interleave_seq(order, runs, self.interleave)
        probes = self.probes(builds)
        hooks = round_hooks(probes, self.no_shell, [cmds[i] for i in seq], [preps[i] for i in seq], seq)
        call = self.call([builds[i].label for i in seq], [cmds[i] for i in seq],
                         [with_probe(preps[i], hooks[i]) for i in seq], per_cmd, 0)
        if any(hooks):
            call = replace(call, concludes=tuple(h[1] if h else None for h in (hooks[i] for i in seq)))
        # the executor checked the results' names against the call's, so position is the build
        results, elapsed = self.run(f"{where} round {r + 1}", call)
        for pos, res in zip(seq, results):
            samples[builds[pos].label].add(res, r)
        check_exits(f"{where} round {r + 1}", samples)
        for b, p in zip(builds, probes):
            if p is not None:
                s = samples[b.label]
                s.add_daemon(collect_usages(p.out, len(s.runs) - s.probed(p.role), f"{where} round {r + 1}, {b.label}"),
                             p.role)
        return elapsed

    def probes(self, builds: list[BuiltRef]) -> list[Probe | None]:
        """Each build's probes (backend.daemon_probes), None where it runs no daemon."""
        get = getattr(self.backend, "daemon_probes", None)
        return [get(b.label) if get is not None else None for b in builds]


def check_exits(where: str, samples: Mapping[str, BuildSamples]) -> None:
    """A run that exited non-zero (hyperfine -i lets it through) never enters a verdict: a
    crashing contender is fast, not better. The step is an error naming the build."""
    for label, s in samples.items():
        bad = [c for c in s.exit_codes if c != 0]
        if bad:
            code = "a signal" if bad[0] is None else f"exit code {bad[0]}"
            raise RunError(f"{where}: build {label} failed in {len(bad)} of {len(s.exit_codes)} runs ({code})",
                           detail=f"command: {s.command}")


def round_orders(n_builds: int, rounds: int, seed: int | None = None) -> list[list[int]]:
    """Build order per round. Rounds come in pairs, the second the first reversed (A B, B A), so
    within a pair every build leads once and trails once and linear drift cancels. Which order a
    pair starts with is drawn from `seed` (the run's order seed, results.json settings): whatever
    favours a position (the first run of a hyperfine call, the first round of a step, an odd round
    left unpaired) then lands on a build at random, as noise the statistics see, never on the same
    build in every run. seed None: the fixed rotation (the first pair starts with the baseline)."""
    orders = []
    for r in range(rounds):
        order = _pair_order(n_builds, r // 2, seed)
        orders.append(list(reversed(order)) if r % 2 == 1 else order)
    return orders


def _pair_order(n_builds: int, pair: int, seed: int | None) -> list[int]:
    """The order a pair of rounds starts with: drawn per pair from the seed (a round's order never
    depends on how many rounds came before it), or the fixed rotation."""
    if seed is None:
        k = pair % n_builds
        return list(range(k, n_builds)) + list(range(k))
    return [int(i) for i in np.random.default_rng([seed, pair]).permutation(n_builds)]


def pair_cap(refreshes: bool, pair_runs: int | None, per_round: Sequence[int]) -> int | None:
    """The most runs a build makes on one pair of daemons in a round: the step's planned round
    size (`per_round`, or Sampling.pair_runs), where the backend gives the rounds fresh daemons
    (`refreshes`); None where it does not. Why (issue 36): each daemon has a level of its own
    (20-40% apart at times, with the same allocations), which every run it serves shares; the
    budget's later rounds grew to 13-16 runs a build, so one pair's split outweighed the rest (a
    false `faster` on wall and daemon CPU in a full A/A). Served in parts of the planned size,
    each by a fresh pair, no pair carries more than a planned round's runs."""
    if not refreshes:
        return None
    return pair_runs or max(per_round)


def pair_parts(runs: int, cap: int | None) -> list[int]:
    """A round's `runs` (per build) in parts of at most `cap`, as even as they go (None: one part)."""
    if not cap or runs <= cap:
        return [runs]
    return split_runs(runs, -(-runs // cap))


def round_parts(order: list[int], runs: int, cap: int | None) -> list[tuple[list[int], int]]:
    """A round as the runner runs it: (the builds' order, runs a build) of each part (pair_parts),
    the lead alternating from the round's `order`, so each pair of parts has both builds lead once."""
    return [(order if j % 2 == 0 else order[::-1], n) for j, n in enumerate(pair_parts(runs, cap))]


def with_probe(prep: str | None, hooks: tuple[str, str] | None) -> str | None:
    """A run's prepare followed by the daemon's before-probe, last, right before the timed command
    (so the reset of its peak memory is as late as it can be)."""
    if hooks is None:
        return prep
    return f"{prep} && {hooks[0]}" if prep else hooks[0]


def round_hooks(probes: list[Probe | None], no_shell: str, cmds: list[str], preps: list[str | None],
                seq: list[int]) -> list[tuple[str, str] | None]:
    """Each build's two probe hooks as a round's hyperfine call runs them (Probe.hooks): commands of
    their own where the call, with them as commands of their own, would be run with -N; else bodies
    for the shell hyperfine runs them through anyway, sparing a shell start per hook. The shell is
    chosen once, here, as hyperfine.command_line would choose it, and the bodies keep that choice
    (they need a shell, and the call had one). `cmds` and `preps` are the call's, in its order
    `seq` (positions of builds)."""
    own = [None if p is None else p.hooks(own_shell=True) for p in probes]
    if not any(own):
        return own
    wrapped = [with_probe(prep, own[i]) for prep, i in zip(preps, seq)]
    concludes = [own[i][1] for i in seq if own[i]]
    if use_no_shell(no_shell, cmds, [*wrapped, *concludes]):
        return own
    return [None if p is None else p.hooks(own_shell=False) for p in probes]


def collect_usages(path: Path, expected: int, where: str) -> list:
    """The usages a round's probes appended (refbench.daemon.read_usages), the file then removed;
    RunError when they are not one per run (a probe failed: the daemon died mid-run)."""
    from .daemon import read_usages
    try:
        usages = read_usages(path)
    finally:
        Path(path).unlink(missing_ok=True)
    if len(usages) != expected:
        raise RunError(f"{where}: the daemon's probes gave {len(usages)} figures for {expected} runs "
                       "(the daemon exited mid-run?)")
    return usages


def interleave_seq(order: list[int], runs: int, interleave: str) -> tuple[list[int], int]:
    """(the builds of one hyperfine call in the order they run, runs per command): with "runs",
    `runs` runs of each build alternating A B, B A, ... (drift between neighbours cancels); with
    "rounds", each build's runs in a row, as plain hyperfine runs them."""
    if interleave == "runs":
        return [i for j in range(runs) for i in (order if j % 2 == 0 else order[::-1])], 1
    return list(order), runs
