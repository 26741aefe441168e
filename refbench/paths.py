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
root and are linked into the tools directory by ``refbench setup``; tools.find_tool verifies them
against the hashes pinned in refbench.pins at every use. No cache directory is ever put on PATH
(refbench.tools).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import importlib.resources
import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping

from .errors import RefbenchError

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


def walk_all(root: Path | str):
    """os.walk over `root` that raises (an OSError naming the directory) on any directory it
    cannot list: os.walk's default skips such a directory silently, so a 0311 directory planted in
    a restored cache would be neither hashed nor refused by a check that decides trust."""
    def fail(e: OSError) -> None:
        raise OSError(e.errno, f"cannot list a directory of {root}: {e.strerror}", e.filename)
    return os.walk(root, onerror=fail)


def _as_path(res) -> Path:
    # regular installs (wheel, sdist, editable, checkout) are plain directories
    return Path(str(res))


# ---- user files -----------------------------------------------------------------------------
def default_scenarios(cwd: Path | None = None) -> Path:
    """./refbench.toml when the current directory has one, else the bundled scenarios.toml."""
    own = Path(cwd or os.getcwd()) / USER_SCENARIOS
    return own if own.is_file() else bundled_scenarios()


# ---- caches ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """Where this machine keeps refbench's files and which of its tools it accepts, as the
    environment says: the one reader of XDG_CACHE_HOME, XDG_DATA_HOME, XDG_CONFIG_HOME,
    REFBENCH_BUILDS_DIR, REFBENCH_TOOLS_BIN, REFBENCH_UNPINNED_TOOLS, MINIO_VERSION and
    TOXIPROXY_VERSION (docs/usage.md#environment). Read once, by the command line (cli.main, into
    runenv.MachineSettings) which installs it for the process (use()); never at import, and no
    library module reads the environment itself: what they need of it is `environ`."""
    cache_root: Path  # $XDG_CACHE_HOME/refbench: tools built once per machine
    data_root: Path  # $XDG_DATA_HOME/refbench: a Go `refbench setup` fetched (not a cache: none is trusted to run)
    config_root: Path  # $XDG_CONFIG_HOME/refbench: the cache key (refbench.trust)
    builds_dir: Path | None = None  # REFBENCH_BUILDS_DIR: --builds-dir's default, when set
    tools_bin: Path | None = None  # REFBENCH_TOOLS_BIN: where `refbench setup` links the tools, when set
    unpinned_tools: bool = False  # REFBENCH_UNPINNED_TOOLS=1: a tool whose hash is not pinned is used, warned
    tool_versions: tuple[tuple[str, str], ...] = ()  # MINIO_VERSION, TOXIPROXY_VERSION: (tool, version) overrides
    # the source checkout refbench runs from (its builds/ and tools/bin), None when installed (a wheel)
    checkout: Path | None = CHECKOUT
    # the environment the command line started with (PATH already cleaned, refbench.tools): what
    # the children refbench starts are given (each through its allow-list) and the few machine
    # variables a library module needs (PATH, S3_ENDPOINT_URL, AWS_REGION, a proxy's)
    environ: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], checkout: Path | None = CHECKOUT) -> "Layout":
        home = os.path.expanduser("~")

        def xdg(name: str, *default: str) -> Path:
            return Path(environ.get(name) or os.path.join(home, *default)) / "refbench"

        def given(name: str) -> Path | None:
            return Path(environ[name]).expanduser() if environ.get(name) else None
        versions = tuple((tool, environ[name]) for tool, name in TOOL_VERSION_ENV if environ.get(name))
        return cls(cache_root=xdg("XDG_CACHE_HOME", ".cache"), data_root=xdg("XDG_DATA_HOME", ".local", "share"),
                   config_root=xdg("XDG_CONFIG_HOME", ".config"), builds_dir=given("REFBENCH_BUILDS_DIR"),
                   tools_bin=given("REFBENCH_TOOLS_BIN"),
                   unpinned_tools=environ.get("REFBENCH_UNPINNED_TOOLS", "").lower() in ("1", "true", "yes"),
                   tool_versions=versions, environ=dict(environ), checkout=checkout)


#: (pinned tool, the variable that names another version of it): refused unless unpinned tools are allowed
TOOL_VERSION_ENV = (("minio", "MINIO_VERSION"), ("toxiproxy-server", "TOXIPROXY_VERSION"))


def _unread() -> Layout:
    """No command line has read the environment (a library caller that installed nothing): the
    defaults, and no variable. Reading the environment here would make every caller an edge."""
    return Layout.from_environ({})


_source: Callable[[], Layout] = _unread


def use(source: Layout | Callable[[], Layout]) -> Callable[[], Layout]:
    """Make `source` (a Layout, or what makes one at each call: the test suite's live reading) the
    process's Layout; returns what was in place, for the caller to put back (cli.main does)."""
    global _source
    previous = _source
    _source = source if callable(source) else (lambda: source)
    return previous


def layout() -> Layout:
    """This process's Layout: the one the command line read and installed (use())."""
    return _source()


@contextlib.contextmanager
def installed(source: Layout | Callable[[], Layout]) -> Iterator[None]:
    """use(source) for the block, and what was in place back after it (an in-process caller's own)."""
    previous = use(source)
    try:
        yield
    finally:
        use(previous)


def cache_root(given: Layout | None = None) -> Path:
    """$XDG_CACHE_HOME/refbench (default ~/.cache/refbench): tools built once per machine."""
    return (given or layout()).cache_root


def data_root() -> Path:
    """$XDG_DATA_HOME/refbench (default ~/.local/share/refbench): what `refbench setup` installs
    that must not live in a cache (a Go toolchain it fetched), since no cache is trusted to run."""
    return layout().data_root


def restored_at(path: Path | str, given: Layout | None = None) -> Path | None:
    """The first of the cache root and its builds/ that `path` is (or lies below) and that is a
    symbolic link, or None. Both are where a cache restore writes (the Action restores
    ~/.cache/refbench and its builds/ by prefix), and nobody named them a link: a restored
    `builds -> <the user's checkout>` would move the whole cache, removals included, there, since
    every O_NOFOLLOW walk starts from the builds directory resolved (review35e LOW)."""
    root = Path(os.path.abspath(cache_root(given)))
    p = Path(os.path.abspath(Path(path).expanduser()))
    for place in (root, root / "builds"):
        if (p == place or place in p.parents) and os.path.islink(place):
            return place
    return None


def settled_cache_dir(path: Path | str, given: Layout | None = None) -> Path:
    """The cache directory `path` names (the builds directory, the cache root), resolved: links
    the user made on the way are theirs. A link at the cache root or at its builds/ (restored_at)
    is refused with one line, never followed: a user who made it names the directory it points
    to instead (--builds-dir, XDG_CACHE_HOME)."""
    planted = restored_at(path, given)
    if planted:
        raise CacheLinkError(f"{planted} is a symbolic link (to {os.readlink(planted)}): refbench keeps no cache "
                             "through a link where a cache restore writes (a restored cache may have planted it); "
                             "remove it, or name the directory it points to (--builds-dir, XDG_CACHE_HOME)")
    return Path(path).expanduser().resolve()


def default_builds_dir(given: Layout | None = None) -> Path:
    """REFBENCH_BUILDS_DIR, else builds/ in the checkout, else $XDG_CACHE_HOME/refbench/builds."""
    where = given or layout()
    if where.builds_dir:
        return where.builds_dir
    return where.checkout / "builds" if where.checkout else where.cache_root / "builds"


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


# ---- writing in a cache: never through a link ---------------------------------------------
class CacheLinkError(RefbenchError):
    """A directory refbench writes or removes in lies behind a link (or a file) in the cache."""


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _inside(path: Path, within: Path) -> tuple[Path, tuple[str, ...]]:
    """`within` resolved (the user named it: a link there is theirs) and `path`'s components below
    it. `path` is taken as written: it must be inside `within` as given or as resolved."""
    p = Path(os.path.abspath(path))
    root = Path(within).resolve()
    for base in (Path(os.path.abspath(within)), root):
        with contextlib.suppress(ValueError):
            parts = p.relative_to(base).parts
            if parts:
                return root, parts
    raise CacheLinkError(f"{path} is not inside the cache {within}: refbench writes and removes only inside it")


def _is_root(path: Path, within: Path) -> bool:
    p = os.path.abspath(path)
    return p == os.path.abspath(within) or p == str(Path(within).resolve())


@contextlib.contextmanager
def _parent(path: Path, within: Path, create: bool = False) -> Iterator[tuple[int, str]]:
    """(a descriptor of `path`'s directory, `path`'s name), reached from `within` one component at
    a time with O_NOFOLLOW: a component that is a link (a restored cache may hold
    <builds>/ipfs-states/<k> -> $HOME) is refused, never followed, and no later rename of one can
    redirect what is done through the descriptor. `create`: make missing directories."""
    root, parts = _inside(path, within)
    if create:
        root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, _DIR)
    try:
        here = root
        for name in parts[:-1]:
            here = here / name
            try:
                nfd = _open_component(name, fd, here, root)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
                nfd = _open_component(name, fd, here, root)
            os.close(fd)
            fd = nfd
        yield fd, parts[-1]
    finally:
        os.close(fd)


def _open_component(name: str, fd: int, here: Path, root: Path) -> int:
    try:
        return os.open(name, _DIR, dir_fd=fd)
    except OSError as e:
        _refuse(e, here, root)
        raise


def _refuse(e: OSError, here: Path, root: Path) -> None:
    if e.errno in (errno.ELOOP, errno.ENOTDIR):
        what = "a symbolic link" if os.path.islink(here) else "not a directory"
        raise CacheLinkError(f"{here} is {what}: refbench writes and removes nothing through a link in its "
                             f"cache {root} (a restored cache may have planted it); remove it") from None


def _no_link(fd: int, name: str, path: Path, root: Path) -> os.stat_result | None:
    """lstat of `name` in `fd`, None when absent; a link there is refused."""
    try:
        st = os.lstat(name, dir_fd=fd)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise CacheLinkError(f"{path} is a symbolic link: refbench writes and removes nothing through a link in "
                             f"its cache {root} (a restored cache may have planted it); remove it")
    return st


def verified(path: Path, within: Path) -> Path:
    """`path` itself, once no component of it below `within` is a link (it need not exist)."""
    if _is_root(path, within):
        return Path(path)
    try:
        with _parent(path, within) as (fd, name):
            _no_link(fd, name, Path(path), Path(within))
    except FileNotFoundError:
        pass
    return Path(path)


def make_dirs(path: Path, within: Path) -> Path:
    """mkdir -p `path` inside the cache `within` (or `within` itself), through no link; returns `path`."""
    if _is_root(path, within):
        Path(within).mkdir(parents=True, exist_ok=True)
        return Path(path)
    with _parent(path, within, create=True) as (fd, name):
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=fd)
        os.close(_open_component(name, fd, Path(path), Path(within)))
    return Path(path)


def _remove_entry(dfd: int, name: str) -> None:
    """Remove `name` in the directory `dfd`, whatever it is (a directory's tree, read-only or not,
    or a link: never what it names)."""
    st = os.lstat(name, dir_fd=dfd)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dfd)
        return
    try:
        shutil.rmtree(name, dir_fd=dfd)
    except PermissionError:
        _owner_writable(dfd, name)
        shutil.rmtree(name, dir_fd=dfd)


def _owner_writable(dfd: int, name: str) -> None:
    """u+rwx on the directory `name` and every directory below it, through no link: a read-only
    directory in a restored cache (tar keeps modes) kept rmtree from emptying it, for good, on a
    runner that is not root (review35i I1b). As `go clean -modcache` does for Go's module cache."""
    os.chmod(name, stat.S_IMODE(os.lstat(name, dir_fd=dfd).st_mode) | 0o700, dir_fd=dfd)
    for _, dirs, _, tfd in os.fwalk(name, dir_fd=dfd, follow_symlinks=False):
        for d in dirs:  # chmod follows a link: lstat first (fwalk lists a link to a directory here too)
            st = os.lstat(d, dir_fd=tfd)
            if stat.S_ISDIR(st.st_mode):
                os.chmod(d, stat.S_IMODE(st.st_mode) | 0o700, dir_fd=tfd)


def remove_tree(path: Path, within: Path, ignore_errors: bool = False) -> None:
    """Remove `path` (a directory, file or link: the link goes, never what it names) inside the
    cache `within`; nothing when it is absent. Its parents are walked with O_NOFOLLOW and the tree
    removed through their descriptor (shutil.rmtree's dir_fd), so a link in the cache never takes
    the removal outside it. A link among its parents is refused (CacheLinkError) even with
    `ignore_errors`, which keeps shutil.rmtree's meaning for the rest."""
    try:
        with _parent(path, within) as (fd, name):
            try:
                st = os.lstat(name, dir_fd=fd)
            except FileNotFoundError:
                return
            try:
                _remove_entry(fd, name)
            except OSError:
                if not (ignore_errors and stat.S_ISDIR(st.st_mode)):
                    raise
                shutil.rmtree(name, ignore_errors=True, dir_fd=fd)  # as much as can go
    except FileNotFoundError:
        return
    except CacheLinkError:
        raise
    except OSError:
        if not ignore_errors:
            raise


@contextlib.contextmanager
def locked(path: Path, within: Path | None = None):
    """Serialise concurrent refbench processes working on the same clone, build or fixture. The
    lock file is opened with O_NOFOLLOW: it sits in a cache, where a restored link to one of the
    user's files would otherwise be opened (and, before, truncated) in its place. `within`: the
    cache it is in, whose components down to it are verified too (make_dirs)."""
    path = Path(path)
    try:
        with _dir_of(path, within) as (dfd, name):
            fd = _open_lock(dfd, name, path)
    except PermissionError as e:  # a directory on the way that a restore left unsearchable (review35o O3)
        raise RefbenchError(f"cannot take the lock {path}: {e.strerror} at {e.filename or path.parent}, "
                            "a directory on the way to it; remove it") from None
    with os.fdopen(fd, "r") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


_LOCK = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# another user's lock (0644) opens read-only, enough for a local flock, and is waited on, not taken
# for a restore's leftover and replaced while held (review35o O1); read-write first, which NFS's
# flock (a byte-range lock there) needs for an exclusive lock
_SHARED_LOCK = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_lock(dfd: int, name: str, path: Path) -> int:
    """The lock file `name` in the directory `dfd`, opened; made when there is none. What a cache
    restore left there instead (a link, a directory, a FIFO, a device, a file it may not open) is
    never opened as the lock (O_NOFOLLOW; a link is never followed) and goes, and the lock is made
    anew: a lock holds nothing, and a held one always opens (review35i I1). Only a run holding a
    flock on the directory removes anything, and it looks again under it first: two runs that met
    one planted FIFO together removed each other's fresh lock and both held it, even when each
    checked the inode number first, which ext4 hands straight to the next file made (review35m M5,
    review35n N1)."""
    try:
        fd = _lock_there(dfd, name)
        if fd is not None:
            return fd
        fcntl.flock(dfd, fcntl.LOCK_EX)
        try:
            fd = _lock_there(dfd, name)  # another run may have remade it before this one got the directory
            if fd is not None:
                return fd
            _remove_entry(dfd, name)
            try:
                return _new_lock(dfd, name)
            except FileExistsError:  # a run that found no lock made its own meanwhile: that one is the lock
                return _open_either(name, dfd)
        finally:
            fcntl.flock(dfd, fcntl.LOCK_UN)
    except OSError as e:
        raise RefbenchError(f"cannot take the lock {path}: {e.strerror}; remove it") from None


def _lock_there(dfd: int, name: str, tries: int = 3) -> int | None:
    """A descriptor of the lock `name` when it is a regular file that opens, or of a new one when
    there is none; None when something else is there. Only a regular file is opened (lstat
    first: a device or FIFO is never opened), and nothing is removed here."""
    for _ in range(tries):
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            try:
                return _new_lock(dfd, name)
            except FileExistsError:
                continue  # another run made it meanwhile: look at it
        if not stat.S_ISREG(st.st_mode):
            return None
        try:
            fd = _open_either(name, dfd)
        except FileNotFoundError:
            continue  # removed meanwhile, by a run remaking it
        except PermissionError:
            return None  # a file no run may even read: no run's lock (each makes a 0644 file)
        got = os.fstat(fd)
        if stat.S_ISREG(got.st_mode) and got.st_mode & 0o444 == 0o444:  # every run's lock is 0644 (_new_lock)
            return fd
        os.close(fd)  # swapped between the lstat and the open, or a file not every user may read: a plant
    return None


def _new_lock(dfd: int, name: str) -> int:
    """The lock `name` made (FileExistsError when there is one), readable by every user whatever
    the umask: a 027 or 077 umask made it 0640 or 0600, which another user's run took for a plant
    and replaced while it was held (review35p P5)."""
    fd = os.open(name, _LOCK | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dfd)
    os.fchmod(fd, 0o644)
    return fd


def _open_either(name: str, dfd: int) -> int:
    """The regular file `name` opened read-write, else read-only (another user's lock)."""
    try:
        return os.open(name, _LOCK, dir_fd=dfd)
    except PermissionError:
        return os.open(name, _SHARED_LOCK, dir_fd=dfd)


def replace_link(path: Path, target: Path, within: Path | None = None) -> None:
    """`path` -> `target`, through a new link renamed over it (replace_file's way, for a link)."""
    path = Path(path)
    with _dir_of(path, within) as (dfd, name):
        tmp = f".{name}.tmp-{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)
        os.symlink(str(target), tmp, dir_fd=dfd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)


def replace_file(path: Path, text: str, mode: int = 0o644, within: Path | None = None) -> None:
    """Write `path` whole through a new file renamed over it: a link at `path` (a cache may hold
    one pointing at any of the user's files) is replaced, never written through. `within`: the
    cache it is in; its directory is then reached through no link either (make_dirs)."""
    path = Path(path)
    with _dir_of(path, within) as (dfd, name):
        tmp = f".{name}.tmp-{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)


def create_file(path: Path, text: str, within: Path | None = None, mode: int = 0o644) -> Path:
    """Write `text` to the new file `path` (O_CREAT|O_EXCL|O_NOFOLLOW): a file or link already there
    is an OSError, never written through. `within`: the cache it is in, whose directories down to
    it are reached through no link either (a restored `crashes -> <anywhere>`: review35e LOW)."""
    path = Path(path)
    with _dir_of(path, within) as (dfd, name):
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
    return path


@contextlib.contextmanager
def _dir_of(path: Path, within: Path | None) -> Iterator[tuple[int, str]]:
    """(a descriptor of `path`'s directory, made when missing, and `path`'s name): reached through
    no link below `within` when given (_parent), else as the path says."""
    if within is not None:
        with _parent(path, within, create=True) as got:
            yield got
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd, path.name
    finally:
        os.close(fd)


# ---- reading a cache's records: no link, no FIFO ----------------------------------------------
#: a record refbench keeps in a cache (build.json, impl.json, go-toolchains.json, state.json) is a
#: few kilobytes at most; a larger one is none of refbench's
RECORD_LIMIT = 1 << 20
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_regular(path: Path | str) -> int:
    """A descriptor of the regular file `path`, opened with O_NOFOLLOW | O_NONBLOCK and checked with
    fstat; OSError naming it when it is absent, a link or anything but a regular file. A
    cache may hold a FIFO where refbench reads a record, whose read would block every later run
    for good, or a link to any file the job can read (review35e LOWs). Its type is looked at
    before it is opened, so a device node a root runner's restore made is never opened (review35o
    O2); fstat after, for what was swapped in between."""
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    fd = os.open(path, _READ)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fd


def read_regular(path: Path | str, limit: int = RECORD_LIMIT) -> bytes | None:
    """The bytes of the regular file `path` (open_regular), or None when it is absent, a link, a
    FIFO or another special file, or larger than `limit`: what a record that is none is read as."""
    try:
        fd = open_regular(path)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if os.fstat(fd).st_size > limit:
            return None
        data = fh.read(limit + 1)
    return data if len(data) <= limit else None


def read_record(path: Path | str, limit: int = RECORD_LIMIT) -> dict | None:
    """The JSON object in the cached record at `path` (read_regular), or None when there is none:
    absent, not a regular file, too large, not JSON or not an object. Every record refbench reads
    from a cache comes through here, so none blocks a run or reads through a link."""
    data = read_regular(path, limit)
    if data is None:
        return None
    try:
        info = json.loads(data)
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def tools_bin(given: Layout | None = None) -> Path:
    """Where `refbench setup` links the tools: tools/bin in the checkout, else the cache's bin/
    (REFBENCH_TOOLS_BIN overrides)."""
    where = given or layout()
    if where.tools_bin:
        return where.tools_bin
    return where.checkout / "tools" / "bin" if where.checkout else where.cache_root / "bin"
