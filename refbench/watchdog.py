"""The watchdog: a run stops cleanly before it can starve the machine.

While a run goes on, a thread samples every second the available memory, free disk wherever the
run writes (its local temp dir, the fixture cache, the server's data dir), the size of the
server's data dir (the embedded MinIO's, or the IPFS repos) and of the run's local temp dir, and
the server processes' RSS and open file descriptors. Walking a large data dir costs time, so
sizes are taken less often when a walk is slow (at most ~2% of one core).

It also asks the S3 server whether it is still there (the backend's `server_down`: the embedded
MinIO's process, and a bare TCP connect to the endpoint, no request): a server that has not
answered for `server` seconds (10 by default) stops the run the same way. Without this a dead
server took minutes to end a run: hyperfine runs a round's every command with -i, and each s5cmd
run retries a refused connection for about a minute. The probe runs in this thread, between and
during runs, so the timed commands pay nothing for it.

When one crosses its floor (by default: available memory below 10% of the total; free disk below
a reserve of 5% of the filesystem, at least 1 GiB, but never more than half of what the up-front
disk check left spare; the data dir above 4x what the run was expected to store, at least that
plus 1 GiB), the thread interrupts the main thread with SIGUSR1, whose handler raises
WatchdogStop there: the command running is killed with its process group (runner.run_group), the
steps that finished are kept (the runner attaches them to the exception), everything the run
created is removed by the usual cleanup, and the run exits 2 with one line naming what crossed
its floor and what grew, by how much.

REFBENCH_WATCHDOG overrides the floors (for tests, or a machine you know):
``mem=10%`` (or a size: the least available memory), ``disk=1G`` (or ``5%`` of each filesystem),
``data=64M`` (the most the data dir may hold), ``server=10`` (seconds a server may not answer),
``interval=1`` (seconds), or ``off``.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .units import human_bytes, parse_size
from .errors import RefbenchError, RunError

log = logging.getLogger(__name__)

GIB = 1 << 30
WAKE_SIGNAL = signal.SIGUSR1


class WatchdogStop(RunError):
    """Raised in the main thread when a resource crossed its floor. It carries no results: what
    finished before is the runner's progress (stopping.Progress.finished), which the pipeline reads."""


# ---- what the machine has --------------------------------------------------------------------
def meminfo() -> tuple[int, int]:
    """(MemTotal, MemAvailable) in bytes."""
    total = avail = 0
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
            elif line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    return total, avail


def existing(path: Path) -> Path:
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def proc_status(pid: int, key: str) -> int:
    """A kB field of /proc/PID/status (VmRSS, VmHWM) in bytes; 0 when gone."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


# ---- floors ----------------------------------------------------------------------------------
@dataclass
class Limits:
    mem_floor: int | None = None  # least MemAvailable, bytes
    mem_floor_note: str = ""
    disk_floor_pct: float | None = None  # override: fraction of each filesystem
    disk_floor_abs: int | None = None  # override: bytes, every filesystem
    data_max: int | None = None  # most bytes in the server's data dir
    interval: float = 1.0
    server_after: float = 10.0  # seconds the server may not answer before the run stops
    enabled: bool = True


def parse_env(text: str | None, limits: Limits, mem_total: int) -> Limits:
    """Apply REFBENCH_WATCHDOG (mem=10%,disk=1G,data=64M,interval=1 | off) to the defaults."""
    if not text:
        return limits
    if text.strip().lower() in ("off", "0", "no", "false"):
        limits.enabled = False
        return limits
    try:
        for item in text.split(","):
            if not item.strip():
                continue
            key, _, value = item.partition("=")
            key, value = key.strip().lower(), value.strip()
            if key == "mem":
                if value.endswith("%"):
                    limits.mem_floor = int(mem_total * float(value[:-1]) / 100)
                    limits.mem_floor_note = f"{value} of {human_bytes(mem_total)}"
                else:
                    limits.mem_floor, limits.mem_floor_note = parse_size(value), "REFBENCH_WATCHDOG"
            elif key == "disk":
                if value.endswith("%"):
                    limits.disk_floor_pct = float(value[:-1]) / 100
                else:
                    limits.disk_floor_abs = parse_size(value)
            elif key == "data":
                limits.data_max = parse_size(value)
            elif key == "server":
                limits.server_after = max(0.0, float(value.rstrip("s")))
            elif key == "interval":
                limits.interval = max(0.05, float(value))
            else:
                raise ValueError(f"unknown key {key!r}")
    except ValueError as e:
        raise RefbenchError(f"REFBENCH_WATCHDOG={text!r}: {e} (expected e.g. mem=10%,disk=1G,data=64M,"
                            "server=10,interval=1, or off)") from None
    return limits


# ---- the watchdog ----------------------------------------------------------------------------
@dataclass
class Watched:
    """A filesystem the run writes to, and its floor."""
    path: Path
    floor: int
    free_start: int = 0
    free_min: int | None = None


@dataclass
class Watchdog:
    data_dir: Path | None = None  # the server's data (MinIO data dir, IPFS repos)
    data_label: str = "data dir"
    local_dir: Path | None = None  # the run's local temp dir (downloads, scratch)
    disks: list[Watched] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    pids: Callable[[], list[int]] = lambda: []  # server processes (RSS, open fds)
    extra: Callable[[], dict] = lambda: {}  # more figures for the record (e.g. trash purged)
    on_sample: Callable[[dict], None] | None = None  # every sample, for the soak benchmark
    server_down: Callable[[], str | None] | None = None  # why the server is gone, None while it answers
    server_label: str = "server"
    # state
    samples: int = 0
    mem_total: int = 0
    mem_start: int = 0
    mem_min: int | None = None
    data_start: int | None = None
    data_peak: int = 0
    data_last: int = 0
    local_start: int | None = None
    local_peak: int = 0
    local_last: int = 0
    rss_peak: int = 0
    fds_peak: int = 0
    where: str = ""  # what the run was doing (the runner's last progress message)
    tripped: str | None = None
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _main: int | None = None
    _old_handler: object = None
    _armed: bool = False
    _next_walk: float = 0.0
    _walk_seconds: float = 0.0
    _down_since: float | None = None

    # ---- construction -----------------------------------------------------------------------
    @classmethod
    def for_run(cls, backend, workdir: Path, cache_dir: Path, *, run_need: int = 0, fixture_need: int = 0,
                expected_data: int = 0, env: str | None = None) -> "Watchdog":
        """The watchdog of a run: floors from the machine and the up-front disk check; `env` is
        REFBENCH_WATCHDOG's value (None or '': the defaults)."""
        mem_total, mem_avail = meminfo()
        limits = Limits(mem_floor=mem_total // 10, mem_floor_note=f"10% of {human_bytes(mem_total)}")
        data_dir, label = (backend.watch_dir() if hasattr(backend, "watch_dir") else (None, ""))
        if data_dir is not None and expected_data > 0:
            limits.data_max = max(4 * expected_data, expected_data + GIB)
        # the caller's REFBENCH_WATCHDOG (runenv.MachineSettings): read once, at the command line
        limits = parse_env(env, limits, mem_total)
        needs: dict[int, tuple[Path, int]] = {}  # st_dev -> (path, bytes the run may still write there)
        for path, need in ((workdir, run_need), (cache_dir, fixture_need), (data_dir, 0)):
            if path is None:
                continue
            p = existing(path)
            try:
                dev = os.stat(p).st_dev
            except OSError:
                continue
            if str(p).startswith("/dev/shm"):
                continue  # RAM: the memory floor covers it
            prev = needs.get(dev)
            needs[dev] = (prev[0] if prev else p, (prev[1] if prev else 0) + need)
        disks = []
        for path, need in needs.values():
            usage = shutil.disk_usage(path)
            if limits.disk_floor_abs is not None:
                floor = limits.disk_floor_abs
            elif limits.disk_floor_pct is not None:
                floor = int(usage.total * limits.disk_floor_pct)
            else:
                # a reserve of 5% (at least 1 GiB), lowered for a run the up-front check let
                # through close to the limit: then half of what it left spare
                floor = min(max(GIB, usage.total // 20), max(0, usage.free - need) // 2)
            disks.append(Watched(path, floor, usage.free, usage.free))
        pids = backend.server_pids if hasattr(backend, "server_pids") else (lambda: [])
        extra = backend.watch_extra if hasattr(backend, "watch_extra") else (lambda: {})
        return cls(data_dir=data_dir, data_label=label or "data dir", local_dir=workdir, disks=disks,
                   limits=limits, pids=pids, extra=extra, server_down=getattr(backend, "server_down", None),
                   server_label=getattr(backend, "server_label", "server"))

    # ---- running ----------------------------------------------------------------------------
    def start(self) -> "Watchdog":
        """Start sampling. Call from the main thread: that is where WatchdogStop is raised."""
        self.mem_total, self.mem_start = meminfo()
        if self.data_dir is not None:
            from .backends.dirs import tree_bytes
            self.data_start = self.data_last = self.data_peak = tree_bytes(self.data_dir)
        if self.local_dir is not None:
            from .backends.dirs import tree_bytes
            self.local_start = self.local_last = self.local_peak = tree_bytes(self.local_dir)
        if threading.current_thread() is threading.main_thread():
            self._main = threading.main_thread().ident
            self._old_handler = signal.signal(WAKE_SIGNAL, self._handler)
            self._armed = True
        else:
            log.warning("watchdog started outside the main thread: it records, but cannot stop the run")
        self._thread = threading.Thread(target=self._loop, name="refbench-watchdog", daemon=True)
        self._thread.start()
        return self

    def note(self, where: str) -> None:
        self.where = where

    def stop(self) -> None:
        self._armed = False
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if self._old_handler is not None and threading.current_thread() is threading.main_thread():
            signal.signal(WAKE_SIGNAL, self._old_handler)
            self._old_handler = None

    def _handler(self, signum, frame):
        if self._armed and self.tripped:
            self._armed = False  # once
            raise WatchdogStop(f"stopped by the watchdog: {self.tripped}")

    def _loop(self) -> None:
        while not self._stop.wait(self.limits.interval if self.samples else 0):
            try:
                reason = self.sample()
            except Exception as e:  # a sampling hiccup must not end the run
                log.debug("watchdog sample failed: %s", e)
                continue
            if reason and self.limits.enabled:
                self.tripped = reason
                log.warning("watchdog: %s", reason)
                if self._main is not None:
                    signal.pthread_kill(self._main, WAKE_SIGNAL)
                return

    def sample(self) -> str | None:
        """Take one sample, update the peaks; return why the run must stop, if it must."""
        from .backends.dirs import tree_bytes
        now = time.monotonic()
        self.samples += 1
        total, avail = meminfo()
        self.mem_min = avail if self.mem_min is None else min(self.mem_min, avail)
        if now >= self._next_walk:
            t0 = time.monotonic()
            if self.data_dir is not None:
                self.data_last = tree_bytes(self.data_dir)
                self.data_peak = max(self.data_peak, self.data_last)
            if self.local_dir is not None:
                self.local_last = tree_bytes(self.local_dir)
                self.local_peak = max(self.local_peak, self.local_last)
            self._walk_seconds = time.monotonic() - t0
            self._next_walk = now + max(0.0, 50 * self._walk_seconds - self.limits.interval)  # <= ~2% duty
        rss = fds = 0
        for pid in self.pids():
            rss += proc_status(pid, "VmRSS")
            fds += open_fds(pid)
        self.rss_peak, self.fds_peak = max(self.rss_peak, rss), max(self.fds_peak, fds)
        free = {}
        for d in self.disks:
            try:
                free[str(d.path)] = f = shutil.disk_usage(d.path).free
            except OSError:
                continue
            d.free_min = f if d.free_min is None else min(d.free_min, f)
        if self.on_sample:
            self.on_sample({"t": time.time(), "mem_available": avail, "data_bytes": self.data_last,
                            "local_bytes": self.local_last, "disk_free": free, "server_rss": rss,
                            "server_fds": fds, **self.extra()})
        # ---- floors ----
        if (gone := self.server_gone(now)) is not None:
            return gone
        if self.limits.data_max is not None and self.data_last > self.limits.data_max:
            return (f"the {self.data_label} grew by {human_bytes(self.data_last - (self.data_start or 0))} "
                    f"to {human_bytes(self.data_last)}, above its limit of {human_bytes(self.limits.data_max)}"
                    + self._during())
        if self.limits.mem_floor is not None and avail < self.limits.mem_floor:
            return (f"available memory fell to {human_bytes(avail)} (from {human_bytes(self.mem_start)}), "
                    f"below the floor of {human_bytes(self.limits.mem_floor)}"
                    + (f" ({self.limits.mem_floor_note})" if self.limits.mem_floor_note else "")
                    + self._grew() + self._during())
        for d in self.disks:
            f = free.get(str(d.path))
            if f is not None and f < d.floor:
                return (f"free disk in {d.path} fell to {human_bytes(f)} (from {human_bytes(d.free_start)}), "
                        f"below the floor of {human_bytes(d.floor)}" + self._grew() + self._during())
        return None

    def server_gone(self, now: float) -> str | None:
        """Why the run must stop once the server has not answered for limits.server_after seconds."""
        if self.server_down is None:
            return None
        down = self.server_down()
        if down is None:
            self._down_since = None
            return None
        if self._down_since is None:
            self._down_since = now
        if now - self._down_since < self.limits.server_after:
            return None
        return (f"the {self.server_label} stopped answering ({down}) for {now - self._down_since:.0f} s"
                + self._during())

    def _grew(self) -> str:
        """What of the run's grew most since it started."""
        growth = []
        if self.data_dir is not None:
            growth.append((self.data_last - (self.data_start or 0), self.data_label))
        if self.local_dir is not None:
            growth.append((self.local_last - (self.local_start or 0), "run's local temp dir"))
        if not growth:
            return ""
        g, what = max(growth)
        return f"; the {what} grew by {human_bytes(g)}" if g > 0 else "; nothing of the run's grew (other processes?)"

    def _during(self) -> str:
        return f", during {self.where}" if self.where else ""

    # ---- the record -------------------------------------------------------------------------
    def report(self) -> dict:
        """The peaks, for results.json `resources`."""
        out = {
            "watchdog": "on" if self.limits.enabled else "off", "interval_seconds": self.limits.interval,
            "samples": self.samples, "stopped": self.tripped,
            "memory": {"total": self.mem_total, "available_start": self.mem_start, "available_min": self.mem_min,
                       "floor": self.limits.mem_floor},
            "disk": [{"path": str(d.path), "free_start": d.free_start, "free_min": d.free_min, "floor": d.floor}
                     for d in self.disks],
            "server": {"rss_peak": self.rss_peak or None, "open_fds_peak": self.fds_peak or None},
        }
        if self.data_dir is not None:
            out["data_dir"] = {"what": self.data_label, "start": self.data_start, "peak": self.data_peak,
                               "end": self.data_last, "limit": self.limits.data_max, **self.extra()}
        if self.local_dir is not None:
            out["local_dir"] = {"start": self.local_start, "peak": self.local_peak, "end": self.local_last}
        return out
