"""The nightly run: compare latest_release with master (or last night's master with tonight's),
keep every run in a history (a SQLite file, or a PostgreSQL URL many runners share), look for
change points in each step's series of nights, render a trend page, and alarm.

    bench.py nightly --history bench.db|postgresql://... [--since-last] [--machine NAME] [run options ...]

Run options (--repo, --quick, --only, -r, -w, --rounds, --threshold, --builds-dir, ...) pass
through to the comparison. The alarm (exit 1) is, by default, a *new change point*: per step, the
watched build's nightly median (--cp-statistic) on this machine type goes through Apache Otava's
E-Divisive (refbench.changepoints); a shift to slower that has held --cp-min-nights nights, beyond
--cp-magnitude and below --cp-pvalue, and was not reported before, exits 1 with the commit range
and the ready bisect command. A single slow night never alarms. `--alarm verdict` keeps the old
rule (exit 1 when tonight's comparison calls a step slower); `--alarm both` does both.
Exit codes: 0 no alarm; 1 alarm; 2 an error (recorded too). This module holds the history's
series, the change points and the trend page; the command itself is refbench/commands/nightly.py.
"""
from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np

from . import changepoints as cpd
from .render.env import render as render_template
from .render.format import fmt_pct
from .history import History, now as _now


def record_run(db: History, **kw) -> int:
    return db.record_run(**kw)


def last_head(db: History, target: str, repo: str, head_ref: str, machine: str | None = None) -> str | None:
    return db.last_head(target, repo, head_ref, machine)


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


def find_changepoints(nights: list[dict], params: cpd.Params, statistic: str = "median") -> list[dict]:
    """The change points of one series, as rows for the trend page and the history."""
    values = [n[f"h_{statistic}"] if n.get(f"h_{statistic}") is not None else n["h_mean"] for n in nights]
    out = []
    for c in cpd.detect(values, params):
        good, bad = nights[c.index - 1], nights[c.index]
        out.append({"index": c.index, "run_id": bad["id"], "prev_run_id": good["id"], "good_sha": good["h_sha"],
                    "bad_sha": bad["h_sha"], "rel": c.rel, "pvalue": c.pvalue, "before": c.before,
                    "after": c.after, "slower": c.slower, "good_started": good["started"],
                    "bad_started": bad["started"],
                    "bisect": bisect_line(good["h_sha"], bad["h_sha"], bad["scenario"], bad["step"],
                                          bad["target"], bad["repo"])})
    return out


def new_changepoints(db: History, *, target: str, machine: str, head_ref: str, params: cpd.Params,
                     statistic: str, run_id: int | None) -> list[dict]:
    """Change points not reported before (a known one may move by up to --cp-min-nights nights as
    nights accumulate); they are recorded, and the slower ones are the alarm."""
    known: dict[tuple, list[tuple[int, bool]]] = {}
    for k in db.known_changepoints(target, machine):
        if k["head_ref"] == head_ref:
            known.setdefault((k["scenario"], k["step"]), []).append((k["run_id"], (k["rel"] or 0) > 0))
    tol = max(1, params.min_nights)
    rows = []
    for (tg, mc, hr, sc, st), nights in series(db, target, machine, head_ref).items():
        pos = {n["id"]: i for i, n in enumerate(nights)}
        for c in find_changepoints(nights, params, statistic):
            if any(rid in pos and abs(pos[rid] - c["index"]) <= tol and slower == c["slower"]
                   for rid, slower in known.get((sc, st), [])):
                continue
            rows.append({"target": tg, "repo": nights[0]["repo"], "machine": mc, "head_ref": hr, "scenario": sc,
                         "step": st, "statistic": statistic, "run_id": c["run_id"], "prev_run_id": c["prev_run_id"],
                         "good_sha": c["good_sha"], "bad_sha": c["bad_sha"], "rel": c["rel"], "pvalue": c["pvalue"],
                         "before": c["before"], "after": c["after"], "detected_run_id": run_id,
                         "detected_at": _now(), "alarm": int(c["slower"]), "bisect": c["bisect"]})
    db.add_changepoints([{k: v for k, v in r.items() if k != "bisect"} for r in rows])
    return rows


# ---- lasting regressions: two nights in a row above the level before them ---------------------
LASTING_PRIOR, LASTING_MIN_PRIOR = 7, 3  # nights that set the level before the two; fewest that can


def _up_pair(values: list[float], end: int, threshold: float) -> float | None:
    """The change of nights end-1 and end (the smaller) over the median of the nights before them,
    when both lie beyond the threshold and beyond 3 robust σ of those nights' own scatter."""
    prior = values[max(0, end - 1 - LASTING_PRIOR):end - 1]
    if end < 1 or len(prior) < LASTING_MIN_PRIOR:
        return None
    level = float(np.median(prior))
    if level <= 0:
        return None
    spread = 1.4826 * float(np.median(np.abs(np.asarray(prior) / level - 1)))
    rel = min(values[end - 1], values[end]) / level - 1
    return rel if rel > max(threshold, 3 * spread) else None


def lasting_shift(values: list[float], threshold: float) -> float | None:
    """A regression that lasts, on its second night: the last two nights both beyond the level of
    the nights before them, and the night before them not already the second of such a pair (so
    it alarms once). A one-night spike is one night: it never alarms. Slow drifts that no pair of
    nights shows are left to the change points."""
    n = len(values)
    rel = _up_pair(values, n - 1, threshold)
    return rel if rel is not None and _up_pair(values, n - 2, threshold) is None else None


def lasting_regressions(db: History, *, target: str, machine: str, head_ref: str, threshold: float,
                        statistic: str = "median") -> list[dict]:
    """Steps whose watched build turned slower for good, found on the second night (see lasting_shift)."""
    out = []
    for (tg, mc, hr, sc, st), nights in series(db, target, machine, head_ref).items():
        values = [n[f"h_{statistic}"] if n.get(f"h_{statistic}") is not None else n["h_mean"] for n in nights]
        rel = lasting_shift(values, threshold)
        if rel is not None:
            good, bad = nights[-3], nights[-2]
            out.append({"scenario": sc, "step": st, "rel": rel, "good_sha": good["h_sha"], "bad_sha": bad["h_sha"],
                        "run_id": bad["id"], "bisect": bisect_line(good["h_sha"], bad["h_sha"], sc, st, tg,
                                                                   nights[0]["repo"])})
    return out


# ---- the trend page ------------------------------------------------------------------------
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 720, 230, 64, 60, 26, 40


def trend_data(db: History, target: str | None = None, machine: str | None = None,
               params: cpd.Params = cpd.Params(), statistic: str = "median") -> list[dict]:
    """One chart per (target, machine, watched ref, scenario, step): the head's mean ± σ and the
    baseline's mean, night by night, with the series' change points."""
    all_series = series(db, target, machine)
    known = {(k["target"], k["machine"], k["head_ref"], k["scenario"], k["step"], k["run_id"])
             for k in db.known_changepoints(target, machine)}
    several = len({k[:3] for k in all_series}) > 1
    charts = []
    for key, pts in all_series.items():
        cps = find_changepoints(pts, params, statistic)
        for c in cps:
            c["alarmed"] = (*key, c["run_id"]) in known and c["slower"]
        charts.append(_chart(key, pts, cps, several))
    return charts


def _chart(key: tuple, pts: list[dict], cps: list[dict], several: bool) -> dict:
    target, machine, head_ref, scenario, step = key
    top = max(max(p["h_mean"] + (p["h_sd"] or 0), p["b_mean"]) for p in pts) * 1.15 or 1.0
    n = len(pts)
    plot_w, plot_h = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def x(i):
        return PAD_L + (plot_w / 2 if n == 1 else i * plot_w / (n - 1))

    def y(v):
        return PAD_T + plot_h * (1 - v / top)

    points = []
    for i, p in enumerate(pts):
        sd = p["h_sd"] or 0.0
        points.append({
            "x": round(x(i), 1), "y": round(y(p["h_mean"]), 1), "by": round(y(p["b_mean"]), 1),
            "y_hi": round(y(p["h_mean"] + sd), 1), "y_lo": round(y(max(0.0, p["h_mean"] - sd)), 1),
            "slower": p["verdict"] == "slower", "faster": p["verdict"] == "faster",
            "title": (f"run {p['id']} {p['started']}: {p['h_label']} {p['h_sha'][:10]} {p['h_mean']:.3f} s ± {sd:.3f} "
                      f"vs {p['b_label']} {p['b_sha'][:10]} {p['b_mean']:.3f} s: {p['verdict']} "
                      f"({fmt_pct(p['rel'])})"),
            "date": p["started"][:10], "run": p["id"],
        })
    for c in cps:
        c["x"] = round((x(c["index"] - 1) + x(c["index"])) / 2, 1)
        c["y_before"], c["y_after"] = round(y(c["before"]), 1), round(y(c["after"]), 1)
        c["x_start"] = round(x(max(0, c["index"] - 1)), 1)
        c["x_end"] = round(x(c["index"]), 1)
    ticks = [{"y": round(y(top * k / 4), 1), "label": f"{top * k / 4:.3g} s"} for k in range(5)]
    return {
        "target": target or "", "machine": machine or "", "head_ref": head_ref or "", "several": several,
        "scenario": scenario, "step": step, "points": points, "ticks": ticks, "width": W, "height": H,
        "left": PAD_L, "right": W - PAD_R, "bottom": H - PAD_B, "top": PAD_T,
        "head_path": " ".join(f"{'M' if i == 0 else 'L'}{p['x']},{p['y']}" for i, p in enumerate(points)),
        "base_path": " ".join(f"{'M' if i == 0 else 'L'}{p['x']},{p['by']}" for i, p in enumerate(points)),
        "regressions": sum(p["slower"] for p in points), "last": pts[-1], "changepoints": cps,
    }


def render_trend(db: History, path: Path, title: str = "refbench nightly", target: str | None = None,
                 machine: str | None = None, params: cpd.Params = cpd.Params(), statistic: str = "median") -> Path:
    runs = db.recent_runs(60, target, machine)
    machines, targets = db.machines_and_targets()
    text = render_template(
        "trend.html.j2", title=title, charts=trend_data(db, target, machine, params, statistic), runs=runs,
        generated=_now(), machines=machines, targets=targets, shown_target=target, shown_machine=machine,
        params=params, statistic=statistic)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path
