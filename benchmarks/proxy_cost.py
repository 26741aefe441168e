#!/usr/bin/env python3
"""What the network profiles' shaper costs (issue 26): toxiproxy's own CPU time per request and per
MiB, read from /proc around a known amount of S3 traffic through it, beside MinIO's for the same.

The shaper runs on the same machine as the client and the server, so its CPU time is taken from
theirs; a step's CPU verdict is the client's alone (hyperfine measures s5cmd), but on 2 cores the
shaper's time can slow the wall clock. Two proxies are measured: `proxy` (no toxics: the cost of
forwarding alone) and `region` (10 ms, 40 MB/s per connection: its timers too).

    .venv/bin/python benchmarks/proxy_cost.py [--requests 1000] [--mib 256]

Prints one line per proxy and workload; nothing is written.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from refbench.backends import MinioServer, s3_client  # noqa: E402
from refbench import paths  # noqa: E402
from refbench.backends.toxiproxy import Toxiproxy  # noqa: E402
from refbench.network import BUNDLED, NetworkProfile  # noqa: E402


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(shaper: Toxiproxy, minio_pid: int, work) -> tuple[float, float, float]:
    """(wall seconds, toxiproxy CPU seconds, MinIO CPU seconds) of work()."""
    t0, s0, m0 = time.monotonic(), proc_cpu(shaper.pid), proc_cpu(minio_pid)
    work()
    return time.monotonic() - t0, proc_cpu(shaper.pid) - s0, proc_cpu(minio_pid) - m0


def main() -> None:
    paths.use(paths.Layout.from_environ(os.environ))  # a command line of its own: it reads the environment, as cli.main does
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=1000, help="small GETs, one after another")
    p.add_argument("--mib", type=int, default=256, help="MiB downloaded in 64 MiB objects")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="proxy-cost-") as tmp, MinioServer(Path(tmp)) as server, \
            Toxiproxy(Path(tmp)) as shaper:
        direct = s3_client(server.endpoint, server.env)
        direct.create_bucket(Bucket="cost")
        direct.put_object(Bucket="cost", Key="small", Body=b"x" * 1024)
        big = os.urandom(1 << 20) * 64
        direct.put_object(Bucket="cost", Key="big", Body=big)
        for profile in (NetworkProfile("proxy", description="forwarding alone"), BUNDLED["region"]):
            client = s3_client(f"http://{shaper.add(profile, server.endpoint)}", server.env)
            client.get_object(Bucket="cost", Key="small")["Body"].read()  # the connection, once

            def small():
                for _ in range(args.requests):
                    client.get_object(Bucket="cost", Key="small")["Body"].read()

            def large():
                for _ in range(max(1, args.mib // 64)):
                    client.get_object(Bucket="cost", Key="big")["Body"].read()

            wall, cpu, minio = measure(shaper, server.proc.pid, small)
            print(f"{profile.name:6} {args.requests} small GETs: {wall:6.2f} s wall; toxiproxy "
                  f"{cpu * 1e3 / args.requests:.3f} ms CPU per request (MinIO {minio * 1e3 / args.requests:.3f})")
            mib = max(1, args.mib // 64) * 64
            wall, cpu, minio = measure(shaper, server.proc.pid, large)
            print(f"{profile.name:6} {mib} MiB of GETs: {wall:6.2f} s wall; toxiproxy {cpu * 1e3 / mib:.3f} ms CPU "
                  f"per MiB (MinIO {minio * 1e3 / mib:.3f})")


if __name__ == "__main__":
    main()
