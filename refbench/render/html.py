"""The self-contained HTML report: scoreboard, verdict forest, one card per step with its
distribution chart, the latency-vs-size fits, builds and environment. No scripts, fonts or
images are fetched, so it opens offline from a CI artefact."""
from __future__ import annotations

import math
from pathlib import Path

from ._compat import normalise

from markupsafe import Markup

from .. import stats
from .charts import build_colour, distribution_svg, fit_svg, forest_svg
from .env import render as render_template
from .format import slug
from .markdown import throughput, verdict_counts

# order of the headline and of a long forest: what a reader must see first
_SEVERITY = {"slower": 0, "faster": 1, "inconclusive": 2, "no significant change": 3}


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def scoreboard(results: dict) -> list[dict]:
    """Per build: the run's stored geometric-mean scoreboard (runs of three or more builds store
    one; for two, the same stats.geomean_scoreboard over the stored ratios), and its verdict
    counts."""
    labels = [b["label"] for b in results["builds"]]
    counts = {lab: {v: 0 for v in stats.VERDICTS} for lab in labels}
    ratios: dict[str, list[float]] = {lab: [] for lab in labels}
    for sc in results["scenarios"]:
        for st in sc["steps"]:
            for c in st["comparisons"]:
                counts[c["contender"]][c["verdict"]] += 1
                if c.get("ratio") and c["ratio"] > 0 and math.isfinite(c["ratio"]):
                    ratios[c["contender"]].append(c["ratio"])
                    ratios[labels[0]].append(1.0)
    board = results.get("scoreboard") or stats.geomean_scoreboard(ratios)
    return [{"label": lab, "baseline": i == 0, "colour": build_colour(labels, lab), "counts": counts[lab],
             "geomean": _finite((board.get(lab) or {}).get("geomean_vs_baseline")),
             "vs_fastest": _finite((board.get(lab) or {}).get("vs_fastest"))}
            for i, lab in enumerate(labels)]


def size_families(results: dict) -> list[stats.SizeFamily]:
    """The run's steps run at several sizes, fitted by stats.size_families: grouped by fixture
    kind and file count (or a scenario's `family`)."""
    members = []
    for sc in results["scenarios"]:
        fx = sc["fixture"]
        fam = sc.get("family") or (f"{fx.get('kind')}, {fx.get('files')} file" + ("s" if fx.get("files") != 1 else ""))
        for st in sc["steps"]:
            members.append((st["name"], fam, sc["name"], fx.get("bytes"),
                            {lab: b["times"] for lab, b in st["builds"].items()}))
    return stats.size_families(members, [b["label"] for b in results["builds"]])


def _family_view(f: stats.SizeFamily, labels: list[str]) -> dict:
    return {"step": f.step, "kind": f.kind, "scenarios": f.scenarios, "sizes": f.sizes, "builds": f.builds,
            "anchor": slug("fit", f.step, f.kind), "svg": Markup(fit_svg(f, labels))}


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
                rows.append({"label": lab, "baseline": lab == labels[0], "s": b.get("stats") or {}, "b": b,
                             "c": comp.get(lab), "colour": build_colour(labels, lab),
                             "throughput": throughput(sc, b)[0]})
            worst = max(st["comparisons"], key=lambda c: (c["verdict"] == "slower", c["rel"]), default=None)
            steps.append({"scenario": sc["name"], "name": st["name"], "anchor": anchor, "st": st, "sc": sc,
                          "rows": rows, "worst": worst, "comparisons": st["comparisons"],
                          "svg": Markup(distribution_svg(st, labels))})
    by_severity = sorted(forest_rows, key=lambda r: (_SEVERITY[r["c"]["verdict"]], -abs(r["c"]["rel"])))
    return {"r": results, "labels": labels, "multi": multi, "counts": verdict_counts(results),
            "forest": Markup(forest_svg(forest_rows if len(forest_rows) <= 30 else by_severity, threshold)),
            "headline": [r for r in by_severity if r["c"]["verdict"] in ("slower", "faster")], "steps": steps,
            "families": [_family_view(f, labels) for f in size_families(results)], "scoreboard": scoreboard(results),
            "threshold": threshold, "baseline": labels[0] if labels else None}


def render_html(results: dict) -> str:
    return render_template("report.html.j2", **html_context(results))


def write_html(results: dict, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(results), encoding="utf-8")
