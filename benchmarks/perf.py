#!/usr/bin/env python3
"""Measure refbench's own performance targets (not a test: prints figures).

1. a re-run with refs already built spends 0 s building
2. 10000 sparse 1 MiB fixture files (<= 0.7 s; one truncate process per file for comparison);
   seeded random fixtures (>= 1 GB/s; numpy's Generator.bytes() for comparison)
3. the remove step's prepare (server-side copy) costs <= 2x the measured remove
4. refbench's own overhead: wall time minus hyperfine's, as a share of a --quick run

Usage: .venv/bin/python benchmarks/perf.py [--skip-run] [--refs v2.2.2 v2.3.0] [--source module]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PATH"] = f"{ROOT / 'tools' / 'bin'}:{os.environ['PATH']}"

import numpy as np  # noqa: E402

from refbench import fixtures as fx, paths  # noqa: E402
from refbench.backends import MinioServer, s3_client  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_sparse(tmp: Path, trials: int = 3) -> dict:
    """refbench's one-process sparse fixture, several trials (ext4 journal contention with
    background writeback makes single trials swing), and one truncate process per file once."""
    ours = []
    for t in range(trials):
        d = tmp / f"sparse-refbench-{t}"
        d.mkdir()
        ours.append(timed(lambda: fx.write_sparse(d, 1 << 20, 10000)))
        shutil.rmtree(d)
    d2 = tmp / "sparse-truncate"
    d2.mkdir()

    def per_process():
        for i in range(10000):
            subprocess.run(["truncate", "-s", "1M", str(d2 / f"tmp{i}")], check=True)
    theirs = timed(per_process)
    shutil.rmtree(d2)
    return {"refbench_s": ours, "truncate_per_file_s": theirs}


def bench_disk(tmp: Path) -> float:
    """What the disk writes (dd, 4 GiB, including the flush), for reference: GB/s."""
    p = subprocess.run(["dd", "if=/dev/zero", f"of={tmp / 'dd'}", "bs=4M", "count=1024", "conv=fdatasync"],
                       capture_output=True, text=True)
    os.remove(tmp / "dd")
    line = p.stderr.strip().splitlines()[-1]
    secs = float(line.split(" s,")[0].split(",")[-1])
    return 4 * 1024 ** 3 / secs / 1e9


def bench_random(tmp: Path, gib: int = 4) -> dict:
    size = gib << 30
    gen = fx.RandomWriter(seed=1)
    path = tmp / "random.bin"
    with open(path, "wb", buffering=0) as fh:
        t_write = timed(lambda: gen.write(fh, size, 0))
    os.remove(path)

    class Null:
        def write(self, b):
            return len(b)
    t_gen = timed(lambda: gen.write(Null(), size, 1))
    g = np.random.Generator(np.random.PCG64(1))
    n = 512 << 20
    t_np = timed(lambda: g.bytes(n))
    # a 10000-file random fixture (the kubo small-files shape), through fixtures.ensure
    t_files = timed(lambda: fx.write_random(tmp, 64 << 10, 10000, 3))
    return {"write_GBps": size / t_write / 1e9, "generate_GBps": size / t_gen / 1e9,
            "numpy_bytes_GBps": n / t_np / 1e9, "random_10000x64K_s": t_files}


def bench_remove_prepare(tmp: Path, s5cmd: str, count: int = 1000, size: str = "1M") -> dict:
    """hyperfine times the remove step and the two ways of restoring its objects before each run,
    on a real MinIO: a server-side copy (one request per object) and refbench's batched removal
    of delete markers in a versioned bucket (refbench-s3restore)."""
    restore = str(ROOT / "tools" / "bin" / "refbench-s3restore")
    server = MinioServer(tmp, data_parent=Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp).start()
    try:
        env = {**os.environ, **server.env}
        client = s3_client(server.endpoint, server.env)
        client.create_bucket(Bucket="perf")
        client.create_bucket(Bucket="perfv")
        client.put_bucket_versioning(Bucket="perfv", VersioningConfiguration={"Status": "Enabled"})
        src = tmp / "rm-fixture"
        src.mkdir()
        fx.write_sparse(src, fx_size(size), count)
        subprocess.run([s5cmd, "cp", f"{src}/*", "s3://perf/src/"], env=env, check=True, capture_output=True)
        subprocess.run([s5cmd, "cp", "s3://perf/src/*", "s3://perfv/rm/"], env=env, check=True,
                       capture_output=True)
        copy = f"{s5cmd} cp 's3://perf/src/*' s3://perf/rm/"
        remove = f"{s5cmd} rm 's3://perf/rm/*'"
        undelete = f"{restore} s3://perfv/rm/"
        remove_v = f"{s5cmd} rm 's3://perfv/rm/*'"
        out = tmp / "rm.json"
        subprocess.run(["hyperfine", "--style", "none", "-r", "5", "-w", "1", "--export-json", str(out),
                        "-n", "copy", "-n", "remove", "-n", "restore", "-n", "remove (versioned)",
                        "--prepare", "true", "--prepare", copy, "--prepare", remove_v, "--prepare", undelete,
                        copy, remove, undelete, remove_v],
                       env=env, check=True, capture_output=True)
        res = {r["command"]: r["mean"] for r in json.loads(out.read_text())["results"]}
        return {"objects": count, "size": size, **res,
                "copy_ratio": res["copy"] / res["remove"],
                "restore_ratio": res["restore"] / res["remove (versioned)"]}
    finally:
        server.stop()


def fx_size(text: str) -> int:
    from refbench.config import parse_size
    return parse_size(text)


def bench_runs(refs: list[str], source: str, tmp: Path) -> dict:
    """A --quick comparison run twice: the second must build nothing; overhead from its timing."""
    out = {}
    for label in ("first", "rerun"):
        d = tmp / label
        d.mkdir()
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, str(ROOT / "bench.py"), "-s", *refs, "--source", source, "--quick",
                            "-o", str(d / "summary.md")], cwd=d, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(p.stderr)
        t = json.loads((d / "results.json").read_text())["timing"]
        builds = json.loads((d / "results.json").read_text())["builds"]
        out[label] = {"process_wall_s": wall, **t, "cached": [b["cached"] for b in builds]}
    return out


def main() -> None:
    paths.use(paths.Layout.from_environ(os.environ))  # a command line of its own: it reads the environment, as cli.main does
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-run", action="store_true", help="skip the two --quick comparison runs")
    ap.add_argument("--refs", nargs=2, default=["v2.2.2", "v2.3.0"])
    ap.add_argument("--source", default="module")
    ap.add_argument("--rm-count", type=int, default=1000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="refbench-perf-"))
    try:
        sp = bench_sparse(tmp)
        print(f"sparse 10000 x 1 MiB: refbench {', '.join(f'{t:.3f}' for t in sp['refbench_s'])} s "
              f"(min {min(sp['refbench_s']):.3f}); one truncate process per file "
              f"{sp['truncate_per_file_s']:.1f} s (target <= 0.7 s)", flush=True)
        rnd = bench_random(tmp)
        disk = bench_disk(tmp)
        print(f"random: generate {rnd['generate_GBps']:.2f} GB/s (target >= 1 GB/s), generate+write "
              f"{rnd['write_GBps']:.2f} GB/s vs the disk's own {disk:.2f} GB/s (dd); numpy Generator.bytes() "
              f"{rnd['numpy_bytes_GBps']:.2f} GB/s; 10000 x 64 KiB random files {rnd['random_10000x64K_s']:.2f} s",
              flush=True)
        if not args.skip_run:
            runs = bench_runs(args.refs, args.source, tmp)
            for label, r in runs.items():
                measured = r["wall_seconds"] - r["build_seconds"] - r["fixture_seconds"]
                print(f"{label} --quick run: wall {r['wall_seconds']:.1f} s (process {r['process_wall_s']:.1f} s), "
                      f"building {r['build_seconds']:.2f} s (cached: {r['cached']}), fixtures {r['fixture_seconds']:.2f} s, "
                      f"hyperfine {r['hyperfine_seconds']:.1f} s, refbench's own untimed commands "
                      f"{r['untimed_command_seconds']:.1f} s {r.get('untimed_by_kind')}, overhead (wall - builds - fixtures "
                      f"- hyperfine) {r['overhead_seconds']:.1f} s = {100 * r['overhead_share']:.1f}% "
                      f"[excluding refbench's own warm-up/setup runs: "
                      f"{100 * (r['overhead_seconds'] - r['untimed_command_seconds']) / measured:.1f}%]", flush=True)
        s5cmd = next((str(p / "s5cmd") for p in sorted((ROOT / "builds" / "s5cmd").glob("*")) if (p / "s5cmd").exists()),
                     None)
        if s5cmd:
            rm = bench_remove_prepare(tmp, s5cmd, count=args.rm_count)
            print(f"remove step, {rm['objects']} x {rm['size']}: refbench's prepare (batched delete-marker "
                  f"removal) {rm['restore']:.3f} s for a remove of {rm['remove (versioned)']:.3f} s: ratio "
                  f"{rm['restore_ratio']:.2f} (target <= 2); by server-side copy {rm['copy']:.3f} s for "
                  f"{rm['remove']:.3f} s: ratio {rm['copy_ratio']:.2f}", flush=True)
        else:
            print("remove step: no s5cmd build in builds/ yet (run `make demo` first)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
