"""Leases: a dead run's prefix is found and removed; a live run's, and anything outside -p, never.

Against a real MinIO on loopback (the session's `minio` fixture); no Go builds needed. Time is
simulated (SimClock): a lease expires because the test moves the clock past its ttl, never
because the test slept through it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

from conftest import ROOT, run_cli

from refbench import lease
from refbench.backends import S3Backend
from refbench.errors import RefbenchError

DEAD = "lt/20260101-000000-deadbeef"
LIVE = "lt/20260101-000001-0a0a0a0a"


class SimClock(lease.Clock):
    """Simulated time: this host's clock and the server's (its Date) both run `offset` seconds
    ahead of the real ones; advance() moves them, and wakes a refresher whose wait has passed."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.moved = threading.Condition()

    def now(self) -> float:
        return time.time() + self.offset

    def server_now(self, client, bucket: str) -> float:
        return lease.server_now(client, bucket) + self.offset

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        until = self.offset + seconds
        with self.moved:
            while self.offset < until and not stop.is_set():
                self.moved.wait(0.05)  # stop is an Event of its own: look at it now and then
        return stop.is_set()

    def advance(self, seconds: float) -> None:
        with self.moved:
            self.offset += seconds
            self.moved.notify_all()


@pytest.fixture
def clock() -> SimClock:
    """The simulated clock, given to what the test runs: clean's command (clean_cli), S3Backend.open."""
    return SimClock()


def clean_cli(clock: SimClock, *args: str, env: dict):
    """`refbench clean ARGS` as run_cli runs it, with `clock` as clean's clock (clean.main's)."""
    from refbench.commands import clean
    return run_cli("clean", *args, env=env, dispatch=lambda name, argv: clean.main(argv, clock=clock))


def until(predicate, what: str, timeout: float = 10.0) -> None:
    """Wait for another thread to act on the simulated clock (a bounded poll, not a timed sleep)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def keys(client, bucket) -> list[str]:
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        out += [o["Key"] for o in page.get("Contents", [])]
    return sorted(out)


def versions(client, bucket) -> list[str]:
    page = client.list_object_versions(Bucket=bucket)
    return sorted(v["Key"] for v in page.get("Versions", []) + page.get("DeleteMarkers", []))


def bench_env(server) -> dict:
    return {k: v for k, v in server.env.items() if k != "S3_ENDPOINT_URL"}


def hold_lease(server, bucket: str, prefix: str, ttl: float) -> subprocess.Popen:
    """A second process that holds a lease on prefix and refreshes it (every ttl/4, real time)
    until killed: what a live run on another machine looks like from here."""
    code = (
        "import sys, time; sys.path.insert(0, sys.argv[1])\n"
        "from refbench.lease import Lease\n"
        "from refbench.backends import s3_client\n"
        "import os\n"
        "env = {k: os.environ[k] for k in ('AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY')}\n"
        "l = Lease(lambda: s3_client(sys.argv[2], env), sys.argv[3], sys.argv[4], ttl=float(sys.argv[5])).start()\n"
        "print('holding', flush=True)\n"
        "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(ROOT), server.endpoint, bucket, prefix, str(ttl)],
                            env={**os.environ, **server.env}, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "holding"
    return proc


def write_dead_lease(server, bucket: str, prefix: str, ttl: float = 1.0) -> None:
    """The lease a run left when it was killed (SIGKILL): never refreshed again."""
    proc = hold_lease(server, bucket, prefix, ttl)
    proc.kill()
    proc.wait()


@pytest.fixture
def bucket(minio):
    server, client = minio
    name = f"lease-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    yield server, client, name


@pytest.mark.parametrize("versioned", [False, True])
def test_clean_remote_removes_only_expired_leases_below_prefix(bucket, versioned, clock):
    server, client, name = bucket
    if versioned:
        client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    # a dead run: objects (overwritten once, so a versioned bucket holds two versions) and its lease
    for k in ("a", "sub/b", "sub/c"):
        client.put_object(Bucket=name, Key=f"{DEAD}/{k}", Body=b"old")
        client.put_object(Bucket=name, Key=f"{DEAD}/{k}", Body=b"dead run")
    write_dead_lease(server, name, DEAD, ttl=30.0)  # expired by the clock given (a minute on), not by real time
    # a live run elsewhere: its lease (the default ttl, 10 min) is refreshed by a second process
    holder = hold_lease(server, name, LIVE, ttl=lease.DEFAULT_TTL)
    try:
        client.put_object(Bucket=name, Key=f"{LIVE}/x", Body=b"live run")
        sentinels = [
            "keep/me.txt",  # outside -p
            "lt.txt",  # a key that starts like the prefix
            "ltx/20260101-000000-deadbeef/" + lease.LEASE_NAME,  # an expired lease outside -p (a sibling name)
            "ltx/20260101-000000-deadbeef/obj",
            "lt/userdata/file",  # below -p, no lease: not known to be a run's
            "lt/copied/" + lease.LEASE_NAME,  # a lease that names another prefix
        ]
        for k in sentinels[:2] + sentinels[3:5]:
            client.put_object(Bucket=name, Key=k, Body=b"mine")
        write_dead_lease(server, name, "ltx/20260101-000000-deadbeef", ttl=1.0)
        client.put_object(Bucket=name, Key=sentinels[5],
                          Body=json.dumps({"schema": lease.LEASE_SCHEMA, "prefix": DEAD, "ttl_seconds": 1}).encode())
        clock.advance(60)  # a minute later by the server's clock: the dead leases expired, the live one not
        proc = clean_cli(clock, "--remote", "-b", name, "-p", "lt", "--endpoint-url", server.endpoint,
                         env=bench_env(server))
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout
        # 3 objects (2 versions each in a versioned bucket) and the lease
        assert f"{DEAD}/: lease of " in out and f"{7 if versioned else 4} objects removed" in out, out
        assert f"{LIVE}/: live run" in out
        assert "lt/userdata/: no refbench lease" in out and "lt/copied/: lease names another prefix" in out
        assert "removed 1 prefixes of dead runs below s3://" in out
        left = keys(client, name)
        assert not [k for k in left if k.startswith(DEAD + "/")]
        if versioned:
            assert not [k for k in versions(client, name) if k.startswith(DEAD + "/")]
        assert f"{LIVE}/x" in left and f"{LIVE}/{lease.LEASE_NAME}" in left
        for k in sentinels:
            assert k in left, k
    finally:
        holder.kill()
        holder.wait()


def test_dry_run_removes_nothing(bucket, clock):
    server, client, name = bucket
    client.put_object(Bucket=name, Key=f"{DEAD}/a", Body=b"x")
    write_dead_lease(server, name, DEAD, ttl=1.0)
    clock.advance(60)
    proc = clean_cli(clock, "--remote", "--dry-run", "-b", name, "-p", "lt", "--endpoint-url", server.endpoint,
                     env=bench_env(server))
    assert proc.returncode == 0, proc.stderr
    assert "would be removed" in proc.stdout and "would remove 1 prefixes" in proc.stdout
    assert f"{DEAD}/a" in keys(client, name)


def test_next_run_sweeps_dead_runs_and_holds_its_own_lease(bucket, tmp_path, monkeypatch, clock):
    """What a run on a user's bucket does at start and end, without building anything."""
    server, client, name = bucket
    for k, v in server.env.items():
        if k != "S3_ENDPOINT_URL":
            monkeypatch.setenv(k, v)
    monkeypatch.setenv("REFBENCH_LEASE_TTL", "3")  # read once at the command line (MachineSettings): no effect here
    client.put_object(Bucket=name, Key=f"{DEAD}/a", Body=b"x")
    write_dead_lease(server, name, DEAD, ttl=30.0)  # expired by the clock given (a minute on), not by real time
    client.put_object(Bucket=name, Key="outside", Body=b"mine")
    clock.advance(60)
    backend = S3Backend.open(name, "lt", tmp_path, server.endpoint, "20260102-000000-12345678", lease_ttl=600.0,
                             clock=clock)
    try:
        assert [(f.prefix, f.state) for f in backend.swept] == [(DEAD, "expired")]
        assert backend.swept[0].removed == 2  # the object and its lease
        own = f"lt/20260102-000000-12345678/{lease.LEASE_NAME}"

        def body():
            return json.loads(client.get_object(Bucket=name, Key=own)["Body"].read())
        first = body()
        assert first["pid"] == os.getpid() and first["prefix"] == "lt/20260102-000000-12345678"
        assert first["ttl_seconds"] == 600.0 and first["host"] and first["expires"]
        # refreshed every ttl/4: not before, and once it is due
        clock.advance(100)
        time.sleep(0.3)  # the refresher had its chance to act early (it must not)
        assert backend.lease.refreshes == 0 and body()["refreshed"] == first["refreshed"]
        clock.advance(60)  # 160 s > 150 s
        until(lambda: backend.lease.refreshes == 1, "the lease's refresh")
        again = body()
        assert again["refreshed"] > first["refreshed"] and again["started"] == first["started"]
        assert again["expires"] > first["expires"]
        # a concurrent run's sweep leaves this live run alone
        other = S3Backend.open(name, "lt", tmp_path, server.endpoint, "20260102-000001-87654321", clock=clock)
        assert [(f.prefix, f.state) for f in other.swept] == [("lt/20260102-000000-12345678", "live")]
        other.close()
        client.put_object(Bucket=name, Key="lt/20260102-000000-12345678/data/x", Body=b"x")
    finally:
        backend.close()
    assert keys(client, name) == ["outside"]  # its objects and its lease gone; nothing else touched


def test_expired_lease_of_a_process_still_running_here_is_left_alone(bucket):
    """A stalled run on this host (its refresher starved, the laptop suspended) is not dead."""
    server, client, name = bucket
    sim = SimClock()
    lease.Lease(lambda: client, name, DEAD, ttl=30.0, clock=sim).write()  # our own pid: certainly running
    client.put_object(Bucket=name, Key=f"{DEAD}/a", Body=b"x")
    never = lambda p: pytest.fail("must not remove")  # noqa: E731
    # within its ttl it is live, whoever owns it; past it, its owner still runs here
    assert [(f.prefix, f.state) for f in lease.sweep(client, name, "lt", never, clock=sim)] == [(DEAD, "live")]
    sim.advance(60)
    found = lease.sweep(client, name, "lt", never, clock=sim)
    assert [(f.prefix, f.state) for f in found] == [(DEAD, "owner running")]


UNSAFE = ["", "/", "//", "../x", "a/../b", "a/./b", "..", "a//b", "x\ny", "a\x00b", "tab\there", "esc\x1b[0m",
          "del\x7f", "a*", "a?b", "a[0]", "a\\b"]


@pytest.mark.parametrize("value", UNSAFE)
def test_unsafe_prefix_refused_before_anything_runs(tmp_path, capsys, value):
    from refbench.cli import main
    code = main(["-s", "v1.0.0", "v1.1.0", "--repo", str(tmp_path / "no-such-origin"), "-p", value,
                 "--builds-dir", str(tmp_path / "builds")])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("refbench: error: -p/--prefix"), err
    assert not (tmp_path / "builds").exists()  # refused before anything ran
    with pytest.raises(RefbenchError, match="-p/--prefix"):
        lease.check_prefix(value)


@pytest.mark.parametrize("value", ["../x", "", "a\nb"])
def test_unsafe_prefix_refused_by_the_command_line(tmp_path, value):
    proc = run_cli("-s", "v1.0.0", "v1.1.0", "--repo", str(tmp_path / "no-such-origin"), "-p", value,
                     "--builds-dir", str(tmp_path / "builds"), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("refbench: error: -p/--prefix"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_cli("clean", "--remote", "-b", "somebucket", "-p", value, "--endpoint-url", "http://127.0.0.1:9",
                     cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("refbench: error: -p/--prefix"), proc.stderr


@pytest.mark.parametrize("value,expected", [("refbench", "refbench"), ("/a/b/", "a/b"), ("team-1/x.y", "team-1/x.y")])
def test_safe_prefixes_accepted(value, expected):
    assert lease.check_prefix(value) == expected


def test_clean_remote_needs_a_bucket(tmp_path):
    proc = run_cli("clean", "--remote", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == "refbench: error: clean --remote needs -b BUCKET"


# ---- on this machine: temp dirs and RAM data dirs of killed runs ---------------------------------
def test_clean_stale_removes_only_dirs_whose_owner_is_gone(tmp_path):
    from refbench.backends import make_workdir, write_owner

    (tmp_path / "refbench-20260101-000000-deadbeef-killed").mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.path.insert(0, sys.argv[1]);"
                             "from pathlib import Path; from refbench.backends import write_owner;"
                             "write_owner(Path(sys.argv[2])); print('ok', flush=True); time.sleep(60)",
                             str(ROOT), str(tmp_path / "refbench-20260101-000000-deadbeef-killed")],
                            stdout=subprocess.PIPE, text=True)
    assert dead.stdout.readline().strip() == "ok"
    dead.kill()  # SIGKILL: nothing cleans up
    dead.wait()
    (tmp_path / "refbench-20260101-000000-deadbeef-killed" / "downloads").mkdir()
    live = tmp_path / "refbench-20260101-000001-0a0a0a0a-live"
    live.mkdir()
    write_owner(live)  # this process: running
    unmarked = tmp_path / "refbench-20260101-000002-00000000-unmarked"
    unmarked.mkdir()  # no owner: not known to be a run's
    foreign = tmp_path / "refbench-20260101-000003-11111111-foreign"
    foreign.mkdir()
    (foreign / "owner").write_text(str(dead.pid))
    (foreign / "owner.json").write_text(json.dumps({"host": "another-host", "pid": dead.pid}))
    other = tmp_path / "unrelated"
    other.mkdir()
    proc = run_cli("clean", "--stale", "-l", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "killed" in proc.stdout and "removed 1 directories" in proc.stdout, proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, unmarked.name, foreign.name, "unrelated"])
    # a pid reused by another process does not keep a killed run's dir alive
    reused = tmp_path / "refbench-20260101-000004-22222222-reused"
    reused.mkdir()
    (reused / "owner").write_text(str(os.getpid()))
    (reused / "owner.json").write_text(json.dumps({"pid": os.getpid(), "pid_start": "1"}))
    workdir, swept = make_workdir("20260102-000000-33333333", tmp_path)  # what a new run does first
    assert swept == [reused] and workdir.is_dir() and (workdir / "owner").read_text() == str(os.getpid())
