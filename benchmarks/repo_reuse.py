#!/usr/bin/env python3
"""What a replaced kubo repo's deletion does to the next daemon's adds (issue 36): the same
online daemons and repos the kubo backend makes (IpfsBackend: the run's namespace, a fresh repo
and daemon for each build every round), the tree's `add -r --raw-leaves --pin=false` after its
`gc` as the step runs it, and each add's daemon CPU (user and system, /proc/PID/stat), in two
ways of replacing a repo:
- delete: the old repo removed at the restart, as refbench did before;
- retire: the old repo emptied and kept until the end (dirs.Retired, what refbench does now).

On ext4 without a journal, an inode allocation walks past every inode freed in the last one to
six minutes, so with `delete` each fresh repo's adds cost more kernel time the more was deleted
just before, and each daemon keeps its own level. Prints, per way: the mean daemon CPU of the
first and last pair of daemons, and the intraclass correlation of a daemon's adds (the share of
the log CPU's variance that is between daemons).

    .venv/bin/python benchmarks/repo_reuse.py [--daemons 14] [--adds 6] [--kubo PATH/ipfs]

Give the file system a quiet minute between the ways (--pause): freed inodes stay "recent" for
up to six minutes, and the second way would pay for the first's.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from daemon_metrics import newest_kubo  # noqa: E402
from kubo_daemon import icc  # noqa: E402
from refbench import fixtures  # noqa: E402
from refbench.backends import IpfsBackend  # noqa: E402
from refbench.config import FixtureSpec  # noqa: E402

TREE = FixtureSpec(kind="tree", size=128 << 10, count=12, dirs=3, depth=3, random_fanout=True, random_size=True)
TICK = os.sysconf("SC_CLK_TCK")
GC = '"$0" pin ls --type=recursive -q | xargs -r "$0" pin rm >/dev/null; "$0" repo gc -q >/dev/null'


def cpu_ms(pid: int) -> tuple[float, float]:
    """(user, system) ms the process has used."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(f[11]) * 1000 / TICK, int(f[12]) * 1000 / TICK


def one_way(way: str, kubo: str, tree: Path, daemons: int, adds: int, tmp: Path) -> list[list[tuple[float, float]]]:
    """Per daemon (both builds' in turn), each add's (user, system) ms."""
    backend = IpfsBackend.open(tmp / way, restart_every=1)
    if way == "delete":
        backend.retired = None  # IpfsBackend.retire then removes the old repo at once
    labels = ["a", "b"]
    out: list[list[tuple[float, float]]] = []
    with backend:
        backend.open_scenario(SimpleNamespace(name="tree", slug="tree", daemon_mode="online", state=None),
                              labels, [kubo, kubo], tmp / way)
        for k in range(daemons):
            if k:
                backend.before_round(timed=True)
                backend.before_round(timed=True)
            per = {lab: [] for lab in labels}
            inside = backend.command_prefix()
            for i in range(adds + 1):  # the first add warms the daemon up
                for lab in labels:
                    env = {**os.environ, **backend.context_env("tree", lab)}
                    subprocess.run([*inside, "sh", "-c", GC, kubo],  # the step's prepare
                                   env=env, check=True, capture_output=True)
                    pid = backend.server_pid(lab)
                    before = cpu_ms(pid)
                    subprocess.run([*inside, kubo, "add", "-r", "-Q", "--raw-leaves", "--pin=false", str(tree)],
                                   env=env, check=True, capture_output=True)
                    after = cpu_ms(pid)
                    if i:
                        per[lab].append((after[0] - before[0], after[1] - before[1]))
            out.extend(per.values())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--daemons", type=int, default=14, help="fresh pairs of daemons a way")
    p.add_argument("--adds", type=int, default=6, help="adds a daemon serves (after one warm-up add)")
    p.add_argument("--kubo", help="an ipfs binary (default: the newest in refbench's build cache)")
    p.add_argument("--pause", type=float, default=400, help="seconds between the ways")
    p.add_argument("--ways", default="delete,retire")
    a = p.parse_args()
    kubo = a.kubo or newest_kubo()
    if kubo is None:
        sys.exit("kubo: no build found (pass --kubo PATH/ipfs)")
    with tempfile.TemporaryDirectory(prefix="refbench-repo-reuse-") as tmp:  # where a run's workdir goes
        tree = fixtures.ensure(TREE, Path(tmp) / "fixtures").root
        for n, way in enumerate(a.ways.split(",")):
            if n:
                time.sleep(a.pause)
            t0 = time.monotonic()
            per = one_way(way, str(kubo), tree, a.daemons, a.adds, Path(tmp))
            total = [[u + s for u, s in d] for d in per]
            system = [[s for _, s in d] for d in per]
            first, last = total[:2], total[-2:]
            print(f"{way}: {len(per)} daemons x {a.adds} adds in {time.monotonic() - t0:.0f} s; "
                  f"daemon CPU an add: first pair {statistics.mean(sum(first, [])):.0f} ms "
                  f"(system {statistics.mean(sum(system[:2], [])):.0f}), last pair "
                  f"{statistics.mean(sum(last, [])):.0f} ms (system {statistics.mean(sum(system[-2:], [])):.0f}); "
                  f"ICC of log CPU {icc([[math.log(v) for v in d] for d in total]):.2f}", flush=True)
            print("  per daemon (ms): " + " ".join(f"{statistics.mean(d):.0f}" for d in total), flush=True)


if __name__ == "__main__":
    main()
