"""Views rendered from a saved results.json: a self-contained HTML report, CSV, and the comparison
of two saved runs (`bench.py report`, `bench.py compare`).

Charts are inline SVG written here, not a charting library: the report must open offline from a
CI artefact, so nothing may be fetched; a vendored JS library would add megabytes to every
report (plotly.js is ~3.5 MB) and need JavaScript, matplotlib would be a heavy dependency for a
few boxes and dots. Hand-written SVG is a few kB, crisp at any zoom, works with JavaScript off,
its text is searchable, and every run is a point with a hover tooltip (<title>).
"""
from __future__ import annotations

import argparse
import csv
import html
import math
import re
import sys
from pathlib import Path

import jinja2
import numpy as np
from markupsafe import Markup

from . import paths, report, stats
from .errors import EXIT_ERROR, EXIT_OK, EXIT_REGRESSION, RefbenchError

VERDICT_COLOURS = {"slower": "#cf222e", "faster": "#1a7f37", "no significant change": "#6e7781",
                   "inconclusive": "#bf8700"}
BUILD_COLOURS = ["#0969da", "#bc4c00", "#8250df", "#1a7f37", "#cf222e", "#57606a", "#bf3989", "#0a7ea4"]
FONT = "font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif"


# ---- small helpers ----------------------------------------------------------------------------
def _e(text) -> str:
    return html.escape(str(text), quote=True)


def slug(*parts: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-") or "x"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def log_ticks(l0: float, l1: float) -> list[float]:
    """Ticks between 10**l0 and 10**l1: 1-2-5 per decade, every digit when that gives < 3."""
    for mantissas in ((1,), (1, 2, 5), tuple(range(1, 10))):
        ticks = [m * 10.0 ** e for e in range(math.floor(l0), math.ceil(l1) + 1) for m in mantissas
                 if l0 <= math.log10(m * 10.0 ** e) <= l1]
        if len(ticks) >= 3:
            return ticks
    return ticks


def fmt_seconds(x: float) -> str:
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 100:
        return f"{x:.0f} s"
    if a >= 1:
        return f"{x:.2f} s"
    if a >= 1e-3:
        return f"{x * 1e3:.3g} ms"
    return f"{x * 1e6:.3g} µs"


def fmt_bytes(n: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            v = n / div
            return f"{v:.3g} {unit}"
    return f"{n:.0f} B"


def _build_colour(labels: list[str], label: str) -> str:
    return BUILD_COLOURS[labels.index(label) % len(BUILD_COLOURS)] if label in labels else "#57606a"


def _quartiles(a: np.ndarray) -> tuple[float, float, float]:
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return float(q1), float(med), float(q3)


# ---- charts -----------------------------------------------------------------------------------
def distribution_svg(step: dict, labels: list[str], width: int = 900) -> str:
    """Box plot + every run as a dot, one row per build (outliers and bimodality stay visible)."""
    rows = [(lab, step["builds"][lab]) for lab in labels if lab in step["builds"] and step["builds"][lab]["times"]]
    if not rows:
        return ""
    left, right, top, row_h, axis_h = 120, 24, 10, 40, 34
    height = top + row_h * len(rows) + axis_h
    allt = [t for _, b in rows for t in b["times"]]
    lo, hi = min(allt), max(allt)
    pad = (hi - lo) * 0.08 or max(hi * 0.05, 1e-6)
    lo, hi = max(0.0, lo - pad), hi + pad
    plot_w = width - left - right

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * plot_w

    out = [f'<svg class="chart dist" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="run times of {_e(step["name"])}" '
           f'style="{FONT};font-size:12px">']
    for tv in nice_ticks(lo, hi, 6):
        xv = x(tv)
        out.append(f'<line x1="{xv:.1f}" y1="{top}" x2="{xv:.1f}" y2="{height - axis_h}" stroke="#d0d7de" '
                   f'stroke-width="1"/>')
        out.append(f'<text x="{xv:.1f}" y="{height - axis_h + 15}" text-anchor="middle" fill="#57606a">'
                   f'{_e(fmt_seconds(tv))}</text>')
    out.append(f'<text x="{left + plot_w / 2:.0f}" y="{height - 4}" text-anchor="middle" fill="#57606a">'
               f'wall time per run (every dot is one run; box: quartiles, line: median, ◆: mean)</text>')
    for i, (lab, b) in enumerate(rows):
        a = np.asarray(b["times"], dtype=float)
        cy = top + row_h * i + row_h / 2
        col = _build_colour(labels, lab)
        out.append(f'<text x="{left - 8}" y="{cy + 4:.1f}" text-anchor="end" fill="#24292f">{_e(lab)}</text>')
        q1, med, q3 = _quartiles(a)
        iqr = q3 - q1
        wlo = float(a[a >= q1 - 1.5 * iqr].min())
        whi = float(a[a <= q3 + 1.5 * iqr].max())
        out.append(f'<line x1="{x(wlo):.1f}" y1="{cy:.1f}" x2="{x(whi):.1f}" y2="{cy:.1f}" stroke="{col}" '
                   f'stroke-width="1.5"/>')
        for w in (wlo, whi):
            out.append(f'<line x1="{x(w):.1f}" y1="{cy - 6:.1f}" x2="{x(w):.1f}" y2="{cy + 6:.1f}" '
                       f'stroke="{col}" stroke-width="1.5"/>')
        out.append(f'<rect class="box" x="{x(q1):.1f}" y="{cy - 11:.1f}" width="{max(1.0, x(q3) - x(q1)):.1f}" '
                   f'height="22" fill="{col}" fill-opacity="0.15" stroke="{col}" stroke-width="1.5"/>')
        out.append(f'<line x1="{x(med):.1f}" y1="{cy - 11:.1f}" x2="{x(med):.1f}" y2="{cy + 11:.1f}" '
                   f'stroke="{col}" stroke-width="3"/>')
        rounds = b.get("rounds") or [None] * len(a)
        for j, tv in enumerate(a):
            jitter = ((j * 7919) % 13 - 6) * 1.4  # deterministic, spreads ties vertically
            rd = f" (round {rounds[j] + 1})" if j < len(rounds) and rounds[j] is not None else ""
            out.append(f'<circle class="run" cx="{x(tv):.1f}" cy="{cy + jitter:.1f}" r="3.2" fill="{col}" '
                       f'fill-opacity="0.75" stroke="#fff" stroke-width="0.6"><title>{_e(lab)} run {j + 1}{rd}: '
                       f'{tv:.4f} s</title></circle>')
        mean = float(a.mean())
        out.append(f'<path d="M{x(mean):.1f},{cy - 16:.1f} l5,5 l-5,5 l-5,-5 z" fill="#24292f">'
                   f'<title>{_e(lab)} mean {mean:.4f} s</title></path>')
    out.append("</svg>")
    return "".join(out)


def forest_svg(rows: list[dict], threshold: float, width: int = 900) -> str:
    """Every comparison's time change with its 95% CI, coloured by verdict, against the ±threshold
    band: the at-a-glance view of what got slower and by how much."""
    if not rows:
        return ""
    left, right, top, row_h, axis_h = 250, 120, 8, 26, 36
    height = top + row_h * len(rows) + axis_h
    vals = [0.0, -threshold * 2, threshold * 2]
    for r in rows:
        c = r["c"]
        vals += [v for v in (c["rel"], c.get("ci_low"), c.get("ci_high")) if v is not None and math.isfinite(v)]
    lo, hi = max(min(vals), -0.95), min(max(vals), 3.0)
    pad = (hi - lo) * 0.05
    lo, hi = lo - pad, hi + pad
    plot_w = width - left - right

    def x(v: float) -> float:
        return left + (min(max(v, lo), hi) - lo) / (hi - lo) * plot_w

    out = [f'<svg class="chart forest" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="time change per step" '
           f'style="{FONT};font-size:12px">']
    out.append(f'<rect x="{x(-threshold):.1f}" y="{top}" width="{x(threshold) - x(-threshold):.1f}" '
               f'height="{row_h * len(rows)}" fill="#6e7781" fill-opacity="0.12"><title>±{threshold * 100:.1f}% '
               f'threshold: changes inside it are not called slower or faster</title></rect>')
    for tv in nice_ticks(lo, hi, 6):
        out.append(f'<line x1="{x(tv):.1f}" y1="{top}" x2="{x(tv):.1f}" y2="{height - axis_h}" '
                   f'stroke="{"#57606a" if tv == 0 else "#d0d7de"}" stroke-width="1"/>')
        out.append(f'<text x="{x(tv):.1f}" y="{height - axis_h + 15}" text-anchor="middle" fill="#57606a">'
                   f'{tv * 100:+.0f}%</text>')
    out.append(f'<text x="{left + plot_w / 2:.0f}" y="{height - 4}" text-anchor="middle" fill="#57606a">'
               f'time change vs baseline with 95% CI (right = slower; grey band = ±{threshold * 100:.1f}%)</text>')
    for i, r in enumerate(rows):
        c = r["c"]
        cy = top + row_h * i + row_h / 2
        col = VERDICT_COLOURS.get(c["verdict"], "#57606a")
        name = f'{r["scenario"]} / {r["step"]}' + (f' ({c["contender"]})' if r.get("multi") else "")
        out.append(f'<a href="#{_e(r["anchor"])}"><text x="{left - 8}" y="{cy + 4:.1f}" text-anchor="end" '
                   f'fill="#0969da">{_e(name[:40])}</text></a>')
        if c.get("ci_low") is not None:
            out.append(f'<line x1="{x(c["ci_low"]):.1f}" y1="{cy:.1f}" x2="{x(c["ci_high"]):.1f}" y2="{cy:.1f}" '
                       f'stroke="{col}" stroke-width="2.5"/>')
        out.append(f'<circle class="change" cx="{x(c["rel"]):.1f}" cy="{cy:.1f}" r="5" fill="{col}">'
                   f'<title>{_e(name)}: {_e(report.fmt_pct(c["rel"]))} {_e(report.fmt_ci(c))}, {_e(c["verdict"])}'
                   f'</title></circle>')
        out.append(f'<text x="{width - right + 8}" y="{cy + 4:.1f}" fill="{col}" font-weight="600">'
                   f'{_e(report.fmt_pct(c["rel"]))} {_e(_verdict_word(c["verdict"]))}</text>')
    out.append("</svg>")
    return "".join(out)


def _verdict_word(v: str) -> str:
    return {"no significant change": "same", "inconclusive": "unsure"}.get(v, v)


def fit_svg(family: dict, labels: list[str], width: int = 900, height: int = 340) -> str:
    """Latency vs bytes on log-log axes: every run as a dot, each build's fitted
    time = overhead + bytes / throughput as a line."""
    left, right, top, bottom = 70, 20, 12, 44
    pts = [(p[0], p[1]) for b in family["builds"].values() for p in b["points"] if p[0] > 0 and p[1] > 0]
    if not pts:
        return ""
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    lx0, lx1 = math.log10(min(xs)) - 0.15, math.log10(max(xs)) + 0.15
    ly0, ly1 = math.log10(min(ys)) - 0.15, math.log10(max(ys)) + 0.15
    pw, ph = width - left - right, height - top - bottom

    def X(v):
        return left + (math.log10(v) - lx0) / (lx1 - lx0) * pw

    def Y(v):
        return top + ph - (math.log10(v) - ly0) / (ly1 - ly0) * ph

    out = [f'<svg class="chart fit" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="latency vs size" style="{FONT};font-size:12px">',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#d0d7de"/>']
    for bx in family["sizes"]:  # x ticks: the sizes that were run
        out.append(f'<line x1="{X(bx):.1f}" y1="{top}" x2="{X(bx):.1f}" y2="{top + ph}" stroke="#eaeef2"/>'
                   f'<text x="{X(bx):.1f}" y="{top + ph + 15}" text-anchor="middle" fill="#57606a">'
                   f'{_e(fmt_bytes(bx))}</text>')
    for tv in log_ticks(ly0, ly1):
        out.append(f'<line x1="{left}" y1="{Y(tv):.1f}" x2="{left + pw}" y2="{Y(tv):.1f}" stroke="#eaeef2"/>'
                   f'<text x="{left - 6}" y="{Y(tv) + 4:.1f}" text-anchor="end" fill="#57606a">'
                   f'{_e(fmt_seconds(tv))}</text>')
    out.append(f'<text x="{left + pw / 2:.0f}" y="{height - 6}" text-anchor="middle" fill="#57606a">'
               f'bytes per run (log)</text>')
    for k, (lab, b) in enumerate(family["builds"].items()):
        col = _build_colour(labels, lab)
        for bx, t in b["points"]:
            if bx > 0 and t > 0:
                out.append(f'<circle class="run" cx="{X(bx):.1f}" cy="{Y(t):.1f}" r="3" fill="{col}" '
                           f'fill-opacity="0.6"><title>{_e(lab)}: {_e(fmt_bytes(bx))} in {t:.4f} s</title></circle>')
        if b.get("slope") is not None:
            seg = []
            for i in range(61):
                bx = 10 ** (lx0 + (lx1 - lx0) * i / 60)
                t = b["overhead"] + b["slope"] * bx
                if t > 0 and ly0 <= math.log10(t) <= ly1:
                    seg.append(f"{X(bx):.1f},{Y(t):.1f}")
            if len(seg) > 1:
                out.append(f'<polyline points="{" ".join(seg)}" fill="none" stroke="{col}" stroke-width="2"/>')
        out.append(f'<rect x="{left + 10}" y="{top + 8 + 18 * k}" width="12" height="12" fill="{col}"/>'
                   f'<text x="{left + 28}" y="{top + 18 + 18 * k}" fill="#24292f">{_e(lab)}</text>')
    out.append("</svg>")
    return "".join(out)


# ---- latency vs size --------------------------------------------------------------------------
def size_families(results: dict) -> list[dict]:
    """Steps of the same name run at two or more sizes of the same shape (fixture kind and file
    count, e.g. upload of a large file and of a very large file; or scenarios sharing a `family`
    key), with per build the least-squares fit of time = overhead + bytes / throughput over every
    run (bee-bench's latency-vs-size view). Different file counts are not mixed: per-file cost
    would masquerade as size cost."""
    groups: dict[tuple[str, str], list[tuple[dict, dict]]] = {}
    for sc in results["scenarios"]:
        fx = sc["fixture"]
        fam = sc.get("family") or (f"{fx.get('kind')}, {fx.get('files')} file" + ("s" if fx.get("files") != 1 else ""))
        for st in sc["steps"]:
            groups.setdefault((st["name"], fam), []).append((sc, st))
    out = []
    labels = [b["label"] for b in results["builds"]]
    for (step_name, fam), members in groups.items():
        sizes = {sc["fixture"].get("bytes") for sc, _ in members if sc["fixture"].get("bytes")}
        if len(sizes) < 2:
            continue
        builds = {}
        for lab in labels:
            pts = [(float(sc["fixture"]["bytes"]), float(t)) for sc, st in members if lab in st["builds"]
                   for t in st["builds"][lab]["times"]]
            fit = {"points": pts, "overhead": None, "slope": None, "throughput": None, "r2": None}
            if len({p[0] for p in pts}) >= 2:
                xs = np.array([p[0] for p in pts])
                ys = np.array([p[1] for p in pts])
                slope, icpt = np.polyfit(xs, ys, 1)
                pred = icpt + slope * xs
                ss_tot = float(((ys - ys.mean()) ** 2).sum())
                fit.update(overhead=float(icpt), slope=float(slope),
                           throughput=float(1 / slope) if slope > 0 else None,
                           r2=1 - float(((ys - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else None)
            builds[lab] = fit
        out.append({"step": step_name, "kind": fam, "scenarios": [sc["name"] for sc, _ in members],
                    "sizes": sorted(sizes), "builds": builds,
                    "anchor": slug("fit", step_name, fam)})
    return out


# ---- reading any schema version ----------------------------------------------------------------
_BUILD_DEFAULTS = {"times": [], "user": [], "system": [], "exit_codes": [], "rounds": [], "stats": None,
                   "cpu_mean": None, "cpu_wall_ratio": None, "rss_kb": None, "check": None, "command": "",
                   "prepare": None}


def normalise(results: dict) -> dict:
    """A copy with every optional field present, so views read files written by any schema
    version this refbench accepts (fields added later default to None / empty)."""
    import copy
    r = copy.deepcopy(results)
    for k, v in (("environment", {}), ("timing", {}), ("command_line", []), ("backend", {}), ("scoreboard", None),
                 ("created", ""), ("refbench", ""), ("target", {"name": "?"})):
        if r.get(k) is None:
            r[k] = v
    r["backend"].setdefault("kind", "")
    st_defaults = {"runs": None, "warmup": None, "rounds": None, "check_differs": False, "comparisons": []}
    for sc in r.get("scenarios", []):
        sc.setdefault("fixture", {})
        for k in ("kind", "files", "bytes", "size", "count"):
            sc["fixture"].setdefault(k, None)
        for st in sc.get("steps", []):
            for k, v in st_defaults.items():
                st.setdefault(k, v)
            for lab, b in st.get("builds", {}).items():
                for k, v in _BUILD_DEFAULTS.items():
                    b.setdefault(k, copy.copy(v))
                if b["stats"] is None and b["times"]:
                    b["stats"] = stats.summarize(b["times"]).to_json()
    s = r.setdefault("settings", {})
    for k, v in (("runs", "?"), ("rounds", "?"), ("warmup", "?"), ("quick", False), ("threshold", 0.05),
                 ("alpha", 0.05), ("noise_limit", 0.10)):
        s.setdefault(k, v)
    for b in r.get("builds", []):
        for k in ("ref", "sha", "kind", "source", "toolchain", "build_seconds"):
            b.setdefault(k, None)
        b.setdefault("cached", False)
    r.setdefault("baseline", r["builds"][0]["label"] if r.get("builds") else None)
    return r


# ---- HTML -------------------------------------------------------------------------------------
def _jinja_html() -> jinja2.Environment:
    env = jinja2.Environment(loader=paths.template_loader(),
                             autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(pct=report.fmt_pct, s=report.fmt_s, p=report.fmt_p, ci=report.fmt_ci, secs=fmt_seconds,
                       bytes=fmt_bytes, vword=_verdict_word)
    env.globals.update(vcolour=VERDICT_COLOURS, markers=stats.MARKERS)
    return env


def scoreboard(results: dict) -> list[dict]:
    """Per build: geometric mean of its time ratios to the baseline over the steps, relative to
    the fastest build, and its verdict counts (also for two builds)."""
    labels = [b["label"] for b in results["builds"]]
    ratios = {lab: [] for lab in labels}
    counts = {lab: {v: 0 for v in stats.VERDICTS} for lab in labels}
    for sc in results["scenarios"]:
        for st in sc["steps"]:
            for c in st["comparisons"]:
                if c.get("ratio") and c["ratio"] > 0 and math.isfinite(c["ratio"]):
                    ratios[c["contender"]].append(c["ratio"])
                    ratios[labels[0]].append(1.0)
                counts[c["contender"]][c["verdict"]] += 1
    gm = {lab: float(np.exp(np.mean(np.log(r)))) if r else None for lab, r in ratios.items()}
    best = min((v for v in gm.values() if v), default=None)
    return [{"label": lab, "baseline": i == 0, "geomean": gm[lab], "colour": _build_colour(labels, lab),
             "vs_fastest": gm[lab] / best if gm[lab] and best else None, "counts": counts[lab]}
            for i, lab in enumerate(labels)]


def html_context(results: dict) -> dict:
    results = normalise(results)
    labels = [b["label"] for b in results["builds"]]
    multi = len(labels) > 2
    threshold = results["settings"].get("threshold", 0.05)
    forest_rows, steps = [], []
    for sc in results["scenarios"]:
        for st in sc["steps"]:
            anchor = slug(sc["name"], st["name"])
            for c in st["comparisons"]:
                forest_rows.append({"scenario": sc["name"], "step": st["name"], "c": c, "anchor": anchor,
                                    "multi": multi})
            comp = {c["contender"]: c for c in st["comparisons"]}
            rows = []
            for lab in labels:
                b = st["builds"].get(lab)
                if not b:
                    continue
                s = b.get("stats") or {}
                mean = s.get("mean")
                rows.append({"label": lab, "baseline": lab == labels[0], "s": s, "b": b, "c": comp.get(lab),
                             "colour": _build_colour(labels, lab),
                             "throughput": (sc["fixture"].get("bytes") or 0) / mean if mean else None})
            worst = max(st["comparisons"], key=lambda c: (c["verdict"] == "slower", c["rel"]), default=None)
            steps.append({"scenario": sc["name"], "name": st["name"], "anchor": anchor, "st": st, "sc": sc,
                          "rows": rows, "worst": worst, "comparisons": st["comparisons"],
                          "svg": Markup(distribution_svg(st, labels))})
    families = size_families(results)
    for f in families:
        f["svg"] = Markup(fit_svg(f, labels))
    severity = {"slower": 0, "faster": 1, "inconclusive": 2, "no significant change": 3}
    headline = sorted([r for r in forest_rows if r["c"]["verdict"] in ("slower", "faster")],
                      key=lambda r: (severity[r["c"]["verdict"]], -abs(r["c"]["rel"])))
    return {"r": results, "labels": labels, "multi": multi, "counts": report.verdict_counts(results),
            "forest": Markup(forest_svg(forest_rows if len(forest_rows) <= 30 else sorted(
                forest_rows, key=lambda r: (severity[r["c"]["verdict"]], -abs(r["c"]["rel"]))), threshold)),
            "headline": headline, "steps": steps,
            "families": families, "scoreboard": scoreboard(results), "threshold": threshold,
            "baseline": labels[0] if labels else None}


def render_html(results: dict) -> str:
    return _jinja_html().get_template("report.html.j2").render(**html_context(results))


def write_html(results: dict, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(results), encoding="utf-8")


# ---- CSV --------------------------------------------------------------------------------------
CSV_FIELDS = ["scenario", "step", "build", "is_baseline", "ref", "sha", "n", "mean_s", "stddev_s", "median_s",
              "min_s", "max_s", "p95_s", "cv", "user_mean_s", "system_mean_s", "cpu_mean_s", "cpu_wall_ratio",
              "peak_rss_kib", "throughput_bytes_per_s", "fixture_kind", "fixture_files", "fixture_bytes",
              "runs", "warmup", "rounds", "baseline", "ratio", "rel_change", "ci_low", "ci_high", "p_value",
              "verdict", "noisy", "mde", "runs_needed", "check", "check_differs", "command", "times_s"]


def csv_rows(results: dict) -> list[dict]:
    """One row per step × build with every statistic (the baseline's comparison fields empty)."""
    results = normalise(results)
    builds = {b["label"]: b for b in results["builds"]}
    out = []
    for sc in results["scenarios"]:
        fx = sc["fixture"]
        for st in sc["steps"]:
            comp = {c["contender"]: c for c in st["comparisons"]}
            for lab, b in st["builds"].items():
                s = b.get("stats") or {}
                c = comp.get(lab, {})
                user, system = b.get("user") or [], b.get("system") or []
                row = {
                    "scenario": sc["name"], "step": st["name"], "build": lab,
                    "is_baseline": lab == results.get("baseline"), "ref": builds.get(lab, {}).get("ref"),
                    "sha": builds.get(lab, {}).get("sha"), "n": s.get("n"), "mean_s": s.get("mean"),
                    "stddev_s": s.get("stddev"), "median_s": s.get("median"), "min_s": s.get("min"),
                    "max_s": s.get("max"), "p95_s": s.get("p95"), "cv": s.get("cv"),
                    "user_mean_s": sum(user) / len(user) if user else None,
                    "system_mean_s": sum(system) / len(system) if system else None,
                    "cpu_mean_s": b.get("cpu_mean"), "cpu_wall_ratio": b.get("cpu_wall_ratio"),
                    "peak_rss_kib": b.get("rss_kb"),
                    "throughput_bytes_per_s": (fx.get("bytes") / s["mean"]) if fx.get("bytes") and s.get("mean")
                    else None,
                    "fixture_kind": fx.get("kind"), "fixture_files": fx.get("files"), "fixture_bytes": fx.get("bytes"),
                    "runs": st.get("runs"), "warmup": st.get("warmup"), "rounds": st.get("rounds"),
                    "baseline": c.get("baseline", results.get("baseline")), "ratio": c.get("ratio"),
                    "rel_change": c.get("rel"), "ci_low": c.get("ci_low"), "ci_high": c.get("ci_high"),
                    "p_value": c.get("p_value"), "verdict": c.get("verdict"), "noisy": c.get("noisy"),
                    "mde": c.get("mde"), "runs_needed": c.get("runs_needed"), "check": b.get("check"),
                    "check_differs": st.get("check_differs"), "command": b.get("command"),
                    "times_s": " ".join(f"{t:.6f}" for t in b.get("times") or []),
                }
                out.append(row)
    return out


def write_csv(results: dict, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        for row in csv_rows(results):
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})


# ---- compare two saved runs -------------------------------------------------------------------
def _steps(results: dict) -> dict[tuple[str, str], tuple[dict, dict]]:
    return {(sc["name"], st["name"]): (sc, st) for sc in results["scenarios"] for st in sc["steps"]}


def compare_runs(old: dict, new: dict, settings: stats.Settings = stats.Settings(),
                 match: str = "label") -> dict:
    """The same steps of two saved runs: per matched build and step the change of the new run's
    times against the old one's, with a verdict against the threshold; plus what exists in only
    one of them. Builds match by label (a nightly's `master` against last night's `master`), or
    by position (baseline with baseline, ...) with match="position"."""
    old, new = normalise(old), normalise(new)
    old_labels = [b["label"] for b in old["builds"]]
    new_labels = [b["label"] for b in new["builds"]]
    if match == "position":
        pairs = list(zip(old_labels, new_labels))
    else:
        pairs = [(lab, lab) for lab in old_labels if lab in new_labels]
    old_builds = {b["label"]: b for b in old["builds"]}
    new_builds = {b["label"]: b for b in new["builds"]}
    paired_old = {o for o, _ in pairs}
    paired_new = {n for _, n in pairs}
    os_, ns_ = _steps(old), _steps(new)
    rows = []
    for key in [k for k in os_ if k in ns_]:
        (osc, ost), (nsc, nst) = os_[key], ns_[key]
        fixture_differs = any(osc["fixture"].get(f) != nsc["fixture"].get(f) for f in ("kind", "files", "bytes"))
        for ol, nl in pairs:
            ob, nb = ost["builds"].get(ol), nst["builds"].get(nl)
            if not ob or not nb or not ob.get("times") or not nb.get("times"):
                continue
            c = stats.compare(f"{ol} (old)", ob["times"], f"{nl} (new)", nb["times"], settings).to_json()
            osha, nsha = old_builds[ol].get("sha") or "", new_builds[nl].get("sha") or ""
            notes = []
            if fixture_differs:
                notes.append("fixture differs: not like-for-like")
            if osha != nsha:
                notes.append(f"commit {osha[:10]} → {nsha[:10]}")
            if c["noisy"]:
                notes.append("noisy")
            rows.append({"scenario": key[0], "step": key[1], "old_build": ol, "new_build": nl,
                         "old_mean": ob["stats"]["mean"] if ob.get("stats") else float(np.mean(ob["times"])),
                         "new_mean": nb["stats"]["mean"] if nb.get("stats") else float(np.mean(nb["times"])),
                         "old_n": len(ob["times"]), "new_n": len(nb["times"]), "c": c,
                         "fixture_differs": fixture_differs, "notes": notes})
    counts = {v: 0 for v in stats.VERDICTS}
    for r in rows:
        counts[r["c"]["verdict"]] += 1
    warnings = []
    if old.get("target", {}).get("name") != new.get("target", {}).get("name"):
        warnings.append(f"different targets: {old.get('target', {}).get('name')} vs {new.get('target', {}).get('name')}")
    for f in ("host", "cpu_model", "cpus"):
        a, b = old.get("environment", {}).get(f), new.get("environment", {}).get(f)
        if a != b:
            warnings.append(f"different {f}: {a} vs {b}")
    if old.get("settings", {}).get("quick") != new.get("settings", {}).get("quick"):
        warnings.append("one run used --quick sizes and the other not")
    return {
        "old": {"created": old.get("created"), "builds": old_labels},
        "new": {"created": new.get("created"), "builds": new_labels},
        "match": match, "pairs": pairs, "rows": rows, "counts": counts,
        "threshold": settings.threshold, "alpha": settings.alpha,
        "only_old": [f"{s} / {t}" for (s, t) in os_ if (s, t) not in ns_],
        "only_new": [f"{s} / {t}" for (s, t) in ns_ if (s, t) not in os_],
        "builds_only_old": [lab for lab in old_labels if lab not in paired_old],
        "builds_only_new": [lab for lab in new_labels if lab not in paired_new],
        "warnings": warnings,
    }


def render_compare_md(cmp: dict, old_name: str = "OLD", new_name: str = "NEW") -> str:
    from tabulate import tabulate

    md = report.md_escape
    lines = [f"# refbench compare: {md(old_name)} ({cmp['old']['created']}) → {md(new_name)} ({cmp['new']['created']})",
             ""]
    c = cmp["counts"]
    lines.append(f"**{c['slower']} slower · {c['faster']} faster · {c['no significant change']} no significant "
                 f"change · {c['inconclusive']} inconclusive** (new vs old per build and step; flagged when "
                 f"significant at α = {cmp['alpha']} and beyond ±{cmp['threshold'] * 100:.1f}%)")
    lines.append("")
    for w in cmp["warnings"]:
        lines.append(f"> ⚠️ {md(w)}")
    if cmp["warnings"]:
        lines.append("")
    if cmp["rows"]:
        same_label = all(r["old_build"] == r["new_build"] for r in cmp["rows"])
        table = []
        for r in cmp["rows"]:
            cc = r["c"]
            build = md(r["old_build"]) if same_label and r["old_build"] == r["new_build"] \
                else f"{md(r['old_build'])} → {md(r['new_build'])}"
            table.append([stats.MARKERS[cc["verdict"]], md(r["scenario"]), md(r["step"]), build,
                          f"{r['old_mean']:.3f}", f"{r['new_mean']:.3f}", report.fmt_pct(cc["rel"]),
                          report.fmt_ci(cc), report.fmt_p(cc["p_value"]), cc["verdict"], md("; ".join(r["notes"]))])
        lines.append(tabulate(table, headers=["", "Scenario", "Step", "Build", "Old mean [s]", "New mean [s]",
                                               "Change", "95% CI", "p", "Verdict", "Note"],
                              tablefmt="github", disable_numparse=True,
                              colalign=["left"] * 4 + ["right"] * 5 + ["left"] * 2))
    else:
        lines.append("*No step and build appears in both files.*")
    lines.append("")
    for title, items in ((f"Steps only in {old_name}", cmp["only_old"]), (f"Steps only in {new_name}", cmp["only_new"]),
                         (f"Builds only in {old_name}", cmp["builds_only_old"]),
                         (f"Builds only in {new_name}", cmp["builds_only_new"])):
        if items:
            lines.append(f"**{md(title)}:** " + ", ".join(md(i) for i in items))
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ---- subcommands ------------------------------------------------------------------------------
def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    from .cli import _Parser
    return _Parser(prog=prog, description=description)


def cmd_report(argv: list[str]) -> int:
    p = _parser("bench.py report", "render views of a saved results.json (any schema version this refbench reads)")
    p.add_argument("results", help="results.json of a run")
    p.add_argument("--html", help="write the self-contained HTML report here")
    p.add_argument("--csv", help="write one CSV row per step and build here")
    p.add_argument("-o", "--output", help="write the markdown summary here")
    p.add_argument("--format", choices=("md", "github"), default="md",
                   help="markdown flavour: md (summary.md) or github (PR comment, within GitHub's size limit)")
    args = p.parse_args(argv)
    results = _load(args.results)
    if args.html:
        write_html(results, Path(args.html))
        print(f"wrote {args.html}", file=sys.stderr)
    if args.csv:
        write_csv(results, Path(args.csv))
        print(f"wrote {args.csv}", file=sys.stderr)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(report.render_markdown(results, args.format), encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    if not (args.html or args.csv or args.output):
        sys.stdout.write(report.render_markdown(results, args.format))
    return EXIT_OK


def _load(path: str) -> dict:
    return report.load_results(Path(path))


def cmd_compare(argv: list[str]) -> int:
    from .cli import add_stats_args
    p = _parser("bench.py compare", "compare the same steps of two saved runs (e.g. last night's and tonight's)")
    p.add_argument("old", help="results.json of the earlier run")
    p.add_argument("new", help="results.json of the later run")
    p.add_argument("--match", choices=("label", "position"), default="label",
                   help="pair builds by label (default) or by position (baseline with baseline, ...)")
    p.add_argument("-o", "--output", help="also write the markdown comparison here")
    p.add_argument("--json", help="also write the comparison as JSON here")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 when any step got slower")
    add_stats_args(p)
    args = p.parse_args(argv)
    old, new = _load(args.old), _load(args.new)
    settings = stats.Settings(threshold=args.threshold, alpha=args.alpha, noise_limit=args.noise_limit)
    cmp = compare_runs(old, new, settings, args.match)
    if not cmp["pairs"]:
        raise RefbenchError(f"no build label is in both files ({', '.join(cmp['old']['builds'])} vs "
                            f"{', '.join(cmp['new']['builds'])}): use --match position")
    text = render_compare_md(cmp, Path(args.old).name if Path(args.old).name != Path(args.new).name else args.old,
                             Path(args.new).name if Path(args.old).name != Path(args.new).name else args.new)
    sys.stdout.write(text)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    if args.json:
        import json
        Path(args.json).write_text(json.dumps(cmp, indent=1), encoding="utf-8")
    if args.fail_on_regression and cmp["counts"]["slower"]:
        return EXIT_REGRESSION
    return EXIT_OK


__all__ = ["cmd_report", "cmd_compare", "write_html", "write_csv", "render_html", "csv_rows", "compare_runs",
           "render_compare_md", "size_families", "EXIT_ERROR"]


def write_extras(results: dict, html_path: str | None, csv_path: str | None) -> None:
    """The optional views a run or a merge writes beside its summary: --html and --csv."""
    if html_path:
        write_html(results, Path(html_path))
    if csv_path:
        write_csv(results, Path(csv_path))
