"""CSV: one row per step and build with every statistic."""
from __future__ import annotations

import csv

import pytest

import factories as fx
from refbench.render import csv as render_csv


def test_csv_one_row_per_step_and_build_with_statistics(tmp_path):
    r = fx.basic()
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


def test_csv_carries_each_metrics_verdict_and_the_requests_beside_wall_time(tmp_path):
    """Wall time keeps the unprefixed columns; memory's verdict is under its own prefix (not the
    wall one overwritten by whichever metric came last); a build's requests fill their columns."""
    import dataclasses
    import json
    from pathlib import Path
    from types import MappingProxyType

    from refbench import results as rs

    doc = json.loads((Path(__file__).parent / "data" / "results-s5cmd.json").read_text())
    st = doc["scenarios"][0]["steps"][0]
    wall = st["comparisons"][0]
    st["comparisons"].append({**wall, "metric": "memory", "verdict": "slower", "rel": 0.5, "ci_low": 0.4,
                              "ci_high": 0.6})
    r = rs.Results.from_json(doc)
    sc = r.scenarios[0]
    base, cont = r.labels[0], wall["contender"]
    req = {base: rs.Requests(by_api=MappingProxyType({"PutObject": 3, "ListObjectsV2": 1}), received_bytes=30),
           cont: rs.Requests(by_api=MappingProxyType({"PutObject": 6, "ListObjectsV2": 1}), received_bytes=60)}
    step = dataclasses.replace(sc.steps[0], requests=MappingProxyType(req), request_changes=(
        rs.RequestChange(contender=cont, name="PutObject", baseline_value=3, value=6),))
    r = r.replace(scenarios=(dataclasses.replace(sc, steps=(step,) + sc.steps[1:]),) + r.scenarios[1:])
    path = tmp_path / "out.csv"
    render_csv.write_csv(r, path)
    rows = [x for x in csv.DictReader(path.open()) if x["scenario"] == sc.name and x["step"] == step.name]
    row = {x["build"]: x for x in rows}
    assert row[cont]["verdict"] == wall["verdict"] and float(row[cont]["rel_change"]) == pytest.approx(wall["rel"])
    assert row[cont]["memory_verdict"] == "slower" and float(row[cont]["memory_rel_change"]) == 0.5
    assert row[cont]["cpu_verdict"] == "" and row[base]["memory_verdict"] == ""
    assert row[cont]["requests_by_api"] == "ListObjectsV2=1 PutObject=6" and row[cont]["requests_total"] == "7"
    assert row[cont]["requests_differ"] == "True" and row[base]["requests_differ"] == "False"
    assert row[base]["received_bytes"] == "30"
