"""What a run takes from the machine, as one value: the seam of a whole run.

`pipeline.run(request, env)` starts processes only through its RunEnv: the executor that times the
commands, the backend that stores their data, the builder that makes the binaries, the tools it
looks for, the clock its budget reads, and the machine's settings (the REFBENCH_* variables, read
once, at the edge, by `MachineSettings.from_environ`). `real()` is this machine's; `mock.env()` is
`--executor mock`'s (hyperfine's --debug-mode): seeded, deterministic, no process. Tests pass either,
or one of their own, and never patch the pipeline.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, Mapping, Protocol, Sequence

from . import builds as bl, firstuse, implementations as impls, lease, paths, toolchain as tc, tools
from .backends import Backend, IpfsBackend, S3Backend, sandbox
from .backends.process import pass_env_names
from .config import TargetSpec
from .executor import Executor, HyperfineExecutor
from .progress import Reporter
from .refs import ResolvedRef


class Validated(Protocol):
    """What the stand-ins read of the pipeline's validated run (pipeline.Validated has it): named here
    as a protocol, since the pipeline imports this module and not the other way round."""
    request: Any  # pipeline.RunRequest
    target: Any  # config.TargetSpec
    origin: Any  # the pull request's origin, or None
    cache_dir: Path
    prefix: str
    stored_peak: int
    networks: Mapping


class BuildRequest(Protocol):
    """What a builder is made from of a run's request (pipeline.RunRequest has it): where the
    target's sources come from and where its builds are kept. A protocol, as Validated is, so this
    module names nothing of the pipeline, which imports it."""
    repo: str | None
    source: str  # git or module
    builds_dir: str


class Builder(Protocol):
    """What a run and the commands that build (nightly, bisect) use of a builder: builds.Builder,
    or mock.MockBuilder for --executor mock."""
    target: Any  # config.TargetSpec
    source: str  # git or module
    repo_url: str
    builds_dir: Path
    go: str  # the toolchain choice of a build that names none (toolchain.parse_choice)

    def resolve(self, text: str, go: str | None = None) -> "ResolvedRef": ...

    def resolve_all(self, texts: Sequence[str], go: tuple[str, ...] = ()) -> "list[ResolvedRef]": ...

    def commits_between(self, good: str, bad: str) -> list[tuple[str, str]]: ...

    def build_dir(self, sha: str, toolchain: str | None = None) -> Path: ...

    def cached(self, resolved: "ResolvedRef") -> Path | None: ...

    def build(self, resolved: "ResolvedRef", label: str) -> "bl.BuiltRef": ...


EXECUTORS = ("hyperfine", "mock")  # --executor: mock is hidden, for tests (hyperfine's --debug-mode)


@dataclass(frozen=True)
class MachineSettings:
    """The machine's own settings, which environment variables set (they stay the way to set them):
    read once by the command line, then passed down, so no library module reads the environment."""
    watchdog: str | None = None  # REFBENCH_WATCHDOG: the watchdog's floors, or off
    pass_env: frozenset[str] = frozenset()  # REFBENCH_PASS_ENV: more names the benchmarked commands see
    lease_ttl: float = lease.DEFAULT_TTL  # REFBENCH_LEASE_TTL: seconds a run's lease on a bucket lives
    crash_dir: str | None = None  # REFBENCH_CRASH_DIR: where a crash's traceback is saved
    # where the caches, the tools and the key live (XDG_*, REFBENCH_BUILDS_DIR, REFBENCH_TOOLS_BIN,
    # REFBENCH_UNPINNED_TOOLS, MINIO_VERSION, TOXIPROXY_VERSION); None: not read (a test's settings)
    layout: paths.Layout | None = field(default=None, compare=False)  # where, not how a run behaves
    goflags: str = ""  # GOFLAGS: the user's own go flags, which builds take after refbench's

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> "MachineSettings":
        return cls(watchdog=environ.get("REFBENCH_WATCHDOG") or None,
                   pass_env=pass_env_names(environ.get("REFBENCH_PASS_ENV", "")),
                   lease_ttl=lease.parse_ttl(environ.get("REFBENCH_LEASE_TTL")),
                   crash_dir=environ.get("REFBENCH_CRASH_DIR") or None,
                   layout=paths.Layout.from_environ(environ), goflags=environ.get("GOFLAGS", "").strip())


def environ_go(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """REFBENCH_GO as the request's --go (one choice for every build), () when it is not set: the
    variable stays a way to set it, read once at the command line, and the request says it."""
    return (tc.default_choice(environ),) if environ.get(tc.ENV, "").strip() else ()


# (workdir, cpus=, verbose=) -> the run's executor
ExecutorFactory = Callable[..., Executor]
# (validated, workdir, run id, server CPUs, reporter, machine settings) -> the backend, closed on the way out
BackendFactory = Callable[..., ContextManager[Backend]]


@dataclass(frozen=True)
class RunEnv:
    executor: ExecutorFactory
    backend: BackendFactory
    builder: Callable[[Validated], Builder]  # builds.Builder, or a stand-in (mock.MockBuilder)
    find_tool: Callable[[str], str | None] = tools.find_tool
    clock: Callable[[], float] = time.monotonic  # the budget's and the run's timing
    machine: MachineSettings = MachineSettings()
    reporter: Reporter = field(default_factory=Reporter)
    perf: bool | None = None  # None: probe for perf; False: no profiles (nothing runs to profile)
    order_seed: Callable[[], int] = lambda: secrets.randbits(31)  # each run's draw of its rounds' orders
    # (implementation, say) -> its pinned install (implementations.Installed): from its registry, sealed
    install: Callable[..., impls.Installed] = impls.install
    # why no network namespace of the run's own can be made here, or None when one can (probed once):
    # pipeline.validate_online asks it before an online kubo daemon is planned
    namespaces_unavailable: Callable[[], str | None] = sandbox.unavailable
    # whether the steps' commands really download and store what the scenario says (the disk check
    # before a run); False for --executor mock, whose commands run nowhere
    stores: bool = True
    # the pinned tools a run may build on first use (pipeline.validate_tools asks why one cannot be),
    # and the context that builds them in the background while the refs build (firstuse.installing)
    why_not_installable: Callable[[str], str | None] = firstuse.why_not_installable
    first_use: Callable[..., ContextManager[firstuse.Installs]] = firstuse.installing

    def with_reporter(self, reporter: Reporter) -> "RunEnv":
        return replace(self, reporter=reporter)


def real(machine: MachineSettings | None = None, reporter: Reporter | None = None) -> RunEnv:
    """This machine's: hyperfine probed once per run, MinIO or a bucket or IPFS, `go build`."""
    machine = machine or MachineSettings.from_environ()
    # the machine's GOFLAGS reach the builder as an argument; with none, make_builder(validated) as before
    flags = {"goflags": machine.goflags} if machine.goflags else {}
    return RunEnv(executor=make_executor, backend=open_backend,
                  builder=lambda validated: make_builder(validated, **flags), machine=machine,
                  reporter=reporter or Reporter())


def make_executor(workdir: Path, **kw) -> Executor:
    """The run's executor: hyperfine, probed once."""
    return HyperfineExecutor.probe(workdir, **kw)


@dataclass(frozen=True)
class BuildSite:
    """What a builder is made from where no run is validated (nightly's baseline, bisect's line of
    commits, `refbench build`): the fields of Validated that RunEnv.builder reads, so those commands
    get their builder from the run's RunEnv, as a run does, and never make a Builder of their own."""
    request: BuildRequest  # a pipeline.RunRequest
    target: TargetSpec
    origin: bl.Checkout | None = None  # the checkout around the current directory when it is the origin

    @property
    def cache_dir(self) -> Path:
        return paths.settled_cache_dir(self.request.builds_dir)  # as pipeline.validate settles it


def make_builder(validated: Validated, goflags: str = "") -> bl.Builder:
    """The target's builder: from the checkout around the current directory when it is the
    origin, else the request's --repo or the target's own. `goflags`: the machine's GOFLAGS."""
    request, target, origin = validated.request, validated.target, validated.origin
    return bl.Builder(target, validated.cache_dir, origin.url if origin else request.repo, request.source,
                      pr_remote=origin.remote if origin else None, checkout=origin is not None, goflags=goflags)


@contextlib.contextmanager
def open_backend(validated: Validated, workdir: Path, run_id: str, server_cpus, reporter: Reporter,
                 machine: MachineSettings = MachineSettings()) -> Iterator:
    """The run's backend, closed on the way out; a failing close is reported but never masks the
    failure that ended the run. The servers it starts see the machine's pass_env too; a lease on a
    user's bucket lives its lease_ttl."""
    request, target = validated.request, validated.target
    if target.backend == "s3":
        backend = S3Backend.open(request.bucket, validated.prefix, workdir, request.endpoint_url, run_id,
                                 stored_bytes=validated.stored_peak, server_cpus=server_cpus, networks=validated.networks,
                                 pass_env=machine.pass_env, lease_ttl=machine.lease_ttl)
        reporter.info(f"backend: {'embedded MinIO at ' + backend.endpoint if backend.server else 's3://' + backend.bucket}"
                      f", objects under s3://{backend.bucket}/{backend.prefix}/")
    else:
        backend = IpfsBackend.open(workdir, validated.cache_dir, pass_env=machine.pass_env,
                                   restart_every=request.daemon_restart_every)
    try:
        yield backend
    finally:
        try:
            backend.close()
        except Exception as e:  # report, but never mask the original failure
            reporter.warn(f"cleanup of the backend failed: {e}")
