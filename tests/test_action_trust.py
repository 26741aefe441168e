"""action.yml's trust gate run as on a GitHub runner (tests/action_harness.py) in push jobs, whose
cache token writes the default branch's scope whatever the job saves (review35d HIGH 5:
actions/cache restores with tar -P, so an entry a job of unmerged code wrote could write anywhere in
every later job): such a job naming an unmerged ref fails before any cache step, refbench refuses
an unmerged ref given in args (REFBENCH_MERGED_ONLY), and a checkout on an unmerged branch gets no
key (review35d MEDIUM 7). Each test failed before the fix (the commit that added it says how)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from origins import git
from test_action import outcomes, runner
from test_trust_cache import gate_repo  # noqa: F401  (a pytest fixture: main, v1.0.0, unmerged feature)

KEY = "k" * 40


def push_event(default_branch: str) -> dict:
    return {"ref": f"refs/heads/{default_branch}", "repository": {"default_branch": default_branch,
                                                                   "full_name": "acme/tool"}}


CACHE_STEPS = ("Cache refbench's tools (hyperfine, MinIO, refbench-s3restore)",
               "Restore refbench's tools (restore only where PR code runs)", "Cache builds",
               "Restore builds (restore only where PR code runs)")


def test_a_push_job_naming_an_unmerged_ref_fails_before_any_cache_is_restored(gate_repo, tmp_path):
    r = runner(tmp_path, "push", push_event("main"), "https://api.github.invalid", workspace=gate_repo)
    steps = r.run({"refs": "v1.0.0 feature", "cache-key": KEY, "go-version": ""})
    done = outcomes(steps)
    gate = next(s for s in steps if s.name == "Decide whether this job may hold the cache key")
    assert gate.outcome == "failure", (gate.outcome, gate.stdout, gate.stderr)
    unmerged = git(gate_repo, "rev-parse", "origin/feature")
    lines = gate.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("::error::") and f"feature ({unmerged[:12]})" in lines[0], lines
    for name in (*CACHE_STEPS, "Write the cache key for the Benchmark step", "Benchmark"):
        assert done[name].startswith("skipped (if:"), (name, done[name])


def test_a_push_job_on_an_unmerged_checkout_gets_no_key_and_saves_no_cache(gate_repo, tmp_path):
    """A push to (or a dispatch from) an unmerged branch runs that branch's refbench.toml: its refs
    may all be merged, but the job holds no key and restores only."""
    checkout = tmp_path / "branch-checkout"
    subprocess.run(["git", "clone", "-q", str(gate_repo.parent / "origin"), str(checkout)], check=True,
                   capture_output=True)
    git(checkout, "checkout", "-q", "feature")
    r = runner(tmp_path, "push", push_event("main"), "https://api.github.invalid", workspace=checkout)
    r.base_env["HARNESS_ARGV_OUT"] = str(tmp_path / "argv")  # the stand-in refbench records its argv
    steps = r.run({"refs": "v1.0.0 main", "cache-key": KEY, "go-version": ""})
    done = outcomes(steps)
    gate = next(s for s in steps if s.name == "Decide whether this job may hold the cache key")
    assert gate.outcome == "success" and r.steps["trust"]["outputs"]["trusted"] == "false", gate.stdout
    assert "the checkout's HEAD" in gate.stdout and "::warning::" in gate.stdout
    assert done["Write the cache key for the Benchmark step"].startswith("skipped (if:")
    assert done["Cache builds"].startswith("skipped (if:")
    assert done["Restore builds (restore only where PR code runs)"].startswith("skipped (uses:")
    assert r.steps["trust"]["outputs"]["merged_only"] == "1"  # refbench builds merged code only here too


@pytest.mark.slow
def test_a_push_job_refuses_an_unmerged_ref_given_in_args(s5_origin, tmp_path):
    """Review35d MEDIUM 6: args' -s and --variant never reached key-gate; refbench itself refuses
    them in a push, schedule or manual job (REFBENCH_MERGED_ONLY), keyed or not, before building."""
    from test_inside_checkout import checkout_of
    bench = checkout_of(s5_origin, tmp_path / "workspace")
    r = runner(tmp_path, "push", push_event("master"), "https://api.github.invalid", workspace=bench.parent)
    steps = r.run({"working-directory": "benchmark", "refs": "v1.0.0 master", "go-version": "", "budget": "",
                   "args": "--dry-run --quick --only 'small files' --variant pr=hold-memory"})
    bench_step = next(s for s in steps if s.name == "Benchmark")
    assert "refbench exited with 2" in bench_step.stdout, bench_step.stdout + bench_step.stderr
    errors = [ln for ln in bench_step.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "hold-memory" in errors[0] and s5_origin.shas["hold"][:12] in errors[0], errors
    assert outcomes(steps)["Exit with refbench's exit code"] == "failure"


def test_the_sharded_workflow_gates_first_builds_merged_code_only_and_installs_hash_pinned():
    """bench-sharded.yml checks the checkout's HEAD through key-gate as the Action does, fails a run
    naming unmerged refs before anything of the checkout runs, its keyed steps build merged code
    only, and its keyed jobs install hash-pinned packages (review35d LOW 9: setup.sh took ranges)."""
    from ruamel.yaml import YAML

    from test_action import _pip_installs
    wf = YAML(typ="safe").load((Path(__file__).resolve().parent.parent / ".github" / "workflows" /
                                "bench-sharded.yml").read_text())
    build = wf["jobs"]["build"]["steps"]
    names = [s.get("name", s.get("uses")) for s in build]
    gate = next(i for i, s in enumerate(build) if s.get("id") == "trust")
    assert "exit 1" in build[gate]["run"] and "::error::" in build[gate]["run"] and "code -eq 3" in build[gate]["run"]
    # nothing of the checkout runs before the gate: its set-up comes after
    assert gate < next(i for i, n in enumerate(names) if str(n).startswith("Set up refbench")), names
    for job in ("build", "shard"):
        steps = wf["jobs"][job]["steps"]
        keyed = [s for s in steps if "REFBENCH_CACHE_KEY_FILE" in (s.get("env") or {})]
        assert keyed and all(s["env"].get("REFBENCH_MERGED_ONLY") == "1" for s in keyed), job
        installs = [c for s in steps if "run" in s for c in _pip_installs(s["run"])]
        assert installs and all(re.search(r"--require-hashes -r requirements/(action|pip)\.txt", c) or "--no-deps" in c
                                for c in installs), (job, installs)
        assert not any("setup.sh" in s.get("run", "") for s in steps), job  # its pip install takes ranges


def test_a_ref_named_like_an_option_is_refused_not_read_as_one(gate_repo, tmp_path):
    """Review35d LOW 8: refs/tags/--variant=pr=17 is a valid refname; key-gate passed it, and the
    Action spliced refs into refbench's argv, where argparse read it as --variant pr=17."""
    from test_trust_cache import _gate
    repo = tmp_path / "planted"
    subprocess.run(["git", "clone", "-q", str(gate_repo.parent / "origin"), str(repo)], check=True, capture_output=True)
    git(repo, "update-ref", "refs/tags/--variant=pr=17", "HEAD")
    proc = _gate(repo, "main", "--variant=pr=17")
    assert proc.returncode == 1 and "starts with '-'" in proc.stdout, proc.stdout + proc.stderr
    r = runner(tmp_path, "pull_request", push_event("main"), "https://api.github.invalid", workspace=repo)
    r.base_env["HARNESS_ARGV_OUT"] = str(tmp_path / "argv")
    steps = r.run({"refs": "main --variant=pr=17", "go-version": "", "pr-number": ""})
    bench = next(s for s in steps if s.name == "Benchmark")
    assert bench.outcome == "failure" and "'--variant=pr=17' starts with '-'" in bench.stdout, bench.stdout
    assert not (tmp_path / "argv").exists()


def test_every_workflow_installs_refbenchs_python_dependencies_hash_pinned():
    """The issue 54 review's F9: bench-sharded.yml's merge job installed refbench's dependencies by
    version range, where every other job takes requirements/action.txt --require-hashes, then
    refbench itself with --no-deps."""
    import re
    root = Path(__file__).resolve().parent.parent
    for path in sorted((root / ".github" / "workflows").glob("*.yml")) + [root / "action.yml"]:
        for line in path.read_text().splitlines():
            if re.search(r"\bpip install\b", line):
                assert "--require-hashes" in line or "--no-deps" in line, f"{path.name}: {line.strip()}"
