#!/usr/bin/env python3
"""What the daemon probes cost per timed run (issue 36): the two hooks hyperfine runs around each
run (--prepare's before-probe, --conclude's after-probe), outside the timed command but inside
the step's wall clock, against a stand-in daemon, the embedded MinIO (s3 steps: its CPU per run)
and, where one is built, a real kubo daemon.

The hooks are refbench.daemon.ProbeServer's (what the kubo backend uses: one process per daemon
with a kept-alive connection to the metrics page, the hooks only shell builtins talking to it
through FIFOs), each started as hyperfine starts it: its body run by hyperfine's shell (a call
that needs one) and, as `server (-N)`, the hook started directly (hyperfine -N); timed two ways:
- server: the daemon's CPU from /proc/PID/stat's ticks (the fallback);
- server+cgroup: from the cpu.stat of the daemon's own cgroup v2 (CpuCgroup), where one can be
  made (root, a cgroup v2 mount): one more small file read per probe.
(The shell probes, 14 ms per run and 64 ms with curl, were removed.)

    nice -n 15 .venv/bin/python benchmarks/daemon_metrics.py [--runs 30] [--kubo PATH/ipfs]

Without --kubo, the newest kubo build in refbench's cache is used, if any. Prints ms per run for
each way and target; the ≤ 2% target means a step of at least 50 × that per run.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from refbench import daemon  # noqa: E402
from test_daemon import Prometheus  # noqa: E402 (the tests' stand-in metrics endpoint)


def per_run_ms(probe: daemon.Probe, runs: int, shell: bool = True) -> float:
    """ms per run of the two hooks as hyperfine starts them (daemon.Probe.hooks): through its shell
    (the body: a call whose commands need one, as kubo's `> cid`), or with -N (`sh -c BODY`,
    started directly)."""
    argvs = [["sh", "-c", h] for h in probe.hooks(own_shell=False)] if shell else \
        [shlex.split(h) for h in probe.hooks(own_shell=True)]
    t0 = time.perf_counter()
    for _ in range(runs):
        for argv in argvs:
            subprocess.run(argv, check=True)
    return (time.perf_counter() - t0) / runs * 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_kubo(binary: str, repo: Path) -> tuple[subprocess.Popen, str]:
    """An offline kubo daemon on a throw-away repo, its API on a loopback port."""
    env = {**os.environ, "IPFS_PATH": str(repo), "IPFS_TELEMETRY": "off"}
    subprocess.run([binary, "init", "--profile=test", "--empty-repo"], env=env, check=True, capture_output=True)
    api = free_port()
    for key, value in (("Addresses.API", f"/ip4/127.0.0.1/tcp/{api}"),
                       ("Addresses.Gateway", f"/ip4/127.0.0.1/tcp/{free_port()}")):
        subprocess.run([binary, "config", key, value], env=env, check=True, capture_output=True)
    log = open(repo.parent / "daemon.log", "w")
    proc = subprocess.Popen([binary, "daemon", "--offline"], env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while "Daemon is ready" not in (repo.parent / "daemon.log").read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"kubo daemon did not start: {(repo.parent / 'daemon.log').read_text()[-500:]}")
        time.sleep(0.1)
    return proc, f"http://127.0.0.1:{api}/debug/metrics/prometheus"


def newest_kubo() -> str | None:
    builds = sorted(Path.home().glob(".cache/refbench/builds/kubo/*/ipfs"), key=lambda p: p.stat().st_mtime)
    return str(builds[-1]) if builds else None


def measure(name: str, pid: int, url: str, runs: int, tmp: Path, real: bool = False) -> dict:
    out: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(dir=tmp))
    server = daemon.ProbeServer((), pid, tmp / "server", url)
    try:
        out["server"] = per_run_ms(server.probe(), runs)
        out["server (-N)"] = per_run_ms(server.probe(), runs, shell=False)
    finally:
        server.close()
    usages = daemon.read_usages(tmp / "server")
    cg, why = daemon.CpuCgroup.create(pid)
    if cg is None:
        print(f"{name}: no cgroup of its own ({why}): server+cgroup not measured")
    else:
        try:
            server = daemon.ProbeServer((), pid, tmp / "cgroup", url, cgroup=cg.path)
            try:
                out["server+cgroup"] = per_run_ms(server.probe(), runs)
            finally:
                server.close()
            usages = daemon.read_usages(tmp / "cgroup")
        finally:
            cg.close()  # moves the daemon out again first
    line = f"{name}: " + ", ".join(f"{k} {v:.1f} ms/run" for k, v in out.items())
    if real:  # what a probe itself costs the daemon, charged to the run (nothing else ran between)
        line += (f"; the probes charged the daemon {sum(u.cpu for u in usages) / len(usages) * 1000:.2f} ms CPU"
                 f" ({usages[0].cpu_source}) and {sum(u.alloc or 0 for u in usages) / len(usages) / 1024:.0f} KiB"
                 " of Go allocations per run")
    print(line)
    return out


def measure_minio(runs: int, tmp: Path) -> dict:
    """The embedded MinIO's probes (MinioServer.probes: its CPU per timed run of an s3 step), as
    the runner runs them around each run; {} where no minio is installed."""
    from refbench.backends.minio import MinioServer
    from refbench.tools import find_tool
    if not find_tool("minio"):
        print("minio: not installed (make setup)")
        return {}
    server = MinioServer(tmp).start()
    try:
        probe = server.probes("b0")
        ms = per_run_ms(probe, runs)
        usages = daemon.read_usages(probe.out)
    finally:
        server.stop()
    print(f"embedded MinIO: server{'+cgroup' if usages[0].cpu_source == 'cgroup' else ''} {ms:.1f} ms/run; "
          f"the probes charged it {sum(u.cpu for u in usages) / len(usages) * 1000:.2f} ms CPU per run")
    return {"server": ms}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--kubo", help="an ipfs binary (default: the newest in refbench's build cache)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON line too")
    a = p.parse_args()
    from refbench import paths
    paths.use(paths.Layout.from_environ(os.environ))  # a command line of its own: it reads the environment, as cli.main does
    figures = {}
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="refbench-daemon-metrics-") as tmp_s:
        tmp = Path(tmp_s)
        stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        prom = Prometheus(filler=1000)
        try:
            figures["stand-in"] = measure("stand-in daemon", stand_in.pid, prom.url, a.runs, tmp)
        finally:
            stand_in.kill()
            prom.close()
        figures["minio"] = measure_minio(a.runs, tmp)
        kubo = a.kubo or newest_kubo()
        if kubo:
            proc, url = start_kubo(kubo, tmp / "repo")
            try:
                figures["kubo"] = measure(f"kubo ({kubo})", proc.pid, url, a.runs, tmp, real=True)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
        else:
            print("kubo: no build found (pass --kubo PATH/ipfs)")
    if a.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
