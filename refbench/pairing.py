"""The pairing of two saved runs' steps, the model `bench.py compare` renders: per paired build
and step, a contrast (figures.Contrast) of the new run's times against the old one's, and of
every other metric both runs measured in every run (CPU, memory, instructions), each with a verdict against its threshold,
judged as one family by the verdict engine (refbench.judge), as a run judges its own; plus what
exists in only one of them, and where both runs counted a build's S3 requests, every counter that
differs (exact, like a run's own request changes). Two runs' rounds are not blocks of one another,
so the runs are compared unblocked. Rendered by render.markdown.render_pairing_md."""
from __future__ import annotations

from dataclasses import dataclass

from . import figures, judge, verdict
from .accounting import changes as request_changes
from .results import Fixture, RequestChange, Results, Samples, Scenario, contrastable, Step, read_contrast
from .metrics import table
from .verdict import asked


@dataclass(frozen=True)
class StepChange:
    """One step of one matched pair of builds: old run's times against the new run's."""
    scenario: str
    step: str
    old_build: str
    new_build: str
    old_mean: float
    new_mean: float
    old_n: int
    new_n: int
    contrast: figures.Contrast  # as a results file would hold it (unbounded ends None)
    fixture_differs: bool  # the step ran on a different fixture: not like-for-like
    notes: tuple[str, ...]
    # the new run's requests against the old run's for this build (empty: equal, or not counted in both)
    request_changes: tuple[RequestChange, ...] = ()
    # the other metrics both runs measured in every run (cpu, memory, instructions), judged alike
    metric_contrasts: tuple[figures.Contrast, ...] = ()

    def all_contrasts(self) -> tuple[figures.Contrast, ...]:
        """Every metric's contrast, wall first: the family members this row adds."""
        return (self.contrast, *self.metric_contrasts)

    def to_json(self) -> dict:
        return {"scenario": self.scenario, "step": self.step, "old_build": self.old_build,
                "new_build": self.new_build, "old_mean": self.old_mean, "new_mean": self.new_mean,
                "old_n": self.old_n, "new_n": self.new_n, "c": self.contrast.to_json(),
                "metrics": [c.to_json() for c in self.metric_contrasts],
                "fixture_differs": self.fixture_differs, "notes": list(self.notes),
                "request_changes": [c.to_json() for c in self.request_changes]}


@dataclass(frozen=True)
class RunPairing:
    """Two saved runs compared: the changes, and what does not match up (steps or builds in only
    one run, and differences of target, machine or sizes that make the changes less telling)."""
    old_created: str | None
    new_created: str | None
    old_builds: tuple[str, ...]
    new_builds: tuple[str, ...]
    match: str  # "label" or "position"
    pairs: tuple[tuple[str, str], ...]  # (old label, new label)
    rows: tuple[StepChange, ...]
    counts: dict[str, int]  # verdict -> rows
    threshold: float
    alpha: float
    only_old: tuple[str, ...]  # "scenario / step" of steps only in the old run
    only_new: tuple[str, ...]
    builds_only_old: tuple[str, ...]  # labels paired with nothing
    builds_only_new: tuple[str, ...]
    warnings: tuple[str, ...]  # why the two runs may not be comparable

    def to_json(self) -> dict:
        """The `compare --json` document (its keys and order are what scripts read)."""
        return {
            "old": {"created": self.old_created, "builds": list(self.old_builds)},
            "new": {"created": self.new_created, "builds": list(self.new_builds)},
            "match": self.match, "pairs": [list(p) for p in self.pairs], "rows": [r.to_json() for r in self.rows],
            "counts": dict(self.counts), "threshold": self.threshold, "alpha": self.alpha,
            "only_old": list(self.only_old), "only_new": list(self.only_new),
            "builds_only_old": list(self.builds_only_old), "builds_only_new": list(self.builds_only_new),
            "warnings": list(self.warnings),
        }


def _steps(results: Results) -> dict[tuple[str, str], tuple[Scenario, Step]]:
    return {(sc.name, st.name): (sc, st) for sc, st in results.steps()}


def _pairs(old_labels: tuple[str, ...], new_labels: tuple[str, ...], match: str) -> list[tuple[str, str]]:
    if match == "position":
        return list(zip(old_labels, new_labels))
    return [(lab, lab) for lab in old_labels if lab in new_labels]


def _fixture_differs(old: Fixture, new: Fixture) -> bool:
    return (old.kind, old.files, old.bytes) != (new.kind, new.files, new.bytes)


def _warnings(old: Results, new: Results) -> list[str]:
    """What makes the two runs less than like-for-like: target, machine, --quick."""
    warnings = []
    if old.target.name != new.target.name:
        warnings.append(f"different targets: {old.target.name} vs {new.target.name}")
    for f in ("host", "cpu_model", "cpus"):
        a, b = getattr(old.environment, f), getattr(new.environment, f)
        if a != b:
            warnings.append(f"different {f}: {a} vs {b}")
    if old.settings.quick != new.settings.quick:
        warnings.append("one run used --quick sizes and the other not")
    return warnings


def _metrics(ol: str, ob: Samples, nl: str, nb: Samples, criteria: figures.Criteria,
             family_size: int) -> list[figures.Contrast]:
    """Every metric both builds have a figure of in every run, wall first, as stats compares them."""
    out = []
    for metric in table().names:  # the daemon's too, where both runs probed it (their own family)
        if not asked(metric, criteria.metric_thresholds):  # the S3 server's CPU: context unless asked
            continue
        x, y = ob.values(metric), nb.values(metric)
        if x is not None and y is not None and contrastable(x, y):
            out.append(judge.contrast_metric(metric, f"{ol} (old)", x, f"{nl} (new)", y, criteria,
                                             family_size=family_size))
    return out


def _matched(old: Results, new: Results, pairs) -> list[tuple[tuple[str, str], str, str, Step, Step, bool]]:
    """(step key, old label, new label, old step, new step, fixture differs) of every step and pair
    of builds both runs measured."""
    os_, ns_ = _steps(old), _steps(new)
    out = []
    for key in [k for k in os_ if k in ns_]:
        (osc, ost), (nsc, nst) = os_[key], ns_[key]
        for ol, nl in pairs:
            ob, nb = ost.builds.get(ol), nst.builds.get(nl)
            if ob and nb and ob.times and nb.times:
                out.append((key, ol, nl, ost, nst, _fixture_differs(osc.fixture, nsc.fixture)))
    return out


def pair_runs(old: Results, new: Results, criteria: figures.Criteria = figures.Criteria(),
                 match: str = "label") -> RunPairing:
    """Builds match by label (a nightly's `master` against last night's `master`), or by position
    (baseline with baseline, ...) with match="position". Every matched step's metrics are one
    family, adjusted together (judge.adjust_groups) as a run's steps × metrics are."""
    pairs = _pairs(old.labels, new.labels, match)
    old_sha = {b.label: b.sha or "" for b in old.builds}
    new_sha = {b.label: b.sha or "" for b in new.builds}
    matched = _matched(old, new, pairs)
    n_metrics = [sum(1 for m in table().names_of("timer") if ost.builds[ol].values(m) is not None and nst.builds[nl].values(m)
                     is not None) for _, ol, nl, ost, nst, _ in matched]
    family_size = max(1, sum(n_metrics))
    groups = judge.adjust_groups([_metrics(ol, ost.builds[ol], nl, nst.builds[nl], criteria, family_size)
                                  for _, ol, nl, ost, nst, _ in matched], criteria)
    rows = []
    for (key, ol, nl, ost, nst, fixture_differs), comps in zip(matched, groups):
        ob, nb = ost.builds[ol], nst.builds[nl]
        # as a results file would hold it, so compare prints what `report` would for the same numbers
        c, *others = [read_contrast(x.to_json()) for x in comps]
        notes = []
        if fixture_differs:
            notes.append("fixture differs: not like-for-like")
        if old_sha[ol] != new_sha[nl]:
            notes.append(f"commit {old_sha[ol][:10]} → {new_sha[nl][:10]}")
        if c.noisy:
            notes.append("noisy")
        oq, nq = (ost.requests or {}).get(ol), (nst.requests or {}).get(nl)
        rows.append(StepChange(scenario=key[0], step=key[1], old_build=ol, new_build=nl, old_mean=ob.stats.mean,
                               new_mean=nb.stats.mean, old_n=len(ob.times), new_n=len(nb.times),
                               contrast=c, fixture_differs=fixture_differs, notes=tuple(notes),
                               request_changes=request_changes(oq, nq, nl) if oq and nq else (),
                               metric_contrasts=tuple(others)))
    os_, ns_ = _steps(old), _steps(new)
    counts = verdict.count(r.contrast.verdict for r in rows)
    return RunPairing(
        old_created=old.created, new_created=new.created, old_builds=old.labels, new_builds=new.labels,
        match=match, pairs=tuple(pairs), rows=tuple(rows), counts=counts, threshold=criteria.threshold,
        alpha=criteria.alpha, only_old=tuple(f"{s} / {t}" for (s, t) in os_ if (s, t) not in ns_),
        only_new=tuple(f"{s} / {t}" for (s, t) in ns_ if (s, t) not in os_),
        builds_only_old=tuple(lab for lab in old.labels if lab not in {o for o, _ in pairs}),
        builds_only_new=tuple(lab for lab in new.labels if lab not in {n for _, n in pairs}),
        warnings=tuple(_warnings(old, new)))
