"""The pipeline's stages in milliseconds: a request from the command line, every refusal made
before anything is built, the run-wide p-value adjustment (new objects, the measured ones kept),
and a whole run through a fake backend and the MockExecutor (no Go, no MinIO, no process)."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from types import MappingProxyType

import pytest

from refbench import budget, judge, mock, pipeline, results as rs, runenv, stats
from refbench.commands import nightly as nightly_cmd
from refbench.commands._args import bind_flag_values, budget as budget_arg
from refbench.commands._run_options import request_from_args, run_parser
from refbench.errors import RefbenchError
from refbench.config import StepSpec
from refbench.pipeline import NO_BUDGET, RunHooks, RunRequest
from refbench.sampling import StepUnit
from refbench.progress import Reporter
from refbench.verdict import Verdict
from fakes.pipeline import fake_env, scenarios_file


SCENARIOS = """
[targets.fake]
repo = "https://example.invalid/fake"
build = ["go", "build", "-o", "{out}", "."]
binary = "fake"
backend = "s3"

[targets.other]
repo = "https://example.invalid/other"
build = ["go", "build", "-o", "{out}", "."]
binary = "other"
backend = "ipfs"

[[scenarios]]
name = "tiny"
target = "fake"
fixture = { kind = "sparse", size = "1K", count = 2 }

  [[scenarios.steps]]
  name = "list"
  command = "{{ bin }} ls {{ fixture }}"

  [[scenarios.steps]]
  name = "copy"
  command = "{{ bin }} cp {{ fixture }} {{ work }}"

[[scenarios]]
name = "elsewhere"
target = "other"
fixture = { kind = "sparse", size = "1K", count = 1 }

  [[scenarios.steps]]
  name = "get"
  command = "{{ bin }} get"
"""


@pytest.fixture
def scenarios(tmp_path, monkeypatch) -> Path:
    return scenarios_file(monkeypatch, tmp_path, SCENARIOS)


def env(find_tool=lambda tool: f"/usr/bin/{tool}") -> runenv.RunEnv:
    """This machine's RunEnv, quiet, with every tool found (or as `find_tool` says): validate's
    tests start nothing."""
    return dataclasses.replace(runenv.real(runenv.MachineSettings(), Reporter(quiet=True)), find_tool=find_tool)


def request(scenarios: Path, tmp_path: Path, *argv: str) -> RunRequest:
    args = ["-s", "v1.0.0", "v1.1.0", "-t", "fake", "--scenarios", str(scenarios),
            "--builds-dir", str(tmp_path / "builds"), *argv]
    return request_from_args(run_parser().parse_args(bind_flag_values(args)), args)


# ---- the request ---------------------------------------------------------------------------
def test_request_from_the_command_line(tmp_path):
    argv = ["-s", "a", "b", "c", "-r", "7", "--quick", "--only", "x", "--only", "y/z", "-hf", "-i --shell=bash",
            "-sf", "--numworkers 8", "--budget", "10m", "--threshold", "3%", "--cpus", "off", "--no-rss"]
    r = request_from_args(run_parser().parse_args(bind_flag_values(argv)), argv)
    assert r.refs == ("a", "b", "c") and r.runs == 7 and r.quick and r.only == ("x", "y/z")
    assert r.hyperfine_flags == "-i --shell=bash" and r.target_flags == "--numworkers 8"
    assert r.budget == 600.0 and r.threshold == pytest.approx(0.03) and r.cpus == "off" and not r.rss
    assert r.command_line == tuple(argv) and r.interleave == "runs"
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.runs = 3  # type: ignore[misc]


def test_the_machines_settings_are_read_once_at_the_command_line(monkeypatch):
    """REFBENCH_* variables stay a way to set them; the command line reads them into the request
    (REFBENCH_GO: its --go) or the RunEnv's MachineSettings, and nothing below reads them again."""
    monkeypatch.setenv("REFBENCH_GO", "1.25")
    assert request_from_args(run_parser().parse_args(["-s", "a", "b"]), []).go == ("go1.25",)
    assert request_from_args(run_parser().parse_args(["-s", "a", "b", "--go", "local"]), []).go == ("local",)
    m = runenv.MachineSettings.from_environ({"REFBENCH_WATCHDOG": "off", "REFBENCH_PASS_ENV": "A, B C",
                                              "REFBENCH_LEASE_TTL": "3", "REFBENCH_CRASH_DIR": "/x"})
    assert m == runenv.MachineSettings(watchdog="off", pass_env=frozenset("ABC"), lease_ttl=3.0, crash_dir="/x")
    assert runenv.MachineSettings.from_environ({"REFBENCH_LEASE_TTL": "-1"}).lease_ttl == 600.0  # kept sane
    assert runenv.MachineSettings.from_environ({}) == runenv.MachineSettings()


def test_request_settles_the_defaults_that_depend_on_other_options():
    assert RunRequest(refs=("a", "b")).runs == pipeline.DEFAULT_RUNS
    assert RunRequest(refs=("a", "b"), quick=True).runs == pipeline.QUICK_RUNS
    assert RunRequest(refs=("a", "b"), quick=True, runs=3).runs == 3
    assert RunRequest(refs=("a", "b"), rounds=1).interleave == "rounds"
    assert RunRequest(refs=("a", "b"), rounds=1, interleave="runs").interleave == "runs"
    r = RunRequest(refs=["a", "b"], only=["x"])
    assert r.refs == ("a", "b") and r.only == ("x",)  # tuples, so the request stays immutable
    assert r.replace(threshold=0.1).criteria.threshold == 0.1 and r.criteria.threshold == 0.05


def _units(*runs):
    step = StepSpec("s", "true")
    return tuple(StepUnit(None, step, n, 0) for n in runs)


def test_every_run_is_budgeted_unless_r_alone_or_budget_none_fixes_it():
    units = _units(20, 20, 20, 1)  # three judged steps and one that runs once
    plain = request_from_args(run_parser().parse_args(["-s", "a", "b", "--quick"]), [])
    assert plain.budget_for(units) == 3 * budget.DEFAULT_STEP_SECONDS[True]  # sized by the judged steps
    s = plain.sampling_for(units)
    assert s.sequential and s.budget == 180.0 and s.min_rounds == budget.PILOT_ROUNDS and s.max_runs is None
    full = RunRequest(refs=("a", "b"))
    assert full.budget_for(units) == 3 * budget.DEFAULT_STEP_SECONDS[False]
    fixed = RunRequest(refs=("a", "b"), runs=6)  # -r alone: the seed's fixed-size run
    assert fixed.budget_for(units) is None and not fixed.sampling_for(units).sequential
    assert fixed.replace(threshold=0.1).runs_given  # settled once: replace() keeps it
    both = RunRequest(refs=("a", "b"), runs=6, budget=300.0)  # -r with a budget: -r is every step's minimum
    assert both.sampling_for(units).budget == 300.0 and both.sampling_for(units).min_rounds is None
    none = request_from_args(run_parser().parse_args(["-s", "a", "b", "--budget", "none"]), [])
    assert none.budget == NO_BUDGET and not none.sampling_for(units).sequential
    with pytest.raises(SystemExit):  # a bad budget is a one-line usage error naming both forms
        run_parser().parse_args(["-s", "a", "b", "--budget", "10x"])
    with pytest.raises(argparse.ArgumentTypeError, match=r"got '10x', or none for a fixed-size run"):
        budget_arg("10x")
    until = RunRequest(refs=("a", "b"), until_decided=True)
    assert until.budget_for(units) is None and until.sampling_for(units).sequential
    scaled = RunRequest(refs=("a", "b"), quick=True, hooks=RunHooks(budget_scale=2.0))  # calibrate's arms
    assert scaled.sampling_for(units).budget == 360.0


def test_nightly_passes_run_options_through_the_run_parser(tmp_path):
    args, r = nightly_cmd.parse(["--history", "h.db", "--scenarios=mine.toml", "-r", "4", "--threshold=0.2",
                                 "--budget", "none", "--repo", "/origin"])
    assert r.scenarios == "mine.toml" and r.runs == 4 and r.threshold == 0.2
    assert r.budget == NO_BUDGET and r.budget_for(()) is None  # 'none': the fixed-size run
    assert r.target == "s5cmd" and r.repo == "/origin"
    assert nightly_cmd.cp_params(args, r).min_magnitude == 0.2  # the change-point magnitude follows --threshold
    _, r = nightly_cmd.parse(["--history", "h.db"])
    assert r.budget == 1800.0  # the nightly's default budget, 30m
    with pytest.raises(RefbenchError, match="nightly sets --refs itself"):
        nightly_cmd.parse(["--history", "h.db", "--refs", "a", "b"])
    with pytest.raises(RefbenchError, match="nightly sets --json itself"):
        nightly_cmd.parse(["--history", "h.db", "--json=x.json"])


def test_nightly_looks_the_target_up_in_the_scenarios_file_given_with_equals(tmp_path, monkeypatch):
    """`--scenarios=FILE` is FILE: the night's target is looked up there, not in the bundled file
    (nightly's own scan for `--scenarios FILE` missed this spelling)."""
    path = tmp_path / "s.toml"
    path.write_text(SCENARIOS)
    seen = []

    class Builder:
        def __init__(self, target, root, repo, *_, **__):  # as RunEnv.builder makes it (runenv.make_builder)
            seen.append(target.name)
            self.repo_url = target.repo

    def fake_run(request, outputs, reporter):
        raise RefbenchError("stop here: the lookup is what this test is about")

    # the night's RunEnv makes its builder as runenv.real's does, from the checked site: this one's
    env = dataclasses.replace(runenv.real(runenv.MachineSettings()),
                              builder=lambda site: Builder(site.target, site.cache_dir, site.request.repo))
    with pytest.raises(RefbenchError, match="stop here"):
        nightly_cmd.main(["--history", str(tmp_path / "h.db"), "-t", "other", f"--scenarios={path}",
                          "--out-dir", str(tmp_path / "out")], env=env, measure=fake_run)
    assert seen == ["other"]  # declared only in FILE
    with pytest.raises(RefbenchError, match="unknown target 'other'"):
        nightly_cmd.main(["--history", str(tmp_path / "h.db"), "-t", "other", "--out-dir", str(tmp_path / "out")],
                         env=env, measure=fake_run)


# ---- validate: refused before anything is built ----------------------------------------------
@pytest.mark.parametrize("argv,says", [
    (("-s", "v1.0.0"), "give at least two refs"),
    (("--only", "nope"), "--only 'nope' matches no scenario or step"),
    (("-hf", "'unclosed"), "cannot parse extra flags"),
    (("-hf", "--export-json x"), "export-json"),
    (("-hf", "--reference true"), "hyperfine flag '--reference' is not one refbench passes through"),
    (("-hf", "-r5"), "hyperfine flag -r is managed by refbench"),
    (("-hf", "--setup true"), "hyperfine flag '--setup' is not one refbench passes through"),
    (("-b", "Not_A_Bucket"), "not a valid bucket name"),
    (("-t", "other", "-b", "bucket"), "-b/--bucket applies to S3 targets"),
    (("-p", "../x"), "-p/--prefix"),
    (("-l", "/no/such/dir"), "-l/--local-path '/no/such/dir' is not a directory"),
    (("-t", "nope"), "unknown target 'nope'"),
])
def test_bad_requests_are_refused_before_anything_is_built(scenarios, tmp_path, argv, says):
    r = request(scenarios, tmp_path, *argv)
    with pytest.raises(RefbenchError) as e:
        pipeline.validate(r, env())
    assert says in str(e.value)
    assert not (tmp_path / "builds").exists()


def test_a_malformed_ref_is_refused(scenarios, tmp_path):
    r = request(scenarios, tmp_path).replace(refs=("v1.0.0", "-rf"))
    with pytest.raises(RefbenchError):
        pipeline.validate(r, env())


def test_missing_tools_stop_a_run_but_not_a_dry_run(scenarios, tmp_path):
    """A missing tool the run cannot build itself (here: "no Go to build it with") stops it."""
    no_minio = dataclasses.replace(env(lambda tool: None if tool == "minio" else f"/usr/bin/{tool}"),
                                   why_not_installable=lambda tool: "no Go to build it with")
    r = request(scenarios, tmp_path)
    with pytest.raises(RefbenchError, match="minio not found .*cannot be built on first use: no Go to build it with"):
        pipeline.validate(r, no_minio)
    checked = pipeline.validate(r, no_minio, dry_run=True)
    assert [s.name for s in checked.scenarios] == ["tiny"] and checked.step_filter is None
    # with a bucket of the user's, no embedded MinIO is needed
    assert pipeline.validate(r.replace(bucket="my-bucket"), no_minio).prefix == "refbench"


def test_a_missing_pinned_server_is_left_to_the_run_to_build_on_first_use(scenarios, tmp_path):
    """Issue 53: a machine without MinIO (make setup builds none) does not refuse the run; the run
    builds it while the refs build (firstuse), and a missing hyperfine still refuses it."""
    no_minio = env(lambda tool: None if tool == "minio" else f"/usr/bin/{tool}")
    checked = pipeline.validate(request(scenarios, tmp_path), no_minio)
    assert checked.first_use == ("minio",)
    no_servers = env(lambda tool: None if tool in ("minio", "refbench-s3restore") else f"/usr/bin/{tool}")
    assert pipeline.validate(request(scenarios, tmp_path), no_servers).first_use == ("refbench-s3restore", "minio")
    assert pipeline.validate(request(scenarios, tmp_path), env()).first_use == ()
    with pytest.raises(RefbenchError, match="hyperfine not found"):
        pipeline.validate(request(scenarios, tmp_path), env(lambda tool: None if tool == "hyperfine" else f"/x/{tool}"))


def test_only_selects_steps_and_the_family_counts_them(scenarios, tmp_path):
    checked = pipeline.validate(request(scenarios, tmp_path, "--only", "tiny/copy"), env())
    assert [st.name for s, st in pipeline.selected_steps(checked)] == ["copy"]
    assert pipeline.family_size(*checked.family, 10, 3) == 2  # one step x two contenders


# ---- analyse -----------------------------------------------------------------------------------
def _step(name: str, contenders: dict[str, float], seed: int) -> rs.Step:
    import random
    rng = random.Random(seed)
    base = [1.0 + rng.gauss(0, 0.02) for _ in range(10)]
    comps = [judge.contrast("A", base, lab, [f * (1.0 + rng.gauss(0, 0.02)) for _ in range(10)])
             for lab, f in contenders.items()]
    return rs.Step(name=name, runs=10, warmup=0, rounds=1, builds=MappingProxyType({}), comparisons=tuple(comps),
                   hyperfine_seconds=1.0)


def _scenario(*steps) -> rs.Scenario:
    return rs.Scenario(name="sc", fixture=rs.Fixture(), steps=tuple(steps))


def test_adjust_returns_new_results_and_keeps_the_measured_ones():
    measured = [_scenario(_step("a", {"B": 1.03, "C": 1.0}, 1), _step("b", {"B": 1.01, "C": 0.99}, 2))]
    before = [[c for c in st.comparisons] for st in measured[0].steps]
    adjusted = judge.adjust(measured, stats.Criteria())
    assert [[c for c in st.comparisons] for st in measured[0].steps] == before  # untouched
    assert adjusted[0] is not measured[0] and adjusted[0].steps[0] is not measured[0].steps[0]
    new = [c for st in adjusted[0].steps for c in st.comparisons]
    old = [c for st in measured[0].steps for c in st.comparisons]
    assert new == judge.adjust_family(old, stats.Criteria())  # one family: the whole run
    assert all(n.p_value >= o.p_value for n, o in zip(new, old) if o.p_value is not None)
    assert [st.name for st in adjusted[0].steps] == ["a", "b"]


def test_adjust_per_contender_makes_one_family_per_contender():
    measured = [_scenario(_step("a", {"B": 1.03, "C": 1.0}, 1), _step("b", {"B": 1.01, "C": 0.99}, 2))]
    adjusted = judge.adjust(measured, stats.Criteria(), per_contender=True)
    for i in range(2):
        old = [st.comparisons[i] for st in measured[0].steps]
        assert [st.comparisons[i] for st in adjusted[0].steps] == judge.adjust_family(old, stats.Criteria())


def test_scoreboard_only_with_three_builds_or_more():
    two = [_scenario(_step("a", {"B": 1.2}, 1))]
    assert judge.scoreboard(two, ["A", "B"]) is None
    three = [_scenario(_step("a", {"B": 1.2, "C": 0.9}, 1))]
    board = judge.scoreboard(three, ["A", "B", "C"])
    assert list(board) == ["A", "B", "C"] and board["A"]["geomean_vs_baseline"] == 1.0
    assert board["B"]["geomean_vs_baseline"] == pytest.approx(three[0].steps[0].comparisons[0].ratio, rel=1e-6)
    assert board["C"]["vs_fastest"] == 1.0  # C, about 10% faster than A, is the fastest


# ---- a whole run: fake backend, fake hyperfine, builds made up ---------------------------------
def test_a_whole_run_gives_typed_results(scenarios, tmp_path):
    """pipeline.run on a fake RunEnv: the MockExecutor, a mock backend and two made-up builds
    (1.0x and 1.5x); nothing patched."""
    fakes = fake_env(tmp_path, {"v1.0.0": "fake-1.00", "v1.1.0": "fake-1.50"})
    r = request(scenarios, tmp_path, "-r", "6", "-w", "0", "--rounds", "2", "--no-rss", "--threshold", "0.1")
    res = pipeline.run(r, fakes.env())
    assert res.labels == ("v1.0.0", "v1.1.0") and res.baseline == "v1.0.0"
    assert res.target.name == "fake" and res.backend["kind"] == "fake"
    assert [(sc.name, st.name) for sc, st in res.steps()] == [("tiny", "list"), ("tiny", "copy")]
    verdicts = [c.verdict for _, _, c in res.comparisons()]
    assert verdicts == [Verdict.SLOWER, Verdict.SLOWER]
    # the family: 2 steps x 3 metrics the executor measures per run (wall, cpu, memory)
    assert res.settings.runs == 6 and res.settings.family_size == 2 * 3 and res.settings.threshold == 0.1
    assert [[c.metric for c in st.metric_comparisons] for _, st in res.steps()] == [["cpu", "memory"]] * 2
    assert res.command_line == r.command_line and res.stopped is None and res.scoreboard is None
    assert all(len(st.builds["v1.1.0"].times) == 6 for _, st in res.steps())
    # hyperfine's time is what the executor's calls took (the mock's simulated seconds, every run
    # and CALL_SECONDS a call: 2 steps x 2 rounds x 12 runs of ~0.1-0.15 s), and nothing else
    assert res.timing.hyperfine_seconds == round(fakes.executors[-1].now, 3) > 2 * 2 * mock.CALL_SECONDS
    assert res.resources["watchdog"] == "off" and fakes.backends[-1].closed
    assert pipeline.stop_error(res) is None


def test_fail_on_widens_the_metrics_whose_slower_verdicts_fail_a_run(capsys):
    import json

    from refbench.commands import run as run_cmd
    from refbench.render import markdown

    doc = json.loads((Path(__file__).resolve().parent / "data" / "results-s5cmd.json").read_text())
    st = doc["scenarios"][0]["steps"][0]
    st["comparisons"].append({**st["comparisons"][0], "metric": "memory", "verdict": "slower", "rel": 0.5})
    res = rs.Results.from_json(doc)
    wall = res.regressions()
    assert all(c.metric == "wall" for _, _, c in wall)
    wider = res.regressions(judge.fail_metrics(("memory",)))
    assert len(wider) == len(wall) + 1 and wider[-1][2].metric == "memory"
    assert judge.fail_metrics(("cpu", "wall")) == ("wall", "cpu")
    assert "memory +50.0%" in " ".join(markdown.what_changed(res))
    with pytest.raises(SystemExit):
        run_cmd.run_parser().parse_args(["-s", "a", "b", "--fail-on", "cpu,joules"])
    assert "'joules' is not a metric" in capsys.readouterr().err
