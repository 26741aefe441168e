"""action.yml run as on a GitHub runner (tests/action_harness.py): its composite `run:` steps in
bash with GITHUB_OUTPUT, GITHUB_ENV, GITHUB_PATH, GITHUB_STEP_SUMMARY and GITHUB_EVENT_PATH, for
recorded pull_request, workflow_run and issue_comment events, against the local fake GitHub API.

The `uses:` steps are NOT run (GitHub is unreachable, and they are GitHub's actions, not ours):
actions/setup-python, setup-go, cache, cache/restore, upload-artifact and download-artifact are
recorded as skipped, and each test says what stands in for them: the worktree's Python is the
`python` setup-python would provide, and the comment tests put the artifact where
download-artifact would. Two things inside run steps are stood in for too, so the tests stay
fast and leave the shared tools alone: `pip install` of the Action (refbench runs from this
worktree with its .venv instead) and `refbench setup` (it builds hyperfine and MinIO for minutes;
the worktree's tools/bin is on PATH instead). Everything else runs for real.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from action_harness import ROOT, Runner, setup_python
from refbench.render.markdown import COMMENT_MARKER
from test_github import TOKEN, gh  # noqa: F401  (the fake GitHub API fixture)

EVENTS = ROOT / "tests" / "data" / "events"
RESULTS = ROOT / "tests" / "data" / "results-s5cmd.json"  # a tiny committed results file


def event(name: str, **replace: str) -> dict:
    text = (EVENTS / f"{name}.json").read_text()
    for k, v in replace.items():
        text = text.replace(k, v)
    return json.loads(text)


def stand_ins(where: Path) -> Path:
    """A bin dir with the `python` actions/setup-python would provide. Its `-m venv DIR` makes a
    venv whose `python -m pip install` is skipped and whose `refbench` runs this worktree."""
    bin_dir = where / "setup-python"
    bin_dir.mkdir(parents=True)
    py = sys.executable
    (bin_dir / "python").write_text(f"""#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin"
  cat > "$3/bin/python" <<'EOF'
#!/bin/sh
if [ "$1 $2 $3" = "-m pip install" ]; then echo "harness: pip install stood in for (refbench runs from the worktree)"; exit 0; fi
exec {py} "$@"
EOF
  cat > "$3/bin/refbench" <<'EOF'
#!/bin/sh
if [ "$1" = "setup" ]; then echo "harness: refbench setup stood in for (the worktree's tools are on PATH)"; exit 0; fi
if [ -n "$HARNESS_ARGV_OUT" ] && [ "$1" = "-s" ]; then printf '%s\n' "$@" > "$HARNESS_ARGV_OUT"; exit 0; fi
exec {py} {ROOT / 'bench.py'} "$@"
EOF
  chmod +x "$3/bin/python" "$3/bin/refbench"
  exit 0
fi
exec {py} "$@"
""")
    (bin_dir / "python").chmod(0o755)
    return bin_dir


_GO_CACHES: dict[str, str] = {}


# what the Action's "drop cached toolchains" step deletes (action.yml): never the machine's own
TOOLCHAIN_PATHS = ("golang.org/toolchain@", "cache/download/golang.org/toolchain")


def go_caches(tmp_path) -> dict[str, str]:
    """The suite's Go caches (refbench's own, toolchain.own_caches, which the other tests' builds
    fill) as GOCACHE and a view of GOMODCACHE: what a runner's restored Go caches hold. Without
    them a job's HOME of its own starts Go cold (every module downloaded from the proxy, every
    package compiled: half a minute a build here). The module cache is a view (shadow_tree)
    without the unpacked Go toolchains, which the Action deletes as it would a restored cache's:
    a job run here once deleted this machine's own, under the builds of everything else on it."""
    if not _GO_CACHES:
        import os
        from refbench import toolchain
        _GO_CACHES.update(toolchain.own_caches(os.environ))
    view = tmp_path / "gomodcache"
    if not view.exists():
        shadow_tree(Path(_GO_CACHES["GOMODCACHE"]), view, TOOLCHAIN_PATHS)
    return {"GOCACHE": _GO_CACHES["GOCACHE"], "GOMODCACHE": str(view)}


def shadow_tree(real: Path, view: Path, leave_out: tuple[str, ...]) -> None:
    """`view` shows `real` through links, except the paths starting with one of `leave_out` (paths
    relative to `real`): the directories on the way to them are made for real, every other entry is
    a link, so what the job adds lands in `real` and what it deletes under `leave_out` is only
    `view`'s (nothing of `real` is there to delete)."""
    view.mkdir(parents=True, exist_ok=True)
    if not real.is_dir():
        return
    for entry in real.iterdir():
        rel = entry.name
        inner = tuple(p[len(rel) + 1:] for p in leave_out if p.startswith(rel + "/"))
        if any(rel.startswith(p) for p in leave_out if "/" not in p):
            continue
        if inner and entry.is_dir() and not entry.is_symlink():
            shadow_tree(entry, view / rel, inner)
        else:
            (view / rel).symlink_to(entry)


def runner(tmp_path, event_name, payload, api_url, workspace=None, home=None) -> Runner:
    import os
    home = home or tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    # the job's HOME holds its caches and its cache key, as a runner's does: none from XDG_* here
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "REFBENCH_", "XDG_"))}
    env["HOME"] = str(home)
    env.update(go_caches(tmp_path))
    return Runner(tmp_path / "job", event_name, payload, workspace or tmp_path, api_url=api_url, token=TOKEN,
                  path_front=[stand_ins(tmp_path), ROOT / "tools" / "bin"], base_env=env)


def put_artifact(r: Runner, pr: str) -> None:
    """What actions/download-artifact does in comment mode: the run's artifact, in RUNNER_TEMP."""
    d = r.temp / "refbench-results"
    d.mkdir(parents=True)
    shutil.copy(RESULTS, d / "results.json")
    (d / "pr-number").write_text(pr + "\n")


def outcomes(steps) -> dict[str, str]:
    return {s.name: s.outcome for s in steps}


def posted(gh) -> list[dict]:
    return [r for r in gh.requests if r["method"] in ("POST", "PATCH")]


# ---- mode: comment, from workflow_run ------------------------------------------------------------
WR = event("workflow_run")["workflow_run"]


def _the_pr(number=7, sha=WR["head_sha"]):
    return {"number": number, "head": {"sha": sha, "ref": WR["head_branch"],
                                       "repo": {"full_name": WR["head_repository"]["full_name"]}}}


def test_comment_mode_on_workflow_run_posts_to_the_pr_the_api_names(gh, tmp_path):
    gh.pulls = [_the_pr(7), _the_pr(8, sha="0" * 40)]
    r = runner(tmp_path, "workflow_run", event("workflow_run"), gh.url)
    put_artifact(r, "7")
    steps = r.run({"mode": "comment"})
    done = outcomes(steps)
    assert done["Install refbench"] == "success"
    assert done["actions/download-artifact@v4"] == "skipped (uses: actions/download-artifact@v4)"
    assert done["Benchmark"].startswith("skipped (if:")
    post = next(s for s in steps if s.name == "Post or update the PR comment")
    assert post.outcome == "success", post.stdout + post.stderr
    assert "created the comment on acme/tool#7" in post.stderr
    (create,) = posted(gh)
    assert create["path"] == "/api/v3/repos/acme/tool/issues/7/comments"
    assert create["body"]["body"].startswith(COMMENT_MARKER)
    assert create["body"]["body"].rstrip().endswith(f"({WR['html_url']})")
    # the lookup asked for the run's head branch on the head repository's owner
    lookup = next(q for q in gh.requests if q["path"].startswith("/api/v3/repos/acme/tool/pulls?"))
    assert "head=contributor%3Afaster-uploads" in lookup["path"]
    # REFBENCH_BUILDS_DIR reached the later steps through GITHUB_ENV, the venv through GITHUB_PATH
    assert r.env_file_vars["REFBENCH_BUILDS_DIR"].endswith("/.cache/refbench/builds")
    assert any(p.endswith("refbench-venv/bin") for p in r.github_path)


def test_comment_mode_refuses_a_poisoned_artifact(gh, tmp_path):
    gh.pulls = [_the_pr(7)]
    r = runner(tmp_path, "workflow_run", event("workflow_run"), gh.url)
    put_artifact(r, "8")  # the PR's code wrote another PR's number
    post = next(s for s in r.run({"mode": "comment"}) if s.name == "Post or update the PR comment")
    assert post.outcome == "failure"
    assert "refusing to post" in post.stderr and "#7" in post.stderr, post.stderr
    assert posted(gh) == []


# ---- mode: comment, in the /bench workflow (issue_comment) ------------------------------------------
def test_comment_mode_on_issue_comment_takes_the_number_from_the_event_and_the_pinned_head(gh, tmp_path):
    pinned = "c" * 40
    gh.pulls = [_the_pr(7, sha=pinned)]
    r = runner(tmp_path, "issue_comment", event("issue_comment"), gh.url)
    put_artifact(r, "7")
    post = next(s for s in r.run({"mode": "comment", "head-sha": pinned}) if s.name.startswith("Post"))
    assert post.outcome == "success", post.stderr
    assert [q["path"] for q in posted(gh)] == ["/api/v3/repos/acme/tool/issues/7/comments"]

    gh.requests.clear()
    gh.pulls = [_the_pr(7, sha="d" * 40)]  # pushed to after /bench was accepted
    r = runner(tmp_path / "again", "issue_comment", event("issue_comment"), gh.url)
    put_artifact(r, "7")
    post = next(s for s in r.run({"mode": "comment", "head-sha": pinned}) if s.name.startswith("Post"))
    assert post.outcome == "failure" and "moved from cccccccccccc" in post.stderr, post.stderr
    assert posted(gh) == []

    r = runner(tmp_path / "other", "issue_comment", event("issue_comment"), gh.url)
    put_artifact(r, "9")  # an artifact naming another PR than the event's
    post = next(s for s in r.run({"mode": "comment"}) if s.name.startswith("Post"))
    assert post.outcome == "failure" and "the event #7" in post.stdout, post.stdout
    assert posted(gh) == []


# ---- mode: run, on a pull_request --------------------------------------------------------------
@pytest.mark.slow
def test_run_mode_on_a_pull_request_benchmarks_base_and_head_and_fills_the_env_files(
        s5_origin, builds_dir, tmp_path):
    from test_inside_checkout import checkout_of
    bench = checkout_of(s5_origin, tmp_path / "workspace")
    home = tmp_path / "home"
    (home / ".cache" / "refbench").mkdir(parents=True)
    # the session's builds, restored as a cache: a pull_request's job seals with a key of its own
    # (no REFBENCH_CACHE_KEY: refbench/trust.py), so it rebuilds them, with the Go caches restored
    # (copied: a restore writes files, and a link there is refused: paths.settled_cache_dir)
    # (not the kubo states: an overlay's upper layer holds whiteouts, character devices no restore
    # writes and copytree cannot open, there once a kubo GC test of this worker has run)
    shutil.copytree(builds_dir, home / ".cache" / "refbench" / "builds", symlinks=True,
                    ignore=shutil.ignore_patterns("ipfs-states"))
    payload = event("pull_request", HEAD_SHA=s5_origin.shas["slow"], BASE_SHA=s5_origin.shas["old"])
    r = runner(tmp_path, "pull_request", payload, "https://api.github.invalid", workspace=bench.parent, home=home)
    steps = r.run({"working-directory": "benchmark", "budget": "", "quick": "true",
                   "args": "--only 'small files/remove' -r 2 -w 0 --rounds 1 --no-rss"})
    done = outcomes(steps)
    for name, outcome in done.items():  # every uses: step is skipped, every run: step succeeds
        assert outcome in ("success",) or outcome.startswith(("skipped (uses:", "skipped (if:")), (name, outcome)
    # a pull_request restores the caches and never saves one (actions/cache saves at the job's end)
    assert len([o for o in done.values() if "(uses: actions/cache/restore@" in o]) == 2, done
    assert all(o.startswith("skipped (if:") for n, o in done.items() if n.startswith("Cache ")), done
    bench_step = next(s for s in steps if s.name == "Benchmark")
    assert "refbench exited with 0" in bench_step.stdout, bench_step.stdout + bench_step.stderr
    out = r.steps["run"]["outputs"]
    assert out["exit-code"] == "0"
    results = json.loads(Path(out["results"]).read_text())
    assert [b["sha"] for b in results["builds"]] == [s5_origin.shas["old"], s5_origin.shas["slow"]]
    assert not any(b["cached"] for b in results["builds"])  # a restored build is no pull request's to trust
    assert (r.temp / "refbench" / "pr-number").read_text() == "7\n"  # from the event
    summary = r.summary.read_text()
    assert "small files" in summary and "remove" in summary
    assert done["Exit with refbench's exit code"] == "success"


# ---- /bench: judged before anything of the pull request runs ------------------------------------
BASE, REVIEWED, PUSHED = "b" * 40, "c" * 40, "d" * 40


def _bench_event(body: str) -> dict:
    return event("issue_comment", **{"/bench --only 'small files' -r 20": body})


def _pr(head: str) -> dict:
    return {**_the_pr(7, sha=head), "base": {"sha": BASE}}


def test_bench_without_the_commits_of_a_check_builds_nothing(gh, tmp_path):
    """The bench job builds only what the check job accepted (inputs base-sha and head-sha): without
    them, or with a comment naming another head, nothing is built or run: the check fails before
    the caches, the set-up and the benchmark, and the run job (read-only) posts nothing."""
    body = f"/bench --head {REVIEWED} -r 2"
    gh.pulls = [_pr(REVIEWED)]
    r = runner(tmp_path, "issue_comment", _bench_event(body), gh.url)
    steps = r.run({"bench-command": body, "author-association": "MEMBER", "quick": "true"})
    done = outcomes(steps)
    check = next(s for s in steps if s.name == "Check the /bench command")
    assert check.outcome == "failure" and "the /bench check gave no base commit" in check.stderr, check.stderr
    r = runner(tmp_path / "other", "issue_comment", _bench_event(body), gh.url, home=tmp_path / "home")
    other = next(s for s in r.run({"bench-command": body, "author-association": "MEMBER", "base-sha": BASE,
                                   "head-sha": PUSHED}) if s.name == "Check the /bench command")
    assert other.outcome == "failure" and "the check accepted dddddddddddd" in other.stderr, other.stderr
    for name in ("Set up hyperfine, MinIO, refbench-s3restore", "Benchmark", "Exit with refbench's exit code"):
        assert done[name].startswith("skipped (if:"), (name, done[name])
    assert not (tmp_path / "home" / ".cache" / "refbench" / "builds").exists()  # nothing was built
    assert not (r.temp / "refbench" / "results.json").exists()
    assert posted(gh) == []


def test_a_push_between_the_check_and_the_bench_job_changes_nothing_built(gh, tmp_path):
    """The check job accepts cccc… (the PR's head then); the PR is pushed to (dddd…); the bench job,
    given the check job's outputs, benchmarks bbbb… against cccc… and never asks for the PR again."""
    body = f"/bench --head {REVIEWED} -r 2"
    gh.pulls = [_pr(REVIEWED)]
    check = runner(tmp_path / "check", "issue_comment", _bench_event(body), gh.url)
    done = outcomes(check.run({"mode": "check", "bench-command": body, "author-association": "MEMBER"}))
    assert done["Check the /bench command"] == "success"
    accepted = check.steps["check"]["outputs"]
    assert accepted == {"base": BASE, "head": REVIEWED}

    gh.pulls = [_pr(PUSHED)]  # the push, between the jobs
    gh.requests.clear()
    r = runner(tmp_path / "bench", "issue_comment", _bench_event(body), gh.url)
    r.base_env["HARNESS_ARGV_OUT"] = str(tmp_path / "argv")  # the stand-in refbench records what it was asked
    steps = r.run({"bench-command": body, "author-association": "MEMBER", "quick": "true",
                   "base-sha": accepted["base"], "head-sha": accepted["head"]})
    done = outcomes(steps)
    assert done["Check the /bench command"] == "success" and done["Benchmark"] == "success", done
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[:3] == ["-s", BASE, REVIEWED] and PUSHED not in argv, argv
    assert argv[-2:] == ["-r", "2"]  # the comment's own options, allow-listed
    assert not any("/pulls" in q["path"] or "/permission" in q["path"] for q in gh.requests), gh.requests


def test_check_mode_replies_why_and_outputs_the_commits_it_accepts(gh, tmp_path):
    body = f"/bench --head {REVIEWED} -r 2"
    gh.pulls = [_pr(PUSHED)]
    r = runner(tmp_path, "issue_comment", _bench_event(body), gh.url)
    done = outcomes(r.run({"mode": "check", "bench-command": body, "author-association": "MEMBER"}))
    assert done["Check the /bench command"] == "failure"
    (reply,) = posted(gh)
    assert reply["path"] == "/api/v3/repos/acme/tool/issues/7/comments"
    assert "was not run" in reply["body"]["body"] and "nothing was built" in reply["body"]["body"]

    gh.requests.clear()
    gh.pulls = [_pr(REVIEWED)]
    r = runner(tmp_path / "again", "issue_comment", _bench_event(body), gh.url)
    done = outcomes(r.run({"mode": "check", "bench-command": body, "author-association": "MEMBER"}))
    assert done["Check the /bench command"] == "success" and done["Benchmark"].startswith("skipped")
    assert r.steps["check"]["outputs"] == {"base": BASE, "head": REVIEWED} and posted(gh) == []

    gh.permissions["maintainer"] = ("read", "triage")  # a MEMBER without write access
    r = runner(tmp_path / "reader", "issue_comment", _bench_event(body), gh.url)
    done = outcomes(r.run({"mode": "check", "bench-command": body, "author-association": "MEMBER"}))
    assert done["Check the /bench command"] == "failure"
    assert "needs write access" in posted(gh)[-1]["body"]["body"]


def test_a_planted_link_definition_in_the_results_renders_as_text(gh, tmp_path):
    """Every field of results.json is the PR's code talking: a link definition planted in one
    field and its reference in another must reach the PR comment as text, not as a link."""
    from markdown_it import MarkdownIt
    gh.pulls = [_the_pr(7)]
    r = runner(tmp_path, "workflow_run", event("workflow_run"), gh.url)
    put_artifact(r, "7")
    doc = json.loads(RESULTS.read_text())
    doc["target"]["name"] = "s5cmd [read the fix][x] GH-123 @mallory"
    doc["created"] = "2026-11-22\n[x]: //evil.invalid/steal\n"
    doc["environment"]["go"] = "go1.26.8\n\n[y]: https://evil.invalid/2 \"title\"\n[again][y]"
    (r.temp / "refbench-results" / "results.json").write_text(json.dumps(doc))
    post = next(s for s in r.run({"mode": "comment"}) if s.name == "Post or update the PR comment")
    assert post.outcome == "success", post.stderr
    (create,) = posted(gh)
    body = create["body"]["body"]
    html = MarkdownIt("commonmark").render(body)
    assert "evil.invalid/steal" in html  # shown, as text
    assert re.findall(r"<a |<img ", html) == ["<a "] and re.findall(r'href="([^"]*)"', html) == [WR["html_url"]]
    assert "\n[x]" not in body and "[y]:" not in body  # each field stays on its line, escaped
    assert "GH-\u200b123" in body and "@\u200bmallory" in body


# ---- what the jobs with a write token install -----------------------------------------------------
def _pip_installs(script: str) -> list[str]:
    """Each `pip install` command of a shell script, its continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", script)
    return [ln.strip() for ln in joined.splitlines() if re.search(r"\bpip3?\b.*\binstall\b", ln)]


def _write_jobs() -> list[tuple[str, dict]]:
    """(workflow/job, job) for every job whose token may write, its own permissions or the workflow's."""
    from ruamel.yaml import YAML
    out = []
    for wf in sorted((ROOT / ".github" / "workflows").glob("*.yml")):
        doc = YAML(typ="safe").load(wf.read_text())
        for name, job in doc["jobs"].items():
            perms = job.get("permissions", doc.get("permissions"))
            if perms == "write-all" or (isinstance(perms, dict) and "write" in perms.values()):
                out.append((f"{wf.name}/{name}", job))
    return out


def test_every_job_with_a_write_token_installs_only_hash_pinned_packages():
    """A version range in a job that holds a write token lets whoever can publish a newer release
    of any dependency run code beside that token: every pip install there is --require-hashes
    from the pinned file, or --no-deps of the Action's own checkout (nothing fetched)."""
    from ruamel.yaml import YAML
    action = YAML(typ="safe").load((ROOT / "action.yml").read_text())
    action_scripts = [s["run"] for s in action["runs"]["steps"] if "run" in s]
    jobs = _write_jobs()
    assert {"bench-command.yml/check", "bench-command.yml/comment", "bench-comment.yml/comment"} <= \
        {name for name, _ in jobs}, jobs
    checked = 0
    for name, job in jobs:
        for step in job.get("steps", []):
            scripts = [step["run"]] if "run" in step else []
            if str(step.get("uses", "")).startswith("OWNER/refbench"):  # this repository's Action
                scripts += action_scripts
            for cmd in (c for s in scripts for c in _pip_installs(s)):
                checked += 1
                hashed = "--require-hashes" in cmd and re.search(r"-r \S*requirements/(action|pip)\.txt", cmd)
                own = "--no-deps" in cmd and re.search(r'install(?: -q)? --no-deps --no-build-isolation "\$GITHUB_ACTION_PATH"$',
                                                        cmd)
                assert hashed or own, f"{name}: {cmd}"
    assert checked >= 3 * 3, checked  # the Action's three installs, in each of the three jobs

    # the files: every requirement pinned to one version with hashes, refbench's dependencies all in it
    pinned = {}
    for name in ("action.txt", "pip.txt"):
        text = re.sub(r"\\\n\s*", " ", (ROOT / "requirements" / name).read_text())
        reqs = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        for ln in reqs:
            m = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)((?: --hash=sha256:[0-9a-f]{64})+)", " ".join(ln.split()))
            assert m, f"requirements/{name}: not NAME==VERSION --hash=sha256:...: {ln[:120]}"
            pinned[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    assert "pip" in pinned, "requirements/pip.txt pins no pip"
    import tomllib
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps + ["setuptools"]:
        name = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", dep).group(0)).lower()
        assert name in pinned, f"{dep} (pyproject.toml) is not pinned in requirements/action.txt"


def test_the_jobs_module_cache_keeps_the_machines_toolchains_out_of_the_actions_reach(tmp_path):
    """The Action deletes every unpacked Go toolchain in the job's module cache (a restored one may
    be planted). A job run here sees this machine's module cache, so its drop step must find only the
    view's: run the Action's own loop on a view of a planted cache; the real toolchains stay, and
    everything else reads through."""
    real = tmp_path / "real"
    for f in ("golang.org/toolchain@v0.0.1-go1.25.0.linux-amd64/bin/go", "golang.org/x/mod@v0.1.0/go.mod",
              "cache/download/golang.org/toolchain/@v/list", "cache/download/golang.org/x/mod/@v/list",
              "github.com/peak/s5cmd/v2@v2.3.0/go.mod"):
        (real / f).parent.mkdir(parents=True, exist_ok=True)
        (real / f).write_text("x")
    view = tmp_path / "view"
    shadow_tree(real, view, TOOLCHAIN_PATHS)
    import subprocess
    loop = re.search(r'(for d in "\$mod"/golang\.org/toolchain@\*.*?done)', (ROOT / "action.yml").read_text(), re.S)
    assert loop, "action.yml no longer drops cached toolchains as this test expects"
    subprocess.run(["bash", "-ec", f"mod={view}\n{loop.group(1)}"], check=True)
    assert (real / "golang.org/toolchain@v0.0.1-go1.25.0.linux-amd64/bin/go").is_file()
    assert (real / "cache/download/golang.org/toolchain/@v/list").is_file()
    assert (view / "golang.org/x/mod@v0.1.0/go.mod").read_text() == "x"
    assert (view / "github.com/peak/s5cmd/v2@v2.3.0/go.mod").is_file()
    assert (view / "cache/download/golang.org/x/mod/@v/list").is_file()


def test_dropping_restored_toolchains_runs_no_go(tmp_path):
    """The drop step runs after the restores, in the workspace: a `go` it ran there could switch to
    (and run) the very toolchain it is about to delete (review35d HIGH 1). Its script, run with a
    `go` first on PATH that records being run, never runs it, and still drops the planted one."""
    import subprocess
    from ruamel.yaml import YAML
    action = YAML(typ="safe").load((ROOT / "action.yml").read_text())
    steps = {s.get("name"): s for s in action["runs"]["steps"]}
    script = next(s["run"] for n, s in steps.items() if n and n.startswith("Drop Go toolchains"))
    bin_dir, marker = tmp_path / "bin", tmp_path / "go-ran"
    bin_dir.mkdir()
    (bin_dir / "go").write_text(f"#!/bin/sh\necho ran >> {marker}\necho {tmp_path / 'elsewhere'}\n")
    (bin_dir / "go").chmod(0o755)
    home = tmp_path / "home"
    planted = home / "go/pkg/mod/golang.org/toolchain@v0.0.1-go1.99.0.linux-amd64/bin/go"
    planted.parent.mkdir(parents=True)
    planted.write_text("#!/bin/sh\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home)}
    subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], env=env, check=True,
                   cwd=tmp_path)
    assert not marker.exists(), "the drop step ran go"
    assert not planted.parent.parent.exists(), "the restored toolchain is still there"


@pytest.mark.slow
def test_the_install_step_installs_the_pinned_requirements_with_the_pythons_own_pip(tmp_path):
    """The Install step for real (PyPI, --require-hashes), in a venv of the interpreter itself as
    setup-python gives it: its bundled pip (23.2.1 with Python 3.11.7) refused requirements/action.txt
    (google-auth[pyopenssl] read as unpinned), so every job of the Action failed at its first step
    on such a runner; the tests stood in for the install and never saw it (benchmarks/bot_answer.py did)."""
    bin_dir = setup_python(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    import os
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "REFBENCH_", "XDG_", "VIRTUAL_ENV"))}
    env["HOME"] = str(home)
    r = Runner(tmp_path / "job", "issue_comment", event("issue_comment"), tmp_path, path_front=[bin_dir], base_env=env)
    steps = r.run({"mode": "check"})  # no bench-command: the install alone runs
    install = next(s for s in steps if s.name == "Install refbench")
    assert install.outcome == "success", install.stdout[-3000:] + install.stderr[-3000:]
    venv = r.temp / "refbench-venv" / "bin"
    pip = subprocess.run([str(venv / "python"), "-m", "pip", "--version"], capture_output=True, text=True)
    assert pip.stdout.startswith("pip 26.3 "), pip.stdout  # requirements/pip.txt's, not the bundled one
    done = subprocess.run([str(venv / "refbench"), "comment", "--help"], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "usage" in done.stdout, done.stderr
