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
