"""Shared fixtures: one build cache, one s5cmd origin and one MinIO per test session."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from origins import go_env, make_s5cmd_origin  # noqa: E402

os.environ["PATH"] = go_env()["PATH"]

# the suite is an edge, as the command line is: the library reads no environment, so the tests that
# call it in-process give it theirs, read at each use (a test's monkeypatch.setenv takes effect)
from refbench import paths as _paths  # noqa: E402

_paths.use(lambda: _paths.Layout.from_environ(os.environ))

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# The user's own cache root, as the session found it (before any test points XDG_CACHE_HOME
# elsewhere): no test may write there (user_cache_snapshot, pytest_sessionfinish).
USER_CACHE = _paths.Layout.from_environ(os.environ).cache_root


def setup_tools(cache: Path) -> frozenset[str]:
    """The entries of `cache` that `make setup` writes, not a test: each pinned tool's file or
    directory (refbench.pins.cached_path, read while the environment is the session's own), and its
    lock and partial files, which share its name."""
    from refbench import pins
    where = (pins.cached_path(t) for t in pins.PINNED_TOOLS)
    return frozenset(p.relative_to(cache).parts[0] for p in where if p.is_relative_to(cache))


def user_cache_snapshot(cache: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under the user's cache root but the set-up tools, as (inode, size, mtime), so a
    file a test wrote, replaced or removed shows. An lstat each: ~45,000 entries in 0.2 s of CPU."""
    if not cache.is_dir():
        return {}
    skip = setup_tools(cache)
    seen: dict[str, tuple[int, int, int]] = {}
    cut = len(str(cache)) + 1  # the relative path by slicing: os.path.relpath took 10x the lstat

    def walk(d: str) -> None:
        try:
            entries = list(os.scandir(d))
        except (FileNotFoundError, NotADirectoryError):
            return
        for e in entries:
            if d == str(cache) and any(e.name.startswith(t) for t in skip):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            seen[e.path[cut:]] = (st.st_ino, st.st_size, st.st_mtime_ns)
            if e.is_dir(follow_symlinks=False):
                walk(e.path)
    walk(str(cache))
    return seen


def cache_writes(before: dict, after: dict) -> list[str]:
    """What changed between two snapshots: entries added, removed or rewritten."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


_USER_CACHE = pytest.StashKey[dict]()


def pytest_sessionstart(session):
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller's session spans its workers'
        session.config.stash[_USER_CACHE] = user_cache_snapshot(USER_CACHE)


# Where the user's other runs write all day: a comparison with REFBENCH_BUILDS_DIR or an installed
# refbench builds under builds/ (seen during a test run here: an experiment's kubo clones). A test
# writing there is reported, but fails no session: another process may have. A test's builds go to
# builds_dir or tmp_path (--builds-dir) anyway.
SHARED_WITH_OTHER_RUNS = frozenset({"builds"})  # entries of the cache root


def written_here(entry: str, cache: Path | None = None) -> bool:
    """Whether a change to `entry` (relative to the user's cache root) may be this session's: not
    under SHARED_WITH_OTHER_RUNS, and, for a crash report (crashes/crash-*.txt, whose traceback
    names the checkout that crashed), one of this checkout's. Crash reports of other checkouts'
    runs (another worktree's tests, seen here) and the crashes/ directory itself are not."""
    top = entry.split("/")[0]
    if top in SHARED_WITH_OTHER_RUNS or entry == "crashes":
        return False
    if top == "crashes":
        try:
            text = ((cache or USER_CACHE) / entry).read_text(errors="replace")[:65536]
        except OSError:  # removed since: whoever wrote it, it is gone
            return False
        return str(ROOT / "refbench") in text
    return True


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """Issue 38: tests installed implementations into the user's ~/.cache/refbench (unset
    XDG_CACHE_HOME), where the user's runs found them sealed under another key and installed them
    again. A test writes caches of its own (tmp_path, implementations_cache); under CI=true one that
    writes the user's (written_here) fails the session, naming what it wrote.
    Elsewhere it is a warning: on a developer's machine the user's own runs may write there too."""
    before = session.config.stash.get(_USER_CACHE, None)
    if before is None:
        return
    wrote = cache_writes(before, user_cache_snapshot(USER_CACHE))
    if not wrote:
        return
    fails = IN_CI and any(map(written_here, wrote))
    shown = "\n  ".join(wrote[:20]) + (f"\n  ... {len(wrote) - 20} more" if len(wrote) > 20 else "")
    msg = (f"the test session wrote under the user's cache {USER_CACHE} (a test must use a cache of its own: "
           f"XDG_CACHE_HOME, conftest.implementations_cache; or another process of this user wrote there "
           f"meanwhile):\n  {shown}")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter:
        reporter.write_line(msg if fails else f"warning: {msg}", red=fails, yellow=not fails)
    else:
        print(msg, file=sys.stderr)
    if fails:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def need(tool: str, why: str) -> None:
    """A tool this test needs is missing. Locally the test skips, saying why; under CI=true it fails
    and names the tool, because a missing tool there is a missing install step, never a pass."""
    msg = f"{tool} missing: {why}"
    if IN_CI:
        pytest.fail(f"{msg} (CI=true: the set-up step must install it)", pytrace=False)
    pytest.skip(msg)


def session_root(tmp_path_factory) -> Path:
    """The directory of the whole test session: under pytest-xdist each worker has a base temporary
    directory of its own (popen-gwN) inside it, so what is made here is shared by the workers;
    pytest removes it with the session's (it keeps the last three)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def builds_dir(tmp_path_factory) -> Path:
    """One build cache for the whole session, so each ref is built once per CI run. Each xdist worker
    has its own: a test may rewrite a build in place (tests/test_page_cache.py) or read its page-cache
    state, which another worker running the same file would change."""
    return tmp_path_factory.mktemp("builds")


RAM = Path("/dev/shm")


def _is_tmpfs(path: Path) -> bool:
    """Whether `path` is a mount point of a tmpfs (/proc/self/mounts)."""
    with open("/proc/self/mounts") as mounts:
        return any(f[1] == str(path) and f[2] == "tmpfs" for f in (line.split() for line in mounts))


@pytest.fixture(scope="session")
def ram_root():
    """A directory of the session's own on a tmpfs (/dev/shm, present on every Linux), for the temp
    files (-l) of kubo runs whose tests read no disk figure. Why: the machines' disk is ext4 without
    a journal, where making a file scans past every inode freed in the last 60 to 360 s (ext4's
    recently_deleted, 36% of the busy CPU of such a run in perf), and a kubo run makes and drops
    thousands of block files a minute in fresh repos. The tests' --quick comparison of every kubo
    scenario took 87 s and 108 CPU-s (70 of them system time) with its repos on that disk, 56 s and
    66 CPU-s on a tmpfs. No test given it reads the daemon's disk writes, which a tmpfs counts as
    none (their reading is test_daemon's, their verdicts test_daemon_metrics'); kubo on a disk is
    what users run and benchmarks/ measures. Not named refbench-minio-*: no sweep of /dev/shm takes
    it for a dead run's."""
    import shutil
    import tempfile

    from refbench.backends import dirs
    if not _is_tmpfs(RAM):
        need("a tmpfs at /dev/shm", "the kubo runs' repos (tests/conftest.ram_root)")
    # a killed session's (a CI timeout) holds RAM until the machine restarts: marked as refbench's
    # runs' dirs are, so the next session's sweep removes it once its session is gone
    dirs.sweep_stale(RAM, "refbench-tests-ram-*")
    root = Path(tempfile.mkdtemp(prefix="refbench-tests-ram-", dir=RAM))
    dirs.write_owner(root)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ram_local(ram_root, request) -> Path:
    """An empty directory on the session's tmpfs for one test's run (its -l): removed after the test,
    so a test that asserts its run left nothing there still reads a directory of its own."""
    import shutil
    import tempfile
    d = Path(tempfile.mkdtemp(prefix=f"{request.node.name[:40]}-", dir=ram_root))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def go_build_cache() -> Path:
    """The Go build cache for the session's installs of Go implementations (implementations._install_go's
    `gocache`): the one the suite's builds and `make setup`'s tools fill (usual_gocache), never the
    user's GOCACHE (which an install must not trust). An install otherwise compiles with an empty
    cache of its own, the standard library included, every time; a session cache of its own did
    that once a session (86 s of a test on a fresh machine). go locks the entries it writes, so two
    workers may build into it at once."""
    d = Path(usual_gocache())
    d.mkdir(parents=True, exist_ok=True)
    return d


def usual_gocache() -> str:
    """The Go build cache the suite's builds use: refbench's own (toolchain.own_caches, in its data
    directory), which every run that sets no GOCACHE builds into. A test that moves XDG_CACHE_HOME
    names it in GOCACHE, else its build compiles the standard library and every dependency again
    (22 s of a 25 s test). Not go's default (`go env GOCACHE`): refbench builds nothing there, so
    on a fresh machine a test given that one compiled s5cmd and its dependencies a second time."""
    from refbench import toolchain
    return toolchain.own_caches(os.environ)["GOCACHE"]


@pytest.fixture(scope="session")
def implementations_cache(tmp_path_factory) -> dict[str, str]:
    """The environment of a run that installs a real implementation (s3cmd from PyPI, Helia from npm):
    a cache root of the session's, shared by the workers (an install takes a lock on its slot),
    never the user's ~/.cache/refbench. The pinned tools are still found, hash-checked, through the
    checkout's tools/bin (refbench.tools.find_tool); go builds with its usual cache (usual_gocache)."""
    d = session_root(tmp_path_factory) / "xdg-cache"
    d.mkdir(exist_ok=True)
    return {"GOCACHE": usual_gocache(), "XDG_CACHE_HOME": str(d)}


@pytest.fixture(scope="session")
def s5_origin(tmp_path_factory):
    return make_s5cmd_origin(tmp_path_factory.mktemp("s5origin"))


@pytest.fixture(scope="session")
def minio(tmp_path_factory):
    """A real MinIO on loopback for tests that need to look inside the bucket after a run."""
    from refbench.backends import MinioServer, s3_client

    server = MinioServer(tmp_path_factory.mktemp("minio")).start()
    client = s3_client(server.endpoint, server.env)
    client.create_bucket(Bucket="testbucket")
    yield server, client
    server.stop()


def run_bench(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 1200):
    """Run ./bench.py as a user would; returns the CompletedProcess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "bench.py"), *args], cwd=cwd or ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def run_cli(*args, env: dict | None = None, cwd: Path | None = None, dispatch=None) -> subprocess.CompletedProcess:
    """./bench.py's main() in this process, with what a user would see: exit code, stdout, stderr.
    For commands whose test is what they print and return (refusals, clean, compare); run_bench's
    subprocess stays where the process itself is under test (signals, kills, a fresh interpreter,
    a whole run). The environment, working directory and signal handlers are restored after.
    `dispatch`: cli.main's, for a test whose command fails a given way."""
    import contextlib
    import io
    import signal

    from refbench import cli

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        os.environ.update(env or {})
        if cwd:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main([str(a) for a in args], dispatch=dispatch)
            except SystemExit as e:  # argparse's usage errors
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for s, h in handlers.items():
            signal.signal(s, h)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


# The shared smoke run's sampling, in one place: tests that compare with it (the sharded run, the
# raw-runs check) read these instead of repeating the numbers. --no-profile: none of its tests reads
# a profile, and perf's runs of its three moved steps were half its time; a profile of a moved step
# is explain_run's (tests/test_profile.py), and one the default --profile auto takes, the busy-CPU
# contender's (tests/test_metrics_e2e.py).
S5_RUNS, S5_ROUNDS = 20, 5
S5_RUN_ARGS = ("--quick", "--only", "small files", "-r", str(S5_RUNS), "-w", "1", "--rounds", str(S5_ROUNDS),
               "--no-profile")


@pytest.fixture(scope="session")
def s5_run(tmp_path_factory, s5_origin, builds_dir):
    """One --quick comparison (v1.0.0 vs PR 7, which is ~30% slower; 20 runs a side in 5 rounds, the --quick default, so the run-wide weighting over steps x metrics leaves it power) of the small-files scenario
    on the embedded MinIO, shared by the tests that read its outputs."""
    out = tmp_path_factory.mktemp("s5run")
    (out / "local").mkdir()
    proc = run_bench("-l", str(out / "local"), "-s", "v1.0.0", "7", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     *S5_RUN_ARGS, "-o", str(out / "summary.md"), "--json", str(out / "results.json"), cwd=out)
    assert proc.returncode == 0, proc.stderr
    return {"dir": out, "summary": out / "summary.md", "results": out / "results.json", "proc": proc,
            "runs": S5_RUNS, "rounds": S5_ROUNDS}


@pytest.fixture(scope="session")
def kubo_origin(tmp_path_factory):
    """A local origin: v1.0.0 and v1.1.0 (master) wrap kubo v0.40.1, in wrappers that differ by a line."""
    from origins import make_kubo_origin

    return make_kubo_origin(tmp_path_factory.mktemp("kubo-origin"))


@pytest.fixture(scope="session")
def kubo_binaries(kubo_origin, builds_dir, tmp_path_factory) -> list[str]:
    """The two kubo builds (v1.0.0, v1.1.0: both kubo v0.40.1), copied out of the worker's build cache once per session
    (tests/test_kubo_online.py, tests/test_daemon_online.py: each module built and copied them again).
    Copies: a test that rewrites a build in place (tests/test_page_cache.py) changes none of these."""
    out = tmp_path_factory.mktemp("kubo-bins")
    proc = run_bench("build", "-t", "kubo", "-s", "v1.0.0", "v1.1.0", "--repo", str(kubo_origin.path),
                     "--builds-dir", str(builds_dir), "--out", str(out), cwd=out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sorted(str(p) for p in out.glob("kubo/*/ipfs"))


# which slow tests run alone, and the groups that share a worker's session fixtures: tests/grouping.py
from grouping import pytest_collection_modifyitems  # noqa: E402,F401 (the hook)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite tests/golden/* from what the renderers give now (then review the diff)")


@pytest.fixture
def golden(request):
    """golden(name, text): compare text with tests/golden/NAME, byte for byte; with
    --update-golden, write it instead. A changed view is then a reviewed diff, never a surprise."""
    update = request.config.getoption("--update-golden")

    def check(name: str, text: str) -> None:
        path = ROOT / "tests" / "golden" / name
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        assert path.is_file(), f"{path} missing: run pytest --update-golden and review the new file"
        want = path.read_text(encoding="utf-8")
        if text != want:
            import difflib
            diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True),
                                                f"golden/{name}", "rendered now", n=2))
            pytest.fail(f"{name} differs from its golden file (pytest --update-golden rewrites it):\n{diff[:6000]}",
                        pytrace=False)
    return check


@pytest.fixture(scope="session")
def explain_run(tmp_path_factory, builds_dir):
    """One --quick comparison with --profile of the small-files scenario: v1.0.0 (s5cmd v2.3.0),
    PR 21 (every command twice) and PR 22 (half its time in main.burnCPU), on the embedded MinIO;
    its summary, PR comment and HTML report (tests/test_accounting.py, tests/test_profile.py)."""
    from origins import make_explain_origin

    origin = make_explain_origin(tmp_path_factory.mktemp("explain-origin"))
    out = tmp_path_factory.mktemp("explain-run")
    (out / "local").mkdir()
    proc = run_bench("-l", str(out / "local"), "-s", "v1.0.0", "21", "22", "--repo", str(origin.path),
                     "--builds-dir", str(builds_dir), "--quick", "--only", "small files", "-r", "2", "-w", "1",
                     "--rounds", "1", "--profile", "-o", str(out / "summary.md"), "--json", str(out / "results.json"),
                     "--html", str(out / "report.html"), cwd=out)
    assert proc.returncode == 0, proc.stderr[-4000:]
    comment = run_bench("report", str(out / "results.json"), "--format", "github", "-o", str(out / "comment.md"))
    assert comment.returncode == 0, comment.stderr
    return {"dir": out, "origin": origin, "results": out / "results.json", "summary": out / "summary.md",
            "comment": out / "comment.md", "html": out / "report.html", "proc": proc}


@pytest.fixture(scope="session", autouse=True)
def no_daemon_cgroup_outlives_the_session():
    """Issue 36: every refbench-daemon-* cgroup a run makes (refbench.daemon.CpuCgroup) goes when
    the run ends, however it ends. The session (each xdist worker) moves itself into a cgroup v2
    of its own first, so the runs it starts, in process or not, make theirs under it (a child of
    their maker's cgroup) and no other session's land there: at its end, none may be left. Where
    no cgroup can be made, refbench makes none either, and there is nothing to check."""
    from refbench import daemon
    root = daemon.cgroup2_mount()
    session = None
    if root is not None:
        parent = root / daemon.own_cgroup().lstrip("/")
        for old in parent.glob("refbench-tests-*"):  # an ended session's that its close could not rmdir
            if (pid := old.name.rsplit("-", 1)[1]).isdigit() and not daemon.alive(int(pid)):
                with contextlib.suppress(OSError):
                    old.rmdir()  # fails on one that still holds a process: left alone
        try:
            (session := parent / f"refbench-tests-{os.getpid()}").mkdir()
            (session / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            if session is not None and session.is_dir():
                session.rmdir()
            session = None
    yield
    if session is None:
        return
    import time
    deadline = time.monotonic() + 30  # a killed run's guard may still be removing its cgroups
    while (left := sorted(session.rglob(daemon.CpuCgroup.PREFIX + "*"))) and time.monotonic() < deadline:
        time.sleep(0.2)
    for d in sorted(left, reverse=True):  # removed anyway: a failed check leaks nothing either
        daemon.CpuCgroup(d).close()
    daemon.CpuCgroup(session).close()  # this process, and any other still in it, back to the parent
    while session.exists() and time.monotonic() < deadline + 5:  # a child forked while it was emptied
        time.sleep(0.2)
        daemon.CpuCgroup(session).close()
    assert not left, f"daemon cgroups outlived the runs of this session that made them: {[d.name for d in left]}"
