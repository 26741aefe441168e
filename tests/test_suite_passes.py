"""The suite's own scheduling (tests/grouping.py), run in a small pytest session of its own: the
tests of an expensive session fixture share one worker under --dist loadgroup (else each worker
builds it again), and a test reading a timed run is in no parallel pass."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CONFTEST = '''
import os
import pytest

@pytest.fixture(scope="session")
def minio():
    return os.environ.get("PYTEST_XDIST_WORKER")

@pytest.fixture(scope="session")
def s5_run():
    return None
'''

TESTS_FILE = '''
import time
import pytest

@pytest.mark.parametrize("i", range(8))
def test_on_the_server(minio, i):
    time.sleep(0.05)

@pytest.mark.parametrize("i", range(8))
def test_alone_free(i):
    time.sleep(0.05)

def test_reads_the_timed_run(s5_run):
    pass
'''


def test_a_fixtures_tests_share_one_worker_and_a_timed_runs_test_is_alone(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    alone: x\n    xdist_group(name): x\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_sample.py").write_text(TESTS_FILE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(TESTS), os.environ.get("PYTHONPATH"))))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "grouping", "-p", "no:cacheprovider", "-n", "2",
                           "--dist", "loadgroup", "-v", "-m", "not alone"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = re.findall(r"^\[(gw\d)\] .*PASSED (\S+)", proc.stdout, re.M)
    assert len(ran) == 16, proc.stdout[-3000:]  # the timed run's test is deselected: alone
    on_server = {(worker, test) for worker, test in ran if "test_on_the_server" in test}
    assert len(on_server) == 8 and all(test.endswith("@minio") for _, test in on_server), on_server
    assert len({worker for worker, _ in on_server}) == 1, f"the minio group ran on two workers: {sorted(on_server)}"


ORDER_CONFTEST = '''
import os
import time
from pathlib import Path

import pytest
import grouping

# the sample's own figures: test_long is expected to take longest, though collected last
grouping.EXPECTED_SECONDS.update({"test_order.py::test_long": 600.0})


@pytest.fixture(scope="session")
def minio():
    return None


@pytest.fixture(autouse=True)
def started(request):
    with open(Path(__file__).with_name("started.log"), "a") as fh:
        fh.write(f"{time.monotonic()} {request.node.name}\\n")
'''

ORDER_TESTS = '''
import time
import pytest

@pytest.mark.parametrize("i", range(4))
def test_on_the_server(minio, i):
    time.sleep(0.05)

@pytest.mark.parametrize("i", range(8))
def test_short(i):
    time.sleep(0.05)

def test_long():
    time.sleep(0.05)
'''


def parallel_slow_pass_flags() -> list[str]:
    """The pytest options of the Makefile's parallel slow pass (`make test`), as it gives them."""
    import shlex
    makefile = (TESTS.parent / "Makefile").read_text()
    line = next(ln for ln in makefile.splitlines() if '"not alone"' in ln and "test-fast" not in ln)
    argv = shlex.split(line.split("pytest", 1)[1].split("$(PYTEST_ARGS)")[0])
    return [a for a in argv if a not in ("-m", "not alone", "-ra") and not a.startswith("--durations")]


def test_the_parallel_pass_starts_the_longest_work_first(tmp_path):
    """tests/grouping.py's longest_first, under the Makefile's own options for the parallel slow pass:
    a test expected to take longest (grouping.EXPECTED_SECONDS) starts at once though it is collected
    after thirteen others, where xdist alone would hand it out last."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    alone: x\n    xdist_group(name): x\n")
    (tmp_path / "conftest.py").write_text(ORDER_CONFTEST)
    (tmp_path / "test_order.py").write_text(ORDER_TESTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(TESTS), os.environ.get("PYTHONPATH"))))}
    flags = parallel_slow_pass_flags()
    assert "--dist" in flags and "--no-loadscope-reorder" in flags, flags  # else xdist puts the biggest group first
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "grouping", "-p", "no:cacheprovider", *flags, "-q"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    started = [ln.split()[1] for ln in sorted((tmp_path / "started.log").read_text().splitlines(),
                                               key=lambda ln: float(ln.split()[0]))]
    assert len(started) == 13, started
    workers = int(flags[flags.index("-n") + 1])  # the first of each worker's units start together
    assert "test_long" in started[:workers], f"the longest test was not among the first {workers} started: {started}"


def test_longest_first_keeps_a_groups_tests_together_and_in_order():
    from grouping import longest_first
    tests = [("a", "a", 1.0), ("g1", "g", 2.0), ("b", "b", 10.0), ("g2", "g", 3.0), ("c", "c", 4.0)]
    assert longest_first(tests) == ["b", "g1", "g2", "c", "a"]


WRITES_THE_CACHE = '''
import os
from pathlib import Path

from refbench import pins

CACHE = Path(os.environ["XDG_CACHE_HOME"]) / "refbench"

def test_sets_up_a_tool():
    pins.cached_path("minio").write_text("what make setup writes")

def test_installs_an_implementation():
    if os.environ.get("SAMPLE_WRITES") == "builds":
        (CACHE / "builds" / "kubo").mkdir(parents=True, exist_ok=True)
    if os.environ.get("SAMPLE_WRITES", "").startswith("crash:"):  # a crash report naming a checkout
        (CACHE / "crashes").mkdir(parents=True, exist_ok=True)
        where = os.environ["SAMPLE_WRITES"].split(":", 1)[1]
        (CACHE / "crashes" / f"crash-{os.getpid()}.txt").write_text(f'File "{where}/refbench/cli.py", line 71')
    if os.environ.get("SAMPLE_WRITES") == "1":
        (CACHE / "implementations" / "s3cmd-2.4.0-x").mkdir(parents=True, exist_ok=True)
        (CACHE / "implementations" / "s3cmd-2.4.0-x" / "impl.json").write_text(str(os.getpid()))
'''


def test_a_session_that_writes_the_users_cache_fails_naming_what_it_wrote(tmp_path):
    """tests/conftest.py's check, in a session of its own whose user cache is a directory of the
    test's (XDG_CACHE_HOME): under CI=true a test that installs there fails the session, naming the
    path; the set-up tools `make setup` writes there do not; without CI it is a warning."""
    user_cache = tmp_path / "xdg" / "refbench"
    (user_cache / "builds").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "test_writes.py").write_text(WRITES_THE_CACHE)
    # the inner session is a controller of its own, whatever this one runs in (an xdist worker's
    # variables would make it skip the check, as a worker does)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
           "XDG_CACHE_HOME": str(tmp_path / "xdg"), "CI": "true",
           "PYTHONPATH": os.pathsep.join(filter(None, (str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH"))))}

    def session(writes: str, **more: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-p",
                               "no:xdist", "-q", "--rootdir", str(tmp_path / "work"), str(tmp_path / "work")],
                              cwd=tmp_path / "work", env={**env, "SAMPLE_WRITES": writes, **more},
                              capture_output=True, text=True, timeout=300)
    clean = session("0")
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-3000:]
    wrote = session("1")
    assert wrote.returncode == 1 and "2 passed" in wrote.stdout, wrote.stdout[-3000:] + wrote.stderr[-3000:]
    assert f"wrote under the user's cache {user_cache}" in wrote.stdout, wrote.stdout[-3000:]
    assert "implementations/s3cmd-2.4.0-x" in wrote.stdout and "minio" not in wrote.stdout.split("user's cache")[1]
    builds = session("builds", CI="true")  # where the user's other runs write: reported, not failed
    assert builds.returncode == 0 and "warning: the test session wrote" in builds.stdout, builds.stdout[-3000:]
    assert "builds/kubo" in builds.stdout
    theirs = session("crash:/work/another-checkout", CI="true")  # another worktree's run crashed meanwhile
    assert theirs.returncode == 0 and "warning: the test session wrote" in theirs.stdout, theirs.stdout[-3000:]
    ours = session(f"crash:{TESTS.parent}", CI="true")  # a run of this checkout's crashed into the user's cache
    assert ours.returncode == 1 and "crashes/crash-" in ours.stdout, ours.stdout[-3000:]
    local = session("1", CI="")
    assert local.returncode == 0 and "warning: the test session wrote under the user's cache" in local.stdout, \
        local.stdout[-3000:]
