"""Where the data goes: an S3 bucket (the user's, or an embedded MinIO on loopback) or IPFS repos.

Every run works under its own unique prefix (S3) or its own throw-away repos (IPFS); teardown
removes exactly that, and nothing outside it.
"""
from __future__ import annotations

import contextlib
import logging
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


def sweep_stale(parent: Path, pattern: str = "refbench-minio-*") -> int:
    """Remove data dirs left by refbench runs that were killed outright (owner process gone)."""
    removed = 0
    for d in Path(parent).glob(pattern):
        owner = d / "owner" if d.is_dir() else None
        try:
            pid = int(owner.read_text()) if owner else None
        except (OSError, ValueError):
            continue
        if pid is None:
            continue
        try:
            os.kill(pid, 0)
            continue  # still running
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        shutil.rmtree(d, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            d.with_suffix(".log").unlink()
        removed += 1
    return removed


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
        (self.data_dir / "owner").write_text(str(os.getpid()))
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.access_key = "rb" + secrets.token_hex(8)
        self.secret_key = secrets.token_hex(20)
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.with_suffix(".log")

    def start(self, timeout: float = 60) -> "MinioServer":
        env = {**os.environ, "MINIO_ROOT_USER": self.access_key, "MINIO_ROOT_PASSWORD": self.secret_key,
               "MINIO_BROWSER": "off", "MINIO_UPDATE": "off", "MINIO_CI_CD": "1"}
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
                        return self
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RunError(f"embedded MinIO did not become ready within {timeout:.0f}s")

    def stop(self) -> None:
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


def minio_data_parent(stored_bytes: int, workdir: Path) -> Path:
    """Where the embedded MinIO keeps its data: RAM (/dev/shm) when the run's objects fit with
    room to spare, so the server's disk adds no noise and teardown is instant; else the run's
    local directory."""
    shm = Path("/dev/shm")
    try:
        free = shutil.disk_usage(shm).free
        avail = _mem_available()
    except OSError:
        return workdir
    # deleted and overwritten objects linger in MinIO's trash for a while: leave 3x headroom
    if shm.is_dir() and os.access(shm, os.W_OK) and stored_bytes * 3 < min(free, avail // 2):
        return shm
    return workdir


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

    @classmethod
    def open(cls, bucket: str | None, prefix_base: str, workdir: Path, endpoint: str | None,
             run_id: str, stored_bytes: int = 0, server_cpus: frozenset[int] | None = None) -> "S3Backend":
        prefix = "/".join(p for p in (prefix_base.strip("/"), run_id) if p)
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
        backend = cls(bucket, prefix, endpoint, None, {"S3_ENDPOINT_URL": endpoint} if endpoint else {})
        backend.check_bucket()
        # a user's bucket is used as it is: never reconfigured, versioned only if it already is
        try:
            if backend.client().get_bucket_versioning(Bucket=bucket).get("Status") == "Enabled":
                backend.versioned_bucket = bucket
        except Exception:
            pass
        return backend

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
        bucket — and nothing else. Uploads cut off by Ctrl-C or a failure may still be committed
        by the server just after the client died, so repeat until a listing comes back empty."""
        prefix = self.prefix.rstrip("/") + "/"
        if not self.prefix.strip("/"):
            raise RunError("refusing to clean an empty prefix")
        removed, empty_passes, deadline = 0, 0, time.monotonic() + settle
        while empty_passes < 2:  # two passes in a row, a pause apart, found nothing
            n = self._remove_once(prefix)
            removed += n
            empty_passes = empty_passes + 1 if n == 0 else 0
            if time.monotonic() > deadline:
                raise RunError(f"objects keep appearing under s3://{self.bucket}/{prefix} during cleanup")
            if empty_passes < 2:
                time.sleep(0.2)
        return removed

    def _remove_once(self, prefix: str) -> int:
        if self.versioned_bucket == self.bucket:
            return self._delete_versions(self.bucket, prefix)
        return self._delete_batches(self.bucket, [{"Key": k} for k in self.list_keys() if k.startswith(prefix)])

    def _delete_versions(self, bucket: str, prefix: str) -> int:
        """Delete every version and delete marker under prefix (which is inside this run's prefix)."""
        if not prefix.startswith(self.prefix.rstrip("/") + "/"):
            raise RunError(f"refusing to delete outside this run's prefix: {prefix!r}")
        entries = []
        for page in self.client().get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
            for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                if v["Key"].startswith(prefix):
                    entries.append({"Key": v["Key"], "VersionId": v["VersionId"]})
        return self._delete_batches(bucket, entries)

    def _delete_batches(self, bucket: str, entries: list[dict]) -> int:
        """DeleteObjects, 1000 keys (or key versions) per request."""
        client = self.client()
        for i in range(0, len(entries), 1000):
            client.delete_objects(Bucket=bucket, Delete={"Objects": entries[i:i + 1000], "Quiet": True})
        return len(entries)

    def describe(self) -> dict:
        where = ""
        if self.server is not None:
            where = " in RAM" if str(self.server.data_dir).startswith("/dev/shm") else " on disk"
        return {"kind": "s3", "embedded": self.server is not None, "bucket": self.bucket,
                "prefix": self.prefix, "data_dir": str(self.server.data_dir) if self.server else None,
                "endpoint": self.endpoint if not self.server else f"embedded MinIO (loopback, data{where})"}

    def close(self) -> None:
        try:
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

    def describe(self) -> dict:
        return {"kind": "ipfs", "repos": "fresh IPFS_PATH per build and scenario (test profile, offline)"}

    def close(self) -> None:
        self.close_scenario()
        shutil.rmtree(self.workdir, ignore_errors=True)
