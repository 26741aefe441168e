"""The daemon's per-run counters (refbench.daemon, issue 36): the peak-memory reset, attribution
per build under interleaving, a daemon that dies mid-run, the parsers."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from refbench import daemon
from refbench.errors import RunError

MiB = 1 << 20

# a stand-in daemon: on each line read, hold `mib` MiB (touched) for a moment, free it, answer
_CHILD = r"""
import sys, time
early = int(sys.argv[2])
if early:
    b = bytearray(early << 20); del b
print("ready", flush=True)
for line in sys.stdin:
    b = bytearray(int(sys.argv[1]) << 20)
    time.sleep(0.05)
    del b
    print("done", flush=True)
"""


class FakeDaemon:
    def __init__(self, mib: int, early_mib: int = 0):
        self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(mib), str(early_mib)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def work(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "done"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def spawn():
    made = []

    def make(*a):
        made.append(FakeDaemon(*a))
        return made[-1]
    yield make
    for d in made:
        d.close()


def timed_run(d: FakeDaemon, out) -> None:
    daemon.probe("before", d.pid, out)
    d.work()
    daemon.probe("after", d.pid, out)


def test_peak_reset_an_early_peak_is_not_charged_to_later_runs(spawn, tmp_path):
    d = spawn(0, 200)  # peaks at 200 MiB once, before any run
    assert daemon.snapshot(d.pid).peak > 190 * MiB  # the mark is there before the reset
    out = tmp_path / "a.jsonl"
    for _ in range(3):
        timed_run(d, out)
    runs = daemon.read_usages(out)
    assert len(runs) == 3
    assert all(u.memory < 60 * MiB for u in runs), [u.memory for u in runs]


def test_attribution_per_build_under_interleaving(spawn, tmp_path):
    light, heavy = spawn(0), spawn(64)
    files = {light.pid: tmp_path / "a.jsonl", heavy.pid: tmp_path / "b.jsonl"}
    for d in (light, heavy, heavy, light, light, heavy):  # ABBA..., as a round interleaves
        timed_run(d, files[d.pid])
    a, b = daemon.read_usages(files[light.pid]), daemon.read_usages(files[heavy.pid])
    assert len(a) == len(b) == 3
    assert max(u.memory for u in a) + 50 * MiB < min(u.memory for u in b)
    assert all(u.cpu >= 0 and u.writes >= 0 for u in a + b)


def test_a_daemon_that_exits_mid_run_is_an_error_not_a_zero(spawn, tmp_path):
    d = spawn(0)
    out = tmp_path / "a.jsonl"
    daemon.probe("before", d.pid, out)
    d.close()
    with pytest.raises(RunError, match=f"daemon \\(pid {d.pid}\\) exited during the run"):
        daemon.probe("after", d.pid, out)
    with pytest.raises(RunError, match="has no 'after'.*died mid-run"):
        daemon.read_usages(out)


def test_probe_cli_exits_2_with_one_line_for_a_dead_daemon(spawn, tmp_path):
    d = spawn(0)
    pid = d.pid
    d.close()
    proc = subprocess.run([sys.executable, "-m", "refbench.daemon", "before", "--pid", str(pid),
                           "--out", str(tmp_path / "x")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "exited" in proc.stderr


def test_the_probe_server_runs_through_the_prefix(spawn, tmp_path):
    """The server starts behind the scenario's prefix (the run's namespace), as the backend starts it."""
    d = spawn(0)
    out = tmp_path / "a.jsonl"
    server = daemon.ProbeServer(("env",), d.pid, out, None)
    try:
        t0 = time.monotonic()
        for cmd in server.probe().hooks(own_shell=True):
            subprocess.run(cmd, shell=True, check=True)
        assert time.monotonic() - t0 < 5
    finally:
        server.close()
    assert len(daemon.read_usages(out)) == 1


def test_parsers():
    stat = "123 (ipfs (x) y) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 30 0"
    assert daemon.parse_stat_cpu(stat, 100) == pytest.approx(3.0)
    assert daemon.parse_status_hwm("Name:\tipfs\nVmHWM:\t  1024 kB\n") == MiB
    assert daemon.parse_io_writes("rchar: 5\nwrite_bytes: 4096\n") == 4096
    page = ("# HELP go_memstats_alloc_bytes_total x\ngo_memstats_alloc_bytes_total 1.5e+06\n"
            'go_gc_duration_seconds{quantile="0.5"} 0.1\ngo_gc_duration_seconds_count 7\n')
    assert daemon.parse_prometheus(page) == (1_500_000, 7)
    assert daemon.parse_prometheus("") == (None, None)
    u = daemon.usage(daemon.Snapshot(1.0, 5, 10, 100, 2), daemon.Snapshot(1.5, 7, 30, 400, 3))
    assert u == daemon.Usage(0.5, 7, 20, 300, 1)
    assert set(u.values()) == set(daemon.METRICS)
    assert daemon.parse_cgroup_cpu("usage_usec 15090\nuser_usec 10000\n") == pytest.approx(0.01509)
    assert daemon.parse_cgroup_cpu("") is None
    head = stat + "\nVmHWM:\t1024 kB\nwrite_bytes: 0\n"
    assert daemon.parse_block(head, 100).cpu_source == "ticks"
    snap = daemon.parse_block(head + "usage_usec 15090\nuser_usec 10000\n", 100)
    assert (snap.cpu, snap.cpu_source) == (pytest.approx(0.01509), "cgroup")
    with pytest.raises(RunError, match="two sources"):
        daemon.usage(daemon.Snapshot(1.0, 5, 10), snap)
    mounts = "cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
    assert daemon.cgroup2_mount(mounts) == Path("/sys/fs/cgroup/unified")
    assert daemon.cgroup2_mount("cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\n") is None
    assert daemon.own_cgroup("4:memory:/x\n0::/system.slice/a.service\n") == "/system.slice/a.service"
    assert daemon.own_cgroup("4:memory:/x\n") == "/"


# a stand-in daemon driven by signals, as a CLI drives kubo's daemon through its API: on SIGUSR1
# it holds `mib` MiB (touched) for a moment, then frees them and answers with a line in its file
_SIGNALLED = r"""
import os, signal, sys, time
mib = int(sys.argv[1])
def work(sig, frame):
    b = bytearray(mib << 20)
    time.sleep(0.05)
    del b
    with open(sys.argv[2], "a") as fh:  # one line per run done: the timed command waits for it
        fh.write("done\n")
signal.signal(signal.SIGUSR1, work)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def test_hyperfine_runs_the_probes_around_each_run_and_each_build_gets_its_own(tmp_path):
    """Through the runner's hooks (with_probe, --conclude, collect_usages) and a real hyperfine:
    two daemons, one holding 64 MiB more during each run, interleaved A B B A: each build is
    charged its own daemon's peak, and the client's own memory is the same for both."""
    from refbench import hyperfine
    from refbench.runner import collect_usages, round_hooks, with_probe
    from conftest import need

    binary = hyperfine.locate()
    if not binary:
        need("hyperfine", "run `refbench setup`")
    info = hyperfine.HyperfineInfo.probe(binary)
    for i in (0, 1):
        (tmp_path / f"done{i}").write_text("")
    procs = [subprocess.Popen([sys.executable, "-c", _SIGNALLED, str(mib), str(tmp_path / f"done{i}")],
                              stdout=subprocess.PIPE, text=True) for i, mib in enumerate((0, 64))]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        servers = [daemon.ProbeServer((), p.pid, tmp_path / f"{i}.jsonl", None) for i, p in enumerate(procs)]
        # the run ends when the daemon answered (a loaded machine may take longer than any sleep)
        cmds = [f"n=$(cat {tmp_path}/done{i} | wc -l); kill -USR1 {p.pid} && "
                f"until [ $(cat {tmp_path}/done{i} | wc -l) -gt $n ]; do sleep 0.01; done" for i, p in enumerate(procs)]
        seq = [0, 1, 1, 0, 0, 1]
        # as the runner gives them: these commands need a shell, so hyperfine's shell runs the hooks' bodies
        hooks = round_hooks([s.probe() for s in servers], "auto", [cmds[i] for i in seq], [None] * len(seq), seq)
        out = tmp_path / "x.json"
        argv = hyperfine.command_line(out, [f"b{i}" for i in seq], [cmds[i] for i in seq],
                                      [with_probe(None, hooks[i]) for i in seq], 1, 0, info=info,
                                      concludes=[hooks[i][1] for i in seq])
        assert argv.count("--conclude") == len(seq)
        given = [argv[k + 1] for k, a in enumerate(argv) if a in ("--prepare", "--conclude")]
        assert given and not any(h.startswith("sh -c") for h in given)  # no second shell per hook
        subprocess.run(argv, check=True, capture_output=True, cwd=tmp_path)
        light = collect_usages(tmp_path / "0.jsonl", 3, "light")
        heavy = collect_usages(tmp_path / "1.jsonl", 3, "heavy")
        assert not (tmp_path / "0.jsonl").exists()  # read once, then gone: the next round starts empty
        assert max(u.memory for u in light) + 50 * MiB < min(u.memory for u in heavy)
        with pytest.raises(RunError, match="gave 0 figures for 3 runs"):
            collect_usages(tmp_path / "0.jsonl", 3, "again")
    finally:
        for s in locals().get("servers", ()):
            s.close()
        for p in procs:
            p.kill()
            p.wait()


def test_a_hooks_body_run_by_a_shell_answers_as_the_hook_does(spawn, tmp_path):
    """Probe.hooks: the bodies hyperfine's own shell runs (own_shell False) ask the server as the
    `sh -c BODY` hooks do (own_shell True), fail as they do (exit 2, one line) once the server is
    gone, and behind a failed prepare (`prep && BODY`) probe nothing and blame no server."""
    d = spawn(0)
    server = daemon.ProbeServer((), d.pid, tmp_path / "a.jsonl", None)
    probe = server.probe()
    assert probe.role == "daemon" and probe.out == tmp_path / "a.jsonl"
    own, bodies = probe.hooks(own_shell=True), probe.hooks(own_shell=False)
    assert all(shlex.split(h) == ["sh", "-c", b] for h, b in zip(own, (probe.before, probe.after)))
    try:
        for hook in bodies:
            assert subprocess.run(["sh", "-c", hook], capture_output=True, text=True).returncode == 0
        for hook in own:
            assert subprocess.run(shlex.split(hook), capture_output=True, text=True).returncode == 0
        assert len(daemon.read_usages(tmp_path / "a.jsonl")) == 2
        failed = subprocess.run(["sh", "-c", f"false && {bodies[0]}"], capture_output=True, text=True)
        assert failed.returncode == 1 and failed.stderr == ""
    finally:
        server.close()
    for gone in (subprocess.run(["sh", "-c", bodies[0]], capture_output=True, text=True),
                 subprocess.run(shlex.split(own[0]), capture_output=True, text=True)):
        assert gone.returncode == 2 and "probe server" in gone.stderr and "is gone" in gone.stderr


@pytest.mark.parametrize("cmd, no_shell, bodies", [
    ("ipfs add -Q f > cid", "auto", True),  # the call needs a shell: its shell runs the bodies
    ("ipfs cat CID", "auto", False),  # no shell (-N): each hook its own sh -c
    ("ipfs add -Q f > cid", "on", False),  # -N forced: commands of their own
    ("ipfs cat CID", "off", True),
])
def test_a_rounds_probes_are_bodies_only_where_hyperfine_runs_a_shell(cmd, no_shell, bodies):
    from refbench import hyperfine
    from refbench.runner import round_hooks, with_probe
    probe = daemon.Probe(*daemon.server_bodies(123, Path("/run/x")), Path("a"))
    got = round_hooks([probe, None], no_shell, [cmd, cmd], [None, None], [0, 1])
    assert got[1] is None
    assert got[0] == probe.hooks(own_shell=not bodies)
    # the shell hyperfine is then given is the one it would have had with the hooks as their own commands
    own = probe.hooks(own_shell=True)
    assert hyperfine.use_no_shell(no_shell, [cmd, cmd], [with_probe(None, got[0]), None, got[0][1]]) == \
        hyperfine.use_no_shell(no_shell, [cmd, cmd], [with_probe(None, own), None, own[1]])
    assert round_hooks([None, None], no_shell, [cmd, cmd], [None, None], [0, 1]) == [None, None]


def test_a_probe_costs_well_under_a_second(spawn, tmp_path):
    """The overhead per run is two hooks (an `sh` start each, the server's reads), outside the
    timed command (benchmarks/daemon_metrics.py measures it: a few ms)."""
    d = spawn(0)
    server = daemon.ProbeServer((), d.pid, tmp_path / "a.jsonl", None)
    before, after = server.probe().hooks(own_shell=True)
    try:
        t0 = time.monotonic()
        for _ in range(5):
            subprocess.run(before, shell=True, check=True)
            subprocess.run(after, shell=True, check=True)
        per_run = (time.monotonic() - t0) / 5
    finally:
        server.close()
    assert per_run < 1.0, per_run


class Prometheus:
    """A stand-in metrics endpoint: a Prometheus page whose allocation counter grows by 1 MiB per
    request, after `filler` other metric lines (kubo's offline page is ~25 KB: 1,000 lines);
    counts the connections it accepted (a probe server keeps one open). The benchmark
    benchmarks/daemon_metrics.py uses it too."""

    def __init__(self, filler: int = 0):
        import http.server
        import threading

        from fakes.loopback import reply
        state = self
        self.requests = self.connections = 0
        head = "".join(f"filler_metric_{i} {i}\n" for i in range(filler))

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as Go's server: headers and body are two writes here

            def setup(self):
                state.connections += 1
                super().setup()

            def do_GET(self):
                state.requests += 1
                body = (f"# HELP x\n{head}{daemon.PROM_ALLOC} {state.requests * MiB}\n"
                        f"{daemon.PROM_GC} {state.requests}\nother_metric 1\n").encode()
                reply(self, body)

            def log_message(self, *a):
                pass
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/debug/metrics/prometheus"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_the_probe_server_measures_each_run_over_one_kept_connection(spawn, tmp_path):
    """The server's records are the shell probes' (an early peak not charged, the heavy daemon's
    64 MiB on each of its runs), and the Go counters come over one connection for all probes."""
    prom = Prometheus()
    light, heavy = spawn(0, 200), spawn(64)
    servers = {d.pid: daemon.ProbeServer((), d.pid, tmp_path / f"{d.pid}.jsonl", prom.url) for d in (light, heavy)}
    try:
        for d in (light, heavy, heavy, light, light, heavy):
            before, after = servers[d.pid].probe().hooks(own_shell=True)
            subprocess.run(before, shell=True, check=True)
            d.work()
            subprocess.run(after, shell=True, check=True)
        a, b = (daemon.read_usages(tmp_path / f"{d.pid}.jsonl") for d in (light, heavy))
        assert len(a) == len(b) == 3
        assert max(u.memory for u in a) + 50 * MiB < min(u.memory for u in b)
        assert all(u.alloc == MiB and u.gc == 1 for u in a + b)  # one page read per probe
        assert prom.connections == 2  # one per server, kept alive over 12 probes
    finally:
        for s in servers.values():
            s.close()
        prom.close()


def test_the_probe_server_hook_fails_with_one_line_when_the_daemon_exits_mid_run(spawn, tmp_path):
    d = spawn(0)
    server = daemon.ProbeServer((), d.pid, tmp_path / "a.jsonl", None)
    try:
        before, after = server.probe().hooks(own_shell=True)
        subprocess.run(before, shell=True, check=True)
        d.close()
        proc = subprocess.run(after, shell=True, capture_output=True, text=True, timeout=10)
        assert proc.returncode == 2
        assert proc.stderr.strip() == f"refbench: the daemon (pid {d.pid}) exited during the run"
        with pytest.raises(RunError, match="has no 'after'"):
            daemon.read_usages(tmp_path / "a.jsonl")
        server.close()
        proc = subprocess.run(before, shell=True, capture_output=True, text=True, timeout=10)
        assert proc.returncode == 2 and "probe server" in proc.stderr and "is gone" in proc.stderr
    finally:
        server.close()


def test_a_probe_server_whose_metrics_cannot_be_read_fails_at_start(spawn, tmp_path):
    d = spawn(0)
    with pytest.raises(RunError, match="probe server for pid .* did not start: .*metrics at http://127.0.0.1:9/"):
        daemon.ProbeServer((), d.pid, tmp_path / "a.jsonl", "http://127.0.0.1:9/debug/metrics/prometheus")


# a stand-in daemon that burns a known 15 ms of CPU per run, in a thread that then exits (as Go's
# runtime ends threads): the cgroup must count what that thread spent after it is gone
_BURNER = r"""
import sys, threading, time
def burn():
    t = time.thread_time()
    while time.thread_time() - t < 0.015:
        pass
print("ready", flush=True)
for line in sys.stdin:
    th = threading.Thread(target=burn)
    th.start()
    th.join()
    print("done", flush=True)
"""


def test_daemon_cpu_reads_a_known_15_ms_per_run_where_ticks_read_10_or_20(tmp_path):
    """The daemon's own cgroup v2 (CpuCgroup) gives its CPU in µs, exited threads included: 15 ms
    of work reads 15 ms ± a little on every run; /proc/PID/stat's ticks, the fallback, read the
    same runs as multiples of 10 ms (the quantisation that gave an A/A run false verdicts)."""
    from conftest import need
    d = subprocess.Popen([sys.executable, "-c", _BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    cg = None
    try:
        assert d.stdout.readline().strip() == "ready"
        cg, why = daemon.CpuCgroup.create(d.pid)
        if cg is None:
            need("a cgroup v2 of the daemon's own", why)
        assert (cg.path / "cgroup.procs").read_text().split() == [str(d.pid)]
        server = daemon.ProbeServer((), d.pid, tmp_path / "cg.jsonl", None, cgroup=cg.path)
        ticks_out = tmp_path / "ticks.jsonl"
        try:
            before, after = server.probe().hooks(own_shell=True)
            for _ in range(8):
                daemon.probe("before", d.pid, ticks_out)  # the fallback, read around the same runs
                subprocess.run(before, shell=True, check=True)
                d.stdin.write("go\n")
                d.stdin.flush()
                assert d.stdout.readline().strip() == "done"
                subprocess.run(after, shell=True, check=True)
                daemon.probe("after", d.pid, ticks_out)
        finally:
            server.close()
        exact, ticks = daemon.read_usages(tmp_path / "cg.jsonl"), daemon.read_usages(ticks_out)
        print("cgroup ms", [round(u.cpu * 1e3, 2) for u in exact], "ticks ms", [round(u.cpu * 1e3) for u in ticks])
        assert {u.cpu_source for u in exact} == {"cgroup"} and {u.cpu_source for u in ticks} == {"ticks"}
        # 15 ms burnt, plus the thread's start and the answer: well under a tick's worth more
        assert all(0.0145 <= u.cpu <= 0.019 for u in exact), [u.cpu for u in exact]
        assert all(round(u.cpu * 100, 6) == round(u.cpu * 100) for u in ticks), [u.cpu for u in ticks]
    finally:
        d.kill()
        d.wait()
        if cg is not None:
            cg.close()
            assert not cg.path.exists()  # removed once the daemon is gone


def test_no_cgroup_v2_means_ticks_and_a_reason():
    v1_only = "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\nproc /proc proc rw 0 0\n"
    assert daemon.CpuCgroup.create(1, mounts=v1_only) == (None, "no cgroup v2 mounted")


def test_the_backend_says_where_the_daemon_cpu_came_from():
    from refbench.backends.ipfs import daemon_cpu_fact
    assert daemon_cpu_fact([]) == {}
    assert daemon_cpu_fact([("cgroup", "")] * 2) == {"daemon cpu": daemon.CPU_SOURCES["cgroup"]}
    both = daemon_cpu_fact([("cgroup", ""), ("ticks", "cannot make a cgroup under /x: Permission denied")])
    assert "usage_usec" in both["daemon cpu"] and "clock ticks" in both["daemon cpu"] and "Permission" in both["daemon cpu"]


# a refbench stand-in: starts a daemon that dies with it (as kubo's and MinIO's do), gives it its
# CpuCgroup, says where, then waits to be killed without any clean-up of its own
_OWNER = r"""
import subprocess, sys, time
from refbench import daemon
from refbench.backends.process import die_with_parent
d = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], preexec_fn=die_with_parent)
cg, why = daemon.CpuCgroup.create(d.pid)
print(cg.path if cg else "none: " + why, flush=True)
time.sleep(600)
"""


def _killed_outright_leaves() -> tuple[Path, bool]:
    """(the cgroup a refbench stand-in made for its daemon, whether it is still there 10 s after
    the stand-in was killed outright, SIGKILL)."""
    from conftest import ROOT, need
    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdout=subprocess.PIPE, text=True,
                             cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    try:
        line = owner.stdout.readline().strip()
        if line.startswith("none: "):
            need("a cgroup v2 of the daemon's own", line)
        path = Path(line)
        assert path.is_dir() and path.name.endswith(f"-{owner.pid}")
        owner.kill()
    finally:
        owner.kill()  # never left behind by a failing test
        owner.wait()
    deadline = time.monotonic() + 10
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return path, path.exists()


def test_a_run_killed_outright_leaves_no_daemon_cgroup():
    """SIGKILL allows refbench no clean-up: its daemon dies with it, and the cgroup made for the
    daemon's CPU goes too (its guard), not with the next run's sweep ten minutes on (issue 36: an
    online kubo run's two cgroups outlived the killed-run test of the slow suite)."""
    path, left = _killed_outright_leaves()
    assert not left, f"{path} outlived the run that made it"


def test_the_sweep_removes_a_dead_runs_empty_cgroup_at_once(tmp_path, monkeypatch):
    """A cgroup whose maker is gone (refbench and its guard both killed) goes with the next
    daemon's start, however young; a live run's young one stays, and so does one holding a process."""
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid no process has now (the test's own children are reaped)
    now = time.time()
    made = {name: tmp_path / name for name in (f"refbench-daemon-1-{dead.pid}", f"refbench-daemon-2-{os.getpid()}",
                                               "refbench-daemon-odd", "other-7-1")}
    for p in made.values():
        p.mkdir()
        os.utime(p, (now, now))
    daemon._sweep(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"refbench-daemon-2-{os.getpid()}", "refbench-daemon-odd", "other-7-1"])
    old = now - 601
    for p in tmp_path.iterdir():
        os.utime(p, (old, old))
    daemon._sweep(tmp_path)  # ten minutes on, a live pid may be a reused one: gone too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other-7-1"]
    assert daemon.cgroup_owner(f"refbench-daemon-12-{dead.pid}") == dead.pid
    assert daemon.cgroup_owner("refbench-daemon-odd") is None
