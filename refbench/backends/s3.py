"""S3: a bucket and this run's unique prefix inside it, on the user's bucket or the embedded MinIO.

Every run works under its own prefix (-p/<run id>) and teardown removes exactly that: every object,
every version in a versioned bucket, the lease last. On a user's bucket the run holds a lease on its
prefix, and removes what runs that died left below -p (expired leases only) before it starts.

A step under a network profile other than loopback (refbench/network.py) reaches the server through
that profile's proxy (backends/toxiproxy.py): the runner names the step's profile (`use_network`),
and its commands get the proxy's endpoint as S3_ENDPOINT_URL and `endpoint`. Everything refbench
itself asks the server (setup of the bucket, cleanup, request accounting from MinIO's metrics)
goes to the server directly, so the server still counts every request the commands make.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping
from urllib.parse import urlsplit

from .. import paths
from ..lease import CLOCK, DEFAULT_TTL, Clock, Lease, check_prefix, sweep as sweep_leases
from ..daemon import Probe
from ..errors import RunError
from ..tools import find_tool
from ..network import NetworkProfile
from .minio import MinioServer, client_env, minio_data_parent, unreachable
from .process import USER_BUCKET_ENV
from .s3_objects import Objects, create_buckets, versioning
from .toxiproxy import Toxiproxy

log = logging.getLogger(__name__)

EMBEDDED_BUCKET = "refbench"  # the embedded server's bucket
SERVER_CPU_NONE = "not measured: a user's bucket (-b) is served by a server refbench does not run"
VERSIONED_BUCKET = "refbench-versioned"  # and its versioned one, for areas whose deletions are undone
PORT_PLACEHOLDER = "http://127.0.0.1:<port>"  # the embedded server's endpoint before it starts
SECRET_PLACEHOLDER = "<random>"  # its credentials, made when it starts
RUN_ID_PLACEHOLDER = "<run-id>"  # the run's own part of the prefix, known once it starts


def user_endpoint(endpoint: str | None) -> str | None:
    """The endpoint of a user's bucket: --endpoint-url, else S3_ENDPOINT_URL or AWS_ENDPOINT_URL
    as the command line read them (paths.Layout.environ) (None: AWS)."""
    machine = paths.layout().environ
    return endpoint or machine.get("S3_ENDPOINT_URL") or machine.get("AWS_ENDPOINT_URL")


def s3_client(endpoint: str | None, env: dict[str, str] | None = None):
    import boto3
    from botocore.config import Config as BotoConfig

    env = env or {}
    kwargs = {}
    if env.get("AWS_ACCESS_KEY_ID"):
        kwargs = {"aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
                  "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"]}
    machine = paths.layout().environ  # the command line's
    region = env.get("AWS_REGION") or machine.get("AWS_REGION") or machine.get("AWS_DEFAULT_REGION") or "us-east-1"
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
    # the network profiles the run's steps use (name -> profile) and the proxy of each shaped one
    networks: Mapping[str, NetworkProfile] = field(default_factory=dict)
    network_endpoints: dict[str, str] = field(default_factory=dict)
    shaper: Toxiproxy | None = None
    network: str | None = None  # the profile of the step whose commands run now (use_network)
    clock: Clock = field(default_factory=lambda: CLOCK)  # what its lease and its sweep of dead runs' leases read

    @classmethod
    def open(cls, bucket: str | None, prefix_base: str, workdir: Path, endpoint: str | None,
             run_id: str, stored_bytes: int = 0, server_cpus: frozenset[int] | None = None,
             networks: Mapping[str, NetworkProfile] = MappingProxyType({}), pass_env: frozenset[str] = frozenset(),
             lease_ttl: float = DEFAULT_TTL, clock: Clock = CLOCK) -> "S3Backend":
        """The run's S3 area: the embedded MinIO (bucket None), started here, or the user's bucket,
        behind a shaper with a proxy per network profile in `networks` other than loopback.
        Close it (or use it as a context manager) to remove what the run stored. The machine's
        settings: `pass_env`, more names the servers see; `lease_ttl`, the life of the lease on a
        user's bucket; `clock`, the time its lease and the sweep of dead runs' leases read."""
        base = check_prefix(prefix_base)
        prefix = f"{base}/{run_id}"
        if bucket is None:
            backend = cls._open_embedded(prefix, workdir, stored_bytes, server_cpus, pass_env)
        else:
            backend = cls._open_user(bucket, base, prefix, endpoint, lease_ttl, clock)
        try:
            backend.shape(networks, workdir, server_cpus, pass_env)
        except BaseException:
            backend.close()
            raise
        return backend

    @classmethod
    def planned(cls, bucket: str | None, prefix_base: str, endpoint: str | None,
                networks: Mapping[str, NetworkProfile] = MappingProxyType({}),
                find: Callable[[str], str | None] = find_tool) -> "S3Backend":
        """What open() would give, for a dry run: nothing is started, listed or written. What only
        a started run knows shows as a placeholder: the run id in the prefix, the embedded server's
        port, each network proxy's port. A user's bucket shows as unversioned (open() looks that up).
        `find`: how tools are found (the RunEnv's find_tool), for the restore tool."""
        base = check_prefix(prefix_base)
        restore_tool = find("refbench-s3restore")
        prefix = f"{base}/{RUN_ID_PLACEHOLDER}"
        if bucket is None:
            backend = cls(EMBEDDED_BUCKET, prefix, PORT_PLACEHOLDER, None,
                          client_env(SECRET_PLACEHOLDER, SECRET_PLACEHOLDER, PORT_PLACEHOLDER),
                          versioned_bucket=VERSIONED_BUCKET, restore_tool=restore_tool)
        else:
            endpoint = user_endpoint(endpoint)
            backend = cls(bucket, prefix, endpoint, None, {"S3_ENDPOINT_URL": endpoint} if endpoint else {},
                          base_prefix=base, restore_tool=restore_tool)
        backend.networks = dict(networks)
        backend.network_endpoints = {name: f"http://127.0.0.1:<{name}-port>" for name, p in networks.items()
                                     if not p.direct}
        return backend

    def shape(self, networks: Mapping[str, NetworkProfile], workdir: Path,
              cpus: frozenset[int] | None = None, pass_env: frozenset[str] = frozenset()) -> None:
        """Start the shaper with a proxy to the server per profile other than loopback (on the
        server's CPUs where the run separates them: the shaper stands for the network)."""
        self.networks = dict(networks)
        shaped = [p for p in networks.values() if not p.direct]
        if not shaped:
            return
        self.shaper = Toxiproxy(workdir, cpus=cpus, pass_env=pass_env).start()
        scheme = urlsplit(self.endpoint or "").scheme or "http"
        for profile in shaped:
            self.network_endpoints[profile.name] = f"{scheme}://{self.shaper.add(profile, self.endpoint or '')}"

    def use_network(self, name: str | None) -> None:
        """The profile the commands rendered from now on run under (the runner's step); None or
        loopback: directly to the server."""
        self.network = name

    @property
    def command_endpoint(self) -> str | None:
        """Where the commands of the current step send their requests: its profile's proxy, else
        the server itself."""
        return self.network_endpoints.get(self.network or "") or self.endpoint

    @classmethod
    def _open_embedded(cls, prefix: str, workdir: Path, stored_bytes: int,
                       server_cpus: frozenset[int] | None, pass_env: frozenset[str] = frozenset()) -> "S3Backend":
        server = MinioServer(workdir, data_parent=minio_data_parent(stored_bytes, workdir),
                             cpus=server_cpus, pass_env=pass_env).start()
        backend = cls(EMBEDDED_BUCKET, prefix, server.endpoint, server, dict(server.env))
        try:
            backend.versioned_bucket = create_buckets(backend.client(), backend.bucket, VERSIONED_BUCKET)
        except Exception:
            server.stop()
            raise
        return backend

    @classmethod
    def _open_user(cls, bucket: str, base: str, prefix: str, endpoint: str | None,
                   lease_ttl: float = DEFAULT_TTL, clock: Clock = CLOCK) -> "S3Backend":
        endpoint = user_endpoint(endpoint)
        backend = cls(bucket, prefix, endpoint, None, {"S3_ENDPOINT_URL": endpoint} if endpoint else {},
                      base_prefix=base, clock=clock)
        backend.check_bucket()
        if versioning(backend.client, bucket) == "Enabled":  # used as it is: versioned only if it already is
            backend.versioned_bucket = bucket
        # remove what runs that died left under the same -p (expired leases only), then take a
        # lease on this run's prefix before anything is stored under it
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            backend.swept = backend.sweep_dead()
            backend.lease = Lease(backend.client, bucket, prefix, ttl=lease_ttl, clock=clock).start()
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "?")
            raise RunError(f"bucket {bucket!r}: cannot list or write under {base}/ ({code})") from None
        except BotoCoreError as e:
            raise RunError(f"bucket {bucket!r}: {e}") from None
        return backend

    def sweep_dead(self, dry_run: bool = False) -> list:
        """Find the prefixes below -p left by dead runs (expired lease) and remove them."""
        return sweep_leases(self.client(), self.bucket, self.base_prefix, self.remove_dead, skip=self.prefix,
                           dry_run=dry_run, clock=self.clock)

    def remove_dead(self, prefix: str) -> int:
        """Remove a dead run's prefix (found by the lease sweep): below -p, never this run's own."""
        return self.objects().remove_dead(prefix)

    def objects(self) -> Objects:
        """The run's objects as cleanup sees them now (its lease and versioned bucket are set by open)."""
        return Objects(self.client, self.bucket, self.prefix, self.base_prefix, self.versioned_bucket,
                       self.lease.key if self.lease is not None else None)

    def client(self):
        env = {**paths.layout().environ, **self.extra_env}
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

    @property
    def pass_env(self) -> frozenset[str]:
        """Names of refbench's environment its commands also get: the user's bucket needs the
        user's credentials (and proxy); the embedded server's come in `env`, so none pass."""
        return USER_BUCKET_ENV if self.base_prefix else frozenset()  # only a user's bucket has a base prefix

    def remote(self, scenario_slug: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}/{scenario_slug}"

    def context_values(self, scenario_slug: str, build_label: str) -> dict:
        restore = self.restore_tool
        versioned = bool(self.versioned_bucket and restore)
        return {"remote": self.remote(scenario_slug), "bucket": self.bucket, "endpoint": self.command_endpoint or "",
                # where an area of objects can be deleted and brought back in batches:
                # `{{ s3restore }} {{ remote_versioned ~ '/area/' }}` undoes the deletions
                "versioned": versioned, "s3restore": restore or "",
                "remote_versioned": (f"s3://{self.versioned_bucket}/{self.prefix}/{scenario_slug}" if versioned
                                     else self.remote(scenario_slug))}

    def command_prefix(self) -> tuple[str, ...]:
        """Commands run as they are: no namespace to enter."""
        return ()

    def context_env(self, scenario_slug: str, build_label: str) -> dict[str, str]:
        """A step under a shaped profile: its proxy as the commands' endpoint (exported in front
        of each command, over the server's own in `env`); nothing otherwise, so a loopback step's
        commands are exactly what they always were."""
        endpoint = self.command_endpoint
        return {"S3_ENDPOINT_URL": endpoint} if endpoint and endpoint != self.endpoint else {}

    def open_scenario(self, scenario, labels: list[str], binaries: list[str], workdir: Path) -> None:
        self._scenario = scenario.slug

    def plan_scenario(self, scenario, labels: list[str], binaries: list[str]) -> None:
        """For a dry run: nothing to set up per scenario, its area is a name below the prefix."""

    def close_scenario(self) -> None:
        """Free what a finished scenario stored in the versioned area: every version of it (a
        delete there only adds a marker), so stored data does not pile up across scenarios."""
        slug, self._scenario = getattr(self, "_scenario", None), None
        self.network = None
        if slug and self.versioned_bucket and not self.left_to_sweep():
            self.objects().delete_versions(self.versioned_bucket, f"{self.prefix}/{slug}/")

    def remove_prefix(self, settle: float = 10.0) -> int:
        """Delete every object under this run's prefix and nothing else, the lease last (Objects.remove_prefix)."""
        return self.objects().remove_prefix(settle)

    # ---- is the server there (the watchdog asks, cleanup too) ----
    @property
    def server_label(self) -> str:
        return f"embedded MinIO at {self.endpoint}" if self.server is not None else f"S3 server {self.endpoint}"

    def server_down(self) -> str | None:
        """Why the server cannot be reached now, or None while it answers: the embedded server's
        process exited, or nothing accepts a connection at the endpoint. AWS (no endpoint) is not
        asked. The watchdog's thread asks once a second, so the timed commands pay nothing for it."""
        if self.server is not None and (gone := self.server.exited()):
            return gone
        return unreachable(self.endpoint) if self.endpoint else None

    def left_to_sweep(self) -> bool:
        """True when the server is gone: cleanup is skipped (each request would wait on a dead
        endpoint), and on a user's bucket the prefix and its lease stay until the lease expires
        and the next run under -p sweeps them, as after a killed run."""
        down = self.server_down()
        if down:
            log.info("%s is gone (%s): s3://%s/%s/ is left for the next run's sweep", self.server_label, down,
                     self.bucket, self.prefix)
        return down is not None

    # ---- what the watchdog samples ----
    def watch_dir(self) -> tuple[Path | None, str]:
        if self.server is None:
            return None, ""
        return self.server.data_dir, f"embedded MinIO data dir ({'in RAM' if self.server.in_ram else 'on disk'})"

    def server_pids(self) -> list[int]:
        proc = self.server.proc if self.server is not None else None
        shaper = [self.shaper.pid] if self.shaper is not None and self.shaper.pid else []
        return ([proc.pid] if proc is not None and proc.poll() is None else []) + shaper

    def watch_extra(self) -> dict:
        return {"trash_purged": self.server.trash_purged} if self.server is not None else {}

    def daemon_probes(self, label: str) -> Probe | None:
        """The embedded MinIO's probes around each timed run of `label` (MinioServer.probes: its
        CPU per run, `server-cpu`, context beside the request counts); None on a user's bucket."""
        return self.server.probes(label) if self.server is not None else None

    def describe(self) -> dict:
        where = ""
        if self.server is not None:
            where = " in RAM" if self.server.in_ram else " on disk"
        out = {"kind": "s3", "embedded": self.server is not None, "bucket": self.bucket,
               "prefix": self.prefix, "data_dir": str(self.server.data_dir) if self.server else None,
               "endpoint": self.endpoint if not self.server else f"embedded MinIO (loopback, data{where})",
               "server cpu": self.server.cpu_fact() if self.server else SERVER_CPU_NONE}
        if self.networks:  # the profiles the steps ran under, with their figures (results: Step.network)
            out["networks"] = {name: {**p.record(), "shaper": "toxiproxy" if not p.direct else None}
                               for name, p in self.networks.items()}
        return out

    def close(self) -> None:
        try:
            if self.shaper is not None:
                self.shaper.stop()
            if self.lease is not None:
                self.lease.stop()
            if self.server is None and not self.left_to_sweep():
                n = self.remove_prefix()
                log.info("removed %d objects under s3://%s/%s/", n, self.bucket, self.prefix)
        finally:
            if self.server is not None:
                self.server.stop()

    def __enter__(self) -> "S3Backend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

