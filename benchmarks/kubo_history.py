#!/usr/bin/env python3
"""kubo's own documented performance changes, reproduced with refbench at its defaults (not a
test: prints figures for the closing note of issue 25).

Each case is an ordinary run of real kubo releases from the Go module proxy, each built with the
Go its go.mod asks for, in refbench's default setup (an online daemon in the run's own network
namespace, the version's own repo defaults, the default budget); only --only picks the steps the
changelog speaks of, and --quick their size where the changelog measured small inputs. Cases run
one after another, never two at once on 2 cores.

  v035-online-add  v0.34.1 -> v0.35.0  "Fast `ipfs add` in online mode" (boxo#888, the persisted
                   provider queue written in batches): 100 MiB of 1 MiB files 6.46 s -> 0.33 s
  v033-flatfs-sync v0.32.1 -> v0.33.2  "New repositories initialized with flatfs ... will have
                   sync set to false" (#10632) and Datastore.WriteThrough (#10614): no figures
                   (v0.33.0 itself is not served by the module proxy here; v0.33.2 is its patch)
  v040-go126       v0.40.1 built with Go 1.25 (its go.mod) and with Go 1.26: v0.40.0 was this code
                   with Go 1.26 ("10-40% less GC overhead", io.ReadAll "~2x faster"), v0.40.1 went
                   back to 1.25 (#11215); v0.40.0 is not served here, so the variant is the same ref
  v040-batch-memory v0.39.0 -> v0.40.1  flatfs rewritten (go-ds-flatfs#142): "Batch operations also
                   use less memory now. Block data is written to disk immediately rather than held in
                   RAM until the batch commits" (no figures); both built with Go 1.25
  gc-scale         v0.41.0 A/A          garbage collection at the seed's scale (~1 M blocks):
                   the state's build time, the restore's share of a GC, whether it decides

Usage: .venv/bin/python benchmarks/kubo_history.py [--cases v035-online-add,...] [--out DIR]
       [--builds-dir DIR] [--restore-only IPFS_BINARY]
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
os.environ["PATH"] = f"{ROOT / 'tools' / 'bin'}:{os.environ['PATH']}"

ADDS = ("--only", "large file/add", "--only", "small files/add", "--only", "tree/add")
CASES = {
    "v035-online-add": (("v0.34.1", "v0.35.0"), ("--quick", *ADDS)),
    "v033-flatfs-sync": (("v0.32.1", "v0.33.2"), ("--quick", *ADDS)),
    # the same pair with no daemon: the datastore's own writes, without the provider queue
    "v033-no-daemon": (("v0.32.1", "v0.33.2"), ("--quick", *ADDS, "--daemon", "none")),
    "v040-go126": (("v0.40.1", "v0.40.1"), ("--quick", "--only", "large file", "--go", "mod,1.26")),
    # v0.40's flatfs rewrite (go-ds-flatfs#142): "Batch operations also use less memory now. Block
    # data is written to disk immediately rather than held in RAM until the batch commits"
    "v040-batch-memory": (("v0.39.0", "v0.40.1"), ("--quick", *ADDS)),
    "gc-scale": (("v0.41.0", "v0.41.0"), ("--only", "garbage collection", "--measure-identical")),
    # the first GC alone, its whole budget share to itself (a quiet machine's figure for the target)
    "gc-first": (("v0.41.0", "v0.41.0"), ("--only", "garbage collection/repo gc", "--measure-identical")),
}


def run_case(name: str, out: Path, builds: Path, cases: dict = CASES,
             source: tuple[str, ...] = ("-t", "kubo", "--source", "module")) -> dict:
    """One case as a user runs it: bench.py with the case's refs and options, its summary, JSON and
    log under `out`; an exit other than 0 or 1 (a verdict) is an error with its last line."""
    refs, options = cases[name]
    res = out / f"{name}.json"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "bench.py"), *source, "-s", *refs,
                           *options, "--builds-dir", str(builds), "-o", str(out / f"{name}.md"), "--json", str(res)],
                          cwd=out, capture_output=True, text=True)
    (out / f"{name}.log").write_text(proc.stderr)
    if proc.returncode not in (0, 1):
        return {"case": name, "error": (proc.stderr.strip().splitlines() or ["?"])[-1], "seconds": time.monotonic() - t0}
    return {"case": name, "seconds": round(time.monotonic() - t0), "doc": json.loads(res.read_text())}


def report(r: dict) -> None:
    print(f"\n## {r['case']} ({r['seconds']} s)")
    if "error" in r:
        print(f"  failed: {r['error']}")
        return
    doc = r["doc"]
    for b in doc["builds"]:
        how = "cached" if b.get("cached") else f"built in {b.get('build_seconds')} s"
        print(f"  build {b['label']}: {b.get('toolchain')} ({how})")
    for sc in doc["scenarios"]:
        for st in sc["steps"]:
            means = {lab: (sum(b["times"]) / len(b["times"]) if b["times"] else None) for lab, b in st["builds"].items()}
            runs = {lab: len(b["times"]) for lab, b in st["builds"].items()}
            for c in st["comparisons"]:
                lo, hi = c.get("ci_low"), c.get("ci_high")
                ci = f"[{lo:+.1%}, {hi:+.1%}]" if lo is not None and hi is not None else "n/a"
                how = st.get("network") or sc.get("daemon")  # s5cmd: the step's network; kubo: the daemon
                print(f"  {sc['name']} / {st['name']} ({how}) {c['metric']}: {c['verdict']} "
                      f"{c['rel']:+.1%} {ci}" + (f"  means {', '.join(f'{k} {v:.3f} s' for k, v in means.items())}"
                                                        f" runs {runs}" if c["metric"] == "wall" else ""))
            checks = {lab: b.get("check") for lab, b in st["builds"].items()}
            if any(checks.values()):
                print(f"    checks: {checks}")
    untimed = (doc.get("timing") or {}).get("untimed_by_kind") or {}
    if untimed:
        print(f"  untimed seconds by kind: {json.dumps(untimed)}")


def _dentries() -> int:
    """The kernel's count of allocated dentries (/proc/sys/fs/dentry-state, first field)."""
    return int(Path("/proc/sys/fs/dentry-state").read_text().split()[0])


def restore_share(binary: str, builds: Path, repeats: int = 3) -> None:
    """The restore's cost next to the GC it restores for, on the first build's cached state (the
    largest, before any GC) and on each of its steps' layers: collected and put back `repeats`
    times, each timed on its own; then the last restore's two unmounts timed apart, with the
    dentries each frees (what sets the restore's floor: the kernel frees every dentry the GC made)."""
    sys.path.insert(0, str(ROOT))
    from refbench.backends.ipfs import file_digest
    from refbench.backends.sandbox import Sandbox
    from refbench.backends.snapshot import key, restore_command

    # the binary's own states (the backend keys them by its digest), the newest first
    repos = sorted((builds / "ipfs-states" / key(file_digest(binary))).glob("*/repo"), key=lambda p: p.stat().st_mtime)
    if not repos:
        print(f"  no cached state of {binary} found")
        return
    state = repos[-1]
    stacks = [("the state", [state])] + [
        (f"layer '{json.loads((p.parent / 'state.json').read_text())['template'][:48]}...'", [p, state])
        for p in sorted((state.parent / "layers").glob("*/upper")) if (p.parent / "state.json").exists()]
    box = Sandbox.open()
    probe = Path(tempfile.mkdtemp(prefix="refbench-restore-probe-"))
    mount, scratch = probe / "repo", probe / "upper"
    env = {**os.environ, "IPFS_PATH": str(mount), "IPFS_TELEMETRY": "off"}

    def sh(cmd: str) -> float:
        t0 = time.monotonic()
        subprocess.run([*box.prefix(), "sh", "-c", cmd], check=True)
        return time.monotonic() - t0

    try:
        for what, lowers in stacks:
            restore = restore_command(mount, lowers, scratch, box.user)
            shares = []
            for i in range(repeats if what == "the state" else 1):
                t_restore = sh(restore)
                t0 = time.monotonic()
                subprocess.run([*box.prefix(), binary, "repo", "gc", "-q"], env=env, check=True,
                               stdout=subprocess.DEVNULL)
                t_gc = time.monotonic() - t0
                d0 = _dentries()
                t_ovl = sh(f"umount {mount}")
                d1 = _dentries()
                t_tmp = sh(f"umount {scratch}")
                d2 = _dentries()
                t_mount = sh(restore)  # nothing left to unmount: the mounts alone
                total = t_ovl + t_tmp + t_mount
                shares.append(total / t_gc)
                print(f"  {what}: repo gc {t_gc:.2f} s; restore after it {total:.3f} s = {total / t_gc:.1%} "
                      f"(overlay umount {t_ovl:.3f} s, {d0 - d1:,} dentries freed; tmpfs umount {t_tmp:.3f} s, "
                      f"{d1 - d2:,} freed; mounts {t_mount:.3f} s); the restore before it {t_restore:.3f} s")
                sys.stdout.flush()
    finally:
        box.close()  # the mounts were in its namespace: they went with it, the mountpoints stay
        shutil.rmtree(probe, ignore_errors=True)


def arguments(doc: str, cases: dict, out: str, extra=lambda ap: None) -> tuple[argparse.Namespace, Path]:
    """A history script's command line: --cases, --out (made), --builds-dir, and `extra`'s own."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(cases))
    ap.add_argument("--out", default=out)
    ap.add_argument("--builds-dir", default=str(Path.home() / ".cache" / "refbench" / "builds"))
    extra(ap)
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    return args, Path(args.out)


def main() -> None:
    args, out = arguments(__doc__, CASES, "/tmp/kubo-history", lambda ap: ap.add_argument(
        "--restore-only", metavar="IPFS", help="no case: the restore's share on the newest cached state, "
        "collected by this kubo binary (the one the state was built by)"))
    if args.restore_only:
        restore_share(args.restore_only, Path(args.builds_dir))
        return
    for name in args.cases.split(","):
        r = run_case(name, out, Path(args.builds_dir))
        report(r)
        if name.startswith("gc-") and "doc" in r:
            restore_share(r["doc"]["builds"][0]["binary"], Path(args.builds_dir))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
