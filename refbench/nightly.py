"""The nightly run: compare latest_release with master (or last night's master with tonight's),
keep every run in a SQLite history, render a trend page, and exit 1 when a step turned slower.

    bench.py nightly --history bench.db [--since-last] [--trend trend.html] [run options ...]

Run options (--repo, --quick, --only, -r, -w, --rounds, --threshold, --builds-dir, ...) pass
through to the comparison. Exit codes: 0 nothing slower; 1 a step is `slower` (significant and
beyond --threshold), so cron's mail or a failed CI job is the alert; 2 an error (recorded too).
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import jinja2

from . import report
from .cli import _Parser, run_and_load
from .errors import EXIT_ERROR, EXIT_OK, EXIT_REGRESSION, RefbenchError

SCHEMA_VERSION = 1
_RESERVED = ("-s", "--s5cmd", "--refs", "--json", "-o", "--output", "--output_file_name", "--format",
             "--dry-run", "--list")

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started TEXT NOT NULL,              -- UTC, ISO 8601
    finished TEXT,
    mode TEXT NOT NULL,                 -- release: BASE vs HEAD; since-last: last night's HEAD vs tonight's
    target TEXT, repo TEXT,
    base_ref TEXT, base_sha TEXT, head_ref TEXT, head_sha TEXT,
    exit_code INTEGER,                  -- 0 ok, 1 slower, 2 error
    error TEXT,
    slower INTEGER, faster INTEGER, same INTEGER, inconclusive INTEGER,
    settings TEXT,                      -- JSON
    results_path TEXT,
    results TEXT                        -- the whole results.json
);
CREATE TABLE IF NOT EXISTS environment (
    run_id INTEGER PRIMARY KEY REFERENCES runs(id),
    host TEXT, os TEXT, kernel TEXT, cpu_model TEXT, cpus INTEGER, memory_bytes INTEGER,
    python TEXT, go TEXT, hyperfine TEXT, refbench TEXT
);
CREATE TABLE IF NOT EXISTS commits (
    run_id INTEGER REFERENCES runs(id), role TEXT,   -- base / head
    label TEXT, ref TEXT, kind TEXT, sha TEXT, version TEXT, toolchain TEXT,
    cached INTEGER, build_seconds REAL,
    PRIMARY KEY (run_id, role)
);
CREATE TABLE IF NOT EXISTS steps (
    run_id INTEGER REFERENCES runs(id), scenario TEXT, step TEXT, role TEXT, label TEXT, sha TEXT,
    n INTEGER, mean REAL, stddev REAL, median REAL, min REAL, max REAL, cv REAL, rss_kb INTEGER,
    PRIMARY KEY (run_id, scenario, step, role)
);
CREATE TABLE IF NOT EXISTS samples (
    run_id INTEGER REFERENCES runs(id), scenario TEXT, step TEXT, role TEXT, sha TEXT,
    idx INTEGER, round INTEGER, seconds REAL, user_seconds REAL, system_seconds REAL, exit_code INTEGER
);
CREATE TABLE IF NOT EXISTS verdicts (
    run_id INTEGER REFERENCES runs(id), scenario TEXT, step TEXT, baseline TEXT, contender TEXT,
    verdict TEXT, rel REAL, ci_low REAL, ci_high REAL, p_value REAL, ratio REAL, noisy INTEGER,
    threshold REAL,
    PRIMARY KEY (run_id, scenario, step)
);
CREATE INDEX IF NOT EXISTS samples_run ON samples(run_id, scenario, step);
"""


# ---- the history database ------------------------------------------------------------------
def open_history(path: Path) -> sqlite3.Connection:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise RefbenchError(f"{path}: history schema {version} is newer than this refbench ({SCHEMA_VERSION})")
    db.executescript(SCHEMA)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    db.commit()
    return db


def last_head(db: sqlite3.Connection, target: str, repo: str, head_ref: str) -> str | None:
    row = db.execute("SELECT head_sha FROM runs WHERE target = ? AND repo = ? AND head_ref = ? "
                     "AND exit_code IN (0, 1) AND head_sha IS NOT NULL ORDER BY id DESC LIMIT 1",
                     (target, repo, head_ref)).fetchone()
    return row[0] if row else None


def record_run(db: sqlite3.Connection, *, started: str, mode: str, base_ref: str, head_ref: str,
               results: dict | None, exit_code: int, error: str | None = None, results_path: str | None = None,
               target: str | None = None, repo: str | None = None) -> int:
    counts = report.verdict_counts(results) if results else {}
    builds = results["builds"] if results else []
    with db:
        cur = db.execute(
            "INSERT INTO runs (started, finished, mode, target, repo, base_ref, base_sha, head_ref, head_sha, "
            "exit_code, error, slower, faster, same, inconclusive, settings, results_path, results) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (started, _now(), mode, results["target"]["name"] if results else target,
             results["target"]["repo"] if results else repo, base_ref,
             builds[0]["sha"] if builds else None, head_ref, builds[-1]["sha"] if builds else None,
             exit_code, error, counts.get("slower"), counts.get("faster"), counts.get("no significant change"),
             counts.get("inconclusive"), json.dumps(results["settings"]) if results else None, results_path,
             json.dumps(results) if results else None))
        run_id = cur.lastrowid
        if not results:
            return run_id
        env = results.get("environment") or {}
        db.execute("INSERT INTO environment VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (run_id, env.get("host"), env.get("os"), env.get("kernel"), env.get("cpu_model"),
                    env.get("cpus"), env.get("memory_bytes"), env.get("python"), env.get("go"),
                    env.get("hyperfine"), env.get("refbench")))
        roles = {builds[0]["label"]: "base", builds[-1]["label"]: "head"}
        for b in (builds[0], builds[-1]):
            db.execute("INSERT INTO commits VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (run_id, roles[b["label"]], b["label"], b["ref"], b["kind"], b["sha"], b.get("version"),
                        b.get("toolchain"), int(bool(b.get("cached"))), b.get("build_seconds")))
        shas = {b["label"]: b["sha"] for b in builds}
        threshold = results["settings"].get("threshold")
        for sc in results["scenarios"]:
            for st in sc["steps"]:
                for label, side in st["builds"].items():
                    role = roles.get(label)
                    if role is None:
                        continue
                    s = side.get("stats") or {}
                    db.execute("INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                               (run_id, sc["name"], st["name"], role, label, shas[label], s.get("n"),
                                s.get("mean"), s.get("stddev"), s.get("median"), s.get("min"), s.get("max"),
                                s.get("cv"), side.get("rss_kb")))
                    times = side.get("times") or []
                    rounds, users = side.get("rounds") or [], side.get("user") or []
                    systems, codes = side.get("system") or [], side.get("exit_codes") or []
                    db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
                        (run_id, sc["name"], st["name"], role, shas[label], i, _at(rounds, i), t,
                         _at(users, i), _at(systems, i), _at(codes, i)) for i, t in enumerate(times)])
                for c in st["comparisons"]:
                    if c["contender"] != builds[-1]["label"]:
                        continue
                    db.execute("INSERT INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                               (run_id, sc["name"], st["name"], c["baseline"], c["contender"], c["verdict"],
                                c["rel"], c.get("ci_low"), c.get("ci_high"), c.get("p_value"), c.get("ratio"),
                                int(bool(c.get("noisy"))), threshold))
    return run_id


def _at(seq, i):
    return seq[i] if i < len(seq) else None


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- the trend page ------------------------------------------------------------------------
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 720, 230, 64, 60, 26, 40


def trend_data(db: sqlite3.Connection) -> list[dict]:
    """One chart per (scenario, step): the head's mean ± σ and the baseline's mean, run by run."""
    rows = db.execute("""
        SELECT r.id, r.started, r.mode, r.base_ref, r.head_ref, v.scenario, v.step, v.verdict, v.rel,
               h.mean AS h_mean, h.stddev AS h_sd, h.sha AS h_sha, h.label AS h_label,
               b.mean AS b_mean, b.sha AS b_sha, b.label AS b_label
        FROM runs r
        JOIN verdicts v ON v.run_id = r.id
        JOIN steps h ON h.run_id = r.id AND h.scenario = v.scenario AND h.step = v.step AND h.role = 'head'
        JOIN steps b ON b.run_id = r.id AND b.scenario = v.scenario AND b.step = v.step AND b.role = 'base'
        ORDER BY v.scenario, v.step, r.id""").fetchall()
    charts: dict[tuple[str, str], list] = {}
    for r in rows:
        charts.setdefault((r["scenario"], r["step"]), []).append(dict(r))
    return [_chart(sc, st, pts) for (sc, st), pts in charts.items()]


def _chart(scenario: str, step: str, pts: list[dict]) -> dict:
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
    ticks = [{"y": round(y(top * k / 4), 1), "label": f"{top * k / 4:.3g} s"} for k in range(5)]
    return {
        "scenario": scenario, "step": step, "points": points, "ticks": ticks, "width": W, "height": H,
        "left": PAD_L, "right": W - PAD_R, "bottom": H - PAD_B,
        "head_path": " ".join(f"{'M' if i == 0 else 'L'}{p['x']},{p['y']}" for i, p in enumerate(points)),
        "base_path": " ".join(f"{'M' if i == 0 else 'L'}{p['x']},{p['by']}" for i, p in enumerate(points)),
        "regressions": sum(p["slower"] for p in points), "last": pts[-1],
    }


def render_trend(db: sqlite3.Connection, path: Path, title: str = "refbench nightly") -> Path:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(report.TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(pct=report.fmt_pct)
    runs = [dict(r) for r in db.execute(
        "SELECT r.id, r.started, r.mode, r.target, r.base_ref, r.base_sha, r.head_ref, r.head_sha, r.exit_code, "
        "r.error, r.slower, r.faster, r.same, r.inconclusive, e.host, e.go FROM runs r "
        "LEFT JOIN environment e ON e.run_id = r.id ORDER BY r.id DESC LIMIT 60")]
    text = env.get_template("trend.html.j2").render(title=title, charts=trend_data(db), runs=runs,
                                                     generated=_now())
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


# ---- the subcommand ------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bench.py nightly", description="Compare latest_release with master (or last night's "
                "master with tonight's), keep the run in a SQLite history, render the trend page, and exit 1 "
                "when a step turned slower. Other options (--repo, --quick, --only, -r, -w, --rounds, "
                "--threshold, --builds-dir, ...) pass through to the comparison.")
    p.add_argument("--history", required=True, metavar="DB", help="SQLite history file (created if missing)")
    p.add_argument("--base", default="latest_release", help="baseline ref (default latest_release)")
    p.add_argument("--head", default="master", help="the ref to watch (default master)")
    p.add_argument("--since-last", action="store_true",
                   help="baseline = the HEAD commit of the last recorded run (falls back to --base on the first night)")
    p.add_argument("--trend", help="trend page to write (default: trend.html beside the history)")
    p.add_argument("--out-dir", help="where each run's results.json and summary.md go "
                   "(default: nightly/<date> beside the history)")
    p.add_argument("--render-only", action="store_true", help="only re-render the trend page from the history")
    p.add_argument("-t", "--target", default="s5cmd")
    p.add_argument("--repo", help="origin to build from (default: the target's repo)")
    return p


def cmd_nightly(argv: list[str]) -> int:
    args, extra = parser().parse_known_args(argv)
    bad = [a for a in extra if a.split("=")[0] in _RESERVED]
    if bad:
        raise RefbenchError(f"nightly sets {bad[0]} itself; use --base/--head/--since-last")
    history = Path(args.history).expanduser()
    trend = Path(args.trend) if args.trend else history.with_name("trend.html")
    db = open_history(history)
    try:
        if args.render_only:
            print(f"nightly: wrote {render_trend(db, trend)}", file=sys.stderr)
            return EXIT_OK
        return _nightly(db, args, extra, history, trend)
    finally:
        db.close()


def _nightly(db, args, extra, history: Path, trend: Path) -> int:
    from . import builds as bl
    from .cli import DEFAULT_SCENARIOS
    from .config import load_config

    started = _now()
    scen = next((extra[i + 1] for i, a in enumerate(extra[:-1]) if a == "--scenarios"), str(DEFAULT_SCENARIOS))
    target = load_config(scen).targets.get(args.target)
    if target is None:
        raise RefbenchError(f"unknown target {args.target!r} in {scen}")
    builder = bl.Builder(target, Path(_builds_dir(extra)), args.repo)
    repo_url = builder.repo_url  # what results.json records as target.repo
    base, mode = args.base, "release"
    if args.since_last:
        prev = last_head(db, args.target, repo_url, args.head)
        if prev:
            base, mode = prev, "since-last"
        else:
            print(f"nightly: no earlier run of {args.head} in {history}: comparing with {args.base} tonight",
                  file=sys.stderr)
    out_dir = Path(args.out_dir) if args.out_dir else \
        history.parent / "nightly" / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "results.json"
    run_argv = ["-s", base, args.head, "--target", args.target, *(["--repo", args.repo] if args.repo else []),
                *extra, "--json", str(json_path), "-o", str(out_dir / "summary.md")]
    print(f"nightly: {base} vs {args.head} ({mode}); results in {out_dir}", file=sys.stderr)
    try:
        if mode == "since-last":
            if builder.resolve(args.head).sha == base:
                print(f"nightly: {args.head} is still {base[:10]}, as last night: nothing new to compare",
                      file=sys.stderr)
                render_trend(db, trend)
                return EXIT_OK
        code, results = run_and_load(run_argv)
    except RefbenchError as e:
        record_run(db, started=started, mode=mode, base_ref=base, head_ref=args.head, results=None,
                   exit_code=e.code, error=str(e), target=args.target, repo=repo_url)
        render_trend(db, trend)
        raise
    if results is None:
        raise RefbenchError(f"the run wrote no results ({json_path})")
    slower = report.regressions(results)
    code = EXIT_REGRESSION if slower else EXIT_OK
    run_id = record_run(db, started=started, mode=mode, base_ref=base, head_ref=args.head, results=results,
                        exit_code=code, results_path=str(json_path))
    page = render_trend(db, trend)
    counts = report.verdict_counts(results)
    print(f"nightly: run {run_id} recorded in {history}; trend page {page}", file=sys.stderr)
    print(f"nightly: {counts['slower']} slower, {counts['faster']} faster, {counts['no significant change']} "
          f"no significant change, {counts['inconclusive']} inconclusive")
    for sc, st, c in slower:
        print(f"REGRESSION {sc} / {st}: {c['contender']} is {report.fmt_pct(c['rel'])} vs {c['baseline']} "
              f"(95% CI {report.fmt_ci(c)}, p {report.fmt_p(c['p_value'])})")
    return code


def _builds_dir(extra: list[str]) -> str:
    from . import paths
    for i, a in enumerate(extra):
        if a == "--builds-dir" and i + 1 < len(extra):
            return extra[i + 1]
        if a.startswith("--builds-dir="):
            return a.split("=", 1)[1]
    return str(paths.default_builds_dir())
