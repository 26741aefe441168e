#!/usr/bin/env python3
"""The daemon's own metrics (issue 36) on real kubo builds: not a test, prints the figures for the
closing note. Cases run one after another, never two at once on 2 cores.

  hold64  kubo v0.40.1 against the same kubo whose `ipfs add` holds 64 MiB more of the Go heap while
          it runs (tests/origins.make_kubo_hold_origin), in a default --quick run (online daemon).
          Target: `slower` on daemon memory for the add steps, while the CLI's memory (the thin
          client hyperfine times) is `no significant change`.
  aa      kubo v0.40.1 against itself (--measure-identical), default --quick, online. Target: no
          daemon metric gives a verdict, and each is `no significant change` on >= 80% of steps.

kubo's own documented daemon changes are cases of benchmarks/kubo_history.py (v040-go126,
v035-online-add, v040-batch-memory); their daemon figures print there.

Usage: .venv/bin/python benchmarks/kubo_daemon.py [--cases hold64,aa] [--out DIR] [--builds-dir DIR]
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

from kubo_history import arguments, run_case  # noqa: E402

CASES = {
    "hold64": (("v1.0.0", "v1.1.0"), ("--quick",)),
    "aa": (("v1.0.0", "v1.0.0"), ("--quick", "--measure-identical")),
}
DAEMON = ("daemon-cpu", "daemon-memory", "daemon-writes", "daemon-alloc")


def origin(out: Path) -> Path:
    """The cases' local origin, made once per output directory (v1.0.0 is built once for both)."""
    from origins import make_kubo_hold_origin

    root = out / "origin-kubo-hold"
    if not (root / "origin.git").is_dir():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        make_kubo_hold_origin(root)
    return root / "origin.git"


def verdicts(doc: dict) -> list[tuple[str, str, str, float]]:
    """(step, metric, verdict, relative change) of every comparison of a results document."""
    return [(f"{sc['name']}/{st['name']}", c["metric"], c["verdict"], c["rel"])
            for sc in doc["scenarios"] for st in sc["steps"] for c in st["comparisons"]]


def report(name: str, r: dict) -> None:
    print(f"\n## {name} ({r['seconds']} s)")
    if "error" in r:
        print(f"  failed: {r['error']}")
        return
    rows = verdicts(r["doc"])
    for step, metric, verdict, rel in rows:
        if metric in ("wall", "memory", *DAEMON):
            print(f"  {step:40s} {metric:14s} {verdict:26s} {rel:+.1%}")
    daemon = [(s, m, v) for s, m, v, _ in rows if m in DAEMON]
    judged = [v for _, _, v in daemon if v != "not judged"]
    unchanged = sum(v == "no significant change" for v in judged)
    print(f"  daemon comparisons: {len(daemon)}; judged {len(judged)}; no significant change {unchanged}"
          f" ({unchanged / max(len(judged), 1):.0%}); others: "
          f"{sorted({(s, m, v) for s, m, v in daemon if v not in ('no significant change',)})}")


def main() -> None:
    args, out = arguments(__doc__, CASES, "/tmp/kubo-daemon")
    repo = origin(out)
    for name in args.cases.split(","):
        source = ("-t", "kubo", "--repo", str(repo))
        report(name, run_case(name, out, Path(args.builds_dir), CASES, source))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
