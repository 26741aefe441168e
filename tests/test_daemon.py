"""The daemon's per-run counters (refbench.daemon, issue 36): the peak-memory reset, attribution
per build under interleaving, a daemon that dies mid-run, the parsers."""
from __future__ import annotations

import subprocess
import sys
import time

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


def test_probe_commands_run_through_the_prefix(spawn, tmp_path):
    d = spawn(0)
    out = tmp_path / "a.jsonl"
    before, after = daemon.probe_commands(("env",), d.pid, out, None)
    t0 = time.monotonic()
    for cmd in (before, after):
        subprocess.run(cmd, shell=True, check=True)
    assert time.monotonic() - t0 < 5
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
