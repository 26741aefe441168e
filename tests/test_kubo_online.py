"""kubo as its users run it: an online daemon in a network namespace of the run's own, and a
garbage collection over a cached repo state restored before every run.

Real kubo (the kubo origin's two kubo v0.40.1 wrappers, shared with test_kubo's builds), real
namespaces and overlay mounts. Asserts behaviour only: the daemon has no peers and listens on
loopback alone, the CLI's commands went through its API, every GC started from the same blocks,
the state is built once and reused, and nothing is left behind (daemons, namespaces, mounts,
repos), even after SIGKILL.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT, need, run_bench, run_cli
from test_kubo import COMMON, kubo_section, processes_under

LOOPBACK = re.compile(r"^/(ip4/127\.\d+\.\d+\.\d+|ip6/::1)/|^/p2p-circuit")


@pytest.fixture(scope="module")
def namespaces():
    """A network namespace of the run's own can be made here (as root, or through a user namespace)."""
    from refbench.backends import sandbox

    why = sandbox.unavailable()
    if why:
        need("a network namespace (unshare, nsenter, ip)", why)


def net_namespaces() -> set[str]:
    """Every network namespace some live process is in."""
    found = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                found.add(os.readlink(f"/proc/{pid}/ns/net"))
            except OSError:
                pass
    return found


@pytest.mark.slow
def test_online_daemon_is_alone_on_loopback_and_the_cli_goes_through_its_api(tmp_path, namespaces, kubo_binaries):
    from refbench.backends import IpfsBackend

    before = net_namespaces()
    backend = IpfsBackend.open(tmp_path / "work")
    scenario = SimpleNamespace(name="probe", slug="probe", daemon_mode="online", state=None)
    data = tmp_path / "data.bin"
    data.write_text(os.urandom(150_000).hex())
    try:
        backend.open_scenario(scenario, ["old", "new"], kubo_binaries, tmp_path / "work")
        prefix = backend.command_prefix()
        assert prefix and prefix[0].endswith("nsenter")
        for lab, binary in zip(("old", "new"), kubo_binaries):
            repo = backend.repos[lab]
            env = {**os.environ, **backend.context_env("probe", lab)}

            def ipfs(*args):
                p = subprocess.run([*prefix, binary, *args], env=env, capture_output=True, text=True, timeout=60)
                assert p.returncode == 0, (args, p.stderr)
                return p.stdout

            # the daemon runs in a network namespace that is not ours, with only loopback in it
            daemon_ns = os.readlink(f"/proc/{repo.daemon.pid}/ns/net")
            assert daemon_ns != os.readlink("/proc/self/ns/net")
            links = subprocess.run([*prefix, "ip", "-o", "link"], capture_output=True, text=True).stdout
            assert [ln.split(":")[1].strip() for ln in links.splitlines()] == ["lo"]
            # online (not --offline), with no peer, listening on loopback only
            assert "--offline" not in Path(f"/proc/{repo.daemon.pid}/cmdline").read_bytes().decode()
            assert ipfs("swarm", "peers").strip() == ""
            listen = ipfs("swarm", "addrs", "listen").split()
            assert listen and all(LOOPBACK.match(a) for a in listen), listen
            announced = ipfs("id", "-f", "<addrs>").split()
            assert all(LOOPBACK.match(a) for a in announced), announced
            # the version's own init defaults, loopback settings on top
            cfg = json.loads((repo.path / "config").read_text())
            assert cfg["Bootstrap"] == [] and cfg["Routing"]["Type"] == "dht"
            assert cfg["Discovery"]["MDNS"]["Enabled"] is False
            # a CLI command is served by the daemon's API: the daemon lists it among the commands it
            # served last (kubo keeps only the newest few)
            cid = ipfs("add", "-Q", str(data)).strip()
            served = ipfs("diag", "cmds")
            assert re.search(r"^add\s", served, re.MULTILINE), served
            assert cid and ipfs("cat", cid) == data.read_text()
        daemons = [backend.repos[lab].daemon.pid for lab in ("old", "new")]
    finally:
        backend.close()
    assert not (tmp_path / "work" / "ipfs").exists()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (net_namespaces() - before):
        time.sleep(0.1)
    assert net_namespaces() - before == set()  # the namespace went with its last process
    for pid in daemons:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


@pytest.mark.slow
def test_an_online_add_is_profiled_where_it_works_in_the_daemon(tmp_path, namespaces, kubo_binaries):
    """perf samples the online daemon beside the CLI for as long as the profiled command runs: an
    online `ipfs add` chunks and stores in the daemon, which the profile shows as `ipfs (server)`."""
    from refbench import profile
    from refbench.backends import IpfsBackend

    perf = profile.find_perf() or need("perf", "apt-get install linux-perf (scripts/setup.sh)")
    backend = IpfsBackend.open(tmp_path / "work")
    scenario = SimpleNamespace(name="probe", slug="probe", daemon_mode="online", state=None)
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(48 << 20))
    try:
        backend.open_scenario(scenario, ["old", "new"], kubo_binaries, tmp_path / "work")
        env = {**os.environ, **backend.context_env("probe", "old")}

        def execute(argv, what):
            subprocess.run([*backend.command_prefix(), *argv], env=env, check=True, timeout=300)

        pid = backend.server_pid("old")
        assert pid == backend.repos["old"].daemon.pid
        folded = profile.record(perf, f"{kubo_binaries[0]} add -Q {data} >/dev/null", tmp_path / "p.data", execute,
                                "profiled add", pid)
    finally:
        backend.close()
    server = sum(n for stack, n in folded.items() if stack.startswith("ipfs (server);"))
    client = sum(n for stack, n in folded.items() if stack.startswith("ipfs;"))
    assert server > client > 0, (server, client)  # the daemon did the work, the CLI sent the file
    assert any("ipfs (server);" in s and "github.com/ipfs/" in s for s in folded), list(folded)[:5]
    assert not list(tmp_path.glob("p.data*"))  # both perf files folded and removed


GC_SCENARIO = '''
[[scenarios]]
name = "gc"
target = "kubo"
fixture = { kind = "random", size = "256K", count = 4, seed = 5 }
state = """mkdir -p {{ ipfs_path ~ '/refbench' }} && cd {{ fixture }} \\
  && {{ bin }} add -Q --chunker=size-1024 tmp0 > {{ ipfs_path ~ '/refbench/a' }} \\
  && {{ bin }} add -Q --chunker=size-1024 --raw-leaves tmp1 >/dev/null \\
  && {{ bin }} add -Q --chunker=size-1024 --pin=false tmp2 >/dev/null \\
  && {{ bin }} add -Q --chunker=size-1024 --raw-leaves --pin=false tmp3 >/dev/null \\
  && {{ bin }} refs local | wc -l > {{ ipfs_path ~ '/refbench/blocks' }}"""
  [[scenarios.steps]]
  name = "repo gc"
  # every run's block count before its gc, appended where the test reads it after the run: the
  # restore is exact when they all agree
  prepare = "{{ restore }} && {{ bin }} refs local | wc -l >> @LOG@/before-{{ index }}"
  command = "{{ bin }} repo gc -q >/dev/null"
  check = "echo \\"$(cat {{ ipfs_path ~ '/refbench/blocks' }}) built / $({{ bin }} refs local | wc -l) after\\""
  [[scenarios.steps]]
  name = "second gc"
  state = "{{ bin }} repo gc -q >/dev/null && {{ bin }} refs local | wc -l > {{ ipfs_path ~ '/refbench/blocks' }}"
  prepare = "{{ restore }} && {{ bin }} refs local | wc -l >> @LOG@/second-{{ index }}"
  command = "{{ bin }} repo gc -q >/dev/null"
  check = "echo \\"$(cat {{ ipfs_path ~ '/refbench/blocks' }}) built / $({{ bin }} refs local | wc -l) after\\""
'''


@pytest.fixture(scope="module")
def overlays(namespaces):
    """An overlay can be mounted in the run's own mount namespace (what restores a cached state)."""
    from refbench.backends.snapshot import overlay_unavailable

    why = overlay_unavailable()
    if why:
        need("overlay mounts in a mount namespace", why)


def mounts_under(path: Path) -> list[str]:
    return [ln for ln in Path("/proc/mounts").read_text().splitlines() if str(path) in ln]


@pytest.mark.slow
def test_gc_restores_the_cached_state_exactly_before_every_run_and_builds_it_once(
        tmp_path, overlays, kubo_origin, builds_dir, kubo_binaries, ram_local):
    scen = tmp_path / "scenarios.toml"
    log = tmp_path / "counts"
    log.mkdir()
    scen.write_text(kubo_section() + GC_SCENARIO.replace("@LOG@", str(log)))
    local = ram_local  # the repos on a tmpfs (conftest.ram_root); the cached states stay on the disk
    states = Path(builds_dir) / "ipfs-states"

    def run(name: str):
        proc = run_bench(*COMMON, "--repo", str(kubo_origin.path), "--builds-dir", str(builds_dir), "--scenarios",
                         str(scen), "-r", "4", "-w", "1", "--rounds", "2", "-l", str(local),
                         "-o", str(tmp_path / f"{name}.md"), "--json", str(tmp_path / f"{name}.json"), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-4000:]
        return proc, json.loads((tmp_path / f"{name}.json").read_text())

    def stamps() -> set:
        return {(p, p.stat().st_mtime_ns) for p in states.rglob("state.json")} if states.exists() else set()

    earlier = stamps()  # other tests' states in the session's cache
    first, res = run("first")
    assert "state for v1.0.0 (built once, then cached)" in first.stderr
    sc = res["scenarios"][0]
    assert sc["daemon"] == "none"
    checks = {st["name"]: {lab: b["check"] for lab, b in st["builds"].items()} for st in sc["steps"]}
    for i, lab in enumerate(("v1.0.0", "v1.1.0")):
        built, after = map(int, re.fullmatch(r"(\d+) built / (\d+) after", checks["repo gc"][lab]).groups())
        # one count before every run (the untimed run, the warm-up and the 4 timed ones): all the
        # same, and the same as when the state was built
        counts = (log / f"before-{i}").read_text().split()
        assert len(counts) >= 5 and set(counts) == {str(built)}, counts
        assert 0 < after < built
        # the second gc starts from the collected layer: what the first left, and it finds nothing more
        second = (log / f"second-{i}").read_text().split()
        assert len(second) >= 5 and set(second) == {str(after)}, second
        assert checks["second gc"][lab] == f"{after} built / {after} after"
    # built once: the second run reuses both builds' states and the layer, untouched
    built_now = stamps()
    assert len(built_now - earlier) == 4  # 2 builds x (the state + the second step's layer)
    second, res2 = run("second")
    assert "built once, then cached" not in second.stderr
    assert stamps() == built_now
    assert {st["name"]: {lab: b["check"] for lab, b in st["builds"].items()}
            for st in res2["scenarios"][0]["steps"]} == checks
    assert list(local.iterdir()) == []
    assert mounts_under(local) == [] and mounts_under(Path(builds_dir)) == []


def test_online_without_a_namespace_is_refused_naming_offline(monkeypatch, tmp_path):
    """No namespace can be made (the RunEnv's probe says so): the run stops before building, one
    line, pointing at --daemon offline."""
    import dataclasses

    from refbench import runenv
    from refbench.commands import run

    def no_namespaces(command, argv):
        assert command is None  # the main comparison
        env = dataclasses.replace(runenv.real(), namespaces_unavailable=lambda: "unshare failed: Operation not permitted")
        return run.main(argv, env=env)
    got = run_cli("-t", "kubo", "-s", "v0.40.1", "v0.41.0", "--source", "module", "--quick", "--only", "large file",
                  "--builds-dir", str(tmp_path / "b"), cwd=tmp_path, dispatch=no_namespaces)
    assert got.returncode == 2
    line = got.stderr.strip().splitlines()[-1]
    assert "network namespace" in line and "Operation not permitted" in line and "--daemon offline" in line
    assert not (tmp_path / "b").exists()  # refused before anything was built


def start_online_run(tmp_path: Path, local: Path, kubo_origin, builds_dir) -> subprocess.Popen:
    """A long online kubo run (small files, 40 runs a build) for a test to kill mid-step: its temp
    files under `local` (made here), its output nowhere."""
    local.mkdir()
    return subprocess.Popen(
        [sys.executable, str(ROOT / "bench.py"), *COMMON, "--repo", str(kubo_origin.path), "--builds-dir",
         str(builds_dir), "--quick", "--only", "small files", "-r", "40", "-l", str(local),
         "-o", str(tmp_path / "s.md")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)


@pytest.mark.slow
def test_killed_outright_an_online_run_leaves_no_daemon_and_no_namespace(tmp_path, namespaces, kubo_origin,
                                                                         builds_dir, kubo_binaries):
    before = net_namespaces()
    local = tmp_path / "local"
    proc = start_online_run(tmp_path, local, kubo_origin, builds_dir)
    deadline = time.monotonic() + 300
    kubo = Path(builds_dir) / "kubo"
    while time.monotonic() < deadline and not any(" daemon" in p for p in processes_under(kubo)):
        assert proc.poll() is None, "the run ended before its daemons started"
        time.sleep(0.2)
    assert any(" daemon" in p for p in processes_under(kubo)), "no daemon ever started"
    time.sleep(2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (processes_under(kubo) or net_namespaces() - before):
        time.sleep(0.2)
    assert processes_under(kubo) == []  # daemons, hyperfine, the CLI: gone with refbench
    assert net_namespaces() - before == set()  # and the namespace with them
    # what SIGKILL left on disk goes with the next run's sweep
    proc = run_bench("clean", "--stale", "-l", str(local), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert list(local.iterdir()) == []
