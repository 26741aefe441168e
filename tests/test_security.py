"""Issue 20: one test per hole a PR bot on a public repository (or a killed run) could use.

Each test is named for the hole and was written to fail on the code before the fix."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import need, run_bench, run_cli
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
def test_clean_refuses_an_unmarked_directory_and_leaves_it_intact(tmp_path):
    home = tmp_path / "home"
    (home / "projects").mkdir(parents=True)
    (home / "projects" / "thesis.tex").write_text("years of work")
    for how in ((), ("--fixtures-only",)):
        proc = run_cli("clean", *how, env={"REFBENCH_BUILDS_DIR": str(home)})
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "not made by refbench" in proc.stderr
        assert (home / "projects" / "thesis.tex").read_text() == "years of work"
    proc = run_cli("clean", "--builds-dir", str(home))
    assert proc.returncode == 2 and (home / "projects" / "thesis.tex").exists()


def test_clean_removes_a_cache_dir_refbench_made(tmp_path):
    from refbench import builds, config, paths
    made = tmp_path / "cache" / "builds"
    target = config.load_config(paths.bundled_scenarios()).targets["s5cmd"]
    builds.Builder(target, made)  # a builder marks the directory it creates
    (made / "fixtures").mkdir()
    proc = run_cli("clean", "--fixtures-only", "--builds-dir", str(made))
    assert proc.returncode == 0, proc.stderr
    assert made.is_dir() and not (made / "fixtures").exists()
    proc = run_cli("clean", "--builds-dir", str(made))
    assert proc.returncode == 0, proc.stderr
    assert not made.exists()


# ---- 9: fixtures are made once, whole, however many runs start at once ------------------------
def test_fixture_race_two_cold_cache_runs_at_once_both_succeed(tmp_path):
    import subprocess
    import sys
    cache = tmp_path / "cache"
    script = ("import sys; from refbench import fixtures as fx; from refbench.config import FixtureSpec;"
              "f = fx.ensure(FixtureSpec(kind='random', size=24_000_000, count=4, seed=3), sys.argv[1]);"
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


# ---- 1: the artifact of a PR's run cannot choose where the bot comments, or what it links -----
HEAD_SHA = "a" * 40


def _pull(number, sha=HEAD_SHA, repo="fork/tool", ref="feature"):
    return {"number": number, "head": {"sha": sha, "ref": ref, "repo": {"full_name": repo}}}


def test_artifact_poisoning_a_pr_number_that_is_not_the_runs_pr_is_refused(gh, results_file):
    gh.pulls = [_pull(7), _pull(8, sha="b" * 40)]
    head = ("--head-sha", HEAD_SHA, "--head-repo", "fork/tool", "--head-branch", "feature")
    # the artifact says PR 8 (an unrelated PR): nothing is posted or edited
    proc = post_to(gh, results_file, "8", *head)
    assert proc.returncode == 2 and "refusing to post" in proc.stderr and "#7" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not [r for r in gh.requests if r["method"] != "GET"]
    # a head commit no PR has: refused as well
    proc = post_to(gh, results_file, "7", "--head-sha", "c" * 40, "--head-repo", "fork/tool", "--head-branch", "feature")
    assert proc.returncode == 2 and "no pull request" in proc.stderr, proc.stderr
    # the true number goes through
    proc = post_to(gh, results_file, "7", *head)
    assert proc.returncode == 0 and "created the comment on acme/tool#7" in proc.stderr, proc.stderr


def post_to(gh, results_file, pr, *extra):
    from test_github import bench
    return bench("comment", "--repo", "acme/tool", "--pr", pr, str(results_file), *extra,
                 env={"GITHUB_API_URL": gh.url, "GITHUB_TOKEN": TOKEN})


def test_artifact_poisoning_mentions_and_links_from_results_are_neutralised(results_file):
    from refbench import results as rs
    from refbench.github import comment_body, neutralise
    from refbench.render.markdown import render_markdown
    doc = json.loads(results_file.read_text())
    doc["builds"][1]["label"] = "@acme/maintainers see https://evil.example/x [here](https://evil.example) #1"
    doc["scenarios"][0]["name"] = "<a href='https://evil.example'>x</a> www.evil.example @everyone"
    results_file.write_text(json.dumps(doc))
    body = comment_body(render_markdown(rs.load(results_file), "github"), link="https://github.com/acme/tool/actions/runs/1")
    import re
    assert not re.search(r"@[A-Za-z0-9]", body)
    assert "https://evil" not in body and "](https://evil" not in body and "www.evil" not in body
    assert "<a " not in body and "#1" not in body
    # the run link refbench adds itself stays a link; the text reads the same without zero-width spaces
    assert body.rstrip().endswith("(https://github.com/acme/tool/actions/runs/1)")
    assert neutralise("@bob [x](y)").replace("\u200b", "") == "@bob [x](y)"
    assert neutralise("ordinary text: 5% slower, a|b") == "ordinary text: 5% slower, a|b"


# ---- 2: /bench cannot poison caches, and benchmarks the commit that was accepted ----------------
def _action_steps() -> list[str]:
    text = (ROOT / "action.yml").read_text()
    return text.split("\n  steps:\n", 1)[1].split("\n    - ")


def test_cache_poisoning_jobs_that_run_pr_code_only_restore_caches():
    trusted = "contains(fromJSON('[\"push\", \"schedule\", \"workflow_dispatch\"]'), github.event_name)"
    caches = [s for s in _action_steps() if "actions/cache" in s]
    assert len(caches) == 4, caches
    for step in caches:
        saves = "uses: actions/cache@" in step
        restore_only = "uses: actions/cache/restore@" in step
        assert saves or restore_only, step
        if saves:  # a cache that saves at the end of the job: only a trusted job (issue 35: merged refs only)
            assert "&& steps.trust.outputs.trusted == 'true'" in step, step
        else:
            assert "&& steps.trust.outputs.trusted != 'true'" in step, step
    gate = next(s for s in _action_steps() if "id: trust" in s)
    assert f"TRUSTED_EVENT: ${{{{ {trusted} }}}}" in gate and "key-gate.sh" in gate, gate
    command = (ROOT / ".github" / "workflows" / "bench-command.yml").read_text()
    # the head the comment names is checked before any of the PR's code runs (a job of its own, and
    # the run again), and that commit is what gets built: never pull/N/head as it is later
    assert "mode: check" in command and "needs: check" in command and "refs:" not in command
    assert 'refs=("$CHECKED_BASE" "$CHECKED_HEAD")' in (ROOT / "action.yml").read_text()
    assert "head-sha: ${{ needs.check.outputs.head-sha }}" in command
    comment = (ROOT / ".github" / "workflows" / "bench-comment.yml").read_text()
    assert '"refbench /bench"' not in comment  # /bench results never go through the artifact's number


def test_cache_poisoning_a_pr_that_moved_after_bench_was_accepted_gets_no_comment(gh, results_file):
    gh.pulls = [_pull(7, sha="d" * 40)]  # pushed to after the command was accepted at aaaa…
    proc = post_to(gh, results_file, "7", "--pinned-sha", HEAD_SHA)
    assert proc.returncode == 2 and "moved from aaaaaaaaaaaa" in proc.stderr, proc.stderr
    assert not [r for r in gh.requests if r["method"] != "GET"]
    gh.pulls = [_pull(7)]
    proc = post_to(gh, results_file, "7", "--pinned-sha", HEAD_SHA)
    assert proc.returncode == 0, proc.stderr


# ---- 6: secrets do not reach the benchmarked code -------------------------------------------
SECRETS = {"GITHUB_TOKEN": "ghs_secret", "AWS_SECRET_ACCESS_KEY": "aws-secret", "AWS_ACCESS_KEY_ID": "AKIASECRET",
           "REFBENCH_HISTORY_URL": "postgresql://u:hunter2@db.invalid/h", "ACTIONS_RUNTIME_TOKEN": "runtime-token-secret"}


def _secrets_in(text: str) -> list[str]:
    return [k for k, v in SECRETS.items() if v in text]


def test_secrets_the_benchmarked_commands_environment_holds_no_token(tmp_path, monkeypatch):
    import os
    import shutil
    from conftest import need
    from test_runner import run
    if not shutil.which("hyperfine"):
        need("hyperfine", "the real hyperfine runs the benchmarked command")
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    target = tmp_path / "fake-1.00"  # the "binary" every build runs: writes down what it was given
    target.write_text('#!/bin/sh\nenv > "$(dirname "$0")/env-$$.txt"\n')
    target.chmod(0o755)
    from refbench.executor import HyperfineExecutor
    (tmp_path / "work").mkdir(exist_ok=True)
    run(tmp_path, [1.0, 1.0], runs=2, rounds=1, setup="env > {{ work }}/setup-env.txt",
        executor=HyperfineExecutor.probe(tmp_path / "work"))  # the real hyperfine, not the mock
    seen = [p.read_text() for p in tmp_path.glob("env-*.txt")]
    seen += [p.read_text() for p in tmp_path.rglob("setup-env.txt")]
    assert len(seen) >= 3, "the command and the setup ran"
    for text in seen:
        assert not _secrets_in(text), text
        assert f"PATH={os.environ['PATH']}" in text  # what the command needs still gets through


def test_secrets_minio_and_kubo_do_not_inherit_them(tmp_path, monkeypatch):
    import shutil
    from conftest import need
    from refbench.backends.minio import MinioServer
    from refbench import paths, tools
    if not tools.find_tool("minio"):
        need("minio", "the embedded S3 server")
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    server = MinioServer(tmp_path).start()
    try:
        environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes().decode(errors="replace")
    finally:
        server.stop()
    assert not _secrets_in(environ), environ
    assert "MINIO_ROOT_USER=" in environ
    ipfs = shutil.which("ipfs")
    if ipfs:  # kubo is built per test run; its repo commands go through the same allow-list
        from refbench.backends import ipfs as ip
        text = Path(ip.__file__).read_text()
        assert "child_env(extra=self.pass_env)" in text and "os.environ, **self.env" not in text


def test_secrets_verbose_raises_only_refbenchs_logger_not_botocores(tmp_path):
    import subprocess
    import sys
    script = ("import logging\nfrom refbench import cli\ntry:\n    cli.main(['clean', '--remote', '-v'])\n"
              "except SystemExit:\n    pass\n"
              "print(logging.getLogger('botocore.endpoint').isEnabledFor(logging.DEBUG),"
              " logging.getLogger('refbench.runner').isEnabledFor(logging.DEBUG))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.stdout.split() == ["False", "True"], proc.stdout + proc.stderr


def test_secrets_an_unsupported_history_url_scheme_does_not_print_its_password():
    from refbench.errors import RefbenchError
    from refbench.history import History
    with pytest.raises(RefbenchError) as e:
        History("mysql://bench:hunter2@db.invalid:3306/h")
    assert "hunter2" not in str(e.value) and "mysql://bench:***@db.invalid:3306/h" in str(e.value)


def test_secrets_nightly_gives_the_history_url_to_one_step_and_keeps_no_token_in_git_config():
    text = (ROOT / ".github" / "workflows" / "nightly.yml").read_text()
    # the one step's env (the step writing it to a 0600 file), and a yes/no for each of the two jobs
    assert text.count("secrets.REFBENCH_HISTORY_URL") == 3 and text.count("secrets.REFBENCH_HISTORY_URL != ''") == 2
    writer = text.split("- name: Write the history URL for the nightly step")[1].split("- name:")[0]
    assert "URL: ${{ secrets.REFBENCH_HISTORY_URL }}" in writer and "umask 077" in writer
    nightly_step = text.split("- name: Nightly comparison")[1].split("- name:")[0]
    # the nightly step, which starts the benchmarked code, gets the file, never the URL in its environment
    assert "REFBENCH_HISTORY_URL_FILE: ${{ steps.url.outputs.file }}" in nightly_step
    assert "secrets." not in nightly_step and "REFBENCH_HISTORY_URL:" not in text
    assert "${REFBENCH_HISTORY_URL" not in text and "--history \"$REFBENCH" not in text  # never on a command line
    checkouts = text.split("uses: actions/checkout@v4")[1:]
    assert len(checkouts) == 3 and all("persist-credentials: false" in c.split("- ")[0] for c in checkouts)


_NIGHTLY_CHILD = (
    "import hashlib, subprocess, sys\n"
    "from refbench.commands import nightly\n"
    "args = nightly.parser().parse_args([])\n"
    "print('HISTORY', hashlib.sha256(args.history.encode()).hexdigest())\n"
    "out = subprocess.run(['sh', '-c', 'cat /proc/$PPID/environ /proc/$PPID/cmdline'], capture_output=True, env={})\n"
    "sys.stdout.write(out.stdout.decode(errors='replace'))\n")


def test_secrets_a_child_of_the_nightly_cannot_read_the_history_url_from_its_environ(tmp_path):
    """Review35d LOW 10: a child cleaned of the URL could still read it in its parent's
    /proc/PPID/environ. nightly.yml gives it as a 0600 file (REFBENCH_HISTORY_URL_FILE) instead."""
    import hashlib
    import os
    import subprocess
    import sys
    url = "postgresql://u:s3cret-pw@db.invalid:5432/refbench"
    f = tmp_path / "url"
    f.write_text(url + "\n")
    f.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFBENCH_")}
    env.update(PYTHONPATH=str(ROOT), REFBENCH_HISTORY_URL_FILE=str(f))
    proc = subprocess.run([sys.executable, "-c", _NIGHTLY_CHILD], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"HISTORY {hashlib.sha256(url.encode()).hexdigest()}" in proc.stdout  # the nightly has it
    assert "REFBENCH_HISTORY_URL_FILE=" in proc.stdout and "s3cret-pw" not in proc.stdout  # its children do not
    f.chmod(0o644)  # readable by others: refused
    loose = subprocess.run([sys.executable, "-c", _NIGHTLY_CHILD], capture_output=True, text=True, env=env)
    assert loose.returncode != 0 and "0600" in loose.stderr


def test_secrets_only_a_users_own_bucket_passes_the_users_aws_credentials(monkeypatch):
    from refbench.backends.process import child_env
    from refbench.backends.s3 import S3Backend
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    user, embedded = S3Backend.planned("mybucket", "refbench", None), S3Backend.planned(None, "refbench", None)
    assert child_env(user.pass_env)["AWS_SECRET_ACCESS_KEY"] == "aws-secret"  # -b: the user's own credentials
    assert "AWS_SECRET_ACCESS_KEY" not in child_env(embedded.pass_env)
    assert "GITHUB_TOKEN" not in child_env(user.pass_env) and "REFBENCH_HISTORY_URL" not in child_env(user.pass_env)


def test_secrets_pass_env_is_the_runs_not_read_again_below_the_command_line(monkeypatch):
    """REFBENCH_PASS_ENV is read once, into MachineSettings.pass_env; the allow-list a server or a
    command gets lets through the names it is given, never what the variable says later."""
    from refbench.backends.process import child_env
    monkeypatch.setenv("REFBENCH_TEST_SECRET", "no")
    monkeypatch.setenv("REFBENCH_TEST_PASSED", "yes")
    monkeypatch.setenv("REFBENCH_PASS_ENV", "REFBENCH_TEST_SECRET")
    assert "REFBENCH_TEST_SECRET" not in child_env() and "REFBENCH_TEST_PASSED" not in child_env()
    env = child_env(extra=frozenset({"REFBENCH_TEST_PASSED"}))
    assert env["REFBENCH_TEST_PASSED"] == "yes" and "REFBENCH_TEST_SECRET" not in env


# ---- 7 and 8: kill -9 of refbench leaves nothing running, and its objects go at once -------------
def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None



@pytest.mark.slow
def test_killed_refbench_leaves_no_hyperfine_or_target_and_its_objects_are_swept_at_once(
        minio, s5_origin, builds_dir, tmp_path):
    import os
    import subprocess
    import sys
    import time
    from test_longrun import descendants

    server, client = minio
    env = {**os.environ, **{k: v for k, v in server.env.items() if k != "S3_ENDPOINT_URL"}}
    env.pop("REFBENCH_LEASE_TTL", None)  # the default 10 min: the sweep must not wait for it

    def keys(prefix):
        out = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket="testbucket", Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents", [])]
        return out

    args = ["-s", "v1.0.0", "v1.0.0", "--measure-identical", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
            "-b", "testbucket", "--endpoint-url", server.endpoint, "-p", "sigkill", "--quick"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench.py"), *args, "--only", "small files", "-r", "40",
                             "-o", str(tmp_path / "killed.md")], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tree: list[int] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:  # until hyperfine is measuring the target
        tree = descendants(proc.pid)
        names = {_comm(p) for p in tree}
        if "hyperfine" in names and "s5cmd" in names and len(keys("sigkill/")) > 20:
            break
        time.sleep(0.05)
    assert "hyperfine" in {_comm(p) for p in tree}, f"the run never got to hyperfine (exit {proc.poll()})"
    proc.kill()  # refbench alone: what it started must go by itself
    proc.wait(timeout=30)
    deadline = time.monotonic() + 5
    alive = [p for p in tree if p != proc.pid and _comm(p) is not None]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in tree if p != proc.pid and _comm(p) is not None]
    assert not alive, [(p, _comm(p)) for p in alive]  # no hyperfine, no s5cmd, no sh left running
    left = keys("sigkill/")
    assert any(k.endswith("/.refbench-lease.json") for k in left), left[:5]
    dead = left[0].split("/")[1]
    # the lease has 10 minutes to go, but its process is provably gone: clean --remote would remove
    # it now, and the next run on this machine does
    dry = run_bench("clean", "--remote", "--dry-run", "-b", "testbucket", "-p", "sigkill", "--endpoint-url",
                    server.endpoint, env=env, cwd=tmp_path, timeout=120)
    assert dry.returncode == 0, dry.stderr
    assert f"sigkill/{dead}/: " in dry.stdout and "killed on this host" in dry.stdout, dry.stdout
    assert "would remove 1 prefixes" in dry.stdout, dry.stdout
    nxt = run_bench(*args, "--only", "small files/remove", "-r", "1", "-w", "0", "--rounds", "1", "--no-rss",
                    "-o", str(tmp_path / "next.md"), env=env, cwd=tmp_path, timeout=600)
    assert nxt.returncode == 0, nxt.stderr
    assert f"lease sweep: sigkill/{dead}/: " in nxt.stderr and "killed on this host" in nxt.stderr, nxt.stderr
    assert keys("sigkill/") == []  # the dead run's objects and the next run's own are gone


def test_killed_run_lease_is_swept_early_only_when_this_host_proves_its_process_gone():
    import os
    import socket
    import subprocess
    from refbench import lease
    gone = subprocess.Popen(["true"])
    gone.wait()
    here = {"host": socket.gethostname(), **lease.host_identity()}
    dead = {**here, "pid": gone.pid, "pid_start": "1"}
    assert lease.owner_gone(dead)
    parent = os.getppid()
    assert not lease.owner_gone({**here, "pid": parent, "pid_start": lease.process_start(parent)})  # alive
    assert lease.owner_gone({**here, "pid": parent, "pid_start": "0"})  # its pid was reused by another process
    assert not lease.owner_gone({**dead, "host": "another-runner"})  # other hosts' leases wait for expiry
    assert not lease.owner_gone({**dead, "boot_id": "a-boot-before-a-reboot"})
    assert not lease.owner_gone({**dead, "pid_ns": "pid:[1]"})  # a container sharing the host name
    assert not lease.owner_gone({**dead, "pid_start": None})  # an older lease: no start time, no proof


# ---- 10: smaller holes -----------------------------------------------------------------------
@pytest.mark.parametrize("text", ["master\n", "v1.0.0\n", "7\n", "abc1234\n"])
def test_validators_refuse_a_trailing_newline(text):
    from refbench import refs
    from refbench.errors import RefError, RefbenchError
    from refbench.github import REPO_NAME, parse_bench_command
    from refbench.pipeline import valid_bucket
    with pytest.raises(RefError):
        refs.classify(text)
    assert not REPO_NAME.fullmatch("acme/tool\n") and not valid_bucket("bucket\n")
    for body in ("/bench --only 'small files\n'", "/bench --budget '10m\n'", "/bench --threshold '5%\n'"):
        with pytest.raises(RefbenchError):
            parse_bench_command(body)


def test_download_dir_comes_from_the_step_slug_not_its_raw_name(tmp_path):
    from refbench.config import FixtureSpec, ScenarioSpec, StepSpec
    from refbench.fixtures import FixtureFiles
    from refbench.runner import template_values
    from test_runner import builds
    from fakes.backend import FakeBackend
    spec = FixtureSpec(kind="sparse", size=1, count=1)
    step = StepSpec("x/../../../etc", "{{ bin }}")
    sc = ScenarioSpec("s", "t", spec, spec, (step,))
    work = tmp_path / "work"
    v = template_values(sc, FixtureFiles(spec, tmp_path, 1, 1, 0), 0, builds(tmp_path, 1.0)[0], step, work, [],
                        FakeBackend(tmp_path / "remote"))
    dest = Path(v["dest"])
    assert dest.parent == work / sc.slug and ".." not in dest.parts and "/" not in dest.name


def test_the_token_is_not_sent_along_a_redirect_to_another_host(results_file):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from test_github import bench
    seen = []

    class Elsewhere(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            seen.append(dict(self.headers))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"[]")

    other = ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)

    class Api(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{other.server_address[1]}{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

    api = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    for srv in (other, api):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        proc = bench("comment", "--repo", "acme/tool", "--pr", "7", str(results_file),
                     env={"GITHUB_API_URL": f"http://127.0.0.1:{api.server_address[1]}", "GITHUB_TOKEN": TOKEN})
    finally:
        for srv in (other, api):
            srv.shutdown()
            srv.server_close()
    assert proc.returncode == 2 and "redirected" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not seen  # the other host never got the token (nor any request)


def test_build_defaults_to_the_usual_builds_dir_not_one_inside_the_package(monkeypatch, tmp_path):
    from refbench import paths
    from refbench.commands import build
    monkeypatch.delenv("REFBENCH_BUILDS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with paths.installed(paths.Layout.from_environ(os.environ, checkout=None)):  # as installed from a wheel
        default = build.parser().parse_args(["-s", "v1", "--out", str(tmp_path)]).builds_dir
    assert default == str(tmp_path / "xdg" / "refbench" / "builds")
    assert not default.startswith(str(paths.PACKAGE_DIR))


# ---- issue 27: a cache that cannot vouch for itself ------------------------------------------------
def _planted_tool(monkeypatch, tmp_path, name: str) -> Path:
    """A cache restored with `name` swapped: refbench's tools directory holds a file of someone else's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("REFBENCH_TOOLS_BIN", str(tmp_path / "xdg" / "refbench" / "bin"))
    monkeypatch.delenv("REFBENCH_UNPINNED_TOOLS", raising=False)
    planted = tmp_path / "xdg" / "refbench" / "bin" / name
    planted.parent.mkdir(parents=True)
    planted.write_text("#!/bin/sh\necho planted > /dev/stderr\n")
    planted.chmod(0o755)
    return planted


def test_cache_poisoning_a_swapped_minio_binary_is_refused(monkeypatch, tmp_path):
    from refbench import paths, pins, tools
    from refbench.backends import MinioServer
    from refbench.errors import RefbenchError
    pinned = pins.cached_path("minio")  # this machine's, before the test's cache takes its place
    planted = _planted_tool(monkeypatch, tmp_path, "minio")
    with pytest.raises(RefbenchError, match=r"refusing .*/bin/minio: its SHA-256 is .*pins.py.*tampered.*refbench setup"):
        tools.find_tool("minio")
    with pytest.raises(RefbenchError, match="refusing"):  # the embedded server never starts it
        MinioServer(tmp_path / "data")
    # the pinned bytes pass: the same file holding the pinned build (`refbench setup` made it)
    if not pinned.is_file():
        need("minio", "the pinned build, to put in the planted one's place (refbench setup)")
    planted.unlink()
    try:
        os.link(pinned, planted)  # the same bytes, without copying 150 MB
    except OSError:
        shutil.copyfile(pinned, planted)
    planted.chmod(0o755)
    assert tools.find_tool("minio") == str(planted)


def test_cache_poisoning_a_tool_with_no_pin_here_is_refused_unless_allowed(monkeypatch, tmp_path):
    from refbench import paths, pins, tools
    from refbench.errors import RefbenchError
    planted = _planted_tool(monkeypatch, tmp_path, "refbench-s3restore")
    # a version of the tool that has no pin on this platform, as the machine's settings name it
    # (paths.Layout.tool_versions: what MINIO_VERSION and TOXIPROXY_VERSION set for theirs)
    def unpinned_version():
        return dataclasses.replace(paths.Layout.from_environ(os.environ),
                                   tool_versions=(("refbench-s3restore", "0000unpinned0000"),))
    with paths.installed(unpinned_version):
        with pytest.raises(RefbenchError, match=f"no hash is pinned for refbench-s3restore 0000unpinned0000 .* "
                                                f"on {pins.current_platform()}"):
            tools.find_tool("refbench-s3restore")
        monkeypatch.setenv("REFBENCH_UNPINNED_TOOLS", "1")
        assert tools.find_tool("refbench-s3restore") == str(planted)


def test_every_tool_refbench_builds_is_pinned_for_the_platforms_ci_runs_on():
    """A version bump (or a change to the shipped s3restore source) without its pins would make
    every run refuse the tool: caught here, naming what to pin."""
    from refbench import pins
    missing = [(t, p) for t in pins.PINNED_TOOLS for p in ("linux/amd64", "linux/arm64") if not pins.pin_for(t, p)]
    assert not missing, f"pin these in refbench/pins.py: {missing}"


@pytest.mark.slow
def test_s3restore_honours_session_tokens_and_profiles(minio, tmp_path):
    import os
    import shutil
    import subprocess
    import boto3
    from conftest import need
    from refbench import paths
    if not shutil.which("go"):
        need("go", "builds refbench-s3restore from its bundled source")
    server, client = minio
    binary = tmp_path / "s3restore"
    with paths.tool_source("s3restore") as src:
        built = subprocess.run(["go", "build", "-o", str(binary), "."], cwd=src, capture_output=True, text=True,
                               timeout=600)
    assert built.returncode == 0, built.stderr
    bucket = "restoretest"
    client.create_bucket(Bucket=bucket)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})

    def delete_all():
        for i in range(3):
            client.put_object(Bucket=bucket, Key=f"area/{i}", Body=b"x")
            client.delete_object(Bucket=bucket, Key=f"area/{i}")
        assert client.list_objects_v2(Bucket=bucket, Prefix="area/").get("KeyCount") == 0

    def restore(env):
        base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "S3_ENDPOINT_URL": server.endpoint}
        proc = subprocess.run([str(binary), f"s3://{bucket}/area/"], env={**base, **env}, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert client.list_objects_v2(Bucket=bucket, Prefix="area/").get("KeyCount") == 3

    sts = boto3.client("sts", endpoint_url=server.endpoint, region_name="us-east-1",
                       aws_access_key_id=server.env["AWS_ACCESS_KEY_ID"],
                       aws_secret_access_key=server.env["AWS_SECRET_ACCESS_KEY"])
    temp = sts.assume_role(RoleArn="arn:xxx:xxx:xxx:xxxx", RoleSessionName="refbench")["Credentials"]
    delete_all()
    restore({"AWS_ACCESS_KEY_ID": temp["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": temp["SecretAccessKey"],
             "AWS_SESSION_TOKEN": temp["SessionToken"]})
    creds = tmp_path / "credentials"
    creds.write_text(f"[bench]\naws_access_key_id = {server.env['AWS_ACCESS_KEY_ID']}\n"
                     f"aws_secret_access_key = {server.env['AWS_SECRET_ACCESS_KEY']}\n")
    delete_all()
    restore({"AWS_PROFILE": "bench", "AWS_SHARED_CREDENTIALS_FILE": str(creds)})
