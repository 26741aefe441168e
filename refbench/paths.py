"""Where refbench finds its own files and keeps its caches: the one place that knows.

Bundled resources (templates, the default scenarios.toml, the source of refbench-s3restore) ship
inside the package and are read through importlib.resources, so an installed wheel works from
any directory. Caches and tools:

- run from a source checkout (``./bench.py``, ``make``, an editable install: the package's parent
  holds bench.py and pyproject.toml): ``<checkout>/builds`` and ``<checkout>/tools/bin``, as before;
- installed (pipx, pip, the GitHub Action): ``$XDG_CACHE_HOME/refbench`` (default
  ``~/.cache/refbench``) with ``builds/`` and ``bin/`` under it.

``--builds-dir`` / ``REFBENCH_BUILDS_DIR`` override the builds directory either way. Pinned tools
that are built once per machine (MinIO, hyperfine, refbench-s3restore) always live in the cache
root and are linked into the tools directory by ``refbench setup``; tools.find_tool checks them
against the hashes pinned in refbench.pins at every use. No cache directory is ever put on PATH
(refbench.tools).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.resources
import os
from pathlib import Path
from typing import Iterator

PACKAGE = "refbench"
PACKAGE_DIR = Path(__file__).resolve().parent


def _checkout() -> Path | None:
    root = PACKAGE_DIR.parent
    if (root / "bench.py").is_file() and (root / "pyproject.toml").is_file():
        return root
    return None


#: the source checkout refbench runs from, or None when it is installed
CHECKOUT: Path | None = _checkout()
#: kept for older callers: the checkout, or the package directory when installed
PROJECT_ROOT: Path = CHECKOUT or PACKAGE_DIR

USER_SCENARIOS = "refbench.toml"  # a user's own scenarios file, found in the current directory


# ---- bundled resources ----------------------------------------------------------------------
def resource(*parts: str):
    """A Traversable for a file shipped inside the package."""
    return importlib.resources.files(PACKAGE).joinpath(*parts)


def bundled_scenarios() -> Path:
    """The scenarios.toml that ships with refbench."""
    return _as_path(resource("scenarios.toml"))


def template_loader():
    """A Jinja loader for the bundled templates (importlib.resources: works from a wheel or zip)."""
    import jinja2

    def load(name: str):
        res = resource("templates", name)
        if not res.is_file():
            return None
        return res.read_text(encoding="utf-8"), None, lambda: True

    return jinja2.FunctionLoader(load)


@contextlib.contextmanager
def tool_source(name: str) -> Iterator[Path]:
    """A real directory holding the Go source of one of refbench's own tools (e.g. s3restore)."""
    with importlib.resources.as_file(resource("tools_src", name)) as p:
        yield Path(p)


def tool_source_hash(name: str) -> str:
    """Short hash of a bundled tool's source (go.mod, go.sum, *.go): its cache key."""
    d = resource("tools_src", name)
    files = sorted((e for e in d.iterdir() if e.name in ("go.mod", "go.sum") or e.name.endswith(".go")),
                   key=lambda e: (e.name not in ("go.mod", "go.sum"), e.name))
    h = hashlib.sha256()
    for e in files:
        h.update(e.read_bytes())
    return h.hexdigest()[:16]


_hashes: dict[tuple, str] = {}


def file_sha256(path: Path) -> str:
    """SHA-256 of a file (a binary, a tool), computed once per process: keyed by path, size and
    mtime, so a file replaced since is hashed again."""
    st = Path(path).stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _hashes:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        _hashes[key] = h.hexdigest()
    return _hashes[key]


def _as_path(res) -> Path:
    # regular installs (wheel, sdist, editable, checkout) are plain directories
    return Path(str(res))


# ---- user files -----------------------------------------------------------------------------
def default_scenarios(cwd: Path | None = None) -> Path:
    """./refbench.toml when the current directory has one, else the bundled scenarios.toml."""
    own = Path(cwd or os.getcwd()) / USER_SCENARIOS
    return own if own.is_file() else bundled_scenarios()


# ---- caches ---------------------------------------------------------------------------------
def cache_root() -> Path:
    """$XDG_CACHE_HOME/refbench (default ~/.cache/refbench): tools built once per machine."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "refbench"


def data_root() -> Path:
    """$XDG_DATA_HOME/refbench (default ~/.local/share/refbench): what `refbench setup` installs
    that must not live in a cache (a Go toolchain it fetched), since no cache is trusted to run."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "refbench"


def default_builds_dir() -> Path:
    """REFBENCH_BUILDS_DIR, else builds/ in the checkout, else $XDG_CACHE_HOME/refbench/builds."""
    env = os.environ.get("REFBENCH_BUILDS_DIR")
    if env:
        return Path(env).expanduser()
    return CHECKOUT / "builds" if CHECKOUT else cache_root() / "builds"


#: the file that says "refbench made this directory": `clean` removes no directory without it
CACHE_MARK = ".refbench-cache"


def make_cache_dir(path: Path) -> Path:
    """Create a cache directory (builds, fixtures) and mark it as refbench's. A directory that
    already holds files of someone else's (say --builds-dir $HOME) is used but not marked, so
    `refbench clean` refuses to remove it: it removes only what refbench made."""
    path = Path(path)
    fresh = not path.exists() or (path.is_dir() and not any(path.iterdir()))
    path.mkdir(parents=True, exist_ok=True)
    if fresh:
        (path / CACHE_MARK).write_text("made by refbench; `refbench clean` may remove this directory\n")
    return path


def is_cache_dir(path: Path) -> bool:
    """True when refbench made `path` (it holds the mark)."""
    return (Path(path) / CACHE_MARK).is_file()


@contextlib.contextmanager
def locked(path: Path):
    """Serialise concurrent refbench processes working on the same clone, build or fixture. The
    lock file is opened with O_NOFOLLOW: it sits in a cache, where a restored link to one of the
    user's files would otherwise be opened (and, before, truncated) in its place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if not path.is_symlink():
            raise
        path.unlink()  # a link where refbench keeps its lock: the link goes, not what it names
        fd = os.open(path, flags | os.O_EXCL, 0o644)
    with os.fdopen(fd, "r+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def replace_file(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `path` whole through a new file renamed over it: a link at `path` (a cache may hold
    one pointing at any of the user's files) is replaced, never written through."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def tools_bin() -> Path:
    """Where `refbench setup` links the tools: tools/bin in the checkout, else the cache's bin/."""
    env = os.environ.get("REFBENCH_TOOLS_BIN")
    if env:
        return Path(env).expanduser()
    return CHECKOUT / "tools" / "bin" if CHECKOUT else cache_root() / "bin"
