"""Issue 54, 4: no secret refbench was started with is readable by the commands it starts, through
/proc/<refbench's pid>/environ (refbench.heldenv: the doors execute refbench again without them)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from refbench import heldenv

ROOT = Path(__file__).resolve().parent.parent
SECRETS = {"GITHUB_TOKEN": "ghs_secret-54", "AWS_SECRET_ACCESS_KEY": "aws-secret-54",
           "REFBENCH_HISTORY_URL": "postgresql://u:hunter2-54@db.invalid/h", "MY_DEPLOY_PASSWORD": "pw-54"}


def _planted_go(tmp_path: Path) -> tuple[Path, Path]:
    """A `go` first on PATH that copies its parent's (refbench's) /proc environ into a file, as
    a benchmarked command could: refbench's doctor runs `go version`."""
    bin_dir, marker = tmp_path / "bin", tmp_path / "parent-environ"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(f"#!/bin/sh\ncat /proc/$PPID/environ >> {marker}\ncat /proc/$$/environ >> {marker}.own\n"
                  "echo go version go1.26.8 linux/amd64\n")
    go.chmod(0o755)
    return bin_dir, marker


@pytest.mark.parametrize("door", [[str(ROOT / "bench.py")], ["-m", "refbench"]], ids=["bench.py", "python -m"])
def test_a_child_reads_no_secret_in_refbenchs_proc_environ(tmp_path, door):
    bin_dir, marker = _planted_go(tmp_path)
    env = {**os.environ, **SECRETS, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, *door, "doctor"], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert marker.is_file(), (proc.returncode, proc.stderr)  # the planted go ran, as refbench's child
    seen = marker.read_bytes().decode(errors="replace")
    assert "PATH=" in seen  # it read refbench's environ, which keeps what every child gets anyway
    assert [k for k, v in SECRETS.items() if v in seen] == [], seen
    assert heldenv.FD_ENV + "=" in seen  # the executed image, not the one the secrets were given to
    own = Path(f"{marker}.own").read_bytes().decode(errors="replace")  # and doctor gives its go none either
    assert "PATH=" in own and [k for k, v in SECRETS.items() if v in own] == [], own


_CHILD = (
    "import ctypes, os, subprocess, sys\n"
    "from refbench import heldenv\n"
    "heldenv.start()\n"
    "import git\n"  # a door's imports run before restore(): GitPython's own git version among them
    "heldenv.restore()\n"
    "from refbench.backends import process\n"
    # every environ on the machine, read by a command in a process group with its guard (a child of
    # refbench started with no environment of its own, as perf and curl are too)
    "scan = process.run_group(['sh', '-c', 'cat /proc/[0-9]*/environ 2>/dev/null; cat /proc/self/environ'],\n"
    "                         env={'PATH': '/usr/bin:/bin'}, capture_output=True).stdout.decode(errors='replace')\n"
    "bare = subprocess.run(['sh', '-c', 'cat /proc/self/environ'], capture_output=True).stdout.decode(errors='replace')\n"
    "print('SCAN', [k for k, v in os.environ.items() if k in %r and v in scan + bare])\n"
    # what refbench hands its children explicitly: a probe server (beside every timed run), the
    # pinned tools' builds (beside a PR's build), git through GitPython (the re-reading's N1-N3)
    "from pathlib import Path\n"
    "import git, tempfile\n"
    "from refbench import cli, daemon, pins, sources\n"
    "cli.read_environment()\n"
    "tmp = Path(tempfile.mkdtemp())\n"
    "server = daemon.ProbeServer((), os.getpid(), tmp / 'probes', None)\n"
    "probe_env = open(f'/proc/{server.proc.pid}/environ', 'rb').read().decode(errors='replace')\n"
    "server.close()\n"
    "build = '\\n'.join(f'{k}={v}' for k, v in pins.build_env().items())\n"
    "subprocess.run(['git', 'init', '-q', '--bare', str(tmp / 'c')], check=True, env={'PATH': os.environ['PATH']})\n"
    "repo = git.Repo(tmp / 'c')\n"
    "repo.git.update_environment(**sources.gitpython_env(tmp / 'c'))\n"
    "gitenv = repo.git.execute(['sh', '-c', 'cat /proc/self/environ'])\n"
    "print('GIVEN', [k for k, v in os.environ.items() if k in %r and v and v in probe_env + build + gitenv],\n"
    "      'PATH=' in probe_env and 'PATH=' in build and 'GIT_DIR=' in gitenv)\n"
    # a clone opened and fetched as a build opens it: every git it runs (PATH's first is a recorder)
    "subprocess.run(['/usr/bin/git', 'init', '-q', '--bare', str(tmp / 'origin')], check=True)\n"
    "clone = sources.Clone(tmp / 'builds' / 'clones', str(tmp / 'origin'))\n"
    "clone.repo()\n"
    "clone.fetch()\n"
    "ran = open(os.environ['GIT_RECORD'], 'rb').read().decode(errors='replace')\n"
    "print('GITS', ran.count('PATH='), [k for k, v in os.environ.items() if k in %r and v and v in ran])\n"
    "print('ENV', os.environ.get('GITHUB_TOKEN'), os.environ.get('MY_DEPLOY_PASSWORD'), heldenv.FD_ENV in os.environ)\n"
    "print('DUMPABLE', ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))\n"  # PR_GET_DUMPABLE
    "sys.stdout.write(open(f'/proc/{os.getpid()}/environ', 'rb').read().decode(errors='replace'))\n"
    % (tuple(SECRETS), tuple(SECRETS), tuple(SECRETS)))


def test_refbench_keeps_what_it_held_in_os_environ_and_is_not_dumpable(tmp_path):
    """Inside, nothing changes: os.environ is what refbench was started with (the comment command
    reads GITHUB_TOKEN from it); but neither the kernel's record of the start nor any process
    refbench starts holds the held names: not a process group's guard, which inherits the C
    environment beside the benchmarked command (the issue's review, F1), nor any other child
    started without an environment of its own. The process is non-dumpable, so that a non-root
    child cannot read them from its memory."""
    bin_dir, record = tmp_path / "bin", tmp_path / "gits"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(f"#!/bin/sh\ncat /proc/$$/environ >> {record}\nprintf '\\n' >> {record}\n"
                                 'exec /usr/bin/git "$@"\n')
    (bin_dir / "git").chmod(0o755)
    # values of this test's own: the scan reads every process on the machine, and a test beside it
    # (another worker's) may be holding the shared ones in a process of its own that moment
    own = {k: f"{v}-{uuid.uuid4().hex}" for k, v in SECRETS.items()}
    env = {**os.environ, **own, "PYTHONPATH": str(ROOT), "GIT_RECORD": str(record),
           "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"ENV {own['GITHUB_TOKEN']} {own['MY_DEPLOY_PASSWORD']} False" in proc.stdout
    assert "SCAN []" in proc.stdout, proc.stdout  # no process, not even a child with no env of its own
    assert "GIVEN [] True" in proc.stdout, proc.stdout  # nor one it gives an environment of its own
    gits = re.search(r"GITS (\d+) (\[.*\])", proc.stdout)
    assert gits and int(gits.group(1)) >= 3 and gits.group(2) == "[]", proc.stdout  # GitPython's gits: none either
    assert "DUMPABLE 0" in proc.stdout
    environ = proc.stdout.split("DUMPABLE 0", 1)[1]
    assert [k for k, v in own.items() if v in environ] == [] and "PATH=" in environ


def test_shown_names_are_the_childrens_allow_list_and_the_interpreters():
    from refbench.backends import process
    assert process.PASS_ENV is heldenv.PASS_ENV  # one list: what a child gets is what refbench shows
    assert heldenv.held({"PATH": "/bin", "LC_ALL": "C", "PYTHONPATH": "x", "GITHUB_TOKEN": "t", "CI": "true"}) == \
        {"GITHUB_TOKEN": "t", "CI": "true"}


def test_what_c_libraries_read_in_process_stays_and_a_password_does_not():
    """The BLAS's and libpq's settings are read with getenv() inside refbench (the fourth reading):
    they stay in the executed environment; PGPASSWORD and tokens do not."""
    for name in ("OPENBLAS_CORETYPE", "OMP_NUM_THREADS", "PGSSLMODE", "PGSSLROOTCERT", "SSL_CERT_FILE", "PGHOST"):
        assert heldenv.shown(name), name
    for name in ("PGPASSWORD", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "REFBENCH_HISTORY_URL"):
        assert not heldenv.shown(name), name


def test_nothing_held_means_no_second_execution():
    """start() returns (no execve) when every name is shown: a caller with a clean environment pays
    no second interpreter start."""
    code = ("import os, sys\n"
            "def refuse(*a):\n    sys.exit('executed again with nothing to hold')\n"
            "os.execve = refuse\n"
            "from refbench import heldenv\n"
            "heldenv.start()\n"
            "print('GO ON', heldenv.FD_ENV in os.environ)\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "HOME": os.environ.get("HOME", "/root")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and "GO ON False" in proc.stdout, proc.stderr
