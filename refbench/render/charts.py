"""The HTML report's charts as inline SVG.

Written here, not with a charting library: the report must open offline from a CI artefact, so
nothing may be fetched; a vendored JS library would add megabytes to every report (plotly.js is
~3.5 MB) and need JavaScript, matplotlib would be a heavy dependency for a few boxes and dots.
Hand-written SVG is a few kB, crisp at any zoom, works with JavaScript off, its text is
searchable, and every run is a point with a hover tooltip (<title>).
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass

from collections.abc import Mapping

from ..figures import Box, SizeFamily
from ..results import Contrast, Samples, Step
from .env import VERDICT_COLOURS
from .format import fmt_bytes, fmt_ci, fmt_pct, fmt_seconds

BUILD_COLOURS = ["#0969da", "#bc4c00", "#8250df", "#1a7f37", "#cf222e", "#57606a", "#bf3989", "#0a7ea4"]
FONT = "font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif"


@dataclass(frozen=True)
class ForestRow:
    """One contrast in the forest chart, linking to its step's card."""
    scenario: str
    step: str
    c: Contrast
    anchor: str
    multi: bool  # more than one contender: name the build


def _e(text) -> str:
    return html.escape(str(text), quote=True)


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


def build_colour(labels: list[str], label: str) -> str:
    return BUILD_COLOURS[labels.index(label) % len(BUILD_COLOURS)] if label in labels else "#57606a"


# ---- charts -----------------------------------------------------------------------------------
def _box_row(lab: str, b: Samples, box: Box, cy: float, col: str, x, left: int) -> list[str]:
    """One build's row of the distribution chart: whiskers, quartile box (analysis computed both),
    the stored median and mean, and every run as a dot (its round in the tooltip)."""
    a = b.times
    out = [f'<text x="{left - 8}" y="{cy + 4:.1f}" text-anchor="end" fill="#24292f">{_e(lab)}</text>']
    q1, q3, wlo, whi = box.q1, box.q3, box.whisker_low, box.whisker_high
    med, mean = b.stats.median, b.stats.mean
    out.append(f'<line x1="{x(wlo):.1f}" y1="{cy:.1f}" x2="{x(whi):.1f}" y2="{cy:.1f}" stroke="{col}" '
               f'stroke-width="1.5"/>')
    for w in (wlo, whi):
        out.append(f'<line x1="{x(w):.1f}" y1="{cy - 6:.1f}" x2="{x(w):.1f}" y2="{cy + 6:.1f}" '
                   f'stroke="{col}" stroke-width="1.5"/>')
    out.append(f'<rect class="box" x="{x(q1):.1f}" y="{cy - 11:.1f}" width="{max(1.0, x(q3) - x(q1)):.1f}" '
               f'height="22" fill="{col}" fill-opacity="0.15" stroke="{col}" stroke-width="1.5"/>')
    out.append(f'<line x1="{x(med):.1f}" y1="{cy - 11:.1f}" x2="{x(med):.1f}" y2="{cy + 11:.1f}" '
               f'stroke="{col}" stroke-width="3"/>')
    rounds = b.rounds or [None] * len(a)
    for j, tv in enumerate(a):
        jitter = ((j * 7919) % 13 - 6) * 1.4  # deterministic, spreads ties vertically
        rd = f" (round {rounds[j] + 1})" if j < len(rounds) and rounds[j] is not None else ""
        out.append(f'<circle class="run" cx="{x(tv):.1f}" cy="{cy + jitter:.1f}" r="3.2" fill="{col}" '
                   f'fill-opacity="0.75" stroke="#fff" stroke-width="0.6"><title>{_e(lab)} run {j + 1}{rd}: '
                   f'{tv:.4f} s</title></circle>')
    out.append(f'<path d="M{x(mean):.1f},{cy - 16:.1f} l5,5 l-5,5 l-5,-5 z" fill="#24292f">'
               f'<title>{_e(lab)} mean {mean:.4f} s</title></path>')
    return out


def distribution_svg(step: Step, labels: list[str], boxes: Mapping[str, Box], width: int = 900) -> str:
    """Box plot + every run as a dot, one row per build (outliers and bimodality stay visible);
    `boxes`: each build's box (analysis.boxes)."""
    rows = [(lab, step.builds[lab]) for lab in labels if lab in step.builds and step.builds[lab].times]
    if not rows:
        return ""
    left, right, top, row_h, axis_h = 120, 24, 10, 40, 34
    height = top + row_h * len(rows) + axis_h
    allt = [t for _, b in rows for t in b.times]
    lo, hi = min(allt), max(allt)
    pad = (hi - lo) * 0.08 or max(hi * 0.05, 1e-6)
    lo, hi = max(0.0, lo - pad), hi + pad
    plot_w = width - left - right

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * plot_w

    out = [f'<svg class="chart dist" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="run times of {_e(step.name)}" '
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
        out += _box_row(lab, b, boxes[lab], top + row_h * i + row_h / 2, build_colour(labels, lab), x, left)
    out.append("</svg>")
    return "".join(out)


def forest_svg(rows: list[ForestRow], threshold: float, width: int = 900) -> str:
    """Every contrast's time change with its 95% CI, coloured by verdict, against the ±threshold
    band: the at-a-glance view of what got slower and by how much."""
    if not rows:
        return ""
    left, right, top, row_h, axis_h = 250, 120, 8, 26, 36
    height = top + row_h * len(rows) + axis_h
    vals = [0.0, -threshold * 2, threshold * 2]
    for r in rows:
        c = r.c
        vals += [v for v in (c.rel, c.ci_low, c.ci_high) if v is not None and math.isfinite(v)]
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
        c = r.c
        cy = top + row_h * i + row_h / 2
        col = VERDICT_COLOURS.get(c.verdict, "#57606a")
        name = f'{r.scenario} / {r.step}' + (f' ({c.contender})' if r.multi else "")
        out.append(f'<a href="#{_e(r.anchor)}"><text x="{left - 8}" y="{cy + 4:.1f}" text-anchor="end" '
                   f'fill="#0969da">{_e(name[:40])}</text></a>')
        if c.ci_low is not None:
            out.append(f'<line x1="{x(c.ci_low):.1f}" y1="{cy:.1f}" x2="{x(c.ci_high):.1f}" y2="{cy:.1f}" '
                       f'stroke="{col}" stroke-width="2.5"/>')
        out.append(f'<circle class="change" cx="{x(c.rel):.1f}" cy="{cy:.1f}" r="5" fill="{col}">'
                   f'<title>{_e(name)}: {_e(fmt_pct(c.rel))} {_e(fmt_ci(c))}, {_e(c.verdict)}'
                   f'</title></circle>')
        out.append(f'<text x="{width - right + 8}" y="{cy + 4:.1f}" fill="{col}" font-weight="600">'
                   f'{_e(fmt_pct(c.rel))} {_e(c.verdict.word)}</text>')
    out.append("</svg>")
    return "".join(out)


def fit_svg(family: SizeFamily, labels: list[str], width: int = 900, height: int = 340) -> str:
    """Latency vs bytes on log-log axes: every run as a dot, each build's fitted
    time = overhead + bytes / throughput as a line."""
    left, right, top, bottom = 70, 20, 12, 44
    pts = [(p[0], p[1]) for b in family.builds.values() for p in b.points if p[0] > 0 and p[1] > 0]
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
    for bx in family.sizes:  # x ticks: the sizes that were run
        out.append(f'<line x1="{X(bx):.1f}" y1="{top}" x2="{X(bx):.1f}" y2="{top + ph}" stroke="#eaeef2"/>'
                   f'<text x="{X(bx):.1f}" y="{top + ph + 15}" text-anchor="middle" fill="#57606a">'
                   f'{_e(fmt_bytes(bx))}</text>')
    for tv in log_ticks(ly0, ly1):
        out.append(f'<line x1="{left}" y1="{Y(tv):.1f}" x2="{left + pw}" y2="{Y(tv):.1f}" stroke="#eaeef2"/>'
                   f'<text x="{left - 6}" y="{Y(tv) + 4:.1f}" text-anchor="end" fill="#57606a">'
                   f'{_e(fmt_seconds(tv))}</text>')
    out.append(f'<text x="{left + pw / 2:.0f}" y="{height - 6}" text-anchor="middle" fill="#57606a">'
               f'bytes per run (log)</text>')
    for k, (lab, b) in enumerate(family.builds.items()):
        col = build_colour(labels, lab)
        for bx, t in b.points:
            if bx > 0 and t > 0:
                out.append(f'<circle class="run" cx="{X(bx):.1f}" cy="{Y(t):.1f}" r="3" fill="{col}" '
                           f'fill-opacity="0.6"><title>{_e(lab)}: {_e(fmt_bytes(bx))} in {t:.4f} s</title></circle>')
        if b.slope is not None:
            seg = []
            for i in range(61):
                bx = 10 ** (lx0 + (lx1 - lx0) * i / 60)
                t = b.overhead + b.slope * bx
                if t > 0 and ly0 <= math.log10(t) <= ly1:
                    seg.append(f"{X(bx):.1f},{Y(t):.1f}")
            if len(seg) > 1:
                out.append(f'<polyline points="{" ".join(seg)}" fill="none" stroke="{col}" stroke-width="2"/>')
        out.append(f'<rect x="{left + 10}" y="{top + 8 + 18 * k}" width="12" height="12" fill="{col}"/>'
                   f'<text x="{left + 28}" y="{top + 18 + 18 * k}" fill="#24292f">{_e(lab)}</text>')
    out.append("</svg>")
    return "".join(out)
