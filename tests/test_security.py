"""Issue 20: one test per hole a PR bot on a public repository (or a killed run) could use.

Each test is named for the hole and was written to fail on the code before the fix."""
from __future__ import annotations

import json
from pathlib import Path

from refbench.render.markdown import COMMENT_MARKER
from test_github import TOKEN, gh, post, results_file  # noqa: F401  (pytest fixtures)

ROOT = Path(__file__).resolve().parent.parent


# ---- 3: the bot's comment is the bot's -------------------------------------------------------
def test_comment_takeover_another_users_marker_comment_is_left_alone(gh, results_file):
    planted = {"id": 13, "body": f"{COMMENT_MARKER}\nI wrote the marker myself", "user": {"login": "mallory"}}
    gh.comments.append(planted)
    proc = post(gh, results_file)
    assert proc.returncode == 0, proc.stderr
    assert "created" in proc.stderr
    assert [r["method"] for r in gh.requests if r["method"] != "GET"] == ["POST"]
    assert planted["body"] == f"{COMMENT_MARKER}\nI wrote the marker myself"
    # and the next run updates the bot's own comment, not mallory's
    gh.requests.clear()
    again = post(gh, results_file)
    assert again.returncode == 0 and "updated" in again.stderr, again.stderr
    patch = [r for r in gh.requests if r["method"] == "PATCH"]
    assert len(patch) == 1 and patch[0]["path"].endswith("/issues/comments/100")
    assert planted["body"].endswith("I wrote the marker myself")


# ---- 4: clean removes only what refbench made ------------------------------------------------
def run_bench(*args, env=None, cwd=None, timeout=120):
    import os
    import subprocess
    import sys
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "bench.py"), *args], capture_output=True, text=True,
                          env=full, cwd=cwd, timeout=timeout)


def test_clean_refuses_an_unmarked_directory_and_leaves_it_intact(tmp_path):
    home = tmp_path / "home"
    (home / "projects").mkdir(parents=True)
    (home / "projects" / "thesis.tex").write_text("years of work")
    for how in ((), ("--fixtures-only",)):
        proc = run_bench("clean", *how, env={"REFBENCH_BUILDS_DIR": str(home)})
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "not made by refbench" in proc.stderr
        assert (home / "projects" / "thesis.tex").read_text() == "years of work"
    proc = run_bench("clean", "--builds-dir", str(home))
    assert proc.returncode == 2 and (home / "projects" / "thesis.tex").exists()


def test_clean_removes_a_cache_dir_refbench_made(tmp_path):
    from refbench import builds, config, paths
    made = tmp_path / "cache" / "builds"
    target = config.load_config(paths.bundled_scenarios()).targets["s5cmd"]
    builds.Builder(target, made)  # a builder marks the directory it creates
    (made / "fixtures").mkdir()
    proc = run_bench("clean", "--fixtures-only", "--builds-dir", str(made))
    assert proc.returncode == 0, proc.stderr
    assert made.is_dir() and not (made / "fixtures").exists()
    proc = run_bench("clean", "--builds-dir", str(made))
    assert proc.returncode == 0, proc.stderr
    assert not made.exists()


# ---- 9: fixtures are made once, whole, however many runs start at once ------------------------
def test_fixture_race_two_cold_cache_runs_at_once_both_succeed(tmp_path):
    import subprocess
    import sys
    cache = tmp_path / "cache"
    script = ("import sys; from refbench import fixtures as fx; from refbench.config import Fixture;"
              "f = fx.ensure(Fixture(kind='random', size=24_000_000, count=4, seed=3), sys.argv[1]);"
              "print(sorted(p.stat().st_size for p in f.root.iterdir()))")
    env = {"PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(cache)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.strip() == str([24_000_000] * 4)
    left = sorted(p.name for p in (cache / "fixtures").iterdir())
    assert not [n for n in left if ".tmp" in n], left  # no half-written directory stays behind
