"""Where the data goes: an S3 bucket (the user's, or an embedded MinIO on loopback) or IPFS repos.

Every run works under its own unique prefix (S3) or its own throw-away repos (IPFS); teardown
removes exactly that, and nothing outside it.
"""
from __future__ import annotations

import contextlib
import json
import logging
import threading
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .errors import RunError

log = logging.getLogger(__name__)

from .paths import PROJECT_ROOT, find_tool  # noqa: F401  (path lookups live in paths.py)


def die_with_parent() -> None:
    """preexec_fn for servers refbench starts: if refbench is killed outright (SIGKILL, a CI
    timeout), the kernel sends the server SIGTERM rather than leave it running forever."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _server_preexec(cpus: frozenset[int] | None) -> None:
    die_with_parent()
    if cpus:
        os.sched_setaffinity(0, cpus)


def write_owner(d: Path) -> None:
    """Mark a directory as this process's: `owner` holds the pid (what older runs wrote and
    read), `owner.json` adds what tells a dead owner from a live one for sure: host, the
    process's start time (pid reuse) and the kernel's boot id (a reboot ends every run)."""
    from .lease import process_start
    (d / "owner").write_text(str(os.getpid()))
    (d / "owner.json").write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                              "pid_start": process_start(os.getpid()), "boot_id": _boot_id()}))


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def owner_dead(d: Path) -> bool:
    """True only when the directory's owner process is known to be gone from this host."""
    from .lease import owner_alive
    try:
        pid = int((d / "owner").read_text())
    except (OSError, ValueError):
        return False  # not marked by refbench (or not yet): leave it
    try:
        info = json.loads((d / "owner.json").read_text())
    except (OSError, ValueError):
        info = {}
    if info.get("host") not in (None, socket.gethostname()):
        return False  # a temp dir shared with another host or container: not ours to judge
    if info.get("boot_id") and _boot_id() and info["boot_id"] != _boot_id():
        return True
    return owner_alive(pid, info.get("pid_start")) is False


def sweep_stale(parent: Path, pattern: str = "refbench-minio-*") -> list[Path]:
    """Remove directories left by refbench runs that were killed outright (owner process gone):
    MinIO data dirs in RAM or on disk, and runs' local temp dirs. Returns what it removed."""
    removed = []
    for d in sorted(Path(parent).glob(pattern)):
        if not d.is_dir() or d.is_symlink() or not owner_dead(d):
            continue
        shutil.rmtree(d, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            d.with_suffix(".log").unlink()
        removed.append(d)
        log.info("removed %s, left by a killed run", d)
    return removed


WORKDIR_PATTERN = "refbench-[0-9]*-*"  # refbench-<run id>-XXXXXXXX, run id = date-time-hex


def make_workdir(run_id: str, local_root: Path | None) -> tuple[Path, list[Path]]:
    """The run's local temp dir (downloads, scratch, a MinIO data dir on disk), marked with its
    owner, after sweeping the ones killed runs left in the same place. Returns (dir, swept)."""
    parent = Path(local_root) if local_root else Path(tempfile.gettempdir())
    swept = sweep_stale(parent, WORKDIR_PATTERN)
    workdir = Path(tempfile.mkdtemp(prefix=f"refbench-{run_id}-", dir=parent))
    write_owner(workdir)
    return workdir, swept


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_process(proc: subprocess.Popen, timeout: float = 10) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)


# ---- S3 -------------------------------------------------------------------------------------
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


class MinioServer:
    """A real MinIO server on a free loopback port, with a temp data dir and random credentials."""

    def __init__(self, workdir: Path, binary: str | None = None, data_parent: Path | None = None,
                 cpus: frozenset[int] | None = None):
        self.cpus = cpus  # pinned here, with GOMAXPROCS to match, when the run separates server and client
        self.binary = binary or find_tool("minio")
        if not self.binary:
            raise RunError("minio not found (tools/bin/minio or PATH): run `make setup`, or pass -b BUCKET")
        parent = data_parent or workdir
        sweep_stale(parent)
        self.data_dir = Path(tempfile.mkdtemp(prefix="refbench-minio-", dir=parent))
        write_owner(self.data_dir)
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.access_key = "rb" + secrets.token_hex(8)
        self.secret_key = secrets.token_hex(20)
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.with_suffix(".log")
        self.trash_purged = 0  # bytes refbench removed from the server's trash
        self._purger: threading.Thread | None = None
        self._stop_purger = threading.Event()

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
        env = {**os.environ, "MINIO_ROOT_USER": self.access_key, "MINIO_ROOT_PASSWORD": self.secret_key,
               "MINIO_BROWSER": "off", "MINIO_UPDATE": "off", "MINIO_CI_CD": "1",
               "MINIO_API_DELETE_CLEANUP_INTERVAL": DELETE_CLEANUP_INTERVAL}
        if self.cpus:
            env["GOMAXPROCS"] = str(len(self.cpus))
        console = free_port()
        with open(self.log_path, "w") as fh:
            self.proc = subprocess.Popen(
                [self.binary, "server", "--quiet", "--address", f"127.0.0.1:{self.port}",
                 "--console-address", f"127.0.0.1:{console}", str(self.data_dir / "data")],
                stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                preexec_fn=lambda: _server_preexec(self.cpus))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                self.stop()
                raise RunError("embedded MinIO exited at start", detail=tail)
            try:
                with urllib.request.urlopen(f"{self.endpoint}/minio/health/ready", timeout=1) as r:
                    if r.status == 200:
                        log.info("embedded MinIO ready at %s", self.endpoint)
                        self._purger = threading.Thread(target=self._purge_loop, name="refbench-minio-trash",
                                                        daemon=True)
                        self._purger.start()
                        return self
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RunError(f"embedded MinIO did not become ready within {timeout:.0f}s")

    def stop(self) -> None:
        self._stop_purger.set()
        if self._purger is not None:
            self._purger.join(timeout=10)
            self._purger = None
        if self.proc is not None:
            _stop_process(self.proc)
            self.proc = None
        shutil.rmtree(self.data_dir, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            self.log_path.unlink()

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1", "S3_ENDPOINT_URL": self.endpoint}


MINIO_META_BYTES = 64 << 20  # .minio.sys: format, config, bucket metadata, usage caches
MINIO_RSS_BYTES = 512 << 20  # what the server process itself holds in memory under load


def minio_footprint(stored_bytes: int, step_bytes: int | None = None) -> int:
    """Everything the embedded MinIO keeps in its data dir at the peak, not just the objects:
    the stored objects, plus what an overwrite or delete leaves in the trash until it is purged
    (at most the largest step's own objects again, while the next run writes the new copy; taken
    as all stored bytes when not known), plus its own metadata."""
    trash = stored_bytes if step_bytes is None else step_bytes
    return stored_bytes + trash + MINIO_META_BYTES


def minio_data_parent(stored_bytes: int, workdir: Path, step_bytes: int | None = None) -> Path:
    """Where the embedded MinIO keeps its data: RAM (/dev/shm) when everything it keeps fits with
    room to spare (the data dir within the free space of /dev/shm, and the data dir plus the
    server's own memory within half the available memory), so the server's disk adds no noise and
    teardown is instant; else the run's local directory."""
    shm = Path("/dev/shm")
    try:
        free = shutil.disk_usage(shm).free
        avail = _mem_available()
    except OSError:
        return workdir
    footprint = minio_footprint(stored_bytes, step_bytes)
    if shm.is_dir() and os.access(shm, os.W_OK) and footprint < free and \
            footprint + MINIO_RSS_BYTES < avail // 2:
        return shm
    return workdir


def tree_bytes(path: Path) -> int:
    """Bytes a file or directory tree occupies (allocated blocks: a sparse file counts what it
    holds, tmpfs what it uses); what vanishes while it is walked is skipped."""
    total = 0
    stack = [str(path)]
    while stack:
        p = stack.pop()
        try:
            st = os.lstat(p)
        except OSError:
            continue
        total += st.st_blocks * 512
        if os.path.isdir(p) and not os.path.islink(p):
            try:
                with os.scandir(p) as it:
                    for e in it:
                        try:
                            if e.is_dir(follow_symlinks=False):
                                stack.append(e.path)
                            else:
                                total += e.stat(follow_symlinks=False).st_blocks * 512
                        except OSError:
                            continue
            except OSError:
                continue
    return total


def _mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def s3_client(endpoint: str | None, env: dict[str, str] | None = None):
    import boto3
    from botocore.config import Config as BotoConfig

    env = env or {}
    kwargs = {}
    if env.get("AWS_ACCESS_KEY_ID"):
        kwargs = {"aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
                  "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"]}
    region = env.get("AWS_REGION") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") \
        or "us-east-1"
    return boto3.client("s3", endpoint_url=endpoint, region_name=region,
                        config=BotoConfig(s3={"addressing_style": "path"} if endpoint else {},
                                          retries={"max_attempts": 3}), **kwargs)


@dataclass
class S3Backend:
    """A bucket and this run's unique prefix inside it."""

    bucket: str
    prefix: str  # unique to this run, no leading or trailing slash
    endpoint: str | None = None
    server: MinioServer | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    versioned_bucket: str | None = None  # where deletions can be undone in batches (see s3restore)
    kind: str = "s3"
    shared_context: bool = True  # all builds share the same remote area per scenario
    restore_tool: str | None = field(default_factory=lambda: find_tool("refbench-s3restore"))
    base_prefix: str = ""  # -p: the run's prefix is base_prefix/<run id>
    lease: object | None = None  # lease.Lease on a user's bucket
    swept: list = field(default_factory=list)  # lease.Found: dead runs' prefixes found at start

    @classmethod
    def open(cls, bucket: str | None, prefix_base: str, workdir: Path, endpoint: str | None,
             run_id: str, stored_bytes: int = 0, server_cpus: frozenset[int] | None = None) -> "S3Backend":
        from . import lease
        base = lease.check_prefix(prefix_base)
        prefix = f"{base}/{run_id}"
        if bucket is None:
            server = MinioServer(workdir, data_parent=minio_data_parent(stored_bytes, workdir),
                                 cpus=server_cpus).start()
            backend = cls("refbench", prefix, server.endpoint, server, dict(server.env))
            try:
                client = backend.client()
                client.create_bucket(Bucket=backend.bucket)
                # a second, versioned bucket for areas whose deletions are undone before every run
                client.create_bucket(Bucket="refbench-versioned")
                client.put_bucket_versioning(Bucket="refbench-versioned",
                                             VersioningConfiguration={"Status": "Enabled"})
                backend.versioned_bucket = "refbench-versioned"
            except Exception:
                server.stop()
                raise
            return backend
        endpoint = endpoint or os.environ.get("S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL")
        backend = cls(bucket, prefix, endpoint, None, {"S3_ENDPOINT_URL": endpoint} if endpoint else {},
                      base_prefix=base)
        backend.check_bucket()
        # a user's bucket is used as it is: never reconfigured, versioned only if it already is
        try:
            if backend.client().get_bucket_versioning(Bucket=bucket).get("Status") == "Enabled":
                backend.versioned_bucket = bucket
        except Exception:
            pass
        # remove what runs that died left under the same -p (expired leases only), then take a
        # lease on this run's prefix before anything is stored under it
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            backend.swept = backend.sweep_dead()
            backend.lease = lease.Lease(backend.client, bucket, prefix).start()
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "?")
            raise RunError(f"bucket {bucket!r}: cannot list or write under {base}/ ({code})") from None
        except BotoCoreError as e:
            raise RunError(f"bucket {bucket!r}: {e}") from None
        return backend

    def sweep_dead(self, dry_run: bool = False) -> list:
        """Find the prefixes below -p left by dead runs (expired lease) and remove them."""
        from . import lease
        return lease.sweep(self.client(), self.bucket, self.base_prefix, self.remove_dead, skip=self.prefix,
                           dry_run=dry_run)

    def remove_dead(self, prefix: str) -> int:
        """Remove a dead run's prefix (found by the lease sweep): below -p, never this run's own."""
        base = self.base_prefix.strip("/") + "/"
        prefix = prefix.strip("/")
        if not base.strip("/") or not prefix.startswith(base) or prefix == self.prefix.strip("/") \
                or "/" in prefix[len(base):]:
            raise RunError(f"refusing to remove {prefix!r}: not a run's prefix directly below {base!r}")
        versions = self._bucket_has_versions()
        from .lease import lease_key  # its lease last, as the run itself would have done
        removed = self._purge(prefix + "/", versions=versions, keep=lease_key(prefix))
        return removed + self._purge(prefix + "/", versions=versions)

    def _bucket_has_versions(self) -> bool:
        if self.versioned_bucket == self.bucket:
            return True
        try:  # suspended versioning keeps the versions made while it was enabled
            return self.client().get_bucket_versioning(Bucket=self.bucket).get("Status") in ("Enabled", "Suspended")
        except Exception:
            return False

    def client(self):
        env = {**os.environ, **self.extra_env}
        return s3_client(self.endpoint, env if self.server else None)

    def check_bucket(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            self.client().head_bucket(Bucket=self.bucket)
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "?")
            raise RunError(f"bucket {self.bucket!r} is not usable ({code}) at "
                           f"{self.endpoint or 'AWS'}") from None
        except BotoCoreError as e:
            raise RunError(f"bucket {self.bucket!r}: {e}") from None

    @property
    def env(self) -> dict[str, str]:
        return dict(self.extra_env)

    def remote(self, scenario_slug: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}/{scenario_slug}"

    def context_values(self, scenario_slug: str, build_label: str) -> dict:
        restore = self.restore_tool
        versioned = bool(self.versioned_bucket and restore)
        return {"remote": self.remote(scenario_slug), "bucket": self.bucket, "endpoint": self.endpoint or "",
                # where an area of objects can be deleted and brought back in batches:
                # `{{ s3restore }} {{ remote_versioned ~ '/area/' }}` undoes the deletions
                "versioned": versioned, "s3restore": restore or "",
                "remote_versioned": (f"s3://{self.versioned_bucket}/{self.prefix}/{scenario_slug}" if versioned
                                     else self.remote(scenario_slug))}

    def context_env(self, scenario_slug: str, build_label: str) -> dict[str, str]:
        return {}

    def open_scenario(self, scenario, builds, binaries, workdir: Path) -> None:
        self._scenario = scenario.slug

    def close_scenario(self) -> None:
        """Free what a finished scenario stored in the versioned area: every version of it (a
        delete there only adds a marker), so stored data does not pile up across scenarios."""
        slug, self._scenario = getattr(self, "_scenario", None), None
        if slug and self.versioned_bucket:
            self._delete_versions(self.versioned_bucket, f"{self.prefix}/{slug}/")

    def list_keys(self, prefix: str | None = None) -> list[str]:
        prefix = (prefix or self.prefix).rstrip("/") + "/"
        keys = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            keys.extend(o["Key"] for o in page.get("Contents", []))
        return keys

    def remove_prefix(self, settle: float = 10.0) -> int:
        """Delete every object under this run's prefix — every version of it in a versioned
        bucket — and nothing else; the lease goes last, so a cleanup cut short still leaves a
        lease that will expire and let the next run finish the job. Uploads cut off by Ctrl-C or
        a failure may still be committed by the server just after the client died, so repeat
        until a listing comes back empty."""
        if not self.prefix.strip("/"):
            raise RunError("refusing to clean an empty prefix")
        prefix = self.prefix.rstrip("/") + "/"
        keep = self.lease.key if self.lease is not None else None
        removed = self._purge(prefix, versions=self.versioned_bucket == self.bucket, keep=keep, settle=settle)
        if keep:
            removed += self._purge(prefix, versions=self.versioned_bucket == self.bucket, settle=settle)
        return removed

    def _purge(self, prefix: str, versions: bool, keep: str | None = None, settle: float = 10.0) -> int:
        """Delete everything under prefix (but keep), repeating until two listings a pause apart
        find nothing."""
        removed, empty_passes, deadline = 0, 0, time.monotonic() + settle
        while empty_passes < 2:  # two passes in a row, a pause apart, found nothing
            n = self._delete_under(self.bucket, prefix, versions, keep)
            removed += n
            empty_passes = empty_passes + 1 if n == 0 else 0
            if time.monotonic() > deadline:
                raise RunError(f"objects keep appearing under s3://{self.bucket}/{prefix} during cleanup")
            if empty_passes < 2:
                time.sleep(0.2)
        return removed

    def _delete_under(self, bucket: str, prefix: str, versions: bool, keep: str | None = None) -> int:
        if not prefix.strip("/") or not prefix.endswith("/"):
            raise RunError(f"refusing to delete under {prefix!r}")
        client = self.client()
        entries = []
        if versions:
            for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
                for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                    if v["Key"].startswith(prefix) and v["Key"] != keep:
                        entries.append({"Key": v["Key"], "VersionId": v["VersionId"]})
        else:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                entries += [{"Key": o["Key"]} for o in page.get("Contents", [])
                            if o["Key"].startswith(prefix) and o["Key"] != keep]
        return self._delete_batches(bucket, entries)

    def _delete_versions(self, bucket: str, prefix: str) -> int:
        """Delete every version and delete marker under prefix (which is inside this run's prefix)."""
        if not prefix.startswith(self.prefix.rstrip("/") + "/"):
            raise RunError(f"refusing to delete outside this run's prefix: {prefix!r}")
        keep = self.lease.key if self.lease is not None and bucket == self.bucket else None
        return self._delete_under(bucket, prefix, True, keep)

    def _delete_batches(self, bucket: str, entries: list[dict]) -> int:
        """DeleteObjects, 1000 keys (or key versions) per request."""
        client = self.client()
        for i in range(0, len(entries), 1000):
            client.delete_objects(Bucket=bucket, Delete={"Objects": entries[i:i + 1000], "Quiet": True})
        return len(entries)

    # ---- what the watchdog samples ----
    def watch_dir(self) -> tuple[Path | None, str]:
        if self.server is None:
            return None, ""
        ram = str(self.server.data_dir).startswith("/dev/shm")
        return self.server.data_dir, f"embedded MinIO data dir ({'in RAM' if ram else 'on disk'})"

    def server_pids(self) -> list[int]:
        proc = self.server.proc if self.server is not None else None
        return [proc.pid] if proc is not None and proc.poll() is None else []

    def watch_extra(self) -> dict:
        return {"trash_purged": self.server.trash_purged} if self.server is not None else {}

    def describe(self) -> dict:
        where = ""
        if self.server is not None:
            where = " in RAM" if str(self.server.data_dir).startswith("/dev/shm") else " on disk"
        return {"kind": "s3", "embedded": self.server is not None, "bucket": self.bucket,
                "prefix": self.prefix, "data_dir": str(self.server.data_dir) if self.server else None,
                "endpoint": self.endpoint if not self.server else f"embedded MinIO (loopback, data{where})"}

    def close(self) -> None:
        try:
            if self.lease is not None:
                self.lease.stop()
            if self.server is None:
                n = self.remove_prefix()
                log.info("removed %d objects under s3://%s/%s/", n, self.bucket, self.prefix)
        finally:
            if self.server is not None:
                self.server.stop()


# ---- IPFS -----------------------------------------------------------------------------------
@dataclass
class IpfsRepo:
    path: Path
    binary: str
    daemon: subprocess.Popen | None = None
    api: str = ""

    @property
    def env(self) -> dict[str, str]:
        # telemetry is skipped offline anyway; say so explicitly, nothing may leave the loopback
        return {"IPFS_PATH": str(self.path), "IPFS_TELEMETRY": "off"}

    def run(self, *args: str, timeout: float = 120) -> str:
        proc = subprocess.run([self.binary, *args], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env})
        if proc.returncode != 0:
            raise RunError(f"ipfs {' '.join(args)} failed: {proc.stderr.strip().splitlines()[-1:] or ''}")
        return proc.stdout

    def init(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        # the test profile: loopback addresses on random ports, no bootstrap, no MDNS
        self.run("init", "--profile=test", "--empty-repo")
        for args in (("config", "--json", "Swarm.DisableNatPortMap", "true"),
                     ("config", "--json", "Routing.Type", '"none"'),
                     ("config", "--json", "Discovery.MDNS.Enabled", "false"),
                     ("config", "--json", "Bootstrap", "[]"),
                     ("config", "--json", "Swarm.ConnMgr", '{"Type":"none"}')):
            with contextlib.suppress(RunError):
                self.run(*args)

    def start_daemon(self, log_path: Path, timeout: float = 60) -> None:
        with open(log_path, "w") as fh:
            self.daemon = subprocess.Popen([self.binary, "daemon", "--offline"], stdout=fh,
                                           stderr=subprocess.STDOUT, env={**os.environ, **self.env},
                                           start_new_session=True, preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout
        api_file = self.path / "api"
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise RunError("ipfs daemon exited at start",
                               detail=log_path.read_text(errors="replace")[-2000:])
            if api_file.exists() and "Daemon is ready" in log_path.read_text(errors="replace"):
                multiaddr = api_file.read_text().strip()  # /ip4/127.0.0.1/tcp/PORT
                parts = multiaddr.split("/")
                self.api = f"http://{parts[2]}:{parts[4]}"
                return
            time.sleep(0.1)
        raise RunError(f"ipfs daemon did not become ready within {timeout:.0f}s")

    def stop_daemon(self) -> None:
        if self.daemon is not None:
            _stop_process(self.daemon, timeout=20)
            self.daemon = None


@dataclass
class IpfsBackend:
    """A fresh IPFS_PATH per build and per scenario, offline, removed at the end."""

    workdir: Path
    kind: str = "ipfs"
    shared_context: bool = False
    repos: dict[str, IpfsRepo] = field(default_factory=dict)

    @classmethod
    def open(cls, workdir: Path) -> "IpfsBackend":
        d = Path(workdir) / "ipfs"
        d.mkdir(parents=True, exist_ok=True)
        return cls(d)

    @property
    def env(self) -> dict[str, str]:
        return {}

    def open_scenario(self, scenario, labels: list[str], binaries: list[str], workdir: Path) -> None:
        self.close_scenario()
        for i, (label, binary) in enumerate(zip(labels, binaries)):
            repo = IpfsRepo(self.workdir / f"{scenario.slug}-b{i}", binary)
            self.repos[label] = repo
            repo.init()
            if scenario.daemon:
                repo.start_daemon(self.workdir / f"{scenario.slug}-b{i}.daemon.log")

    def context_values(self, scenario_slug: str, build_label: str) -> dict:
        repo = self.repos[build_label]
        return {"ipfs_path": str(repo.path), "api": repo.api, "remote": ""}

    def context_env(self, scenario_slug: str, build_label: str) -> dict[str, str]:
        return self.repos[build_label].env

    def close_scenario(self) -> None:
        for repo in self.repos.values():
            repo.stop_daemon()
            shutil.rmtree(repo.path, ignore_errors=True)
        for p in self.workdir.glob("*.daemon.log"):
            p.unlink()
        self.repos.clear()

    def watch_dir(self) -> tuple[Path | None, str]:
        return self.workdir, "IPFS repos"

    def server_pids(self) -> list[int]:
        return [r.daemon.pid for r in list(self.repos.values()) if r.daemon is not None and r.daemon.poll() is None]

    def describe(self) -> dict:
        return {"kind": "ipfs", "repos": "fresh IPFS_PATH per build and scenario (test profile, offline)"}

    def close(self) -> None:
        self.close_scenario()
        shutil.rmtree(self.workdir, ignore_errors=True)
