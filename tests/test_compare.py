"""Compare of two saved runs: changes per matched build and step, steps and builds in only one of
them, different fixtures, and bad input as one line and exit 2."""
from __future__ import annotations

import json
import re

import pytest

import factories as fx
from conftest import run_bench
from refbench import pairing, results as rs
from refbench.commands import compare as compare_cmd
from refbench.errors import RefbenchError
from refbench.render import markdown


def test_compare_flags_change_and_lists_missing_steps(tmp_path):
    old = fx.results_doc({
        ("small files", "upload"): {"old": fx.times(1.0, seed=1), "new": fx.times(1.0, seed=2)},
        ("small files", "remove"): {"old": fx.times(0.2, seed=3), "new": fx.times(0.2, seed=4)},
        ("large file", "upload"): {"old": fx.times(2.0, seed=5), "new": fx.times(2.0, seed=6)},
    })
    new = fx.results_doc({
        ("small files", "upload"): {"old": fx.times(1.0, seed=7), "new": fx.times(1.35, seed=8)},  # regressed
        ("small files", "remove"): {"old": fx.times(0.2, seed=9), "new": fx.times(0.2, seed=10)},
        ("small files", "download"): {"old": fx.times(0.5, seed=11), "new": fx.times(0.5, seed=12)},
    }, fixtures={"small files": (10, 10 * 1024 * 1024)})
    cmp = pairing.pair_runs(rs.Results.from_json(old), rs.Results.from_json(new), fx.CRITERIA)
    assert list(cmp.only_old) == ["large file / upload"]
    assert list(cmp.only_new) == ["small files / download"]
    by = {(r.scenario, r.step, r.old_build): r for r in cmp.rows}
    assert len(by) == 4  # two common steps × two builds
    assert by[("small files", "upload", "new")].contrast.verdict == "slower"
    assert by[("small files", "upload", "new")].contrast.rel == pytest.approx(0.35, abs=0.05)
    assert by[("small files", "upload", "old")].contrast.verdict in ("no significant change", "inconclusive")
    md = markdown.render_pairing_md(cmp, "old.json", "new.json")
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


def test_compare_builds_only_in_one_file_and_position_matching():
    old = fx.results({("s", "a"): {"v1": fx.times(1.0, seed=1), "v2": fx.times(1.0, seed=2)}}, labels=("v1", "v2"))
    new = fx.results({("s", "a"): {"v1": fx.times(1.0, seed=3), "v3": fx.times(1.0, seed=4)}}, labels=("v1", "v3"))
    cmp = pairing.pair_runs(old, new, fx.CRITERIA)
    assert cmp.builds_only_old == ("v2",) and cmp.builds_only_new == ("v3",)
    assert [r.old_build for r in cmp.rows] == ["v1"]
    cmp = pairing.pair_runs(old, new, fx.CRITERIA, match="position")
    assert [(r.old_build, r.new_build) for r in cmp.rows] == [("v1", "v1"), ("v2", "v3")]
    assert "v2 → v3" in markdown.render_pairing_md(cmp)


def test_compare_names_the_requests_that_differ_between_the_runs():
    """Both runs counted a build's S3 requests: compare shows what the new run asked for differently
    (a fact beside the estimate), and nothing where a run did not count them."""
    def doc(puts: int) -> dict:
        d = fx.results_doc({("s", "a"): {"old": fx.times(1.0, seed=puts), "new": fx.times(1.0, seed=puts + 1)}})
        d["scenarios"][0]["steps"][0]["requests"] = {
            lab: {"by_api": {"PutObject": puts, "ListObjectsV2": 1}, "received_bytes": puts * 1000}
            for lab in ("old", "new")}
        return d
    old, new = doc(200), doc(200)
    new["scenarios"][0]["steps"][0]["requests"]["new"]["by_api"]["PutObject"] = 400
    cmp = pairing.pair_runs(rs.Results.from_json(old), rs.Results.from_json(new), fx.CRITERIA)
    by = {r.old_build: r for r in cmp.rows}
    assert by["old"].request_changes == ()
    assert [(c.name, c.baseline_value, c.value) for c in by["new"].request_changes] == [("PutObject", 200, 400)]
    assert cmp.to_json()["rows"][1]["request_changes"][0]["value"] == 400
    assert "requests differ: PutObject 200 → 400 (×2.00)" in markdown.render_pairing_md(cmp)
    del old["scenarios"][0]["steps"][0]["requests"]  # the old run did not count: no change claimed
    cmp = pairing.pair_runs(rs.Results.from_json(old), rs.Results.from_json(new), fx.CRITERIA)
    assert all(r.request_changes == () for r in cmp.rows)


def test_compare_marks_different_fixtures():
    old = fx.results({("s", "a"): {"old": fx.times(1.0, seed=1), "new": fx.times(1.0, seed=2)}},
                     fixtures={"s": (10, 1 << 20)})
    new = fx.results({("s", "a"): {"old": fx.times(1.0, seed=3), "new": fx.times(1.0, seed=4)}},
                     fixtures={"s": (100, 1 << 24)})
    cmp = pairing.pair_runs(old, new, fx.CRITERIA)
    assert all(r.fixture_differs for r in cmp.rows)
    assert "fixture differs" in markdown.render_pairing_md(cmp)


def test_compare_bad_input_is_one_line_exit_2(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(fx.basic_doc()))
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
    other = fx.results_doc({("s", "a"): {"x": fx.times(1.0), "y": fx.times(1.0)}}, labels=("x", "y"))
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(RefbenchError, match="--match position"):
        compare_cmd.main([str(good), str(tmp_path / "other.json")])
    assert RefbenchError("x").code == 2
