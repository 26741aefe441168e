"""calibrate --aa (issue 34, part 2): the A/A bias of each step and metric over K repetitions,
the share of runs with a false verdict, and the threshold a step's verdicts can be trusted at.
The statistics on synthetic comparisons (milliseconds); the command on the mock executor."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run_cli
from fakes.pipeline import mock_args, scenarios_file
from refbench import calibrate as cal
from refbench.errors import EXIT_ERROR, EXIT_OK
from refbench.figures import Contrast
from refbench.verdict import Verdict
from test_judge import BINARIES, SCENARIOS

FIXED = ("-r", "6", "--rounds", "3", "-w", "0", "--no-rss", "--no-profile", "--budget", "none")


def aa(rel: float, verdict=Verdict.SAME, metric="wall", half=0.02) -> Contrast:
    return Contrast("base", cal.AA, 1 + rel, rel, rel - half, rel + half, 0.5, verdict, False, None, None, 1.0, 0.0,
                      "base", cal.AA, metric=metric)


def test_a_shift_every_repetition_shares_is_bias_and_noise_around_zero_is_not():
    rng = np.random.default_rng(34)
    # issue 34's large-file remove: -4.8% on average over 8 runs, spread -1.3% to -7.3%
    biased = cal.bias_of("wall", [aa(x) for x in rng.normal(-0.048, 0.02, 8)], checked=14)
    assert biased.biased and biased.high < 0 and biased.mean == pytest.approx(-0.048, abs=0.02)
    fair = cal.bias_of("wall", [aa(x) for x in rng.normal(0.0, 0.02, 8)], checked=14)
    assert not fair.biased and fair.low < 0 < fair.high
    # one repetition: the run's own interval says it
    one = cal.bias_of("cpu", [aa(-0.05, Verdict.FASTER, "cpu", half=0.01)], checked=1)
    assert one.biased and one.reps == 1 and (one.low, one.high) == pytest.approx((-0.06, -0.04))
    assert cal.bias_of("wall", [], checked=1) is None


def test_biased_is_adjusted_for_every_step_and_metric_checked():
    # a 2.3-sigma mean shift in one of 40 step-metrics is what chance gives: not called biased
    comps = [aa(x) for x in (0.01, 0.03, 0.02, 0.04, 0.0, 0.02, 0.03, 0.01)]
    assert cal.bias_of("wall", comps, checked=1).biased
    assert not cal.bias_of("wall", comps, checked=40).biased


def test_a_step_is_trusted_at_twice_the_bias_its_interval_allows():
    ok = cal.Bias("wall", 0.001, -0.004, 0.006, False, 0, 20)
    assert cal.trusted_at(ok, threshold=0.05) == 0.05  # never below the run's threshold
    assert cal.trusted_at(ok, threshold=0.01) == 0.02  # 2 x 0.6% = 1.2% -> the next rung, 2%
    leaning = cal.Bias("wall", -0.048, -0.062, -0.034, True, 6, 8)
    assert cal.trusted_at(leaning, threshold=0.05) == 0.20  # 2 x 6.2% = 12.4%
    assert cal.trusted_at(cal.Bias("wall", 0.0, None, None, False, 0, 1), 0.05) is None
    assert cal.clopper_pearson(0, 20) == pytest.approx((0.0, 0.168), abs=1e-3)  # no false verdict in 20 runs
    assert cal.clopper_pearson(1, 20) == pytest.approx((0.00127, 0.249), abs=1e-3)


@pytest.fixture
def scenarios(tmp_path, monkeypatch):
    return scenarios_file(monkeypatch, tmp_path, SCENARIOS)


def test_calibrate_aa_reports_bias_per_step_and_metric_on_the_mock(scenarios, tmp_path):
    proc = run_cli("calibrate", "--aa", "-s", "v1.0.0", "-t", "fake", "--scenarios", scenarios, "--builds-dir",
                   tmp_path / "b", *FIXED, *mock_args(BINARIES, "B", 0.02), "-K", "3", "-o", tmp_path / "cal.md")
    assert proc.returncode == EXIT_OK, proc.stderr
    doc = json.loads((tmp_path / "cal.json").read_text())
    assert doc["slowdowns"] == [] and doc["reps"] == 3
    for step in doc["steps"]:
        metrics = [b["metric"] for b in step["bias"]]
        assert metrics[0] == "wall" and {"cpu", "memory"} <= set(metrics)
        assert all(b["reps"] == 3 and b["low"] <= b["mean_shift"] <= b["high"] for b in step["bias"])
        assert not step["biased"] and step["trusted_at"] is not None
    assert doc["runs_with_false_verdict"] == 0 and doc["false_verdict_interval"][0] == 0.0
    md = (tmp_path / "cal.md").read_text()
    assert "## A/A: do identical builds measure identical?" in md and "**Biased steps**" in md
    assert "biased steps: none" in proc.stderr
    # an A/A calibration injects nothing: asking for slow-downs too is one line, exit 2
    bad = run_cli("calibrate", "--aa", "--slowdowns", "10", "-s", "v1.0.0", "-t", "fake", "--scenarios", scenarios,
                  "--builds-dir", tmp_path / "b", *FIXED, *mock_args(BINARIES, "B", 0.02), "-o", tmp_path / "x.md")
    assert bad.returncode == EXIT_ERROR and "--aa measures no slow-downs" in bad.stderr
