"""A dead S3 server ends the run within a minute of dying, exit 2, one line naming the server.

It used to take 7 min 44 s with a user's bucket: hyperfine runs every command of a round with -i,
and each s5cmd run retries a refused connection for about a minute, so the round ran to its end.
The watchdog's thread now asks the server between and during runs (a bare TCP connect: no request,
nothing added to the timed commands) and stops the run once it has not answered for 10 s; cleanup
then skips the dead server (the next run's sweep removes what is left once it is back).

The fast tests use a port nothing listens on; the slow ones kill a real MinIO in the middle of
the small-files upload, as a user's bucket (-b with --endpoint-url) and as the embedded server.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT, need
from refbench.backends import S3Backend
from refbench.backends.minio import unreachable
from refbench.backends.process import run_group
from refbench.watchdog import Limits, Watchdog, WatchdogStop


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once it is closed


def test_a_port_nothing_listens_on_is_unreachable_and_a_listening_one_answers():
    assert unreachable(f"http://127.0.0.1:{closed_port()}") == "connection refused"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert unreachable(f"http://127.0.0.1:{s.getsockname()[1]}") is None


def test_a_server_that_stops_answering_stops_the_running_command(tmp_path):
    """The server answers, then dies; the round (a command that would run 60 s) is killed within
    the watchdog's grace after the death, with one line naming the server and the step."""
    marker = tmp_path / "still-running"
    died: list[float] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"

    def down():
        if not died and time.monotonic() > t0 + 1:
            listener.close()  # the server dies a second into the round
            died.append(time.monotonic())
        return unreachable(endpoint)

    wd = Watchdog(limits=Limits(interval=0.1, server_after=2.0), server_down=down,
                  server_label=f"S3 server {endpoint}")
    wd.note("small files / upload: round 1/1")
    t0 = time.monotonic()
    wd.start()
    try:
        with pytest.raises(WatchdogStop) as e:
            run_group(["sh", "-c", f"sleep 60; touch {marker}"])
    finally:
        wd.stop()
        listener.close()
    assert died and 2.0 <= time.monotonic() - died[0] < 10
    msg = str(e.value)
    assert msg == (f"stopped by the watchdog: the S3 server {endpoint} stopped answering (connection refused) "
                   f"for 2 s, during small files / upload: round 1/1"), msg
    time.sleep(0.3)
    assert not marker.exists()


def test_a_short_hiccup_does_not_stop_the_run_and_off_never_does():
    answers = iter([None, "connection refused", None] + [None] * 1000)
    wd = Watchdog(limits=Limits(interval=0.05, server_after=1.0), server_down=lambda: next(answers))
    wd.start()
    try:
        time.sleep(0.5)
    finally:
        wd.stop()
    assert wd.tripped is None and wd.samples >= 3
    wd = Watchdog(limits=Limits(interval=0.05, server_after=0.1, enabled=False), server_down=lambda: "gone")
    wd.start()
    try:
        time.sleep(0.5)
    finally:
        wd.stop()
    assert wd.tripped is None


def test_cleanup_on_a_dead_user_server_leaves_the_prefix_to_the_sweep_at_once():
    """Without the check, removing the prefix asked the dead endpoint (and retried) and raised,
    replacing the one line that names the server."""
    endpoint = f"http://127.0.0.1:{closed_port()}"
    backend = S3Backend("bucket", "refbench/20260101-000000-deadbeef", endpoint, None,
                        {"S3_ENDPOINT_URL": endpoint}, base_prefix="refbench")
    assert backend.server_down() == "connection refused" and backend.server_label == f"S3 server {endpoint}"
    t0 = time.monotonic()
    backend.close()  # no exception: the lease and prefix stay for the next run's sweep
    assert time.monotonic() - t0 < 5


def test_the_run_watchdog_asks_the_backend():
    endpoint = f"http://127.0.0.1:{closed_port()}"
    backend = S3Backend("bucket", "refbench/x", endpoint, None, {}, base_prefix="refbench")
    wd = Watchdog.for_run(backend, Path("/tmp"), Path("/tmp"), env="server=5")
    assert wd.server_label == f"S3 server {endpoint}" and wd.server_down() == "connection refused"
    assert wd.limits.server_after == 5.0


# ---- end to end: a real MinIO killed in the middle of the small-files upload ------------------------
def _minio_binary() -> str:
    from refbench.tools import find_tool
    found = find_tool("minio")
    if not found:
        need("minio", "make setup installs it")
    return found


def _start_minio(data: Path, port: int, env: dict) -> subprocess.Popen:
    proc = subprocess.Popen([_minio_binary(), "server", "--quiet", "--address", f"127.0.0.1:{port}",
                             "--console-address", "127.0.0.1:0", str(data)],
                            env={**os.environ, **env, "MINIO_BROWSER": "off", "MINIO_UPDATE": "off"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/minio/health/ready", timeout=1) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("MinIO did not become ready")


def _descendants(pid: int) -> dict[int, str]:
    """pid -> command name of every process below pid (from /proc)."""
    parent: dict[int, tuple[int, str]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            parent[int(d)] = (int(stat[stat.rindex(")") + 2:].split()[1]), comm)
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        for child, (ppid, comm) in parent.items():
            if ppid == p and child not in out:
                out[child] = comm
                todo.append(child)
    return out


def _run_until_uploading(args: list[str], env: dict, cwd: Path) -> subprocess.Popen:
    """A run of the small-files upload alone, long enough to be killed in (30 runs a side in one
    round), returned once hyperfine is running its round."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench.py"), *args, "--quick", "--only", "small files/upload",
                             "-r", "30", "-w", "0", "--rounds", "1", "--no-profile", "--no-rss"],
                            env={**os.environ, **env}, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 900  # the builds, when the session has not made them yet
    while "hyperfine" not in _descendants(proc.pid).values():
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) first: {proc.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, "the run never reached its upload round"
        time.sleep(0.2)
    time.sleep(2)  # a few runs into the round
    assert proc.poll() is None
    return proc


def _ends_within_a_minute(proc: subprocess.Popen, killed_at: float) -> str:
    try:
        _, stderr = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("the run went on for 3 minutes after its server died")
    took = time.monotonic() - killed_at
    print(f"the run ended {took:.1f} s after its server died (exit {proc.returncode})")
    assert took < 60, f"the run ended {took:.0f} s after its server died: {stderr[-2000:]}"
    errors = [ln for ln in stderr.splitlines() if ln.startswith("refbench: error:")]
    assert proc.returncode == 2 and len(errors) == 1, stderr
    assert "Traceback" not in stderr
    return errors[0]


@pytest.mark.slow
def test_a_users_s3_server_killed_during_the_upload_ends_the_run_within_a_minute(s5_origin, builds_dir, tmp_path):
    import boto3
    data, local = tmp_path / "data", tmp_path / "local"
    local.mkdir()
    port = closed_port()
    creds = {"MINIO_ROOT_USER": "deadtest", "MINIO_ROOT_PASSWORD": "deadtest-secret"}
    server = _start_minio(data, port, creds)
    endpoint = f"http://127.0.0.1:{port}"
    client = lambda: boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="deadtest",  # noqa: E731
                                  aws_secret_access_key="deadtest-secret", region_name="us-east-1")
    client().create_bucket(Bucket="users")
    client().put_object(Bucket="users", Key="keep/me.txt", Body=b"mine")
    env = {"AWS_ACCESS_KEY_ID": "deadtest", "AWS_SECRET_ACCESS_KEY": "deadtest-secret", "AWS_REGION": "us-east-1",
           "REFBENCH_LEASE_TTL": "4"}
    try:
        proc = _run_until_uploading(["-s", "v1.0.0", "v1.1.0", "--repo", str(s5_origin.path), "--builds-dir",
                                     str(builds_dir), "-b", "users", "--endpoint-url", endpoint, "-p", "refbench",
                                     "-l", str(local)], env, tmp_path)
        server.kill()
        killed_at = time.monotonic()
        server.wait()
        line = _ends_within_a_minute(proc, killed_at)
        assert f"S3 server {endpoint} stopped answering (connection refused)" in line, line
        assert "small files / upload" in line, line
        assert list(local.iterdir()) == []  # the run's local temp dir is gone

        # the server comes back; once the dead run's lease has expired, the next sweep removes its prefix
        server = _start_minio(data, port, creds)
        left = [o["Key"] for o in client().list_objects_v2(Bucket="users").get("Contents", [])]
        assert any(k.startswith("refbench/") for k in left), left  # what the killed upload stored
        time.sleep(5)  # past the lease's 4 s
        clean = subprocess.run([sys.executable, str(ROOT / "bench.py"), "clean", "--remote", "-b", "users",
                                "--endpoint-url", endpoint, "-p", "refbench"], env={**os.environ, **env},
                               capture_output=True, text=True, timeout=120)
        assert clean.returncode == 0, clean.stderr
        assert "removed 1 prefixes of dead runs" in clean.stdout, clean.stdout
        assert [o["Key"] for o in client().list_objects_v2(Bucket="users").get("Contents", [])] == ["keep/me.txt"]
    finally:
        server.kill()
        server.wait()


@pytest.mark.slow
def test_the_embedded_minio_killed_during_the_upload_ends_the_run_within_a_minute(s5_origin, builds_dir, tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    proc = _run_until_uploading(["-s", "v1.0.0", "v1.1.0", "--repo", str(s5_origin.path), "--builds-dir",
                                 str(builds_dir), "-l", str(local)], {}, tmp_path)
    (minio,) = [pid for pid, comm in _descendants(proc.pid).items() if comm.startswith("minio")]
    # the run's own data dir, from its server's command line (`minio server ... DIR/data`): in RAM
    # (/dev/shm/refbench-minio-*) when it fits, else in the run's temp dir. Read, not a look at all
    # of /dev/shm, where another test's embedded MinIO may be running beside this one
    data = Path(Path(f"/proc/{minio}/cmdline").read_bytes().split(b"\0")[-2].decode()).parent
    assert data.is_dir() and (data.parent == Path("/dev/shm") and data.name.startswith("refbench-minio-")
                              or data.is_relative_to(local)), data
    os.kill(minio, signal.SIGKILL)
    killed_at = time.monotonic()
    line = _ends_within_a_minute(proc, killed_at)
    assert "embedded MinIO at http://127.0.0.1:" in line and f"process {minio} was killed by signal 9" in line, line
    assert "small files / upload" in line, line
    assert list(local.iterdir()) == []  # the run's temp dir
    assert not data.exists() and not data.with_suffix(".log").exists()  # its server's data, in RAM or not
