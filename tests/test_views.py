"""Views rendered from results.json: the GitHub PR-comment flavour and its size limit, compare of
two saved runs (missing steps and builds), CSV, the HTML report's self-containment, the
latency-vs-size fit, older files, progress output; and the real thing through ./bench.py."""
from __future__ import annotations

import copy
import csv
import io
import json
import re
import time

import numpy as np
import pytest
from rich.console import Console

from conftest import run_bench
from refbench import compare, report, stats
from refbench.commands import compare as compare_cmd, report as report_cmd
from refbench.render import csv as render_csv, html as render_html, markdown
from refbench.render.format import slug
from refbench.errors import RefbenchError
from refbench.progress import Reporter

SETTINGS = stats.Settings(resamples=400)


# ---- synthetic results (same shape as a real run's results.json) -------------------------------
def _times(mean: float, n: int = 8, cv: float = 0.01, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(mean * (1 + cv * z)) for z in rng.standard_normal(n)]


_COMPARE_CACHE: dict = {}


def _compare(a, at, b, bt, cache: bool):
    """stats.compare; with cache, one bootstrap per (rounded) ratio (for runs with 1000s of steps)."""
    if not cache:
        return stats.compare(a, at, b, bt, SETTINGS).to_json()
    key = (a, b, round(float(np.mean(bt) / np.mean(at)), 1))
    if key not in _COMPARE_CACHE:
        _COMPARE_CACHE[key] = stats.compare(a, at, b, bt, SETTINGS).to_json()
    return dict(_COMPARE_CACHE[key])


def make_results(steps: dict, labels=("old", "new"), fixtures: dict | None = None, cache: bool = False) -> dict:
    """steps: {(scenario, step): {label: times}}; fixtures: {scenario: (files, bytes)}."""
    fixtures = fixtures or {}
    scenarios: dict[str, dict] = {}
    for (scn, stn), per_build in steps.items():
        files, nbytes = fixtures.get(scn, (10, 10 * 1024 * 1024))
        sc = scenarios.setdefault(scn, {
            "name": scn, "slug": slug(scn), "description": "",
            "fixture": {"kind": "sparse", "size": "1M", "size_bytes": nbytes // files, "count": files,
                        "files": files, "bytes": nbytes, "seed": 1, "path": "/tmp/fx"}, "steps": []})
        builds = {}
        for lab in labels:
            t = per_build[lab]
            builds[lab] = {"times": t, "user": [x * 0.3 for x in t], "system": [x * 0.1 for x in t],
                           "exit_codes": [0] * len(t), "rounds": [i % 2 for i in range(len(t))],
                           "stats": stats.summarize(t).to_json(), "cpu_mean": 0.4 * float(np.mean(t)),
                           "cpu_wall_ratio": 0.4, "rss_kb": 30000, "check": None,
                           "command": f"{lab}/s5cmd cp a b", "prepare": None}
        comps = [_compare(labels[0], per_build[labels[0]], lab, per_build[lab], cache) for lab in labels[1:]]
        sc["steps"].append({"name": stn, "runs": len(per_build[labels[0]]), "warmup": 1, "rounds": 2,
                            "builds": builds, "comparisons": comps, "check_differs": False,
                            "hyperfine_seconds": 1.0})
    blds = [{"label": lab, "ref": lab, "kind": "tag", "sha": f"{i:040x}", "display": lab, "version": lab,
             "binary": f"/b/{lab}", "source": "git", "toolchain": "go1.24", "cached": True, "build_seconds": 0.0}
            for i, lab in enumerate(labels)]
    return report.build_results(
        target={"name": "s5cmd", "repo": "https://example.invalid/s5cmd", "source": "git", "backend": "s3"},
        builds=blds, backend={"kind": "s3", "endpoint": "embedded MinIO (loopback)"},
        settings={"runs": 8, "warmup": 1, "rounds": 2, "quick": True, "threshold": 0.05, "alpha": 0.05,
                  "noise_limit": 0.1, "until_decided": False, "max_runs": 60, "only": [], "hyperfine_flags": [],
                  "target_flags": []},
        scenarios=list(scenarios.values()), timing={"wall_seconds": 1.0},
        env={"host": "h", "os": "linux", "cpus": 2, "go": "go1.24", "hyperfine": "hyperfine 1.18.0",
             "cpu_model": "cpu"}, scoreboard=None, command_line=["-s", "a", "b"])


def basic_results() -> dict:
    return make_results({
        ("small files", "upload"): {"old": _times(1.0, seed=1), "new": _times(1.3, seed=2)},  # 30% slower
        ("small files", "download"): {"old": _times(0.5, seed=3), "new": _times(0.5, seed=4)},
        ("small files", "remove"): {"old": _times(0.2, seed=5), "new": _times(0.16, seed=6)},  # 20% faster
    })


# ---- GitHub PR comment ---------------------------------------------------------------------
def _check_comment_shape(text: str) -> None:
    assert text.splitlines()[0] == report.COMMENT_MARKER
    assert report.comment_size(text) <= report.GITHUB_COMMENT_LIMIT
    assert len(text) <= 65536 and len(text.encode("utf-16-le")) // 2 <= 65536
    assert text.count("<details>") == text.count("</details>")
    table = text.index("| Scenario")
    if "<details>" in text:
        assert table < text.index("<details>"), "verdict table must come before the details"


def test_github_comment_small_run_has_everything():
    r = basic_results()
    text = report.render_markdown(r, "github")
    _check_comment_shape(text)
    assert "1 slower" in text and "1 faster" in text
    assert re.search(r"\| 🔴 +\| small files +\| upload", text)
    for title in ("Detailed timings", "Resources", "Builds", "Hyperfine summary"):
        assert f"<summary>{title}" in text
    assert "Left out" not in text and "not shown" not in text


def test_github_comment_many_steps_stays_within_limit_and_keeps_regressions():
    steps = {}
    for i in range(1500):
        slow = i % 250 == 7  # 6 regressions spread through the run
        steps[(f"scenario number {i // 10} with a rather long descriptive name", f"step-{i}")] = {
            "old": _times(1.0, n=4, seed=i), "new": _times(1.4 if slow else 1.0, n=4, seed=i + 5000)}
    r = make_results(steps, cache=True)
    full = report.render_markdown(r, "md")
    assert report.comment_size(full) > report.GITHUB_COMMENT_LIMIT  # the plain summary would not fit
    text = report.render_github(r)
    _check_comment_shape(text)
    n_slow = report.verdict_counts(r)["slower"]
    assert n_slow >= 6
    assert text.count("| 🔴") == n_slow, "every regression must stay in the table"
    assert "more rows not shown" in text
    assert "Left out to fit GitHub's comment limit" in text


def test_github_comment_drops_details_before_verdict_rows():
    r = basic_results()
    full = report.render_github(r)
    limit = report.comment_size(full) - 200  # too small for all the details, plenty for the table
    text = report.render_github(r, limit=limit)
    assert report.comment_size(text) <= limit
    assert text.startswith(report.COMMENT_MARKER)
    assert "more rows not shown" not in text
    assert text.count("| small files") == 3
    assert "Left out to fit GitHub's comment limit" in text


# ---- compare two saved runs ----------------------------------------------------------------
def test_compare_flags_change_and_lists_missing_steps(tmp_path):
    old = make_results({
        ("small files", "upload"): {"old": _times(1.0, seed=1), "new": _times(1.0, seed=2)},
        ("small files", "remove"): {"old": _times(0.2, seed=3), "new": _times(0.2, seed=4)},
        ("large file", "upload"): {"old": _times(2.0, seed=5), "new": _times(2.0, seed=6)},
    })
    new = make_results({
        ("small files", "upload"): {"old": _times(1.0, seed=7), "new": _times(1.35, seed=8)},  # regressed
        ("small files", "remove"): {"old": _times(0.2, seed=9), "new": _times(0.2, seed=10)},
        ("small files", "download"): {"old": _times(0.5, seed=11), "new": _times(0.5, seed=12)},
    }, fixtures={"small files": (10, 10 * 1024 * 1024)})
    cmp = compare.compare_runs(old, new, SETTINGS)
    assert list(cmp.only_old) == ["large file / upload"]
    assert list(cmp.only_new) == ["small files / download"]
    by = {(r.scenario, r.step, r.old_build): r for r in cmp.rows}
    assert len(by) == 4  # two common steps × two builds
    assert by[("small files", "upload", "new")].comparison.verdict == "slower"
    assert by[("small files", "upload", "new")].comparison.rel == pytest.approx(0.35, abs=0.05)
    assert by[("small files", "upload", "old")].comparison.verdict in ("no significant change", "inconclusive")
    md = markdown.render_compare_md(cmp, "old.json", "new.json")
    assert "Steps only in old.json:** large file / upload" in md
    assert "Steps only in new.json:** small files / download" in md
    assert re.search(r"🔴 +\| small files +\| upload +\| new", md)

    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    proc = run_bench("compare", str(tmp_path / "old.json"), str(tmp_path / "new.json"), "--fail-on-regression",
                     "--json", str(tmp_path / "cmp.json"))
    assert proc.returncode == 1, proc.stderr
    assert "large file / upload" in proc.stdout
    assert json.loads((tmp_path / "cmp.json").read_text())["only_new"] == ["small files / download"]
    assert compare_cmd.main([str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 0


def test_compare_builds_only_in_one_file_and_position_matching(tmp_path):
    old = make_results({("s", "a"): {"v1": _times(1.0, seed=1), "v2": _times(1.0, seed=2)}}, labels=("v1", "v2"))
    new = make_results({("s", "a"): {"v1": _times(1.0, seed=3), "v3": _times(1.0, seed=4)}}, labels=("v1", "v3"))
    cmp = compare.compare_runs(old, new, SETTINGS)
    assert cmp.builds_only_old == ("v2",) and cmp.builds_only_new == ("v3",)
    assert [r.old_build for r in cmp.rows] == ["v1"]
    cmp = compare.compare_runs(old, new, SETTINGS, match="position")
    assert [(r.old_build, r.new_build) for r in cmp.rows] == [("v1", "v1"), ("v2", "v3")]
    assert "v2 → v3" in markdown.render_compare_md(cmp)


def test_compare_marks_different_fixtures():
    old = make_results({("s", "a"): {"old": _times(1.0, seed=1), "new": _times(1.0, seed=2)}},
                       fixtures={"s": (10, 1 << 20)})
    new = make_results({("s", "a"): {"old": _times(1.0, seed=3), "new": _times(1.0, seed=4)}},
                       fixtures={"s": (100, 1 << 24)})
    cmp = compare.compare_runs(old, new, SETTINGS)
    assert all(r.fixture_differs for r in cmp.rows)
    assert "fixture differs" in markdown.render_compare_md(cmp)


def test_compare_bad_input_is_one_line_exit_2(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(basic_results()))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    proc = run_bench("compare", str(good), str(tmp_path / "missing.json"))  # as a user sees it
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"refbench: error: {tmp_path / 'missing.json'}: no such results file"]
    with pytest.raises(RefbenchError, match="not a refbench results file"):
        compare_cmd.main([str(good), str(bad)])
    with pytest.raises(RefbenchError, match="is a directory"):
        compare_cmd.main([str(good), str(tmp_path)])
    with pytest.raises(SystemExit) as e:
        compare_cmd.main([str(good)])
    assert e.value.code == 2
    other = make_results({("s", "a"): {"x": _times(1.0), "y": _times(1.0)}}, labels=("x", "y"))
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(RefbenchError, match="--match position"):
        compare_cmd.main([str(good), str(tmp_path / "other.json")])
    assert RefbenchError("x").code == 2


# ---- CSV -----------------------------------------------------------------------------------
def test_csv_one_row_per_step_and_build_with_statistics(tmp_path):
    r = basic_results()
    path = tmp_path / "out.csv"
    render_csv.write_csv(r, path)
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 3 * 2
    assert list(rows[0]) == render_csv.CSV_FIELDS
    up_new = next(x for x in rows if x["step"] == "upload" and x["build"] == "new")
    assert up_new["verdict"] == "slower" and float(up_new["rel_change"]) == pytest.approx(0.3, abs=0.05)
    assert float(up_new["ci_low"]) < float(up_new["rel_change"]) < float(up_new["ci_high"])
    assert int(up_new["n"]) == len(up_new["times_s"].split()) == 8
    up_old = next(x for x in rows if x["step"] == "upload" and x["build"] == "old")
    assert up_old["is_baseline"] == "True" and up_old["verdict"] == ""
    for k in ("mean_s", "stddev_s", "median_s", "min_s", "max_s", "p95_s", "cv", "cpu_mean_s", "peak_rss_kib",
              "throughput_bytes_per_s"):
        float(up_old[k])


# ---- HTML ----------------------------------------------------------------------------------
def test_html_is_self_contained_and_escapes_names():
    r = basic_results()
    r["scenarios"][0]["name"] = "small <script>alert(1)</script> files"
    page = render_html.render_html(r)
    assert "<script" not in page.lower()
    assert "&lt;script&gt;" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page, re.I), "must not load anything"
    assert "<link" not in page.lower() and "@import" not in page and "url(" not in page
    assert page.count('class="chart dist"') == 3 and page.count('class="chart forest"') == 1
    assert page.count('class="run"') == 3 * 2 * 8  # every run is a dot
    assert "30." in page and "slower" in page


def test_latency_vs_size_fit_recovers_overhead_and_throughput():
    tp, overhead = 200e6, 0.05
    sizes = {"small": 10 << 20, "medium": 100 << 20, "large": 1 << 30}
    steps = {(n, "upload"): {"old": _times(overhead + b / tp, seed=i), "new": _times(overhead + b / (tp / 2), seed=9 + i)}
             for i, (n, b) in enumerate(sizes.items())}
    r = make_results(steps, fixtures={n: (1, b) for n, b in sizes.items()})
    fams = render_html.size_families(r)
    assert len(fams) == 1 and fams[0].step == "upload" and len(fams[0].sizes) == 3
    old, new = fams[0].builds["old"], fams[0].builds["new"]
    assert old.throughput == pytest.approx(tp, rel=0.05)
    assert new.throughput == pytest.approx(tp / 2, rel=0.05)
    assert old.overhead == pytest.approx(overhead, abs=0.03)
    page = render_html.render_html(r)
    assert 'id="latency-vs-size"' in page and 'class="chart fit"' in page
    # one size only, or sizes of different file counts: no fit
    assert render_html.size_families(basic_results()) == []
    mixed = make_results({("many", "upload"): {"old": _times(1.0), "new": _times(1.0)},
                          ("one", "upload"): {"old": _times(0.5), "new": _times(0.5)}},
                         fixtures={"many": (200, 50 << 20), "one": (1, 256 << 20)})
    assert render_html.size_families(mixed) == []


def test_views_read_older_files_without_optional_fields(tmp_path):
    r = basic_results()
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
    loaded = report.load_results(tmp_path / "old.json")
    assert "n/a" in render_html.render_html(loaded)
    render_csv.write_csv(loaded, tmp_path / "old.csv")
    newer = dict(r, version=report.SCHEMA_VERSION + 1)
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    with pytest.raises(RefbenchError, match="newer"):
        report_cmd.main([str(tmp_path / "newer.json")])


# ---- progress ------------------------------------------------------------------------------
def test_progress_plain_lines_have_rounds_and_eta():
    out = io.StringIO()
    rep = Reporter(force_plain=True, stream=out)
    rep.start(4, builds=["v1", "v2"])
    rep.status("small files / upload: round 1/2")
    time.sleep(0.05)
    rep.advance()
    rep.status("small files / upload: round 2/2")
    rep.advance()
    rep.stop()
    lines = out.getvalue().splitlines()
    assert "4 interleaved rounds of v1, v2" in lines[0]
    assert "round 1/2" in lines[1] and "0/4 rounds" in lines[1] and "ETA" not in lines[1]
    assert "round 2/2" in lines[2] and "1/4 rounds, ETA 0:00" in lines[2]
    assert "\x1b" not in out.getvalue(), "no terminal control codes in CI logs"
    assert "2 rounds in" in lines[-1]


def test_progress_terminal_bar_shows_step_and_eta():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160, color_system=None)
    rep = Reporter(console=console)
    assert rep.tty
    rep.start(3)
    rep.status("small files / download: round 2/3")
    rep.advance()
    rep.advance()
    rep.advance()  # --until-decided may add rounds beyond the plan
    rep.advance()
    rep._progress.refresh()
    text = buf.getvalue()
    rep.stop()
    assert "small files / download: round 2/3" in text and "rounds" in text
    assert re.search(r"ETA \d+:\d\d", text), "an ETA as soon as a round is done"
    assert rep.total == 4


# ---- the real thing ------------------------------------------------------------------------
@pytest.mark.slow
def test_report_subcommand_on_a_real_run(s5_run, tmp_path):
    html, csvf, md = tmp_path / "r.html", tmp_path / "r.csv", tmp_path / "comment.md"
    proc = run_bench("report", str(s5_run["results"]), "--html", str(html), "--csv", str(csvf),
                     "--format", "github", "-o", str(md))
    assert proc.returncode == 0, proc.stderr
    results = report.load_results(s5_run["results"])
    n_steps = sum(len(sc["steps"]) for sc in results["scenarios"])
    page = html.read_text()
    assert page.count('class="chart dist"') == n_steps
    assert len(list(csv.DictReader(csvf.open()))) == n_steps * len(results["builds"])
    comment = md.read_text()
    _check_comment_shape(comment)
    proc = run_bench("report", str(s5_run["results"]))
    assert proc.returncode == 0 and proc.stdout == s5_run["summary"].read_text()
    # a run compared with itself: every step in both files, nothing only in one
    proc = run_bench("compare", str(s5_run["results"]), str(s5_run["results"]))
    assert proc.returncode == 0, proc.stderr
    assert "only in" not in proc.stdout and "slower" in proc.stdout


@pytest.mark.slow
def test_main_command_writes_html_and_csv(s5_run, s5_origin, builds_dir, tmp_path):
    """--html / --csv on the main command (builds are cached by s5_run: one short step)."""
    proc = run_bench("-s", "v1.0.0", "7", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     "--quick", "--only", "small files/remove", "-r", "2", "-w", "0", "--rounds", "1", "--no-rss",
                     "-o", str(tmp_path / "summary.md"), "--html", str(tmp_path / "r.html"),
                     "--csv", str(tmp_path / "r.csv"), "--format", "github", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert 'class="chart dist"' in (tmp_path / "r.html").read_text()
    assert len(list(csv.DictReader((tmp_path / "r.csv").open()))) == 2
    assert (tmp_path / "summary.md").read_text().startswith(report.COMMENT_MARKER)


def test_busy_machine_is_called_out():
    from refbench import report
    quiet = {"environment": {"cpus": 2, "load_before": 2.5, "competing_cpu_share": 0.03}}
    assert report.busy_warning(quiet) is None  # a high load of our own making is not "busy"
    busy = {"environment": {"cpus": 2, "load_before": 0.3, "competing_cpu_share": 0.61}}
    assert "other work used 61% of its 2 CPUs" in report.busy_warning(busy)
    assert "load average 6.8" in report.busy_warning({"environment": {"cpus": 2, "load_before": 6.8}})
    assert report.busy_warning({"environment": {}}) is None  # older results files
