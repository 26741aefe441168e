"""Running refbench from inside a checkout of a declared target: the target and the origin
default to that checkout (its go.mod module matches the target's `module`), so no -t, no --repo
and no clone from GitHub; PR refs are fetched from the checkout's own remote.

The test origins' wrapper modules (example.com/s5wrap, example.com/kubowrap) stand in for
s5cmd and kubo: a user scenarios file (./refbench.toml, found before the bundled one) declares
the bundled targets with those modules, as a project vendoring refbench in benchmark/ would.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_bench
from origins import git
from refbench import builds as bl, paths
from refbench.pipeline import choose_target
from refbench.config import load_config
from refbench.errors import RefbenchError

S5_MODULE, KUBO_MODULE = "example.com/s5wrap", "example.com/kubowrap"


def user_scenarios() -> str:
    text = paths.bundled_scenarios().read_text()
    text = text.replace('module = "github.com/peak/s5cmd/v2"', f'module = "{S5_MODULE}"')
    text = text.replace('module = "github.com/ipfs/kubo"', f'module = "{KUBO_MODULE}"')
    assert text.count("example.com/") == 2
    return text


def checkout_of(origin, where: Path) -> Path:
    """A developer's clone of the origin with refbench 'vendored' in benchmark/ (its refbench.toml)."""
    git(where.parent, "clone", "-q", str(origin.path), str(where))
    bench = where / "benchmark"
    bench.mkdir()
    (bench / "refbench.toml").write_text(user_scenarios())
    return bench


def test_go_checkout_reads_the_module_and_the_remote(s5_origin, tmp_path):
    bench = checkout_of(s5_origin, tmp_path / "s5cmd")
    co = bl.go_checkout(bench)
    assert co is not None
    assert (co.root, co.module, co.remote) == (tmp_path / "s5cmd", S5_MODULE, str(s5_origin.path))
    assert bl.go_checkout(tmp_path) is None  # not a checkout
    plain = tmp_path / "plain"
    plain.mkdir()
    git(plain, "init", "-q")
    assert bl.go_checkout(plain) is None  # a checkout without go.mod


def test_choose_target_rules(s5_origin, tmp_path):
    bench = checkout_of(s5_origin, tmp_path / "s5cmd")
    cfg = load_config(bench / "refbench.toml")
    t, origin = choose_target(cfg, None, None, "git", cwd=bench)
    assert t.name == "s5cmd" and origin.root == tmp_path / "s5cmd"
    assert choose_target(cfg, "s5cmd", None, "git", cwd=bench)[1] == origin  # -t naming the same target
    assert choose_target(cfg, "s5cmd", "/elsewhere", "git", cwd=bench)[1] is None  # --repo wins
    assert choose_target(cfg, None, None, "module", cwd=bench)[1] is None  # no clone at all
    t, origin = choose_target(cfg, "kubo", None, "git", cwd=bench)  # another target: its own repo
    assert t.name == "kubo" and origin is None
    t, origin = choose_target(load_config(paths.bundled_scenarios()), None, None, "git", cwd=bench)
    assert t.name == "s5cmd" and origin is None  # module not declared: the default target, its repo
    with pytest.raises(RefbenchError, match="unknown target 'nope'"):
        choose_target(cfg, "nope", None, "git", cwd=bench)


def test_s5cmd_checkout_dry_run_needs_no_target_and_no_repo(s5_origin, tmp_path, builds_dir):
    bench = checkout_of(s5_origin, tmp_path / "s5cmd")
    proc = run_bench("-s", "v1.0.0", "7", "--dry-run", "--quick", "--builds-dir", str(builds_dir), cwd=bench)
    assert proc.returncode == 0, proc.stderr
    assert f"target s5cmd from {tmp_path / 's5cmd'}" in proc.stdout
    assert f"inside a checkout of s5cmd ({S5_MODULE})" in proc.stderr
    assert s5_origin.shas["old"] in proc.stdout
    assert s5_origin.shas["slow"] in proc.stdout  # PR 7 fetched from the checkout's remote
    assert "github.com" not in proc.stdout + proc.stderr


def test_a_branch_only_on_the_checkouts_remote_and_a_detached_head(s5_origin, tmp_path, builds_dir):
    """CI checks out a detached merge commit; a developer's clone has other branches only as
    origin/NAME. Both resolve."""
    root = tmp_path / "s5cmd"
    bench = checkout_of(s5_origin, root)
    git(root, "checkout", "-q", "--detach", s5_origin.shas["new"])
    git(root, "branch", "-q", "-D", "master")
    proc = run_bench("-s", "broken", s5_origin.shas["new"], "--dry-run", "--builds-dir", str(builds_dir), cwd=bench)
    assert proc.returncode == 0, proc.stderr
    assert s5_origin.shas["broken"] in proc.stdout and s5_origin.shas["new"] in proc.stdout


@pytest.mark.slow
def test_kubo_checkout_builds_kubo_without_target_or_repo(kubo_origin, tmp_path, builds_dir):
    bench = checkout_of(kubo_origin, tmp_path / "kubo")
    proc = run_bench("-s", "v1.0.0", "v1.1.0", "--dry-run", "--builds-dir", str(builds_dir), cwd=bench)
    assert proc.returncode == 0, proc.stderr
    assert f"target kubo from {tmp_path / 'kubo'}" in proc.stdout
    assert kubo_origin.shas["old"] in proc.stdout and kubo_origin.shas["new"] in proc.stdout


@pytest.mark.slow
def test_s5cmd_checkout_quick_run_just_works(s5_origin, tmp_path, builds_dir):
    """`./bench.py -s OLD PR` in the project: builds from the checkout, runs, reports."""
    bench = checkout_of(s5_origin, tmp_path / "s5cmd")
    (bench / "local").mkdir()
    proc = run_bench("-s", "v1.0.0", "7", "--quick", "--only", "small files/upload", "-r", "2", "-w", "0",
                     "--rounds", "1", "--no-profile",  # checked: target, origin, builds; perf was 9 s of 11
                     "--builds-dir", str(builds_dir), "-l", str(bench / "local"), cwd=bench)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((bench / "results.json").read_text())
    assert results["target"]["name"] == "s5cmd" and results["target"]["repo"] == str(tmp_path / "s5cmd")
    assert [b["sha"] for b in results["builds"]] == [s5_origin.shas["old"], s5_origin.shas["slow"]]
    assert "MB/s" in (bench / "summary.md").read_text()


def action_step_script(step_id: str) -> str:
    """The run: script of the action.yml step with this id."""
    lines = (paths.PROJECT_ROOT / "action.yml").read_text().splitlines()
    at = lines.index(f"      id: {step_id}")
    start = next(i for i in range(at, len(lines)) if lines[i].strip() == "run: |") + 1
    body = []
    for ln in lines[start:]:
        if ln.strip() and not ln.startswith(" " * 8):
            break
        body.append(ln[8:])
    return "\n".join(body) + "\n"


def test_the_actions_benchmark_step_in_a_pr_checkout(s5_origin, tmp_path, builds_dir):
    """The Action's Benchmark step, run here as on a runner: refs default to the PR's base commit
    and number, the target and origin come from the checkout, the budget turns into --budget; on
    a /bench comment it builds exactly the commits the check step accepted, with the allowed
    options the check wrote, and without them it builds nothing."""
    bench = checkout_of(s5_origin, tmp_path / "s5cmd")
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "refbench").write_text(f"#!/bin/sh\nexec {sys.executable} {paths.PROJECT_ROOT / 'bench.py'} \"$@\"\n")
    (tools / "refbench").chmod(0o755)
    (tools / "python").symlink_to(sys.executable)  # what actions/setup-python provides
    runner_temp = tmp_path / "runner"
    runner_temp.mkdir()
    output = tmp_path / "github_output"
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}", "RUNNER_TEMP": str(runner_temp),
           "GITHUB_OUTPUT": str(output), "REFBENCH_BUILDS_DIR": str(builds_dir),
           "REFS": "", "TARGET": "", "SCENARIOS": "", "ARGS": "--dry-run -w 0", "QUICK": "true",
           "BENCH_COMMAND": "", "BUDGET": "120", "FAIL_ON_REGRESSION": "false", "PR_NUMBER": "7",
           "BASE_SHA": s5_origin.shas["old"], "CHECKED_BASE": "", "CHECKED_HEAD": ""}

    def step(**change):
        output.write_text("")
        return subprocess.run(["bash", "-e", "-c", action_step_script("run")], cwd=bench, env={**env, **change},
                              capture_output=True, text=True, timeout=600)

    p = step()  # a pull_request event: the PR's base commit and its number
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"target s5cmd from {tmp_path / 's5cmd'}" in p.stdout
    assert s5_origin.shas["slow"] in p.stdout  # PR 7
    out = dict(ln.split("=", 1) for ln in output.read_text().splitlines())
    assert out["exit-code"] == "0" and out["results"] == str(runner_temp / "refbench" / "results.json")
    assert (runner_temp / "refbench" / "pr-number").read_text() == "7\n"
    # /bench: the check step (refbench comment --check-command, tested in test_action / test_github)
    # leaves the accepted commits and the allowed options, one per line; the run builds those
    (runner_temp / "refbench" / "bench-args").write_text("--only\nsmall files\n-r\n3\n")
    p = step(BENCH_COMMAND="/bench --only 'small files' -r 3", CHECKED_BASE=s5_origin.shas["old"],
             CHECKED_HEAD=s5_origin.shas["slow"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "/bench arguments: --only small files -r 3" in p.stdout
    assert s5_origin.shas["old"] in p.stdout and s5_origin.shas["slow"] in p.stdout
    # a /bench without the check's commits builds nothing
    p = step(BENCH_COMMAND="/bench -r 3")
    assert p.returncode == 2 and "the /bench check gave no commits" in p.stdout
    assert dict(ln.split("=", 1) for ln in output.read_text().splitlines()).get("exit-code") is None
    # an untrusted association, or anything a shell would act on, is refused by the check before
    # anything runs
    pwned = tmp_path / "pwned"
    check = ["refbench", "comment", "--check-command", "--repo", "acme/tool", "--pr", "7", "--commenter", "m",
             "--refs-out", str(tmp_path / "refs")]
    no_api = {**env, "GITHUB_API_URL": "http://127.0.0.1:9", "GITHUB_TOKEN": "x"}
    p = subprocess.run([*check, "--author-association", "CONTRIBUTOR"], input="/bench -r 3", env=no_api,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "/bench is for maintainers" in p.stderr
    for body in (f"/bench -r 3; touch {pwned}", f"/bench --only $(touch {pwned})", f"/bench --only `touch {pwned}`"):
        p = subprocess.run([*check, "--author-association", "MEMBER"], input=body, env=no_api,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and "refbench: error: /bench" in p.stderr, body
    assert not pwned.exists()


def test_bisect_inside_a_checkout_builds_from_it(s5_origin, tmp_path, builds_dir, monkeypatch):
    """bisect, too, takes the target and the origin from the checkout (its probes get --repo it)."""
    from refbench import bisect as bs

    bench = checkout_of(s5_origin, tmp_path / "s5cmd")
    seen = []

    from refbench.commands import bisect as bisect_cmd
    from test_bisect import probe_results

    def fake_run(request, reporter):
        seen.append(request)
        good, mid = request.refs
        slower = mid == s5_origin.shas["new"]
        return probe_results(good, mid, "slower" if slower else "no significant change", 0.5 if slower else 0.0,
                             True, True)

    monkeypatch.chdir(bench)
    _, search, base = bisect_cmd.parse(["v1.0.0", "v1.1.0", "--only", "small files/upload",
                                        "--builds-dir", str(builds_dir)])
    out = bs.bisect(search, base, run=fake_run, say=lambda m: None)
    assert out.first_slower == s5_origin.shas["new"]
    request = seen[0]
    assert request.target == "s5cmd"
    assert request.repo == str(tmp_path / "s5cmd")
    assert request.scenarios == str(bench / "refbench.toml")
