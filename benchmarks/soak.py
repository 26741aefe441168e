#!/usr/bin/env python3
"""Soak: do memory and disk stay flat over hundreds of runs per step? (Not a test: prints figures.)

Runs ./bench.py as a user would, on the real scenarios' steps:
  s5cmd: "large file" upload / download / remove and "small files" upload / download / remove,
         300 runs per build (embedded MinIO);
  kubo:  "large file/add", "small files/add" and "remove" (pin rm + repo gc), 200 runs per build;
and, every 5 s from outside, samples the server's RSS and open file descriptors, the size of its
data dir (the embedded MinIO's, or the IPFS repos), available memory and free disk where the run
writes. Each sample is tagged with the step and round the run was in (from its progress lines),
so growth is reported per 100 runs of each step, with the peak data dir against the target:
no unbounded growth, and peak data dir <= 2 x (fixture bytes + the step's own objects).

About 30 minutes by default on 2 cores; --minutes N scales the runs down (e.g. --minutes 3 for a
smoke run), --runs-s5cmd / --runs-kubo set them exactly. Builds come from the Go module proxy
(--source module, real s5cmd / kubo versions) unless --repo names an origin.

Usage: .venv/bin/python benchmarks/soak.py [--minutes 30] [--only s5cmd|kubo] [--json soak.json]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PATH"] = f"{ROOT / 'tools' / 'bin'}:{os.environ['PATH']}"

from refbench.backends import tree_bytes  # noqa: E402
from refbench.config import human_bytes, load_config  # noqa: E402
from refbench.stopping import split_runs  # noqa: E402
from refbench.watchdog import meminfo, open_fds, proc_status  # noqa: E402

PLANS = {
    # target: (refs, --only, runs per build at 30 min, scenario overrides of the --quick sizes)
    "s5cmd": (["v2.2.2", "v2.3.0"], ["large file", "small files"], 300),
    "kubo": (["v0.40.1", "v0.41.0"], ["large file/add", "small files/add", "remove"], 200),
}
BASE_BYTES = 16 << 20  # an empty MinIO data dir or IPFS repo: format, config, datastore
PROGRESS = re.compile(r"\] (?P<scenario>.+?) / (?P<step>.+?): round (?P<round>\d+)")
SCENARIO_STATUS = re.compile(r"\] (?P<scenario>[^/]+?): (fixture|setup|teardown)")  # between steps


class Sampler(threading.Thread):
    """Every `interval` s: what the run's server and data hold, tagged with the current step."""

    def __init__(self, bench: subprocess.Popen, local: Path, target: str, interval: float):
        super().__init__(daemon=True)
        self.bench, self.local, self.target, self.interval = bench, local, target, interval
        self.where: tuple[str, str, int] | None = None
        self.samples: list[dict] = []
        self.stop = threading.Event()

    def data_dir(self) -> Path | None:
        if self.target == "kubo":
            dirs = list(self.local.glob("refbench-*/ipfs"))
            return dirs[0] if dirs else None
        for parent in (Path("/dev/shm"), *self.local.glob("refbench-*")):
            for d in parent.glob("refbench-minio-*"):
                try:
                    if (d / "owner").read_text().strip() == str(self.bench.pid):
                        return d
                except OSError:
                    continue
        return None

    def server_pids(self, data_dir: Path | None) -> list[int]:
        """The embedded MinIO (its command line names the data dir) or the ipfs processes."""
        pids = []
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if self.target == "kubo":
                try:
                    if data_dir is not None and "ipfs" in cmd.split(" ")[0] and \
                            str(data_dir) in (p / "environ").read_bytes().decode(errors="replace"):
                        pids.append(int(p.name))
                except OSError:
                    continue
            elif data_dir is not None and "minio" in cmd and str(data_dir) in cmd:
                pids.append(int(p.name))
        return pids

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            d = self.data_dir()
            pids = []
            try:
                pids = self.server_pids(d)
            except OSError:
                pass
            _, avail = meminfo()
            self.samples.append({
                "t": time.time(), "where": self.where, "data_bytes": tree_bytes(d) if d else None,
                "server_rss": sum(proc_status(p, "VmRSS") for p in pids) or None,
                "server_fds": sum(open_fds(p) for p in pids) or None,
                "mem_available": avail, "disk_free": shutil.disk_usage(self.local).free,
            })


def soak(target: str, args, out_dir: Path) -> dict:
    refs, only, runs30 = PLANS[target]
    runs = getattr(args, f"runs_{target}") or max(10, round(runs30 * args.minutes / 30))
    rounds = min(runs, max(3, runs // 50))  # rounds of ~50 runs (at least 3): growth is read across them
    local = out_dir / f"{target}-local"
    local.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(ROOT / "bench.py"), "-t", target, "-s", *(args.refs or refs), "--quick",
           "-r", str(runs), "-w", "1", "--rounds", str(rounds), "--builds-dir", args.builds_dir,
           "-l", str(local), "-o", str(out_dir / f"{target}-summary.md"), "--json", str(out_dir / f"{target}.json")]
    cmd += ["--repo", args.repo] if args.repo else ["--source", "module"]
    for o in only:
        cmd += ["--only", o]
    print(f"soak {target}: {runs} runs per build in {rounds} rounds: {' '.join(cmd[1:])}", flush=True)
    t0 = time.monotonic()
    bench = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, bufsize=1)
    sampler = Sampler(bench, local, target, args.sample)
    sampler.start()
    log_tail = []
    for line in bench.stderr:
        log_tail = (log_tail + [line.rstrip()])[-20:]
        m = PROGRESS.search(line)
        if m:
            sampler.where = (m["scenario"], m["step"], int(m["round"]))
        elif SCENARIO_STATUS.search(line):
            sampler.where = (SCENARIO_STATUS.search(line)["scenario"], "(scenario setup)", 1)
        if args.verbose:
            print("   ", line.rstrip(), flush=True)
    code = bench.wait()
    sampler.stop.set()
    sampler.join()
    wall = time.monotonic() - t0
    if code != 0:
        print(f"soak {target}: bench.py exited {code}:\n  " + "\n  ".join(log_tail), file=sys.stderr)
    results = json.loads((out_dir / f"{target}.json").read_text()) if (out_dir / f"{target}.json").exists() else {}
    return {"target": target, "exit": code, "wall_seconds": round(wall, 1), "runs": runs, "rounds": rounds,
            "steps": analyse(sampler.samples, results, runs, rounds, len(args.refs or refs)),
            "resources": results.get("resources"), "samples": sampler.samples}


def analyse(samples: list[dict], results: dict, runs: int, rounds: int, n_builds: int) -> list[dict]:
    """Per step: peak and growth per 100 runs of each figure, and the data-dir target."""
    per_round = split_runs(runs, rounds)
    cfg = {}
    try:
        cfg_path = ROOT / "scenarios.toml"
        for s in load_config(cfg_path).scenarios:
            cfg[(s.target, s.name)] = s
    except Exception:
        pass
    fixtures = {sc["name"]: sc["fixture"]["bytes"] for sc in results.get("scenarios", [])}
    target = results.get("target", {}).get("name")
    out = []
    steps = []
    for s in samples:
        if s["where"] and (not steps or steps[-1] != s["where"][:2]):
            steps.append(s["where"][:2])
    for sc, st in dict.fromkeys(steps):
        mine = [s for s in samples if s["where"] and s["where"][:2] == (sc, st)]
        row = {"scenario": sc, "step": st, "samples": len(mine)}
        # runs done (per build) when the sample was taken: the rounds before the current one
        xs = [sum(per_round[:s["where"][2] - 1]) for s in mine]
        for key in ("data_bytes", "server_rss", "server_fds", "mem_available", "disk_free"):
            pts = [(x, s[key]) for x, s in zip(xs, mine) if s[key] is not None]
            if not pts:
                continue
            vals = [v for _, v in pts]
            row[key] = {"first": vals[0], "peak": max(vals), "min": min(vals), "last": vals[-1],
                        "per_100_runs": slope(pts) * 100 if len({x for x, _ in pts}) > 1 else None}
        scen = cfg.get((target, sc))
        step = next((x for x in scen.steps if x.name == st), None) if scen else None
        fx_bytes = fixtures.get(sc)
        if fx_bytes is not None and step is not None:
            # 2 x (the fixture, as stored by the scenario's setup or the step itself, and the step's
            # own objects), per server or repo, plus what an empty server or repo holds
            copies = n_builds if target == "kubo" else 1
            stored = (max(scen.stored_copies, 1) + step.stored_copies) * fx_bytes
            row["target_bytes"] = copies * (2 * stored + BASE_BYTES)
            if "data_bytes" in row:
                row["within_target"] = row["data_bytes"]["peak"] <= row["target_bytes"]
        out.append(row)
    return out


def slope(pts: list[tuple[float, float]]) -> float:
    """Least-squares slope of value over runs (bytes per run)."""
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else 0.0


def print_report(res: dict) -> None:
    print(f"\n== {res['target']}: {res['runs']} runs per build, exit {res['exit']}, wall {res['wall_seconds']:.0f} s")
    hdr = f"{'step':34} {'data dir peak':>14} {'/100 runs':>11} {'target':>10} {'RSS peak':>10} {'/100':>9} " \
          f"{'fds':>5} {'mem avail min':>14} {'/100':>9}"
    print(hdr)
    for r in res["steps"]:
        d, rss, fds, mem = (r.get(k) or {} for k in ("data_bytes", "server_rss", "server_fds", "mem_available"))

        def hb(v, signed=False):
            if v is None:
                return "-"
            return ("+" if signed and v >= 0 else "") + human_bytes(v)
        ok = "" if "within_target" not in r else (" ok" if r["within_target"] else " OVER")
        print(f"{(r['scenario'] + ' / ' + r['step'])[:34]:34} {hb(d.get('peak')):>14} "
              f"{hb(d.get('per_100_runs'), True):>11} {hb(r.get('target_bytes')) + ok:>10} {hb(rss.get('peak')):>10} "
              f"{hb(rss.get('per_100_runs'), True):>9} {fds.get('peak') or '-':>5} {hb(mem.get('min')):>14} "
              f"{hb(mem.get('per_100_runs'), True):>9}")
    if res.get("resources"):
        r = res["resources"]
        dd = r.get("data_dir") or {}
        parts = [f"data dir peak {human_bytes(dd.get('peak') or 0)}"]
        if dd.get("trash_purged"):
            parts.append(f"MinIO trash purged {human_bytes(dd['trash_purged'])}")
        parts.append(f"available memory min {human_bytes(r['memory']['available_min'] or 0)}")
        if (r.get("server") or {}).get("rss_peak"):
            parts.append(f"server RSS peak {human_bytes(r['server']['rss_peak'])}")
        print("refbench's own record (results.json resources): " + ", ".join(parts))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=30, help="rough total length; scales the runs (30 = as specified)")
    p.add_argument("--only", choices=tuple(PLANS), action="append", help="soak only this target (repeatable)")
    p.add_argument("--runs-s5cmd", type=int, help="runs per build for the s5cmd steps (default 300 at 30 min)")
    p.add_argument("--runs-kubo", type=int, help="runs per build for the kubo steps (default 200 at 30 min)")
    p.add_argument("--refs", nargs="+", help="refs to build (default: real releases from the module proxy)")
    p.add_argument("--repo", help="an origin to build from (default: --source module)")
    p.add_argument("--builds-dir", default=str(ROOT / "builds"))
    p.add_argument("--sample", type=float, default=5.0, help="seconds between samples")
    p.add_argument("--json", help="write every sample and the analysis here")
    p.add_argument("-v", "--verbose", action="store_true", help="show bench.py's progress lines")
    args = p.parse_args()
    out_dir = Path(tempfile.mkdtemp(prefix="refbench-soak-"))
    all_res = []
    try:
        for target in args.only or list(PLANS):
            res = soak(target, args, out_dir)
            print_report(res)
            all_res.append(res)
    finally:
        if args.json:
            Path(args.json).write_text(json.dumps(all_res, indent=1))
            print(f"\nwrote {args.json}")
        shutil.rmtree(out_dir, ignore_errors=True)
    over = [r for res in all_res for r in res["steps"] if r.get("within_target") is False]
    if over:
        print(f"\n{len(over)} steps over the data-dir target: " +
              ", ".join(f"{r['scenario']} / {r['step']}" for r in over))
    return 1 if over or any(res["exit"] != 0 for res in all_res) else 0


if __name__ == "__main__":
    sys.exit(main())
