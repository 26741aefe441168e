"""Find the first commit between GOOD and BAD where a step turns `slower` than GOOD.

    bench.py bisect GOOD BAD --only STEP [--variant SETTINGS|NAME] [--repo URL] [-r N] [--quick] ...

Each probe is an ordinary run, GOOD vs MID, of that one step (through pipeline.run, so
builds come from the cache when present); the verdict `slower` moves the upper end down, anything
else moves the lower end up. Under a variant (its Go, the target's flags, environment) every
build the search makes, GOOD's, BAD's and each probe's, is built and run with those settings:
a regression that shows only with `--numworkers 4` or under another Go is bisected where it shows.
Commits that fail to build are skipped, as `git bisect skip` does: the next probe is the untested
commit nearest the middle. Reports the commit and how many builds it took.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping

from . import implementations as impls, pipeline, runenv, variants as vr
from .config import load_config
from .errors import BuildError, RefbenchError
from .pipeline import RunRequest, choose_target
from .progress import Reporter
from .refs import ResolvedRef
from .results import Results
from .verdict import Verdict

SKIP = "skip"


@dataclass(frozen=True)
class Search:
    """What to bisect: the step, between which refs, and how hard to try."""
    good: str
    bad: str
    step: str  # --only: 'scenario/step' or a unique step name
    verify: bool = True  # measure BAD first and refuse when it is not slower
    max_probes: int = 20
    variant: str | None = None  # --variant: settings (go=,flags=,env=) or a [[variants]] table's name


@dataclass(frozen=True)
class Probe:
    sha: str
    subject: str
    verdict: str | None = None  # slower / faster / no significant change / inconclusive / skip
    rel: float | None = None
    built_now: bool = False
    error: str | None = None


@dataclass(frozen=True)
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
    subjects: Mapping[str, str] = field(default_factory=dict, repr=False)  # sha -> subject, for printing
    variant: vr.Variant | None = None  # the settings every build ran under

    def to_json(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k not in ("subjects", "variant")},
                "variant": self.variant.to_json() if self.variant else None}


def under(v: vr.Variant | None) -> str:
    """' under variant w4 (flags --numworkers 4)' for the lines that give the answer; '' without one."""
    return f" under variant {v.describe()}" if v else ""


@dataclass(frozen=True)
class Line:
    """The commits to search and the run every probe is (GOOD vs the probed commit)."""
    good: ResolvedRef
    bad: ResolvedRef
    commits: list[tuple[str, str]]  # (sha, subject) after GOOD up to and including BAD, oldest first
    request: RunRequest
    variant: vr.Variant | None = None  # the settings of every build (Search.variant, resolved)

    def probe_request(self, sha: str, threshold: float) -> RunRequest:
        """The probe's run: GOOD vs sha, under the variant's settings when there is one (the
        two builds named after it, as the pipeline gives a variant's settings to builds by name)."""
        if self.variant is None:
            return self.request.replace(refs=(self.good.sha, sha), threshold=threshold)
        return self.request.replace(refs=(), threshold=threshold,
                                    variants=vr.against(self.variant, self.good.sha, sha, "good"))


@dataclass(frozen=True)
class State:
    """The search so far: probes made, builds counted (each commit once), the slower threshold."""
    threshold: float
    probes: tuple[Probe, ...] = ()
    builds: int = 0
    cached: int = 0
    failed_builds: int = 0
    seen: frozenset[str] = frozenset()

    def with_probe(self, p: Probe, built: list[tuple[str, bool]]) -> "State":
        """Count the probe and the builds its run used ((sha, came from the cache)), each sha once."""
        new = [(sha, cached) for sha, cached in dict(built).items() if sha not in self.seen]
        return dataclasses.replace(
            self, probes=self.probes + (p,), seen=self.seen | {sha for sha, _ in new},
            cached=self.cached + sum(1 for _, c in new if c), builds=self.builds + sum(1 for _, c in new if not c))

    def with_failed_build(self, p: Probe) -> "State":
        return dataclasses.replace(self, probes=self.probes + (p,), builds=self.builds + 1,
                                   failed_builds=self.failed_builds + 1)


Run = Callable[[RunRequest, Reporter], Results]


def _say(msg: str) -> None:
    print(f"bisect: {msg}", file=sys.stderr, flush=True)


def prepare(search: Search, base: RunRequest, env: runenv.RunEnv | None = None) -> Line:
    """Resolve GOOD and BAD in the target's origin (the checkout around the current directory when
    it is the target's) and list the commits between them, with the builder of `env` (default:
    this machine's RunEnv), the one every probe builds with."""
    scenarios = base.scenarios_path()
    cfg = load_config(scenarios)
    target, origin = choose_target(cfg, base.target, base.repo, "git")
    # the variant first: a bad one is refused before the origin is fetched
    variant = vr.configuration(search.variant, cfg.variants, "bisect") if search.variant else None
    impls.refuse_for_refs(variant, "bisect")
    builder = (env or runenv.real()).builder(runenv.BuildSite(request=base.replace(source="git"), target=target, origin=origin))
    good, bad = builder.resolve(search.good), builder.resolve(search.bad)
    commits = builder.commits_between(good.sha, bad.sha)
    if not commits:
        raise RefbenchError(f"no commits between {search.good} and {search.bad}")
    request = base.replace(target=target.name, repo=builder.repo_url, scenarios=scenarios, only=(search.step,))
    return Line(good, bad, commits, request, variant)


def probe(line: Line, i: int, state: State, run: Run, say) -> tuple[State, Probe]:
    """Compare GOOD with commit i at the state's threshold. A commit that does not build is
    skipped; any other failure (GOOD's build, the toolchain) stops the search."""
    sha, subject = line.commits[i]
    try:
        res = run(line.probe_request(sha, state.threshold), Reporter())
    except BuildError as e:
        if e.sha != sha:
            raise
        p = Probe(sha, subject, verdict=SKIP, error=str(e))
        say(f"  {sha[:10]} {subject[:50]!r}: does not build -> skipped")
        return state.with_failed_build(p), p
    built = [(b.sha, bool(b.cached)) for b in res.builds]
    comps = [c for _, _, c in res.comparisons()]
    if len(comps) != 1:
        raise RefbenchError(f"--only {line.request.only[0]!r} selects {len(comps)} steps; bisect needs exactly one "
                            "(use 'scenario/step')")
    built_now = any(b == sha and not cached for b, cached in built if b not in state.seen)
    p = Probe(sha, subject, comps[0].verdict, comps[0].rel, built_now)
    rel = "n/a" if p.rel is None else f"{p.rel * 100:+.1f}%"
    say(f"  {sha[:10]} {subject[:50]!r}: {p.verdict} ({rel} vs GOOD)")
    return state.with_probe(p, built), p


def hunted_threshold(bad_rel: float | None, threshold: float) -> float:
    """A midpoint is "bad" when it carries the regression being hunted: slower by more than half
    of what BAD measured. A stray few-percent false slower verdict on an innocent commit (each probe is
    tested at alpha on its own) then cannot send the search the wrong way."""
    return round(bad_rel / 2, 4) if bad_rel and bad_rel / 2 > threshold else threshold


def next_index(lo: int, hi: int, skipped: frozenset[int]) -> int | None:
    """The untested commit nearest the middle of (lo, hi), or None when none is left."""
    untested = [i for i in range(lo + 1, hi) if i not in skipped]
    mid = (lo + hi) // 2
    return min(untested, key=lambda k: (abs(k - mid), k)) if untested else None


def narrow(lo: int, hi: int, skipped: frozenset[int], i: int, verdict: str | None):
    """(lo, hi, skipped) after probing commit i."""
    if verdict == SKIP:
        return lo, hi, skipped | {i}
    return (lo, i, skipped) if verdict == Verdict.SLOWER else (i, hi, skipped)


def verify_bad(line: Line, state: State, run: Run, say) -> State:
    """Measure BAD first: it must build and be slower; its regression sets the midpoints' threshold."""
    state, v = probe(line, len(line.commits) - 1, state, run, say)
    bad, good, step = line.bad.short, line.good.short, line.request.only[0]
    if v.verdict == SKIP:
        raise RefbenchError(f"BAD ({bad}) does not build: {v.error}")
    if v.verdict != Verdict.SLOWER:
        raise RefbenchError(f"BAD ({bad}) is not slower than GOOD ({good}) on {step!r}{under(line.variant)}: "
                            f"{v.verdict}; nothing to bisect (more runs, or --until-decided, may help)")
    threshold = hunted_threshold(v.rel, state.threshold)
    if threshold != state.threshold:
        say(f"BAD is {v.rel * 100:+.1f}% vs GOOD: a midpoint counts as slower beyond "
            f"+{threshold * 100:.1f}% (half of that)")
    return dataclasses.replace(state, threshold=threshold)


def bisect(search: Search, base: RunRequest, run: Run | None = None, say=None,
           env: runenv.RunEnv | None = None) -> Outcome:
    """Search the commits between GOOD and BAD, each probe a run through `run` (default:
    pipeline.run on `env`, default this machine's RunEnv, whose builder also lists the commits)."""
    say = say or _say
    env = env or runenv.real()
    run = run or (lambda request, reporter: pipeline.run(request, env.with_reporter(reporter)))
    t0 = time.monotonic()
    line = prepare(search, base, env)
    n = len(line.commits)
    say(f"{n} commits after {line.good.short} up to {line.bad.short}; step {search.step!r}{under(line.variant)}; "
        f"at most ~{max(1, (n - 1).bit_length())} probes")
    state = State(threshold=base.threshold)
    if search.verify:
        state = verify_bad(line, state, run, say)
    lo, hi, skipped = -1, n - 1, frozenset()  # commits[lo] is not slower (GOOD when -1), commits[hi] is
    while len(state.probes) < search.max_probes:
        i = next_index(lo, hi, skipped)
        if i is None:
            break
        state, p = probe(line, i, state, run, say)
        lo, hi, skipped = narrow(lo, hi, skipped, i, p.verdict)
    else:
        raise RefbenchError(f"gave up after {search.max_probes} comparisons (--max-probes)")
    candidates = [line.commits[i][0] for i in range(lo + 1, hi + 1)]
    return Outcome(good=line.good.sha, bad=line.bad.sha, step=search.step, commits=n,
                   first_slower=candidates[0] if len(candidates) == 1 else None, candidates=candidates,
                   probes=list(state.probes), builds=state.builds, cached=state.cached,
                   failed_builds=state.failed_builds, seconds=round(time.monotonic() - t0, 1),
                   subjects=dict(line.commits), variant=line.variant)


def print_outcome(o: Outcome) -> None:
    def n(k, word):
        return f"{k} {word}{'' if k == 1 else 's'}"
    tail = (f"{n(o.builds, 'build')} ({o.failed_builds} failed), {o.cached} {'binary' if o.cached == 1 else 'binaries'} "
            f"from the cache, {n(len(o.probes), 'comparison')}, {o.seconds:.0f} s")
    if o.first_slower:
        print(f"first slower commit for {o.step!r}{under(o.variant)}: {o.first_slower} {o.subjects.get(o.first_slower, '')}")
    else:
        print(f"the first slower commit for {o.step!r}{under(o.variant)} is one of (skipped commits left it ambiguous):")
        for sha in o.candidates:
            print(f"  {sha} {o.subjects.get(sha, '')}")
    print(f"searched {o.commits} commits with {tail}")
