"""IPFS: a fresh repo per build and per scenario, run the way the scenario says kubo runs.

- online (the bundled default): the version's own `ipfs init` defaults (datastore, sync), on disk
  under the run's work dir; `ipfs daemon` online (a DHT with no bootstrap peers, swarm, API and
  gateway on loopback, no MDNS, no HTTP routers, no telemetry), inside a network namespace of the
  run's own where only loopback is up (sandbox.py), and every command of the scenario runs in
  there too, so the CLI talks to the daemon as `ipfs add` does when a daemon runs;
- offline: the test profile and `ipfs daemon --offline`, for its HTTP API;
- none: the test profile and no daemon, the CLI alone on the repo.
Repos, daemons and the namespace are removed when the scenario (the run) ends.
"""
from __future__ import annotations

import contextlib
import json
import logging
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..daemon import CpuCgroup, Probe
from ..config import ShellCode
from ..errors import RunError
from .dirs import Retired
from .ipfs_daemons import (close_probe_servers, daemon_cpu_fact, probe_server, restart, restart_order, restarts_fact,
                           settle_binaries)
from .ipfs_states import StateBuilds, StateJob, file_digest, scratch, state_lowers
from .process import child_env, die_with_parent, group_guard, release_guard, stop_process
from .sandbox import Sandbox
from .snapshot import StateCache, key, restore_command, unmount_command

log = logging.getLogger(__name__)

API_PLACEHOLDER = "http://127.0.0.1:<port>"  # a daemon's API before it starts
# Every round of a step gets fresh repos and daemons of their own (issue 36): one repo's runs are
# correlated (each add/unpin/gc cycle leaves its daemon's next add costlier, at a pace of its own),
# so with one repo and daemon per build for a whole scenario that history looked like a difference
# between the builds. docs/kubo.md has the figures.
DEFAULT_RESTART_EVERY = 1


# An online repo's settings over the version's own `ipfs init` defaults: every address on
# loopback, no bootstrap peers, no MDNS, the DHT as the only router (no HTTP routers, no
# auto-configuration fetched from anywhere). Keys a version does not have are left out.
ONLINE_CONFIG = (
    (("Addresses", "API"), "/ip4/127.0.0.1/tcp/0"),
    (("Addresses", "Gateway"), "/ip4/127.0.0.1/tcp/0"),
    (("Addresses", "Swarm"), ["/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"]),
    (("Bootstrap",), []),
    (("Discovery", "MDNS", "Enabled"), False),
    (("Routing", "Type"), "dht"),
    (("Swarm", "DisableNatPortMap"), True),
    (("AutoConf", "Enabled"), False),
)


def online_config(cfg: dict) -> dict:
    """`cfg` (a repo's config file) with ONLINE_CONFIG applied: a key is set only where its parent
    table exists, so an older kubo never reads a key it does not know."""
    out = json.loads(json.dumps(cfg))
    for keys, value in ONLINE_CONFIG:
        table = out
        for k in keys[:-1]:
            table = table.get(k) if isinstance(table, dict) else None
            if table is None:
                break
        if isinstance(table, dict):
            table[keys[-1]] = value
    return out


@dataclass
class IpfsRepo:
    path: Path
    binary: str
    mode: str = "none"  # config.DAEMON_MODES
    prefix: tuple[str, ...] = ()  # what runs a command inside the run's namespace (online)
    daemon: subprocess.Popen | None = None
    guard: subprocess.Popen | None = None
    api: str = ""
    state: StateCache | None = None  # the scenario's cached state: `path` is then an overlay over it
    lowers: tuple[Path, ...] = ()  # what the overlay at `path` shows, top first
    pass_env: frozenset[str] = frozenset()  # more names ipfs sees (MachineSettings.pass_env)
    in_process: bool = False  # an implementation that is its own node in one process (Helia): a directory, no daemon
    cpu_cgroup: "CpuCgroup | None" = None  # the daemon's own cgroup: its CPU in µs
    cpu_why: str = ""  # why the daemon has none (its CPU is then read in clock ticks)
    log_path: Path | None = None  # the running daemon's log (a restart writes it afresh)

    @property
    def env(self) -> dict[str, str]:
        # telemetry: off in every mode; an online daemon could not send it anyway
        return {"IPFS_PATH": str(self.path), "IPFS_TELEMETRY": "off"}

    def run(self, *args: str, timeout: float = 120) -> str:
        """An ipfs command on this repo (through the daemon's API when one runs, in its namespace)."""
        proc = subprocess.run([*self.prefix, self.binary, *args], capture_output=True, text=True,
                              timeout=timeout, env={**child_env(extra=self.pass_env), **self.env})
        if proc.returncode != 0:
            raise RunError(f"ipfs {' '.join(args)} failed: {proc.stderr.strip().splitlines()[-1:] or ''}")
        return proc.stdout

    def repo_stat(self) -> dict | None:
        """`ipfs repo stat --enc=json` (NumObjects: exact; RepoSize: kubo's estimate), or None
        when this kubo cannot say (the counters are extra information, never a failed run)."""
        if self.in_process:
            return None
        try:
            doc = json.loads(self.run("repo", "stat", "--enc=json"))
        except (RunError, ValueError, OSError, subprocess.SubprocessError) as e:
            log.warning("ipfs repo stat failed for %s: %s", self.path, e)
            return None
        return doc if isinstance(doc, dict) else None

    def bare(self, path: Path) -> "IpfsRepo":
        """The same kubo on another repo, in mode none (no daemon): a cached state is built on one."""
        return IpfsRepo(path, self.binary, "none", self.prefix, pass_env=self.pass_env)

    def init(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        if self.in_process:  # the implementation makes its own repo in it
            return
        if self.mode == "online":  # the version's own defaults (datastore, sync), then loopback only
            self.run("init", "--empty-repo")
            cfg_path = self.path / "config"
            cfg_path.write_text(json.dumps(online_config(json.loads(cfg_path.read_text())), indent=2))
            return
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
        """`ipfs daemon` (`--offline` unless online), in its own process group under a guard that
        kills it if refbench dies, however (a parent-death signal does not survive the entry into
        a user namespace)."""
        self.spawn_daemon(log_path)
        self.wait_ready(timeout)

    def spawn_daemon(self, log_path: Path) -> None:
        """The daemon's process, its guard and its CPU cgroup; ready once wait_ready returns (apart,
        so a restart starts every build's daemon before it waits for any)."""
        argv = [*self.prefix, self.binary, "daemon", *(() if self.mode == "online" else ("--offline",))]
        self.log_path = log_path
        with open(log_path, "w") as fh:
            self.daemon = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT,
                                           env={**child_env(extra=self.pass_env), **self.env},
                                           start_new_session=True, preexec_fn=die_with_parent)
        self.guard = group_guard(self.daemon.pid)
        self.cpu_cgroup, self.cpu_why = CpuCgroup.create(self.daemon.pid)  # before it starts its threads

    def wait_ready(self, timeout: float = 60) -> None:
        """Until the spawned daemon says it is ready and its API address is known."""
        log_path = self.log_path
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

    def pin_api(self) -> None:
        """Before a restart (after the repo's init): the next daemon listens where this one did, since
        the step's commands, and files its setup wrote (the concurrent fetch's curl configs), name
        the API's address."""
        if not self.api:
            return
        cfg_path = self.path / "config"
        cfg = json.loads(cfg_path.read_text())
        cfg.setdefault("Addresses", {})["API"] = f"/ip4/127.0.0.1/tcp/{self.api.rsplit(':', 1)[1]}"
        cfg_path.write_text(json.dumps(cfg, indent=2))

    def stop_daemon(self) -> None:
        if self.daemon is not None:
            stop_process(self.daemon, timeout=20)
            self.daemon = None
        release_guard(self.guard)
        self.guard = None
        if self.cpu_cgroup is not None:  # empty now: the daemon is gone
            self.cpu_cgroup.close()
            self.cpu_cgroup = None


@dataclass
class IpfsBackend:
    """A fresh IPFS_PATH per build and per scenario, run in the scenario's daemon mode, removed at
    the end; one network namespace for the run's online scenarios, made when the first needs it."""

    workdir: Path
    kind: str = "ipfs"
    shared_context: bool = False
    repos: dict[str, IpfsRepo] = field(default_factory=dict)
    swept: list = field(default_factory=list)  # nothing is shared between runs: nothing to sweep
    sandbox: Sandbox | None = None
    mode: str = "none"  # the open scenario's daemon mode
    modes: dict[str, str] = field(default_factory=dict)  # scenario name -> the mode it ran in
    states_dir: Path | None = None  # where cached repo states live (in the build cache)
    scenario: object = None  # the open scenario (config.ScenarioSpec)
    probe_servers: dict = field(default_factory=dict)  # label -> its daemon's refbench.daemon.ProbeServer
    pass_env: frozenset[str] = frozenset()  # more names ipfs and its commands see (MachineSettings.pass_env)
    in_process: frozenset[str] = frozenset()  # labels of builds that are their own node in one process (Helia)
    cpu_sources: dict = field(default_factory=dict)  # label -> (refbench.daemon.CPU_SOURCES key, why not cgroup)
    # a daemon serves at most this many rounds of a step, then every build gets a fresh repo and
    # daemon, untimed (before_round); 0: one repo and daemon per build for the whole scenario
    restart_every: int = DEFAULT_RESTART_EVERY
    served: int = 0  # rounds the running daemons have served
    restarts: list = field(default_factory=list)  # seconds each restart of the builds' daemons took
    retired: Retired | None = None  # replaced repos, emptied, removed when the run ends (dirs.Retired)

    @classmethod
    def open(cls, workdir: Path, cache_dir: Path | None = None, pass_env: frozenset[str] = frozenset(),
             restart_every: int | None = None) -> "IpfsBackend":
        """The run's IPFS area under its workdir, cached states under cache_dir. Close it (or use
        it as a context manager) to stop the daemons, unmount and remove the repos. restart_every:
        rounds a daemon serves before it is restarted (None: the default; 0: never)."""
        backend = cls.planned(workdir, cache_dir)
        backend.pass_env = pass_env
        if restart_every is not None:
            backend.restart_every = restart_every
        backend.workdir.mkdir(parents=True, exist_ok=True)
        backend.retired = Retired(backend.workdir / "retired")
        return backend

    @classmethod
    def planned(cls, workdir: Path, cache_dir: Path | None = None) -> "IpfsBackend":
        """What open() would give, for a dry run: nothing is created (see plan_scenario)."""
        return cls(Path(workdir) / "ipfs", states_dir=Path(cache_dir) / "ipfs-states" if cache_dir else None)

    @property
    def env(self) -> dict[str, str]:
        return {}

    @staticmethod
    def needs_sandbox(scenario) -> bool:
        """An online daemon needs the run's network namespace, a cached state its mount namespace."""
        return scenario.daemon_mode == "online" or bool(getattr(scenario, "state", None))

    def command_prefix(self) -> tuple[str, ...]:
        """What every command of the open scenario runs behind: entry into the run's namespaces
        for an online scenario (the CLI must reach the daemon's loopback) or one with a cached
        state (its overlay is mounted there), nothing otherwise."""
        inside = self.scenario is not None and self.needs_sandbox(self.scenario)
        return self.sandbox.prefix() if inside and self.sandbox else ()

    def open_scenario(self, scenario, labels: list[str], binaries: list[str], workdir: Path) -> None:
        self.close_scenario()
        self.scenario = scenario
        self.mode = self.modes[scenario.name] = scenario.daemon_mode
        if self.needs_sandbox(scenario) and self.sandbox is None:
            self.sandbox = Sandbox.open()
        settle_binaries(binaries)
        for i, (label, binary) in enumerate(zip(labels, binaries)):
            repo = self.repos[label] = IpfsRepo(self._repo_path(scenario, i), binary, self.mode,
                                                self.command_prefix(), pass_env=self.pass_env,
                                                in_process=label in self.in_process)
            if getattr(scenario, "state", None) and not repo.in_process:  # the repo is the cached state, mounted by {{ restore }}
                repo.state = StateCache(self.states().root / key(file_digest(binary)) /
                                        key(scenario.state, repr(scenario.fixture)))
                repo.lowers = (repo.state.repo,)
                continue
            repo.init()
            if self.mode != "none" and not repo.in_process:
                repo.start_daemon(self.workdir / f"{scenario.slug}-b{i}.daemon.log")
        self.served = 0

    def before_round(self, timed: bool = True, order: Sequence[str] = ()) -> float:
        """Called by the runner before a step's warm-ups (timed False) and before each of its
        rounds: once the builds' daemons have served restart_every rounds, each build gets a fresh
        repo and a new daemon on it (restart_daemons, in `order`: the labels in the order the
        coming round runs them), so what one repo's history does to its daemon is between-round
        noise the statistics see, not a build's. Returns the seconds that took (0.0: nothing was
        restarted; the runner then puts back what the setups added)."""
        seconds = 0.0
        if self.restart_every and self.served >= self.restart_every and self.server_pids():
            seconds = self.restart_daemons(order=order)
            self.served = 0
        if timed:
            self.served += 1
        return seconds

    @property
    def refreshes_daemons(self) -> bool:
        """Whether the rounds get fresh daemons (before_round): daemons run and K is not 0."""
        return bool(self.restart_every) and bool(self.server_pids())

    def restart_daemons(self, fresh: bool = True, order: Sequence[str] = ()) -> float:
        """Every build's running daemon stopped, its repo made afresh (`ipfs init` as at the
        scenario's start; with fresh False the repo is kept) and a new daemon started on it at the
        old API address: all stopped first, then all started, then waited for, the same for every
        build, build by build in `order` (labels; the rest after them in the builds' order). A
        repo, not only its daemon: a daemon restarted on its old repo keeps that repo's growing
        cost (docs/kubo.md). Their probe servers go with them (daemon_probes starts one per new
        daemon).

        The order is the coming round's (runner.round_orders: drawn per pair of rounds from the
        run's seed), not always the builds' own: a repo made and a daemon started first, every
        time, is a position, and whatever that position does to a daemon's cost would land on
        the same build in every round (issue 36: in a full A/A the first build's daemons cost
        20-30% more CPU on the tree's adds in every refreshed round)."""
        t0 = time.monotonic()
        close_probe_servers(self.probe_servers)
        restart([repo for repo in restart_order(self.repos, order) if repo.daemon is not None], fresh, self.retire)
        self.restarts.append(time.monotonic() - t0)
        return self.restarts[-1]

    # ---- cached states (ipfs_states.StateBuilds) ---------------------------------------------
    def states(self) -> StateBuilds:
        """The build cache's side of the run's cached states, mounted in the run's namespace."""
        return StateBuilds(self.states_dir, self.sandbox, self.pass_env)

    def state_job(self, label: str, step=None) -> StateJob | None:
        """What must be built before `step` (None: the scenario) can run for this build, None when
        cached (or there is none): StateBuilds.job, holding the state's lock until state_done."""
        return self.states().job(label, self.repos[label], self.scenario, step)

    def state_done(self, job: StateJob, ok: bool = True) -> None:
        """After the job's template ran: the state marked complete, or removed (StateBuilds.done)."""
        self.states().done(job, ok)

    def use_state(self, label: str, step) -> None:
        """The state the step's runs restore: its own layer over the scenario's, or the scenario's."""
        repo = self.repos[label]
        if repo.state is not None:
            repo.lowers = state_lowers(repo.state, step)

    def plan_scenario(self, scenario, labels: list[str], binaries: list[str]) -> None:
        """For a dry run: the repos open_scenario would make, neither created nor started; a
        daemon's API address is a placeholder, a cached state's place too (binaries are not built)."""
        self.mode = scenario.daemon_mode
        self.repos = {label: IpfsRepo(self._repo_path(scenario, i), binary, self.mode,
                                      api=API_PLACEHOLDER if self.mode != "none" else "")
                      for i, (label, binary) in enumerate(zip(labels, binaries))}
        if getattr(scenario, "state", None):
            for repo in self.repos.values():
                repo.state = StateCache(Path("<build cache>") / "ipfs-states" / "<binary>")
                repo.lowers = (repo.state.repo,)

    def _repo_path(self, scenario, i: int) -> Path:
        return self.workdir / f"{scenario.slug}-b{i}"

    def context_values(self, scenario_slug: str, build_label: str) -> dict:
        repo = self.repos[build_label]
        values = {"ipfs_path": str(repo.path), "api": repo.api, "remote": ""}
        if repo.state is not None:  # a scenario with a cached state: the command that puts it back
            values["restore"] = ShellCode(restore_command(repo.path, list(repo.lowers), scratch(repo.path),
                                                          bool(self.sandbox and self.sandbox.user)))
        return values

    def context_env(self, scenario_slug: str, build_label: str) -> dict[str, str]:
        return self.repos[build_label].env

    def repo_stat(self, build_label: str) -> dict | None:
        """The build's repo counters now (see IpfsRepo.repo_stat)."""
        repo = self.repos.get(build_label)
        return repo.repo_stat() if repo else None

    def close_scenario(self) -> None:
        close_probe_servers(self.probe_servers)
        for repo in self.repos.values():
            repo.stop_daemon()
            if repo.state is not None and self.sandbox is not None:  # never rmtree through a mount
                self.states().inside(unmount_command(repo.path, scratch(repo.path)))
                shutil.rmtree(scratch(repo.path), ignore_errors=True)
                shutil.rmtree(repo.path, ignore_errors=True)
            else:
                self.retire(repo.path)
        for p in [*self.workdir.glob("*.daemon.log"), *self.workdir.glob("*.daemon-probes.jsonl")]:
            p.unlink()
        self.repos.clear()
        self.mode = "none"
        self.scenario = None

    def watch_dir(self) -> tuple[Path | None, str]:
        return self.workdir, "IPFS repos"

    def server_pids(self) -> list[int]:
        return [pid for pid in map(self.server_pid, list(self.repos)) if pid is not None]

    def server_pid(self, label: str) -> int | None:
        """The build's running daemon, which a profile samples beside the CLI (None: no daemon)."""
        repo = self.repos.get(label)
        daemon = repo.daemon if repo else None
        return daemon.pid if daemon is not None and daemon.poll() is None else None

    def daemon_api(self, label: str) -> str | None:
        """The build's running daemon's API URL (reachable inside command_prefix), for its own
        profile (refbench.profile.daemon_pprof); None without a daemon."""
        if self.server_pid(label) is None or self.mode == "none":
            return None
        return self.repos[label].api or None

    def daemon_probes(self, label: str) -> Probe | None:
        """The build's daemon probes (refbench.daemon.Probe: what hyperfine runs before and after
        each timed run, and the file they append to); None without a running daemon. The
        probes run where hyperfine runs (inside the run's namespace for online), so they reach
        the daemon's API on loopback for its Go metrics. A probe server per daemon, started
        once (inside the namespace), does the work, so a probe starts no process but `sh`."""
        pid = self.server_pid(label)
        if pid is None or self.mode == "none":
            return None
        server = self.probe_servers.get(label)
        if server is None or server.pid != pid:  # a restarted daemon gets a server of its own
            if server is not None:
                server.close()
            server, self.cpu_sources[label] = probe_server(self.repos[label], self.command_prefix(), pid)
            self.probe_servers[label] = server
        return server.probe()

    def watch_extra(self) -> dict:
        return {}

    def describe(self) -> dict:
        modes = ", ".join(f"{name}: {mode}" for name, mode in self.modes.items())
        daemons = any(mode != "none" for mode in self.modes.values())
        return {"kind": "ipfs", "repos": "fresh IPFS_PATH per build and scenario",
                "daemon": modes or "none", **daemon_cpu_fact(self.cpu_sources.values()),
                **({"daemon restarts": restarts_fact(self.restart_every, self.restarts)} if daemons else {}),
                **({"network": "a network namespace of the run's own, loopback only"
                               + (" (through a user namespace)" if self.sandbox.user else "")}
                   if self.sandbox else {})}

    def retire(self, repo_path: Path) -> None:
        """A replaced repo out of the way: emptied and kept until the run ends (dirs.Retired says
        why it is not deleted now), or removed at once by a backend that was never opened."""
        if self.retired is not None:
            self.retired.retire(repo_path)
        else:
            shutil.rmtree(repo_path, ignore_errors=True)

    def close(self) -> None:
        self.close_scenario()
        if self.retired is not None:
            self.retired.clear()
        if self.sandbox is not None:
            self.sandbox.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "IpfsBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
