"""MockExecutor: the runner's measurements without starting a process (what hyperfine's own
MockExecutor does for its tests).

It builds each call's real hyperfine command line (so tests can check what refbench would run)
and records it in `calls`, then returns per-run figures drawn from a lognormal around a mean
read from each command's binary name: `fake-1.10` -> wall 1.10 x 0.1 s; `fake-1.00-cpu1.2` ->
CPU 1.2 x the wall time's CPU; `fake-1.00-mem64` -> 64 MiB more peak memory; the words `sigma=0.3`
and `scale=5` in a command give that step its own noise and length. The noise is seeded
per call from `seed`. Shell commands run nothing; `exit N` fails with N, and `fail=` names
commands whose timed runs exit non-zero.
"""
from __future__ import annotations

import os
import random
import re
from pathlib import Path

from refbench.executor import Call, Shell, own_results
from refbench.hyperfine import CommandResult, HyperfineInfo

INFO_2 = HyperfineInfo("hyperfine", (2, 0, 0), dashdash=True, counts_instructions=False)
INFO_1 = HyperfineInfo("hyperfine", (1, 20, 0), dashdash=True)
BASE_MEMORY = 30 * 2 ** 20
CALL_SECONDS = 0.02  # hyperfine's own start and export, per call


class MockExecutor:
    def __init__(self, info: HyperfineInfo = INFO_2, sigma: float = 0.05, seed: str = "0",
                 fail: dict[str, int] | None = None, names=None):
        self.info = info
        self.sigma = sigma
        self.seed = seed
        self.fail = fail or {}
        self.names = names  # a function (call) -> names hyperfine reports, to fake a mismatch
        self.calls: list[list[str]] = []  # the hyperfine argv of every call, as refbench would run it
        self.now = 0.0  # simulated seconds: every run's wall time and CALL_SECONDS a call (the budget's clock)
        self.shells: list[str] = []

    def measure(self, where: str, call: Call, env: dict) -> tuple[tuple[CommandResult, ...], float]:
        self.calls.append(call.argv(self.info, Path("/mock/export.json")))
        rng = random.Random(f"{self.seed}-{len(self.calls)}")
        out = []
        names = self.names(call) if self.names else call.names
        for name, cmd in zip(names, call.commands):
            wall, cpu, mem = _factors(cmd)
            sigma, scale = _step_words(cmd, self.sigma)
            times = tuple(0.1 * scale * wall * rng.lognormvariate(0, sigma) for _ in range(call.runs))
            user = tuple(t * 0.5 * cpu * rng.lognormvariate(0, self.sigma / 5) for t in times)
            memory = tuple(BASE_MEMORY + int(mem * 2 ** 20) + 4096 * rng.randrange(4) for _ in times)
            code = next((c for word, c in self.fail.items() if word in cmd), 0)
            out.append(CommandResult(name, times, user, (0.0,) * len(times), (code,) * len(times),
                                     memory if self.info.schema == 2 else None, True, own_memory=self.info.schema == 2))
        elapsed = sum(sum(r.times) for r in out) + CALL_SECONDS
        self.now += elapsed
        return own_results(tuple(out), self.info, interleaved=call.runs == 1), elapsed

    def clock(self) -> float:
        """The simulated time, for Plan(clock=...): a budget test runs in milliseconds."""
        return self.now

    def shell(self, cmd: str, env: dict, capture: bool = False, rss: bool = False,
              wrap: tuple[str, ...] = ()) -> Shell:
        self.shells.append(cmd)
        m = re.fullmatch(r"\s*exit (\d+)\s*", cmd)
        code = int(m.group(1)) if m else 0
        return Shell(code, "", f"exit {code}\n" if code else "", 0.0, 12345 if rss and not code else None)


def _step_words(cmd: str, sigma: float) -> tuple[float, float]:
    """A step's own noise and length: `sigma=0.3` and `scale=5` words in its command."""
    words = dict(w.split("=", 1) for w in cmd.split() if w.startswith(("sigma=", "scale=")))
    return float(words.get("sigma", sigma)), float(words.get("scale", 1.0))


def _factors(cmd: str) -> tuple[float, float, float]:
    word = os.path.basename(cmd.split()[0]) if cmd.split() else ""
    m = re.search(r"fake-([\d.]+)(?:-cpu([\d.]+))?(?:-mem(\d+))?", word)
    if not m:
        return 1.0, 1.0, 0.0
    return float(m.group(1)), float(m.group(2) or 1.0), float(m.group(3) or 0.0)
