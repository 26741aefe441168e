"""The clean PATH: where refbench looks for the plain programs it runs (git, go, curl, ...), with no
directory of refbench's caches on it, and the environment a build or a git command gets.

A restored cache may hold anything (the threat model is refbench.trust's): `~/.cache/refbench/bin`
or the hyperfine wheel's bin/ with a `go`, `git` or `sh` in it. So no directory of refbench's
caches is on the PATH refbench searches or gives to what it starts (clean_path: cli.main takes them
out of its own PATH at start), and a program comes from that clean PATH as an absolute path
(which, git, go), or, for Go alone, from the toolchain `refbench setup` fetched into refbench's
data directory (not a cache) when the machine has none.

Apart from tools.py (find_tool, which checks the tools refbench pins) because pins.py and
toolchain.py need these too: on this floor, below all three, none of them imports another to find
a program, so they form no circle.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from . import paths
from .errors import BuildError
from .heldenv import passed


def _within(d: str, roots: tuple[str, ...]) -> bool:
    return any(d == r or d.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def cache_dirs(layout: paths.Layout | None = None) -> tuple[str, ...]:
    """The directories no PATH refbench uses may hold: the cache root (every tool it keeps, the
    hyperfine wheel's bin/) and the tools directory (its links into the cache), as given and resolved.
    `layout`: the process's (paths.layout()) unless given (the command line's, before it installs it)."""
    out: list[str] = []
    for d in (paths.cache_root(layout), paths.tools_bin(layout)):
        for form in (os.path.abspath(d), os.path.realpath(d)):
            if form not in out:
                out.append(form)
    return tuple(out)


def clean_path(path: str | None = None, layout: paths.Layout | None = None) -> str:
    """`path` (default: the PATH the command line read, paths.Layout.environ) without any directory
    in or under refbench's caches (cache_dirs), nor an empty or relative entry (the current directory)."""
    roots = cache_dirs(layout)
    parts = ((layout or paths.layout()).environ.get("PATH", "") if path is None else path).split(os.pathsep)
    return os.pathsep.join(p for p in parts if p and os.path.isabs(p) and not _within(os.path.abspath(p), roots)
                           and not _within(os.path.realpath(p), roots))


def which(name: str) -> str | None:
    """The absolute path of `name` on the clean PATH, or None."""
    found = shutil.which(name, path=clean_path())
    return os.path.abspath(found) if found else None


def git() -> str:
    """The git refbench runs (absolute, from the clean PATH)."""
    found = which("git")
    if not found:
        raise BuildError("git not found on PATH (install git)")
    return found


def go() -> str | None:
    """The go refbench runs: the clean PATH's, else the toolchain `refbench setup` fetched."""
    return which("go") or next((str(p) for p in setup_go_candidates() if p.is_file() and os.access(p, os.X_OK)), None)


def setup_go_candidates() -> list[Path]:
    """Where `refbench setup` puts a Go it fetched: refbench's data directory, not a cache."""
    return sorted(paths.data_root().glob("go*.linux-*/bin/go"), reverse=True)


# what a build (go, git) needs beyond heldenv.PASS_ENV: the C toolchain for cgo, the proxies and
# certificates the module downloads go through, and go's own settings for private modules
BUILD_ENV = frozenset((
    "CC", "CXX", "AR", "PKG_CONFIG", "PKG_CONFIG_PATH", "GOINSECURE", "GOVCS", "GONOSUMCHECK", "GOEXPERIMENT",
    "GOARM", "GO386", "GOARM64", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "GIT_SSH_COMMAND", "SSH_AUTH_SOCK", "GIT_ASKPASS", "NETRC",
))


def child_env(base: dict | None = None) -> dict[str, str]:
    """The environment of a build or a git command refbench runs: the allow-list the benchmarked
    commands get (heldenv.PASS_ENV, as backends.process.child_env gives it) with BUILD_ENV and
    CGO_*, and the clean PATH. So a secret of the job (a history URL's password, a token) never
    reaches `go` or a build script, and no cache directory is searched for a program.
    `base`: default the environment the command line read (paths.Layout.environ)."""
    environ = paths.layout().environ if base is None else base
    env = passed(environ, BUILD_ENV)
    env.update({k: v for k, v in environ.items() if k.startswith("CGO_")})
    env["PATH"] = clean_path(env.get("PATH", ""))
    return env
