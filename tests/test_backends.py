"""The backends without a server: what the Backend protocol asks, `with` closing them, the dry-run
(planned) forms, and process groups stopped as a whole (backends.process)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fakes.backend import FakeBackend
from refbench.backends import Backend, IpfsBackend, S3Backend, dirs
from refbench.backends.process import run_group, stop_process
from refbench.config import FixtureSpec, ScenarioSpec, StepSpec

ROOT = Path(__file__).resolve().parent.parent
SPEC = FixtureSpec(kind="sparse", size=1, count=1)


def scenario(daemon: str | None = None) -> ScenarioSpec:
    return ScenarioSpec("get files", "kubo", SPEC, SPEC, (StepSpec("get", "{{ bin }} get"),), daemon=daemon)


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


# ---- the protocol ------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda tmp: S3Backend("bucket", "p/run"),
    lambda tmp: IpfsBackend(tmp / "ipfs"),
    lambda tmp: FakeBackend(tmp / "remote"),
], ids=["s3", "ipfs", "fake"])
def test_every_backend_satisfies_the_protocol(make, tmp_path):
    backend = make(tmp_path)
    assert isinstance(backend, Backend)
    assert isinstance(backend.env, dict) and isinstance(backend.swept, list)
    assert backend.describe()["kind"] == backend.kind
    assert backend.watch_extra() == {} and backend.server_pids() == []


def test_something_lacking_a_method_is_not_a_backend():
    class Half:
        kind, shared_context, swept, env = "half", True, [], {}

        def context_values(self, slug, label):
            return {}

    assert not isinstance(Half(), Backend)


# ---- with closes -------------------------------------------------------------------------------
def test_ipfs_backend_as_a_context_manager_removes_its_repos(tmp_path):
    with IpfsBackend.open(tmp_path) as backend:
        assert backend.workdir == tmp_path / "ipfs" and backend.workdir.is_dir()
        (backend.workdir / "left").write_text("x")
    assert not (tmp_path / "ipfs").exists()


def test_s3_backend_closes_on_leaving_the_block_even_on_an_error():
    closed = []

    class Closing(S3Backend):  # what close does is another test's: here, that leaving the block calls it
        def close(self):
            closed.append(self.prefix)
    with pytest.raises(RuntimeError, match="boom"):
        with Closing("bucket", "p/run") as backend:
            assert backend.bucket == "bucket"
            raise RuntimeError("boom")
    assert closed == ["p/run"]


def test_fake_backend_closes_like_the_real_ones(tmp_path):
    with FakeBackend(tmp_path / "remote") as backend:
        backend.open_scenario(scenario(), ["a"], ["/bin/true"], tmp_path)
        assert (tmp_path / "remote" / "get-files").is_dir()
    assert backend.closed and not (tmp_path / "remote").exists()


# ---- planned: what a dry run renders with ------------------------------------------------------
def test_planned_embedded_s3_shows_placeholders_for_what_only_a_run_knows():
    b = S3Backend.planned(None, "refbench", None)
    v = b.context_values("small-files", "v1")
    assert v["remote"] == "s3://refbench/refbench/<run-id>/small-files"
    assert b.endpoint == "http://127.0.0.1:<port>" and b.env["S3_ENDPOINT_URL"] == b.endpoint
    assert b.env["AWS_ACCESS_KEY_ID"] == "<random>"
    assert v["remote_versioned"] == ("s3://refbench-versioned/refbench/<run-id>/small-files" if v["versioned"]
                                     else v["remote"])


def test_planned_user_bucket_keeps_the_endpoint_and_checks_the_prefix(monkeypatch):
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    b = S3Backend.planned("mine", "ci/pr", "http://s3.example:9000")
    assert b.context_values("x", "v1")["remote"] == "s3://mine/ci/pr/<run-id>/x"
    assert b.env == {"S3_ENDPOINT_URL": "http://s3.example:9000"} and not b.versioned_bucket
    with pytest.raises(Exception, match="prefix"):
        S3Backend.planned("mine", "../x", None)


def test_planned_ipfs_creates_nothing(tmp_path):
    b = IpfsBackend.planned(tmp_path)
    b.plan_scenario(scenario(daemon="offline"), ["v1", "v2"], ["/b/ipfs1", "/b/ipfs2"])
    assert b.context_values("get-files", "v2") == {"ipfs_path": str(tmp_path / "ipfs" / "get-files-b1"),
                                                   "api": "http://127.0.0.1:<port>", "remote": ""}
    assert b.context_env("get-files", "v1")["IPFS_PATH"] == str(tmp_path / "ipfs" / "get-files-b0")
    assert not (tmp_path / "ipfs").exists()


# ---- process groups ----------------------------------------------------------------------------
def test_stop_process_stops_the_whole_group(tmp_path):
    pidfile = tmp_path / "child"
    proc = subprocess.Popen(["sh", "-c", f"sleep 30 & echo $! > {pidfile}; wait"], start_new_session=True)
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    child = int(pidfile.read_text())
    stop_process(proc, timeout=5)
    assert proc.poll() is not None
    assert wait_gone(child), "the group's background child outlived stop_process"


def test_run_group_kills_the_group_when_interrupted(tmp_path):
    pidfile = tmp_path / "child"

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_group(["sh", "-c", f"sleep 30 & echo $! > {pidfile}; wait"])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert wait_gone(int(pidfile.read_text()))


def test_a_server_dies_with_its_parent(tmp_path):
    """die_with_parent: refbench killed outright (SIGKILL) takes its servers with it."""
    code = ("import subprocess, sys, time; from refbench.backends.process import die_with_parent; "
            "p = subprocess.Popen(['sleep', '30'], preexec_fn=die_with_parent); print(p.pid, flush=True); "
            "time.sleep(30)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    server = int(parent.stdout.readline())
    assert alive(server)
    parent.kill()
    parent.wait()
    assert wait_gone(server), "the server outlived its parent"


# ---- what killed runs leave ------------------------------------------------------------------
def _dead_runs_dir(parent: Path, name: str) -> Path:
    """A data dir marked by a process that has exited."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    d = parent / name
    (d / "bucket" / "obj").mkdir(parents=True)
    (d / "bucket" / "obj" / "part.1").write_bytes(b"x" * 100)
    (d / "owner").write_text(str(proc.pid))
    (d / "owner.json").write_text(json.dumps({"host": socket.gethostname(), "pid": proc.pid}))
    return d


def _beside(d: Path) -> list[Path]:
    """What a run's embedded MinIO keeps beside its data dir: its log, and each probe server's file
    and FIFO dir (MinioServer.probes, daemon.ProbeServer)."""
    log, probes, fifo = (dirs.beside(d, what) for what in ("log", "probes-0", "probes-0.fifo"))
    log.write_text("")
    probes.write_text("{}\n")
    fifo.mkdir()
    os.mkfifo(fifo / "req")
    return [log, probes, fifo]


def test_sweep_removes_dead_runs_dirs_and_keeps_live_ones(tmp_path):
    """A dead run's data dir goes with what its server kept beside it (a run killed mid-round left
    its probe files and FIFOs, which nothing removed); a live run's stays, and so does all of its."""
    dead = _dead_runs_dir(tmp_path, "refbench-minio-dead")
    dead_beside = _beside(dead)
    live = tmp_path / "refbench-minio-live"
    live.mkdir()
    dirs.write_owner(live)
    live_beside = _beside(live)
    assert dirs.sweep_stale(tmp_path) == [dead]
    assert not dead.exists() and live.exists()
    assert not any(p.exists() for p in dead_beside) and all(p.exists() for p in live_beside)


def test_a_sweep_that_cannot_finish_leaves_the_dir_marked_for_the_next(tmp_path, monkeypatch):
    """A dying server that still writes must not turn a dead run's dir into an unmarked one that no
    later sweep removes: the owner marks go last, and only once the rest is gone."""
    dead = _dead_runs_dir(tmp_path, "refbench-minio-dying")
    real_rmtree = shutil.rmtree

    def rmtree_while_written(path, ignore_errors=False):
        real_rmtree(path, ignore_errors=ignore_errors)
        (dead / "late").mkdir(parents=True, exist_ok=True)  # the server finishes one more part
        (dead / "late" / "part.2").write_bytes(b"y")

    monkeypatch.setattr(shutil, "rmtree", rmtree_while_written)  # the OS: a server still writing
    assert dirs.sweep_stale(tmp_path) == []
    assert dirs.owner_dead(dead)  # still marked, still a dead run's
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    assert dirs.sweep_stale(tmp_path) == [dead] and not dead.exists()


# ---- ports -----------------------------------------------------------------------------------
def test_embedded_minio_binds_its_own_port(minio, tmp_path):
    """MinIO binds 127.0.0.1:0 itself and refbench reads the port back from /proc: no port is
    chosen first and handed over (another process could take it in between, and a health check
    would then be answered by that process). The endpoint is a port the server's own process
    listens on."""
    from refbench.backends import MinioServer, minio as minio_mod

    server, _ = minio
    assert server.port in minio_mod.listening_ports(server.proc.pid)
    assert server.endpoint == f"http://127.0.0.1:{server.port}"

    with MinioServer(tmp_path) as other:
        assert other.port != server.port and minio_mod.listening_ports(other.proc.pid) == [other.port]
        # no port picked for the server: it is told port 0 for both of its addresses
        argv = list(other.proc.args)
        assert argv[argv.index("--address") + 1] == argv[argv.index("--console-address") + 1] == "127.0.0.1:0"


def test_listening_ports_names_only_the_process_own_sockets():
    import socket as socket_mod
    from refbench.backends.minio import listening_ports

    with socket_mod.socket() as held, socket_mod.socket() as bound_only:
        held.bind(("127.0.0.1", 0))
        held.listen()
        bound_only.bind(("127.0.0.1", 0))  # bound, not listening: no server behind it
        port, other = held.getsockname()[1], bound_only.getsockname()[1]
        mine = listening_ports(os.getpid())
        assert port in mine and other not in mine
    assert port not in listening_ports(os.getpid())  # closed: no longer this process's
    assert listening_ports(2 ** 22 + 1) == []  # no such process


def test_settle_page_cache_leaves_a_binary_wholly_resident_even_when_it_was_dirty(tmp_path):
    """The runner settles every build's binary before a step's warm-ups (issue 34): written back,
    dropped, read back whole. A file just written (dirty pages, which a drop alone cannot evict)
    and a file half in the cache both end wholly resident. fincore (util-linux, installed by make
    setup) says how much of the file is resident; tests/test_page_cache.py checks the folios."""
    import shutil
    import subprocess

    from refbench.backends.process import settle_page_cache

    fincore = shutil.which("fincore")
    if fincore is None:
        pytest.fail("fincore (util-linux) is not installed: run make setup")
    # beside the checkout, where builds live: a tmpfs /tmp keeps its pages whatever one advises
    where = Path(tempfile.mkdtemp(dir=Path(__file__).resolve().parent.parent, prefix=".pagecache-"))
    dirty, half = where / "dirty", where / "half"
    dirty.write_bytes(os.urandom(4 << 20))  # not synced: dirty
    half.write_bytes(os.urandom(4 << 20))
    os.sync()
    fd = os.open(half, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.pread(fd, 1 << 20, 0)  # a quarter read back
    os.close(fd)

    def resident(f) -> int:
        out = subprocess.run([fincore, "--bytes", "--noheadings", "--output", "RES", str(f)],
                             capture_output=True, text=True, check=True).stdout
        return int(out.split()[0])

    assert resident(half) < 4 << 20
    for f in (dirty, half):
        assert settle_page_cache(f) is True
        assert resident(f) >= 0.99 * (4 << 20)  # read back whole (a proactive reclaimer may take a page back)
    assert settle_page_cache(where / "missing") is False
    shutil.rmtree(where)
