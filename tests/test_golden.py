"""The views of committed results files, byte for byte, in benchstat's style: each view is
rendered from a committed results.json and compared with a committed golden file. A change to
a view is a reviewed diff: `pytest tests/test_golden.py --update-golden` rewrites them.

What the renderer adds of its own (its version, the time a page is generated) is normalised, so
a golden file pins the view, not the machine or the release that rendered it."""
from __future__ import annotations

import copy
import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from conftest import ROOT
from refbench import analysis, nightly, results as rs
from refbench.render import trend
from refbench.pairing import pair_runs
from refbench.github import comment_body
from refbench.render.csv import write_csv
from refbench.render.html import render_html
from refbench.render.markdown import render_pairing_md, render_markdown

DATA = ROOT / "tests" / "data"
# real runs: the bundled s5cmd scenarios (--quick, s5cmd v2.2.2 vs v2.3.0) and an injected slow-down
FILES = sorted(p.name for p in DATA.glob("results-*.json"))


@pytest.fixture(params=FILES)
def named_results(request) -> tuple[str, rs.Results]:
    return Path(request.param).stem, rs.load(DATA / request.param)


def test_summary_md(named_results, golden):
    name, results = named_results
    golden(f"{name}.summary.md", render_markdown(results, "md"))


def test_github_comment(named_results, golden):
    name, results = named_results
    golden(f"{name}.comment.md", comment_body(render_markdown(results, "github"), "https://example.invalid/run/1"))


def test_csv(named_results, golden, tmp_path):
    name, results = named_results
    write_csv(results, tmp_path / "r.csv")
    golden(f"{name}.csv", (tmp_path / "r.csv").read_text(encoding="utf-8"))


def other_run(doc: dict) -> dict:
    """The same run's results as a second run would record them if each of the first two labels
    had moved to the other build's commit: under each label, the other build's samples, sha and
    binary. Compared with the first run, every step changes by the real difference between the two
    builds, measured on a real machine, once in each direction (and each label's commit changed).
    The second run is a day later, and its last step is missing (a step only the old run has)."""
    new = copy.deepcopy(doc)
    a, b = new["builds"][:2]
    for key in ("sha", "binary", "binary_sha256", "version"):
        a[key], b[key] = b.get(key), a.get(key)
    for sc in new["scenarios"]:
        for st in sc["steps"]:
            st["builds"][a["label"]], st["builds"][b["label"]] = st["builds"][b["label"]], st["builds"][a["label"]]
    created = datetime.strptime(new["created"], "%Y-%m-%dT%H:%M:%S%z") + timedelta(days=1)
    new["created"] = created.strftime("%Y-%m-%dT%H:%M:%S%z")
    last = new["scenarios"][-1]
    if len(last["steps"]) > 1:
        last["steps"].pop()
    return new


def test_compare_md_and_json(named_results, golden):
    """Two different runs: each step's samples against another build's (other_run), so the goldens
    pin the change paths: slower and faster with their intervals and p (the injected slow-down),
    no significant change, inconclusive and noisy, a single-run step (n/a), a changed commit and a
    step only the old run has."""
    name, results = named_results
    doc = json.loads((DATA / f"{name}.json").read_text())
    cmp = pair_runs(results, rs.Results.from_json(other_run(doc)))
    verdicts = {r.contrast.verdict for r in cmp.rows}
    assert len(verdicts) > 1 or name == "results-s5cmd"  # more than one path in every file
    assert all(r.contrast.rel != 0 for r in cmp.rows)  # nothing compared with itself
    golden(f"{name}.compare.md", render_pairing_md(cmp, "old/results.json", "new/results.json"))
    golden(f"{name}.compare.json", json.dumps(cmp.to_json(), indent=1) + "\n")


def test_compare_of_the_injected_slow_down_names_both_directions():
    """The change path pinned in numbers, beside the golden file: the run whose PR #7 sleeps 30%
    against the run where the labels traded builds."""
    doc = json.loads((DATA / "results-s5cmd.json").read_text())
    cmp = pair_runs(rs.Results.from_json(doc), rs.Results.from_json(other_run(doc)))
    rows = {r.old_build: r for r in cmp.rows}
    assert str(rows["v1.1.0"].contrast.verdict) == "slower" and str(rows["PR #7"].contrast.verdict) == "faster"
    assert rows["v1.1.0"].contrast.rel > 0.1 and rows["PR #7"].contrast.rel < -0.1
    assert all(any(n.startswith("commit ") for n in r.notes) for r in cmp.rows)


def normalised(page: str) -> str:
    """A page without what its renderer adds: refbench's own version."""
    return re.sub(r"(Rendered by refbench )\S+", r"\1VERSION", page)


def test_html_report(named_results, golden):
    name, results = named_results
    golden(f"{name}.report.html", normalised(render_html(results, analysis.analyse(results))))


def test_trend_page(golden, tmp_path):
    """The nightly trend page of the backtest's 40 nights (tests/test_changepoints.py, seed 7: a
    +15% step from night 25, spikes on nights 10 and 32, one change point with its bisect line),
    its clock fixed (nightly.trend_page's `clock`): the time the page was generated. Drawn and
    written as trend.write_trend does, with that clock."""
    from test_changepoints import backtest

    _, db = backtest(tmp_path, seed=7)
    try:
        model = nightly.trend_page(db, clock=lambda: "2026-03-01T04:00:00Z")
        page = nightly.write_page(tmp_path / "trend.html", trend.render_trend(model)).read_text()
    finally:
        db.close()
    assert page.count('class="changepoint"') == 1 and "2026-03-01T04:00:00Z" in page
    golden("trend.html", normalised(page))
