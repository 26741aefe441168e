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
Exit codes: 0 no alarm; 1 alarm; 2 an error (recorded too).
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import jinja2

from . import changepoints as cpd, report
from .cli import _Parser, _fraction, _positive, run_and_load
from .errors import EXIT_OK, EXIT_REGRESSION, RefbenchError
from .history import History, is_url, local_machine, now as _now, open_history

DEFAULT_BUDGET = "30m"  # a night has time: undecided steps get more rounds while they can still be decided
_RESERVED = ("-s", "--s5cmd", "--refs", "--json", "-o", "--output", "--output_file_name", "--format",
             "--dry-run", "--list", "--shard")


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
                      f"({report.fmt_pct(p['rel'])})"),
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
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(report.TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(pct=report.fmt_pct, p=report.fmt_p)
    runs = db.recent_runs(60, target, machine)
    machines, targets = db.machines_and_targets()
    text = env.get_template("trend.html.j2").render(
        title=title, charts=trend_data(db, target, machine, params, statistic), runs=runs, generated=_now(),
        machines=machines, targets=targets, shown_target=target, shown_machine=machine, params=params,
        statistic=statistic)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


# ---- the subcommand ------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bench.py nightly", description="Compare latest_release with master (or last night's "
                "master with tonight's), keep the run in a history (SQLite file or postgresql:// URL), render "
                "the trend page, and exit 1 on a new change point (or, with --alarm verdict, when a step turned "
                "slower tonight). Other options (--repo, --quick, --only, -r, -w, --rounds, --threshold, "
                "--builds-dir, ...) pass through to the comparison.")
    p.add_argument("--history", required=True, metavar="DB",
                   help="SQLite history file (created if missing) or a postgresql://user:pass@host/db URL")
    p.add_argument("--base", default="latest_release", help="baseline ref (default latest_release)")
    p.add_argument("--head", default="master", help="the ref to watch (default master)")
    p.add_argument("--since-last", action="store_true",
                   help="baseline = the HEAD commit of the last recorded run (falls back to --base on the first night)")
    p.add_argument("--machine", help="machine type recorded with the run; series and change points are per "
                   "machine type (default: CPU model x CPUs; env REFBENCH_MACHINE)")
    p.add_argument("--trend", help="trend page to write (default: trend.html beside the history)")
    p.add_argument("--out-dir", help="where each run's results.json and summary.md go "
                   "(default: nightly/<date> beside the history)")
    p.add_argument("--render-only", action="store_true", help="only re-render the trend page from the history")
    p.add_argument("--show-target", help="trend page: only this target")
    p.add_argument("--show-machine", help="trend page: only this machine type")
    p.add_argument("--budget", default=DEFAULT_BUDGET, metavar="DURATION",
                   help="time for the run's measuring: sequential sampling spent on the steps closest to a verdict "
                        f"(default {DEFAULT_BUDGET}; 'none' for the fixed-size run)")
    p.add_argument("-t", "--target", default="s5cmd")
    p.add_argument("--repo", help="origin to build from (default: the target's repo)")
    g = p.add_argument_group("alarm")
    g.add_argument("--alarm", choices=("changepoint", "verdict", "both"), default="changepoint",
                   help="changepoint: a new change point to slower (default); verdict: the old rule, tonight's "
                   "comparison calls a step slower; both")
    g.add_argument("--cp-statistic", choices=("median", "mean"), default="median",
                   help="per night value of the watched build (default median)")
    g.add_argument("--cp-window", type=_positive, default=cpd.Params.window, help="Otava window_len (nights)")
    g.add_argument("--cp-pvalue", type=_fraction, default=cpd.Params.max_pvalue,
                   help="a change point's p-value must be below this (Otava max_pvalue)")
    g.add_argument("--cp-magnitude", type=_fraction, default=None,
                   help="... and its relative change beyond this (Otava min_magnitude; default: --threshold, 5%%)")
    g.add_argument("--cp-min-nights", type=_positive, default=cpd.Params.min_nights,
                   help="nights a new level must hold before it alarms (1: a single slow night can)")
    return p


def _params(args, extra: list[str]) -> cpd.Params:
    magnitude = args.cp_magnitude
    if magnitude is None:
        magnitude = 0.05
        for i, a in enumerate(extra):
            if a == "--threshold" and i + 1 < len(extra):
                magnitude = _fraction(extra[i + 1])
            elif a.startswith("--threshold="):
                magnitude = _fraction(a.split("=", 1)[1])
    return cpd.Params(window=max(2, args.cp_window), max_pvalue=args.cp_pvalue, min_magnitude=magnitude,
                      min_nights=args.cp_min_nights)


def cmd_nightly(argv: list[str]) -> int:
    import os
    args, extra = parser().parse_known_args(argv)
    bad = [a for a in extra if a.split("=")[0] in _RESERVED]
    if bad:
        raise RefbenchError(f"nightly sets {bad[0]} itself; use --base/--head/--since-last")
    args.machine = args.machine or os.environ.get("REFBENCH_MACHINE") or local_machine()
    where = args.history if is_url(args.history) else str(Path(args.history).expanduser())
    home = Path.cwd() if is_url(where) else Path(where).parent
    trend = Path(args.trend) if args.trend else home / "trend.html"
    params = _params(args, extra)
    db = open_history(where)
    try:
        if args.render_only:
            page = render_trend(db, trend, target=args.show_target, machine=args.show_machine, params=params,
                                statistic=args.cp_statistic)
            print(f"nightly: wrote {page}", file=sys.stderr)
            return EXIT_OK
        return _nightly(db, args, extra, home, trend, params)
    finally:
        db.close()


def _nightly(db: History, args, extra, home: Path, trend: Path, params: cpd.Params) -> int:
    from . import builds as bl
    from .cli import DEFAULT_SCENARIOS
    from .config import load_config

    def redraw():
        return render_trend(db, trend, target=args.show_target, machine=args.show_machine, params=params,
                            statistic=args.cp_statistic)

    started = _now()
    scen = next((extra[i + 1] for i, a in enumerate(extra[:-1]) if a == "--scenarios"), str(DEFAULT_SCENARIOS))
    target = load_config(scen).targets.get(args.target)
    if target is None:
        raise RefbenchError(f"unknown target {args.target!r} in {scen}")
    builder = bl.Builder(target, Path(_builds_dir(extra)), args.repo)
    repo_url = builder.repo_url  # what results.json records as target.repo
    base, mode = args.base, "release"
    if args.since_last:
        prev = last_head(db, args.target, repo_url, args.head, args.machine)
        if prev:
            base, mode = prev, "since-last"
        else:
            print(f"nightly: no earlier run of {args.head} in {db.display}: comparing with {args.base} tonight",
                  file=sys.stderr)
    out_dir = Path(args.out_dir) if args.out_dir else \
        home / "nightly" / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "results.json"
    budget = [] if args.budget.lower() in ("none", "off", "0") else ["--budget", args.budget]
    run_argv = ["-s", base, args.head, "--target", args.target, *(["--repo", args.repo] if args.repo else []),
                *budget, *extra, "--json", str(json_path), "-o", str(out_dir / "summary.md")]
    print(f"nightly: {base} vs {args.head} ({mode}); results in {out_dir}", file=sys.stderr)
    try:
        if mode == "since-last":
            if builder.resolve(args.head).sha == base:
                print(f"nightly: {args.head} is still {base[:10]}, as last night: nothing new to compare",
                      file=sys.stderr)
                redraw()
                return EXIT_OK
        code, results = run_and_load(run_argv)
    except RefbenchError as e:
        record_run(db, started=started, mode=mode, base_ref=base, head_ref=args.head, results=None,
                   exit_code=e.code, error=str(e), target=args.target, repo=repo_url, machine=args.machine)
        redraw()
        raise
    if results is None:
        raise RefbenchError(f"the run wrote no results ({json_path})")
    slower = report.regressions(results)
    machine = args.machine
    run_id = record_run(db, started=started, mode=mode, base_ref=base, head_ref=args.head, results=results,
                        exit_code=EXIT_OK, results_path=str(json_path), machine=machine)
    found = new_changepoints(db, target=results["target"]["name"], machine=machine, head_ref=args.head,
                             params=params, statistic=args.cp_statistic, run_id=run_id)
    alarms = [c for c in found if c["alarm"]]
    code = EXIT_OK
    if args.alarm in ("changepoint", "both") and alarms:
        code = EXIT_REGRESSION
    if args.alarm in ("verdict", "both") and slower:
        code = EXIT_REGRESSION
    if code != EXIT_OK:
        db.set_exit_code(run_id, code)
    page = redraw()
    counts = report.verdict_counts(results)
    print(f"nightly: run {run_id} recorded in {db.display} (machine {machine}); trend page {page}", file=sys.stderr)
    print(f"nightly: {counts['slower']} slower, {counts['faster']} faster, {counts['no significant change']} "
          f"no significant change, {counts['inconclusive']} inconclusive")
    for sc, st, c in slower:
        print(f"REGRESSION {sc} / {st}: {c['contender']} is {report.fmt_pct(c['rel'])} vs {c['baseline']} "
              f"(95% CI {report.fmt_ci(c)}, p {report.fmt_p(c['p_value'])})"
              + ("" if args.alarm != "changepoint" else " (tonight's verdict; the alarm is a change point)"))
    for c in found:
        kind = "CHANGE POINT" if c["alarm"] else "change point (faster)"
        print(f"{kind} {c['scenario']} / {c['step']}: {report.fmt_pct(c['rel'])} (p {report.fmt_p(c['pvalue'])}) "
              f"between {c['good_sha'][:10]} (run {c['prev_run_id']}) and {c['bad_sha'][:10]} (run {c['run_id']}); "
              f"bisect: {c['bisect']}")
    return code


def _builds_dir(extra: list[str]) -> str:
    from . import paths
    for i, a in enumerate(extra):
        if a == "--builds-dir" and i + 1 < len(extra):
            return extra[i + 1]
        if a.startswith("--builds-dir="):
            return a.split("=", 1)[1]
    return str(paths.default_builds_dir())
