"""The nightly trend page: one chart per step's series of nights (the watched build's mean ± σ,
the baseline's mean, the change points), as SVG geometry in the page's template. The page's model
(nightly.TrendPage: the series and their change points) is built before, by nightly.trend_page
from the history; render_trend only draws it, and nothing here queries or detects."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from ..changepoints import Params
from ..nightly import TrendPage, trend_page, write_page
from ..verdict import Verdict
from .env import render as render_template
from .format import METRIC_NAMES, fmt_bytes, fmt_pct

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 720, 230, 64, 60, 26, 40


def _value(metric: str, digits: str, unit: str = " s"):
    """How a series' values read: seconds (wall, daemon or server CPU; `digits` a format spec) or bytes."""
    return (lambda v: f"{v:{digits}}{unit}") if metric in ("wall", "daemon-cpu", "server-cpu") else fmt_bytes


def _chart(s, several: bool) -> dict:
    """One series' chart (s: a history.TrendSeries of the page) as the template's geometry."""
    pts = s.nights
    fmt, tick, spread = _value(s.metric, ".3f"), _value(s.metric, ".3g"), _value(s.metric, ".3f", "")
    top = max(max(p.h_mean + (p.h_sd or 0), p.b_mean) for p in pts) * 1.15 or 1.0
    n = len(pts)
    plot_w, plot_h = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def x(i):
        return PAD_L + (plot_w / 2 if n == 1 else i * plot_w / (n - 1))

    def y(v):
        return PAD_T + plot_h * (1 - v / top)

    points = []
    for i, p in enumerate(pts):
        sd = p.h_sd or 0.0
        points.append({
            "x": round(x(i), 1), "y": round(y(p.h_mean), 1), "by": round(y(p.b_mean), 1),
            "y_hi": round(y(p.h_mean + sd), 1), "y_lo": round(y(max(0.0, p.h_mean - sd)), 1),
            "verdict": Verdict(p.verdict),
            "title": (f"run {p.id} {p.started}: {p.h_label} {p.h_sha[:10]} {fmt(p.h_mean)} ± {spread(sd)} "
                      f"vs {p.b_label} {p.b_sha[:10]} {fmt(p.b_mean)}: {p.verdict} "
                      f"({fmt_pct(p.rel)})"),
            "date": p.started[:10], "run": p.id,
        })
    cps = [{**asdict(c), "x": round((x(c.index - 1) + x(c.index)) / 2, 1),
            "y_before": round(y(c.before), 1), "y_after": round(y(c.after), 1),
            "x_start": round(x(max(0, c.index - 1)), 1), "x_end": round(x(c.index), 1)}
           for c in s.changepoints]
    ticks = [{"y": round(y(top * k / 4), 1), "label": tick(top * k / 4)} for k in range(5)]
    return {
        "target": s.target or "", "machine": s.machine or "", "head_ref": s.head_ref or "", "several": several,
        "scenario": s.scenario, "metric": s.metric,
        # a daemon metric's chart names it (the template shows scenario / step)
        "step": s.step if s.metric == "wall" else f"{s.step}: {METRIC_NAMES[s.metric]}",
        "points": points, "ticks": ticks, "width": W, "height": H,
        "left": PAD_L, "right": W - PAD_R, "bottom": H - PAD_B, "top": PAD_T,
        "head_path": " ".join(f"{'M' if i == 0 else 'L'}{p['x']},{p['y']}" for i, p in enumerate(points)),
        "base_path": " ".join(f"{'M' if i == 0 else 'L'}{p['x']},{p['by']}" for i, p in enumerate(points)),
        "regressions": sum(p["verdict"] == Verdict.SLOWER for p in points), "last": pts[-1], "changepoints": cps,
    }


def render_trend(page: TrendPage) -> str:
    """The page: a chart per series (each says its target, ref and machine when the page shows
    several), the recent runs, and the change-point rule it applied."""
    several = len({(s.target, s.machine, s.head_ref) for s in page.series}) > 1
    return render_template(
        "trend.html.j2", title=page.title, charts=[_chart(s, several) for s in page.series], runs=list(page.runs),
        generated=page.generated, machines=page.machines, targets=page.targets, shown_target=page.shown_target,
        shown_machine=page.shown_machine, params=page.params, statistic=page.statistic)


def write_trend(db, path: Path, title: str = "refbench nightly", target: str | None = None,
                machine: str | None = None, params: Params = Params(), statistic: str = "median") -> Path:
    """The trend page of a history (`db`, a history.History; or of one target / machine): its model
    built first by nightly.trend_page (the only query), then drawn and written atomically. The one
    composition `nightly --render-only` and the history tests call; the drawing reads the model only."""
    return write_page(path, render_trend(trend_page(db, title, target, machine, params, statistic)))
