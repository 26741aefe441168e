#!/usr/bin/env python3
"""What checking a cached fixture costs (issue 35, review35e): fixtures.intact against the
alternatives, for the threat model's figures.

    benchmarks/fixture_check_cost.py [--dir DIR] [--big N]

For each --quick fixture of the bundled scenarios (and N x 1 MiB random, default 1,000: scale by
ten for 10,000), generates it with fixtures.ensure, then times, with the files in the page cache:
compare (fixtures.intact: the generator's bytes made again and compared; sparse files by
SEEK_DATA), tar+sha256 (backends.snapshot.manifest, what a seal over the content would hash), and
generate (making it again each run instead). Writes about 1.4 GB under --dir, removed after.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from refbench import fixtures as fx  # noqa: E402
from refbench.backends import snapshot  # noqa: E402
from refbench.config import FixtureSpec  # noqa: E402

QUICK = [("sparse", dict(size=256 << 10, count=200)), ("sparse", dict(size=256 << 20, count=1)),
         ("sparse", dict(size=1 << 30, count=1)), ("sparse", dict(size=16 << 10, count=2000)),
         ("sparse", dict(size=1024, count=20000)),
         ("tree", dict(dirs=3, count=12, depth=3, size=128 << 10, random_fanout=True, random_size=True)),
         ("random", dict(size=64 << 20, count=1)), ("random", dict(size=4096, count=500)),
         ("random", dict(size=1 << 20, count=4)), ("random", dict(size=256 << 10, count=64))]


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--big", type=int, default=1000)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="fixture-cost-", dir=args.dir))
    try:
        for kind, kw in QUICK + [("random", dict(size=1 << 20, count=args.big))]:
            spec = FixtureSpec(kind=kind, **kw)
            made: list = []
            gen = timed(lambda: made.append(fx.ensure(spec, base)))
            root = made[0].root
            assert fx.intact(spec, root) is None  # also warms the page cache
            cmp_s = timed(lambda: fx.intact(spec, root))
            tar_s = timed(lambda: snapshot.manifest(root))
            print(f"{spec.key():38s} {made[0].files:6d} files {made[0].bytes / 2**20:8.1f} MiB  compare {cmp_s:6.2f} s"
                  f"  tar+sha256 {tar_s:6.2f} s  generate {gen:6.2f} s", flush=True)
            shutil.rmtree(root)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
