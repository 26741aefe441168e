"""The daemon probes against real kubo daemons in the run's network namespace (issue 36): the
backend's probe server is started inside the namespace, reaches each daemon's metrics page on
loopback there, and its hooks give one usage per run with the Go counters."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import need
from test_kubo import processes_under
from test_kubo_online import namespaces, start_online_run  # noqa: F401 (fixtures)


@pytest.mark.slow
def test_online_probes_come_from_a_server_inside_the_namespace(tmp_path, namespaces, kubo_binaries):  # noqa: F811
    from refbench.backends import IpfsBackend
    from refbench.daemon import read_usages

    backend = IpfsBackend.open(tmp_path / "work")
    scenario = SimpleNamespace(name="probe", slug="probe", daemon_mode="online", state=None)
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(1 << 20))
    try:
        backend.open_scenario(scenario, ["old", "new"], kubo_binaries, tmp_path / "work")
        prefix = backend.command_prefix()
        for lab, binary in zip(("old", "new"), kubo_binaries):
            probe = backend.daemon_probes(lab)
            (before, after), out = probe.hooks(own_shell=True), probe.out
            assert "curl" not in before and "/proc/" in before  # builtins talking to the server
            server = backend.probe_servers[lab]
            assert os.readlink(f"/proc/{server.proc.pid}/ns/net") == os.readlink(
                f"/proc/{backend.repos[lab].daemon.pid}/ns/net")
            env = {**os.environ, **backend.context_env("probe", lab)}
            for _ in range(2):
                subprocess.run(before, shell=True, check=True)
                subprocess.run([*prefix, binary, "add", "-Q", str(data)], env=env, check=True, capture_output=True)
                subprocess.run(after, shell=True, check=True)
            usages = read_usages(out)
            assert len(usages) == 2
            assert all(u.alloc and u.alloc > 1 << 20 for u in usages), usages  # the add's 1 MiB went through it
            assert all(u.cpu > 0 or u.memory > 0 for u in usages)
            # root here: each daemon in a cgroup of its own, its CPU in µs, and results.json says so
            assert backend.repos[lab].cpu_cgroup is not None, backend.repos[lab].cpu_why
            assert {u.cpu_source for u in usages} == {"cgroup"}
            assert backend.daemon_probes(lab) == probe  # the same server for the next round
        servers = [s.proc for s in backend.probe_servers.values()]
        cgroups = [r.cpu_cgroup.path for r in backend.repos.values()]
        assert "usage_usec" in backend.describe()["daemon cpu"]
    finally:
        backend.close()
    assert all(p.poll() is not None for p in servers)  # stopped with the scenario
    assert not any(c.exists() for c in cgroups)  # and the daemons' cgroups removed


@pytest.mark.slow
def test_the_online_daemons_own_pprof_profile_covers_a_profiled_run(tmp_path, namespaces, kubo_binaries):  # noqa: F811
    """Without perf: kubo's /debug/pprof/profile, read inside the namespace around a profiled
    `ipfs add`, shows the daemon's own work (the add's chunking and storing) as `ipfs (server)`."""
    import shutil

    from conftest import need
    from refbench import profile
    from refbench.backends import IpfsBackend

    go = shutil.which("go") or need("go", "the Go toolchain reads kubo's profiles")
    backend = IpfsBackend.open(tmp_path / "work")
    scenario = SimpleNamespace(name="probe", slug="probe", daemon_mode="online", state=None)
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(48 << 20))
    where = tmp_path / "pprof"
    try:
        backend.open_scenario(scenario, ["old", "new"], kubo_binaries, tmp_path / "work")
        env = {**os.environ, **backend.context_env("probe", "old")}
        api = backend.daemon_api("old")
        assert api and api.startswith("http://127.0.0.1:")
        with profile.daemon_pprof(backend.command_prefix(), api, 2, where):
            subprocess.run([*backend.command_prefix(), kubo_binaries[0], "add", "-Q", str(data)], env=env,
                           check=True, capture_output=True, timeout=300)
        folded = profile.daemon_pprof_folded(go, kubo_binaries[0], where)
    finally:
        backend.close()
    assert sum(folded.values()) > 0
    assert all(s.startswith("ipfs (server);") for s in folded)
    assert any("github.com/ipfs/" in s for s in folded), list(folded)[:5]


def daemon_cgroups_of(pid: int) -> list[Path]:
    """The refbench-daemon-* cgroups the run `pid` made (CpuCgroup names them after it)."""
    from refbench import daemon
    root = daemon.cgroup2_mount()
    return [] if root is None else [c for c in root.rglob(f"{daemon.CpuCgroup.PREFIX}*-{pid}") if c.is_dir()]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_run_killed_mid_step_leaves_no_daemon_cgroup_of_its_own(tmp_path, sig, namespaces, kubo_origin,  # noqa: F811
                                                                 builds_dir, kubo_binaries):  # noqa: F811
    """Issue 36: the killed online run of the slow suite (test_kubo_online) left its two daemons'
    empty cgroups behind until a later run's sweep. Killed mid-step, however, a run leaves none."""
    proc = start_online_run(tmp_path, tmp_path / "local", kubo_origin, builds_dir)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and len(daemon_cgroups_of(proc.pid)) < 2:
            assert proc.poll() is None, "the run ended before its daemons started"
            time.sleep(0.2)
        made = daemon_cgroups_of(proc.pid)
        if not made:
            need("a cgroup v2 of the daemons' own", "the run made none (its CPU is read in ticks)")
        assert len(made) == 2
        time.sleep(2)  # mid-step: its timed rounds under way
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (daemon_cgroups_of(proc.pid) or processes_under(Path(builds_dir) / "kubo")):
        time.sleep(0.2)
    assert daemon_cgroups_of(proc.pid) == [], f"left after {sig.name}: {made}"
