"""Leases: what a run leaves in a user's bucket can be found, and removed, after the run died.

Every run on a user's bucket works under ``PREFIX/<run id>/`` and, before it stores anything
else there, writes a small lease object ``PREFIX/<run id>/.refbench-lease.json`` (owner host,
pid, start, ttl, expiry) which a thread rewrites every ttl/4 while the run goes on. The run's
cleanup removes the lease last, after everything else under the prefix.

A run that was killed (SIGKILL, a CI timeout, the machine rebooted) or whose server went away
leaves its prefix and its lease; the lease stops being refreshed and expires. The next run on the
same bucket and ``-p``, and ``./bench.py clean --remote -b BUCKET -p PREFIX``, look at the
children of ``PREFIX/`` (one level, exactly where runs put their prefixes) and remove those whose
lease expired. Expiry is judged by the *server's* clock (the lease object's LastModified against
the Date of the server's reply), so clock skew between hosts cannot make a live run look dead.
A run killed on *this* host is swept at once: its lease names this host, boot and pid namespace,
and no process with its pid and start time runs any more. Never touched: a prefix whose lease is
live (and whose owner is not provably gone); a prefix without a lease (not known to be a run's:
listed, never removed); a lease that names another prefix than the one it sits in; a lease whose
owner process is still running on this host; anything outside ``PREFIX/``.
"""
from __future__ import annotations

import contextlib
import email.utils
import json
import logging
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from .errors import RefbenchError

log = logging.getLogger(__name__)

LEASE_NAME = ".refbench-lease.json"
LEASE_SCHEMA = "refbench/lease"
DEFAULT_TTL = 600.0  # seconds; refreshed every ttl/4, so three refreshes in a row may fail


def parse_ttl(text: str | None) -> float:
    """REFBENCH_LEASE_TTL's seconds (tests use a few), else 10 min: a value that is no positive
    number keeps the default, as a lease that expires at once would let a sweep take a live run."""
    try:
        v = float(text if text else DEFAULT_TTL)
    except ValueError:
        return DEFAULT_TTL
    return v if v > 0 else DEFAULT_TTL


# ---- -p/--prefix -------------------------------------------------------------------------------
_UNSAFE_CHARS = re.compile(r"[\x00-\x1f\x7f*?\[\]\\]")


def check_prefix(prefix: str | None) -> str:
    """Return the prefix without leading/trailing slashes, or refuse it (one line, exit 2).

    A run writes, and cleanup deletes, everything below PREFIX/<run id>/; clean --remote deletes
    below PREFIX/. So the prefix must be a plain key path: not empty or '/', no '.' or '..'
    segment, no empty segment ('a//b'), no control characters, and none of the wildcard characters
    s5cmd expands in remote paths (* ? [ ]) or a backslash, which would make `rm PREFIX/...`
    match keys outside it."""
    if prefix is None:
        raise RefbenchError("-p/--prefix must not be empty")
    bad = _UNSAFE_CHARS.search(prefix)
    if bad:
        raise RefbenchError(f"-p/--prefix {prefix!r}: unsafe character {bad.group()!r} "
                            "(control characters, * ? [ ] and \\ are refused)")
    p = prefix.strip("/")
    if not p:
        raise RefbenchError(f"-p/--prefix {prefix!r} is empty: runs must stay below a prefix of their own")
    segments = p.split("/")
    if any(s in ("", ".", "..") for s in segments):
        raise RefbenchError(f"-p/--prefix {prefix!r}: '.', '..' and empty segments are refused")
    if len(p.encode()) > 512:
        raise RefbenchError("-p/--prefix is longer than 512 bytes")
    return p


# ---- this host's processes ---------------------------------------------------------------------
def process_start(pid: int) -> str | None:
    """The kernel's start time of a process (clock ticks since boot), which tells a pid from a
    later process that reused it; None if there is no such process (or no /proc)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def owner_alive(pid: int | None, start: str | None) -> bool | None:
    """True/False when this host can tell whether the process pid (started at start) runs;
    None when it cannot (no pid)."""
    if not pid:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if start is None:
        return True
    now = process_start(pid)
    return now is None or now == start


def host_identity() -> dict[str, str | None]:
    """What a pid in a lease means on this machine: the boot (after a reboot, pids start over)
    and the pid namespace (containers can share a kernel and a host name, not their pids)."""
    try:
        boot = open("/proc/sys/kernel/random/boot_id").read().strip() or None
    except OSError:
        boot = None
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = None
    return {"boot_id": boot, "pid_ns": ns}


def owner_gone(data: dict) -> bool:
    """True only when this host can prove a lease's run is dead: written on this host, in this
    boot and pid namespace, and no process with its pid and start time runs. Then its prefix can
    go at once instead of after the lease expires; any doubt (another host, a reboot, no start
    time recorded) leaves it to expire."""
    here = host_identity()
    if data.get("host") != socket.gethostname() or not here["boot_id"] or not here["pid_ns"]:
        return False
    if data.get("boot_id") != here["boot_id"] or data.get("pid_ns") != here["pid_ns"]:
        return False
    try:
        pid = int(data.get("pid") or 0)
    except (TypeError, ValueError):
        return False
    if not pid or not data.get("pid_start") or pid == os.getpid():
        return False
    return owner_alive(pid, str(data["pid_start"])) is False


# ---- time ------------------------------------------------------------------------------------------
class Clock:
    """Where leases read the time and wait: this host's clock for what a lease says of itself, the
    server's for judging expiry, and the wait between refreshes. One object, so a test can move
    time (a simulated clock) instead of sleeping through a lease's lifetime."""

    def now(self) -> float:
        return time.time()

    def server_now(self, client, bucket: str) -> float:
        return server_now(client, bucket)

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """Wait seconds, or until stop is set; True when stopped."""
        return stop.wait(seconds)


CLOCK = Clock()  # the clock a Lease or a sweep uses when it is given none


# ---- the lease of this run ---------------------------------------------------------------------
def lease_key(run_prefix: str) -> str:
    return f"{run_prefix.strip('/')}/{LEASE_NAME}"


@dataclass
class Lease:
    """This run's lease: written by start(), rewritten every ttl/4 by a daemon thread."""

    client_factory: Callable[[], object]
    bucket: str
    prefix: str  # the run's own prefix: PREFIX/<run id>
    ttl: float = DEFAULT_TTL  # the run's MachineSettings.lease_ttl (REFBENCH_LEASE_TTL)
    started: float | None = None  # the clock's now when not given
    refreshes: int = 0
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    clock: Clock = field(default_factory=lambda: CLOCK)

    def __post_init__(self) -> None:
        if self.started is None:
            self.started = self.clock.now()

    @property
    def key(self) -> str:
        return lease_key(self.prefix)

    def body(self) -> bytes:
        now = self.clock.now()
        return json.dumps({
            "schema": LEASE_SCHEMA, "version": 1, "prefix": self.prefix.strip("/"),
            "host": socket.gethostname(), "pid": os.getpid(), "pid_start": process_start(os.getpid()),
            **host_identity(),
            "started": _iso(self.started), "refreshed": _iso(now), "ttl_seconds": self.ttl,
            "expires": _iso(now + self.ttl),
        }, indent=1).encode()

    def write(self, client=None) -> None:
        (client or self.client_factory()).put_object(Bucket=self.bucket, Key=self.key, Body=self.body(),
                                                     ContentType="application/json")

    def start(self) -> "Lease":
        self.write()
        self._thread = threading.Thread(target=self._refresh_loop, name="refbench-lease", daemon=True)
        self._thread.start()
        return self

    def _refresh_loop(self) -> None:
        client = None
        while not self.clock.wait(self._stop, self.ttl / 4):
            try:
                client = client or self.client_factory()
                self.write(client)
                self.refreshes += 1
            except Exception as e:  # keep trying: three failures in a row still leave it live
                self.failures += 1
                client = None
                log.warning("could not refresh the lease s3://%s/%s: %s", self.bucket, self.key, e)

    def stop(self) -> None:
        """Stop refreshing (the lease object itself goes last in the prefix's cleanup)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- finding and removing dead runs' prefixes --------------------------------------------------
@dataclass
class Found:
    prefix: str  # PREFIX/<child>, no trailing slash
    state: str  # "expired", "live", "no lease", "foreign lease"
    owner: str = ""  # "host pid N"
    age: float | None = None  # seconds since the lease was last written (server clock)
    ttl: float | None = None
    removed: int = 0  # objects (and versions) removed
    error: str = ""  # why removing it failed (the sweep goes on with the others)
    gone: bool = False  # removed before expiry: its run was killed on this host, provably

    def describe(self) -> str:
        if self.state == "expired" and self.error:
            return f"{self.prefix}/: lease of {self.owner} expired, but removing it failed: {self.error}"
        if self.state == "expired" and self.gone:
            return f"{self.prefix}/: {self.owner} was killed on this host (its process is gone), " \
                   f"{self.removed} objects removed"
        if self.state == "expired":
            return (f"{self.prefix}/: lease of {self.owner} expired {_dur(self.age - self.ttl)} ago, "
                    f"{self.removed} objects removed")
        if self.state == "live":
            return f"{self.prefix}/: live run ({self.owner}, lease refreshed {_dur(self.age)} ago), left alone"
        if self.state == "owner running":
            return f"{self.prefix}/: lease expired but {self.owner} still runs on this host, left alone"
        if self.state == "foreign lease":
            return f"{self.prefix}/: lease names another prefix, left alone"
        return f"{self.prefix}/: no refbench lease (not known to be a run's), left alone"


def sweep_lines(found: list[Found]) -> list[str]:
    """What a run says about its start-up sweep: each prefix removed, then one line for the
    prefixes left alone (a busy -p would otherwise print a line per run every time)."""
    lines = [f"lease sweep: {f.describe()}" for f in found if f.state == "expired"]
    left: dict[str, int] = {}
    for f in found:
        if f.state != "expired":
            left[f.state] = left.get(f.state, 0) + 1
    if left:
        words = {"live": "live run(s)", "no lease": "without a refbench lease", "foreign lease": "with a lease "
                 "naming another prefix", "owner running": "expired but its owner still runs here"}
        lines.append("lease sweep: left alone below -p: " + ", ".join(
            f"{n} {words.get(state, state)}" for state, n in left.items()))
    return lines


def _dur(s: float | None) -> str:
    if s is None:
        return "?"
    s = max(0.0, s)
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def server_now(client, bucket: str) -> float:
    """The server's clock (Date header of a HeadBucket reply); this host's if it sends none."""
    try:
        headers = client.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPHeaders"]
        return email.utils.parsedate_to_datetime(headers["date"]).timestamp()
    except Exception:
        return time.time()


def list_children(client, bucket: str, base: str) -> list[str]:
    """The 'directories' directly below base/ (one level), without trailing slash."""
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=base + "/",
                                                                   Delimiter="/"):
        for cp in page.get("CommonPrefixes", []):
            p = cp["Prefix"].rstrip("/")
            if p.startswith(base + "/") and "/" not in p[len(base) + 1:]:
                out.append(p)
    return out


def inspect(client, bucket: str, child: str, now: float) -> Found:
    """What the lease under child/ says, judged by the server's clock."""
    from botocore.exceptions import ClientError
    try:
        obj = client.get_object(Bucket=bucket, Key=lease_key(child))
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
            return Found(child, "no lease")
        raise
    raw = obj["Body"].read(65536)
    modified = obj["LastModified"].timestamp()
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not an object")
    except ValueError:
        data = {}
    if data.get("schema") != LEASE_SCHEMA or data.get("prefix", "").strip("/") != child:
        return Found(child, "foreign lease")
    try:
        ttl = float(data.get("ttl_seconds") or DEFAULT_TTL)
    except (TypeError, ValueError):
        ttl = DEFAULT_TTL
    owner = f"{data.get('host', '?')} pid {data.get('pid', '?')}"
    age = now - modified
    found = Found(child, "expired" if age > ttl else "live", owner, age, ttl)
    if found.state == "live" and owner_gone(data):
        found.state, found.gone = "expired", True
    if found.state == "expired" and data.get("host") == socket.gethostname():
        with contextlib.suppress(TypeError, ValueError):
            if owner_alive(int(data.get("pid") or 0), data.get("pid_start")):
                found.state = "owner running"  # stalled (suspended?) but not dead: never pull the rug
    return found


def sweep(client, bucket: str, base: str, remove: Callable[[str], int], *, skip: str | None = None,
          dry_run: bool = False, clock: Clock | None = None) -> list[Found]:
    """Look at every child prefix of base/ and remove those whose lease expired; return what was
    found (removed ones have state 'expired'). `remove(prefix)` deletes every object (and every
    version) under prefix/ and returns how many; `skip` is the caller's own run prefix; `clock`
    whose server_now judges expiry (default CLOCK: the server's Date)."""
    base = check_prefix(base)
    clock = clock or CLOCK
    found = []
    for child in list_children(client, bucket, base):
        if skip and child == skip.strip("/"):
            continue
        f = inspect(client, bucket, child, clock.server_now(client, bucket))
        if f.state == "expired" and not dry_run:
            # look again right before deleting: a stalled owner may just have refreshed it
            again = inspect(client, bucket, child, clock.server_now(client, bucket))
            if again.state != "expired":
                f = again
            else:
                try:
                    f.removed = remove(child)
                except Exception as e:  # one stubborn prefix must not stop the run or the others
                    f.error = str(e).splitlines()[0] if str(e) else type(e).__name__
        found.append(f)
    return found
