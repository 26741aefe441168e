"""Find the first commit between GOOD and BAD where a step turns `slower` than GOOD.

    bench.py bisect GOOD BAD --only STEP [--repo URL] [-r N] [--quick] ...

Each probe is an ordinary comparison GOOD vs MID of that one step (through cli.run_and_load, so
builds come from the cache when present); the verdict `slower` moves the upper end down, anything
else moves the lower end up. Commits that fail to build are skipped, as `git bisect skip` does: the
next probe is the untested commit nearest the middle. Reports the commit and how many builds it took.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import git

from . import builds as bl
from . import paths
from .cli import _Parser, _positive, choose_target, run_and_load
from .config import load_config
from .errors import EXIT_ERROR, EXIT_OK, BuildError, RefbenchError
from .stats import SLOWER

# options that would change what is compared: bisect sets them itself
_RESERVED = ("-s", "--s5cmd", "--refs", "--json", "-o", "--output", "--output_file_name", "--fail-on-regression",
             "--format", "--html", "--csv", "--dry-run", "--list")


@dataclass
class Probe:
    sha: str
    subject: str
    verdict: str | None = None  # slower / faster / no significant change / inconclusive / skip
    rel: float | None = None
    built_now: bool = False
    error: str | None = None


@dataclass
class Outcome:
    good: str
    bad: str
    step: str
    commits: int  # commits after GOOD up to and including BAD
    first_slower: str | None  # the answer when it is one commit
    candidates: list[str]  # several when skipped commits leave it ambiguous
    probes: list[Probe] = field(default_factory=list)
    builds: int = 0  # builds made by this bisect (cache hits not counted)
    cached: int = 0  # binaries that came from the cache
    failed_builds: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bench.py bisect", description="Find the first commit between GOOD and BAD where a step "
                "turns slower than GOOD. Other options (--repo, --quick, -r, -w, --rounds, --threshold, "
                "--builds-dir, --until-decided, ...) pass through to each comparison.")
    p.add_argument("good", help="a ref where the step is fast (tag, commit, branch)")
    p.add_argument("bad", help="a later ref where the step is slower")
    p.add_argument("--only", required=True, metavar="STEP", help="the step to bisect ('scenario/step' or a unique name)")
    p.add_argument("-t", "--target", default=None, help="(default: the target of the checkout around the "
                   "current directory, else s5cmd)")
    p.add_argument("--repo", help="origin to build from (default: that checkout, else the target's repo)")
    p.add_argument("--scenarios", default=None, help="(default: ./refbench.toml, else the bundled file)")
    p.add_argument("--builds-dir", default=None)
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="trust that BAD is slower than GOOD (saves one comparison)")
    p.add_argument("--no-until-decided", dest="until_decided", action="store_false",
                   help="do not add interleaved rounds to an inconclusive probe (by default each probe is "
                   "measured until decided or out of budget: --max-runs, --max-time)")
    p.add_argument("--max-probes", type=_positive, default=20, help="give up after this many comparisons")
    p.add_argument("--log", help="write every probe and the outcome here as JSON")
    return p


def cmd_bisect(argv: list[str]) -> int:
    args, extra = parser().parse_known_args(argv)
    bad = [a for a in extra if a.split("=")[0] in _RESERVED]
    if bad:
        raise RefbenchError(f"bisect sets {bad[0]} itself; leave it out")
    outcome = bisect(args, extra)
    _print_outcome(outcome)
    if args.log:
        Path(args.log).write_text(json.dumps(outcome.to_json(), indent=1))
    return EXIT_OK if outcome.candidates else EXIT_ERROR


def commit_line(builder: bl.Builder, good: str, bad: str) -> list[tuple[str, str]]:
    """(sha, subject) of the commits after GOOD up to and including BAD, oldest first."""
    repo: git.Repo = builder.repo()
    try:
        if not repo.is_ancestor(good, bad):
            raise RefbenchError(f"GOOD ({good[:10]}) is not an ancestor of BAD ({bad[:10]})")
        out = repo.git.rev_list("--ancestry-path", "--topo-order", "--reverse", "--format=%H %s",
                                f"{good}..{bad}")
    except git.GitCommandError as e:
        raise RefbenchError(f"cannot list the commits between GOOD and BAD: {bl._git_msg(e)}") from None
    line = []
    for row in out.splitlines():
        if row.startswith("commit "):
            continue
        sha, _, subject = row.partition(" ")
        line.append((sha, subject))
    return line


def bisect(args: argparse.Namespace, extra: list[str], say=None) -> Outcome:
    say = say or (lambda msg: print(f"bisect: {msg}", file=sys.stderr, flush=True))
    t0 = time.monotonic()
    args.scenarios = str(args.scenarios or paths.default_scenarios())
    cfg = load_config(args.scenarios)
    target, origin = choose_target(cfg, args.target, args.repo, "git")
    args.target = target.name
    builds_dir = args.builds_dir or str(paths.default_builds_dir())
    builder = bl.Builder(target, Path(builds_dir), origin.url if origin else args.repo,
                         pr_remote=origin.remote if origin else None, checkout=origin is not None)
    good, bad = builder.resolve(args.good), builder.resolve(args.bad)
    line = commit_line(builder, good.sha, bad.sha)
    if not line:
        raise RefbenchError(f"no commits between {args.good} and {args.bad}")
    out = Outcome(good=good.sha, bad=bad.sha, step=args.only, commits=len(line), first_slower=None, candidates=[])
    seen_builds: set[str] = set()
    extra, user_threshold = _take_threshold(extra)
    threshold = [user_threshold]  # raised to half the GOOD->BAD regression once BAD is measured
    common = ["--target", args.target, "--repo", builder.repo_url, "--scenarios", args.scenarios,
              "--builds-dir", builds_dir, "--only", args.only, *extra]
    if args.until_decided and "--until-decided" not in extra:
        common.append("--until-decided")
    say(f"{len(line)} commits after {good.short} up to {bad.short}; step {args.only!r}; "
        f"at most ~{max(1, (len(line) - 1).bit_length())} probes")

    def probe(i: int) -> Probe:
        sha, subject = line[i]
        p = Probe(sha, subject)
        with tempfile.TemporaryDirectory(prefix="refbench-bisect-") as tmp:
            argv = ["-s", good.sha, sha, *common, "--threshold", str(threshold[0]),
                    "--json", f"{tmp}/results.json", "-o", f"{tmp}/summary.md"]
            try:
                _, res = run_and_load(argv)
            except BuildError as e:
                if _is_own_build_failure(e, sha):
                    p.verdict, p.error = "skip", str(e)
                    out.failed_builds += 1
                    out.builds += 1
                    out.probes.append(p)
                    say(f"  {sha[:10]} {subject[:50]!r}: does not build -> skipped")
                    return p
                raise
        for b in res["builds"]:
            if b["sha"] in seen_builds:
                continue
            seen_builds.add(b["sha"])
            if b["cached"]:
                out.cached += 1
            else:
                out.builds += 1
            if b["sha"] == sha:
                p.built_now = not b["cached"]
        comps = [c for sc in res["scenarios"] for st in sc["steps"] for c in st["comparisons"]]
        if len(comps) != 1:
            raise RefbenchError(f"--only {args.only!r} selects {len(comps)} steps; bisect needs exactly one "
                                "(use 'scenario/step')")
        p.verdict, p.rel = comps[0]["verdict"], comps[0]["rel"]
        out.probes.append(p)
        rel = "n/a" if p.rel is None else f"{p.rel * 100:+.1f}%"
        say(f"  {sha[:10]} {subject[:50]!r}: {p.verdict} ({rel} vs GOOD)")
        return p

    lo, hi = -1, len(line) - 1  # line[lo] is not slower (GOOD when -1), line[hi] is slower
    skipped: set[int] = set()
    if args.verify:
        v = probe(hi)
        if v.verdict == "skip":
            raise RefbenchError(f"BAD ({bad.short}) does not build: {v.error}")
        if v.verdict != SLOWER:
            raise RefbenchError(f"BAD ({bad.short}) is not slower than GOOD ({good.short}) on {args.only!r}: "
                                f"{v.verdict}; nothing to bisect (more runs, or --until-decided, may help)")
        # A midpoint is "bad" when it carries the regression being hunted: slower by more than half
        # of what BAD measured. A stray few-percent false "slower" on an innocent commit (each
        # probe is tested at alpha on its own) then cannot send the search the wrong way.
        if v.rel and v.rel / 2 > threshold[0]:
            threshold[0] = round(v.rel / 2, 4)
            say(f"BAD is {v.rel * 100:+.1f}% vs GOOD: a midpoint counts as slower beyond "
                f"+{threshold[0] * 100:.1f}% (half of that)")
    while len(out.probes) < args.max_probes:
        untested = [i for i in range(lo + 1, hi) if i not in skipped]
        if not untested:
            break
        mid = (lo + hi) // 2
        i = min(untested, key=lambda k: (abs(k - mid), k))
        p = probe(i)
        if p.verdict == "skip":
            skipped.add(i)
        elif p.verdict == SLOWER:
            hi = i
        else:
            lo = i
    else:
        raise RefbenchError(f"gave up after {args.max_probes} comparisons (--max-probes)")
    out.candidates = [line[i][0] for i in range(lo + 1, hi + 1)]
    out.first_slower = out.candidates[0] if len(out.candidates) == 1 else None
    out.seconds = round(time.monotonic() - t0, 1)
    out._line = line  # type: ignore[attr-defined]  # for printing subjects
    return out


def _take_threshold(extra: list[str]) -> tuple[list[str], float]:
    """Split a user's --threshold out of the pass-through options (bisect sets it per probe)."""
    from .cli import _fraction
    rest, value, i = [], 0.05, 0
    while i < len(extra):
        a = extra[i]
        if a == "--threshold" and i + 1 < len(extra):
            value, i = _fraction(extra[i + 1]), i + 2
            continue
        if a.startswith("--threshold="):
            value = _fraction(a.split("=", 1)[1])
        else:
            rest.append(a)
        i += 1
    return rest, value


def _is_own_build_failure(e: BuildError, sha: str) -> bool:
    """A failed build of the probed commit (skip it), not of GOOD or of the toolchain (stop)."""
    return sha[:10] in str(e)


def _print_outcome(o: Outcome) -> None:
    subjects = dict(getattr(o, "_line", []))
    def n(k, word):
        return f"{k} {word}{'' if k == 1 else 's'}"
    tail = (f"{n(o.builds, 'build')} ({o.failed_builds} failed), {o.cached} {'binary' if o.cached == 1 else 'binaries'} "
            f"from the cache, {n(len(o.probes), 'comparison')}, {o.seconds:.0f} s")
    if o.first_slower:
        print(f"first slower commit for {o.step!r}: {o.first_slower} {subjects.get(o.first_slower, '')}")
    else:
        print(f"the first slower commit for {o.step!r} is one of (skipped commits left it ambiguous):")
        for sha in o.candidates:
            print(f"  {sha} {subjects.get(sha, '')}")
    print(f"searched {o.commits} commits with {tail}")
