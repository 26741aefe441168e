"""One verdict engine (issue 27, part 2): every option that changes a verdict (--threshold,
--metric-threshold, --alpha, --fail-on) gives the same verdicts, and the same exit code, through a
run, a sharded run merged, and `compare` of two saved runs — each through cli.main, in-process,
on `--executor mock` (refbench.mock): no process, no Go, no MinIO.

The contender is 8% slower in wall (and CPU) time at cv 2%, and holds 3 MiB more memory (+10%,
a few KiB of jitter); 6 runs per build in 3 rounds (the issue's design), two steps, so a run's
family is 2 steps × 3 metrics. The options are chosen so each flips a verdict with room to spare:
--threshold 0.2 makes wall time `no significant change`, --metric-threshold memory=0.2 memory,
--alpha 1e-9 leaves wall and CPU `inconclusive` (their p-values lie between 1e-7 and 1e-2 in every
route; memory's underflow to 0), and --fail-on memory fails a run whose wall time is judged
unchanged.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import run_cli
from refbench import figures, judge, pipeline, results as rs, stats
from refbench.verdict import Verdict
from fakes.pipeline import mock_args, scenarios_file
from test_pipeline import SCENARIOS as PIPELINE_SCENARIOS

# test_pipeline's scenarios, each step with cv 2% (the MockExecutor reads `sigma=` in a command)
SCENARIOS = PIPELINE_SCENARIOS.replace('{{ fixture }}"', '{{ fixture }} sigma=0.02"').replace(
    '{{ work }}"', '{{ work }} sigma=0.02"')
BINARIES = {"v1.0.0": "fake-1.00", "old": "fake-1.00", "new": "fake-1.08-mem3"}
RUN = ("-r", "6", "--rounds", "3", "-w", "0", "--no-rss", "--budget", "none", "--no-profile")


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    return Fakes(tmp_path, scenarios_file(monkeypatch, tmp_path, SCENARIOS))


@dataclass(frozen=True)
class Fakes:
    root: Path
    scenarios: Path


def bench(fakes, seed: str, out: Path, *argv: str, contender: str = "new"):
    """One run through cli.main, its figures seeded by `seed`; (exit code, stderr)."""
    proc = run_cli("-s", "v1.0.0", contender, "-t", "fake", "--scenarios", fakes.scenarios, "--builds-dir",
                   fakes.root / "builds", *RUN, *mock_args(BINARIES, seed, 0.005), "-o", out / "summary.md",
                   "--json", out / "results.json", *argv)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode


def run_verdicts(path: Path) -> dict:
    res = rs.load(path)
    return {(sc.name, st.name, c.metric): c.verdict for sc, st in res.steps() for c in st.all_contrasts()
            if c.contender == "new"}


def compare_verdicts(path: Path) -> dict:
    doc = json.loads(path.read_text())
    return {(r["scenario"], r["step"], c["metric"]): Verdict(c["verdict"]) for r in doc["rows"]
            if r["new_build"] == "new" for c in [r["c"], *r["metrics"]]}


def routes(fakes, tmp: Path, *options: str) -> dict[str, tuple[dict, int]]:
    """{route: (verdicts by (scenario, step, metric), exit code)} of the three routes."""
    out = {}
    code = bench(fakes, "B", tmp / "run", *options)
    out["run"] = (run_verdicts(tmp / "run" / "results.json"), code)
    for i in (1, 2):
        bench(fakes, "B", tmp / f"shard{i}", "--shard", f"{i}/2", *options)
    merged = run_cli("merge", tmp / "shard1" / "results.json", tmp / "shard2" / "results.json", "-o",
                     tmp / "merged.json", *options_for("merge", options))
    assert merged.returncode in (0, 1), merged.stderr
    out["shard + merge"] = (run_verdicts(tmp / "merged.json"), merged.returncode)
    bench(fakes, "A", tmp / "last", *options, contender="old")  # last night's run: no change yet
    cmp = run_cli("compare", tmp / "last" / "results.json", tmp / "run" / "results.json", "--match", "position",
                  "--json", tmp / "cmp.json", *options_for("compare", options))
    assert cmp.returncode in (0, 1), cmp.stderr
    out["compare"] = (compare_verdicts(tmp / "cmp.json"), cmp.returncode)
    return out


def options_for(command: str, options: tuple[str, ...]) -> tuple[str, ...]:
    """The verdict options as merge takes them: the recorded settings judge the shards, so only
    --fail-on-regression / --fail-on; compare takes them all."""
    if command == "compare":
        return options
    keep, out = False, []
    for o in options:
        if o.startswith("--fail-on"):
            out.append(o)
            keep = o == "--fail-on"
        elif keep:
            out.append(o)
            keep = False
    return tuple(out)


CASES = {
    "defaults": ((), {"wall": Verdict.SLOWER, "cpu": Verdict.SLOWER, "memory": Verdict.SLOWER}, 0),
    "--threshold": (("--threshold", "0.2"), {"wall": Verdict.SAME, "cpu": Verdict.SLOWER,
                                            "memory": Verdict.SLOWER}, 0),
    "--metric-threshold": (("--metric-threshold", "memory=0.2"), {"wall": Verdict.SLOWER, "cpu": Verdict.SLOWER,
                                                                  "memory": Verdict.SAME}, 0),
    "--alpha": (("--alpha", "1e-9"), {"wall": Verdict.INCONCLUSIVE, "cpu": Verdict.INCONCLUSIVE,
                                      "memory": Verdict.SLOWER}, 0),
    "--fail-on-regression": (("--threshold", "0.2", "--fail-on-regression"),
                             {"wall": Verdict.SAME, "cpu": Verdict.SLOWER, "memory": Verdict.SLOWER}, 0),
    "--fail-on": (("--threshold", "0.2", "--fail-on", "memory"),
                  {"wall": Verdict.SAME, "cpu": Verdict.SLOWER, "memory": Verdict.SLOWER}, 1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_verdict_option_judges_alike_through_run_merge_and_compare(fakes, tmp_path, case):
    options, want, code = CASES[case]
    got = routes(fakes, tmp_path, *options)
    expected = {(sc, st, m): v for sc, st in (("tiny", "list"), ("tiny", "copy")) for m, v in want.items()}
    for route, (verdicts, exit_code) in got.items():
        assert verdicts == expected, f"{case}: {route}"
        assert exit_code == code, f"{case}: {route} exit {exit_code}"


def test_merge_judges_with_the_recorded_metric_thresholds(fakes, tmp_path):
    """The issue's merge: the shards recorded --metric-threshold memory=0.2 and said `no significant
    change`; merging them must not rebuild the criteria without it (and so say `slower`)."""
    for i in (1, 2):
        bench(fakes, "B", tmp_path / f"shard{i}", "--shard", f"{i}/2", "--metric-threshold", "memory=0.2")
    shards = [rs.load(tmp_path / f"shard{i}" / "results.json") for i in (1, 2)]
    assert judge.recorded(shards[0].settings).threshold_for("memory") == 0.2
    proc = run_cli("merge", *(tmp_path / f"shard{i}" / "results.json" for i in (1, 2)), "-o", tmp_path / "m.json")
    assert proc.returncode == 0, proc.stderr
    merged = rs.load(tmp_path / "m.json")
    memory = [c for _, st in merged.steps() for c in st.metric_comparisons if c.metric == "memory"]
    assert memory and all(c.verdict == Verdict.SAME for c in memory)


def test_the_defaults_are_written_once():
    """The command line, a request, the criteria and a results file read without settings agree."""
    from refbench.commands._run_options import run_parser
    from refbench.verdict import ALPHA, NOISE_LIMIT, THRESHOLD

    args = run_parser().parse_args(["-s", "a", "b"])
    want = (THRESHOLD, ALPHA, NOISE_LIMIT)
    assert (args.threshold, args.alpha, args.noise_limit) == want
    req = pipeline.RunRequest(refs=("a", "b"))
    assert (req.threshold, req.alpha, req.noise_limit) == want
    c = stats.Criteria()
    assert (c.threshold, c.alpha, c.noise_limit) == want and figures.criteria() == c == req.criteria
    s = rs.Settings.read({}, "")
    assert (s.threshold, s.alpha, s.noise_limit) == want and judge.recorded(s) == c


def test_a_design_that_cannot_reach_alpha_is_said_before_measuring(fakes, tmp_path):
    """-r 1: one round of 1 + 1 runs, two arrangements and no noise to estimate: no test can reach
    alpha, and the run says so in one line before it measures (the steps are timed, not judged)."""
    argv = ("-s", "v1.0.0", "new", "-t", "fake", *mock_args(BINARIES, "B", 0.005), "--scenarios", fakes.scenarios,
            "--builds-dir", tmp_path / "b",
            "-w", "0", "--no-rss", "--no-profile", "--budget", "none", "-o", tmp_path / "s.md")
    proc = run_cli(*argv, "-r", "1")
    warning = [line for line in proc.stderr.splitlines() if "cannot reach a verdict" in line]
    assert proc.returncode == 0 and len(warning) == 1, proc.stderr
    assert "2 step(s)" in warning[0] and "tiny / list" in warning[0] and "-r 2" in warning[0]
    assert proc.stderr.index(warning[0]) < proc.stderr.index("wrote")  # said before the run's results
    assert "cannot reach" not in run_cli(*argv, "-r", "2", "--rounds", "2").stderr  # 2 rounds of 1 + 1: the paired t


# the verdict's rules, each in one module (issue 38 part 5b): deciding, the family, the
# scoreboard, what fails a run; the statistics compute figures, the views read
VERDICT_RULES = ("decide", "metric_weights", "adjust_family", "adjust_groups", "adjust", "scoreboard",
                 "geomean_scoreboard", "fail_metrics", "failing", "verdicts", "rejudge")


def test_the_verdicts_rules_are_defined_in_judge_alone():
    import ast
    root = Path(judge.__file__).parent
    defined: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in VERDICT_RULES:
                defined.setdefault(node.name, []).append(str(path.relative_to(root)))
    assert defined == {name: ["judge.py"] for name in VERDICT_RULES}
    # and nothing reaches them through another module's re-export
    for name in ("judge.py", "stats.py", "verdict.py", "figures.py", "analysis.py", "runner.py"):
        assert "noqa: F401" not in (root / name).read_text(encoding="utf-8"), name
