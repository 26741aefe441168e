"""The cached repo states of IPFS scenarios (backends/snapshot.py, docs/kubo.md), on the build cache's
side: claiming a scenario's state, or a step's layer over it, to build where the cache lacks it;
marking it complete once its template ran (or removing it, failed, so the next run builds it
again); and the overlay a step's runs restore. IpfsBackend keeps each build's repo and asks here:
what is written to or removed from the cache is decided in one place, through no link.
"""
from __future__ import annotations

import contextlib
import hashlib
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .. import paths
from ..errors import RunError
from .process import child_env
from .sandbox import Sandbox
from .snapshot import StateCache, key, layer_mount_command, unmount_command


@dataclass(frozen=True)
class StateJob:
    """A state to build for one build: run `template` with IPFS_PATH = path, then state_done."""
    label: str
    path: Path
    template: str
    layer: Path | None  # a step's layer (path is then the overlay it is built through)
    lock: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, compare=False)


class StateRepo(Protocol):
    """What a state asks of a build's repo (ipfs.IpfsRepo)."""
    path: Path
    state: StateCache | None

    def bare(self, path: Path) -> "StateRepo": ...

    def init(self) -> None: ...


def file_digest(path: str) -> str:
    """SHA-256 of a binary: a cached state belongs to the exact binary that built it."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def scratch(repo_path: Path) -> Path:
    """Where a restored state's runs write: the overlay's upper directory, beside the repo."""
    return repo_path.with_name(repo_path.name + ".upper")


def state_lowers(state: StateCache, step) -> tuple[Path, ...]:
    """What the step's runs restore, top first: its own layer over the scenario's state, or the state."""
    top = (state.layer(key(step.state)) / "upper",) if step is not None and step.state else ()
    return (*top, state.repo)


@dataclass(frozen=True)
class StateBuilds:
    """The run's cached states in the build cache: where they are, the job that builds one and its
    end. Mounts are made in the run's mount namespace (`sandbox`), so none outlives the run."""
    states_dir: Path | None  # None: no build cache, so a scenario with a state cannot run
    sandbox: Sandbox | None
    pass_env: frozenset[str] = frozenset()  # more names the mount commands see (MachineSettings.pass_env)

    @property
    def root(self) -> Path:
        if self.states_dir is None:
            raise RunError("a scenario with a cached state needs the build cache (IpfsBackend.open(cache_dir=...))")
        return self.states_dir

    @property
    def cache(self) -> Path:
        """The build cache the states are in: what is written or removed there goes through no link."""
        return self.root.parent

    def job(self, label: str, repo: StateRepo, scenario, step=None) -> StateJob | None:
        """What must be built before `step` (None: `scenario`, the open one, whose `state` template
        builds its state) can run for this build: the scenario's state or the step's layer over it; None when cached (or
        there is none). A job holds the state's lock until done: another run on this machine (the
        nightly beside the PR bot) waits for the build, then finds it cached, instead of building it too."""
        if repo.state is None or (step is not None and not step.state):
            return None
        where = repo.state.repo if step is None else repo.state.layer(key(step.state))
        lock = StateCache.claim(where, self.cache)
        if lock is None:
            return None
        try:
            if step is None:
                StateCache.clear(repo.state.root / "layers", self.cache)  # built on an older state: rebuilt too
                StateCache.clear(where, self.cache)  # an incomplete state
                repo.bare(where).init()
                return StateJob(label, where, scenario.state, None, lock)
            StateCache.clear(where, self.cache)
            self.inside(unmount_command(repo.path, scratch(repo.path)) + " && "
                        + layer_mount_command(repo.path, repo.state.repo, where, self.sandbox.user))
            return StateJob(label, repo.path, step.state, where, lock)
        except BaseException:
            lock.close()
            raise

    def done(self, job: StateJob, ok: bool = True) -> None:
        """After the job's template ran: unmount a layer's overlay (at the repo, the job's path), then
        mark it (or the state) complete; a failed one is removed, so the next run rebuilds it. Then
        the lock goes."""
        with job.lock:
            if job.layer is not None:
                # after a failed template, the unmount must not replace the failure that is on its way
                with contextlib.suppress(*(() if ok else (RunError,))):
                    self.inside(f"umount {shlex.quote(str(job.path))}")
            where = job.layer if job.layer is not None else job.path
            if not ok:
                StateCache.clear(where, self.cache)
                return
            if job.layer is not None:
                paths.remove_tree(job.layer / "work", self.cache, ignore_errors=True)
            StateCache.mark(where, self.cache, template=job.template)

    def inside(self, cmd: str) -> None:
        """A mount command in the run's mount namespace; a failure names it."""
        proc = subprocess.run([*self.sandbox.prefix(), "sh", "-c", cmd], capture_output=True, text=True,
                              timeout=120, env=child_env(extra=self.pass_env))
        if proc.returncode != 0:
            raise RunError(f"mounting a cached IPFS state failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}",
                           detail=f"command: {cmd}\n{proc.stderr[-2000:]}")
