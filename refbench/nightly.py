"""The nightly run: compare latest_release with master (or last night's master with tonight's),
keep every run in a history (a SQLite file, or a PostgreSQL URL many runners share), look for
change points in each step's series of nights, render a trend page, and alarm.

    bench.py nightly --history bench.db|postgresql://... [--since-last] [--machine NAME] [run options ...]

Run options (--repo, --quick, --only, -r, -w, --rounds, --threshold, --builds-dir, ...) pass
through to the run. Each `--variant NAME=REF[,go=...][,flags=...][,env=K=V]` (or a
[[variants]] table's NAME) is a series of its own: REF built and run under the variant's settings,
compared each night with the baseline under the same settings (so a variant that is slower by
design is no regression; a commit that is slower only under it is), recorded under the head_ref
`REF [NAME]` (series_key), with its own alarms, change points, trend charts and results.
Each `--impl NAME[@VERSION]` (and `--variant NAME=impl:IMPL,env=...`) watches an implementation at
its pinned version as a series of its own: tonight's head against it on the scenarios it supports,
recorded under `impl:NAME@VERSION` (impl_key; a new pin is a new key, so a new series), with mode
`implementation`, its change points drawn but never an alarm (judged: another program is slower or
faster by design, and its own pinned bytes never move: a shift there is the machine's).
The alarm (exit 1) is, by default, a *lasting regression*: a step tonight's run calls
slower on its second night running (against last night's head: a jump that held), or a *new
change point*: per step, the watched build's nightly median (--cp-statistic) on this machine
type goes through Apache Otava's E-Divisive (refbench.changepoints); a shift to
slower that has held --cp-min-nights nights, beyond --cp-magnitude and below --cp-pvalue, and was
not reported before, exits 1 with the commit range and the ready bisect command. A single slow
night never alarms. `--alarm changepoint` uses change points alone, `--alarm verdict` any slower
verdict tonight, `--alarm both` either.
Exit codes: 0 no alarm; 1 alarm; 2 an error (recorded too); 3 refbench failed (recorded too). A
night whose record the history cannot take (locked, dropped, damaged) keeps it in
night-record.json beside its results and exits 2; `nightly --replay FILE` records it later and
judges the alarm then: nothing measured is lost. This module holds the steps' series of nights
and their change points (read as history.NightPoint, history.NightlyChangePoint), the shifts a
night reports (Shift) and the night itself, `night(db, NightRequest, measure) -> NightOutcome`
(and `replay`); the trend page's data is a TrendPage (trend_page), drawn by the request's `draw`
(render.trend.render_trend, which the command passes: the library imports no view), the command is
refbench/commands/nightly.py.
"""
from __future__ import annotations

import json
import shlex
import sys
import time
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping

from . import builds as bl, changepoints as cpd, implementations as impls, runenv, variants as vr
from .config import load_config
from .errors import EXIT_CRASH, EXIT_OK, EXIT_REGRESSION, RefbenchError, writing
from .history import History, NightlyChangePoint, NightPoint, TrendSeries, now as _now

#: the night's clock: a UTC time stamp (history.now); a parameter wherever a night stamps a record or
#: a page, so a test gives a fixed one and a golden page stays byte-equal
Clock = Callable[[], str]
from .pipeline import RunRequest
from .results import Contrast, Results, load as load_results
from .variants import Variant
from .verdict import Verdict


NO_VARIANTS: Mapping[str, str] = MappingProxyType({})  # no variant's settings known: bisect lines use the name


# ---- a step's series of nights ---------------------------------------------------------------
def series_key(ref: str, variant: str | None = None) -> str:
    """The head_ref a series' nights are recorded under: the watched ref, or for a variant's series
    `REF [NAME]`. No git ref has a space in its name, so the two never meet, and the rows of the
    plain series, older ones included, keep their meaning."""
    return f"{ref} [{variant}]" if variant else ref


IMPL_PREFIX = "impl:"  # an implementation's series key: `impl:NAME@VERSION` (no git ref has a colon)
IMPL_MODE = "implementation"  # the mode an implementation's nights are recorded under: against tonight's head


def impl_key(impl: impls.Implementation, variant: str | None = None) -> str:
    """The head_ref an implementation's series is recorded under: its pinned version (and a named
    variant's name: `impl:NAME@VERSION [VARIANT]`), so a new pin (another version) starts a series
    of its own beside the old one, and neither mixes the other's nights. A colon is in no git ref's
    name, so no watched ref's series meets it."""
    return series_key(IMPL_PREFIX + impl.spec, variant)


def impl_of(head_ref: str | None) -> str | None:
    """`NAME@VERSION` of an implementation's series key (None: a ref's or a variant's series)."""
    if not head_ref or not head_ref.startswith(IMPL_PREFIX):
        return None
    return head_ref[len(IMPL_PREFIX):].partition(" [")[0]


def series_label(head_ref: str | None) -> str | None:
    """What a series is called after a step in the night's lines: a variant's name (of a ref or of
    an implementation), an implementation's NAME@VERSION, or None for the plain watched ref."""
    return variant_of(head_ref) or impl_of(head_ref)


def variant_of(head_ref: str | None) -> str | None:
    """The variant's name in a series key (None: the plain watched ref)."""
    ref, sep, rest = (head_ref or "").partition(" [")
    return rest[:-1] if sep and rest.endswith("]") else None


def series(db: History, target: str | None = None, machine: str | None = None, head_ref: str | None = None,
           metric: str = "wall") -> dict[tuple, list[NightPoint]]:
    """{(target, machine, head_ref, scenario, step): nights oldest first}, the identical-binary
    nights among them with their binary's values (with_identical_values); of wall time, or of
    one of the daemon's metrics (History.nights)."""
    out: dict[tuple, list[NightPoint]] = {}
    for r in db.nights(target, machine, metric):
        if head_ref and r.head_ref != head_ref:
            continue
        out.setdefault((r.target, r.machine, r.head_ref, r.scenario, r.step), []).append(r)
    return {k: with_identical_values(v) for k, v in out.items()}


_H = ("h_mean", "h_sd", "h_median")


def with_identical_values(nights: list[NightPoint]) -> list[NightPoint]:
    """The nights, each identical-binary night (its watched binary the same bytes as its baseline's,
    so nothing was measured) given the values of that binary as measured on the nearest other night
    (an earlier one first): as the watched build (its commit on the watched side) or as the baseline
    (its commit on the baseline side). Its verdict stays `identical binary` and its change 0: the
    same binary is unchanged, exactly, and the series keeps a point for the night, so a streak of
    slow nights cannot run through it. A night whose binary was never measured keeps None."""
    out = list(nights)
    for i, n in enumerate(nights):
        if n.verdict != Verdict.IDENTICAL or n.h_mean is not None:
            continue
        shas = {n.h_sha, n.b_sha}
        for m in sorted((m for j, m in enumerate(nights) if j != i), key=lambda m: (m.id > n.id, abs(m.id - n.id))):
            if m.h_mean is not None and m.h_sha in shas:
                values = {k: getattr(m, k) for k in _H}
            elif m.b_mean is not None and m.b_sha in shas:
                values = {"h_mean": m.b_mean, "h_sd": None, "h_median": m.b_median}
            else:
                continue
            out[i] = replace(n, **values, b_mean=values["h_mean"], b_median=values["h_median"], rel=0.0)
            break
    return out


def last_good(nights: list[NightPoint], index: int) -> tuple[str | None, int | None]:
    """Where a bisect of the shift whose first bad night is nights[index] starts: the commit of the
    latest night before it on another commit than the first bad one, and that night's run; with no
    such night, the first bad night's own baseline (a fixed baseline, or last night's head), which
    its run found faster, and no run. Never the bad commit itself: (None, None) when there
    is no other."""
    bad = nights[index]
    for n in reversed(nights[:index]):
        if n.h_sha and n.h_sha != bad.h_sha:
            return n.h_sha, n.id
    return (bad.b_sha, None) if bad.b_sha and bad.b_sha != bad.h_sha else (None, None)


def bisect_line(good: str | None, bad: str, scenario: str, step: str, target: str | None, repo: str | None,
                variant: str | None = None) -> str:
    """The ready `bench.py bisect` command; `variant` its --variant (a variant's series is bisected
    under that variant's settings)."""
    if not good:
        return "(no earlier commit to bisect from)"
    parts = ["./bench.py", "bisect", good[:12], bad[:12], "--only", f"{scenario}/{step}"]
    if target and target != "s5cmd":
        parts += ["-t", target]
    if repo and "://" not in repo:  # a local origin; a URL is usually the target's own repo
        parts += ["--repo", repo]
    if variant:
        parts += ["--variant", variant]
    return " ".join(shlex.quote(p) for p in parts)


def bisect_variant(head_ref: str | None, variants: Mapping[str, str]) -> str | None:
    """The --variant that bisects a series: its variant's settings as tonight's request gives them
    (NightRequest.bisect_variants), else its name, which bisect finds when it is a [[variants]]
    table (the history keeps a variant's name, not its settings)."""
    return variants.get(head_ref or "", variant_of(head_ref))


NO_BISECT = "(an implementation's pinned version: nothing to bisect; the machine, the fixture or the server moved)"


def _bisect_of(bad: NightPoint, good_sha: str | None, variants: Mapping[str, str]) -> str:
    if impl_of(bad.head_ref):  # its program is the same pinned bytes every night: no commit to walk
        return NO_BISECT
    return bisect_line(good_sha, bad.h_sha, bad.scenario, bad.step, bad.target, bad.repo,
                       bisect_variant(bad.head_ref, variants))


def find_changepoints(nights: list[NightPoint], params: cpd.Params, statistic: str = "median",
                      variants: Mapping[str, str] = NO_VARIANTS) -> list[NightlyChangePoint]:
    """The change points of one series, for the trend page and the history (nights with no value,
    an identical binary never measured, are left out of the analysis)."""
    valued = [n for n in nights if n.value(statistic) is not None]
    out = []
    for c in cpd.detect([n.value(statistic) for n in valued], params):
        bad = valued[c.index]
        good_sha, good_id = last_good(valued, c.index)
        good = next((n for n in valued if n.id == good_id), valued[c.index - 1])
        out.append(NightlyChangePoint(
            index=nights.index(bad), run_id=bad.id, prev_run_id=good_id, good_sha=good_sha or "",
            bad_sha=bad.h_sha, rel=c.rel, pvalue=c.pvalue, before=c.before, after=c.after, slower=c.slower,
            good_started=good.started, bad_started=bad.started, bisect=_bisect_of(bad, good_sha, variants)))
    return out


def _known(db: History, target: str, machine: str, head_ref: str) -> dict[tuple, list[tuple[int, bool]]]:
    """{(scenario, step): [(first night's run id, slower)]} of the shifts already reported."""
    known: dict[tuple, list[tuple[int, bool]]] = {}
    for k in db.known_changepoints(target, machine):
        if k["head_ref"] == head_ref:
            known.setdefault((k["scenario"], k["step"]), []).append((k["run_id"], (k["rel"] or 0) > 0))
    return known


def _reported(known: list[tuple[int, bool]], pos: dict[int, int], index: int, slower: bool, tol: int) -> bool:
    """Whether a shift starting at night `index` was reported already (its first night may move by
    up to `tol` nights as nights accumulate)."""
    return any(rid in pos and abs(pos[rid] - index) <= tol and s == slower for rid, s in known)


def lasting_start(nights: list[NightPoint]) -> int | None:
    """The first slow night of a regression that tonight (the last night) shows has lasted, or None.

    Against a fixed baseline (release mode), a lasting regression is `slower` tonight and the night
    before, and not the night before that (a streak alarms once), so the night named is the first
    of the current streak. Against last night (since-last), the night before jumped to `slower`
    and tonight did not come back (`faster`): the new level held. Either way a one-night spike
    (slower, then back) never counts, and neither does a spike and a slow night with a night
    between them: an identical-binary night is a night of the series (unchanged, exactly), so a
    streak cannot run through it."""
    if len(nights) < 2 or nights[-2].verdict != Verdict.SLOWER:
        return None
    last = nights[-1]
    if last.mode == "since-last":
        return len(nights) - 2 if last.verdict != Verdict.FASTER else None
    if last.verdict != Verdict.SLOWER or (len(nights) >= 3 and nights[-3].verdict == Verdict.SLOWER
                                          and nights[-3].mode != "since-last"):
        return None
    return len(nights) - 2


@dataclass(frozen=True)
class Shift:
    """A shift reported tonight (a lasting regression or a new change point), as the history's
    changepoints table records it, with the ready bisect line."""
    target: str | None
    repo: str | None
    machine: str | None
    head_ref: str | None
    scenario: str
    step: str
    statistic: str  # "median", "mean", or "verdict" for a lasting regression
    run_id: int  # the first bad night's run
    prev_run_id: int | None  # the last good night's run (None: the first bad night's own baseline)
    good_sha: str
    bad_sha: str
    rel: float | None
    pvalue: float | None
    before: float | None
    after: float | None
    detected_run_id: int | None  # tonight's run
    detected_at: str
    alarm: bool  # a shift to slower: the night's exit code says so
    bisect: str

    def row(self) -> dict:
        """The changepoints table's row (the bisect line is derived, not stored)."""
        d = asdict(self)
        del d["bisect"]
        return {**d, "alarm": int(self.alarm)}


def _shift(nights: list[NightPoint], index: int, *, statistic: str, rel: float | None, pvalue: float | None,
           before: float | None, after: float | None, alarm: bool, run_id: int | None,
           variants: Mapping[str, str] = NO_VARIANTS, clock: Clock = _now) -> Shift:
    """The shift whose first bad night is nights[index], bisected from the last good commit
    (last_good)."""
    bad = nights[index]
    good_sha, good_id = last_good(nights, index)
    return Shift(target=bad.target, repo=nights[0].repo, machine=bad.machine, head_ref=bad.head_ref,
                 scenario=bad.scenario, step=bad.step, statistic=statistic, run_id=bad.id, prev_run_id=good_id,
                 good_sha=good_sha or "", bad_sha=bad.h_sha, rel=rel, pvalue=pvalue, before=before, after=after,
                 detected_run_id=run_id, detected_at=clock(), alarm=alarm, bisect=_bisect_of(bad, good_sha, variants))


def _record(db: History, shifts: list[Shift]) -> list[Shift]:
    db.add_changepoints([s.row() for s in shifts])
    return shifts


def lasting_regressions(db: History, *, target: str, machine: str, head_ref: str, tol: int,
                        run_id: int | None, variants: Mapping[str, str] = NO_VARIANTS,
                        clock: Clock = _now) -> list[Shift]:
    """Steps whose regression tonight shows has lasted two nights (`lasting_start`), not reported
    before. They are recorded as shifts (statistic "verdict"), so the change-point rule does not
    report the same step again when Otava confirms it a night or two later."""
    known = _known(db, target, machine, head_ref)
    rows = []
    for (_tg, _mc, _hr, sc, st), nights in series(db, target, machine, head_ref).items():
        if run_id is not None and nights[-1].id != run_id:
            continue  # this step was not measured tonight
        index = lasting_start(nights)
        if index is None or _reported(known.get((sc, st), []), {n.id: i for i, n in enumerate(nights)},
                                      index, True, tol):
            continue
        bad = nights[index]
        rows.append(_shift(nights, index, statistic="verdict", rel=bad.rel, pvalue=None,
                           before=nights[index - 1].h_median if index else None,
                           after=bad.h_median, alarm=True, run_id=run_id, variants=variants, clock=clock))
    return _record(db, rows)


def new_changepoints(db: History, *, target: str, machine: str, head_ref: str, params: cpd.Params,
                     statistic: str, run_id: int | None, variants: Mapping[str, str] = NO_VARIANTS,
                     alarms: bool = True, clock: Clock = _now) -> list[Shift]:
    """Change points not reported before (a known one may move by up to --cp-min-nights nights as
    nights accumulate); they are recorded, and the slower ones are the alarm."""
    known = _known(db, target, machine, head_ref)
    tol = max(1, params.min_nights)
    rows = []
    for (_tg, _mc, _hr, sc, st), nights in series(db, target, machine, head_ref).items():
        pos = {n.id: i for i, n in enumerate(nights)}
        for c in find_changepoints(nights, params, statistic, variants):
            if _reported(known.get((sc, st), []), pos, c.index, c.slower, tol):
                continue
            rows.append(_shift(nights, c.index, statistic=statistic, rel=c.rel, pvalue=c.pvalue,
                               before=c.before, after=c.after, alarm=alarms and c.slower, run_id=run_id,
                               variants=variants, clock=clock))
    return _record(db, rows)


# ---- the trend page ------------------------------------------------------------------------
def trend_series(db: History, target: str | None = None, machine: str | None = None,
                 params: cpd.Params = cpd.Params(), statistic: str = "median",
                 variants: Mapping[str, str] = NO_VARIANTS) -> list[TrendSeries]:
    """One series per (target, machine, watched ref or variant's series, scenario, step), with its
    change points; a change point reported before with an alarm is marked alarmed. Wall time's
    series first, then each daemon metric's (issue 36) where nights judged one: those show where
    the daemon's cost moved; only wall time's change points alarm (new_changepoints)."""
    # reported with an alarm: an implementation's series records its change points without one
    known = {(k["target"], k["machine"], k["head_ref"], k["scenario"], k["step"], k["run_id"])
             for k in db.known_changepoints(target, machine) if k["alarm"]}
    out = []
    for metric in ("wall", *db.daemon_metrics(target, machine)):
        charts = {key: [n for n in nights if n.h_mean is not None]  # an identical binary never measured: no point
                  for key, nights in series(db, target, machine, metric=metric).items()}
        out += [TrendSeries(*key, nights=tuple(nights), metric=metric,
                            changepoints=tuple(replace(c, alarmed=metric == "wall" and (*key, c.run_id) in known
                                                       and c.slower)
                                               for c in find_changepoints(nights, params, statistic, variants)))
                for key, nights in charts.items() if nights]
    return out


@dataclass(frozen=True)
class TrendPage:
    """What the trend page shows: a chart per series, the recent runs, the machines and targets
    there are to pick from, and the change-point rule applied. render.trend draws it."""
    title: str
    series: tuple[TrendSeries, ...]
    runs: tuple
    generated: str  # when the page was drawn (UTC)
    machines: tuple[str, ...]
    targets: tuple[str, ...]
    shown_target: str | None
    shown_machine: str | None
    params: cpd.Params
    statistic: str


def trend_page(db: History, title: str = "refbench nightly", target: str | None = None, machine: str | None = None,
               params: cpd.Params = cpd.Params(), statistic: str = "median",
               variants: Mapping[str, str] = NO_VARIANTS, clock: Clock = _now) -> TrendPage:
    """The trend page of the history (or of one target / machine), as data; `variants` as
    NightRequest.bisect_variants, for the bisect lines of variants' series; `clock` stamps when it
    was generated."""
    machines, targets = db.machines_and_targets()
    return TrendPage(title=title, series=tuple(trend_series(db, target, machine, params, statistic, variants)),
                     runs=tuple(db.recent_runs(60, target, machine)), generated=clock(), machines=tuple(machines),
                     targets=tuple(targets), shown_target=target, shown_machine=machine, params=params,
                     statistic=statistic)


def write_page(path: Path, text: str) -> Path:
    """A drawn page written atomically: a browser or a web server reading it mid-write sees the
    old page or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


# ---- one night ------------------------------------------------------------------------------
ALARMS = ("lasting", "changepoint", "verdict", "both")


@dataclass(frozen=True)
class NightRequest:
    """One night: its run's options, what it compares, where it writes, what alarms."""
    run: RunRequest  # run options; night() fills in the refs and the command line results.json records
    machine: str  # the machine type series and change points are kept per
    home: Path  # where nightly/<date>/ goes by default
    trend: Path  # the trend page, redrawn whatever the night's outcome
    # draws the trend page (render.trend.render_trend): passed in, so that the library imports no view
    draw: Callable[[TrendPage], str]
    params: cpd.Params = cpd.Params()
    base: str = "latest_release"
    head: str = "master"
    since_last: bool = False  # baseline: last night's head commit (base on the first night)
    alarm: str = "lasting"  # one of ALARMS
    statistic: str = "median"  # the watched build's per-night value (--cp-statistic)
    budget_text: str = ""  # --budget as given, for the recorded command line
    out_dir: Path | None = None  # default: home/nightly/<UTC date and time>
    show_target: str | None = None  # the trend page: only this target / machine type
    show_machine: str | None = None
    variants: tuple[Variant, ...] = ()  # --variant: each a series of its own (Watched)
    # --impl: each implementation at its pinned version a series of its own, against tonight's head;
    # --variant NAME=impl:IMPL,env=...: a named variant of one, another series of its own
    implementations: tuple[impls.Implementation, ...] = ()
    impl_variants: tuple[tuple[Variant, impls.Implementation], ...] = ()
    # the night's clock: when it started, when a shift was detected, when the page was drawn
    clock: Clock = field(default=_now, compare=False)

    def watched(self) -> tuple["Watched", ...]:
        """The series tonight extends: the head, then each variant's, then each implementation's."""
        return ((Watched(self.head),) + tuple(Watched(v.ref, v) for v in self.variants)
                + tuple(Watched(self.head, impl=i) for i in self.implementations)
                + tuple(Watched(self.head, v, impl=i) for v, i in self.impl_variants))

    def bisect_variants(self) -> dict[str, str]:
        """{series key: the --variant its bisect line gives}: each variant's settings alone."""
        return {w.key: vr.settings_text(w.variant) for w in self.watched() if w.variant and not w.impl}


@dataclass(frozen=True)
class Watched:
    """One series a night extends: the watched ref, plain (--head) or under a variant, whose
    baseline is --base (or that series' last night) under the same settings."""
    ref: str
    variant: Variant | None = None
    impl: impls.Implementation | None = None  # an implementation's series: it, measured against `ref`

    @property
    def key(self) -> str:
        name = self.variant.name if self.variant else None
        return impl_key(self.impl, name) if self.impl else series_key(self.ref, name)

    def series_request(self, run: RunRequest, base: str) -> RunRequest:
        """Tonight's run of this series: base vs ref, both under the variant's settings
        (the baseline named `NAME.base`, the watched build NAME); for an implementation's, tonight's
        head (`base`, as baseline() gives it) then the implementation, on the scenarios it supports
        (pipeline.select_scenarios), the watched build being the last."""
        if self.impl is not None:  # plain (--impl), or a named variant of it (the pipeline's impl: variant)
            return run.replace(refs=(base,), impl_first=False, implementations=() if self.variant else (self.impl.spec,),
                               variants=(self.variant,) if self.variant else ())
        if self.variant is None:
            return run.replace(refs=(base, self.ref))
        return run.replace(refs=(), variants=vr.against(self.variant, base, self.ref, "base"))

    def out_dir(self, night_dir: Path) -> Path:
        """Where its summary and results.json go: the night's directory, or variants/NAME or
        implementations/NAME@VERSION in it."""
        if self.impl:
            return night_dir / "implementations" / (self.variant.name if self.variant else self.impl.spec)
        return night_dir / "variants" / self.variant.name if self.variant else night_dir

    def says(self, base: str) -> str:
        """What tonight compares, for the progress line."""
        if self.impl:
            named = f"variant {self.variant.describe()} of " if self.variant else ""
            return f"{base} vs {named}{self.impl.label} (pinned, {self.impl.registry})"
        under = f" under variant {self.variant.describe()}" if self.variant else ""
        return f"{base} vs {self.ref}{under}"


@dataclass(frozen=True)
class NightOutcome:
    """What a night found in one series; `code` is the exit code (1 on an alarm). The night's
    outcome is its head's, with each variant's series in `variants` and an alarm in any of them
    in `code`."""
    code: int
    trend: Path  # the page written
    results: Results | None = None  # None: the watched ref had not moved, nothing was compared
    run_id: int | None = None
    out_dir: Path | None = None
    regressions: tuple[tuple[str, str, Contrast], ...] = ()  # tonight's slower verdicts (wall time)
    lasting: tuple[Shift, ...] = ()
    found: tuple[Shift, ...] = ()  # new change points
    machine: str | None = None  # the machine type the night is recorded under
    head_ref: str | None = None  # the series' key (series_key)
    variants: tuple["NightOutcome", ...] = ()  # each variant's series tonight


# runs tonight's benchmark and writes its summary and results.json at these paths
Measure = Callable[[RunRequest, Path, Path], Results]


def _stderr(text: str) -> None:
    print(text, file=sys.stderr)


def record_line(run: RunRequest, budget_text: str, summary: Path, json_path: Path) -> tuple[str, ...]:
    """The command line results.json records for the night's run, `run` (its refs or its
    variants set): the `bench.py` run it amounts to."""
    builds = (("-s", *run.refs, *(x for i in run.implementations for x in ("--impl", i))) if run.refs else ()) \
        + tuple(x for v in run.variants for x in ("--variant", vr.spec(v)))
    return (*builds, "--target", run.target, *(("--repo", run.repo) if run.repo else ()),
            *(("--budget", budget_text) if run.budget else ()), *run.command_line,
            "--json", str(json_path), "-o", str(summary))


def baseline(db: History, req: NightRequest, repo_url: str, say: Callable[[str], None] = _stderr,
             watched: Watched | None = None) -> tuple[str, str]:
    """(tonight's baseline, the mode recorded): the base ref, or since last night the watched ref's
    commit of the series' last recorded night (the base ref on the first night). An
    implementation's series is measured against tonight's head, whatever the mode: its own
    program never moves, so it is the head it is set beside (IMPL_MODE)."""
    w = watched or Watched(req.head)
    if w.impl:
        return w.ref, IMPL_MODE
    key = w.key
    if req.since_last:
        prev = db.last_head(req.run.target, repo_url, key, req.machine)
        if prev:
            return prev, "since-last"
        say(f"nightly: no earlier run of {key} in {db.display}: comparing with {req.base} tonight")
    return req.base, "release"


def alarm(rule: str, found: list[Shift], slower: list) -> int:
    """The exit code: 1 on a new shift to slower (lasting: a lasting verdict or a change point;
    changepoint), on a step tonight's run calls slower (verdict), or on either (both)."""
    if rule in ("lasting", "changepoint", "both") and any(c.alarm for c in found):
        return EXIT_REGRESSION
    if rule in ("verdict", "both") and slower:
        return EXIT_REGRESSION
    return EXIT_OK


# ---- the night's record: written to the history, or kept beside the results ---------------------
RECORD_FILE = "night-record.json"
RECORD_SCHEMA = "refbench/night-record"


@dataclass(frozen=True)
class NightRecord:
    """What History.record_run writes for a night, less the results (its results.json, named by
    results_path): kept in RECORD_FILE beside the results when the history cannot take it, and
    recorded from there later (`nightly --replay FILE`)."""
    started: str
    mode: str
    base_ref: str
    head_ref: str
    exit_code: int
    machine: str
    target: str | None = None
    repo: str | None = None
    error: str | None = None
    results_path: str | None = None  # the night's results.json; None when the run failed

    def to_json(self) -> dict:
        return {"schema": RECORD_SCHEMA, "version": 1, **asdict(self)}

    @classmethod
    def load(cls, path: Path) -> "NightRecord":
        """A kept record; a file that is not one is one RefbenchError naming the file and key."""
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise RefbenchError(f"{path}: cannot read a night's record: {getattr(e, 'strerror', None) or e}") from None
        if not isinstance(doc, dict) or doc.get("schema") != RECORD_SCHEMA:
            raise RefbenchError(f"{path}: not a night's record (schema {RECORD_SCHEMA!r} expected)")
        kw = {}
        for f in fields(cls):
            if f.name not in doc and f.default is MISSING:
                raise RefbenchError(f"{path}: a night's record needs {f.name!r}")
            kw[f.name] = doc.get(f.name)
        if not isinstance(kw["exit_code"], int):
            raise RefbenchError(f"{path}: exit_code should be a whole number, got {kw['exit_code']!r}")
        return cls(**kw)


class Unrecorded(RefbenchError):
    """The history could not take a night's record; it is kept in `kept` instead."""

    def __init__(self, why: RefbenchError, kept: Path):
        super().__init__(f"{why}; the night's record is kept in {kept}: record it with "
                         f"`bench.py nightly --history DB --replay {kept}` (the alarm is decided then)")
        self.kept = kept


def keep(db: History, record: NightRecord, results: Results | None, where: Path) -> int:
    """Record the night in the history and return its run id; when the history cannot take it,
    write the record to `where`/RECORD_FILE (the results are already beside it) and raise
    Unrecorded, which says how to replay it."""
    try:
        return db.record_run(**asdict(record), results=results)
    except RefbenchError as e:
        kept = Path(where) / RECORD_FILE
        with writing(kept, "the night's record"):
            kept.write_text(json.dumps(record.to_json(), indent=1) + "\n")
        raise Unrecorded(e, kept) from None


# ---- the night ------------------------------------------------------------------------------
def night(db: History, req: NightRequest, measure: Measure, say: Callable[[str], None] = _stderr,
          env: runenv.RunEnv | None = None) -> NightOutcome:
    """Tonight's run of each series (the head, then each variant's), recorded in the
    history (a failed one too, with its error), the lasting regressions and new change points it
    completes, the trend page redrawn. A series that fails does not stop the others: the night
    raises the first failure once every series is recorded. A record the history cannot take is
    kept beside the results (keep) and the night exits 2. `env`: the RunEnv whose builder resolves
    the head (default: this machine's), the one `measure` runs on."""
    started = req.clock()
    scenarios = req.run.scenarios_path()
    target = load_config(scenarios).targets.get(req.run.target)
    if target is None:
        raise RefbenchError(f"unknown target {req.run.target!r} in {scenarios}")
    # git: the head is resolved to a commit, whatever source the run builds from
    builder = (env or runenv.real()).builder(runenv.BuildSite(request=req.run.replace(source="git"), target=target))
    night_dir = req.out_dir or req.home / "nightly" / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    outcomes, failure = [], None
    for w in req.watched():
        try:
            outcomes.append(series_night(db, req, w, started, builder, night_dir, measure, say))
        except Exception as e:  # recorded by series_night; the other series still run
            failure = failure or e
    if failure is not None:
        raise failure
    head, *variants = outcomes
    return replace(head, code=max(o.code for o in outcomes), variants=tuple(variants))


def series_night(db: History, req: NightRequest, w: Watched, started: str, builder: bl.Builder, night_dir: Path,
                 measure: Measure, say: Callable[[str], None]) -> NightOutcome:
    """One series' night: its baseline, its run measured and recorded (a failed one too,
    with its error, before it raises), and judged."""
    repo_url = builder.repo_url  # what results.json records as target.repo
    base, mode = baseline(db, req, repo_url, say, w)
    out_dir = w.out_dir(night_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary, json_path = out_dir / "summary.md", out_dir / "results.json"
    tonight = w.series_request(req.run, base)
    tonight = tonight.replace(command_line=record_line(tonight, req.budget_text, summary, json_path))
    record = NightRecord(started=started, mode=mode, base_ref=base, head_ref=w.key, exit_code=EXIT_OK,
                         machine=req.machine, target=req.run.target, repo=repo_url)
    say(f"nightly: {w.says(base)} ({mode}); results in {out_dir}")
    try:
        if mode == "since-last" and builder.resolve(w.ref).sha == base:
            say(f"nightly: {w.key} is still {base[:10]}, as last night: nothing new to compare")
            return NightOutcome(EXIT_OK, redraw(db, req), out_dir=out_dir, head_ref=w.key)
        results = measure(tonight, summary, json_path)
    except Exception as e:  # a failed night (2) or refbench's own failure (3): recorded too
        code = e.code if isinstance(e, RefbenchError) else EXIT_CRASH
        failed(db, replace(record, exit_code=code, error=str(e) or type(e).__name__), out_dir, req, say)
        raise
    run_id = keep(db, replace(record, results_path=str(json_path)), results, out_dir)
    return judged(db, replace(req, head=w.key), results, run_id, out_dir, alarms=w.impl is None)


def redraw(db: History, req: NightRequest) -> Path:
    """The trend page, drawn by the request's `draw` and written."""
    return write_page(req.trend, req.draw(trend_page(db, target=req.show_target, machine=req.show_machine,
                                                     params=req.params, statistic=req.statistic,
                                                     variants=req.bisect_variants(), clock=req.clock)))


def failed(db: History, record: NightRecord, out_dir: Path, req: NightRequest, say: Callable[[str], None]) -> None:
    """A failed night's record and trend page, neither of which may hide why the night failed:
    what goes wrong here is said, and the night's own error is what it ends with."""
    try:
        keep(db, record, None, out_dir)
        redraw(db, req)
    except RefbenchError as e:
        say(f"nightly: warning: {e}")


def judged(db: History, req: NightRequest, results: Results, run_id: int, out_dir: Path | None,
           alarms: bool | None = None) -> NightOutcome:
    """A recorded night's alarm: the lasting regressions and new change points it completes (they
    are recorded), its exit code, the trend page redrawn. An implementation's series (`alarms`
    False; by default, read from its key) never alarms: its tonight's verdict is another program
    against the head, slower or faster by design, and a shift in its own pinned program's times is
    the machine's, the fixture's or the server's, not a commit's. Its change points are found,
    recorded and shown all the same (a control beside the head's series)."""
    alarms = impl_of(req.head) is None if alarms is None else alarms
    slower = results.regressions()
    # the lasting rule first: it records what it reports, so Otava confirming the same step a
    # night or two later is not a second alarm
    variants = req.bisect_variants()
    lasting = lasting_regressions(db, target=results.target.name, machine=req.machine, head_ref=req.head,
                                  tol=max(1, req.params.min_nights), run_id=run_id,
                                  variants=variants, clock=req.clock) if req.alarm == "lasting" and alarms else []
    found = new_changepoints(db, target=results.target.name, machine=req.machine, head_ref=req.head,
                             params=req.params, statistic=req.statistic, run_id=run_id, variants=variants,
                             alarms=alarms, clock=req.clock)
    code = alarm(req.alarm, found + lasting, slower) if alarms else EXIT_OK
    slower = slower if alarms else []  # another program against the head: no regression of the head's
    if code != EXIT_OK:
        db.set_exit_code(run_id, code)
    return NightOutcome(code, redraw(db, req), results, run_id, out_dir, tuple(slower), tuple(lasting), tuple(found),
                        req.machine, req.head)


def replay(db: History, req: NightRequest, path: Path) -> NightOutcome:
    """A kept night's record (RECORD_FILE) recorded in the history at last, with its results, and
    judged as the night would have been (the alarm is the exit code); a failed night's record is
    recorded with its error and exits 0 (the failure was reported that night). The file is removed
    once recorded, so a second replay cannot record the night twice."""
    record = NightRecord.load(path)
    where = Path(path).parent
    results = _results_of(record, where)
    req = replace(req, machine=record.machine, head=record.head_ref)
    run_id = db.record_run(**asdict(record), results=results)
    Path(path).unlink()
    if results is None:
        return NightOutcome(EXIT_OK, redraw(db, req), run_id=run_id, out_dir=where, head_ref=record.head_ref)
    return judged(db, req, results, run_id, where)


def _results_of(record: NightRecord, where: Path) -> Results | None:
    """The kept night's results: at the path it names, else beside the record (a copied directory)."""
    if not record.results_path:
        return None
    named = Path(record.results_path)
    return load_results(named if named.exists() else where / named.name)
