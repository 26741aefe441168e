"""A run with no process: what `--executor mock` runs on (as hyperfine's --debug-mode does).

The executor, backend and builder here stand in for hyperfine, MinIO/IPFS and `go build`, so a
whole run through cli.main (refusals, outputs, exit codes, shards and merge, budgets) takes
milliseconds and gives the same figures every time. They live in the package, not in tests/, so
the command line can pick them (`--executor mock`, with `--mock KEY=VALUE` to set them) without
importing the tests.

The MockExecutor builds each call's real hyperfine command line (so a test can check what refbench
would run) and records it in `calls`, then returns per-run figures drawn from a lognormal around a
mean read from each command's binary name: `fake-1.10` -> wall 1.10 x 0.1 s; `fake-1.00-cpu1.2` ->
CPU 1.2 x the wall time's CPU; `fake-1.00-mem64` -> 64 MiB more peak memory; the words `sigma=0.3`
and `scale=5` in a command give that step its own noise and length, and `pilot_sigma=0.02` the
noise of its first two rounds (a budget's pilot that under-estimates the step's noise). Its clock is simulated (every
run's wall time and CALL_SECONDS a call), so a budget spends mock seconds. Shell commands run
nothing; `exit N` fails with N, and `fail` names commands whose timed runs exit non-zero.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import random
import re
import shutil
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .builds import BuiltRef
from .errors import RefbenchError
from .executor import Call, Shell, own_results
from .hyperfine import CommandResult, HyperfineInfo
from .refs import ResolvedRef

INFO_2 = HyperfineInfo("hyperfine", (2, 0, 0), dashdash=True, counts_instructions=False)
INFO_1 = HyperfineInfo("hyperfine", (1, 20, 0), dashdash=True)
BASE_MEMORY = 30 * 2 ** 20
CALL_SECONDS = 0.02  # hyperfine's own start and export, per call
DEFAULT_BINARY = "fake-1.00"  # a ref the settings do not map: every figure at the baseline's mean
MOCK_GO = "go1.24"


class MockCrash(RuntimeError):
    """What `--mock crash=N` raises at the Nth hyperfine call: a bug of refbench's in mid-run, to
    test that it exits 3 after the run's cleanup."""


# ---- the executor ------------------------------------------------------------------------------
class MockExecutor:
    """Seeded per call (`seed_by="call"`: the Nth call's figures) or per step and round
    (`seed_by="step"`: a shard measures its steps exactly as the whole run measured them)."""

    def __init__(self, info: HyperfineInfo = INFO_2, sigma: float = 0.05, seed: str = "0",
                 fail: dict[str, int] | None = None, names=None, seed_by: str = "call",
                 crash_at: int | None = None, interrupt_at: int | None = None):
        self.info = info
        self.sigma = sigma
        self.seed = seed
        self.fail = fail or {}
        self.names = names  # a function (call) -> names hyperfine reports, to fake a mismatch
        self.seed_by = seed_by
        self.crash_at = crash_at
        self.interrupt_at = interrupt_at
        self.calls: list[list[str]] = []  # the hyperfine argv of every call, as refbench would run it
        self.now = 0.0  # simulated seconds: every run's wall time and CALL_SECONDS a call (the budget's clock)
        self.shells: list[str] = []

    def measure(self, where: str, call: Call, env: dict) -> tuple[tuple[CommandResult, ...], float]:
        self.calls.append(call.argv(self.info, Path("/mock/export.json")))
        if self.crash_at is not None and len(self.calls) == self.crash_at:
            raise MockCrash(f"a bug in the middle of a run (--mock crash={self.crash_at})")
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt  # as Ctrl-C (or SIGTERM, through cli's handler) arrives while hyperfine runs
        rng = random.Random(f"{self.seed}/{where}" if self.seed_by == "step" else f"{self.seed}-{len(self.calls)}")
        out = []
        names = self.names(call) if self.names else call.names
        for name, cmd in zip(names, call.commands):
            wall, cpu, mem = _factors(cmd)
            sigma, scale = _step_words(cmd, self.sigma, pilot=_pilot_round(where))
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
        """The simulated time: the budget's clock, so a budgeted run takes milliseconds."""
        return self.now

    def shell(self, cmd: str, env: dict, capture: bool = False, rss: bool = False,
              wrap: tuple[str, ...] = ()) -> Shell:
        self.shells.append(cmd)
        m = re.fullmatch(r"\s*exit (\d+)\s*", cmd)
        code = int(m.group(1)) if m else 0
        return Shell(code, "", f"exit {code}\n" if code else "", 0.0, 12345 if rss and not code else None)


def _step_words(cmd: str, sigma: float, pilot: bool = False) -> tuple[float, float]:
    """A step's own noise and length: `sigma=0.3` and `scale=5` words in its command, and in its
    pilot rounds `pilot_sigma=0.02`'s noise where it has that word."""
    words = dict(w.split("=", 1) for w in cmd.split() if w.startswith(("sigma=", "scale=", "pilot_sigma=")))
    sigma = float(words.get("sigma", sigma))
    return float(words.get("pilot_sigma", sigma)) if pilot else sigma, float(words.get("scale", 1.0))


def _pilot_round(where: str) -> bool:
    """Whether a call is a step's round 1 or 2 (the runner names them `... round N`)."""
    m = re.search(r" round (\d+)$", where)
    return m is not None and int(m.group(1)) <= 2


def _factors(cmd: str) -> tuple[float, float, float]:
    # the first word naming a mock binary: an implementation's command has its environment exported first
    word = next((os.path.basename(w) for w in cmd.split() if "fake-" in w), "")
    m = re.search(r"fake-([\d.]+)(?:-cpu([\d.]+))?(?:-mem(\d+))?", word)
    if not m:
        return 1.0, 1.0, 0.0
    return float(m.group(1)), float(m.group(2) or 1.0), float(m.group(3) or 0.0)


# ---- the backend -------------------------------------------------------------------------------
@dataclass
class MockBackend:
    """A local directory stands for the remote; nothing is started. It satisfies
    refbench.backends.Backend and records what the runner asked of it (scenarios opened and
    closed, close() at the end), and close() removes its directory, so a test can see that the
    run's cleanup ran."""
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="refbench-mock-backend-")))
    kind: str = "fake"
    shared_context: bool = True
    swept: list = field(default_factory=list)
    calls: list[tuple] = field(default_factory=list)  # ("open_scenario", slug, labels), ("close_scenario",), ...
    closed: bool = False

    @property
    def env(self) -> dict[str, str]:
        return {}

    def remote(self, scenario_slug: str) -> str:
        return str(self.root / scenario_slug)

    def context_values(self, scenario_slug: str, build_label: str) -> dict:
        """The S3 backend's template values (S3Backend.context_values), so the bundled scenarios
        render: an unversioned remote that is the local directory."""
        remote = self.remote(scenario_slug)
        return {"remote": remote, "bucket": "mock", "endpoint": "", "versioned": False, "s3restore": "",
                "remote_versioned": remote}

    def command_prefix(self) -> tuple[str, ...]:
        """Commands run as they are: no namespace to enter."""
        return ()

    def context_env(self, scenario_slug: str, build_label: str) -> dict[str, str]:
        return {}

    def open_scenario(self, scenario, labels: list[str], binaries: list[str], workdir: Path) -> None:
        self.calls.append(("open_scenario", scenario.slug, tuple(labels)))
        Path(self.remote(scenario.slug)).mkdir(parents=True, exist_ok=True)

    def close_scenario(self) -> None:
        self.calls.append(("close_scenario",))

    def plan_scenario(self, scenario, labels: list[str], binaries: list[str]) -> None:
        self.calls.append(("plan_scenario", scenario.slug, tuple(labels)))

    def watch_dir(self) -> tuple[Path | None, str]:
        return self.root, "fake remote"

    def server_pids(self) -> list[int]:
        return []

    def watch_extra(self) -> dict:
        return {}

    def describe(self) -> dict:
        return {"kind": self.kind, "root": str(self.root)}

    def close(self) -> None:
        self.closed = True
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "MockBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def backend_opener(root: Path, opened: list | None = None):
    """RunEnv.backend for MockBackends under `root` (one directory per run, removed when it
    closes, whatever ends the run); each one is appended to `opened` when given."""
    @contextlib.contextmanager
    def open_backend(validated, workdir, run_id, server_cpus, reporter, machine=None):
        with MockBackend(Path(root) / f"mock-remote-{run_id}") as backend:
            if opened is not None:
                opened.append(backend)
            yield backend
    return open_backend


# ---- the builder -------------------------------------------------------------------------------
MOCK_LINE = 8  # the commits a mock bisect searches: BAD~7 up to BAD


class MockBuilder:
    """Resolves every ref to a made-up commit (the same ref, the same commit and binary) and
    "builds" it into a name the MockExecutor reads its figures from: `binaries[ref]`, else that of
    the nearest older commit of a mock line that has one (REF~k: REF~7 ... REF~(k+1), see
    commits_between), else DEFAULT_BINARY. Nothing is cloned, no Go runs, no file is written.
    `made`: the commits made so far, by sha, shared by the builders of one command (bisect's probes
    name commits by the sha it made), else this builder's own."""
    source = "git"

    def __init__(self, target, builds_dir: Path, binaries: dict[str, str] | None = None,
                 made: dict[str, ResolvedRef] | None = None):
        self.target = target
        self.builds_dir = Path(builds_dir)
        self.binaries = dict(binaries or {})
        self.repo_url = target.repo
        self.go = "mod"
        self.made = {} if made is None else made

    @staticmethod
    def sha(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def resolve_all(self, texts, go=()) -> list[ResolvedRef]:
        return [self.resolve(t) for t in texts]

    def resolve(self, text: str, go: str | None = None) -> ResolvedRef:
        """The made-up commit of `text` (nightly resolves its head through the run's builder); a
        sha this mock made is that commit again."""
        if text in self.made:
            return self.made[text]
        made = self.made[self.sha(text)] = ResolvedRef(text, "tag", self.sha(text), text, toolchain=MOCK_GO)
        return made

    def commits_between(self, good: str, bad: str) -> list[tuple[str, str]]:
        """bisect's line: MOCK_LINE made-up commits BAD~7 ... BAD~1, BAD (GOOD comes before them).
        `--mock build=BAD~3:fake-1.20` makes BAD~3 and every later one slower, as a regression
        that commit brought would."""
        name = self.resolve(bad).text
        line = [self.resolve(f"{name}~{k}" if k else name) for k in range(MOCK_LINE - 1, -1, -1)]
        return [(r.sha, f"mock commit {r.text}") for r in line]

    def _binary(self, text: str) -> str:
        if text in self.binaries:
            return self.binaries[text]
        m = re.fullmatch(r"(.+?)(?:~(\d+))?", text)
        base, k = m.group(1), int(m.group(2) or 0)
        older = (self.binaries.get(f"{base}~{j}") for j in range(k + 1, MOCK_LINE))
        return next((b for b in older if b), DEFAULT_BINARY)

    def build_dir(self, sha: str, toolchain: str | None = None) -> Path:
        return self.builds_dir / "mock" / sha

    def cached(self, resolved: ResolvedRef) -> Path | None:
        return self.build_dir(resolved.sha) / self._binary(resolved.text)

    def build(self, resolved: ResolvedRef, label: str) -> BuiltRef:
        binary = self.cached(resolved)
        return BuiltRef(self.target.name, resolved, label, binary, self.source, MOCK_GO, False, 0.0,
                        binary_sha256=hashlib.sha256(f"{resolved.sha}/{binary.name}".encode()).hexdigest())


# ---- --mock KEY=VALUE --------------------------------------------------------------------------
@dataclass(frozen=True)
class MockSettings:
    """What `--mock KEY=VALUE` sets: seed=TEXT, sigma=FLOAT (every step's noise), build=REF:BINARY
    (the binary name a ref is built into, e.g. build=new:fake-1.08-mem3), fail=WORD:CODE (timed
    runs of commands containing WORD exit CODE), crash=N (the Nth hyperfine call raises, as a bug
    of refbench's would), interrupt=N (Ctrl-C during the Nth hyperfine call)."""
    seed: str = "0"
    sigma: float = 0.05
    binaries: tuple[tuple[str, str], ...] = ()
    fail: tuple[tuple[str, int], ...] = ()
    crash_at: int | None = None
    interrupt_at: int | None = None

    @classmethod
    def parse(cls, items) -> "MockSettings":
        fields: dict = {"binaries": [], "fail": []}
        for item in items or ():
            key, eq, value = item.partition("=")
            try:
                if not eq:
                    raise ValueError("no '='")
                if key == "seed":
                    fields["seed"] = value
                elif key == "sigma":
                    fields["sigma"] = float(value)
                elif key in ("crash", "interrupt"):
                    fields[f"{key}_at"] = int(value)
                elif key in ("build", "fail"):
                    name, colon, what = value.rpartition(":")
                    if not colon or not name:
                        raise ValueError("expected NAME:VALUE")
                    fields["binaries" if key == "build" else "fail"].append(
                        (name, what) if key == "build" else (name, int(what)))
                else:
                    raise ValueError("unknown key")
            except ValueError as e:
                raise RefbenchError(f"--mock {item!r}: {e} (expected seed=TEXT, sigma=FLOAT, build=REF:BINARY, "
                                    "fail=WORD:CODE, crash=N or interrupt=N)") from None
        return cls(**{**fields, "binaries": tuple(fields["binaries"]), "fail": tuple(fields["fail"])})

    def executor(self) -> MockExecutor:
        return MockExecutor(sigma=self.sigma, seed=self.seed, fail=dict(self.fail), seed_by="step",
                            crash_at=self.crash_at, interrupt_at=self.interrupt_at)


def mock_install(impl, binaries: dict):
    """An implementation as if installed: its program a mock binary (`--mock build=NAME:fake-1.30`
    maps it, by name or NAME@VERSION), nothing fetched."""
    from .implementations import Installed
    name = binaries.get(impl.spec) or binaries.get(impl.name) or DEFAULT_BINARY
    program = Path("/mock/impl") / impl.name / name
    return Installed(impl, program.parent, program, hashlib.sha256(f"{impl.pin}{name}".encode()).hexdigest(),
                     False, 0.0, "python3.11" if impl.registry == "pypi" else MOCK_GO)


def env(settings: MockSettings, machine, reporter, executor: Callable[..., MockExecutor] | None = None):
    """The RunEnv of `--executor mock`: a seeded MockExecutor per run (the first run's seed is the
    settings' own, so a shard measures as the whole run did; a later run of the same command, a
    calibrate repetition, gets seed#N), one simulated clock across them, MockBackends under the
    builds directory, the MockBuilder, every tool found, no watchdog (nothing runs that could
    exhaust the machine), no disk check for what the steps would download and store (nothing
    stores it: a bisect of the seed's 10 GB step asked 29.3 GiB of /tmp) and no perf."""
    from .runenv import RunEnv  # runenv picks this module for --executor mock
    made: list[MockExecutor] = []

    def make_executor(workdir, **kw) -> MockExecutor:
        ex = executor() if executor else settings.executor()
        if made and ex.seed == settings.seed:
            ex.seed = f"{settings.seed}#{len(made)}"
        ex.now = made[-1].now if made else 0.0
        made.append(ex)
        return ex

    binaries, commits = dict(settings.binaries), {}  # commits: one command's made-up ones (MockBuilder.made)
    return RunEnv(
        executor=make_executor,
        backend=lambda validated, *a: backend_opener(validated.cache_dir)(validated, *a),
        builder=lambda validated: MockBuilder(validated.target, validated.cache_dir, binaries, commits),
        find_tool=lambda tool: f"/mock/bin/{tool}",
        clock=lambda: made[-1].now if made else 0.0,
        machine=dataclasses.replace(machine, watchdog="off"), reporter=reporter, perf=False, stores=False,
        order_seed=lambda: zlib.crc32(settings.seed.encode()) & 0x7FFFFFFF,  # a mock run repeats itself
        install=lambda impl, say=None: mock_install(impl, binaries))
