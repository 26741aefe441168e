"""The self-contained HTML report: scoreboard, verdict forest, one card per step with its
distribution chart, the latency-vs-size fits, builds and environment. No scripts, fonts or
images are fetched, so it opens offline from a CI artefact."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from markupsafe import Markup

from ..figures import Analysis, Box, BuildScore, SizeFamily
from ..results import SCHEMA, SCHEMA_VERSION, Results
from .charts import ForestRow, build_colour, distribution_svg, fit_svg, forest_svg
from .env import render as render_template
from ..units import slug
from ..verdict import Verdict
from .format import METRIC_NAMES
from .explain import fmt_apis, fmt_changes, fmt_shift, flame_svg


def _score_view(score: BuildScore, labels: list[str]) -> dict:
    """A build's scoreboard line with its colour (the counts and means come from the analysis)."""
    return {"label": score.label, "baseline": score.baseline, "colour": build_colour(labels, score.label),
            "counts": score.counts, "geomean": score.geomean, "vs_fastest": score.vs_fastest}


def _family_view(f: SizeFamily, labels: list[str]) -> dict:
    return {"step": f.step, "kind": f.kind, "scenarios": f.scenarios, "sizes": f.sizes, "builds": f.builds,
            "anchor": slug("fit", f.step, f.kind), "svg": Markup(fit_svg(f, labels))}


def _metric_rows(st, labels: list[str], metrics: tuple[str, ...]) -> list[dict]:
    """Each contender's verdict on wall time and on every other metric the run judged (None where
    this step has none: a metric the timer could not measure here)."""
    rows = []
    for lab in labels[1:]:
        by_metric = st.by_metric(lab)
        if by_metric:
            rows.append({"label": lab, "colour": build_colour(labels, lab),
                         "cells": [(METRIC_NAMES[m], by_metric.get(m)) for m in ("wall", *metrics)]})
    return rows


def _step_view(sc, st, labels: list[str], metrics: tuple[str, ...], boxes: Mapping[str, Box]) -> dict:
    """One step's card: a row per build with its summary, contrast and throughput, and a verdict
    per metric per contender where the run judged more than wall time."""
    comp = {c.contender: c for c in st.comparisons}
    rows = [{"label": lab, "baseline": lab == labels[0], "s": st.builds[lab].stats or {}, "b": st.builds[lab],
             "c": comp.get(lab), "colour": build_colour(labels, lab),
             "throughput": sc.fixture.throughput(st.builds[lab])[0]}
            for lab in labels if st.builds.get(lab)]
    worst = max(st.comparisons, key=lambda c: (c.verdict == Verdict.SLOWER, c.rel), default=None)
    return {"scenario": sc.name, "name": st.name, "anchor": slug(sc.name, st.name), "st": st, "sc": sc,
            "rows": rows, "worst": worst, "contrasts": st.comparisons, "svg": Markup(distribution_svg(st, labels, boxes)),
            "explain": _explain_view(st, labels), "metrics": _metric_rows(st, labels, metrics) if metrics else []}


def _explain_view(st, labels: list[str]) -> dict:
    """A step's requests, repo counters and profiles, formatted (explain.py)."""
    changes = {lab: fmt_changes([c for c in (st.request_changes or ()) if c.contender == lab], 8)
               for lab in labels[1:]}
    return {"requests": [(lab, r, fmt_apis(r)) for lab, r in (st.requests or {}).items()],
            "changes": {k: v for k, v in changes.items() if v}, "repo": list((st.repo or {}).items()),
            "profiles": [{"p": p, "top": [fmt_shift(f) for f in p.top],
                          "svg": Markup(flame_svg(p)) if p.stacks else None} for p in st.profiles or ()],
            "note": st.profile_note}


def html_context(results: Results, analysis: Analysis) -> dict:
    """What report.html.j2 shows: the results and their analysis, formatted."""
    labels = list(results.labels)
    multi = len(labels) > 2
    threshold = results.settings.threshold
    forest_rows = [ForestRow(sc.name, st.name, c, slug(sc.name, st.name), multi) for sc, st, c in results.comparisons()]
    # the headline's and a long forest's order
    by_severity = sorted(forest_rows, key=lambda r: (r.c.verdict.severity, -abs(r.c.rel)))
    timing = results.timing.to_json() if results.timing else {}
    return {"r": results, "labels": labels, "multi": multi, "counts": results.verdict_counts(),
            "forest": Markup(forest_svg(forest_rows if len(forest_rows) <= 30 else by_severity, threshold)),
            "headline": [r for r in by_severity if r.c.verdict.moved],
            "steps": [_step_view(sc, st, labels, results.judged_metrics(), analysis.boxes[(sc.name, st.name)])
                      for sc, st in results.steps()],
            "families": [_family_view(f, labels) for f in analysis.families],
            "scoreboard": [_score_view(s, labels) for s in analysis.scores],
            "threshold": threshold, "baseline": labels[0] if labels else None,
            "environment": results.environment.to_json(), "timing": timing, "schema": SCHEMA,
            "version": SCHEMA_VERSION}


def render_html(results: Results, analysis: Analysis) -> str:
    return render_template("report.html.j2", **html_context(results, analysis))


def write_html(results: Results, analysis: Analysis, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(results, analysis), encoding="utf-8")
