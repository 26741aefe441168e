"""hyperfine itself: which binary, which version, how it is installed, the command line refbench
gives it, and its --export-json files.

refbench wants hyperfine >= 1.20: it exports the peak memory of every run (`memory_usage_byte`),
so no extra untimed run is needed to measure it. Debian ships 1.15, which exports none. So
`refbench setup` builds the pinned version below from crates.io once per machine
(`cargo install --locked`) into the cache, and `locate()` prefers it. Everything here also reads
1.15-style files, so an older hyperfine still works, only without per-run memory. (Both 1.15 and
1.20 export user and system CPU time only as means over the runs.)
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

from . import paths
from .errors import RefbenchError, RunError

log = logging.getLogger(__name__)

PINNED_VERSION = "1.20.0"  # what `refbench setup` installs (crates.io, cargo install --locked)
MEMORY_VERSION = (1, 20, 0)  # first version exporting per-run memory_usage_byte
_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


# ---- the binary -----------------------------------------------------------------------------
def pinned_path(version: str = PINNED_VERSION) -> Path:
    """Where `refbench setup` keeps the pinned hyperfine: $XDG_CACHE_HOME/refbench/hyperfine-V/bin."""
    return paths.cache_root() / f"hyperfine-{version}" / "bin" / "hyperfine"


def locate() -> str | None:
    """The hyperfine refbench runs: the pinned cached build first, then refbench's tools
    directories and PATH (paths.find_tool). None when there is none."""
    pinned = pinned_path()
    if pinned.is_file() and os.access(pinned, os.X_OK):
        return str(pinned)
    return paths.find_tool("hyperfine")


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
    """Version of `binary` (default: locate()) as a tuple, e.g. (1, 20, 0); None if not found."""
    binary = binary or locate()
    return _version_of(binary) if binary else None


def exports_memory(binary: str | None = None) -> bool:
    """Whether this hyperfine exports per-run peak memory (>= 1.20)."""
    v = version(binary)
    return v is not None and v >= MEMORY_VERSION


def install(version: str = PINNED_VERSION, cargo: str | None = None, say=None) -> Path:
    """Build hyperfine `version` from crates.io with `cargo install --locked` into the cache,
    once per machine (atomically: a half-built install is never found). Returns the binary."""
    dest = pinned_path(version)
    if dest.is_file():
        return dest
    cargo = cargo or shutil.which("cargo") or _home_cargo()
    if not cargo:
        raise RefbenchError(f"cannot build hyperfine {version}: cargo not found (install Rust with "
                            "rustup or apt-get install cargo, then run `refbench setup` again)")
    root = dest.parent.parent
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"hyperfine-{version}.", dir=root.parent))
    if say:
        say(f"building hyperfine {version} from crates.io (cargo install --locked; a few minutes, once per machine)")
    proc = subprocess.run([cargo, "install", "--locked", "--quiet", "--version", version, "hyperfine",
                           "--root", str(tmp)], capture_output=True, text=True)
    if proc.returncode != 0 or not (tmp / "bin" / "hyperfine").is_file():
        shutil.rmtree(tmp, ignore_errors=True)
        raise RefbenchError(f"cargo install hyperfine {version} failed (exit {proc.returncode})",
                            detail=proc.stderr[-3000:])
    try:
        tmp.rename(root)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _home_cargo() -> str | None:
    p = Path(os.path.expanduser("~/.cargo/bin/cargo"))
    return str(p) if p.is_file() else None


# ---- the command line -----------------------------------------------------------------------
# hyperfine options refbench sets itself; passing them through -hf would contradict the plan
MANAGED_HF_FLAGS = {"--runs", "-r", "--warmup", "-w", "--export-json", "--prepare", "-p", "-n",
                    "--command-name", "--min-runs", "-m", "--max-runs", "-M", "--style",
                    "--parameter-scan", "-P", "--parameter-list", "-L", "--export-markdown"}


def check_hyperfine_flags(flags: list[str]) -> None:
    for f in flags:
        name = f.split("=", 1)[0]
        if name in MANAGED_HF_FLAGS:
            raise RunError(f"hyperfine flag {name} is managed by refbench; use refbench's own option instead")


def command_line(jpath: Path, names: list[str], cmds: list[str], preps: list[str | None], runs: int,
                 warmup: int, *, verbose: bool = False, no_shell: str = "auto",
                 extra_flags: list[str] = ()) -> list[str]:
    """One hyperfine invocation: the commands in the order given, each with its own prepare."""
    argv = ["hyperfine", "--export-json", str(jpath), "--runs", str(runs), "--warmup", str(warmup),
            "--style", "basic" if verbose else "none"]
    if use_no_shell(no_shell, cmds, preps):
        argv.append("-N")
    for n in names:
        argv += ["-n", n]
    if any(preps):
        for p in preps:
            argv += ["--prepare", p or ":"]
    argv += extra_flags
    return argv + (["--", *cmds] if supports_dashdash() else list(cmds))


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


_DASHDASH: bool | None = None


def supports_dashdash() -> bool:
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


# ---- --export-json files --------------------------------------------------------------------
@dataclass(frozen=True)
class CommandResult:
    """One command of a hyperfine --export-json file, every tuple with one value per measured run.

    Formats read: 1.15 to 1.20. Both export user and system CPU only as means over the runs
    (spread evenly here, `per_run_cpu` False); 1.20 adds `memory_usage_byte`, the peak memory of
    every run (None here for older files). `exit_codes` holds None for a run killed by a signal.
    """
    name: str  # the command's -n name, or the command line itself when it has none
    times: tuple[float, ...]  # wall seconds per run
    user: tuple[float, ...]  # user CPU seconds per run
    system: tuple[float, ...]  # system CPU seconds per run
    exit_codes: tuple[int | None, ...]
    memory_bytes: tuple[int, ...] | None  # peak memory per run; None when the file has none (< 1.20)
    per_run_cpu: bool = False  # True only if the file had per-run user/system lists
    parameters: tuple[tuple[str, str], ...] = ()  # --parameter-scan / -L values, sorted by name

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


def parse_export(data: dict, source: str = "hyperfine export") -> tuple[CommandResult, ...]:
    """The results of a parsed --export-json document, in the order hyperfine ran the commands."""
    try:
        out = []
        for res in data["results"]:
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
            params = tuple(sorted((str(k), str(v)) for k, v in (res.get("parameters") or {}).items()))
            out.append(CommandResult(name=str(res["command"]), times=times, user=user, system=system,
                                     exit_codes=exit_codes, memory_bytes=memory,
                                     per_run_cpu=per_run_user and per_run_sys, parameters=params))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise RefbenchError(f"{source}: not a hyperfine --export-json file ({type(e).__name__}: {e})") from None
    return tuple(out)


def read_export(path: str | Path) -> tuple[CommandResult, ...]:
    """Read a hyperfine --export-json file; a malformed file is one RefbenchError."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise RefbenchError(f"{path}: cannot read hyperfine results ({e})") from None
    return parse_export(data, str(path))


def _per_run(value, n: int) -> tuple[tuple[float, ...], bool]:
    """A per-run list as it is; a mean (what 1.15 exports) spread over the n runs."""
    if isinstance(value, list):
        if len(value) != n:
            raise ValueError(f"{len(value)} values for {n} runs")
        return tuple(float(v) for v in value), True
    return (float(value or 0.0),) * n, False
