"""Statistics and verdicts on synthetic samples (no timing of anything real)."""
import numpy as np
import pytest

from refbench import judge, stats
from refbench.runner import round_orders
from refbench.stopping import split_runs
from refbench.verdict import Verdict


def sample(mean, cv, n, seed):
    return list(np.random.default_rng(seed).normal(mean, mean * cv, n))


def test_summary():
    s = stats.summarize([1.0, 2.0, 3.0, 4.0])
    assert (s.n, s.mean, s.median, s.min, s.max) == (4, 2.5, 2.5, 1.0, 4.0)
    assert s.stddev == pytest.approx(1.2909944) and s.cv == pytest.approx(1.2909944 / 2.5)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 9, 33, 200])
def test_summary_in_plain_python_is_numpy_s(n):
    """summarize needs no numpy (results files read without it) and still says what numpy said:
    summaries written before it agree to their stored 9 decimals."""
    a = sample(0.3, 0.1, n, n)
    s = stats.summarize(a)
    want = (np.mean(a), np.std(a, ddof=1) if n > 1 else 0.0, np.median(a), np.min(a), np.max(a),
            np.percentile(a, 95))
    assert (s.mean, s.stddev, s.median, s.min, s.max, s.p95) == pytest.approx(want, rel=1e-12, abs=1e-15)
    with pytest.raises(ValueError):
        stats.summarize([])


def test_hyperfine_phrase():
    c = stats.contrast("A", [1.0, 1.1, 0.9], "B", [0.5, 0.55, 0.45])
    assert c.faster == "B" and c.slower_label == "A"
    assert c.phrase() == "'B' ran 2.00 ± 0.28 times faster than 'A'"
    assert c.ratio == pytest.approx(0.5) and c.rel == pytest.approx(-0.5)


def test_known_slowdown_is_slower_with_truth_inside_interval():
    base = sample(1.0, 0.05, 20, 1)
    cont = sample(1.3, 0.05, 20, 2)
    c = judge.contrast("A", base, "B", cont)
    assert c.verdict == Verdict.SLOWER
    assert c.ci_low < 0.3 < c.ci_high and c.p_value < 0.001


def test_known_speedup_is_faster():
    c = judge.contrast("A", sample(1.0, 0.03, 15, 3), "B", sample(0.8, 0.03, 15, 4))
    assert c.verdict == Verdict.FASTER


def test_tight_equal_samples_are_no_significant_change():
    c = judge.contrast("A", sample(1.0, 0.01, 20, 5), "B", sample(1.0, 0.01, 20, 6))
    assert c.verdict == Verdict.SAME
    assert -0.05 < c.ci_low and c.ci_high < 0.05


def test_wide_samples_are_inconclusive_with_mde_and_runs_needed():
    c = judge.contrast("A", [0.7, 1.0, 1.3, 0.85, 1.15], "B", [0.75, 1.05, 1.25, 0.9, 1.05])
    assert c.verdict == Verdict.INCONCLUSIVE
    assert c.noisy and c.mde > 0.3
    assert c.runs_needed > 100  # cv 25% needs hundreds of runs to resolve ±5%


def test_significant_but_below_threshold_is_not_slower():
    c = judge.contrast("A", sample(1.0, 0.005, 40, 9), "B", sample(1.02, 0.005, 40, 10))
    assert c.p_value < 0.05 and c.verdict == Verdict.SAME


def test_single_run_is_inconclusive():
    c = judge.contrast("A", [10.0], "B", [5.0])
    assert c.verdict == Verdict.INCONCLUSIVE and c.ci_low is None and c.p_value is None
    assert c.phrase().startswith("'B' ran 2.00")


def test_threshold_is_adjustable():
    base, cont = sample(1.0, 0.01, 20, 11), sample(1.03, 0.01, 20, 12)
    assert judge.contrast("A", base, "B", cont).verdict == Verdict.SAME
    assert judge.contrast("A", base, "B", cont, stats.Criteria(threshold=0.01)).verdict == Verdict.SLOWER


def test_geomean_scoreboard():
    board = judge.geomean_scoreboard({"A": [1.0, 1.0], "B": [0.5, 2.0], "C": [0.5, 0.5]})
    assert board["A"]["geomean_vs_baseline"] == pytest.approx(1.0)
    assert board["B"]["geomean_vs_baseline"] == pytest.approx(1.0)
    assert board["C"]["vs_fastest"] == pytest.approx(1.0) and board["A"]["vs_fastest"] == pytest.approx(2.0)


def test_rounds_alternate_and_split():
    # A B, B A, B A, A B: each build leads equally often and linear drift cancels (ABBA)
    assert round_orders(2, 4) == [[0, 1], [1, 0], [1, 0], [0, 1]]
    orders = round_orders(3, 6)
    assert all(sorted(o) == [0, 1, 2] for o in orders) and len({tuple(o) for o in orders}) > 2
    assert split_runs(10, 5) == [2, 2, 2, 2, 2]
    assert split_runs(10, 3) == [4, 3, 3] and split_runs(1, 5) == [1] and split_runs(10, 1) == [10]


def test_family_adjustment_keeps_an_aa_fluke_from_being_called_slower():
    # nine A/A steps, one of which happens to look 6% slower (p ~ 0.02), and no real change
    fluke = judge.contrast("A", [1.00, 1.02, 0.98, 1.01, 0.99, 1.00, 1.03, 0.97, 1.00, 1.01], "B",
                           [1.09, 1.10, 0.99, 1.09, 1.01, 1.06, 1.14, 0.98, 1.08, 1.04])
    others = [judge.contrast("A", sample(1.0, 0.05, 10, 100 + i), "B", sample(1.0, 0.05, 10, 200 + i))
              for i in range(8)]
    assert fluke.verdict == Verdict.SLOWER and 0.001 < fluke.p_value < 0.05
    adjusted = judge.adjust_family([fluke, *others])
    assert adjusted[0].verdict != Verdict.SLOWER and adjusted[0].p_raw == fluke.p_value
    assert adjusted[0].p_value > fluke.p_value
    # a real +30% regression among them keeps its verdict
    real = judge.contrast("A", sample(1.0, 0.05, 10, 1), "B", sample(1.3, 0.05, 10, 2))
    assert judge.adjust_family([real, *others])[0].verdict == Verdict.SLOWER
    assert judge.adjust_family([real]) == [real]  # a family of one is left as it is


def test_looks_too_early_for_any_boundary_give_p_one_not_an_error():
    # a budgeted step looks after every round before its most runs are fixed: fractions of a
    # fraction of a percent, where O'Brien-Fleming spends nothing on any alpha of the grid
    assert stats.repeated_p(2.0, (0.001, 0.002, 0.003)) == 1.0
    assert stats.repeated_p(3.0, (0.5, 1.0)) < 0.01  # and the ordinary case is untouched
