"""Where the data goes: an S3 bucket (the user's, or an embedded MinIO on loopback) or IPFS repos.

Every run works under its own unique prefix (S3) or its own throw-away repos (IPFS); teardown
removes exactly that, and nothing outside it. `Backend` is what the runner, the watchdog and a
run's pipeline need of one; `S3Backend.open(...)` and `IpfsBackend.open(...)` make one, and
`with` (or `close()`) tears it down.

    s3.py            S3Backend: the run's prefix on the user's bucket or the embedded MinIO; restores, lease
    s3_objects.py    what a run stores on a bucket: deleting exactly its prefix (or a dead run's), lease last
    minio.py         the embedded MinIO server: start, stop, trash purging, where its data lives
    toxiproxy.py     the network shaper: a toxiproxy server on loopback, one proxy per network profile
    ipfs.py          IpfsBackend: a fresh repo per build and scenario; kubo online, offline or daemonless
    ipfs_daemons.py  the builds' kubo daemons over a scenario: restarts on fresh repos, a probe server each
    ipfs_states.py   cached repo states on the build cache's side: built under a lock, marked complete
    snapshot.py      repo states built once per build, sealed, restored before every timed run (overlay)
    sandbox.py       the run's own network and mount namespace, loopback only, where kubo runs online
    process.py       process groups, stopped as a group, tied to refbench's life (run_group)
    dirs.py          run-owned local dirs: owner marks, sweeping what killed runs left, tree_bytes
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from ..paths import PROJECT_ROOT
from ..tools import find_tool
from .dirs import WORKDIR_PATTERN, make_workdir, owner_dead, sweep_stale, tree_bytes, write_owner
from .ipfs import IpfsBackend, IpfsRepo
from .minio import (MINIO_META_BYTES, MINIO_RSS_BYTES, MinioServer, free_port,
                    minio_data_parent, minio_footprint)
from . import sandbox, snapshot
from .process import die_with_parent, run_group, stop_process
from .s3 import S3Backend, s3_client

__all__ = ["Backend", "S3Backend", "IpfsBackend", "IpfsRepo", "MinioServer", "s3_client", "find_tool",
           "PROJECT_ROOT", "WORKDIR_PATTERN", "make_workdir", "owner_dead", "sweep_stale", "tree_bytes",
           "write_owner", "MINIO_META_BYTES", "MINIO_RSS_BYTES", "free_port", "minio_data_parent",
           "minio_footprint", "die_with_parent", "run_group", "stop_process", "sandbox", "snapshot"]


@runtime_checkable
class Backend(Protocol):
    """What a run needs of a backend.

    The runner renders commands with `context_values` (template values such as remote, bucket,
    ipfs_path) and `context_env` (exported in front of the command), runs them with `env` added
    to its own, and brackets each scenario with `open_scenario` / `close_scenario` (a dry run
    renders over the form `planned()` returns, after `plan_scenario`, which creates nothing); with
    `shared_context` the builds share one area, so a scenario's setup and a step's setup and
    cleanup run once, not once per build. The watchdog samples `watch_dir`, `server_pids` and
    `watch_extra`. Every command of an open scenario runs behind `command_prefix()` (entry into
    the run's network namespace for an online kubo daemon). The run reports `swept` (dead runs' leftovers removed at start), records
    `describe()`, and ends with `close()` (or the `with` block), which removes what it stored.
    """

    kind: str
    shared_context: bool
    swept: list

    @property
    def env(self) -> dict[str, str]: ...

    def context_values(self, scenario_slug: str, build_label: str) -> dict: ...

    def context_env(self, scenario_slug: str, build_label: str) -> dict[str, str]: ...

    def command_prefix(self) -> tuple[str, ...]: ...

    def open_scenario(self, scenario, labels: list[str], binaries: list[str], workdir: Path) -> None: ...

    def close_scenario(self) -> None: ...

    def plan_scenario(self, scenario, labels: list[str], binaries: list[str]) -> None: ...

    def watch_dir(self) -> tuple[Path | None, str]: ...

    def server_pids(self) -> list[int]: ...

    def watch_extra(self) -> dict: ...

    def describe(self) -> dict: ...

    def close(self) -> None: ...

    def __enter__(self) -> "Backend": ...

    def __exit__(self, *exc) -> None: ...
