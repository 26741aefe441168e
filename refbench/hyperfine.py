"""hyperfine itself: which binary, which version, how it is installed, the command line refbench
gives it, and its --export-json files. Every difference between hyperfine versions lives here.

refbench wants hyperfine 2.0: it measures every run with wait4, so each run's user and system
CPU time and peak memory are that run's own (JSON schema version 2,
`results[].measurements[].time_wall_clock.value`), plus hardware counters (instructions) where
the kernel lets it count them. `refbench setup` builds the pinned 2.0 from crates.io once per
machine (it needs rustc >= 1.97: `rustup toolchain install 1.97.0 --profile minimal`, then
`cargo +1.97.0 install --locked`), into the cache; where that fails it builds 1.20 instead.

The 1.x quirks refbench handles: 1.x exports user/system only as means over a command's runs
(per run only when a command ran once in the call, as in refbench's interleaved rounds), and its
`memory_usage_byte` is getrusage(RUSAGE_CHILDREN).ru_maxrss, the largest child reaped so far,
whichever command it was: with builds interleaved in one call both get the same rising series,
so refbench never uses 1.x memory as a run's peak (it is "unavailable"). 1.x runs commands
through a shell unless given -N; 2.0 runs them without one unless given -S (--shell=default),
and removed --reference, --sort and --time-unit.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import paths, pins, tools
from .errors import RefbenchError, RunError
from .verdict import METRICS

log = logging.getLogger(__name__)

PINNED_VERSION = pins.HYPERFINE_VERSION  # what `refbench setup` installs: the pinned wheel's binary (refbench.pins)
PINNED_TOOLCHAIN = "1.97.0"  # hyperfine 2.0 needs rustc >= 1.97; machines here default to 1.95
FALLBACK_VERSION = "1.20.0"  # built where 2.0 cannot be: per-run wall time, CPU only in interleaved rounds
MEMORY_VERSION = (1, 20, 0)  # first version exporting memory_usage_byte (a running maximum in 1.x)
OWN_RUN_VERSION = (2, 0, 0)  # first version measuring each run's own CPU and memory (schema 2)
_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


# ---- the binary -----------------------------------------------------------------------------
def pinned_path(version: str = PINNED_VERSION) -> Path:
    """Where `refbench setup` keeps hyperfine `version`: the pinned one (refbench.pins.cached_path,
    verified against its hash at every use), or a version built with cargo (cargo_path)."""
    return pins.cached_path("hyperfine") if version == PINNED_VERSION else cargo_path(version)


def cargo_path(version: str) -> Path:
    """Where `refbench setup` keeps a hyperfine it built with cargo: $XDG_DATA_HOME/refbench/hyperfine-V/bin.
    Not pinned (a Rust build differs from one machine to the next), so it cannot be verified, and it
    is kept where no cache restore writes (paths.data_root): a file of this name in the cache was
    run by setup as "built here" when the wheel could not be had (issue 54). Used to measure
    only under REFBENCH_UNPINNED_TOOLS=1."""
    return paths.data_root() / f"hyperfine-{version}" / "bin" / "hyperfine"


def _runnable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def locate() -> str | None:
    """The hyperfine refbench runs: the pinned one in the cache (a swapped file is refused,
    refbench.pins.verify), else one in the tools directories (verified the same way) or on PATH when
    it measures each run's own CPU and memory (2.0+), else, on a machine that allows unpinned
    tools, a cargo build of 2.0 or 1.20, else whatever hyperfine there is. None when there is none."""
    if _runnable(pinned_path()):
        return str(pins.verify("hyperfine", pinned_path()))
    found = tools.find_tool("hyperfine")
    if found and (version(found) or (0,)) >= OWN_RUN_VERSION:
        return found
    if pins.unpinned_allowed():
        for built in (cargo_path(PINNED_VERSION), cargo_path(FALLBACK_VERSION)):
            if _runnable(built):
                return str(built)
    return found


def parse_version(text: str) -> tuple[int, int, int] | None:
    """'hyperfine 1.20.0' -> (1, 20, 0)."""
    m = _VERSION_RE.search(text or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


@lru_cache(maxsize=16)
def _version_of(binary: str) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_version(out)


def version(binary: str | None = None) -> tuple[int, int, int] | None:
    """Version of `binary` (default: locate()) as a tuple, e.g. (2, 0, 0); None if not found."""
    binary = binary or locate()
    return _version_of(binary) if binary else None


def exports_memory(binary: str | None = None) -> bool:
    """Whether this hyperfine exports a peak memory figure per run at all (>= 1.20)."""
    v = version(binary)
    return v is not None and v >= MEMORY_VERSION


def measures_own_runs(binary: str | None = None) -> bool:
    """Whether this hyperfine measures each run's own CPU time and peak memory (2.0+)."""
    v = version(binary)
    return v is not None and v >= OWN_RUN_VERSION


def _toolchain_args(version: str, rustup: str | None, say=None) -> list[str] | None:
    """['+1.97.0'] once the toolchain hyperfine `version` needs is installed, [] for a version
    the default toolchain builds, None when the toolchain cannot be installed."""
    if parse_version(version) < OWN_RUN_VERSION:
        return []
    if not rustup:
        return None
    if say:
        say(f"installing Rust {PINNED_TOOLCHAIN} (hyperfine {version} needs rustc >= {PINNED_TOOLCHAIN})")
    proc = subprocess.run([rustup, "toolchain", "install", PINNED_TOOLCHAIN, "--profile", "minimal"],
                          capture_output=True, text=True, env=dict(paths.layout().environ))  # RUSTUP_HOME, proxies
    return [f"+{PINNED_TOOLCHAIN}"] if proc.returncode == 0 else None


def install(version: str = PINNED_VERSION, cargo: str | None = None, say=None, rustup: str | None = None) -> Path:
    """Build hyperfine `version` from crates.io with `cargo install --locked` into refbench's data
    directory (cargo_path; never a cache, which anyone's job may have written), once per machine
    (atomically: a half-built install is never found), where the pinned wheel cannot be had.
    Returns the binary (cargo_path: not pinned)."""
    dest = cargo_path(version)
    if dest.is_file():
        return dest
    cargo = cargo or shutil.which("cargo") or _home_cargo()
    if not cargo:
        raise RefbenchError(f"cannot build hyperfine {version}: cargo not found (install Rust with "
                            "rustup or apt-get install cargo, then run `refbench setup` again)")
    toolchain = _toolchain_args(version, rustup or shutil.which("rustup") or _home_tool("rustup"), say)
    if toolchain is None:
        raise RefbenchError(f"cannot build hyperfine {version}: it needs Rust {PINNED_TOOLCHAIN} "
                            f"(`rustup toolchain install {PINNED_TOOLCHAIN} --profile minimal` failed or rustup is missing)")
    root = dest.parent.parent
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"hyperfine-{version}.", dir=root.parent))
    if say:
        say(f"building hyperfine {version} from crates.io (cargo install --locked; a few minutes, once per machine)")
    proc = subprocess.run([cargo, *toolchain, "install", "--locked", "--quiet", "--version", version, "hyperfine",
                           "--root", str(tmp)], capture_output=True, text=True, env=dict(paths.layout().environ))
    if proc.returncode != 0 or not (tmp / "bin" / "hyperfine").is_file():
        shutil.rmtree(tmp, ignore_errors=True)
        raise RefbenchError(f"cargo install hyperfine {version} failed (exit {proc.returncode})",
                            detail=proc.stderr[-3000:])
    try:
        tmp.rename(root)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _home_tool(name: str) -> str | None:
    p = Path(os.path.expanduser(f"~/.cargo/bin/{name}"))
    return str(p) if p.is_file() else None


def _home_cargo() -> str | None:
    return _home_tool("cargo")


# ---- what a hyperfine can measure -------------------------------------------------------------
@dataclass(frozen=True)
class HyperfineInfo:
    """One hyperfine binary, probed once per run: what the executor builds its command lines
    from, and what decides which metrics can get a verdict."""
    path: str
    version: tuple[int, int, int]
    dashdash: bool = True  # accepts `--` before the commands (so a command may start with '-')
    counts_instructions: bool = False  # 2.0 on a kernel that lets it open the instructions counter

    @property
    def schema(self) -> int:
        return 2 if self.version >= OWN_RUN_VERSION else 1

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))

    def metrics(self, interleaved: bool = True) -> tuple[str, ...]:
        """The metrics every run gets its own figure of: wall always; CPU with 2.0, or with 1.x
        when each command runs once per call (its exported mean is then that run's); memory and
        instructions only with 2.0 (1.x memory is a running maximum across children)."""
        out = ["wall"]
        if self.schema == 2 or interleaved:
            out.append("cpu")
        if self.schema == 2:
            out.append("memory")
            if self.counts_instructions:
                out.append("instructions")
        return tuple(out)

    def missing(self, interleaved: bool = True) -> tuple[str, ...]:
        """Metrics this hyperfine cannot give a run's own figure of."""
        have = self.metrics(interleaved)
        return tuple(m for m in METRICS if m not in have)

    @classmethod
    def probe(cls, binary: str | None = None) -> "HyperfineInfo | None":
        """Ask the binary once: its version, whether it takes `--` (old 1.x did not), whether
        it can count instructions here. None when no hyperfine is found."""
        binary = binary or locate()
        v = version(binary) if binary else None
        if not binary or v is None:
            return None
        if v >= OWN_RUN_VERSION:
            return cls(binary, v, True, _succeeds([binary, "--runs", "1", "--style", "none",
                                                   "--metrics", "instructions", "--", "true"]))
        return cls(binary, v, _succeeds([binary, "--runs", "1", "--style", "none", "--", "true"]))


def _succeeds(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


# ---- the command line -----------------------------------------------------------------------
# hyperfine options refbench sets itself; passing them through -hf would contradict the plan
MANAGED_HF_FLAGS = {"--runs", "-r", "--warmup", "-w", "--export-json", "--prepare", "-p", "-n",
                    "--command-name", "--min-runs", "-m", "--max-runs", "-M", "--style",
                    "--parameter-scan", "-P", "--parameter-list", "-L", "--export-markdown",
                    "--metrics", "-N", "-S", "--shell"}
# what -hf may pass through: options that change neither which commands run nor how results map
# to builds (anything else, e.g. --reference, --setup or -r5, could shift samples between builds)
ALLOWED_HF_FLAGS = {"-i": False, "--ignore-failure": False, "--show-output": False,
                    "--output": True, "--input": True}  # flag -> takes a value


def check_hyperfine_flags(flags: list[str]) -> None:
    """Refuse every -hf word that is not an allowed option (or the value of one). Glued short
    forms (-r5, -ifoo) are refused with the rest: they are how a managed flag slips past a name check."""
    i = 0
    while i < len(flags):
        f = flags[i]
        name = f.split("=", 1)[0] if f.startswith("--") else f[:2] if f.startswith("-") else f
        if name in MANAGED_HF_FLAGS:
            raise RunError(f"hyperfine flag {name} is managed by refbench; use refbench's own option instead")
        if name not in ALLOWED_HF_FLAGS or (not f.startswith("--") and f != name):
            allowed = ", ".join(sorted(ALLOWED_HF_FLAGS))
            raise RunError(f"hyperfine flag {f!r} is not one refbench passes through (allowed: {allowed})")
        i += 2 if ALLOWED_HF_FLAGS[name] and "=" not in f else 1
        if ALLOWED_HF_FLAGS[name] and "=" not in f and i > len(flags):
            raise RunError(f"hyperfine flag {f} needs a value")


def command_line(jpath: Path, names: list[str], cmds: list[str], preps: list[str | None], runs: int,
                 warmup: int, *, info: HyperfineInfo, verbose: bool = False, no_shell: str = "auto",
                 extra_flags: list[str] = (), concludes: list[str | None] = ()) -> list[str]:
    """One hyperfine invocation: the commands in the order given, each with its own prepare.
    Shell: 1.x uses one unless given -N, 2.0 none unless given -S; 2.0 exports only the metrics
    it is asked for. Always -i: a failing run is exported with its exit code instead of ending
    hyperfine with a message that names the command line but not the build; refbench then fails
    the step naming the build (runner.check_exits), and no failed run enters a verdict."""
    argv = [info.path, "--export-json", str(jpath), "--runs", str(runs), "--warmup", str(warmup),
            "--style", "basic" if verbose else "none"]
    shell_free = use_no_shell(no_shell, cmds, [*preps, *concludes])
    if info.schema == 2:
        wanted = ["time_wall_clock", "time_user", "time_system", "memory_peak_resident"]
        argv += ["--metrics", ",".join(wanted + (["instructions"] if info.counts_instructions else []))]
        if not shell_free:
            argv.append("-S")
    elif shell_free:
        argv.append("-N")
    for n in names:
        argv += ["-n", n]
    if any(preps):
        for p in preps:
            argv += ["--prepare", p or ":"]
    if any(concludes):  # after each run, outside its timing (hyperfine >= 1.17)
        for c in concludes:
            argv += ["--conclude", c or ":"]
    if not any(f == "-i" or f.startswith("--ignore-failure") for f in extra_flags):
        argv.append("-i")
    argv += extra_flags
    return argv + (["--", *cmds] if info.dashdash else list(cmds))


def failure_message(stderr: str, returncode: int) -> str:
    """The line of a failed hyperfine's stderr that names the error (else its last line)."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return next((ln for ln in lines if "rror" in ln), lines[-1] if lines else f"exit {returncode}").strip()


# what makes a command need a shell: operators, expansions, globs, redirections (outside quotes)
_SHELL_CHARS = set("|&;<>()$`*?[~{}#\\\n")


def needs_shell(cmd: str) -> bool:
    """Whether a command uses shell syntax. hyperfine -N splits a command into words itself
    (quotes honoured) and spares the shell's start-up and its spawn-time correction, one source of
    noise in a few-millisecond step; any operator, expansion or glob outside quotes keeps the shell."""
    if "=" in cmd.split(" ", 1)[0]:  # VAR=value cmd
        return True
    quote = None
    for ch in cmd:
        if quote == "'":
            quote = None if ch == "'" else quote
        elif quote == '"':
            if ch in '$`\\':
                return True
            quote = None if ch == '"' else quote
        elif ch in "'\"":
            quote = ch
        elif ch in _SHELL_CHARS:
            return True
    return False


def use_no_shell(mode: str, cmds: list[str], preps: list[str | None]) -> bool:
    """Whether to pass -N: mode "on"/"off" as given, "auto" when no command or prepare needs a shell."""
    if mode == "off":
        return False
    if mode == "on":
        return True
    return not any(needs_shell(c) for c in [*cmds, *(p for p in preps if p)])


# ---- --export-json files --------------------------------------------------------------------
@dataclass(frozen=True)
class CommandResult:
    """One command of a hyperfine --export-json file, every tuple with one value per measured run.

    Formats read: 1.15 to 1.20 (schema 1) and 2.0 (schema 2). Schema 1 exports user and system
    CPU only as means over the runs (spread evenly here, `per_run_cpu` False) and, from 1.20,
    `memory_usage_byte`: a running maximum over every child hyperfine reaped (see the module
    docstring), kept here as the file says but never a run's own peak (`own_memory` False).
    Schema 2 gives every run's own CPU and peak memory, and instructions where counted.
    `exit_codes` holds None for a run killed by a signal.
    """
    name: str  # the command's -n name, or the command line itself when it has none
    times: tuple[float, ...]  # wall seconds per run
    user: tuple[float, ...]  # user CPU seconds per run
    system: tuple[float, ...]  # system CPU seconds per run
    exit_codes: tuple[int | None, ...]
    memory_bytes: tuple[int, ...] | None  # peak memory per run as exported; None when the file has none
    per_run_cpu: bool = False  # True only if the file had per-run user/system values
    parameters: tuple[tuple[str, str], ...] = ()  # --parameter-scan / -L values, sorted by name
    instructions: tuple[int, ...] | None = None  # per run, where hyperfine counted them (2.0)
    own_memory: bool = False  # memory_bytes are each run's own peak (2.0), not a running maximum

    @property
    def command(self) -> str:
        return self.name

    @property
    def runs(self) -> int:
        return len(self.times)

    @property
    def cpu(self) -> tuple[float, ...]:
        return tuple(u + s for u, s in zip(self.user, self.system))

    @property
    def peak_memory_bytes(self) -> int | None:
        return max(self.memory_bytes) if self.memory_bytes else None

    @property
    def failed_runs(self) -> tuple[int | None, ...]:
        """Exit codes of the runs that did not exit 0 (None: killed by a signal)."""
        return tuple(c for c in self.exit_codes if c != 0)


def parse_export(data: dict, source: str = "hyperfine export") -> tuple[CommandResult, ...]:
    """The results of a parsed --export-json document (either schema), in the order hyperfine ran
    the commands."""
    try:
        read = _result_v2 if data.get("schema_version") == 2 else _result_v1
        return tuple(read(res) for res in data["results"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise RefbenchError(f"{source}: not a hyperfine --export-json file ({type(e).__name__}: {e})") from None


def _result_v1(res: dict) -> CommandResult:
    times = tuple(float(t) for t in res["times"])
    n = len(times)
    user, per_run_user = _per_run(res.get("user"), n)
    system, per_run_sys = _per_run(res.get("system"), n)
    codes = res.get("exit_codes")
    exit_codes = tuple(None if c is None else int(c) for c in codes) if codes is not None else (0,) * n
    if len(exit_codes) != n:
        raise ValueError(f"{len(exit_codes)} exit codes for {n} runs")
    mem = res.get("memory_usage_byte")
    memory = None
    if isinstance(mem, list):
        if len(mem) != n:
            raise ValueError(f"{len(mem)} memory values for {n} runs")
        memory = tuple(int(m) for m in mem)
    return CommandResult(name=str(res["command"]), times=times, user=user, system=system, exit_codes=exit_codes,
                         memory_bytes=memory, per_run_cpu=per_run_user and per_run_sys,
                         parameters=_parameters(res))


def _result_v2(res: dict) -> CommandResult:
    """Schema 2: `measurements` holds one object per run, each metric as {value, unit} in base
    units (seconds, bytes, counts); a metric hyperfine did not collect is absent."""
    runs = res["measurements"]
    if not isinstance(runs, list):
        raise TypeError("measurements is not a list")

    def metric(key: str, kind=float) -> tuple | None:
        values = [m.get(key) for m in runs]
        if not runs or all(v is None for v in values):
            return None
        if any(v is None for v in values):
            raise ValueError(f"{key} missing in some runs")
        return tuple(kind(v["value"]) for v in values)

    times = metric("time_wall_clock")
    if times is None:
        raise KeyError("time_wall_clock")
    n = len(times)
    user, system = metric("time_user"), metric("time_system")
    if user is None or system is None:  # only the total asked for: keep it as user time
        user, system = metric("time_cpu") or (0.0,) * n, (0.0,) * n
    memory = metric("memory_peak_resident", lambda v: int(round(v)))
    codes = tuple(None if m.get("exit_code") is None else int(m["exit_code"]) for m in runs)
    return CommandResult(name=str(res.get("name") or res["command"]), times=times, user=user, system=system,
                         exit_codes=codes, memory_bytes=memory, per_run_cpu=True, parameters=_parameters(res),
                         instructions=metric("instructions", lambda v: int(round(v))), own_memory=True)


def _parameters(res: dict) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in (res.get("parameters") or {}).items()))


def read_export(path: str | Path) -> tuple[CommandResult, ...]:
    """Read a hyperfine --export-json file; a malformed file is one RefbenchError."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise RefbenchError(f"{path}: cannot read hyperfine results ({e})") from None
    if not isinstance(data, dict):
        raise RefbenchError(f"{path}: not a hyperfine --export-json file (not an object)")
    return parse_export(data, str(path))


def match_results(results: tuple[CommandResult, ...], names: list[str], where: str) -> tuple[CommandResult, ...]:
    """The results of one call, checked against the names refbench gave, in order: a result more or
    less, or one under another name (a reference command, a parameter scan) would put one build's
    runs under another's label."""
    got = [r.name for r in results]
    if got != list(names):
        raise RunError(f"{where}: hyperfine returned results for {got}, expected {list(names)}")
    return results


def _per_run(value, n: int) -> tuple[tuple[float, ...], bool]:
    """A per-run list as it is; a mean (what schema 1 exports) spread over the n runs."""
    if isinstance(value, list):
        if len(value) != n:
            raise ValueError(f"{len(value)} values for {n} runs")
        return tuple(float(v) for v in value), True
    return (float(value or 0.0),) * n, n == 1
