"""End to end: real git origin, real Go builds of real s5cmd code, real MinIO, real hyperfine."""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_bench

pytestmark = pytest.mark.slow


def bench_env(server) -> dict:
    return {k: v for k, v in server.env.items() if k != "S3_ENDPOINT_URL"}


def all_keys(client, bucket="testbucket") -> list[str]:
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return sorted(keys)


# ---- the shared quick run: v1.0.0 (s5cmd v2.2.2) vs PR 7 (s5cmd v2.3.0, +30% slow-down) ----------
def test_summary_has_the_seed_tables_commits_and_verdicts(s5_run, s5_origin):
    md = s5_run["summary"].read_text()
    assert "### Benchmark summary:" in md and "### Detailed summary:" in md
    assert "| Scenarios " in md and "| small files " in md and "| 256K " in md and "| 200 " in md
    for step in ("upload", "download", "remove"):
        assert f"{step} small files" in md
    assert "times faster than" in md  # hyperfine's phrase per step
    assert s5_origin.shas["old"][:12] in md and s5_origin.shas["slow"][:12] in md
    assert "v1.0.0" in md and "PR #7" in md
    assert "Mean [s]" in md and "Relative" in md


def test_known_slowdown_is_never_called_faster_or_unchanged(s5_run):
    # 20 runs a side is a smoke run: the strict "slower, with its size" check on a step with
    # enough runs is in test_verdicts.py
    results = json.loads(s5_run["results"].read_text())
    verdicts = {st["name"]: st["comparisons"][0] for st in results["scenarios"][0]["steps"]}
    assert set(verdicts) == {"upload", "download", "remove"}
    for name, c in verdicts.items():
        assert c["verdict"] in ("slower", "inconclusive"), (name, c)
        assert c["rel"] > 0.05 and c["contender"] == "PR #7" and c["baseline"] == "v1.0.0"
    assert sum(c["verdict"] == "slower" for c in verdicts.values()) >= 2, verdicts


def test_results_json_has_raw_runs_and_environment(s5_run, s5_origin):
    r = json.loads(s5_run["results"].read_text())
    assert r["schema"] == "refbench/results" and r["version"] == 2
    env = r["environment"]
    for key in ("host", "cpus", "os", "go", "hyperfine"):
        assert env[key], key
    assert env["hyperfine"].startswith("hyperfine")
    b = {x["label"]: x for x in r["builds"]}
    assert b["v1.0.0"]["sha"] == s5_origin.shas["old"] and b["PR #7"]["sha"] == s5_origin.shas["slow"]
    assert b["PR #7"]["kind"] == "pr" and b["v1.0.0"]["kind"] == "tag"
    for st in r["scenarios"][0]["steps"]:
        for label, bs in st["builds"].items():
            assert len(bs["times"]) == s5_run["runs"] and all(t > 0 for t in bs["times"])
            assert sorted(set(bs["rounds"])) == list(range(s5_run["rounds"]))  # interleaved in rounds
            assert bs["exit_codes"] == [0] * s5_run["runs"]
            assert bs["rss_kb"] and bs["rss_kb"] > 1000
    download = [st for st in r["scenarios"][0]["steps"] if st["name"] == "download"][0]
    assert {bs["check"] for bs in download["builds"].values()} == {"identical"}  # byte-for-byte
    assert r["timing"]["hyperfine_seconds"] > 0


def test_embedded_minio_stopped_and_temp_files_gone(s5_run):
    local = s5_run["dir"] / "local"
    assert local.is_dir() and list(local.iterdir()) == []
    data_dir = json.loads(s5_run["results"].read_text())["backend"]["data_dir"]
    assert data_dir and not os.path.exists(data_dir)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(local) not in ps and data_dir not in ps


def test_second_run_builds_nothing(s5_run, s5_origin, builds_dir, tmp_path):
    proc = run_bench("-s", "v1.0.0", "7", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     "--quick", "--only", "small files/remove", "-r", "2", "-w", "0", "--rounds", "1",
                     "--no-profile",  # what is checked is the cache: perf's runs took 12 s of a 15 s run here
                     "-o", str(tmp_path / "s.md"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "results.json").read_text())
    assert all(b["cached"] for b in r["builds"])
    assert r["timing"]["build_seconds"] < 1.0
    assert "building" not in proc.stderr


# ---- a user's bucket: unique prefix, removed at the end, nothing outside touched ----------------
def test_user_bucket_prefix_removed_and_outside_untouched(minio, s5_origin, builds_dir, tmp_path):
    server, client = minio
    for key in ("keep/me.txt", "refbench/other-run/x", "refbenchx"):
        client.put_object(Bucket="testbucket", Key=key, Body=b"mine")
    before = all_keys(client)
    proc = run_bench("-s", "v1.0.0", "v1.1.0", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     "-b", "testbucket", "--endpoint-url", server.endpoint, "-p", "refbench",
                     "--quick", "--only", "small files", "-r", "2", "-w", "0", "--rounds", "1",
                     "-o", str(tmp_path / "s.md"), env=bench_env(server), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "results.json").read_text())
    prefix = r["backend"]["prefix"]
    assert prefix.startswith("refbench/") and prefix != "refbench/other-run"
    assert all_keys(client) == before  # this run's objects gone, everyone else's intact


def test_versioned_user_bucket_restores_in_batches_and_removes_every_version(minio, s5_origin, builds_dir,
                                                                              tmp_path):
    server, client = minio
    client.create_bucket(Bucket="verbucket")
    client.put_bucket_versioning(Bucket="verbucket", VersioningConfiguration={"Status": "Enabled"})
    client.put_object(Bucket="verbucket", Key="keep/me.txt", Body=b"v1")
    client.put_object(Bucket="verbucket", Key="keep/me.txt", Body=b"v2")

    def versions():
        page = client.list_object_versions(Bucket="verbucket")
        return sorted((v["Key"], v["VersionId"]) for v in page.get("Versions", []) + page.get("DeleteMarkers", []))

    before = versions()
    proc = run_bench("-s", "v1.0.0", "v1.1.0", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     "-b", "verbucket", "--endpoint-url", server.endpoint, "--quick", "--only", "small files/remove",
                     "-r", "3", "-w", "1", "--rounds", "1", "-o", str(tmp_path / "s.md"), env=bench_env(server),
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "results.json").read_text())
    st = r["scenarios"][0]["steps"][0]
    assert all("refbench-s3restore" in b["prepare"] for b in st["builds"].values())
    assert all(len(b["times"]) == 3 for b in st["builds"].values())
    assert versions() == before  # every version and delete marker under the run's prefix is gone


def test_ctrl_c_cleans_up_prefix_and_local_files(minio, s5_origin, builds_dir, tmp_path):
    server, client = minio
    local = tmp_path / "local"
    local.mkdir()
    before = all_keys(client)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench.py"), "-s", "v1.0.0", "v1.1.0", "--repo", str(s5_origin.path),
         "--builds-dir", str(builds_dir), "-b", "testbucket", "--endpoint-url", server.endpoint,
         "--quick", "--only", "small files", "-r", "40", "-l", str(local), "-o", str(tmp_path / "s.md")],
        env={**os.environ, **bench_env(server)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, cwd=tmp_path,
        # a foreground run, as in a terminal: a suite started as a background job of a script
        # inherits SIGINT ignored (POSIX shells do that to `cmd &`), and Python then never
        # turns Ctrl-C into KeyboardInterrupt, so the run would go on, whatever refbench does
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(all_keys(client)) <= len(before) and proc.poll() is None:
        time.sleep(0.2)  # wait until the run has uploaded something under its prefix
    assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before the Ctrl-C: {proc.stderr.read()[-3000:]}"
    assert len(all_keys(client)) > len(before), "the run never started uploading"
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert all_keys(client) == before
    assert list(local.iterdir()) == []
    assert not (tmp_path / "results.json").exists()


# ---- errors: one clear line, exit 2, nothing left behind ----------------------------------------
def one_line_error(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("refbench: error:")]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("refs_,needle", [
    (["v1.0.0", "v9.9.9"], "ref not found: 'v9.9.9'"),
    (["v1.0.0", "99"], "PR #99 not found"),
    (["v1.0.0", "no-such-branch"], "ref not found: 'no-such-branch'"),
    (["v1.0.0", "abcdef1234567"], "ref not found: 'abcdef1234567'"),
    (["v1.0.0", "x;touch /tmp/pwned"], "not a valid ref"),
    (["v1.0.0"], "at least two refs"),
])
def test_bad_refs(s5_origin, builds_dir, tmp_path, refs_, needle):
    proc = run_bench("-s", *refs_, "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir), "--quick",
                     cwd=tmp_path)
    assert needle in one_line_error(proc)
    assert not (tmp_path / "summary.md").exists()


def test_failed_build_prints_log_tail_and_leaves_nothing(s5_origin, builds_dir, tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    proc = run_bench("-s", "v1.0.0", "broken", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     "--quick", "-l", str(local), cwd=tmp_path)
    line = one_line_error(proc)
    assert "build of broken" in line and "failed" in line
    assert "syntax error" in proc.stderr or "expected" in proc.stderr  # the compiler's words, from the log tail
    assert list(local.iterdir()) == []
    assert not (builds_dir / "s5cmd" / s5_origin.shas["broken"] / "build.json").exists()


def test_failing_command_aborts_cleanly(minio, s5_origin, builds_dir, tmp_path):
    server, client = minio
    before = all_keys(client)
    proc = run_bench("-s", "v1.0.0", "v1.1.0", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     "-b", "testbucket", "--endpoint-url", server.endpoint, "--quick", "--only", "small files",
                     "-sf", "--no-such-flag", "-r", "2", cwd=tmp_path, env=bench_env(server))
    assert "failed" in one_line_error(proc)
    assert all_keys(client) == before


@pytest.mark.parametrize("args,needle", [
    (["-b", "nosuchbucket"], "bucket 'nosuchbucket' is not usable"),
    (["-b", "Bad_Bucket"], "not a valid bucket name"),
    (["--only", "nope"], "--only 'nope' matches no scenario or step"),
    (["-l", "/nonexistent/dir"], "is not a directory"),
    (["-hf", "--runs 3"], "hyperfine flag --runs is managed by refbench"),
    (["-t", "nope"], "unknown target 'nope'"),
    (["-r", "0"], "expected a number >= 1"),
    (["--scenarios", "/nonexistent.toml"], "scenarios file not found"),
])
def test_bad_input(minio, s5_origin, builds_dir, tmp_path, args, needle):
    server, _ = minio
    proc = run_bench("-s", "v1.0.0", "v1.1.0", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     "--endpoint-url", server.endpoint, "--quick", *args, cwd=tmp_path, env=bench_env(server))
    assert needle in one_line_error(proc)


# ---- refs resolve as the user means them ---------------------------------------------------------
def test_dry_run_resolves_every_kind_of_ref(s5_origin, builds_dir, tmp_path):
    o = s5_origin
    proc = run_bench("-s", "latest_release", "master", "7", o.shas["new"][:8], "v1.0.1", "HEAD", "broken",
                     "--repo", str(o.path), "--builds-dir", str(builds_dir), "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert f"latest_release (v1.1.0): {o.shas['new']}" in err  # not v1.0.1, tagged later; not the rc
    assert f"master@{o.shas['new'][:7]}: {o.shas['new']}" in err
    assert f"PR #7: {o.shas['slow']}" in err
    assert f"v1.0.1: {o.shas['patch']}" in err
    assert f"HEAD@{o.shas['new'][:7]}: {o.shas['new']}" in err
    assert f"broken@{o.shas['broken'][:7]}: {o.shas['broken']}" in err
    assert "step upload [network loopback]:" in proc.stdout
    assert "would build" in proc.stdout or "cached" in proc.stdout
    # the commands as they would run, rendered for the first build: its binary, the fixture, the remote
    first = builds_dir.resolve() / "s5cmd" / o.shas["new"] / "s5cmd"
    assert "{{" not in proc.stdout and "{%" not in proc.stdout
    assert (f"  step upload [network loopback]: {first}  cp '{builds_dir.resolve()}/fixtures/sparse-1Mx10000/*' "
            "'s3://refbench/refbench/<run-id>/small-files/up/'") in proc.stdout, proc.stdout
    assert "    prepare: rm -rf '<workdir>/small-files/dest-download'" in proc.stdout


def test_module_source_resolves_through_the_proxy(builds_dir, tmp_path):
    proc = run_bench("-s", "v2.2.2", "v2.3.0", "--source", "module", "--builds-dir", str(builds_dir),
                     "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "48f7e59e2d02954e218d2ddb947566d57e495fd8" in proc.stderr  # v2.2.2's commit (module Origin)
    proc = run_bench("-s", "v2.2.2", "478", "--source", "module", "--builds-dir", str(builds_dir), "--dry-run",
                     cwd=tmp_path)
    assert "use --source git" in one_line_error(proc)


def test_a_shallow_origin_works(s5_origin, builds_dir, tmp_path):
    """CI checkouts are shallow clones; their tags, branches and PR refs must still resolve."""
    shallow = tmp_path / "shallow.git"
    subprocess.run(["git", "clone", "-q", "--bare", "--depth", "1", "--no-single-branch",
                    f"file://{s5_origin.path}", str(shallow)], check=True)
    subprocess.run(["git", "-C", str(shallow), "fetch", "-q", "--depth", "1", "origin",
                    "+refs/pull/7/head:refs/pull/7/head", "+refs/tags/*:refs/tags/*"], check=True)
    proc = run_bench("-s", "v1.0.0", "7", "--repo", str(shallow), "--builds-dir", str(builds_dir), "--dry-run",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"v1.0.0: {s5_origin.shas['old']}" in proc.stderr and f"PR #7: {s5_origin.shas['slow']}" in proc.stderr


def test_killed_outright_the_embedded_server_dies_and_its_data_is_swept(s5_origin, builds_dir, tmp_path):
    """SIGKILL (a CI timeout, the OOM killer) allows no cleanup: the embedded MinIO must not outlive
    refbench, and the next run removes the data dir the killed one left."""
    from refbench.backends import MinioServer

    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench.py"), "-s", "v1.0.0", "v1.1.0", "--repo", str(s5_origin.path),
         "--builds-dir", str(builds_dir), "--quick", "--only", "small files", "-r", "40",
         "-o", str(tmp_path / "s.md")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    shm = Path("/dev/shm")
    mine = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and mine is None and proc.poll() is None:  # a run that died: at once
        for d in shm.glob("refbench-minio-*"):
            try:
                if (d / "owner").read_text() == str(proc.pid):
                    mine = d
            except OSError:
                pass
        time.sleep(0.2)
    assert mine is not None, f"the run never started its embedded MinIO in /dev/shm (exit {proc.poll()})"
    time.sleep(2)
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and str(mine) in subprocess.run(["ps", "-eo", "args"], capture_output=True,
                                                                      text=True).stdout:
        time.sleep(0.2)
    assert str(mine) not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert mine.exists()  # nothing could clean up after SIGKILL ...
    # ... until the next run starts a server. Its sweep is pointed at a root this test owns, with
    # the killed run's dir moved in (a rename, the same file system): a sweep of /dev/shm itself
    # would remove every dead refbench-minio-* on the machine, other users' and other tests' too.
    # What its server kept beside the dir (DIR.log, DIR.probes-N, DIR.probes-N.fifo) moves with it:
    # the log left in /dev/shm was one stray file there per suite run (ten in a day of trials)
    root = Path(tempfile.mkdtemp(prefix="refbench-test-shm-", dir=shm))
    try:
        left = root / mine.name
        beside = [p.name for p in shm.glob(f"{glob.escape(mine.name)}.*")]
        assert f"{mine.name}.log" in beside, beside
        for name in beside:
            (shm / name).rename(root / name)
        mine.rename(left)
        server = MinioServer(tmp_path, data_parent=root)
        try:
            assert not left.exists() and not [n for n in beside if (root / n).exists()]  # the dead run's, all
        finally:
            server.stop()
        assert list(root.iterdir()) == []  # the new server's own dir and log went with it
    finally:
        shutil.rmtree(root, ignore_errors=True)
