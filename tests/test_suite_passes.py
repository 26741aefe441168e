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
