"""IPFS: a fresh, offline IPFS_PATH per build and per scenario (kubo's test profile: loopback only,
no bootstrap), with an HTTP API daemon where a scenario asks for one; removed when the scenario ends."""
from __future__ import annotations

import contextlib
import json
import logging
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import RunError
from .process import child_env, die_with_parent, stop_process

log = logging.getLogger(__name__)

API_PLACEHOLDER = "http://127.0.0.1:<port>"  # a daemon's API before it starts


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
                              env={**child_env(), **self.env})
        if proc.returncode != 0:
            raise RunError(f"ipfs {' '.join(args)} failed: {proc.stderr.strip().splitlines()[-1:] or ''}")
        return proc.stdout

    def repo_stat(self) -> dict | None:
        """`ipfs repo stat --enc=json` (NumObjects: exact; RepoSize: kubo's estimate), or None
        when this kubo cannot say (the counters are extra information, never a failed run)."""
        try:
            doc = json.loads(self.run("repo", "stat", "--enc=json"))
        except (RunError, ValueError, OSError, subprocess.SubprocessError) as e:
            log.warning("ipfs repo stat failed for %s: %s", self.path, e)
            return None
        return doc if isinstance(doc, dict) else None

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
                                           stderr=subprocess.STDOUT, env={**child_env(), **self.env},
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
            stop_process(self.daemon, timeout=20)
            self.daemon = None


@dataclass
class IpfsBackend:
    """A fresh IPFS_PATH per build and per scenario, offline, removed at the end."""

    workdir: Path
    kind: str = "ipfs"
    shared_context: bool = False
    repos: dict[str, IpfsRepo] = field(default_factory=dict)
    swept: list = field(default_factory=list)  # nothing is shared between runs: nothing to sweep

    @classmethod
    def open(cls, workdir: Path) -> "IpfsBackend":
        """The run's IPFS area under its workdir. Close it (or use it as a context manager) to
        stop the daemons and remove the repos."""
        backend = cls.planned(workdir)
        backend.workdir.mkdir(parents=True, exist_ok=True)
        return backend

    @classmethod
    def planned(cls, workdir: Path) -> "IpfsBackend":
        """What open() would give, for a dry run: nothing is created (see plan_scenario)."""
        return cls(Path(workdir) / "ipfs")

    @property
    def env(self) -> dict[str, str]:
        return {}

    def open_scenario(self, scenario, labels: list[str], binaries: list[str], workdir: Path) -> None:
        self.close_scenario()
        for i, (label, binary) in enumerate(zip(labels, binaries)):
            repo = self.repos[label] = IpfsRepo(self._repo_path(scenario, i), binary)
            repo.init()
            if scenario.daemon:
                repo.start_daemon(self.workdir / f"{scenario.slug}-b{i}.daemon.log")

    def plan_scenario(self, scenario, labels: list[str], binaries: list[str]) -> None:
        """For a dry run: the repos open_scenario would make, neither created nor started; a
        daemon's API address is a placeholder."""
        self.repos = {label: IpfsRepo(self._repo_path(scenario, i), binary,
                                      api=API_PLACEHOLDER if scenario.daemon else "")
                      for i, (label, binary) in enumerate(zip(labels, binaries))}

    def _repo_path(self, scenario, i: int) -> Path:
        return self.workdir / f"{scenario.slug}-b{i}"

    def context_values(self, scenario_slug: str, build_label: str) -> dict:
        repo = self.repos[build_label]
        return {"ipfs_path": str(repo.path), "api": repo.api, "remote": ""}

    def context_env(self, scenario_slug: str, build_label: str) -> dict[str, str]:
        return self.repos[build_label].env

    def repo_stat(self, build_label: str) -> dict | None:
        """The build's repo counters now (see IpfsRepo.repo_stat)."""
        repo = self.repos.get(build_label)
        return repo.repo_stat() if repo else None

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

    def watch_extra(self) -> dict:
        return {}

    def describe(self) -> dict:
        return {"kind": "ipfs", "repos": "fresh IPFS_PATH per build and scenario (test profile, offline)"}

    def close(self) -> None:
        self.close_scenario()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "IpfsBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
