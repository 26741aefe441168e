"""--dry-run prints the commands that would run, rendered for the first build (dryrun.render_plan
over the bundled scenarios), with placeholders only for what a started run alone knows."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from refbench import dryrun, paths
from refbench.builds import BuiltRef
from refbench.config import load_config
from refbench.refs import ResolvedRef
from refbench.sampling import Sampling

CFG = load_config(str(paths.bundled_scenarios()))
CACHE = Path("/cache/builds")


def planned(target: str, *labels: str) -> list[dryrun.PlannedBuild]:
    binary = CFG.targets[target].binary
    out = []
    for i, label in enumerate(labels):
        ref = ResolvedRef(label, "tag", f"{i + 1}" * 40, label)
        out.append(dryrun.PlannedBuild(BuiltRef(target, ref, label, CACHE / target / ref.sha / binary, "git", "", False,
                                             0.0), cached=i == 1))
    return out


def plan(target: str, step_filter=None, **kw) -> str:
    t = CFG.targets[target]
    scenarios = [s.for_quick(True) for s in CFG.scenarios_for(target)]
    args = dict(bucket=None, prefix="refbench", endpoint=None, sampling=Sampling(runs=10, warmup=2, rounds=5), cache_dir=CACHE,
                target_flags=["--log", "debug"])
    return dryrun.render_plan(t, t.repo, scenarios, step_filter, planned(target, "v1.0.0", "v1.1.0"), **{**args, **kw})


def section(out: str, scenario: str) -> str:
    return out.split(f"scenario {scenario}:", 1)[1].split("\nscenario ", 1)[0]


def test_s5cmd_embedded_every_command_rendered_for_the_first_build():
    out = plan("s5cmd")
    assert "{{" not in out and "{%" not in out and "%}" not in out
    old = f"{CACHE}/s5cmd/{'1' * 40}/s5cmd"
    # the header a dry run always printed
    assert out.startswith("target s5cmd from https://github.com/peak/s5cmd\n")
    assert f"  build v1.0.0: tag {'1' * 40} -> would build" in out
    assert f"  build v1.1.0: tag {'2' * 40} -> cached {CACHE}/s5cmd/{'2' * 40}/s5cmd" in out
    assert "backend: embedded MinIO on loopback; fixed: 10 runs a build, warm-up 2, in 5 rounds" in out
    assert "scenario small files: sparse fixture, 200 files, 50.0 MiB" in out
    small = section(out, "small files")
    assert (f"  step upload: {old} --log debug cp '{CACHE}/fixtures/sparse-256Kx200/*' "
            "'s3://refbench/refbench/<run-id>/small-files/up/'") in small
    assert f"    cleanup: {old} --log debug rm 's3://refbench/refbench/<run-id>/small-files/up/*'" in small
    assert "    prepare: rm -rf '<workdir>/small-files/dest-download'" in small
    assert f"  setup: {old} --log debug cp '{CACHE}/fixtures/sparse-256Kx200/*' " in small
    assert "S3_ENDPOINT_URL='http://127.0.0.1:<port>'" in out
    assert f"{'2' * 40}/s5cmd --log" not in out  # the first build only


def test_s5cmd_user_bucket_and_no_restore_tool_take_the_unversioned_branches():
    out = plan("s5cmd", bucket="mybucket", prefix="ci/pr-7", endpoint="http://s3.example:9000", target_flags=[],
               find_tool=lambda name: None)  # no restore tool on this machine
    assert "backend: s3://mybucket; fixed: 10 runs a build" in out
    assert "S3_ENDPOINT_URL=http://s3.example:9000" in out
    large = section(out, "large file")
    old = f"{CACHE}/s5cmd/{'1' * 40}/s5cmd"
    # an empty {{ extra }} leaves two spaces, exactly as the runner renders it
    assert f"  step remove: {old}  rm 's3://mybucket/ci/pr-7/<run-id>/large-file/rm/*'" in large
    assert (f"    prepare: {old}  cp 's3://mybucket/ci/pr-7/<run-id>/large-file/src/*' "
            "'s3://mybucket/ci/pr-7/<run-id>/large-file/rm/'") in large
    assert f"  teardown: {old}  rm 's3://mybucket/ci/pr-7/<run-id>/large-file/*'" in large
    assert "{{" not in out and "{%" not in out


def test_only_the_selected_steps_are_shown():
    out = plan("s5cmd", step_filter=lambda s, st: st.name == "download")
    assert "step download:" in out and "step upload:" not in out and "step remove:" not in out


def test_kubo_commands_carry_their_own_ipfs_path_and_the_api_placeholder():
    out = plan("kubo")
    assert "{{" not in out and "{%" not in out
    assert "backend: ipfs; fixed: 10 runs a build, warm-up 2, in 5 rounds" in out
    old = f"{CACHE}/kubo/{'1' * 40}/ipfs"
    tree = section(out, "tree")
    assert re.search(rf"  step add: export IPFS_PATH='<workdir>/ipfs/tree-b0' IPFS_TELEMETRY=off; {old} "
                     r"--log debug add -r -Q ", tree), tree
    assert "    prepare: export IPFS_PATH='<workdir>/ipfs/tree-b0'" in tree
    assert "    cleanup: export IPFS_PATH='<workdir>/ipfs/tree-b0' IPFS_TELEMETRY=off; rm -rf '<workdir>/tree/dest-get'" \
        in tree
    assert "api='http://127.0.0.1:<port>'" in section(out, "concurrent fetch")


@pytest.mark.parametrize("target", ["s5cmd", "kubo"])
def test_a_plan_renders_without_creating_anything(target, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan(target, cache_dir=tmp_path / "cache")
    assert list(tmp_path.iterdir()) == []


def test_a_budgeted_run_says_its_budget_not_its_planned_rounds():
    """A run with neither -r nor --budget is budgeted (16 kubo steps at full size: 2 h 40 min); the
    dry run and the run's first lines say so, where they used to say '10 runs, 5 rounds'."""
    budgeted = Sampling(runs=10, warmup=2, rounds=5, budget=16 * 600.0)
    out = plan("kubo", sampling=budgeted)
    assert ("backend: ipfs; sequential within a budget of 2:40:00 of measuring (set it with --budget): each step "
            "stops once decided, or when its share is spent; warm-up 2") in out
    assert "runs 10" not in out
    capped = Sampling(runs=10, warmup=2, rounds=5, budget=600.0, max_time=120.0)
    assert "10:00 of measuring" in capped.describe() and "2:00 a step at most" in capped.describe()
    until = Sampling(runs=10, warmup=1, rounds=5, until_decided=True)
    assert until.describe() == ("sequential (--until-decided): each step stops once decided, at most 60 runs a "
                                "build or 10:00 a step; warm-up 1")
    assert Sampling(runs=8, warmup=0, rounds=4).describe() == "fixed: 8 runs a build, warm-up 0, in 4 rounds"
