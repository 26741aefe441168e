#!/usr/bin/env python3
"""Measure issue 17's per-metric targets on real s5cmd code (not a test: prints figures).

A throw-away local origin holds the wrapper module the tests use (tests/origins.py: s5cmd's own
command.Main, pinned from the Go module proxy), as v1.0.0, and three contenders on top of it:
  busy-20 / busy-10  spin on the CPU for 20% / 10% of their own run time after the command
  hold-64            hold 64 MiB more resident memory for the whole run
Each arm is an ordinary default run (`--quick --only "small files" --only "large file"`, default
budget, no -r) against v1.0.0; the A/A arm is v1.0.0 against itself with --measure-identical.
Arms run one after another (never two at once on 2 cores), K times each.

Prints, per arm, every metric's verdict counts over the steps, and the baseline's median peak
RSS per step in the hold-64 runs next to the A/A runs' (the baseline must not move when the
contender holds more: a per-run peak, not a running maximum).

Usage: .venv/bin/python benchmarks/metric_targets.py [-K 1] [--arms aa,busy-20,busy-10,hold-64]
       [--out /tmp/metric-targets] [--builds-dir DIR] [--options '--cpus auto']
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ["PATH"] = f"{ROOT / 'tools' / 'bin'}:{os.environ['PATH']}"

from origins import S5CMD_NEW, git, new_origin, s5cmd_files  # noqa: E402

ARMS = {"aa": ("v1.0.0", "--measure-identical"), "busy-20": ("busy-20",), "busy-10": ("busy-10",),
        "hold-64": ("hold-64",)}
SELECTION = ("--quick", "--only", "small files", "--only", "large file")


def origin(root: Path):
    scratch = root / "scratch"
    root.mkdir(parents=True, exist_ok=True)
    o = new_origin(root)
    o.commit("base", s5cmd_files(S5CMD_NEW, scratch), "wrap s5cmd v2.3.0", tags=["v1.0.0"])
    for name, kw in (("busy-20", {"busy": 20}), ("busy-10", {"busy": 10}), ("hold-64", {"hold": 64})):
        o.commit(name, s5cmd_files(S5CMD_NEW, scratch, **kw), name, parent="base", branch=name)
    git(o.work, "checkout", "-q", "master")
    return o


def run_arm(arm: str, k: int, repo: Path, builds: Path, out: Path, options: list[str]) -> dict:
    contender, *extra = ARMS[arm]
    extra += options
    res = out / f"{arm}-{k}.json"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "bench.py"), "-s", "v1.0.0", contender, *extra, *SELECTION,
                           "--repo", str(repo), "--builds-dir", str(builds), "-o", str(out / f"{arm}-{k}.md"),
                           "--json", str(res)], cwd=out, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{arm} run {k} failed ({proc.returncode}): {proc.stderr[-3000:]}")
    doc = json.loads(res.read_text())
    doc["_wall_seconds"] = wall
    return doc


def verdicts(doc: dict) -> dict[str, Counter]:
    """{metric: Counter(verdict)} over the run's steps."""
    out: dict[str, Counter] = {}
    for sc in doc["scenarios"]:
        for st in sc["steps"]:
            for c in st["comparisons"]:
                out.setdefault(c["metric"], Counter())[c["verdict"]] += 1
    return out


def baseline_rss(doc: dict) -> dict[str, float]:
    """{scenario/step: the baseline's median per-run peak RSS in MiB}."""
    base = doc["builds"][0]["label"]
    out = {}
    for sc in doc["scenarios"]:
        for st in sc["steps"]:
            mem = st["builds"].get(base, {}).get("memory_bytes") or []
            if mem:
                out[f"{sc['name']} / {st['name']}"] = statistics.median(mem) / 2 ** 20
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-K", type=int, default=1)
    ap.add_argument("--arms", default="aa,busy-20,busy-10,hold-64")
    ap.add_argument("--out", type=Path, default=Path("/tmp/metric-targets"))
    ap.add_argument("--builds-dir", type=Path)
    ap.add_argument("--options", default="", help="more run options for every arm, e.g. '--cpus auto'")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    builds = a.builds_dir or a.out / "builds"
    o = origin(a.out / "origin")
    docs: dict[str, list[dict]] = {}
    for k in range(a.K):
        for arm in a.arms.split(","):
            print(f"{arm} run {k + 1}/{a.K} ...", file=sys.stderr, flush=True)
            docs.setdefault(arm, []).append(run_arm(arm, k, o.path, builds, a.out, a.options.split()))
    report = {}
    for arm, runs in docs.items():
        total: dict[str, Counter] = {}
        for d in runs:
            for m, c in verdicts(d).items():
                total.setdefault(m, Counter()).update(c)
        busy = [d.get("environment", {}).get("competing_cpu_share") for d in runs]
        report[arm] = {"verdicts": {m: dict(c) for m, c in total.items()},
                       "wall_seconds": [round(d["_wall_seconds"], 1) for d in runs], "busy": busy,
                       "baseline_rss_mib": [baseline_rss(d) for d in runs]}
        print(f"\n{arm} ({len(runs)} run(s), wall {report[arm]['wall_seconds']} s, competing CPU {busy}):")
        for m, c in total.items():
            print(f"  {m:13s} " + ", ".join(f"{v}: {n}" for v, n in sorted(c.items())))
    if "aa" in docs and "hold-64" in docs:
        print("\nbaseline median peak RSS (MiB), A/A runs vs hold-64 runs:")
        for step in report["aa"]["baseline_rss_mib"][0]:
            aa = [r[step] for r in report["aa"]["baseline_rss_mib"] if step in r]
            hold = [r[step] for r in report["hold-64"]["baseline_rss_mib"] if step in r]
            print(f"  {step:28s} A/A {', '.join(f'{x:.1f}' for x in aa)}   hold-64 {', '.join(f'{x:.1f}' for x in hold)}")
    (a.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {a.out / 'report.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
