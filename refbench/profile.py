"""Differential CPU profiles: where each build's CPU time went in a step, and what moved.

One untimed profiled run per build under `perf record -e cpu-clock -g`: a software clock event
(no hardware PMU needed, so it works in VMs) with frame-pointer call graphs, which Go keeps on
amd64 and arm64 and perf symbolises from the binary's symbol table (Go's DWARF unwinding is
worse). A short step gives few samples, so its run is repeated and the folded stacks added.
The stacks are folded here (`comm;outer;...;leaf count`, as inferno-collapse-perf folds them) and
compared by each function's share of the build's samples where it is the leaf (self time): the
function that burns the CPU, not every caller above it. Where the command is a client of a server
that does the work (kubo's CLI and its online daemon), the server is sampled too (`perf record -p`)
while the command runs, under a root frame of its own. A binary built with -s -w has no symbol
table: it is said, not drawn as an empty graph.
"""
from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Iterable

from . import results as rs

PERF_EVENT = "cpu-clock"
ATTACH_SECONDS = 0.3  # a server's perf record -p opens every thread's events before the command starts
MIN_PROFILED_SECONDS = 0.5  # repeat a short step until each build's profiled runs take about this long
MAX_REPEATS = 5
TOP_FUNCTIONS = 5
MAX_STACKS = 300  # folded stacks kept per profile (the largest): the flame graph's bulk, results.json small
PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")


# ---- can perf be used here ------------------------------------------------------------------
def find_perf() -> str | None:
    """perf on PATH only (refbench never installs a second one): a PATH without it means none."""
    return shutil.which("perf")


def paranoid_level() -> int | None:
    try:
        return int(PARANOID.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def perf_status(perf: str | None = None) -> tuple[bool, str]:
    """(usable, why or what was found). Tries a real record of `true`: a container without the
    perf_event_open syscall or a too strict perf_event_paranoid only shows there. The record goes
    to perf's pipe mode (`-o -`) into /dev/null: a file of its own in a temp directory was left in
    /tmp whenever refbench was killed outright during the probe (once per test suite's SIGKILL test)."""
    perf = perf or find_perf()
    if not perf:
        return False, "no profile: perf not found"
    level = paranoid_level()
    try:
        p = subprocess.run([perf, "record", "-q", "-e", PERF_EVENT, "-g", "-o", "-", "--", "true"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"no profile: perf cannot run ({e})"
    if p.returncode != 0:
        err = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])
        text = " ".join(err)
        if "paranoid" in text or (level is not None and level > 2 and os.geteuid() != 0):
            return False, (f"no profile: perf_event_paranoid is {level} (needs <= 2 for a user's own processes; "
                           "sysctl kernel.perf_event_paranoid=2, or run as root)")
        if "not supported" in text.lower() or "function not implemented" in text.lower() or "ENOSYS" in text:
            return False, "no profile: this kernel or container has no perf_event_open syscall"
        return False, f"no profile: perf record fails here ({err[-1][:160]})"
    return True, f"{perf} (perf_event_paranoid {level if level is not None else '?'})"


# ---- symbols ---------------------------------------------------------------------------------
def has_symbols(binary: str | os.PathLike) -> bool | None:
    """Whether an ELF binary has a symbol table (.symtab): Go's -s -w strips it, and perf then
    names no function. None when the file is not a readable ELF file."""
    try:
        with open(binary, "rb") as fh:
            ident = fh.read(64)
            if ident[:4] != b"\x7fELF":
                return None
            is64, little = ident[4] == 2, ident[5] == 1
            e = "<" if little else ">"
            if is64:
                shoff, = struct.unpack_from(e + "Q", ident, 0x28)
                shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", ident, 0x3A)
            else:
                shoff, = struct.unpack_from(e + "I", ident, 0x20)
                shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", ident, 0x2E)
            fh.seek(shoff)
            table = fh.read(shentsize * shnum)

            def section(i):  # (name offset, type, file offset, size)
                raw = table[i * shentsize:(i + 1) * shentsize]
                if is64:
                    name, typ, _, _, off, size = struct.unpack_from(e + "IIQQQQ", raw)
                else:
                    name, typ, _, _, off, size = struct.unpack_from(e + "IIIIII", raw)
                return name, typ, off, size

            _, _, stroff, strsize = section(shstrndx)
            fh.seek(stroff)
            names = fh.read(strsize)
            SHT_SYMTAB = 2
            return any(section(i)[1] == SHT_SYMTAB for i in range(shnum)) or \
                b"\x00.symtab\x00" in names
    except (OSError, struct.error, IndexError):
        return None


# ---- folding and comparing -------------------------------------------------------------------
def fold(script_text: str) -> Counter:
    """`perf script -F comm,ip,sym` output -> folded stacks (root first, the process name as the
    root frame) with their sample counts."""
    folded: Counter = Counter()
    comm, frames = None, []

    def flush():
        if comm is not None:
            folded[";".join([comm] + [f for f in reversed(frames)])] += 1

    for line in script_text.splitlines():
        if not line.strip():
            flush()
            comm, frames = None, []
        elif line[0] in " \t":
            parts = line.split(None, 1)
            sym = parts[1].strip() if len(parts) > 1 else "[unknown]"
            frames.append(sym.replace(";", ":"))
        else:
            flush()
            comm, frames = line.strip().replace(";", ":") or "?", []
    flush()
    return folded


def self_shares(folded: Counter) -> dict[str, float]:
    """Each function's share of the samples where it is the leaf."""
    total = sum(folded.values())
    leaf: Counter = Counter()
    for stack, n in folded.items():
        leaf[stack.rsplit(";", 1)[-1]] += n
    return {f: n / total for f, n in leaf.items()} if total else {}


def top_shifts(base: Counter, cont: Counter, n: int = TOP_FUNCTIONS) -> tuple[rs.FunctionShift, ...]:
    """The n functions whose self share changed most (either way)."""
    a, b = self_shares(base), self_shares(cont)
    moved = sorted(set(a) | set(b), key=lambda f: (-abs(b.get(f, 0) - a.get(f, 0)), f))
    return tuple(rs.FunctionShift(function=f, baseline_share=round(a.get(f, 0.0), 6),
                                  contender_share=round(b.get(f, 0.0), 6)) for f in moved[:n]
                 if a.get(f, 0.0) != b.get(f, 0.0))


def diff_stacks(base: Counter, cont: Counter, limit: int = MAX_STACKS,
                depth: int = 6) -> tuple[tuple[str, int, int], ...]:
    """Both builds' folded stacks side by side (inferno-diff-folded's output): the `limit` largest
    whole; the rest cut to their `depth` outermost frames and merged (as one '…' frame), so
    every sample stays in the flame graph while results.json stays small."""
    both = {k: [base.get(k, 0), cont.get(k, 0)] for k in set(base) | set(cont)}
    keys = sorted(both, key=lambda k: (-sum(both[k]), k))
    out = {k: both[k] for k in keys[:limit]}
    for k in keys[limit:]:
        cut = ";".join(k.split(";")[:depth] + ["…"])
        a, b = out.setdefault(cut, [0, 0])
        out[cut] = [a + both[k][0], b + both[k][1]]
    kept = sorted(out, key=lambda k: (-sum(out[k]), k))[:2 * limit]
    return tuple((k, out[k][0], out[k][1]) for k in sorted(kept))


def differential(baseline: str, contender: str, folded: dict[str, Counter], repeats: int,
                 note: str | None = None) -> rs.Profile:
    """The differential profile of a contender against the baseline: samples, the functions whose
    share moved most, and the stacks' differences ("differential": "compare" is two saved runs)."""
    base, cont = folded.get(baseline, Counter()), folded.get(contender, Counter())
    return rs.Profile(baseline=baseline, contender=contender,
                      samples=MappingProxyType({baseline: sum(base.values()), contender: sum(cont.values())}),
                      repeats=repeats, top=top_shifts(base, cont), stacks=diff_stacks(base, cont), note=note)


def repeats_for(mean_seconds: float | None) -> int:
    """Profiled runs per build: enough for about MIN_PROFILED_SECONDS of the command."""
    if not mean_seconds or mean_seconds <= 0:
        return 1
    return max(1, min(MAX_REPEATS, math.ceil(MIN_PROFILED_SECONDS / mean_seconds)))


# ---- recording -------------------------------------------------------------------------------
def record(perf: str, cmd: str, data: Path, execute: Callable[[list[str], str], None], what: str,
           attach: int | None = None) -> Counter:
    """Run `cmd` (a shell command) once under perf record and fold what it sampled. `execute`
    runs an argv in the run's environment and raises when it fails. `attach`: a server process
    the command talks to (kubo's online daemon, where an online `ipfs add` does its work), sampled
    for as long as the command runs; its stacks are rooted at `<its name> (server)`."""
    server = None
    if attach is not None:
        server_data = data.with_name(data.name + ".server")
        server = subprocess.Popen([perf, "record", "-q", "-e", PERF_EVENT, "-g", "-p", str(attach),
                                   "-o", str(server_data)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(ATTACH_SECONDS)  # perf opens the events of every thread before it samples
    try:
        execute([perf, "record", "-q", "-e", PERF_EVENT, "-g", "-o", str(data), "--", "sh", "-c", cmd], what)
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)  # perf writes its file on SIGINT
            try:
                server.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.communicate()
    folded = _script(perf, data)
    if server is not None:
        folded.update(as_server(_script(perf, server_data)))
    return folded



def _script(perf: str, data: Path) -> Counter:
    """Fold a perf.data file, then remove it."""
    try:
        p = subprocess.run([perf, "script", "-i", str(data), "-F", "comm,ip,sym"], capture_output=True,
                           text=True, errors="replace", timeout=600)
    finally:
        data.unlink(missing_ok=True)
    return fold(p.stdout)


def as_server(folded: Counter) -> Counter:
    """A server's stacks with its root frame marked, so its functions read apart from the
    client's of the same name (`ipfs` is both the CLI and the daemon)."""
    out: Counter = Counter()
    for stack, n in folded.items():
        root, _, rest = stack.partition(";")
        out[";".join(filter(None, (f"{root} (server)", rest)))] += n
    return out


# ---- kubo's own profile (IPFS_PROF) ------------------------------------------------------------
# kubo writes a Go pprof CPU profile, ipfs.cpuprof, into its working directory when IPFS_PROF is
# set: the runtime's own sampler, next to perf's view. The shim stands in for the binary in the
# profiled command and runs each ipfs process in a directory of its own, so a command that starts
# several (pin rm, then repo gc) keeps every profile. Arguments given as relative paths would then
# miss: refbench's kubo commands name every path absolutely ({{ work }}, {{ fixture }}).
PPROF_FILE = "ipfs.cpuprof"
PPROF_SHIM = """#!/bin/sh
# refbench: one ipfs process with kubo's own CPU profile (IPFS_PROF writes {file} to the cwd)
d=$(mktemp -d {where}/p.XXXXXX) || exit 1
cd "$d" || exit 1
IPFS_PROF=true exec {binary} "$@"
"""


def write_pprof_shim(binary: str, where: Path) -> Path:
    import shlex
    where.mkdir(parents=True, exist_ok=True)
    shim = where / "ipfs-prof"
    shim.write_text(PPROF_SHIM.format(file=PPROF_FILE, where=shlex.quote(str(where)), binary=shlex.quote(binary)))
    shim.chmod(0o755)
    return shim


def pprof_files(where: Path) -> list[Path]:
    return sorted(where.glob(f"p.*/{PPROF_FILE}"))


# ---- the daemon's own profile (kubo's /debug/pprof/profile) -------------------------------------
# In kubo's online and offline modes the work is the daemon's, and IPFS_PROF profiles only the CLI.
# The daemon's Go CPU profile is read from its API (inside the run's namespace, where it listens)
# for a fixed number of seconds that cover one profiled run: it samples only CPU time, so the
# idle rest adds nothing. Its stacks are rooted at `ipfs (server)`, as perf's of the daemon (issue 36).
DAEMON_PPROF = "daemon.cpuprof"


def daemon_pprof_files(where: Path) -> list[Path]:
    return sorted(where.glob(f"{DAEMON_PPROF}.*"))


def daemon_pprof_seconds(means: Iterable[float | None]) -> int:
    """The profile's length (whole seconds, as pprof takes it): the slowest build's mean run + 1."""
    return math.ceil(max((m for m in means if m), default=0.0)) + 1


@contextlib.contextmanager
def daemon_pprof(prefix: tuple[str, ...], api: str | None, seconds: int, where: Path):
    """The daemon's CPU profile for `seconds` from now, around what runs in the block, into a new
    file of `where` (daemon_pprof_files). No API (no daemon) or no curl: nothing. A profile that
    cannot be read is a RuntimeError naming the URL once the block is done."""
    curl = shutil.which("curl")
    if not api or curl is None:
        yield
        return
    where.mkdir(parents=True, exist_ok=True)
    out = where / f"{DAEMON_PPROF}.{len(daemon_pprof_files(where))}"
    url = f"{api}/debug/pprof/profile?seconds={seconds}"
    proc = subprocess.Popen([*prefix, curl, "-sSf", "--max-time", str(seconds + 30), "-o", str(out), url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(ATTACH_SECONDS)  # the daemon starts sampling when the request arrives
    try:
        yield
    finally:
        try:
            _, err = proc.communicate(timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"the daemon's profile at {url} could not be read: {(err or '').strip() or proc.returncode}")


def daemon_pprof_folded(go: str, binary: str, where: Path) -> Counter:
    """The daemon's profiles of one build, merged and folded, its stacks marked as the server's."""
    return as_server(pprof_folded(go, binary, daemon_pprof_files(where)))


def fold_pprof(traces_text: str, root: str) -> Counter:
    """`go tool pprof -traces -sample_index=samples` output -> folded stacks (root first, `root`
    as the process frame) with their sample counts. Each trace is a line of dashes, then the
    count and the leaf, then its callers one a line."""
    folded: Counter = Counter()
    count, frames, in_trace = 0, [], False

    def flush():
        if frames and count:
            folded[";".join([root] + [f for f in reversed(frames)])] += count

    for line in traces_text.splitlines():
        if line.startswith("-----------+"):
            flush()
            count, frames, in_trace = 0, [], True
        elif in_trace and line.strip():
            name = line.strip()
            if not frames:
                head, _, name = name.partition(" ")
                count = int(head) if head.isdigit() else 0
            frames.append(name.strip().removesuffix(" (inline)").replace(";", ":"))
    flush()
    return folded


def pprof_folded(go: str, binary: str, files: list[Path]) -> Counter:
    """Every profile of one build, merged by pprof and folded."""
    if not files:
        return Counter()
    from .toolchain import LOCAL, go_env  # here: toolchain imports GitPython (refs)
    with tempfile.TemporaryDirectory(prefix="refbench-pprof-") as scratch:  # no go.mod here to switch its Go
        p = subprocess.run([go, "tool", "pprof", "-traces", "-sample_index=samples", binary, *map(str, files)],
                           capture_output=True, text=True, errors="replace", timeout=600, cwd=scratch,
                           env={**go_env(), "GOTOOLCHAIN": LOCAL, "GOWORK": "off"})
    if p.returncode != 0:
        raise RuntimeError((p.stderr.strip().splitlines() or [f"go tool pprof exit {p.returncode}"])[-1])
    return fold_pprof(p.stdout, Path(binary).name)


def add(counters: Iterable[Counter]) -> Counter:
    total: Counter = Counter()
    for c in counters:
        total.update(c)
    return total
