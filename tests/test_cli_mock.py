"""Whole runs through cli.main on `--executor mock` (refbench.mock, as hyperfine's --debug-mode):
refusals, the files a run writes, every exit code, a sharded run merged, and budgets, each in
milliseconds, with no process, no Go and no MinIO, and nothing patched. The contender `new` is 8%
slower in wall and CPU time and holds 3 MiB more memory (test_judge's builds), at cv 0.5%.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from fakes.pipeline import mock_args, scenarios_file
from refbench import results as rs
from refbench.errors import EXIT_CRASH, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION
from refbench.verdict import Verdict
from test_judge import BINARIES, SCENARIOS

FIXED = ("-r", "6", "--rounds", "3", "-w", "0", "--no-rss", "--no-profile", "--budget", "none")


@pytest.fixture
def scenarios(tmp_path, monkeypatch) -> Path:
    return scenarios_file(monkeypatch, tmp_path, SCENARIOS)


def bench(scenarios: Path, out: Path, *argv, refs=("v1.0.0", "new"), seed="B", sigma=0.005, env=None):
    """A run through cli.main on the mock, its files in `out`."""
    return run_cli("-s", *refs, "-t", "fake", "--scenarios", scenarios, "--builds-dir", scenarios.parent / "builds",
                   *mock_args(BINARIES, seed, sigma), "-o", out / "summary.md", "--json", out / "results.json",
                   *argv, env=env)


def wall_verdicts(path: Path) -> dict:
    return {(sc.name, st.name): c.verdict for sc, st in rs.load(path).steps() for c in st.comparisons}


# ---- the flag itself --------------------------------------------------------------------------------
def test_the_mock_executor_is_a_hidden_flag(scenarios, tmp_path):
    helptext = run_cli("--help").stdout
    assert "--executor" not in helptext and "--mock" not in helptext and "--shard" in helptext
    bad = bench(scenarios, tmp_path, *FIXED, "--mock", "speed=fast")
    assert bad.returncode == EXIT_ERROR and "--mock 'speed=fast': unknown key" in bad.stderr
    assert "build=REF:BINARY" in bad.stderr  # the refusal names what it expects
    assert bench(scenarios, tmp_path, *FIXED, "--executor", "docker").returncode == EXIT_ERROR  # argparse's choices


def test_the_mock_is_deterministic_and_the_seed_matters(scenarios, tmp_path):
    runs = {}
    for name, seed in (("a", "B"), ("b", "B"), ("c", "C")):
        assert bench(scenarios, tmp_path / name, *FIXED, seed=seed).returncode == EXIT_OK
        doc = rs.load(tmp_path / name / "results.json")
        runs[name] = [b.times for _, st in doc.steps() for b in st.builds.values()]
    assert runs["a"] == runs["b"] and runs["a"] != runs["c"]


def test_the_rounds_orders_are_drawn_per_run_recorded_and_can_be_pinned(scenarios, tmp_path):
    """Which build leads each pair of rounds is drawn from a seed per run (issue 34), which
    results.json keeps; --order-seed repeats a run's orders. A real run draws a new one each time."""
    from refbench import runenv
    assert len({runenv.real().order_seed() for _ in range(20)}) > 15
    assert bench(scenarios, tmp_path / "a", *FIXED).returncode == EXIT_OK
    assert isinstance(rs.load(tmp_path / "a" / "results.json").settings.order_seed, int)
    assert bench(scenarios, tmp_path / "b", *FIXED, "--order-seed", "1234").returncode == EXIT_OK
    assert rs.load(tmp_path / "b" / "results.json").settings.order_seed == 1234


# ---- refusals: before anything is built -------------------------------------------------------------
@pytest.mark.parametrize("argv,says", [
    (("-b", "Not_A_Bucket"), "not a valid bucket name"),
    (("--only", "nope"), "--only 'nope' matches no scenario or step"),
    (("-hf", "--export-json x"), "export-json"),
    (("--daemon", "offline"), "--daemon applies to IPFS targets"),
])
def test_refusals_are_one_line_and_exit_2_before_anything_is_built(scenarios, tmp_path, argv, says):
    proc = bench(scenarios, tmp_path, *FIXED, *argv)
    assert proc.returncode == EXIT_ERROR and says in proc.stderr, proc.stderr
    assert proc.stderr.startswith("refbench: error:") and "Traceback" not in proc.stderr
    assert not (tmp_path / "results.json").exists() and not (scenarios.parent / "builds" / "mock").exists()


# ---- outputs and exit codes --------------------------------------------------------------------------
def test_a_run_writes_every_output_from_one_results_file(scenarios, tmp_path):
    proc = bench(scenarios, tmp_path, *FIXED, "--html", tmp_path / "r.html", "--csv", tmp_path / "r.csv")
    assert proc.returncode == EXIT_OK, proc.stderr  # slower, but nobody asked to fail on it
    res = rs.load(tmp_path / "results.json")
    assert res.labels == ("v1.0.0", "new") and res.command_line[:2] == ("-s", "v1.0.0")
    assert wall_verdicts(tmp_path / "results.json") == {("tiny", "list"): Verdict.SLOWER,
                                                         ("tiny", "copy"): Verdict.SLOWER}
    assert res.environment.hyperfine == "hyperfine 2.0.0" and res.backend["kind"] == "fake"
    # every run's figure is the mock's: 6 runs each, wall about 0.1 s x the binary's factor
    st = next(st for _, st in res.steps())
    assert [len(b.times) for b in st.builds.values()] == [6, 6]
    assert 0.107 < sum(st.builds["new"].times) / 6 < 0.109 and 0.099 < sum(st.builds["v1.0.0"].times) / 6 < 0.101
    summary = (tmp_path / "summary.md").read_text()
    assert "new" in summary and "slower" in summary.lower()
    assert "<html" in (tmp_path / "r.html").read_text()[:500].lower()
    csv = (tmp_path / "r.csv").read_text().splitlines()
    assert len(csv) == 1 + 2 * 2  # a header, then a row per step and build
    assert f"wrote {tmp_path / 'summary.md'}" in proc.stderr


def test_exit_codes_0_1_2_3(scenarios, tmp_path):
    assert bench(scenarios, tmp_path / "0", *FIXED, "--fail-on-regression", refs=("v1.0.0", "old")).returncode \
        == EXIT_OK  # the same speed: nothing to fail on
    slower = bench(scenarios, tmp_path / "1", *FIXED, "--fail-on-regression")
    assert slower.returncode == EXIT_REGRESSION and "slower: tiny / list" in slower.stderr
    # a contender whose timed runs exit 139 is a failed run (2), never a fast one
    failed = bench(scenarios, tmp_path / "2", *FIXED, "--fail-on-regression", "--mock", "fail=fake-1.08:139")
    assert failed.returncode == EXIT_ERROR and "list round 1: build new failed in 2 of 2 runs (exit code 139)" in failed.stderr
    crashed = bench(scenarios, tmp_path / "3", *FIXED, "--fail-on-regression", "--mock", "crash=2",
                    env={"REFBENCH_CRASH_DIR": str(tmp_path / "crashes")})
    assert crashed.returncode == EXIT_CRASH and "MockCrash" in crashed.stderr
    assert [p.parent for p in (tmp_path / "crashes").iterdir()] == [tmp_path / "crashes"]  # REFBENCH_CRASH_DIR


def test_an_interrupted_run_writes_the_steps_that_finished_then_exits_130(scenarios, tmp_path):
    """Ctrl-C (or SIGTERM) two hours into a full-size run kept nothing: now the steps that finished
    are written, marked as stopped, and the exit is still 130. FIXED: 3 rounds a step, so the 4th
    hyperfine call is the second step's first round."""
    proc = bench(scenarios, tmp_path / "late", *FIXED, "--fail-on-regression", "--mock", "interrupt=4")
    assert proc.returncode == EXIT_INTERRUPTED, proc.stderr
    assert "interrupted: wrote the 1 step that finished" in proc.stderr and "1 slower" in proc.stderr
    assert proc.stderr.rstrip().endswith("refbench: interrupted; cleaned up what this run created")
    res = rs.load(tmp_path / "late" / "results.json")
    assert [(sc.name, st.name) for sc, st in res.steps()] == [("tiny", "list")]
    assert res.stopped == "interrupted (Ctrl-C, SIGTERM or SIGHUP)"
    assert "This run was stopped before it finished:** interrupted" in (tmp_path / "late" / "summary.md").read_text()
    # interrupted before any step finished: nothing to write, as before
    early = bench(scenarios, tmp_path / "early", *FIXED, "--mock", "interrupt=2")
    assert early.returncode == EXIT_INTERRUPTED and "wrote" not in early.stderr
    assert not (tmp_path / "early" / "results.json").exists()


def test_identical_refs_are_answered_without_measuring(scenarios, tmp_path):
    proc = bench(scenarios, tmp_path, *FIXED, refs=("v1.0.0", "v1.0.0"))
    assert proc.returncode == EXIT_OK, proc.stderr
    assert set(wall_verdicts(tmp_path / "results.json").values()) == {Verdict.IDENTICAL}
    assert rs.load(tmp_path / "results.json").timing.hyperfine_seconds == 0


def test_a_dry_run_resolves_through_the_mock_builder(scenarios, tmp_path):
    proc = bench(scenarios, tmp_path, *FIXED, "--dry-run")
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "fake-1.08-mem3" in proc.stdout and "fake-1.00" in proc.stdout  # each ref's binary
    assert not (tmp_path / "results.json").exists()


# ---- shard, then merge ---------------------------------------------------------------------------------
def test_shards_measure_as_the_whole_run_and_merge_into_it(scenarios, tmp_path):
    assert bench(scenarios, tmp_path / "whole", *FIXED).returncode == EXIT_OK
    for i in (1, 2):
        assert bench(scenarios, tmp_path / f"s{i}", *FIXED, "--shard", f"{i}/2").returncode == EXIT_OK
    parts = [rs.load(tmp_path / f"s{i}" / "results.json") for i in (1, 2)]
    assert sorted(len(list(p.steps())) for p in parts) == [1, 1]  # one step each
    merged = run_cli("merge", *(tmp_path / f"s{i}" / "results.json" for i in (1, 2)), "-o", tmp_path / "m.json",
                     "--fail-on-regression")
    assert merged.returncode == EXIT_REGRESSION, merged.stderr
    whole, joined = rs.load(tmp_path / "whole" / "results.json"), rs.load(tmp_path / "m.json")
    times = {(sc.name, st.name): {k: b.times for k, b in st.builds.items()} for sc, st in whole.steps()}
    assert {(sc.name, st.name): {k: b.times for k, b in st.builds.items()} for sc, st in joined.steps()} == times
    assert wall_verdicts(tmp_path / "m.json") == wall_verdicts(tmp_path / "whole" / "results.json")
    assert joined.settings.family_size == whole.settings.family_size  # a shard's family is the whole run's


def test_shards_that_drew_their_own_rounds_orders_merge(scenarios, tmp_path):
    """Shards on runners of their own each draw the orders of their rounds (issue 34): merge takes
    them, and the merged settings name no one seed, each shard's its own."""
    for i in (1, 2):
        assert bench(scenarios, tmp_path / f"s{i}", *FIXED, "--shard", f"{i}/2", "--order-seed", str(100 + i)
                     ).returncode == EXIT_OK
    merged = run_cli("merge", *(tmp_path / f"s{i}" / "results.json" for i in (1, 2)), "-o", tmp_path / "m.json")
    assert merged.returncode in (EXIT_OK, EXIT_REGRESSION), merged.stderr
    joined = rs.load(tmp_path / "m.json")
    assert joined.settings.order_seed is None and [s["order_seed"] for s in joined.shards] == [101, 102]


# ---- budgets, on the mock's simulated clock -----------------------------------------------------------
def test_a_budgeted_run_spends_mock_seconds_and_stops_steps_when_decided(scenarios, tmp_path):
    proc = bench(scenarios, tmp_path, "-w", "0", "--no-rss", "--no-profile", "--budget", "2m")
    assert proc.returncode == EXIT_OK, proc.stderr
    res = rs.load(tmp_path / "results.json")
    assert res.settings.budget_seconds == 120.0
    steps = [st for _, st in res.steps()]
    # 8% at cv 0.5% is decided after the pilot's two rounds: each step stops there, well inside its share
    assert [st.stopped for st in steps] == ["decided", "decided"], [st.stopped for st in steps]
    assert all(len(st.looks) == st.rounds and st.looks[-1] < 1.0 for st in steps)
    assert 0 < res.timing.hyperfine_seconds < 10  # simulated seconds; the real run took milliseconds


def test_a_budget_too_small_to_decide_ends_each_step_by_budget(scenarios, tmp_path):
    """At cv 30% (each step's `sigma=` word) a step needs hundreds of runs to tell 8%; a 5 s budget
    pays for the pilot only. Its last look is then the final one and spends what is left of alpha
    (the first look, before the plan, spent almost none: 2 of the guard's 2000 runs), so a step may
    still call the true +8% slower there; nothing else is called."""
    scenarios.write_text(SCENARIOS.replace("sigma=0.02", "sigma=0.3"))
    proc = bench(scenarios, tmp_path, "-w", "0", "--no-rss", "--no-profile", "--budget", "5s")
    assert proc.returncode == EXIT_OK, proc.stderr
    res = rs.load(tmp_path / "results.json")
    assert [st.stopped for _, st in res.steps()] == ["budget", "budget"]
    assert [len(b.times) for _, st in res.steps() for b in st.builds.values()] == [10] * 4  # its planned runs
    for _, st in res.steps():  # the first look read against the guard's 2000 runs, the last spends all
        assert st.spend[0] == 2 / 2000 and st.spend[-1] == 1.0 and list(st.spend) == sorted(st.spend)
    assert {c.verdict for _, _, c in res.comparisons()} <= {Verdict.INCONCLUSIVE, Verdict.SLOWER}
    assert Verdict.INCONCLUSIVE in {c.verdict for _, _, c in res.comparisons()}
    assert res.timing.hyperfine_seconds <= 5 * 1.5  # a pilot is never cut short; nothing beyond it


def test_calibrate_and_nightly_run_on_the_mock_too(scenarios, tmp_path):
    cal = run_cli("calibrate", "-s", "v1.0.0", "-t", "fake", "--scenarios", scenarios, "--builds-dir",
                  tmp_path / "b", *FIXED, *mock_args(BINARIES, "B", 0.02), "-K", "2", "--slowdowns", "20",
                  "-o", tmp_path / "cal.md")
    assert cal.returncode == EXIT_OK, cal.stderr
    doc = json.loads((tmp_path / "cal.json").read_text())
    # two A/A repetitions, neither a false alarm (the mock cannot see calibrate's slowed shims: it
    # reads a command's figures from its binary's name, and a shim's is its own)
    assert doc["reps"] == 2 and doc["runs_with_false_alarm"] == 0 and doc["settings"]["runs"] == 6
    night = run_cli("nightly", "--history", tmp_path / "h.db", "--scenarios", scenarios, "-t", "fake", "--base",
                    "v1.0.0", "--head", "new", "--out-dir", tmp_path / "night", *FIXED,
                    *mock_args(BINARIES, "B", 0.005), "--alarm", "verdict")
    assert night.returncode == EXIT_REGRESSION and "REGRESSION tiny / list" in night.stdout, night.stderr


def test_the_bundled_s5cmd_scenarios_render_every_format_on_the_mock(tmp_path):
    """Every bundled s5cmd step at --quick, judged on wall, CPU and memory, through to the PR
    comment's format: a template that names a field the results no longer have fails here, in
    a second, not in the slow runs (github.md.j2 asked settings.threshold_for after it moved)."""
    proc = run_cli("--executor", "mock", "-s", "v1", "v2", "--quick", "--format", "github",
                   "--builds-dir", tmp_path / "builds", "-o", tmp_path / "pr.md", "--json", tmp_path / "r.json",
                   "--html", tmp_path / "r.html", "--csv", tmp_path / "r.csv", cwd=tmp_path)
    assert proc.returncode == EXIT_OK, proc.stderr
    r = rs.load(tmp_path / "r.json")
    assert {"cpu", "memory"} <= set(r.judged_metrics())
    assert len(list(r.steps())) >= 20  # every bundled step but the opt-in million
    comment = (tmp_path / "pr.md").read_text()
    assert "memory ±5.0%" in comment and "**Network to the S3 server:** loopback" in comment
    assert (tmp_path / "r.html").stat().st_size and (tmp_path / "r.csv").stat().st_size


def test_a_mock_run_of_the_seeds_very_large_file_asks_no_disk_for_what_it_never_stores(tmp_path):
    """The disk check before a run asked room for what the steps download and store even on the
    mock executor, whose commands run nowhere: the seed's 300 GB very large file, or a bisect of the
    10 GB small files step (29.3 GiB of /tmp, which failed a CI trial with 29.3 GiB free). The
    fixture (sparse: nothing allocated) is still checked."""
    proc = run_cli("--executor", "mock", "-s", "v1", "v2", "--only", "very large file/upload",
                   "--builds-dir", tmp_path / "builds", "-o", tmp_path / "s.md", cwd=tmp_path)
    assert proc.returncode == EXIT_OK, proc.stderr
