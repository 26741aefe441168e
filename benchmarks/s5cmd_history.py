#!/usr/bin/env python3
"""s5cmd's own documented performance changes, reproduced with refbench at its defaults (not a
test: prints figures for the closing note of issue 26).

Each case is an ordinary refbench run of two commits of a local s5cmd clone (`--source git`: the
commits before v2.2.0 are not on the module proxy under /v2, and those before v2.1.0 have the
pre-v2 module path, which a git checkout builds as it is), each built with the Go its go.mod asks
for, at refbench's defaults (the default budget, each step under the profile the bundled scenarios
give it); only --only picks the steps the change speaks of, and --quick their size where the full
one would not fit a session. A pull request is its squash-merge commit against that commit's
parent. Cases run one after another, never two at once on 2 cores.

  cat-593        #593 "cat: make it concurrent" (CHANGELOG v2.2.0: "concurrent multipart download
                 support for cat"; the PR: ~25% faster on a 9.4 GB object against S3), under region
                 (1 GiB, the bundled size) and on loopback (--quick)
  sync-483       #483 "use external sort for comparison in sync" (CHANGELOG v2.1.0: RAM ~10 GB ->
                 ~1.5 GB for 1,000,000 files, 20% slower there; ~50,000 files: no significant change
                 in speed), the opt-in sync scenario at --quick (20,000 objects)
  logger-460     #460 "disable aws sdk logger if log level is not trace" (the PR: "will reduce the
                 memory/CPU usage"), many small objects on loopback, where CPU is what is timed
  chan-733       #733 "prefer chan struct{} over chan bool for signalling" (CHANGELOG v2.3.0:
                 "for efficiency"), the same steps
  cap-region     a concurrency cap: v2.2.2 with its default 256 workers against itself with
                 --numworkers 4 (named variants), under region and on loopback (issue 26's
                 wall-time target on a concurrency change)

Usage: .venv/bin/python benchmarks/s5cmd_history.py --repo CLONE [--cases cat-593,...] [--out DIR]
The clone needs the commits named below (e.g. `git fetch --depth=60 SNAPSHOT refs/tags/v2.2.0 ...`
from `fetch github:peak/s5cmd`'s snapshot).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ["PATH"] = f"{ROOT / 'tools' / 'bin'}:{os.environ['PATH']}"

from kubo_history import arguments, report, run_case  # noqa: E402  (one way to run a case and read it, for both)

SMALL = ("--quick", "--only", "small files/upload", "--only", "small files/download")
CASES = {
    "cat-593": (("bbc13fd7", "4292eccd"), ("--only", "large object, region/cat")),
    "cat-593-loopback": (("bbc13fd7", "4292eccd"), ("--quick", "--only", "large file/cat")),
    "sync-483": (("3e080613", "f0ce87d6"), ("--quick", "--only", "sync, 1M objects")),
    "logger-460": (("36d74f69", "5b644697"), SMALL),
    "chan-733": (("f79ed0bb", "8355901a"), SMALL),
    "cap-region": (("v2.2.2",), ("--quick", "--variant", "w4=v2.2.2,flags=--numworkers 4",
                                 "--only", "small files, region/upload", "--only", "small files, region/download")),
    "cap-loopback": (("v2.2.2",), ("--quick", "--variant", "w4=v2.2.2,flags=--numworkers 4",
                                   "--only", "small files/upload", "--only", "small files/download")),
}


def main() -> None:
    args, out = arguments(__doc__, CASES, "/tmp/s5cmd-history", lambda ap: ap.add_argument(
        "--repo", required=True, help="a local clone of s5cmd holding the cases' commits"))
    source = ("-t", "s5cmd", "--source", "git", "--repo", str(Path(args.repo).resolve()))
    for name in args.cases.split(","):
        report(run_case(name, out, Path(args.builds_dir), CASES, source))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
