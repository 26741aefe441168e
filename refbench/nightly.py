"""The nightly run: compare latest_release with master (or last night's master with tonight's),
keep every run in a history (a SQLite file, or a PostgreSQL URL many runners share), look for
change points in each step's series of nights, render a trend page, and alarm.

    bench.py nightly --history bench.db|postgresql://... [--since-last] [--machine NAME] [run options ...]

Run options (--repo, --quick, --only, -r, -w, --rounds, --threshold, --builds-dir, ...) pass
through to the comparison. The alarm (exit 1) is, by default, a *lasting regression*: a step
tonight's comparison calls slower on its second night running (against last night's head: a jump
that held), or a *new change point*: per step, the watched build's nightly median (--cp-statistic)
on this machine type goes through Apache Otava's E-Divisive (refbench.changepoints); a shift to
slower that has held --cp-min-nights nights, beyond --cp-magnitude and below --cp-pvalue, and was
not reported before, exits 1 with the commit range and the ready bisect command. A single slow
night never alarms. `--alarm changepoint` uses change points alone, `--alarm verdict` any slower
verdict tonight, `--alarm both` either.
Exit codes: 0 no alarm; 1 alarm; 2 an error (recorded too). This module holds the history's
series, the change points and the trend page; the command itself is refbench/commands/nightly.py.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from . import changepoints as cpd
from .history import History, now as _now
from .render.trend import render_trend
from .verdict import Verdict


# ---- change points -------------------------------------------------------------------------
def series(db: History, target: str | None = None, machine: str | None = None, head_ref: str | None = None
           ) -> dict[tuple, list[dict]]:
    """{(target, machine, head_ref, scenario, step): nights oldest first}."""
    out: dict[tuple, list[dict]] = {}
    for r in db.nights(target, machine):
        if head_ref and r["head_ref"] != head_ref:
            continue
        out.setdefault((r["target"], r["machine"], r["head_ref"], r["scenario"], r["step"]), []).append(r)
    return out


def bisect_line(good: str, bad: str, scenario: str, step: str, target: str | None, repo: str | None) -> str:
    parts = ["./bench.py", "bisect", good[:12], bad[:12], "--only", f"{scenario}/{step}"]
    if target and target != "s5cmd":
        parts += ["-t", target]
    if repo and "://" not in repo:  # a local origin; a URL is usually the target's own repo
        parts += ["--repo", repo]
    return " ".join(shlex.quote(p) for p in parts)


@dataclass(frozen=True)
class NightlyChangePoint:
    """A change point of a step's series of nights (changepoints.ChangePoint), placed in the
    history: between the last good night and the first bad one, with their commits."""
    index: int  # position of the first bad night in the series
    run_id: int  # the first bad night's run
    prev_run_id: int  # the last good night's run
    good_sha: str
    bad_sha: str
    rel: float  # after / before - 1 (> 0: slower)
    pvalue: float
    before: float  # the statistic's median before and after
    after: float
    slower: bool
    good_started: str
    bad_started: str
    bisect: str  # the ready `bench.py bisect` command line
    alarmed: bool = False  # reported with an alarm on an earlier night (the trend page says so)


def find_changepoints(nights: list[dict], params: cpd.Params, statistic: str = "median") -> list[NightlyChangePoint]:
    """The change points of one series, for the trend page and the history."""
    values = [n[f"h_{statistic}"] if n.get(f"h_{statistic}") is not None else n["h_mean"] for n in nights]
    out = []
    for c in cpd.detect(values, params):
        good, bad = nights[c.index - 1], nights[c.index]
        out.append(NightlyChangePoint(
            index=c.index, run_id=bad["id"], prev_run_id=good["id"], good_sha=good["h_sha"], bad_sha=bad["h_sha"],
            rel=c.rel, pvalue=c.pvalue, before=c.before, after=c.after, slower=c.slower,
            good_started=good["started"], bad_started=bad["started"],
            bisect=bisect_line(good["h_sha"], bad["h_sha"], bad["scenario"], bad["step"], bad["target"], bad["repo"])))
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


def lasting_start(nights: list[dict]) -> int | None:
    """The first slow night of a regression that tonight (the last night) shows has lasted, or None.

    Against a fixed baseline (release mode), a lasting regression is `slower` tonight and the night
    before, and not the night before that (a streak alarms once). Against last night (since-last),
    the night before jumped to `slower` and tonight did not come back (`faster`): the new level
    held. Either way a one-night spike (slower, then back) never counts."""
    if len(nights) < 2 or nights[-2]["verdict"] != Verdict.SLOWER:
        return None
    last = nights[-1]
    if last["mode"] == "since-last":
        return len(nights) - 2 if last["verdict"] != Verdict.FASTER else None
    if last["verdict"] != Verdict.SLOWER or (len(nights) >= 3 and nights[-3]["verdict"] == Verdict.SLOWER
                                               and nights[-3]["mode"] != "since-last"):
        return None
    return len(nights) - 2


def _shift_row(nights: list[dict], index: int, *, statistic: str, rel: float, pvalue: float | None,
               before: float | None, after: float | None, alarm: bool, run_id: int | None) -> dict:
    """A reported shift as the history's changepoints table holds it, with its bisect line."""
    good, bad = nights[index - 1] if index else nights[index], nights[index]
    return {"target": bad["target"], "repo": nights[0]["repo"], "machine": bad["machine"],
            "head_ref": bad["head_ref"], "scenario": bad["scenario"], "step": bad["step"], "statistic": statistic,
            "run_id": bad["id"], "prev_run_id": good["id"], "good_sha": good["h_sha"], "bad_sha": bad["h_sha"],
            "rel": rel, "pvalue": pvalue, "before": before, "after": after, "detected_run_id": run_id,
            "detected_at": _now(), "alarm": int(alarm),
            "bisect": bisect_line(good["h_sha"], bad["h_sha"], bad["scenario"], bad["step"], bad["target"],
                                  bad["repo"])}


def _record(db: History, rows: list[dict]) -> list[dict]:
    db.add_changepoints([{k: v for k, v in r.items() if k != "bisect"} for r in rows])
    return rows


def lasting_regressions(db: History, *, target: str, machine: str, head_ref: str, tol: int,
                        run_id: int | None) -> list[dict]:
    """Steps whose regression tonight shows has lasted two nights (`lasting_start`), not reported
    before. They are recorded as shifts (statistic "verdict"), so the change-point rule does not
    report the same step again when Otava confirms it a night or two later."""
    known = _known(db, target, machine, head_ref)
    rows = []
    for (_tg, _mc, _hr, sc, st), nights in series(db, target, machine, head_ref).items():
        if run_id is not None and nights[-1]["id"] != run_id:
            continue  # this step was not measured tonight
        index = lasting_start(nights)
        if index is None or _reported(known.get((sc, st), []), {n["id"]: i for i, n in enumerate(nights)},
                                      index, True, tol):
            continue
        bad = nights[index]
        rows.append(_shift_row(nights, index, statistic="verdict", rel=bad["rel"], pvalue=None,
                               before=nights[index - 1]["h_median"] if index else None,
                               after=bad["h_median"], alarm=True, run_id=run_id))
    return _record(db, rows)


def new_changepoints(db: History, *, target: str, machine: str, head_ref: str, params: cpd.Params,
                     statistic: str, run_id: int | None) -> list[dict]:
    """Change points not reported before (a known one may move by up to --cp-min-nights nights as
    nights accumulate); they are recorded, and the slower ones are the alarm."""
    known = _known(db, target, machine, head_ref)
    tol = max(1, params.min_nights)
    rows = []
    for (_tg, _mc, _hr, sc, st), nights in series(db, target, machine, head_ref).items():
        pos = {n["id"]: i for i, n in enumerate(nights)}
        for c in find_changepoints(nights, params, statistic):
            if _reported(known.get((sc, st), []), pos, c.index, c.slower, tol):
                continue
            rows.append(_shift_row(nights, c.index, statistic=statistic, rel=c.rel, pvalue=c.pvalue,
                                   before=c.before, after=c.after, alarm=c.slower, run_id=run_id))
    return _record(db, rows)


# ---- the trend page ------------------------------------------------------------------------
@dataclass(frozen=True)
class TrendSeries:
    """One chart of the trend page: a step's nights (oldest first) on one machine type for one
    watched ref, and the change points found in them."""
    target: str | None
    machine: str | None
    head_ref: str | None
    scenario: str
    step: str
    nights: tuple[dict, ...]  # the history's rows (History.nights)
    changepoints: tuple[NightlyChangePoint, ...]


def trend_series(db: History, target: str | None = None, machine: str | None = None,
                 params: cpd.Params = cpd.Params(), statistic: str = "median") -> list[TrendSeries]:
    """One series per (target, machine, watched ref, scenario, step), with its change points; a
    change point reported before with an alarm is marked alarmed."""
    known = {(k["target"], k["machine"], k["head_ref"], k["scenario"], k["step"], k["run_id"])
             for k in db.known_changepoints(target, machine)}
    return [TrendSeries(*key, nights=tuple(nights),
                        changepoints=tuple(replace(c, alarmed=(*key, c.run_id) in known and c.slower)
                                           for c in find_changepoints(nights, params, statistic)))
            for key, nights in series(db, target, machine).items()]


def write_trend(db: History, path: Path, title: str = "refbench nightly", target: str | None = None,
                machine: str | None = None, params: cpd.Params = cpd.Params(), statistic: str = "median") -> Path:
    """The trend page of the history (or of one target / machine), written atomically: a browser
    or a web server reading it mid-write sees the old page or the new one, never half of one."""
    text = render_trend(trend_series(db, target, machine, params, statistic), title=title,
                        runs=db.recent_runs(60, target, machine), generated=_now(),
                        machines_and_targets=db.machines_and_targets(), shown_target=target,
                        shown_machine=machine, params=params, statistic=statistic)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path
