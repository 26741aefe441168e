"""The tools refbench builds for itself, pinned: built reproducibly, verified against hashes written here.

MinIO, toxiproxy's server and refbench-s3restore are Go programs. Built by the same Go for the
same platform with -trimpath -buildvcs=false and CGO_ENABLED=0, and nothing else taken from the
environment (build_env), a version's binary is the same bytes on every machine: Go's builds are
reproducible, and a pure-Go cross build equals the native one. So each binary's SHA-256 is written
here ahead of any build, per tool version, Go and platform, and

- `refbench setup` builds with that Go (GOTOOLCHAIN=TOOLS_GO: fetched through the module proxy
  and verified against the checksum database where the machine's Go is another) and refuses a
  result that is not the pinned one;
- every use (tools.find_tool) verifies the file again: a binary swapped in a restored cache is
  refused, with the file, the pin and what to do.

Pinned, not recorded at build time: a hash written beside the binary, in the same cache, is
rewritten by whoever swaps the binary (the threat model is refbench.trust's). A version or a
platform with no pin here (MINIO_VERSION set to another, a Mac) is refused as well; on a machine
of one's own, REFBENCH_UNPINNED_TOOLS=1 uses such a tool anyway and says so. To pin a new version:
build it with `refbench setup` under REFBENCH_UNPINNED_TOOLS=1 on linux/amd64 (and with
GOARCH=arm64), verify the hashes on a second machine, and add them to PINS.

hyperfine is a Rust program linked by the machine's C linker against its C library, so a build
of one's own differs from one machine to the next and no hash can be pinned for it. So the pinned
hyperfine is not built: it is the binary a registry package ships, the same bytes wherever it is
installed (PyPI's astral-dev-toolchain-hyperfine, a wheel per platform holding hyperfine's tagged
release), fetched by `pip download` and pinned here like the others. Where no such wheel can be
had, `refbench setup` still builds hyperfine with cargo, and that build is used only under
REFBENCH_UNPINNED_TOOLS=1: it is not the pinned bytes.
"""
from __future__ import annotations

import contextlib
import logging
import os
import platform as _platform
import stat
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from . import cleanpath, paths
from .errors import RefbenchError
from .heldenv import passed

log = logging.getLogger(__name__)

#: the Go every pinned tool is built with (a version the Go module proxy serves as a toolchain)
TOOLS_GO = "go1.26.8"
UNPINNED_ENV = "REFBENCH_UNPINNED_TOOLS"
MINIO_MODULE = "github.com/minio/minio"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"  # MINIO_VERSION overrides (paths.Layout), unpinned
# the network profiles' shaper: `go install` names the binary after the package's directory
TOXIPROXY_PACKAGE = "github.com/Shopify/toxiproxy/v2/cmd/server"
TOXIPROXY_VERSION = "v2.12.0"  # TOXIPROXY_VERSION overrides (paths.Layout), unpinned
HYPERFINE_VERSION = "2.0.0"
HYPERFINE_WHEEL = "astral-dev-toolchain-hyperfine"  # hyperfine's release binary, one wheel per platform
WHEEL = "wheel"  # how a tool taken from a registry package's wheel is "built"
_WHEEL_PLATFORMS = {"linux/amd64": "manylinux2014_x86_64", "linux/arm64": "manylinux2014_aarch64"}


@dataclass(frozen=True)
class Pin:
    tool: str  # the name refbench finds it by (tools/bin/NAME)
    version: str  # a module version, the shipped source's hash (refbench-s3restore), a release
    build: str  # the Go that built it (TOOLS_GO), or WHEEL: the binary a registry package ships
    platform: str  # GOOS/GOARCH
    sha256: str


PINS: tuple[Pin, ...] = (
    Pin("minio", "v0.0.0-20260212201848-7aac2a2c5b7c", "go1.26.8", "linux/amd64",
        "1ce61ef8ebff2ff722c34ba8c213a64022c23facd5bd9e709a8414a22df924b4"),
    Pin("minio", "v0.0.0-20260212201848-7aac2a2c5b7c", "go1.26.8", "linux/arm64",
        "a6d1edb5be786b9c54609e779e9b0488450732c43826c6e71a8b7a25607e576e"),
    Pin("toxiproxy-server", "v2.12.0", "go1.26.8", "linux/amd64",
        "193b8446c612b0afceea7100264f2ccf664dbf35221951d295fa9df24724c373"),
    Pin("toxiproxy-server", "v2.12.0", "go1.26.8", "linux/arm64",
        "92becd587bd7e8a2c5955e9e31b34e83931245ea392f1ec46f4af89a95c9b5ed"),
    Pin("refbench-s3restore", "cd90ef465e6ed594", "go1.26.8", "linux/amd64",
        "4e71c7d66472397ede52e72095a04d85cb3c1e69fdc6c8bc67208ca3b641345b"),
    Pin("refbench-s3restore", "cd90ef465e6ed594", "go1.26.8", "linux/arm64",
        "238f70047ff33703a96ff9c3198ccd44161fa4fab93f5049559c894e758a7c18"),
    Pin("hyperfine", "2.0.0", WHEEL, "linux/amd64", "a72f01eb1fcd3d0514bc0f0c0ad5829590299a55d7b91468530ba47271148308"),
    Pin("hyperfine", "2.0.0", WHEEL, "linux/arm64", "baa3843f1329cd3afada882ef54f3e5db655bf825fea135552fa29a6d8ac83d4"),
)


class GoRunner:
    """The go command where refbench installs with the pinned tools' Go (`refbench setup`'s tools,
    Go implementations): which go runs, what Go an environment's go is, the verification of a toolchain in
    the module cache before go switches to it, and running a command. One object given to pins and
    implementations, so a stand-in (a test's: a planted toolchain, a recorder of what ran) replaces
    all four at once; GO is the machine's."""

    def find(self) -> str | None:
        return cleanpath.go()

    def version(self, env: dict) -> str:
        from . import toolchain as tc  # not at the top: as in verified_build_env
        return tc.go_version(env)

    def verify(self, name: str, env: dict) -> None:
        from . import toolchain as tc
        tc.verify_cached(name, env)

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(argv, **kw)


GO = GoRunner()


def current_platform() -> str:
    """This machine as Go names it: linux/amd64, linux/arm64, darwin/arm64, ..."""
    arch = _platform.machine().lower()
    arch = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386"}.get(arch, arch)
    return f"{_platform.system().lower()}/{arch}"


def version_of(tool: str) -> str:
    """The version of `tool` this refbench uses."""
    override = dict(paths.layout().tool_versions).get(tool)
    if override:
        return override
    if tool == "minio":
        return MINIO_VERSION
    if tool == "toxiproxy-server":
        return TOXIPROXY_VERSION
    if tool == "refbench-s3restore":
        return paths.tool_source_hash("s3restore")
    if tool == "hyperfine":
        return HYPERFINE_VERSION
    raise RefbenchError(f"{tool!r} is not a tool refbench pins (expected one of {', '.join(PINNED_TOOLS)})")


PINNED_TOOLS = ("minio", "toxiproxy-server", "refbench-s3restore", "hyperfine")


def build_of(tool: str) -> str:
    """How the pinned `tool` is made: TOOLS_GO builds the Go tools; hyperfine comes in a wheel."""
    return WHEEL if tool == "hyperfine" else TOOLS_GO


def pin_for(tool: str, platform: str | None = None) -> Pin | None:
    """The pin of the version of `tool` refbench uses, made as build_of says, for `platform`."""
    key = (tool, version_of(tool), build_of(tool), platform or current_platform())
    return next((p for p in _pinning.table if (p.tool, p.version, p.build, p.platform) == key), None)


def cached_path(tool: str) -> Path:
    """Where `refbench setup` keeps the pinned binary: its name says version, build and platform, so
    a binary made otherwise (an older refbench's) is never taken for it. hyperfine's sits in a bin/
    of its own under its own name (found there by hyperfine.locate, never through PATH)."""
    base = paths.cache_root() / f"{tool}-{version_of(tool)}-{build_of(tool)}-{current_platform().replace('/', '-')}"
    return base / "bin" / "hyperfine" if tool == "hyperfine" else base


def build_env(base: dict | None = None) -> dict:
    """The environment of a reproducible tool build: the proxy, checksum database and cache
    settings kept, every variable that changes the output (GOFLAGS, GOAMD64, CGO_*, GOEXPERIMENT,
    ...) replaced by ours, PATH without refbench's cache directories (refbench.cleanpath), and
    refbench's own Go caches unless the environment names its own (toolchain.own_caches): go
    compiles a module's unpacked directory as it finds it, so a module planted in a restored
    ~/go/pkg/mod made every later `refbench setup` build other bytes and refuse them (review35m M3)."""
    from .toolchain import own_caches  # not at the top: toolchain imports GitPython, verifying a hash needs not
    base = dict(paths.layout().environ if base is None else base)  # default: what the command line read
    # a child's allow-list and a build's (proxies, certificates), never the rest: the first-use
    # builds run beside a pull request's own build, and got every secret (the re-reading's N2)
    go_kept = frozenset(("GOPATH", "GOMODCACHE", "GOCACHE", "GOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE",
                         "GONOPROXY", "GOTMPDIR"))
    env = {k: v for k, v in passed(base, cleanpath.BUILD_ENV | go_kept).items()
           if not (k.startswith(("GO", "CGO_")) or k in ("CC", "CXX", "AR", "PKG_CONFIG")) or k in go_kept}
    env.update(GOFLAGS="-trimpath -buildvcs=false", CGO_ENABLED="0", GOTOOLCHAIN=TOOLS_GO, GOWORK="off",
               GOENV="off")  # go's settings file (go env -w) is no input of a pinned build (review35k K2)
    env["PATH"] = cleanpath.clean_path(env.get("PATH", ""))  # GOTOOLCHAIN looks for a `go1.26.8` on PATH first
    env.update({"GOAMD64": "v1"} if current_platform().endswith("/amd64") else {})
    env.update(own_caches(base))
    return env


def verified_build_env(go: str, runner: GoRunner = GO, **overrides: str) -> dict:
    """build_env with `overrides` (GOBIN, an install's own GOMODCACHE and GOCACHE), once the Go it
    switches to (TOOLS_GO) is verified where that environment's go will take it from: an unpacked
    toolchain in the module cache runs as go finds it, and a module cache may come from a cache
    restore (toolchain.verify_cached, as builds.py does before every switch). No verification when this
    machine's Go (`go`, the one that will run) is TOOLS_GO: it then switches to nothing (review35d
    LOW 14). `go` leads the PATH of the verification, since `refbench setup`'s own Go may be on none.
    `runner`: how go is asked and verifies (GoRunner)."""
    from .toolchain import LOCAL, drop_vcs_work  # here: toolchain imports GitPython (refs), which verifying a hash needs not
    env = {**build_env(), **overrides}
    drop_vcs_work(env)  # a restored module cache's git work directories run their own config (review35i I5)
    verify_env = {**env, "PATH": os.pathsep.join([str(Path(go).parent), env.get("PATH", "")])}
    if runner.version({**verify_env, "GOTOOLCHAIN": LOCAL}) != TOOLS_GO:
        runner.verify(TOOLS_GO, verify_env)
    return env


sha256_of = paths.file_sha256


def unpinned_allowed() -> bool:
    """REFBENCH_UNPINNED_TOOLS=1 (paths.Layout)."""
    return paths.layout().unpinned_tools


def verify(tool: str, path: Path) -> Path:
    """`path` (a link is followed) when it is the pinned build of `tool`; else a RefbenchError
    naming the file, the hash found and the one pinned, and how to get the right one."""
    real = Path(os.path.realpath(path))
    pin = pin_for(tool)
    if pin is None:
        why = (f"no hash is pinned for {tool} {version_of(tool)} ({build_of(tool)}) on {current_platform()} "
               f"(refbench/pins.py)")
    elif sha256_of(real) != pin.sha256:
        why = (f"its SHA-256 is {sha256_of(real)[:16]}…, the {tool} {pin.version} ({pin.build}) for "
               f"{pin.platform} is {pin.sha256[:16]}… (refbench/pins.py); a cache may have been tampered with, "
               f"or it was built here (`refbench setup` puts the pinned one in its place)")
    else:
        return real
    if unpinned_allowed():
        log.warning("%s: %s; used anyway (%s=1)", real, why, UNPINNED_ENV)
        return real
    raise RefbenchError(f"refusing {real}: {why}; on a machine you trust, {UNPINNED_ENV}=1 uses it anyway")


def _from_wheel(tool: str, out_dir: Path) -> Path:
    """The binary of the pinned `tool` taken from its registry package: `pip download` of the wheel
    for this platform (no dependencies, binaries only), the file its data scripts hold."""
    tag = _WHEEL_PLATFORMS.get(current_platform())
    if tag is None:
        raise RefbenchError(f"no {HYPERFINE_WHEEL} wheel is pinned for {current_platform()}")
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--platform", tag,
            "--dest", str(out_dir), f"{HYPERFINE_WHEEL}=={version_of(tool)}"]
    # the whole environment the command line read: heldenv keeps a proxy or index setting out of
    # the environment children inherit
    p = subprocess.run(argv, capture_output=True, text=True, env=dict(paths.layout().environ))
    wheels = sorted(out_dir.glob("*.whl"))
    if p.returncode != 0 or not wheels:
        raise RefbenchError(f"pip download {HYPERFINE_WHEEL}=={version_of(tool)} failed (exit {p.returncode})",
                            detail=p.stderr[-3000:])
    with zipfile.ZipFile(wheels[0]) as z:
        member = next((n for n in z.namelist() if n.endswith(f".data/scripts/{tool}")), None)
        if member is None:
            raise RefbenchError(f"{wheels[0].name} holds no {tool} binary")
        out = out_dir / tool
        out.write_bytes(z.read(member))
    return out


@dataclass(frozen=True)
class Pinning:
    """What pinning is in this process: the table of pinned hashes (PINS) and how a registry
    package's binary is fetched (`pip download` of its wheel). The code's own is in place; a caller
    that pins something else (a test's own binary, a wheel that cannot be had offline) installs its
    Pinning for a block (installed), as paths.use installs a Layout, and patches nothing."""
    table: tuple[Pin, ...] = PINS
    from_wheel: Callable[[str, Path], Path] = _from_wheel  # (tool, out_dir) -> the binary


_pinning = Pinning()


@contextlib.contextmanager
def installed(pinning: Pinning) -> Iterator[None]:
    """`pinning` in place for the block (pin_for, verify, install read it), and what was before back after it."""
    global _pinning
    previous, _pinning = _pinning, pinning
    try:
        yield
    finally:
        _pinning = previous


def _build_argv(tool: str, go: str, out_dir: Path) -> tuple[list[str], dict]:
    """How `tool` is built into out_dir: its command and extra environment."""
    if tool == "minio":
        return [go, "install", f"{MINIO_MODULE}@{version_of(tool)}"], {"GOBIN": str(out_dir)}
    if tool == "toxiproxy-server":
        return [go, "install", f"{TOXIPROXY_PACKAGE}@{version_of(tool)}"], {"GOBIN": str(out_dir)}
    return [go, "build", "-o", str(out_dir / tool), "."], {}


def install(tool: str, go: str, say=None, runner: GoRunner = GO) -> Path:
    """The pinned build of `tool` in the cache (cached_path): the file there when it passes its
    pin (one that fails is removed), else built with build_env and placed there only when it is
    the pinned bytes. Refused before building when no pin exists (and unpinned tools are not allowed).
    `runner`: how a Go tool's build runs go (GoRunner).

    The cache root may come from a cache restore, so everything written or removed under it is
    reached from the settled root through no link (paths.make_dirs, paths.remove_tree): a restored
    `hyperfine-2.0.0-wheel-linux-amd64 -> /elsewhere` made setup delete and write files there
    (review F5), and a directory planted where the file goes failed every setup with exit 3 after
    its build (F4). What a restore left in the tool's place goes (_reach, _cached), with a
    warning; a link at the cache root itself is refused in one line (paths.settled_cache_dir)."""
    dest = cached_path(tool)
    cache = paths.settled_cache_dir(paths.cache_root())
    place = cache.joinpath(*dest.relative_to(paths.cache_root()).parts)  # dest, from the settled root
    with _placing(tool, place):
        found = _cached(tool, place, cache)
    if found is not None:
        return found
    pin = pin_for(tool)
    if pin is None and not unpinned_allowed():
        verify(tool, dest)  # raises, naming what is not pinned
    if say:
        say(f"fetching the pinned {tool} {version_of(tool)} ({HYPERFINE_WHEEL} from PyPI)" if tool == "hyperfine" else
            f"building {tool} {version_of(tool)} with {TOOLS_GO} (reproducible, checked against its pinned hash)")
    with _placing(tool, place):
        tmp = Path(tempfile.mkdtemp(prefix=f".{place.name}-", dir=_reach(tool, place.parent, cache)))
    try:
        built = _pinning.from_wheel(tool, tmp) if tool == "hyperfine" else _go_build(tool, go, tmp, runner)
        got = sha256_of(built)
        if pin is not None and got != pin.sha256:
            raise RefbenchError(f"made {tool} {pin.version} ({pin.build}) for {pin.platform}: SHA-256 {got}, but "
                                f"{pin.sha256} is pinned (refbench/pins.py); not the pinned bytes (another Go, or a "
                                f"GOFLAGS/GOAMD64/CGO setting leaking in, or a changed module in the Go caches "
                                f"{env_caches()}?): not used")
        with _placing(tool, place):
            _place(tool, built, place, cache)
    finally:  # a failed build or an interrupted run (firstuse.Installs.close) leaves no partial file
        with contextlib.suppress(paths.CacheLinkError):
            paths.remove_tree(tmp, cache, ignore_errors=True)
    return dest


def _cached(tool: str, place: Path, cache: Path) -> Path | None:
    """The pinned file already at `place` (verified: pins.verify), else None once whatever is there
    is gone. Only a regular file is verified (lstat: a link is never followed, a FIFO never
    opened); anything else (a directory, a link, a FIFO) a cache restore planted, and it is
    removed as a swapped file is (paths.remove_tree: a link goes, never what it names): a
    directory there failed os.replace with IsADirectoryError after the whole build (review F4)."""
    _reach(tool, place.parent, cache)
    try:
        st = os.lstat(place)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(st.st_mode):
        try:
            return verify(tool, place)
        except RefbenchError as e:
            log.warning("%s; removing it and building again", e)
    else:
        log.warning("%s is %s, not the pinned %s file (a cache restore may have planted it): removing it, "
                    "never what it names, and placing the pinned one anew", place, _kind(st.st_mode), tool)
    paths.remove_tree(place, cache)
    return None


def _reach(tool: str, d: Path, cache: Path) -> Path:
    """`d`, made inside `cache` through no link (paths.make_dirs), for a pinned file to go in.
    A link or a file on the way lies inside the tool's own entry below the cache root (named for
    tool, version, build and platform: refbench alone makes it), so that entry is removed
    (paths.remove_tree: a link goes, never what it names) and made anew, with a warning, as
    implementations.install does with an install's directory: refusing would fail every job
    until someone removed it by hand (review F4). Nothing is followed either way (review F5)."""
    try:
        return paths.make_dirs(d, cache)
    except paths.CacheLinkError as e:
        if d == cache:
            raise
        entry = cache / d.relative_to(cache).parts[0]
        log.warning("%s; it lies in %s, the pinned %s's own directory: removing that (never what a link in "
                    "it names) and placing %s anew", str(e).removesuffix("; remove it"), entry, tool, tool)
        paths.remove_tree(entry, cache)
        return paths.make_dirs(d, cache)


def _place(tool: str, built: Path, place: Path, cache: Path) -> None:
    """`built`, executable, renamed to `place`, in the directory _reach made through no link (the
    temporary directory is in it): the rename replaces a file or a link at `place` itself and
    writes through neither. A directory or FIFO put there while the tool was made (_cached removed
    what was there before) is removed first, or the rename would fail."""
    built.chmod(0o755)
    st = _lstat(place)
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
        log.warning("%s is %s, not the pinned %s file: removing it", place, _kind(st.st_mode), tool)
        paths.remove_tree(place, cache)
    os.replace(built, place)


def _lstat(path: Path) -> os.stat_result | None:
    """`path`'s own status (a link is not followed), or None when there is nothing there."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _kind(mode: int) -> str:
    """What a file of `mode` is, for a warning that names what was found instead of a file."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "not a regular file"


@contextlib.contextmanager
def _placing(tool: str, place: Path) -> Iterator[None]:
    """An OSError while the pinned `tool` is placed at `place` (a directory that cannot be made or
    removed, a rename refused) as a one-line RefbenchError naming both (exit 2): what a cache
    restore left there is the user's to remove, not a bug of refbench's (exit 3, review F4)."""
    try:
        yield
    except OSError as e:
        where = f" at {e.filename}" if e.filename and str(e.filename) != str(place) else ""
        raise RefbenchError(f"cannot place the pinned {tool} at {place}: {e.strerror or e}{where}; remove what "
                            f"is there (a restored cache may have left it) and run `refbench setup` again") from None


def env_caches() -> str:
    """The Go caches a pinned build used, for a refusal to name (`go clean -modcache -cache` there)."""
    env = build_env()
    return f"GOMODCACHE={env['GOMODCACHE']}, GOCACHE={env['GOCACHE']}"


def _go_build(tool: str, go: str, tmp: Path, runner: GoRunner = GO) -> Path:
    """`tool` built reproducibly (build_env) into tmp; the binary."""
    argv, extra = _build_argv(tool, go, tmp)
    source = paths.tool_source("s3restore") if tool == "refbench-s3restore" else contextlib.nullcontext(tmp)
    with source as cwd:
        p = runner.run(argv, cwd=cwd, env=verified_build_env(go, runner, **extra), capture_output=True, text=True)
    # `go install` names the binary after the package's last element (toxiproxy's is "server")
    built = tmp / (tool if tool == "refbench-s3restore" else argv[2].split("@")[0].rsplit("/", 1)[-1])
    if p.returncode != 0 or not built.is_file():
        raise RefbenchError(f"building {tool} {version_of(tool)} with {TOOLS_GO} failed: {' '.join(argv[1:])} "
                            f"exited {p.returncode}", detail=p.stderr[-3000:])
    return built
