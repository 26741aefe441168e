"""Processes refbench starts: each in a process group of its own, stopped as a group, and tied to
refbench's life (servers by a parent-death signal, command groups by a guard), so neither a
Ctrl-C nor a SIGKILL of refbench leaves one behind."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from .. import paths
from ..heldenv import PASS_ENV, passed  # noqa: F401 (PASS_ENV: the allow-list, named here too)

# What a process refbench starts for a run (hyperfine and the benchmarked commands, setup
# commands, MinIO, kubo) sees of refbench's own environment: an allow-list (refbench.heldenv, which
# also keeps everything else out of refbench's own /proc/PID/environ), because that environment can
# hold GITHUB_TOKEN, the user's AWS secrets or the history database's password, and the benchmarked
# code is a pull request's. REFBENCH_PASS_ENV (names, space or comma separated, read once at the
# command line: MachineSettings.pass_env) lets more through on purpose.
# a user's own bucket (-b): the commands need the user's credentials and proxy for it, nothing else
USER_BUCKET_ENV = frozenset((
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
    "AWS_DEFAULT_REGION", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CA_BUNDLE",
    "AWS_ENDPOINT_URL", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
))


def pass_env_names(text: str) -> frozenset[str]:
    """REFBENCH_PASS_ENV's names: space or comma separated."""
    return frozenset(text.replace(",", " ").split())


def child_env(also: frozenset[str] = frozenset(), env: dict | None = None,
              extra: frozenset[str] = frozenset()) -> dict[str, str]:
    """The allow-listed part of `env` (default: the environment the command line read,
    paths.Layout.environ), plus the names in `also` (what a
    backend's commands need) and `extra` (the run's MachineSettings.pass_env, which the runner and
    the backends' servers are given)."""
    return passed(paths.layout().environ if env is None else env, also | extra)


def die_with_parent() -> None:
    """preexec_fn for servers refbench starts: if refbench is killed outright (SIGKILL, a CI
    timeout), the kernel sends the server SIGTERM rather than leave it running forever."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def server_preexec(cpus: frozenset[int] | None) -> None:
    """preexec_fn for a server: dies with refbench, and runs on `cpus` when the run pins it."""
    die_with_parent()
    if cpus:
        os.sched_setaffinity(0, cpus)


def stop_process(proc: subprocess.Popen, timeout: float = 10) -> None:
    """SIGTERM the process's group, SIGKILL it if it has not exited within `timeout`."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)


def run_group(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run in a process group of its own. On any exception (Ctrl-C, SIGTERM turned
    into KeyboardInterrupt) the whole group is killed and reaped before the exception goes on,
    so no orphaned upload can write under the prefix while cleanup removes it."""
    capture = kwargs.pop("capture_output", False)
    if capture:
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
    cpus = kwargs.pop("cpus", None)
    if cpus:
        kwargs["preexec_fn"] = lambda: os.sched_setaffinity(0, cpus)
    proc = subprocess.Popen(argv, start_new_session=True, **kwargs)
    guard = group_guard(proc.pid)
    try:
        out, err = proc.communicate()
    except BaseException:
        for sig, wait in ((signal.SIGINT, 5), (signal.SIGTERM, 5), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):  # grandchildren that outlived the leader
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    finally:
        release_guard(guard)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


# The group's guard: a shell blocked reading a pipe only refbench holds open. If refbench dies,
# even by SIGKILL, the pipe closes, `read` fails and the guard kills the whole group: hyperfine
# and the benchmarked command with it (a parent-death signal reaches only hyperfine, whose
# children would finish their round, or with -b keep writing to the user's bucket). When the
# group is done, refbench writes a line: `read` succeeds and the guard exits without killing.
_GUARD = 'read -r _ || kill -s KILL -- "-$1" 2>/dev/null'


def group_guard(pgid: int) -> subprocess.Popen | None:
    try:
        return subprocess.Popen(["sh", "-c", _GUARD, "refbench-guard", str(pgid)], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:  # no sh: the group runs unguarded, as before
        return None


def release_guard(guard: subprocess.Popen | None) -> None:
    if guard is None:
        return
    with contextlib.suppress(OSError, ValueError):
        guard.stdin.write(b"done\n")
        guard.stdin.close()
    try:
        guard.wait(timeout=10)
    except subprocess.TimeoutExpired:
        guard.kill()
        guard.wait()


def settle_page_cache(path: str | os.PathLike) -> bool:
    """Put a binary's pages in the page cache the one way every build's get there: written back
    (fsync: dirty pages cannot be dropped), dropped (POSIX_FADV_DONTNEED), then read back whole
    and in order, so that readahead lays the file out in large folios the same way for each.

    Why (issue 34): byte-identical binaries started from page-cache states of their own. A binary
    just built or restored sits dirty in the write path's folios, one cached long ago in what
    exec's faults brought in (kernel 6.18, ext4, a 23 MB s5cmd: 100% against 24% of its pages in
    large folios). A short step's start-up then cost one build more than its twin for the whole
    run: 3-6% less CPU for a contender just built (small files / remove), up to 11% more under a
    cache-evicting load (large file / remove, 3 of 8 A/A runs): false verdicts the statistics
    cannot see, since they hold for every round. Settled so, both files show the
    same folio layout (tests/test_page_cache.py) and the same A/A runs measure alike
    (tests/test_aa_bias.py; benchmarks/aa_bias.py --just-built for the figures). Pages a
    running process maps stay; a missing file is no error (False)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while os.read(fd, 1 << 20):
            pass
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
