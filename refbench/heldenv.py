"""What refbench was started with, kept out of its own /proc/PID/environ.

Every process refbench starts runs as refbench's user and can read /proc/<refbench's pid>/environ,
which is the environment the process was *executed* with: removing a name from os.environ, or
giving a child an allow-listed environment (backends/process.child_env), does not change it. A
job-level GITHUB_TOKEN, the user's AWS secrets or a history URL with a password would so be one
`cat` away from a pull request's benchmarked code (issue 54).

So the program's doors (bench.py, `python -m refbench`, the `refbench` console script) call
start() before anything else: where the environment holds any name shown() does not keep, refbench
executes itself again, once, with only the names it keeps, and hands the rest to the new image in a
memory file (memfd) that it reads and closes before any other code runs; cli.main puts them back
(restore()) once its imports ran. Inside, os.environ then reads as it was, so nothing else in
refbench changes; but the held names are back in Python's mapping only, not in the C environment
that a child started without an environment of its own inherits.
The process is also made non-dumpable, so that a child of the same (non-root) user cannot read
its memory (/proc/PID/mem) either. In-process callers (tests, cli.main) are not re-executed.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Mapping

#: what a process refbench starts for a run sees of refbench's environment (backends/process.child_env:
#: hyperfine and the benchmarked commands, servers, setup commands), and so what refbench's own
#: executed environment keeps, the same list, so the two cannot part
PASS_ENV = frozenset((
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR", "TEMP", "TMP",
    "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR",
    "GOROOT", "GOPATH", "GOCACHE", "GOMODCACHE", "GOFLAGS", "GOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE",
    "GONOPROXY", "GOTOOLCHAIN", "GOMAXPROCS", "GOGC", "GOMEMLIMIT", "GODEBUG", "GOTRACEBACK", "GOAMD64",
))
PASS_PREFIXES = ("LC_",)
#: beside those, the interpreter's own settings, which must be there when Python starts, before start()
#: runs, and what the C libraries refbench loads read with getenv() (no secrets): the BLAS's
#: (OPENBLAS_CORETYPE keeps an old OpenBLAS from wrong results on some processors) and libpq's
#: connection settings (the nightly's history: PGSSLMODE=verify-full lost was TLS unverified)
SHOWN_PREFIXES = (*PASS_PREFIXES, "PYTHON", "OPENBLAS_", "OMP_", "MKL_")
# a venv, where a shared libpython is found (actions/setup-python's builds may need it to start),
# and the git GitPython runs, which refbench's own import names (refbench/__init__.py): no secrets
INTERPRETER = frozenset(("VIRTUAL_ENV", "LD_LIBRARY_PATH", "GIT_PYTHON_GIT_EXECUTABLE",
                         # OpenSSL's and libpq's, read in-process with getenv(); PGPASSWORD stays held
                         "SSL_CERT_FILE", "SSL_CERT_DIR", "PGSSLMODE", "PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY",
                         "PGSSLCRL", "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE",
                         "PGSERVICEFILE", "PGPASSFILE", "PGCONNECT_TIMEOUT", "PGTARGETSESSIONATTRS"))
FD_ENV = "REFBENCH_HELD_ENV_FD"  # the memory file's descriptor in the executed image: a number, no secret
_PR_SET_DUMPABLE = 4
_started = False  # start() has run in this image
HELD: frozenset[str] = frozenset()  # the names this image took back (_take_back): kept from every child
_pending: dict[str, str] = {}  # what _take_back read and restore() has not yet put back


def shown(name: str) -> bool:
    """Whether `name` may stay in the environment refbench is executed with."""
    return name in PASS_ENV or name.startswith(SHOWN_PREFIXES) or name in INTERPRETER


def held(environ: dict[str, str]) -> dict[str, str]:
    """The names start() keeps out of the executed environment."""
    return {k: v for k, v in environ.items() if not shown(k)}


def passed(environ: Mapping[str, str], also: frozenset[str] = frozenset()) -> dict[str, str]:
    """What a child refbench starts gets of `environ`: the allow-list, and the names in `also`
    (backends/process.child_env's, and a probe server's: one rule)."""
    return {k: v for k, v in environ.items() if k in PASS_ENV or k in also or k.startswith(PASS_PREFIXES)}


def blanked() -> dict[str, str]:
    """Each name this image holds, emptied: for a library that starts its children with a copy of
    os.environ and lets one add to it but not take away (GitPython's Git.update_environment), so
    that git, started beside a pull request's build, gets no secret (the re-reading's N3)."""
    return dict.fromkeys(HELD, "")


def start(argv: list[str] | None = None, executable: str | None = None) -> None:
    """The door's first call. In the image start() executed: read back what it held (the process
    made non-dumpable first; restore() puts the names back after the door's imports). Otherwise,
    where anything would be held: execute `executable` (default: this interpreter) with `argv`
    (default: how this process was started, sys.orig_argv) and only the shown names. Returns only
    when there is nothing to hold, or in the executed image; where the memory file cannot be made,
    the process goes on as it was started and says so in one line."""
    global _started
    if _started:  # a door, then cli.main (which a console script of an older install calls directly)
        return
    _started = True
    if FD_ENV in os.environ:
        _take_back(os.environ.pop(FD_ENV))
        return
    keep = held(dict(os.environ))
    if not keep:
        _not_dumpable()
        return
    try:
        fd = os.memfd_create("refbench-env", 0)  # no MFD_CLOEXEC: the executed image reads it
    except (AttributeError, OSError) as e:
        print(f"refbench: warning: cannot hold {', '.join(sorted(keep))} out of the commands' reach "
              f"(no memory file: {e}); they can read them in /proc/{os.getpid()}/environ", file=sys.stderr)
        _not_dumpable()
        return
    os.write(fd, json.dumps(keep).encode())
    os.lseek(fd, 0, os.SEEK_SET)
    env = {k: v for k, v in os.environ.items() if shown(k)}
    env[FD_ENV] = str(fd)
    argv = list(sys.orig_argv if argv is None else argv)
    executable = executable or sys.executable
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(executable, [executable, *argv[1:]], env)


def _take_back(fd_text: str) -> None:
    """Read the held names from the memory file and close it, non-dumpable first (the window in
    which another process of the user could open the memfd, or read this one's memory, is the
    interpreter's start alone); restore() puts them back."""
    global HELD, _pending
    _not_dumpable()
    try:
        with os.fdopen(int(fd_text), "rb") as fh:
            _pending = json.loads(fh.read().decode())
    except (OSError, ValueError) as e:
        sys.exit(f"refbench: error: cannot read back the environment refbench held ({FD_ENV}={fd_text!r}): {e}")
    HELD = frozenset(_pending)


def restore() -> None:
    """The held names back into os.environ's mapping (keep_from_children), once, after the door
    imported the command line: GitPython runs `git version` with a copy of os.environ when it is
    imported, which would hand them to that git (the third reading of issue 54, G1)."""
    global _pending
    keep_from_children(_pending)
    _pending = {}


def keep_from_children(names: dict[str, str]) -> None:
    """`names` into os.environ as Python reads it, not into the C environment (no putenv): a child
    started without an environment of its own inherits the C one, and such children run beside the
    benchmarked commands for a whole hyperfine call (a process group's guard, perf, curl), dumpable,
    where the code under test could read them in /proc/<child>/environ (the review of issue 54,
    F1). A child given one (child_env, a build's environment) gets only what it is given."""
    data = os.environ._data  # noqa: SLF001 — os._Environ's mapping behind putenv; CPython's since 3.0
    for k, v in names.items():
        data[os.environ.encodekey(k)] = os.environ.encodevalue(v)


def _not_dumpable() -> None:
    """PR_SET_DUMPABLE 0: /proc/PID/mem, environ and the like become root's, so a child of the
    same non-root user cannot read refbench's memory, where the held names now live (root can:
    it can read everything). Reset by execve, so the children themselves stay dumpable."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
