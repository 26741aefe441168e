#!/usr/bin/env python3
"""What the cache's trust checks cost (issue 35): figures for the README's threat model.

    benchmarks/trust_cost.py clone [--repo PATH]   verifying a cached clone in a warm `--source git` re-run
    benchmarks/trust_cost.py tree DIR              verifying one commit holding DIR (a kubo-sized tree)
    benchmarks/trust_cost.py state [--files N]     checking a sealed kubo GC state (manifest of its content)

clone: a warm re-run of a two-ref comparison whose builds are all cached does, per ref, what it
did before (open the clone, fetch, resolve) plus what the trust boundary adds: the clone's
walk for planted entries (builds.clone_faults) and builds.Builder.verified (pack-objects of the
commit's closure, index-pack --strict into a fresh repository). Both are timed on a new Builder
over a clone made by an earlier one, as a new run would. Without --repo, the origin is made
here from the s5cmd sources in the Go module cache (v2.2.2 and v2.3.0, each with `go mod vendor`
as s5cmd's repository keeps its vendor/), since GitHub is out of reach; say so with the figure.

tree: the cost of Builder.verified for one commit of a bigger tree, e.g. MinIO's source from the
module cache (about the size of kubo's repository, which is out of reach here): what verifying
adds to a cold kubo build.

state: a synthetic flatfs-like tree of N files of 4 KiB (default 200,000: a fifth of the seed's
million blocks, to spare a shared machine 4 GB of writes) in blocks/XX/ directories, hashed by
snapshot.manifest twice (the first read may come from disk, the second from the page cache);
the figure for 1 M blocks is the per-file time times a million.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from refbench import builds as bl  # noqa: E402
from refbench import paths  # noqa: E402
from refbench.backends import snapshot  # noqa: E402
from refbench.config import TargetSpec  # noqa: E402


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


def s5cmd_origin(where: Path) -> Path:
    """A local origin holding s5cmd v2.2.2 and v2.3.0 as the module cache has them, vendored."""
    modcache = Path(subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip())
    work = where / "work"
    _git(where, "init", "-q", "-b", "master", str(work))
    for version in ("v2.2.2", "v2.3.0"):
        for entry in work.iterdir():
            if entry.name != ".git":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        src = modcache / "github.com" / "peak" / "s5cmd" / f"v2@{version}"
        shutil.copytree(src, work, dirs_exist_ok=True)
        for d, _, files in os.walk(work):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)
        # -e: s5cmd's internal/tools imports a module the cache may lack; the rest is vendored
        subprocess.run(["go", "mod", "vendor", "-e"], cwd=work, check=True, capture_output=True,
                       env={**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOTOOLCHAIN": "local"})
        _git(work, "add", "-A")
        _git(work, "commit", "-q", "-m", version)
        _git(work, "tag", version)
    bare = where / "origin.git"
    _git(where, "clone", "-q", "--bare", str(work), str(bare))
    return bare


def clone_cost(repo: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="trust-cost-") as tmp:
        tmp = Path(tmp)
        origin = repo or str(s5cmd_origin(tmp))
        tags = ("v2.2.2", "v2.3.0")
        files = int(_git(Path(origin), "ls-tree", "-r", tags[-1], "--name-only").count("\n")) + 1
        target = TargetSpec(name="s5cmd", repo=origin, binary="s5cmd", build=("go", "build", "-o", "{out}", "."),
                            backend="s3")
        first = bl.Builder(target, tmp / "builds", repo_url=origin)
        for t in tags:
            first.verified(first.resolve(t).sha)  # the clone exists, as after an earlier run
        for attempt in range(3):
            b = bl.Builder(target, tmp / "builds", repo_url=origin)
            t0 = time.monotonic()
            faults = bl.clone_faults(b.clone_dir)
            t1 = time.monotonic()
            shas = [b._resolve_commit(t).sha for t in tags]  # open, fetch, resolve: what a run did before
            t2 = time.monotonic()
            for sha in shas:
                b.verified(sha)
            t3 = time.monotonic()
            print(f"clone: run {attempt + 1}: {len(tags)} refs, {files} files in the newer tree; walk for planted "
                  f"entries {t1 - t0:.3f} s ({len(faults)} found), fetch+resolve {t2 - t1:.2f} s, verify "
                  f"{t3 - t2:.2f} s: the trust checks add {t1 - t0 + t3 - t2:.2f} s")


def tree_cost(tree: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="trust-cost-tree-") as tmp:
        tmp = Path(tmp)
        work = tmp / "work"
        shutil.copytree(tree, work, symlinks=True)
        _git(tmp, "init", "-q", "-b", "master", str(work))
        _git(work, "add", "-A", "-f")
        _git(work, "commit", "-q", "-m", "tree")
        _git(work, "tag", "v1.0.0")
        files = _git(work, "ls-tree", "-r", "HEAD", "--name-only").count("\n") + 1
        size = int(_git(work, "count-objects", "-v").split("size: ")[1].split()[0])
        target = TargetSpec(name="tree", repo=str(work), binary="x", build=("go", "build", "-o", "{out}", "."),
                            backend="s3")
        b = bl.Builder(target, tmp / "builds", repo_url=str(work))
        sha = b._resolve_commit("v1.0.0").sha
        for attempt in range(3):
            b._verified.clear()
            t0 = time.monotonic()
            b.verified(sha)
            print(f"tree: {tree.name}: {files} files ({size / 1024:.0f} MiB of loose objects): verify "
                  f"{time.monotonic() - t0:.2f} s (run {attempt + 1})")


def state_cost(n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="trust-cost-state-") as tmp:
        where = Path(tmp) / "repo"
        blocks = where / "blocks"
        t0 = time.monotonic()
        block = os.urandom(4096)
        for i in range(n):
            d = blocks / f"{i % 1024:03X}"
            if i < 1024:
                d.mkdir(parents=True)
            (d / f"CIQ{i:012d}.data").write_bytes(block[: 4000] + i.to_bytes(8, "little") + block[4008:])
        (where / "config").write_text("{}")
        print(f"state: wrote {n} files of 4 KiB in {time.monotonic() - t0:.1f} s")
        for attempt in ("first", "second"):
            t0 = time.monotonic()
            snapshot.manifest(where)
            s = time.monotonic() - t0
            print(f"state: manifest, {attempt} pass: {s:.2f} s for {n} files ({n * 4096 / s / 2**20:.0f} MiB/s): "
                  f"{s / n * 1e6:.1f} us per file, about {s / n * 1e6:.0f} s for 1 M blocks (4 GB)")


def main() -> int:
    paths.use(paths.Layout.from_environ(os.environ))  # a command line of its own: it reads the environment, as cli.main does
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("clone")
    c.add_argument("--repo", help="a local clone of the s5cmd repository (default: one made from the module cache)")
    t = sub.add_parser("tree")
    t.add_argument("dir", type=Path)
    s = sub.add_parser("state")
    s.add_argument("--files", type=int, default=200_000)
    args = p.parse_args()
    if args.what == "clone":
        clone_cost(args.repo)
    elif args.what == "tree":
        tree_cost(args.dir)
    else:
        state_cost(args.files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
