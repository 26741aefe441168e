"""Identical binaries: a contender whose binary is byte-identical to the baseline's, running the
same commands, is answered `identical binary` without measuring (issue 18, part 2)."""
from __future__ import annotations

import json
import re
import time

import pytest

from conftest import ROOT, run_bench
from refbench import figures, judge, pipeline, results as rs, stats
from refbench.config import load_config
from refbench.verdict import Verdict


# ---- fast: the check and the verdict ---------------------------------------------------------
def test_vary_makes_a_comparison_of_configurations():
    scen = [s for s in load_config(ROOT / "refbench" / "scenarios.toml").scenarios if s.target == "s5cmd"]
    assert pipeline.same_commands(scen, 1)
    varied = [s.__class__(**{**s.__dict__, "vary": {"w": [["-n", "4"], ["-n", "64"]]}}) for s in scen[:1]]
    assert not pipeline.same_commands(varied, 1)
    same = [s.__class__(**{**s.__dict__, "vary": {"w": [["-n", "4"], ["-n", "4"], ["-n", "8"]]}}) for s in scen[:1]]
    assert pipeline.same_commands(same, 1) and not pipeline.same_commands(same, 2)


def test_identical_is_no_change_and_survives_the_results_file():
    c = figures.identical("v1", "v1-docs")
    assert c.verdict == Verdict.IDENTICAL and c.verdict.no_change and c.marker == Verdict(c.verdict).marker
    assert c.p_value is None and c.rel == 0.0
    back = rs.read_contrast(json.loads(json.dumps(c.to_json())))
    assert back.verdict == Verdict.IDENTICAL and back.ratio == 1.0
    # the run's p adjustment leaves it as it is
    assert judge.adjust_family([c, c])[0].verdict == Verdict.IDENTICAL


# ---- end to end: the s5cmd test origin, branch docs-only = v1.0.0 plus a README ---------------


def _run(tmp_path, s5_origin, builds_dir, *extra):
    local = tmp_path / "local"
    local.mkdir(exist_ok=True)
    t0 = time.monotonic()
    proc = run_bench("-l", str(local), "-s", "v1.0.0", "docs-only", "--repo", str(s5_origin.path),
                     "--builds-dir", str(builds_dir), "--quick", "-r", "2", "-w", "0", "--rounds", "1",
                     "-o", str(tmp_path / "summary.md"), "--json", str(tmp_path / "results.json"),
                     "--csv", str(tmp_path / "r.csv"), "--html", str(tmp_path / "r.html"), *extra, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert list(local.iterdir()) == []
    return proc, json.loads((tmp_path / "results.json").read_text()), time.monotonic() - t0


def _verdicts(r):
    return [c["verdict"] for sc in r["scenarios"] for st in sc["steps"] for c in st["comparisons"]]


@pytest.mark.slow
def test_a_docs_only_pair_is_answered_without_measuring(tmp_path, s5_origin, builds_dir):
    proc, r, _ = _run(tmp_path, s5_origin, builds_dir)
    shas = {b["binary_sha256"] for b in r["builds"]}
    assert len(shas) == 1 and re.fullmatch(r"[0-9a-f]{64}", shas.pop())
    verdicts = _verdicts(r)
    assert verdicts and set(verdicts) == {Verdict.IDENTICAL}
    assert r["timing"]["hyperfine_seconds"] == 0 and r["timing"]["fixture_seconds"] == 0
    assert "MinIO" not in proc.stderr  # no backend started
    summary = (tmp_path / "summary.md").read_text()
    assert f"{len(verdicts)} identical binary" in summary
    assert "identical binary" in (tmp_path / "r.csv").read_text()
    assert "identical binary" in (tmp_path / "r.html").read_text()
    gh = run_bench("report", str(tmp_path / "results.json"), "--format", "github", cwd=tmp_path)
    assert gh.returncode == 0 and f"{Verdict.IDENTICAL.marker} {len(verdicts)} identical binary" in gh.stdout


@pytest.mark.slow
def test_measure_identical_measures_them(tmp_path, s5_origin, builds_dir):
    _, r, _ = _run(tmp_path, s5_origin, builds_dir, "--measure-identical", "--only", "small files/remove")
    assert Verdict.IDENTICAL not in _verdicts(r) and _verdicts(r)
    assert r["timing"]["hyperfine_seconds"] > 0


@pytest.mark.slow
def test_a_vary_table_is_measured(tmp_path, s5_origin, builds_dir):
    scen = tmp_path / "scenarios.toml"
    text = (ROOT / "refbench" / "scenarios.toml").read_text()
    target = text[text.index("[targets.s5cmd]"):text.index("# ---- s5cmd: the seed")]
    scen.write_text(target + '''
[[scenarios]]
name = "workers"
target = "s5cmd"
fixture = { kind = "sparse", size = "64K", count = 20 }
vary = { workers = [["--numworkers", "4"], ["--numworkers", "8"]] }
  [[scenarios.steps]]
  name = "upload"
  command = "{{ bin }} {{ workers }} cp {{ fixture ~ '/*' }} {{ remote ~ '/up/' }}"
  cleanup = "{{ bin }} rm {{ remote ~ '/up/*' }}"
''')
    _, r, _ = _run(tmp_path, s5_origin, builds_dir, "--scenarios", str(scen))
    assert _verdicts(r) and Verdict.IDENTICAL not in _verdicts(r)


@pytest.mark.slow
def test_three_builds_measure_only_the_one_that_differs(tmp_path, s5_origin, builds_dir):
    """baseline, its docs-only twin and another version: the twin is answered, the other measured;
    comparisons keep the builds' order."""
    local = tmp_path / "local"
    local.mkdir()
    proc = run_bench("-l", str(local), "-s", "v1.0.0", "docs-only", "v1.1.0", "--repo", str(s5_origin.path),
                     "--builds-dir", str(builds_dir), "--quick", "--only", "small files/remove", "-r", "2", "-w", "0",
                     "--rounds", "1", "-o", str(tmp_path / "s.md"), "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads((tmp_path / "r.json").read_text())
    (st,) = [st for sc in r["scenarios"] for st in sc["steps"]]
    labels = [b["label"] for b in r["builds"]]
    wall = [c for c in st["comparisons"] if c["metric"] == "wall"]  # the file lists every metric's
    assert [c["contender"] for c in wall] == labels[1:]
    assert wall[0]["verdict"] == Verdict.IDENTICAL and wall[1]["verdict"] != Verdict.IDENTICAL
    # the measured contender keeps a comparison of every metric the timer measured, not only the last
    assert {c["metric"] for c in st["comparisons"] if c["contender"] == labels[2]} >= {"wall", "cpu"}
    assert sorted(st["builds"]) == sorted([labels[0], labels[2]])  # the twin was not run
    assert "1 identical binary" in proc.stderr
