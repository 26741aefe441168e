"""What a build's long-lived daemon (kubo's `ipfs daemon`) spent during one timed run (issue 36).

In kubo's online and offline modes the CLI that hyperfine times is a thin client: `ipfs add`
does its work in the daemon. So each timed run is bracketed by two probes, run by hyperfine's
--prepare and --conclude around the command (their cost stays outside the timed command):

- before: reset the daemon's peak-memory high-water mark (`echo 5 > /proc/PID/clear_refs` sets
  VmHWM back to the current RSS), then append a snapshot of its counters to a per-build file;
- after: append another snapshot. The run's usage is after − before, its peak is after's VmHWM.

Counters (all process-wide, so every thread of the Go daemon counts):
- CPU: usage_usec of the cpu.stat of a cgroup v2 the daemon was moved into at its start
  (CpuCgroup), microseconds, every thread including those that exited. Where no cgroup can be
  made (no cgroup v2 mount, not writable: a user without root), utime + stime of /proc/PID/stat,
  which also counts exited threads but in clock ticks (10 ms at USER_HZ 100): a run of ~15 ms of
  daemon CPU reads 10 or 20 ms there, and an A/A run gave false daemon-cpu verdicts on that
  quantisation. (The sum of /proc/PID/task/*/schedstat, in ns, was the other candidate: it loses
  a thread that exits during the run, and Go's runtime does end threads, so it was not taken.)
  Each record says which source it read (CPU_SOURCES), and so does the backend's description;
- peak memory: VmHWM of /proc/PID/status, bytes, since the reset (a cgroup's memory.peak, which
  a write resets from Linux 6.12, needs the memory controller on the cgroup v2 tree: on a hybrid
  system such as this one's, 6.18 with memory on cgroup v1, it has none, so clear_refs stays);
- writes: write_bytes of /proc/PID/io, the bytes it caused to be sent to a block device. A repo
  on tmpfs (or any page-cache-only file system) counts 0 there: the figure is only meaningful
  where the run's work dir is on a disk;
- Go allocation bytes and GC cycles from the daemon's /debug/metrics/prometheus
  (go_memstats_alloc_bytes_total, go_gc_duration_seconds_count), where the daemon serves it. Its
  API listens on loopback inside the run's namespace, so the probe runs behind the same prefix
  as every command of the scenario.

A daemon that is gone when a probe reads it is a RunError naming it, never a zero.

The same probes run around each timed run of an s3 step on the embedded MinIO (MinioServer.probes,
role "server"): of those only the CPU is kept, as `server-cpu` (Usage.values), context beside the
request counts unless the run asks for its verdict (verdict.asked). A user's bucket (-b) has no
process of ours to probe: no figure there.

The probes are a ProbeServer per daemon: one process, started once inside the run's namespace
(where the daemon's API is), keeps a connection to the metrics endpoint open and reads /proc
itself; hyperfine's hooks only pass it a line through a FIFO with shell builtins and wait for
its answer (a Probe: the two asks' shell text, server_bodies, as hyperfine takes them, Probe.hooks).
benchmarks/daemon_metrics.py measures what that costs per run.
(A shell fallback that copied the /proc files and ran curl per probe was removed: every place
that runs hooks can start the server, since it runs behind the same prefix as the scenario's
commands with the same Python, and it cost 14 ms per run, 64 ms with curl.)
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import http.client
import os
import re
import select
import shlex
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from . import paths
from .errors import RunError
from .heldenv import passed
from .metrics import table

log = logging.getLogger(__name__)

# metric name -> what it is, in the order the outputs show them
METRICS = {
    "daemon-cpu": "the daemon's CPU time (user + system) during the run",
    "daemon-memory": "the daemon's peak resident memory during the run",
    "daemon-writes": "bytes the daemon caused to be written to storage during the run",
    "daemon-alloc": "bytes the daemon's Go runtime allocated during the run",
}
# where a run's daemon CPU came from: what results.json's backend description and the summary say
CPU_SOURCES = {
    "cgroup": "read from its own cgroup v2's cpu.stat usage_usec, in microseconds, every thread counted, exited ones too",
    "ticks": "read from utime + stime of /proc/PID/stat, in clock ticks of 10 ms: a few ms per run reads 0, 10 or 20 ms",
}


def cpu_source_text(source: str, why: str = "") -> str:
    """What results.json's backend facts say of a process's CPU counter (CPU_SOURCES), with why it
    had no cgroup where it read ticks: one wording for kubo's daemon and the embedded MinIO."""
    return CPU_SOURCES[source] + (f" ({why})" if why else "")


PROM_ALLOC = "go_memstats_alloc_bytes_total"
PROM_GC = "go_gc_duration_seconds_count"


@dataclass(frozen=True)
class Snapshot:
    """The daemon's counters at one moment (alloc/gc: None where it exposes no Go metrics)."""
    cpu: float  # seconds, user + system, all threads
    peak: int  # VmHWM bytes since the last reset
    writes: int  # write_bytes
    alloc: int | None = None
    gc: int | None = None
    cpu_source: str = "ticks"  # CPU_SOURCES


@dataclass(frozen=True)
class Usage:
    """What the daemon spent during one run: the metrics of METRICS (plus GC cycles, context)."""
    cpu: float
    memory: int
    writes: int
    alloc: int | None = None
    gc: int | None = None
    cpu_source: str = "ticks"  # CPU_SOURCES: where `cpu` came from

    def values(self, role: str = "daemon") -> dict[str, float | int | None]:
        """By metric name, each read by its record (metrics.Metric.read): a daemon's (the table's
        "probe" metrics), or an S3 server's ("server": its CPU only, `server-cpu`)."""
        return {m.name: m.read(self) for m in table().of("server" if role == "server" else "probe")}


def parse_stat_cpu(text: str, ticks: int) -> float:
    """utime + stime (fields 14 and 15 of /proc/PID/stat) in seconds. The comm field may hold
    spaces and parentheses, so the fields are counted after its last ')'."""
    rest = text[text.rindex(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / ticks


def parse_cgroup_cpu(text: str) -> float | None:
    """usage_usec of a cgroup v2 cpu.stat, in seconds; None when the text has none."""
    m = re.search(r"^usage_usec (\d+)$", text, re.M)
    return int(m.group(1)) / 1e6 if m else None


def parse_status_hwm(text: str) -> int:
    m = re.search(r"^VmHWM:\s+(\d+)\s+kB", text, re.M)
    if not m:
        raise RunError("no VmHWM in /proc/PID/status (a kernel thread or a zombie?)")
    return int(m.group(1)) * 1024


def parse_io_writes(text: str) -> int:
    m = re.search(r"^write_bytes:\s+(\d+)", text, re.M)
    if not m:
        raise RunError("no write_bytes in /proc/PID/io (a kernel without task I/O accounting)")
    return int(m.group(1))


def parse_prometheus(text: str) -> tuple[int | None, int | None]:
    """(allocated bytes, GC cycles) from a Prometheus text page; None for one it does not have."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in (PROM_ALLOC, PROM_GC):
            found[parts[0]] = float(parts[1])
    pick = lambda k: int(found[k]) if k in found else None  # noqa: E731
    return pick(PROM_ALLOC), pick(PROM_GC)


def _proc(pid: int, name: str) -> str:
    try:
        return Path(f"/proc/{pid}/{name}").read_text()
    except (FileNotFoundError, ProcessLookupError) as e:
        raise RunError(f"the daemon (pid {pid}) exited during the run: its /proc/{pid}/{name} is gone") from e


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2:].split()[0] not in ("Z", "X")


def snapshot(pid: int, cgroup: Path | None = None) -> Snapshot:
    """The daemon's counters now (the Go ones aside); RunError when it is gone (or a zombie)."""
    if not alive(pid):
        raise RunError(f"the daemon (pid {pid}) exited during the run")
    return parse_block(proc_files(pid, cgroup), os.sysconf("SC_CLK_TCK"))


def reset_peak(pid: int) -> None:
    """Set the daemon's VmHWM back to its current RSS, so the next read is this run's peak only."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except (FileNotFoundError, ProcessLookupError) as e:
        raise RunError(f"the daemon (pid {pid}) exited during the run") from e
    except PermissionError as e:
        raise RunError(f"cannot reset the daemon's peak memory: /proc/{pid}/clear_refs: {e}") from e


def usage(before: Snapshot, after: Snapshot) -> Usage:
    """The run's share: counter differences; the peak is after's (the mark was reset before)."""
    if before.cpu_source != after.cpu_source:
        raise RunError(f"a run's daemon probes read CPU from two sources ({before.cpu_source}, {after.cpu_source})")
    diff = lambda a, b: None if a is None or b is None else a - b  # noqa: E731
    return Usage(round(after.cpu - before.cpu, 6), after.peak, after.writes - before.writes,
                 diff(after.alloc, before.alloc), diff(after.gc, before.gc), after.cpu_source)


@dataclass(frozen=True)
class CpuCgroup:
    """A cgroup v2 of the daemon's own, made only to read its CPU time in microseconds (cpu.stat's
    usage_usec, which every cgroup v2 keeps without any controller enabled, so nothing about the
    daemon's scheduling or limits changes). Made as a child of the cgroup refbench itself is in,
    so it stays inside whatever hierarchy was delegated to us, and named
    `refbench-daemon-<daemon pid>-<refbench pid>`. `why` says why there is none (the CPU is then
    read in ticks).

    It goes when the run does, however the run ends: close() after the daemon stopped (the run's
    clean-up: a normal end, an error, Ctrl-C or SIGTERM); and a guard (`sh` blocked reading a pipe
    only this process holds, as process.group_guard) removes it once the daemon is gone when
    refbench itself dies outright (SIGKILL, the OOM killer), which allows no clean-up. An earlier
    run's that neither removed (the guard killed too) goes with the next daemon's sweep: at once
    when the run that made it is gone, else after ten minutes (pid reuse)."""
    path: Path
    guard: "subprocess.Popen | None" = field(default=None, compare=False, repr=False)

    PREFIX = "refbench-daemon-"

    @classmethod
    def create(cls, pid: int, mounts: str | None = None) -> "tuple[CpuCgroup | None, str]":
        """(the cgroup the daemon `pid` was moved into, "") or (None, why not). `mounts`: the text of
        /proc/self/mounts (read when not given)."""
        root = cgroup2_mount(mounts)
        if root is None:
            return None, "no cgroup v2 mounted"
        parent = root / own_cgroup().lstrip("/")
        _sweep(parent)
        path = parent / f"{cls.PREFIX}{pid}-{os.getpid()}"
        try:
            path.mkdir()
        except OSError as e:
            return None, f"cannot make a cgroup under {parent}: {e.strerror or e}"
        try:
            (path / "cgroup.procs").write_text(str(pid))
            if parse_cgroup_cpu((path / "cpu.stat").read_text()) is None:
                raise OSError(f"{path / 'cpu.stat'} has no usage_usec")
        except OSError as e:
            cls(path).close()
            return None, f"cannot move the daemon into {path}: {e.strerror or e}"
        return cls(path, _cgroup_guard(path)), ""

    def close(self) -> None:
        """Remove the cgroup; a process still in it goes back to the parent first (rmdir needs it
        empty). Then its guard is told the cgroup is taken care of, and exits."""
        with contextlib.suppress(OSError):
            for pid in (self.path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (self.path.parent / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            self.path.rmdir()
        from .backends.process import release_guard  # here: refbench.backends imports this module
        release_guard(self.guard)


# The cgroup's guard (CpuCgroup): `read` fails when the pipe closes, which is refbench dying
# however it dies; the daemon dies with it (its own guard or parent-death signal), and the cgroup
# can go once it is empty: rmdir is retried for up to 30 s while the daemon's threads exit. A line
# on the pipe (the run's own clean-up removed it) ends the guard without touching anything.
_CGROUP_GUARD = ('read -r _ || { i=0; while [ -d "$1" ] && ! rmdir "$1" 2>/dev/null && [ "$i" -lt 300 ]; '
                 'do sleep 0.1; i=$((i + 1)); done; }')


def _cgroup_guard(path: Path) -> "subprocess.Popen | None":
    try:
        return subprocess.Popen(["sh", "-c", _CGROUP_GUARD, "refbench-cgroup-guard", str(path)],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    except OSError:  # no sh: a killed run's cgroup waits for the next run's sweep, as before
        return None


def cgroup2_mount(mounts: str | None = None) -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a
    hybrid system), from /proc/self/mounts; None without one."""
    try:
        text = Path("/proc/self/mounts").read_text() if mounts is None else mounts
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "cgroup2":
            return Path(parts[1])
    return None


def own_cgroup(text: str | None = None) -> str:
    """This process's cgroup v2 path (the '0::' line of /proc/self/cgroup), '/' if none is given."""
    try:
        text = Path("/proc/self/cgroup").read_text() if text is None else text
    except OSError:
        return "/"
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:] or "/"
    return "/"


def _sweep(parent: Path, age: float = 600) -> None:
    """Remove empty daemon cgroups left by runs that were killed (their daemons died with them):
    at once when the run that made one (the pid its name ends with) is gone, else once older than
    `age`, since that pid may be another process's now. rmdir fails on one that still holds a
    process, and a young one of a live run is left alone: it may be about to move its daemon in."""
    now = time.time()
    for old in parent.glob(CpuCgroup.PREFIX + "*"):
        with contextlib.suppress(OSError):
            owner = cgroup_owner(old.name)
            if (owner is not None and not alive(owner)) or now - old.stat().st_mtime > age:
                old.rmdir()


def cgroup_owner(name: str) -> int | None:
    """The pid of the refbench run that made a daemon cgroup, from its name (CpuCgroup); None for
    a name that is not one."""
    m = re.fullmatch(re.escape(CpuCgroup.PREFIX) + r"\d+-(\d+)", name)
    return int(m.group(1)) if m else None


def probe(phase: str, pid: int, out: Path, metrics_url: str | None = None, cgroup: Path | None = None) -> None:
    """One probe run here, in this process (tests, the CLI): the record a probe server appends."""
    fetch = _Metrics(metrics_url) if metrics_url else None
    text = _probe_record(phase, pid, fetch, cgroup)
    with open(out, "a") as fh:
        fh.write(text)


def parse_block(text: str, ticks: int) -> Snapshot:
    """One probe's record: /proc/PID/stat, status and io (and the cgroup's cpu.stat where the
    daemon has one: its CPU is then read there), then the Go metrics if any."""
    head, _, metrics = text.partition("@metrics")
    stat = next((ln for ln in head.splitlines() if ")" in ln and ln.split(" ", 1)[0].isdigit()), None)
    if stat is None:
        raise RunError("a daemon probe record has no /proc/PID/stat line")
    alloc, gc = parse_prometheus(metrics)
    cgroup_cpu = parse_cgroup_cpu(head)
    cpu, source = (parse_stat_cpu(stat, ticks), "ticks") if cgroup_cpu is None else (cgroup_cpu, "cgroup")
    return Snapshot(cpu, parse_status_hwm(head), parse_io_writes(head), alloc, gc, source)


def read_usages(path: Path) -> list[Usage]:
    """Every run's usage from a build's probe file, in run order; RunError naming the file when
    the probes do not pair up (a run whose after-probe never ran: the daemon died mid-run)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    ticks = os.sysconf("SC_CLK_TCK")
    out: list[Usage] = []
    before: Snapshot | None = None
    for n, rec in enumerate(re.findall(r"^@(before|after)\n(.*?)^@end$", text, re.M | re.S), 1):
        phase, body = rec
        snap = parse_block(body, ticks)
        if phase == "before" and before is None:
            before = snap
        elif phase == "after" and before is not None:
            out.append(usage(before, snap))
            before = None
        else:
            raise RunError(f"{path}: daemon probe {n} ({phase}) out of order (the daemon died mid-run?)")
    if before is not None:
        raise RunError(f"{path}: the last run's daemon probe has no 'after' (the daemon died mid-run?)")
    return out


def proc_files(pid: int, cgroup: Path | None = None) -> str:
    """The daemon's /proc stat, status and io, then its cgroup's cpu.stat where it has one: one
    probe record's head (parse_block)."""
    head = "".join(_proc(pid, n) for n in ("stat", "status", "io"))
    if cgroup is None:
        return head
    try:
        return head + (Path(cgroup) / "cpu.stat").read_text()
    except OSError as e:
        raise RunError(f"the daemon's CPU counter {Path(cgroup) / 'cpu.stat'} could not be read: {e}") from e


def record(phase: str, head: str, metrics: str | None) -> str:
    """One probe's record (parse_block): /proc files (and cpu.stat), then the Go metric lines."""
    return f"@{phase}\n{head}" + (f"@metrics\n{metrics}" if metrics is not None else "") + "@end\n"


def prom_lines(text: str) -> str:
    """The two Go metric lines of a Prometheus page: all a record keeps of it."""
    return "".join(ln + "\n" for ln in text.splitlines() if ln.split(" ", 1)[0] in (PROM_ALLOC, PROM_GC))


class _Metrics:
    """A kept-alive HTTP connection to the daemon's metrics page: no process start and no new
    connection per probe (the daemon's cost of a probe is then rendering the page only)."""

    def __init__(self, url: str, timeout: float = 5):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = u.hostname or "127.0.0.1", u.port or 80, u.path or "/"
        self.url, self.timeout, self.conn = url, timeout, None

    def get(self) -> str:
        for attempt in (1, 2):  # a kept-alive connection the daemon closed: one fresh try
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                self.conn.request("GET", self.path)
                resp = self.conn.getresponse()
                body = resp.read().decode("utf-8", "replace")
                if resp.status != 200:
                    raise OSError(f"HTTP {resp.status}")
                return prom_lines(body)
            except (OSError, http.client.HTTPException) as e:
                self.conn = None
                if attempt == 2:
                    raise RunError(f"the daemon's metrics at {self.url} could not be read: {e}") from e
        raise AssertionError("unreachable")


def serve(pid: int, out: Path, fifo_dir: Path, metrics_url: str | None, ready=print,
          cgroup: Path | None = None) -> None:
    """The probe server's loop: each line `before` or `after` on fifo_dir/req is one probe of
    `pid`, its record appended to `out`, and `ok` (or the error, one line) written to
    fifo_dir/ack. Order: before = metrics, /proc, reset; after = /proc, metrics; so the daemon's
    work for a probe (rendering the page) falls outside the run it measures. Both FIFOs stay open
    read-write here, so a hook never blocks on an open and sees no EOF between probes. Exits when
    the process that started it is gone (a parent-death signal does not cross a user namespace)."""
    parent = os.getppid()
    req = os.open(fifo_dir / "req", os.O_RDWR)
    ack = os.open(fifo_dir / "ack", os.O_RDWR)
    fetch = _Metrics(metrics_url) if metrics_url else None
    if fetch is not None:
        fetch.get()  # fails now, at start, not in the first timed run
    proc_files(pid, cgroup)  # so does an unreadable cgroup or /proc
    ready("ready", flush=True)
    for phase in _requests(req, parent):
        try:
            text = _probe_record(phase, pid, fetch, cgroup)
            with open(out, "a") as fh:  # opened per probe: the runner removes the file after each round
                fh.write(text)
            answer = "ok"
        except RunError as e:
            answer = " ".join(str(e).split())
        os.write(ack, (answer + "\n").encode())


def _requests(fd: int, parent: int):
    """The lines written to the request FIFO, until the process that started the server is gone."""
    buf = b""
    while True:
        if b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode(errors="replace").strip()
        elif select.select([fd], [], [], 1.0)[0]:
            buf += os.read(fd, 4096)
        elif os.getppid() != parent:
            return


def _probe_record(phase: str, pid: int, fetch: "_Metrics | None", cgroup: Path | None = None) -> str:
    """One probe's record (before: metrics, /proc, reset; after: /proc, metrics)."""
    if phase not in ("before", "after"):
        raise RunError(f"daemon probe server: unknown request {phase!r}")
    if not alive(pid):
        raise RunError(f"the daemon (pid {pid}) exited during the run")
    if phase == "before":
        text = record(phase, proc_files(pid, cgroup), fetch.get() if fetch else None)
        reset_peak(pid)
        return text
    head = proc_files(pid, cgroup)
    return record(phase, head, fetch.get() if fetch else None)


class ProbeServer:
    """One daemon's probe server (serve), a process started through `prefix` (inside the run's
    namespace, where the daemon's API is reachable). probe() is what hyperfine runs to ask it."""

    def __init__(self, prefix: tuple[str, ...], pid: int, out: Path, metrics_url: str | None,
                 timeout: float = 30, cgroup: Path | None = None):
        self.pid, self.out = pid, Path(out)
        self.dir = self.out.with_name(self.out.name + ".fifo")
        self.dir.mkdir(parents=True, exist_ok=True)
        for name in ("req", "ack"):
            if not (self.dir / name).exists():
                os.mkfifo(self.dir / name)
        argv = [*prefix, sys.executable, "-m", "refbench.daemon", "serve", "--pid", str(pid),
                "--out", str(self.out), "--fifos", str(self.dir), *(("--metrics", metrics_url) if metrics_url else ()),
                *(("--cgroup", str(cgroup)) if cgroup else ())]
        # the children's allow-list, as every process beside a timed run: it lives through them all
        # (the re-reading's N1: it was given the whole environment, secrets and all)
        env = {**passed(paths.layout().environ), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline().strip() if ready else ""
        if line != "ready":
            self.close()
            err = (self.proc.stderr.read() or "").strip().splitlines()
            raise RunError(f"the daemon probe server for pid {pid} did not start: "
                           f"{err[-1] if err else 'no answer within %.0fs' % timeout}")

    def probe(self, role: str = "daemon") -> Probe:
        """The asks of this server around each timed run, and the file its answers go to."""
        return Probe(*server_bodies(self.proc.pid, self.dir), self.out, role)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for name in ("req", "ack"):
            (self.dir / name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.dir.rmdir()


@dataclass(frozen=True)
class Probe:
    """What hyperfine runs around each timed run of one build to read its daemon (or an S3
    backend's server) through the process's ProbeServer: the shell text of the ask before the run
    and of the ask after it (builtins only, server_bodies), the file the server appends each
    answer to, and whose figures they are ("daemon"; "server" for the embedded MinIO, whose CPU
    alone is kept, as server-cpu)."""
    before: str
    after: str
    out: Path
    role: str = "daemon"

    def hooks(self, own_shell: bool) -> tuple[str, str]:
        """The two asks as hyperfine's --prepare and --conclude take them. own_shell: each a
        command of its own, `sh -c BODY`, which hyperfine -N starts directly; else the body in
        braces, for a call whose hooks hyperfine runs through its shell anyway (a command or a
        prepare needs one, as kubo's `> cid` does): a second `sh` start there cost about 0.9 ms
        twice a run (issue 36's overhead outside the timed command)."""
        if own_shell:
            return "sh -c " + shlex.quote(self.before), "sh -c " + shlex.quote(self.after)
        return "{ " + self.before + "; }", "{ " + self.after + "; }"


def server_bodies(server_pid: int, fifo_dir: Path) -> tuple[str, str]:
    """The shell text that asks a probe server (serve) for one probe before and after a run:
    shell builtins only (one `sh` start at most, no other process). A server or daemon gone: one
    line naming it on stderr, exit 2, and hyperfine fails with it."""
    q = shlex.quote
    req, ack = q(str(fifo_dir / "req")), q(str(fifo_dir / "ack"))
    gone = q(f"refbench: the daemon probe server (pid {server_pid}) is gone")

    def one(phase: str) -> str:
        return (f"[ -d /proc/{server_pid} ] || {{ echo {gone} >&2; exit 2; }}; echo {phase} > {req} && "
                f"read -r r < {ack}; [ \"$r\" = ok ] || {{ echo \"refbench: ${{r:-no answer}}\" >&2; exit 2; }}")
    return one("before"), one("after")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m refbench.daemon", description="one daemon probe (issue 36)")
    p.add_argument("phase", choices=("before", "after", "serve"))
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--metrics")
    p.add_argument("--fifos", type=Path, help="serve: the directory of its req and ack FIFOs")
    p.add_argument("--cgroup", type=Path, help="the daemon's own cgroup v2 directory (CpuCgroup): CPU from its cpu.stat")
    a = p.parse_args(argv)
    try:
        if a.phase == "serve":
            if a.fifos is None:
                p.error("serve needs --fifos")
            serve(a.pid, a.out, a.fifos, a.metrics, cgroup=a.cgroup)
        else:
            probe(a.phase, a.pid, a.out, a.metrics, a.cgroup)
    except RunError as e:
        print(f"refbench daemon probe: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
