#!/usr/bin/env python3
"""A `/bench` job as a hosted runner plays it (issue 53 part 3): from the job's start to the PR
comment posted, phase by phase, for s5cmd and for kubo.

Each target gets a throw-away local origin of the test suite's shape (tests/origins.py: wrapper
modules pinning the real s5cmd or kubo from the Go module proxy), a PR on it, and three jobs of
.github/workflows/bench-command.yml run through action.yml's own steps (tests/action_harness.py)
with a HOME of their own and empty caches, as a hosted runner starts:

- check: installs refbench (a venv, the hash-pinned requirements), judges the /bench comment
  against the local fake GitHub API (tests/test_github.FakeGitHub);
- bench: installs refbench, restores the Action's tools cache (what a trusted job on the default
  branch saved: `~/.cache/refbench` without builds/, made beforehand by a producer job's
  `refbench setup` in a HOME of its own, untimed), restores no builds (a /bench job holds no key,
  so a restored build is not its to trust: docs/threat-model.md), sets up, builds base and head
  with their own Go (refbench's own Go caches, which no cache step restores), measures, writes the
  summary;
- comment: installs refbench, takes the bench job's artifact, posts the comment.

What GitHub adds is not here: queueing, the VM's boot, actions/checkout, setup-python and
setup-go (the machine's Python and Go stand in), the artifact's upload and download (a copy), and
the cache's download (a local tar; its extraction is timed). The machine's PIP_* and CA settings
stay (this sandbox reaches PyPI through a TLS proxy; a hosted runner needs none).

    .venv/bin/python benchmarks/bot_answer.py [--only s5cmd|kubo] [--keep]

Its last two lines are `s5cmd: N s` and `kubo: N s` (job start to comment posted).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]

from action_harness import Runner, StepRun, setup_python  # noqa: E402
from first_answer import done_with, fresh_env, remove_tree  # noqa: E402
from origins import KUBO_OLD, git, kubo_files, make_s5cmd_origin, new_origin  # noqa: E402
from test_github import FakeGitHub  # noqa: E402

KUBO_BASE = "v0.39.0"  # the release before the suite's (two releases: two full compiles, as a PR's pair)
EVENT = ROOT / "tests" / "data" / "events" / "issue_comment.json"
BODY = "/bench --only 'small files' -r 20"  # the recorded event's comment, replaced by each target's


@dataclass(frozen=True)
class Target:
    name: str
    base: str  # commit of the PR's base
    head: str  # commit of the PR's head
    checkout: Path  # actions/checkout's clone of the default branch, with refbench.toml in benchmark/
    comment: str  # the /bench comment


def s5cmd_target(scratch: Path, extra: str = "") -> Target:
    """v1.0.0 (s5cmd v2.2.2) against refs/pull/7/head (s5cmd v2.3.0, 30% slower): the suite's s5cmd
    origin, whose PR is of a real s5cmd PR's shape (one module, its own go.mod and go.sum)."""
    from test_inside_checkout import checkout_of
    for d in ("s5cmd-origin", "s5cmd-workspace"):
        (scratch / d).mkdir()
    origin = make_s5cmd_origin(scratch / "s5cmd-origin")
    bench = checkout_of(origin, scratch / "s5cmd-workspace" / "s5cmd")
    return Target("s5cmd", origin.shas["old"], origin.shas["slow"], bench,
                  f"/bench --head {origin.shas['slow']} --quick{extra}")


def kubo_target(scratch: Path, extra: str = "") -> Target:
    """kubo KUBO_BASE against KUBO_OLD (v0.40.1), each a wrapper of the release from the module
    proxy: a PR that moves kubo one release on."""
    from test_inside_checkout import checkout_of
    root = scratch / "kubo-origin"
    for d in (root, scratch / "kubo-workspace"):
        d.mkdir()
    o = new_origin(root)
    o.commit("base", own_go(kubo_files(KUBO_BASE, root / "scratch")), f"wrap kubo {KUBO_BASE}", tags=["v1.0.0"])
    o.commit("head", own_go(kubo_files(KUBO_OLD, root / "scratch")), f"PR 7: kubo {KUBO_OLD}", parent="base",
             pull=7)
    git(o.work, "checkout", "-q", "master")
    bench = checkout_of(o, scratch / "kubo-workspace" / "kubo")
    return Target("kubo", o.shas["base"], o.shas["head"], bench, f"/bench --head {o.shas['head']} --quick{extra}")


def own_go(files: dict[str, str]) -> dict[str, str]:
    """The wrapper without the suite's `toolchain` line (origins.toolchain_line, which keeps the
    tests on this machine's Go): each release then builds with the Go its go line asks for, as
    kubo's own go.mod has it (v0.39.0's cockroachdb/swiss does not compile with Go 1.26)."""
    gomod = "".join(ln for ln in files["go.mod"].splitlines(keepends=True) if not ln.startswith("toolchain "))
    return {**files, "go.mod": gomod}


def producer_tools(scratch: Path, log) -> tuple[Path, float]:
    """What a trusted job on the default branch saved as the tools cache: a venv as the Action
    installs it, `refbench setup` in a HOME of its own, `~/.cache/refbench` without builds/ in a
    tar. Untimed for the answer (another job, earlier); its seconds are printed."""
    t0 = time.monotonic()
    home, venv = runner_home(scratch), scratch / "producer-venv"
    env = fresh_env(home)
    py = str(Path(sys._base_executable).resolve())
    for argv in ([py, "-m", "venv", str(venv)],
                 [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--require-hashes", "-r",
                  str(ROOT / "requirements/pip.txt")],
                 [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--require-hashes", "-r",
                  str(ROOT / "requirements/action.txt")],
                 [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(ROOT)],
                 [str(venv / "bin/refbench"), "setup"]):
        subprocess.run(argv, check=True, env=env, cwd=scratch, stdout=log, stderr=subprocess.STDOUT)
    tar = scratch / "tools-cache.tar"
    with tarfile.open(tar, "w") as t:
        cache = home / ".cache" / "refbench"
        for entry in cache.iterdir():
            if entry.name != "builds":
                t.add(entry, arcname=str(entry.relative_to(home)))
    seconds = time.monotonic() - t0
    runner_home(scratch)  # emptied: the bench job starts on a new machine with this HOME
    return tar, seconds


def runner_home(scratch: Path) -> Path:
    """The HOME every runner has (/home/runner on GitHub's): one path for the producer and each
    bench job, empty at each start. The saved cache holds absolute links into it (bin/ -> the
    tools), which a restore writes back as they are (actions/cache runs tar -P), so they resolve
    only where the HOME is the same."""
    home = scratch / "runner-home"
    remove_tree(home)
    home.mkdir()
    return home


def restore(tar: Path, home: Path):
    """actions/cache/restore of the tools key, here a local tar's extraction into the job's HOME."""
    def uses(action: str, given: dict) -> str | None:
        if not action.startswith("actions/cache/restore@"):
            return None
        paths = given.get("path", "").split()
        if "!~/.cache/refbench/builds" in paths and tar.exists():  # the tools' entry (not the builds')
            with tarfile.open(tar) as t:
                t.extractall(home, filter="fully_trusted")  # as tar -P: absolute links kept
            return "success (restored the tools cache)"
        return "skipped (no entry: no trusted job built these commits, and a /bench job trusts no build it did not make)"
    return uses


def job(scratch: Path, name: str, t: Target, gh: FakeGitHub, home: Path, tar: Path | None = None) -> Runner:
    event = json.loads(EVENT.read_text().replace(BODY, t.comment))
    env = fresh_env(home)
    env.pop("GITHUB_TOKEN", None)
    return Runner(scratch / f"{t.name}-{name}-job", "issue_comment", event, t.checkout.parent, api_url=gh.url,
                  token="ghs_bot-answer", path_front=[setup_python(scratch / f"{t.name}-{name}-job")],
                  base_env=env, uses=restore(tar, home) if tar else None, step_timeout=3 * 3600)


def show(steps: list[StepRun], log) -> list[tuple[str, float]]:
    rows = []
    for s in steps:
        if s.outcome.startswith("skipped (if:"):
            continue
        rows.append((s.name, s.seconds))
        print(f"  {s.seconds:7.1f} s  {s.name}: {s.outcome}", flush=True)
        log.write(f"==== {s.name}: {s.outcome}\n{s.stdout}\n{s.stderr}\n")
        log.flush()
    return rows


def failed(steps: list[StepRun]) -> str | None:
    bad = [s for s in steps if s.outcome == "failure"]
    return f"{bad[0].name} failed: {(bad[0].stderr or bad[0].stdout)[-1500:]}" if bad else None


def answer(t: Target, scratch: Path, tar: Path, log) -> float:
    """The three jobs, one after another as the workflow's `needs` orders them; seconds from the
    check job's start to the comment's POST."""
    gh = FakeGitHub()
    try:
        gh.pulls = [{"number": 7, "head": {"sha": t.head, "ref": "pr-7", "repo": {"full_name": "contributor/tool"}},
                     "base": {"sha": t.base}}]
        t0 = time.monotonic()
        print(f"{t.name}: check job", flush=True)
        check = job(scratch, "check", t, gh, scratch / f"{t.name}-check-home")
        steps = check.run({"mode": "check", "bench-command": t.comment, "author-association": "MEMBER"})
        show(steps, log)
        if why := failed(steps):
            raise SystemExit(f"{t.name}: {why}")
        accepted = check.steps["check"]["outputs"]
        print(f"{t.name}: bench job", flush=True)
        home = runner_home(scratch)
        bench = job(scratch, "bench", t, gh, home, tar)
        steps = bench.run({"bench-command": t.comment, "author-association": "MEMBER", "quick": "false",
                           "working-directory": "benchmark", "base-sha": accepted["base"],
                           "head-sha": accepted["head"]})
        show(steps, log)
        if why := failed(steps):
            raise SystemExit(f"{t.name}: {why}")
        results = Path(bench.steps["run"]["outputs"]["results"])
        timing = json.loads(results.read_text()).get("timing") or {}
        for what, key in (("refs' builds", "build_seconds"), ("fixtures", "fixture_seconds"),
                          ("hyperfine", "hyperfine_seconds"), ("the run, all", "wall_seconds")):
            print(f"    {timing.get(key) or 0:7.1f} s  {what} (results.json)", flush=True)
        print(f"{t.name}: comment job", flush=True)
        comment = job(scratch, "comment", t, gh, scratch / f"{t.name}-comment-home")
        artifact = comment.temp / "refbench-results"  # what download-artifact puts there
        shutil.copytree(bench.temp / "refbench", artifact)
        steps = comment.run({"mode": "comment", "head-sha": accepted["head"]})
        show(steps, log)
        if why := failed(steps):
            raise SystemExit(f"{t.name}: {why}")
        posts = [r for r in gh.requests if r["method"] == "POST" and r["path"].endswith("/issues/7/comments")]
        assert posts, "no comment was posted"
        return time.monotonic() - t0
    finally:
        gh.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("s5cmd", "kubo"), action="append", help="one target (default both)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--bench-args", default="", help="more /bench options (its allow-list), e.g. \"--budget 4m\"")
    ap.add_argument("--reuse", type=Path, help="a kept scratch directory whose producer's tools cache to restore again")
    args = ap.parse_args()
    scratch = args.reuse or Path(tempfile.mkdtemp(prefix="refbench-bot-answer-"))
    if args.reuse:  # everything but the producer's venv and tools cache made anew
        for old in scratch.iterdir():
            if old.name not in ("producer-venv", "tools-cache.tar"):
                remove_tree(old) if old.is_dir() else old.unlink()
    log = (scratch / "log.txt").open("w")
    try:
        print(f"log: {scratch / 'log.txt'}", flush=True)
        extra = f" {args.bench_args}" if args.bench_args else ""
        targets = [maker(scratch, extra) for name, maker in (("s5cmd", s5cmd_target), ("kubo", kubo_target))
                   if not args.only or name in args.only]
        tar = scratch / "tools-cache.tar"
        tar, made = (tar, 0.0) if args.reuse and tar.is_file() else producer_tools(scratch, log)
        print(f"producer job (earlier, untimed): refbench setup in a new HOME, tools cache saved: {made:.0f} s "
              f"({tar.stat().st_size >> 20} MiB)", flush=True)
        answers = [(t.name, answer(t, scratch, tar, log)) for t in targets]
        for name, seconds in answers:
            print(f"{name}: {seconds:.0f} s")
        return 0
    finally:
        log.close()
        done_with(scratch, args.keep)


if __name__ == "__main__":
    sys.exit(main())
