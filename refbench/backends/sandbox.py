"""A network and mount namespace of the run's own, with only loopback up.

kubo runs online the way its users run it (a DHT, a swarm, providing), and a kubo version may
change its defaults at any time; refbench must still never send a packet off the machine. So an
online daemon, and every command that talks to it, runs inside a network namespace whose only
interface is `lo`: whatever the daemon tries to dial outside fails at once, with no route. The
same namespace has a private mount namespace, where a repository can be restored through an
overlay mount (refbench.backends.snapshot) that nobody outside sees.

The namespace is held by one small process (`unshare ... cat`) that reads a pipe only refbench
holds open: when refbench exits, even by SIGKILL, the pipe closes, the holder exits, and with
the last process inside it the kernel removes the namespace and every mount in it. Nothing is
named, nothing is written to /run/netns, nothing needs a sweep.

As root the namespaces are made directly; otherwise through a user namespace (unprivileged user
namespaces, as on common CI runners). Where neither works, `Sandbox.open` raises, saying why:
an online daemon is refused, never run on the real network.
"""
from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
from dataclasses import dataclass

from ..cleanpath import clean_path
from ..errors import RunError

# inside: bring loopback up, say so, then wait for refbench's end of the pipe to close
_HOLD = 'ip link set lo up && echo ready && exec cat >/dev/null'
TOOLS = ("unshare", "nsenter", "ip")


@dataclass
class Sandbox:
    holder: subprocess.Popen
    user: bool  # made through a user namespace (refbench is not root)

    @property
    def pid(self) -> int:
        return self.holder.pid

    @classmethod
    def open(cls) -> "Sandbox":
        """A fresh namespace pair, loopback up; RunError naming the reason when none can be made."""
        missing = [t for t in TOOLS if not shutil.which(t, path=sbin_path())]
        if missing:
            raise RunError(f"no network namespace: {', '.join(missing)} not found (util-linux, iproute2)")
        user = os.geteuid() != 0
        argv = [shutil.which("unshare", path=sbin_path()), "--net", "--mount", "--propagation", "private",
                *(["--user", "--map-root-user"] if user else []), "--", "sh", "-c", _HOLD]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={"PATH": sbin_path()}, start_new_session=True)
        line = proc.stdout.readline().strip()
        if line != "ready":
            proc.stdin.close()
            err = proc.stderr.read().strip().splitlines()
            proc.wait(timeout=10)
            raise RunError(f"no network namespace: {(err or ['unshare failed'])[-1]}")
        return cls(proc, user)

    def prefix(self) -> tuple[str, ...]:
        """The argv prefix that runs a command inside (nsenter keeps refbench's credentials in a
        user namespace, so files the command writes belong to the user outside too)."""
        return (shutil.which("nsenter", path=sbin_path()) or "nsenter", "-t", str(self.pid), "--net", "--mount",
                *(["--user", "--preserve-credentials"] if self.user else []), "--")

    def close(self) -> None:
        """Close the holder's pipe: it exits, and the namespaces go with the last process inside."""
        if self.holder.poll() is None:
            with contextlib.suppress(OSError):
                self.holder.stdin.close()
            try:
                self.holder.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.holder.kill()
                self.holder.wait(timeout=10)
        for fh in (self.holder.stdout, self.holder.stderr):
            with contextlib.suppress(OSError):
                fh.close()


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why no sandbox can be made on this machine, or None when one can (probed once)."""
    try:
        box = Sandbox.open()
    except (RunError, OSError) as e:
        return str(e)
    box.close()
    return None


def sbin_path() -> str:
    """PATH with the sbin directories, where ip lives on Debian for non-root users."""
    parts = clean_path().split(":")
    return ":".join(dict.fromkeys(parts + ["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"]))
