"""The builds' kubo daemons over a scenario, apart from their repos' contents: restarted together on
fresh repos every K rounds (issue 36), their binaries settled in the page cache while no daemon
maps them, a probe server each (its figures' accounting: CPU from a cgroup or in clock ticks), and
the facts results.json keeps of how they ran. IpfsBackend keeps the repos and the counters (rounds
served, restarts' seconds) and delegates the work to these functions.
"""
from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Callable, Mapping, MutableMapping, Sequence, TypeVar

from ..daemon import ProbeServer, cpu_source_text
from ..errors import RunError
from .process import settle_page_cache

R = TypeVar("R")  # a build's repo (ipfs.IpfsRepo)


def daemon_cpu_fact(sources) -> dict[str, str]:
    """results.json's backend fact `daemon cpu`: where the daemons' CPU figures came from (each
    run's daemon had the same source unless some could not get a cgroup: then both, and why)."""
    got = dict(sorted(set(sources)))
    if not got:
        return {}
    return {"daemon cpu": "; ".join(cpu_source_text(k, why) for k, why in got.items())}


def settle_binaries(binaries: Sequence[str | os.PathLike]) -> None:
    """Every build's binary settled in the page cache (backends.process.settle_page_cache) while no
    daemon of the scenario maps it: at the scenario's start and between the stop and the start of
    a restart. Why (issue 36): a settle drops only pages no process maps, and a daemon started
    first keeps the pages it mapped in whatever folios they were (a binary just built, or run once
    from a cold cache: small ones) for its whole life. The CLI that hyperfine times maps the same
    page-cache pages, so its peak RSS carried them: kubo's CLI peaked at 60 MB on small folios
    against 82 MB on large, and in a hold64 run the contender's CLI was `faster` on memory
    (-7.9% to -9.4%) on 10 steps, its daemon having mapped its binary before the runner's settle."""
    for binary in dict.fromkeys(str(b) for b in binaries):
        settle_page_cache(binary)


def restart_order(repos: Mapping[str, R], order: Sequence[str] = ()) -> list[R]:
    """The repos by label in `order`, then any `order` leaves out in their own order: the order a
    restart makes their repos and starts their daemons in (IpfsBackend.restart_daemons)."""
    first = [label for label in order if label in repos]
    return [repos[label] for label in (*first, *(label for label in repos if label not in first))]


def restarts_fact(every: int, seconds: list[float]) -> str:
    """results.json's backend fact `daemon restarts` (shown in the summary's "How kubo ran"): how
    many rounds a repo and its daemon served, and what the untimed restarts cost (the setups that
    put back what a fresh repo lacks not included: they count as setup)."""
    if not every:
        return "never: one repo and daemon per build for the whole scenario"
    n = len(seconds)
    cost = f"; {n} restart{'s' if n != 1 else ''}, {sum(seconds):.1f} s in all, untimed" if seconds else ""
    return f"on fresh repos every {'round' if every == 1 else f'{every} rounds'}{cost}"


def restart(live: Sequence, fresh: bool, retire: Callable[[Path], None]) -> None:
    """The running daemons of `live` (repos, in the restart's order) stopped, each repo made afresh
    (`ipfs init` as at the scenario's start, the old one retired; with fresh False the repo is
    kept) and a new daemon started on it at the old API address: all stopped first, then all
    started, then waited for, the same for every build. A repo, not only its daemon: a daemon
    restarted on its old repo keeps that repo's growing cost (docs/kubo.md)."""
    for repo in live:  # SIGTERM to all first: they shut down side by side
        with contextlib.suppress(ProcessLookupError):
            os.killpg(repo.daemon.pid, signal.SIGTERM)
    apis = [repo.api for repo in live]
    for repo in live:
        repo.stop_daemon()
        if fresh:
            retire(repo.path)
            repo.init()
        repo.pin_api()
    settle_binaries([repo.binary for repo in live])
    for repo in live:
        repo.spawn_daemon(repo.log_path)
    for repo, api in zip(live, apis):
        repo.wait_ready()
        if api and repo.api != api:
            raise RunError(f"the restarted ipfs daemon of {repo.path} listens at {repo.api}, not at {api} "
                           "where the step's commands reach it")


def close_probe_servers(servers: MutableMapping[str, ProbeServer]) -> None:
    """Every daemon's probe server stopped, before its daemon goes (a new daemon gets a new one)."""
    for server in servers.values():
        server.close()
    servers.clear()


def probe_server(repo, prefix: tuple[str, ...], pid: int) -> tuple[ProbeServer, tuple[str, str]]:
    """A probe server for the repo's running daemon `pid`, started behind `prefix` (inside the run's
    namespace for online, where the probes reach the daemon's API on loopback for its Go metrics),
    and where its CPU figures come from (refbench.daemon.CPU_SOURCES key, why not its cgroup)."""
    out = repo.path.with_name(repo.path.name + ".daemon-probes.jsonl")
    metrics = f"{repo.api}/debug/metrics/prometheus" if repo.api else None
    cgroup = repo.cpu_cgroup.path if repo.cpu_cgroup is not None else None
    return (ProbeServer(prefix, pid, out, metrics, cgroup=cgroup),
            ("cgroup", "") if cgroup else ("ticks", repo.cpu_why))
