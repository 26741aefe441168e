"""The typed results model: a file read and written again is the same document, older files are
upgraded with their optional fields defaulted, and every malformed file is one RefbenchError that
names the file and the part that is wrong."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from factories import basic, basic_doc, one_step_doc
from refbench import results as rs, stats
from refbench.errors import RefbenchError
from refbench.verdict import Verdict


DATA = Path(__file__).parent / "data"


def _contains(big, small, where="") -> None:
    """Every key and value of `small` is in `big` (defaults may add keys, never change one)."""
    if isinstance(small, dict):
        for k, v in small.items():
            assert k in big, f"{where}.{k} lost"
            _contains(big[k], v, f"{where}.{k}")
    elif isinstance(small, list):
        assert len(big) == len(small), where
        for i, (b, s) in enumerate(zip(big, small)):
            _contains(b, s, f"{where}[{i}]")
    else:
        assert big == small, (where, big, small)


def test_a_real_results_file_read_and_written_again_is_the_same_document():
    doc = json.loads((DATA / "results-s5cmd.json").read_text())  # written by a real --quick run
    assert rs.Results.from_json(doc).to_json() == doc
    assert list(rs.Results.from_json(doc).to_json()) == list(doc)  # and the keys in the same order


def test_partial_documents_keep_every_value_and_then_round_trip():
    for doc in (basic_doc(), one_step_doc()):
        doc = json.loads(json.dumps(doc))  # as a file holds it
        out = rs.Results.from_json(doc).to_json()
        _contains(out, doc)
        assert rs.Results.from_json(out).to_json() == out


def test_fields_are_typed_and_frozen():
    r = basic()
    sc, st, c = next(r.comparisons())
    assert isinstance(r.settings, rs.Settings) and r.settings.threshold == 0.05
    assert isinstance(st.builds["old"], rs.Samples) and isinstance(st.builds["old"].stats, stats.Summary)
    assert isinstance(c, stats.Contrast) and isinstance(c.verdict, Verdict)
    assert r.labels == ("old", "new") and r.baseline == "old"
    assert [s.name for _, s in r.steps()] == ["upload", "download", "remove"]
    with pytest.raises(AttributeError):
        r.settings.threshold = 0.1  # frozen
    with pytest.raises(TypeError):
        st.builds["x"] = st.builds["old"]  # read-only mapping
    assert r.replace(stopped="watchdog").stopped == "watchdog" and r.stopped is None


def test_optional_parts_are_left_out_unless_present():
    doc = basic_doc()
    out = rs.Results.from_json(doc).to_json()
    assert "resources" not in out and "stopped" not in out and "shard" not in out["settings"]
    doc["settings"]["shard"] = "1/2"
    doc["stopped"] = "the watchdog stopped the run"
    out = rs.Results.from_json(doc).to_json()
    assert out["settings"]["shard"] == "1/2" and out["stopped"].startswith("the watchdog")


def test_older_files_get_defaults_and_stats():
    doc = basic_doc()
    for k in ("scoreboard", "timing", "command_line", "environment", "baseline"):
        doc.pop(k)
    del doc["version"]  # files from before the version key
    for sc in doc["scenarios"]:
        for st in sc["steps"]:
            for b in st["builds"].values():
                for k in ("stats", "cpu_mean", "rss_kb", "check", "user", "system", "rounds", "prepare"):
                    b.pop(k)
            for c in st["comparisons"]:
                for k in ("mde", "runs_needed", "method", "look", "factor", "faster", "slower_label", "ratio"):
                    c.pop(k)
    r = rs.Results.from_json(doc)
    st = r.scenarios[0].steps[0]
    assert st.builds["old"].stats.n == 8 and st.builds["old"].user == ()
    assert r.baseline == "old" and r.timing is None and r.environment.cpus is None
    c = st.comparisons[0]
    assert c.mde is None and c.look == 1 and c.ratio == pytest.approx(1 + c.rel) and c.faster == "old"
    assert rs.Results.from_json(r.to_json()) == r  # the upgraded form is stable


@pytest.mark.parametrize("spoil,says", [
    (lambda r: r["scenarios"][0]["steps"][0].pop("comparisons"), "scenarios[0].steps[0] has no 'comparisons'"),
    (lambda r: r["scenarios"][0]["steps"][0]["comparisons"][0].pop("verdict"), "has no 'verdict'"),
    (lambda r: r["scenarios"][0]["steps"][0]["comparisons"][0].update(verdict="worse"), "'worse' is not one of"),
    (lambda r: r.update(builds="x"), "builds should be list, not str"),
    (lambda r: r["scenarios"][0].pop("fixture"), "scenarios[0] has no 'fixture'"),
    (lambda r: r["builds"][0].pop("label"), "builds[0] has no 'label'"),
    (lambda r: r["scenarios"][0]["steps"][0]["builds"]["v1.0.0"].update(times=3), "times should be list"),
    (lambda r: r["settings"].update(threshold="5%"), "settings.threshold should be int or float"),
    (lambda r: r["target"].pop("name"), "target has no 'name'"),
    (lambda r: r.pop("scenarios"), "the file has no 'scenarios'"),
])
def test_a_malformed_document_is_one_error_naming_the_part(spoil, says):
    doc = one_step_doc()
    spoil(doc)
    with pytest.raises(RefbenchError) as e:
        rs.Results.from_json(doc, "r.json")
    assert str(e.value).startswith("r.json: malformed results file: ") and says in str(e.value)


def test_files_that_are_not_results(tmp_path):
    cases = {"missing.json": (None, "no such results file"), "dir": ("DIR", "is a directory"),
             "text.json": ("not json", "not a refbench results file"),
             "other.json": (json.dumps({"schema": "other"}), "schema 'other'"),
             "newer.json": (json.dumps({**basic_doc(), "version": rs.SCHEMA_VERSION + 1}), "newer than this")}
    for name, (content, says) in cases.items():
        p = tmp_path / name
        if content == "DIR":
            p.mkdir()
        elif content is not None:
            p.write_text(content)
        with pytest.raises(RefbenchError, match=says) as e:
            rs.load(p)
        assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_write_then_load(tmp_path):
    r = basic()
    rs.write(r, tmp_path / "out" / "results.json")
    assert rs.load(tmp_path / "out" / "results.json") == r
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_measured_samples_match_the_runners_rounding():
    t = [0.1234567891234, 0.2, 0.15]
    s = rs.Samples.measured(t, [0.05] * 3, [0.01] * 3, [0] * 3, [0, 0, 1], [None] * 3, rss_kb=100,
                            command="x")
    assert s.times[0] == round(t[0], 9) and s.memory_bytes is None
    assert s.stats == rs.Samples.read(json.loads(json.dumps(s.to_json())), "").stats
    assert s.cpu_mean == pytest.approx(0.06) and s.cpu_wall_ratio == round(0.18 / sum(t), 4)
    assert rs.Samples.read(copy.deepcopy(s.to_json()), "") == s


def test_a_version_1_file_is_upgraded_its_comparisons_are_on_wall_time():
    doc = json.loads((DATA / "results-s5cmd.json").read_text())
    v1 = json.loads(json.dumps(doc))
    v1["version"] = 1
    for sc in v1["scenarios"]:
        for st in sc["steps"]:
            for c in st["comparisons"]:
                del c["metric"]
    res = rs.Results.from_json(v1)
    assert all(c.metric == "wall" for _, _, c in res.comparisons())
    assert res.to_json() == doc


def test_comparisons_of_other_metrics_are_kept_apart_and_written_in_one_list():
    doc = json.loads((DATA / "results-s5cmd.json").read_text())
    st = doc["scenarios"][0]["steps"][0]
    st["comparisons"].append({**st["comparisons"][0], "metric": "memory", "verdict": "slower"})
    res = rs.Results.from_json(doc)
    step = res.scenarios[0].steps[0]
    assert [c.metric for c in step.comparisons] == ["wall"]
    assert [c.metric for c in step.metric_comparisons] == ["memory"]
    assert list(step.by_metric()) == ["wall", "memory"]
    assert res.to_json() == doc
    st["comparisons"][-1]["metric"] = "joules"
    with pytest.raises(RefbenchError, match="metric 'joules' is not one of wall, cpu, memory, instructions"):
        rs.Results.from_json(doc)


@pytest.mark.parametrize("module", ["refbench.results", "refbench.commands.report"])
def test_reading_loads_no_numpy_or_scipy(module):
    """Reading a results file and rendering its summary (`report`, the PR comment) compute no
    statistics: they must not pay numpy and scipy's import (about 0.4 s, issue 28)."""
    code = f"import sys, {module}; print(sorted(m for m in ('numpy', 'scipy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
