"""Pinned tools a run installs on first use, in the background, while it resolves and builds.

A first run on a new machine used to wait for `refbench setup` to build every tool before it did
anything: MinIO alone is a 3-minute Go build, and nothing needs the server before the first step
(issue 53). So `make setup` leaves the servers (MinIO, toxiproxy) out, and a run that needs one
this machine lacks builds it here, exactly as `refbench setup` would (pins.install: the pinned
version with the pinned Go, refused unless it is the pinned bytes, placed in the cache), in a
thread of its own that overlaps the refs' builds and the fixtures, and waits for it only before
the backend starts. Go's own parallelism shares the two cores with the refs' builds; what the
overlap buys is the downloads, which are most of a cold build.

An install that fails stops the run with one line naming the tool and what go could not fetch,
as setup would. A run interrupted meanwhile kills the build's process group and removes its
temporary directory before it exits (Installs.close).
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from . import cleanpath, pins
from .backends.process import group_guard, release_guard
from .errors import RefbenchError

#: the tools a run may install itself: pinned Go builds, not the timer (hyperfine comes from a
#: wheel in setup) and not Go itself
INSTALLABLE = frozenset(("minio", "toxiproxy-server", "refbench-s3restore"))


def why_not_installable(tool: str) -> str | None:
    """Why this run cannot install `tool` on first use, or None when it can."""
    if tool not in INSTALLABLE:
        return f"{tool} is not one refbench builds"
    if pins.pin_for(tool) is None and not pins.unpinned_allowed():
        return f"no pin of {tool} for {pins.current_platform()}"
    if not cleanpath.go():
        return "no Go to build it with"
    return None


class BackgroundGo(pins.GoRunner):
    """pins.GoRunner whose commands run in a process group of their own, tied to refbench's life
    (process.group_guard: the group is killed if refbench dies), and stoppable from another thread
    (stop): an interrupted run must not wait three minutes for a build it no longer needs, nor leave
    it running. process.run_group does the same but keeps its process to itself, which stop needs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self.stopped = False

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        text = kw.pop("text", False)
        kw.pop("capture_output", None)
        with self._lock:
            if self.stopped:
                raise RefbenchError("stopped before it started")
            # no preexec_fn (unsafe from a second thread): the group's guard kills it if refbench dies
            proc = self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text,
                                                 start_new_session=True, **kw)
        guard = group_guard(proc.pid)
        try:
            out, err = proc.communicate()
        finally:
            release_guard(guard)
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


# what go says when it cannot reach the module proxy: the module it was fetching comes first
_FETCH = re.compile(r"(?m)^go: (?:downloading )?(\S+@[^\s:]+)?.*?(dial tcp|no such host|connection refused|"
                    r"i/o timeout|TLS handshake|unexpected EOF|GOPROXY=off|proxyconnect)")


def one_line(tool: str, error: RefbenchError) -> RefbenchError:
    """The install's failure as the run's one line: where go could not fetch, what it could not
    fetch (the detail keeps go's own words)."""
    m = _FETCH.search(error.detail or "")
    if m:
        what = m.group(1) or f"{tool}'s modules"
        return RefbenchError(f"cannot install {tool} on first use: could not fetch {what} from the Go module "
                             f"proxy ({m.group(2)}); run `refbench setup` where the proxy is reachable",
                             detail=error.detail)
    return RefbenchError(f"cannot install {tool} on first use: {error}", detail=error.detail)


@dataclass
class Installs:
    """The first-use installs of one run: started at once, in one background thread (one go
    build at a time beside the refs' own), waited for before the backend starts."""
    tools: tuple[str, ...]
    say: Callable[[str], None]
    go: BackgroundGo = field(default_factory=BackgroundGo)
    error: BaseException | None = None
    _thread: threading.Thread | None = None

    def start(self) -> "Installs":
        if self.tools:
            self._thread = threading.Thread(target=self._install_all, name="refbench-first-use", daemon=True)
            self._thread.start()
        return self

    def _install_all(self) -> None:
        go = cleanpath.go()
        for tool in self.tools:
            if self.go.stopped:
                return
            t0 = time.monotonic()
            try:
                pins.install(tool, go, say=lambda m: self.say(f"{m} (first use, while the refs build)"), runner=self.go)
                self.say(f"{tool} built in {time.monotonic() - t0:.0f} s (first use)")
            except RefbenchError as e:
                self.error = e if self.go.stopped else one_line(tool, e)
                return
            except BaseException as e:  # noqa: BLE001 — handed to the run's thread, which raises it
                self.error = e
                return

    def wait(self) -> None:
        """Block until every install is done; raise the first failure."""
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        """Stop what is still building (its process group killed, its temporary directory removed
        by pins.install as the failure unwinds) and wait for the thread to end."""
        self.go.stop()
        if self._thread is not None:
            self._thread.join(timeout=60)


@contextlib.contextmanager
def installing(missing: Sequence[str], say: Callable[[str], None]) -> Iterator[Installs]:
    """The run's installs for the block: started on entry, stopped on exit (an interrupted or
    failed run does not wait for them)."""
    installs = Installs(tuple(missing), say).start()
    try:
        yield installs
    finally:
        installs.close()
