"""The HTML report: self-contained, names escaped, the latency-vs-size fit, older files; and the
real thing through ./bench.py (report on a real run, --html/--csv on the main command)."""
from __future__ import annotations

import copy
import csv
import json
import re
from pathlib import Path

import pytest

import factories as fx
from conftest import run_bench
from refbench import analysis, results as rs
from refbench.commands import report as report_cmd
from refbench.errors import RefbenchError
from refbench.render import csv as render_csv, html as render_html
from refbench.render.markdown import COMMENT_MARKER
from test_render_markdown import check_comment_shape


def _page(results: rs.Results) -> str:
    """The HTML report of results, analysed first as a run or `report` does."""
    return render_html.render_html(results, analysis.analyse(results))


def test_html_is_self_contained_and_escapes_names():
    doc = fx.basic_doc()
    doc["scenarios"][0]["name"] = "small <script>alert(1)</script> files"
    page = _page(rs.Results.from_json(doc))
    assert "<script" not in page.lower()
    assert "&lt;script&gt;" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page, re.I), "must not load anything"
    assert "<link" not in page.lower() and "@import" not in page and "url(" not in page
    assert page.count('class="chart dist"') == 3 and page.count('class="chart forest"') == 1
    assert page.count('class="run"') == 3 * 2 * 8  # every run is a dot
    assert "30." in page and "slower" in page


def test_a_step_card_shows_a_verdict_per_metric_and_none_without_other_metrics():
    doc = json.loads((Path(__file__).parent / "data" / "results-s5cmd.json").read_text())
    assert "class=\"metrics\"" not in _page(rs.Results.from_json(doc))  # wall time only: the chips say it all
    st = doc["scenarios"][0]["steps"][0]
    st["comparisons"].append({**st["comparisons"][0], "metric": "memory", "verdict": "slower", "rel": 0.5})
    page = _page(rs.Results.from_json(doc))
    steps = sum(len(sc["steps"]) for sc in doc["scenarios"])
    assert page.count('class="metrics"') == steps  # the run judged memory: every card shows the table
    assert page.count('<td class="muted">n/a</td>') == steps - 1  # memory unmeasured elsewhere: not guessed
    card = page[page.index('class="metrics"'):]
    card = card[:card.index("</table>")]
    assert 'data-metric="wall"' in card and 'data-metric="memory" data-verdict="slower"' in card
    assert "+50.0% slower" in card and "<th>Memory</th>" in card and "<th>Time</th>" in card


def test_latency_vs_size_fit_recovers_overhead_and_throughput():
    tp, overhead = 200e6, 0.05
    sizes = {"small": 10 << 20, "medium": 100 << 20, "large": 1 << 30}
    steps = {(n, "upload"): {"old": fx.times(overhead + b / tp, seed=i),
                             "new": fx.times(overhead + b / (tp / 2), seed=9 + i)}
             for i, (n, b) in enumerate(sizes.items())}
    r = fx.results(steps, fixtures={n: (1, b) for n, b in sizes.items()})
    fams = analysis.size_families(r)
    assert len(fams) == 1 and fams[0].step == "upload" and len(fams[0].sizes) == 3
    old, new = fams[0].builds["old"], fams[0].builds["new"]
    assert old.throughput == pytest.approx(tp, rel=0.05)
    assert new.throughput == pytest.approx(tp / 2, rel=0.05)
    assert old.overhead == pytest.approx(overhead, abs=0.03)
    page = _page(r)
    assert 'id="latency-vs-size"' in page and 'class="chart fit"' in page
    # one size only, or sizes of different file counts: no fit
    assert analysis.size_families(fx.basic()) == []
    mixed = fx.results({("many", "upload"): {"old": fx.times(1.0), "new": fx.times(1.0)},
                        ("one", "upload"): {"old": fx.times(0.5), "new": fx.times(0.5)}},
                       fixtures={"many": (200, 50 << 20), "one": (1, 256 << 20)})
    assert analysis.size_families(mixed) == []


def test_views_read_older_files_without_optional_fields(tmp_path):
    r = fx.basic_doc()
    old = copy.deepcopy(r)
    for k in ("scoreboard", "timing", "command_line"):
        old.pop(k, None)
    old["version"] = 1
    for sc in old["scenarios"]:
        for st in sc["steps"]:
            for b in st["builds"].values():
                for k in ("cpu_mean", "cpu_wall_ratio", "rss_kb", "check", "user", "system", "rounds", "prepare"):
                    b.pop(k, None)
    old["timing"] = None
    old["command_line"] = []
    (tmp_path / "old.json").write_text(json.dumps(old))
    loaded = rs.load(tmp_path / "old.json")
    assert "n/a" in _page(loaded)
    render_csv.write_csv(loaded, tmp_path / "old.csv")
    newer = dict(r, version=rs.SCHEMA_VERSION + 1)
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    with pytest.raises(RefbenchError, match="newer"):
        report_cmd.main([str(tmp_path / "newer.json")])


# ---- the real thing ------------------------------------------------------------------------
@pytest.mark.slow
def test_report_subcommand_on_a_real_run(s5_run, tmp_path):
    html, csvf, md = tmp_path / "r.html", tmp_path / "r.csv", tmp_path / "comment.md"
    proc = run_bench("report", str(s5_run["results"]), "--html", str(html), "--csv", str(csvf),
                     "--format", "github", "-o", str(md))
    assert proc.returncode == 0, proc.stderr
    results = rs.load(s5_run["results"])
    n_steps = sum(len(sc.steps) for sc in results.scenarios)
    page = html.read_text()
    assert page.count('class="chart dist"') == n_steps
    rows = list(csv.DictReader(csvf.open()))
    assert len(rows) == n_steps * len(results.builds)
    # hyperfine 2.0 measured CPU and memory: each step's card and CSV row carry their verdicts too
    assert results.judged_metrics()[:2] == ("cpu", "memory")
    for _, st, c in results.comparisons():
        cpu = st.by_metric(c.contender)["cpu"]
        assert f'data-metric="cpu" data-verdict="{cpu.verdict}"' in page
        row = next(r for r in rows if r["step"] == st.name and r["build"] == c.contender)
        assert row["cpu_verdict"] == cpu.verdict and row["memory_verdict"] == st.by_metric(c.contender)["memory"].verdict
    comment = md.read_text()
    check_comment_shape(comment)
    proc = run_bench("report", str(s5_run["results"]))
    assert proc.returncode == 0 and proc.stdout == s5_run["summary"].read_text()
    # a run compared with itself: every step in both files, nothing only in one
    proc = run_bench("compare", str(s5_run["results"]), str(s5_run["results"]))
    assert proc.returncode == 0, proc.stderr
    check_self_compare(proc.stdout, results)


def check_self_compare(text: str, results: rs.Results) -> None:
    """`refbench compare` of a results file with itself: a row for every step and build, each
    unchanged (the same samples: no change, never slower or faster), nothing only in one file.
    ("slower" appears in any compare's header, so its presence says nothing.)"""
    assert "only in" not in text, text
    assert re.search(r"\*\*0 slower · 0 faster · \d+ no significant change · \d+ inconclusive\*\*", text), text
    for sc in results.scenarios:
        for st in sc.steps:
            for label in st.builds:
                row = re.compile(rf"^\|[^|]*\|\s*{re.escape(sc.name)}\s*\|\s*{re.escape(st.name)}\s*\|"
                                 rf"\s*{re.escape(label)}\s*\|.*\|\s*[-+]0\.0%\s*\|", re.M)
                assert len(row.findall(text)) == 1, (sc.name, st.name, label, text)


def test_self_compare_check_reads_compare_output():
    """check_self_compare against the compare of a committed run with itself, and with a changed
    copy: it must fail there (a check that cannot fail is no check)."""
    from refbench.pairing import pair_runs
    from refbench.render.markdown import render_pairing_md
    from test_golden import other_run

    path = Path(__file__).parent / "data" / "results-s5cmd.json"
    results = rs.load(path)
    check_self_compare(render_pairing_md(pair_runs(results, results), "a", "b"), results)
    changed = rs.Results.from_json(other_run(json.loads(path.read_text())))
    with pytest.raises(AssertionError):
        check_self_compare(render_pairing_md(pair_runs(results, changed), "a", "b"), results)


@pytest.mark.slow
def test_main_command_writes_html_and_csv(s5_run, s5_origin, builds_dir, tmp_path):
    """--html / --csv on the main command (builds are cached by s5_run: one short step)."""
    proc = run_bench("-s", "v1.0.0", "7", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     "--quick", "--only", "small files/remove", "-r", "2", "-w", "0", "--rounds", "1", "--no-rss",
                     "--no-profile", "-o", str(tmp_path / "summary.md"), "--html", str(tmp_path / "r.html"),
                     "--csv", str(tmp_path / "r.csv"), "--format", "github", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert 'class="chart dist"' in (tmp_path / "r.html").read_text()
    assert len(list(csv.DictReader((tmp_path / "r.csv").open()))) == 2
    assert (tmp_path / "summary.md").read_text().startswith(COMMENT_MARKER)
