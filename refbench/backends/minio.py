"""The embedded S3 server: a real MinIO on a free loopback port, with random credentials and a
data dir of its own (in RAM when everything it keeps fits), started and stopped by the run.
"""
from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from ..daemon import CpuCgroup, Probe, ProbeServer, cpu_source_text, parse_cgroup_cpu, parse_stat_cpu
from ..errors import RunError
from ..tools import find_tool
from .dirs import beside, sweep_stale, tree_bytes, write_owner
from .process import child_env, server_preexec, stop_process

log = logging.getLogger(__name__)


def free_port() -> int:
    """A port free now: another process may take it before its user binds it. Only for servers
    that retry such a clash and check that they are talking to their own process (toxiproxy's API)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unreachable(endpoint: str, timeout: float = 2.0) -> str | None:
    """Why nothing answers at an http(s) endpoint now ("connection refused", "no answer in 2 s"),
    or None when a TCP connection is accepted there. A bare connect sends no request, so the
    server's request accounting counts none; a server that is stopped (SIGSTOP) but whose socket
    still accepts looks alive here."""
    from urllib.parse import urlsplit
    parts = urlsplit(endpoint)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return f"no port in {endpoint!r}"
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=timeout):
            return None
    except ConnectionRefusedError:
        return "connection refused"
    except socket.timeout:
        return f"no answer in {timeout:g} s"
    except OSError as e:
        return e.strerror or str(e)


def listening_ports(pid: int) -> list[int]:
    """The TCP ports process pid listens on at 127.0.0.1, from /proc: how refbench learns which
    port a server bound itself (127.0.0.1:0), so no other process can take it between a choice and
    its use, and what answers there is that process."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
        table = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return []
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    ports = set()
    for line in table:
        f = line.split()
        # local address 127.0.0.1 (0100007F, little-endian hex), state 0A = LISTEN, then the inode
        if len(f) > 9 and f[1].startswith("0100007F:") and f[3] == "0A" and f[9] in inodes:
            ports.add(int(f[1].split(":")[1], 16))
    return sorted(ports)


# MinIO does not free overwritten or deleted objects at once: it renames them into
# .minio.sys/tmp/.trash/<uuid> and a background loop removes them every
# MINIO_API_DELETE_CLEANUP_INTERVAL (default 5m). An upload step that overwrites a 256 MiB object
# every run therefore piles up one copy per run (8.6 GB of trash after ~34 runs, in RAM). Setting
# the interval is not enough on its own: the loop's first timer is armed while the object layer
# starts, before the configuration (and the environment) is read, so the first purge always comes
# 5 minutes after start (cmd/erasure-sets.go cleanupDeletedObjects, getDeleteCleanupInterval). So
# the embedded server gets a 1s interval AND refbench empties the trash of its own private server
# itself, every TRASH_PURGE_INTERVAL: what is in there is already out of the namespace, and MinIO's
# own purge is the same removeAll of each entry.
DELETE_CLEANUP_INTERVAL = "1s"
TRASH_PURGE_INTERVAL = 0.1
TRASH_DIR = Path(".minio.sys") / "tmp" / ".trash"


def client_env(access_key: str, secret_key: str, endpoint: str) -> dict[str, str]:
    """The environment a client of the embedded server runs with (the commands, boto3)."""
    return {"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key,
            "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1", "S3_ENDPOINT_URL": endpoint}


class MinioServer:
    """A real MinIO server on a free loopback port, with a temp data dir and random credentials."""

    def __init__(self, workdir: Path, binary: str | None = None, data_parent: Path | None = None,
                 cpus: frozenset[int] | None = None, pass_env: frozenset[str] = frozenset()):
        self.pass_env = pass_env  # more names the server sees (MachineSettings.pass_env)
        self.cpus = cpus  # pinned here, with GOMAXPROCS to match, when the run separates server and client
        self.binary = binary or find_tool("minio")
        if not self.binary:
            raise RunError("minio not found (tools/bin/minio or PATH): run `make setup`, or pass -b BUCKET")
        parent = data_parent or workdir
        sweep_stale(parent)
        self.data_dir = Path(tempfile.mkdtemp(prefix="refbench-minio-", dir=parent))
        write_owner(self.data_dir)
        self.port: int | None = None  # the server binds 127.0.0.1:0 itself; start() reads the port back
        self.endpoint = ""
        self.access_key = "rb" + secrets.token_hex(8)
        self.secret_key = secrets.token_hex(20)
        self.proc: subprocess.Popen | None = None
        self.log_path = beside(self.data_dir, "log")
        self.trash_purged = 0  # bytes refbench removed from the server's trash
        self.metrics_public = True  # its metrics v3 endpoint needs no token (request accounting)
        self._purger: threading.Thread | None = None
        self._stop_purger = threading.Event()
        self.cpu_cgroup: CpuCgroup | None = None  # its own cgroup v2: its CPU in µs (refbench.daemon)
        self.cpu_why = ""  # why it has none (its CPU is then read in clock ticks)
        self.cpu_source = "ticks"  # refbench.daemon.CPU_SOURCES: where its CPU figures came from
        self.probe_servers: dict[str, ProbeServer] = {}  # build label -> the probes of its timed runs

    @property
    def trash(self) -> Path:
        return self.data_dir / "data" / TRASH_DIR

    def purge_trash(self, min_age: float = 0.0) -> int:
        """Remove what MinIO moved to its trash (at least min_age seconds ago); never the trash dir
        itself, nor the drive's writable-check file. MinIO moves an object's data in with one
        rename(2), so an entry is complete as soon as it is there. Returns the bytes freed."""
        freed = 0
        now = time.time()
        try:
            entries = list(os.scandir(self.trash))
        except OSError:
            return 0
        for e in entries:
            if e.name.startswith(".writable-check-"):
                continue
            try:
                if min_age and now - e.stat(follow_symlinks=False).st_ctime < min_age:
                    continue
                size = tree_bytes(Path(e.path))
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    os.unlink(e.path)
                freed += size
            except OSError:
                continue
        self.trash_purged += freed
        return freed

    def _purge_loop(self) -> None:
        while not self._stop_purger.wait(TRASH_PURGE_INTERVAL):
            try:
                self.purge_trash()
            except Exception as e:  # never let housekeeping take the run down
                log.debug("trash purge: %s", e)

    def start(self, timeout: float = 60) -> "MinioServer":
        env = {**child_env(extra=self.pass_env),
               "MINIO_ROOT_USER": self.access_key, "MINIO_ROOT_PASSWORD": self.secret_key,
               "MINIO_BROWSER": "off", "MINIO_UPDATE": "off", "MINIO_CI_CD": "1",
               "MINIO_API_DELETE_CLEANUP_INTERVAL": DELETE_CLEANUP_INTERVAL,
               # request accounting reads /minio/metrics/v3 without a token (loopback only; see accounting.py)
               "MINIO_PROMETHEUS_AUTH_TYPE": "public"}
        if self.cpus:
            env["GOMAXPROCS"] = str(len(self.cpus))
        with open(self.log_path, "w") as fh:
            self.proc = subprocess.Popen(
                [self.binary, "server", "--quiet", "--address", "127.0.0.1:0",
                 "--console-address", "127.0.0.1:0", str(self.data_dir / "data")],
                stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                preexec_fn=lambda: server_preexec(self.cpus))
        self.cpu_cgroup, self.cpu_why = CpuCgroup.create(self.proc.pid)
        self.cpu_source = "cgroup" if self.cpu_cgroup is not None else "ticks"  # kept for describe(), after stop()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                self.stop()
                raise RunError("embedded MinIO exited at start", detail=tail)
            for port in listening_ports(self.proc.pid):  # the API's (its console is off: MINIO_BROWSER)
                if self._ready(port):
                    self.port, self.endpoint = port, f"http://127.0.0.1:{port}"
                    log.info("embedded MinIO ready at %s", self.endpoint)
                    self._purger = threading.Thread(target=self._purge_loop, name="refbench-minio-trash",
                                                    daemon=True)
                    self._purger.start()
                    return self
            time.sleep(0.1)
        self.stop()
        raise RunError(f"embedded MinIO did not become ready within {timeout:.0f}s")

    def exited(self) -> str | None:
        """Why the server is gone ("its process exited with code 1", "... killed by signal 9"), or
        None while its process runs (or before it started)."""
        code = self.proc.poll() if self.proc is not None else None
        if code is None:
            return None
        return f"its process {self.proc.pid} " + (f"was killed by signal {-code}" if code < 0 else f"exited with code {code}")

    def cpu_seconds(self) -> float | None:
        """MinIO's CPU time so far (user + system, every thread): from its cgroup (µs) where it has
        one, else /proc's ticks. Read around a run, the server's cost of the requests a build made
        (accounting.server_cpu). None when not running."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        try:
            if self.cpu_cgroup is not None:
                return parse_cgroup_cpu((self.cpu_cgroup.path / "cpu.stat").read_text())
            return parse_stat_cpu(Path(f"/proc/{self.proc.pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))
        except OSError:
            return None

    def probes(self, label: str) -> Probe | None:
        """What hyperfine runs around each timed run of `label` (a refbench.daemon.ProbeServer on
        this server's process, one per build so each build's runs land in its own file), in the
        role "server" (the runner keeps only its CPU: `server-cpu`); None when not running."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        server = self.probe_servers.get(label)
        if server is None:
            out = beside(self.data_dir, f"probes-{len(self.probe_servers)}")
            cgroup = self.cpu_cgroup.path if self.cpu_cgroup is not None else None
            server = self.probe_servers[label] = ProbeServer((), self.proc.pid, out, None, cgroup=cgroup)
        return server.probe("server")

    def cpu_fact(self) -> str:
        """Where its per-run CPU comes from (results.json's backend fact `server cpu`)."""
        return cpu_source_text(self.cpu_source, self.cpu_why)

    @staticmethod
    def _ready(port: int) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/minio/health/ready", timeout=1) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    def stop(self) -> None:
        self._stop_purger.set()
        if self._purger is not None:
            self._purger.join(timeout=10)
            self._purger = None
        for server in self.probe_servers.values():
            server.close()
            server.out.unlink(missing_ok=True)
        self.probe_servers.clear()
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None
        if self.cpu_cgroup is not None:  # empty now: the server is gone
            self.cpu_cgroup.close()
            self.cpu_cgroup = None
        shutil.rmtree(self.data_dir, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            self.log_path.unlink()

    def __enter__(self) -> "MinioServer":
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def in_ram(self) -> bool:
        """Whether the data dir is in /dev/shm (see minio_data_parent)."""
        return str(self.data_dir).startswith("/dev/shm")

    @property
    def env(self) -> dict[str, str]:
        return client_env(self.access_key, self.secret_key, self.endpoint)


MINIO_META_BYTES = 64 << 20  # .minio.sys: format, config, bucket metadata, usage caches
MINIO_RSS_BYTES = 512 << 20  # what the server process itself holds in memory under load


def minio_footprint(stored_bytes: int, step_bytes: int | None = None) -> int:
    """Everything the embedded MinIO keeps in its data dir at the peak, not just the objects:
    the stored objects, plus what an overwrite or delete leaves in the trash until it is purged
    (at most the largest step's own objects again, while the next run writes the new copy; taken
    as all stored bytes when not known), plus its own metadata."""
    trash = stored_bytes if step_bytes is None else step_bytes
    return stored_bytes + trash + MINIO_META_BYTES


def minio_data_parent(stored_bytes: int, workdir: Path, step_bytes: int | None = None,
                      mem_available: Callable[[], int] | None = None) -> Path:
    """Where the embedded MinIO keeps its data: RAM (/dev/shm) when everything it keeps fits with
    room to spare (the data dir within the free space of /dev/shm, and the data dir plus the
    server's own memory within half the available memory), so the server's disk adds no noise and
    teardown is instant; else the run's local directory. `mem_available`: the machine's available
    memory in bytes (/proc/meminfo's MemAvailable unless given)."""
    shm = Path("/dev/shm")
    try:
        free = shutil.disk_usage(shm).free
        avail = (mem_available or _mem_available)()
    except OSError:
        return workdir
    footprint = minio_footprint(stored_bytes, step_bytes)
    if shm.is_dir() and os.access(shm, os.W_OK) and footprint < free and \
            footprint + MINIO_RSS_BYTES < avail // 2:
        return shm
    return workdir


def _mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0

