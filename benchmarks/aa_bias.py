#!/usr/bin/env python3
"""A/A bias: do byte-identical s5cmd builds measure identical? (Not a test: prints figures.)

Issue 34's check, as a maintainer would run it: two refs of a test origin that build to the same
binary (v1.0.0 and the branch docs-only, which adds a README), compared K times with
`--measure-identical` at refbench's defaults (`--quick`, the seed's three scenarios, a default
budget). Per step and metric: the mean shift of the second build against the first over the K
runs, with its 95% interval (refbench.calibrate.bias_of, so the same rule as `calibrate --aa`),
and whether it is biased; per run: whether any step had a false verdict in any metric, with the
share's exact binomial interval. `--slowdown 10` adds calibrate's +10% arm on the same steps (-K
repetitions): the detection rate the fix must not lose.

About 5-7 min a run on 2 quiet cores. `--bench` names another checkout's bench.py (to measure the
code before a change the same way); `--repo` an origin made before (tests/origins.py builds one
through the Go module proxy otherwise).

Usage: .venv/bin/python benchmarks/aa_bias.py [-K 20] [--only SCENARIO ...] [--json aa.json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from refbench import calibrate as cal, results as rs  # noqa: E402
from folios import aa_binaries, cache_evicting_load, exec_filled, rewritten  # noqa: E402

SEED_SCENARIOS = ("small files", "large file", "very large file")


def origin(repo: str | None, scratch: Path) -> str:
    if repo:
        return repo
    from origins import make_s5cmd_origin
    return str(make_s5cmd_origin(scratch / "s5origin").path)


def aa_run(bench: str, repo: str, builds: Path, only: list[str], out: Path, extra: list[str]) -> rs.Results:
    argv = [sys.executable, bench, "-s", "v1.0.0", "docs-only", "--repo", repo, "--builds-dir", str(builds),
            "--quick", "--measure-identical", "-o", str(out / "summary.md"), "--json", str(out / "results.json"),
            *[a for s in only for a in ("--only", s)], *extra]
    proc = subprocess.run(argv, cwd=out, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"A/A run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return rs.load(out / "results.json")


def summarise(runs: list[rs.Results]) -> dict:
    by_key: dict[tuple[str, str, str], list] = defaultdict(list)
    any_false = 0
    for r in runs:
        moved = False
        for sc, st in r.steps():
            for c in (*st.comparisons, *st.metric_comparisons):
                by_key[(sc.name, st.name, c.metric)].append(c)
                moved |= c.verdict.moved
        any_false += moved
    checked = len(by_key)
    rows = []
    for (scenario, step, metric), comps in by_key.items():
        b = cal.bias_of(metric, comps, checked)
        if b is not None:
            rows.append({"scenario": scenario, "step": step, **b.to_json(),
                         "shifts": [round(c.rel, 5) for c in comps]})
    lo, hi = cal.clopper_pearson(any_false, len(runs))
    return {"runs": len(runs), "runs_with_false_verdict": any_false, "false_verdict_interval": [lo, hi],
            "steps": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-K", type=int, default=20, help="A/A runs (default 20)")
    p.add_argument("--only", action="append", default=None, help="scenarios (default: the seed's three)")
    p.add_argument("--bench", default=str(ROOT / "bench.py"), help="the bench.py to measure with")
    p.add_argument("--repo", help="an s5cmd test origin (default: made here through the Go module proxy)")
    p.add_argument("--builds-dir", help="a build cache to keep between invocations")
    p.add_argument("--slowdown", type=int, default=0, help="also run calibrate's +P%% arm, -K repetitions")
    p.add_argument("--extra", default="", help="more options for every run, e.g. '--no-profile'")
    p.add_argument("--just-built", action="store_true",
                   help="before every run, the baseline run once from a cold cache and the contender's pages "
                        "written anew (dirty), as a cached baseline and a contender just built are (issue 34)")
    p.add_argument("--load", type=int, default=0, help="N cache-evicting processes beside every run")
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args()
    only = a.only or list(SEED_SCENARIOS)
    scratch = Path(tempfile.mkdtemp(prefix="aa-bias-"))
    repo = origin(a.repo, scratch)
    builds = Path(a.builds_dir) if a.builds_dir else scratch / "builds"
    runs, t0 = [], time.monotonic()
    for k in range(a.K):
        out = scratch / f"run-{k}"
        out.mkdir()
        if a.just_built:
            base, cont = aa_binaries(a.bench, repo, builds, out)
            exec_filled(base, "version")
            rewritten(cont)
        load = cache_evicting_load(a.load, 3600)
        try:
            runs.append(aa_run(a.bench, repo, builds, only, out, a.extra.split()))
        finally:
            for proc in load:
                proc.kill()
        print(f"run {k + 1}/{a.K} done at {time.monotonic() - t0:.0f} s", file=sys.stderr)
    fig = summarise(runs)
    if a.slowdown:
        cal_json = scratch / "cal.json"
        subprocess.run([sys.executable, a.bench, "calibrate", "-s", "v1.0.0", "--repo", repo, "--builds-dir",
                        str(builds), "--quick", "-K", str(a.K), "--slowdowns", str(a.slowdown),
                        *[x for s in only for x in ("--only", s)], *a.extra.split(), "-o", str(scratch / "cal.md"),
                        "--json", str(cal_json)], cwd=scratch, check=True)
        c = json.loads(cal_json.read_text())
        fig["slowdown"] = {"percent": a.slowdown, "power_overall": c["power_overall"][str(a.slowdown)],
                           "per_step": {f"{s['scenario']} / {s['step']}": s["power"][str(a.slowdown)]
                                        for s in c["steps"]}}
    fig["seconds"] = round(time.monotonic() - t0)
    print(f"\n{fig['runs']} A/A runs: any false verdict in {fig['runs_with_false_verdict']} "
          f"(95% interval {fig['false_verdict_interval'][0]:.1%}-{fig['false_verdict_interval'][1]:.1%})")
    print(f"{'step':32} {'metric':8} {'mean':>7} {'95% interval':>18} {'false':>6} biased")
    for row in fig["steps"]:
        interval = "n/a" if row["low"] is None else f"[{row['low']:+.2%}, {row['high']:+.2%}]"
        print(f"{row['scenario'] + ' / ' + row['step']:32} {row['metric']:8} {row['mean_shift']:+7.2%} "
              f"{interval:>18} {row['false_verdicts']:>3}/{row['reps']:<2} {'BIASED' if row['biased'] else ''}")
    if "slowdown" in fig:
        print(f"+{a.slowdown}% called slower: {fig['slowdown']['power_overall']:.0%} of step repetitions")
    if a.json:
        Path(a.json).write_text(json.dumps(fig, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
