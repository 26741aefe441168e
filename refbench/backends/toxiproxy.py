"""The shaper between the commands and an S3 server on loopback: a toxiproxy server refbench starts
and stops, with one proxy per network profile the run uses (refbench/network.py).

toxiproxy (github.com/Shopify/toxiproxy, installed by `refbench setup`) is a TCP proxy in user
space: every connection to a proxy's port gets a connection of its own to the upstream, and its
toxics delay and rate-limit the bytes each way. The kernel here has no netem, and a proxy needs no
privileges. Every port is one toxiproxy binds itself (127.0.0.1:0), so no other process can take
it between a choice and its use: each proxy's, and the API's (toxiproxy does not say which port
it got, so refbench reads its listening sockets from /proc, minio.listening_ports, and takes the
one that answers with the sentinel proxy this very process was started with, -config).
Upstreams and listeners are loopback addresses only.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import RunError
from ..network import NetworkProfile
from ..tools import find_tool
from .minio import listening_ports
from .process import child_env, server_preexec, stop_process

log = logging.getLogger(__name__)

TOXIPROXY = "toxiproxy-server"  # the name `refbench setup` links it under
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def loopback_host(url: str) -> bool:
    """Whether an endpoint URL (or host:port) names this machine's loopback interface."""
    host = urlsplit(url if "//" in url else f"//{url}").hostname or ""
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def host_port(url: str) -> str:
    """host:port of an endpoint URL, the scheme's port where it names none."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


class Toxiproxy:
    """A toxiproxy server on loopback, with a proxy per network profile."""

    def __init__(self, workdir: Path, binary: str | None = None, cpus: frozenset[int] | None = None,
                 pass_env: frozenset[str] = frozenset()):
        self.pass_env = pass_env  # more names the server sees (MachineSettings.pass_env)
        self.binary = binary or find_tool(TOXIPROXY)
        if not self.binary:
            raise RunError(f"{TOXIPROXY} not found (tools/bin or PATH): network profiles need it; run "
                           "`refbench setup`, or --network loopback")
        self.workdir = Path(workdir)
        self.cpus = cpus  # the server's CPUs when the run separates them (the shaper stands for the network)
        self.proc: subprocess.Popen | None = None
        self.api = ""
        self.proxies: dict[str, str] = {}  # profile name -> 127.0.0.1:PORT
        self._dir: Path | None = None

    # ---- process -----------------------------------------------------------------------------
    def start(self, timeout: float = 30) -> "Toxiproxy":
        self._dir = Path(tempfile.mkdtemp(prefix="refbench-toxiproxy-", dir=self.workdir))
        sentinel = f"refbench-{secrets.token_hex(6)}"  # only this process answers with it
        config = self._dir / "config.json"
        config.write_text(json.dumps([{"name": sentinel, "listen": "127.0.0.1:0", "upstream": "127.0.0.1:9",
                                       "enabled": False}]))
        log_path = self._dir / "toxiproxy.log"
        env = {**child_env(extra=self.pass_env), "LOG_LEVEL": "warn"}  # its trace log writes a line per chunk of data
        if self.cpus:
            env["GOMAXPROCS"] = str(len(self.cpus))
        with open(log_path, "w") as fh:
            self.proc = subprocess.Popen([self.binary, "-host", "127.0.0.1", "-port", "0", "-config", str(config)],
                                         stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                         preexec_fn=lambda: server_preexec(self.cpus))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                text = log_path.read_text(errors="replace")
                self.proc = None
                self.stop()
                raise RunError("toxiproxy exited at start", detail=text[-2000:])
            for port in listening_ports(self.proc.pid):  # the API's (the sentinel proxy is disabled)
                self.api = f"http://127.0.0.1:{port}"
                try:
                    if sentinel in self._call("GET", "/proxies", timeout=1):
                        log.info("toxiproxy ready at %s", self.api)
                        return self
                except (RunError, ValueError):
                    pass
            time.sleep(0.05)
        self.api = ""
        self.stop()
        raise RunError(f"toxiproxy did not answer on 127.0.0.1 within {timeout:.0f}s")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None
        if self._dir is not None:
            for f in self._dir.iterdir():
                f.unlink(missing_ok=True)
            self._dir.rmdir()
            self._dir = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def cpu_seconds(self) -> float | None:
        """The server's CPU time so far (user + system): what shaping costs, read from /proc."""
        if self.pid is None:
            return None
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    # ---- proxies -----------------------------------------------------------------------------
    def add(self, profile: NetworkProfile, upstream: str) -> str:
        """A proxy to `upstream` (an endpoint URL on loopback) shaped by `profile`; the address
        (127.0.0.1:PORT) toxiproxy bound for it."""
        if not loopback_host(upstream):
            raise RunError(f"refusing to shape traffic to {upstream}: the shaper forwards to loopback addresses only")
        made = self._call("POST", "/proxies", {"name": profile.name, "listen": "127.0.0.1:0",
                                               "upstream": host_port(upstream), "enabled": True})
        for toxic in profile.toxics():
            self._call("POST", f"/proxies/{profile.name}/toxics", toxic)
        self.proxies[profile.name] = made["listen"]
        log.info("network %s: %s -> %s (%s)", profile.name, made["listen"], upstream, profile.words())
        return made["listen"]

    def _call(self, method: str, path: str, body: dict | None = None, timeout: float = 10):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.api + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            raise RunError(f"toxiproxy {method} {path}: HTTP {e.code}",
                           detail=e.read().decode("utf-8", "replace")[:2000]) from None
        except (urllib.error.URLError, OSError) as e:
            raise RunError(f"toxiproxy {method} {path}: {e}") from None

    def __enter__(self) -> "Toxiproxy":
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

