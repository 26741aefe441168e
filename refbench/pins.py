"""The tools refbench builds for itself, pinned: built reproducibly, checked against hashes written here.

MinIO, toxiproxy's server and refbench-s3restore are Go programs. Built by the same Go for the
same platform with -trimpath -buildvcs=false and CGO_ENABLED=0, and nothing else taken from the
environment (build_env), a version's binary is the same bytes on every machine: Go's builds are
reproducible, and a pure-Go cross build equals the native one. So each binary's SHA-256 is written
here ahead of any build, per tool version, Go and platform, and

- `refbench setup` builds with that Go (GOTOOLCHAIN=TOOLS_GO: fetched through the module proxy
  and checked against the checksum database where the machine's Go is another) and refuses a
  result that is not the pinned one;
- every use (paths.find_tool) checks the file again: a binary swapped in a restored cache is
  refused, with the file, the pin and what to do.

Pinned, not recorded at build time: a hash written beside the binary, in the same cache, is
rewritten by whoever swaps the binary (the threat model is refbench.trust's). A version or a
platform with no pin here (MINIO_VERSION set to another, a Mac) is refused as well; on a machine
of one's own, REFBENCH_UNPINNED_TOOLS=1 uses such a tool anyway and says so. To pin a new version:
build it with `refbench setup` under REFBENCH_UNPINNED_TOOLS=1 on linux/amd64 (and with
GOARCH=arm64), check the hashes on a second machine, and add them to PINS.

hyperfine is a Rust program linked by the machine's C linker against its C library, so its bytes
differ from one machine to the next and no hash can be pinned; refbench.hyperfine vouches for a
cached build with a record sealed under the cache key (refbench.trust) instead.
"""
from __future__ import annotations

import contextlib
import logging
import os
import platform as _platform
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import paths
from .errors import RefbenchError

log = logging.getLogger(__name__)

#: the Go every pinned tool is built with (a version the Go module proxy serves as a toolchain)
TOOLS_GO = "go1.26.8"
UNPINNED_ENV = "REFBENCH_UNPINNED_TOOLS"
MINIO_MODULE = "github.com/minio/minio"
MINIO_VERSION = os.environ.get("MINIO_VERSION", "v0.0.0-20260212201848-7aac2a2c5b7c")
# the network profiles' shaper: `go install` names the binary after the package's directory
TOXIPROXY_PACKAGE = "github.com/Shopify/toxiproxy/v2/cmd/server"
TOXIPROXY_VERSION = os.environ.get("TOXIPROXY_VERSION", "v2.12.0")


@dataclass(frozen=True)
class Pin:
    tool: str  # the name refbench finds it by (tools/bin/NAME)
    version: str  # a module version, or the shipped source's hash (refbench-s3restore)
    go: str
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
)


def current_platform() -> str:
    """This machine as Go names it: linux/amd64, linux/arm64, darwin/arm64, ..."""
    arch = _platform.machine().lower()
    arch = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386"}.get(arch, arch)
    return f"{_platform.system().lower()}/{arch}"


def version_of(tool: str) -> str:
    """The version of `tool` this refbench uses."""
    if tool == "minio":
        return MINIO_VERSION
    if tool == "toxiproxy-server":
        return TOXIPROXY_VERSION
    if tool == "refbench-s3restore":
        return paths.tool_source_hash("s3restore")
    raise RefbenchError(f"{tool!r} is not a tool refbench pins (expected one of {', '.join(PINNED_TOOLS)})")


PINNED_TOOLS = ("minio", "toxiproxy-server", "refbench-s3restore")


def pin_for(tool: str, platform: str | None = None) -> Pin | None:
    """The pin of the version of `tool` refbench uses, built by TOOLS_GO for `platform`."""
    version, platform = version_of(tool), platform or current_platform()
    return next((p for p in PINS if (p.tool, p.version, p.go, p.platform) == (tool, version, TOOLS_GO, platform)),
                None)


def cached_path(tool: str) -> Path:
    """Where `refbench setup` keeps the pinned build: its name says version, Go and platform, so a
    build made otherwise (an older refbench's) is never taken for it."""
    return paths.cache_root() / f"{tool}-{version_of(tool)}-{TOOLS_GO}-{current_platform().replace('/', '-')}"


def build_env(base: dict | None = None) -> dict:
    """The environment of a reproducible tool build: the proxy, checksum database and cache
    settings kept, every variable that changes the output (GOFLAGS, GOAMD64, CGO_*, GOEXPERIMENT,
    ...) replaced by ours."""
    base = dict(os.environ if base is None else base)
    env = {k: v for k, v in base.items()
           if not (k.startswith(("GO", "CGO_")) or k in ("CC", "CXX", "AR", "PKG_CONFIG"))
           or k in ("GOPATH", "GOMODCACHE", "GOCACHE", "GOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE",
                    "GONOPROXY", "GOTMPDIR")}
    env.update(GOFLAGS="-trimpath -buildvcs=false", CGO_ENABLED="0", GOTOOLCHAIN=TOOLS_GO)
    env.update({"GOAMD64": "v1"} if current_platform().endswith("/amd64") else {})
    return env


sha256_of = paths.file_sha256


def unpinned_allowed() -> bool:
    return os.environ.get(UNPINNED_ENV, "").lower() in ("1", "true", "yes")


def check(tool: str, path: Path) -> Path:
    """`path` (a link is followed) when it is the pinned build of `tool`; else a RefbenchError
    naming the file, the hash found and the one pinned, and how to get the right one."""
    real = Path(os.path.realpath(path))
    pin = pin_for(tool)
    if pin is None:
        why = (f"no hash is pinned for {tool} {version_of(tool)} built by {TOOLS_GO} on {current_platform()} "
               f"(refbench/pins.py)")
        if unpinned_allowed():
            log.warning("%s: %s; used anyway (%s=1)", real, why, UNPINNED_ENV)
            return real
        raise RefbenchError(f"refusing {real}: {why}; on a machine you trust, {UNPINNED_ENV}=1 uses it anyway")
    got = sha256_of(real)
    if got != pin.sha256:
        raise RefbenchError(f"refusing {real}: its SHA-256 is {got[:16]}…, the {tool} {pin.version} built by "
                            f"{pin.go} for {pin.platform} is {pin.sha256[:16]}… (refbench/pins.py); a cache may "
                            f"have been tampered with: `refbench setup` rebuilds it")
    return real


def _build_argv(tool: str, go: str, out_dir: Path) -> tuple[list[str], dict]:
    """How `tool` is built into out_dir: its command and extra environment."""
    if tool == "minio":
        return [go, "install", f"{MINIO_MODULE}@{MINIO_VERSION}"], {"GOBIN": str(out_dir)}
    if tool == "toxiproxy-server":
        return [go, "install", f"{TOXIPROXY_PACKAGE}@{TOXIPROXY_VERSION}"], {"GOBIN": str(out_dir)}
    return [go, "build", "-o", str(out_dir / tool), "."], {}


def install(tool: str, go: str, say=None) -> Path:
    """The pinned build of `tool` in the cache (cached_path): the file there when it passes its
    pin (one that fails is removed), else built with build_env and placed there only when it is
    the pinned bytes. Refused before building when no pin exists (and unpinned tools are not allowed)."""
    dest = cached_path(tool)
    if dest.is_file():
        try:
            return check(tool, dest)
        except RefbenchError as e:
            log.warning("%s; removing it and building again", e)
            dest.unlink()
    pin = pin_for(tool)
    if pin is None and not unpinned_allowed():
        check(tool, dest)  # raises, naming what is not pinned
    if say:
        say(f"building {tool} {version_of(tool)} with {TOOLS_GO} (reproducible, checked against its pinned hash)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{dest.name}-", dir=dest.parent) as tmp:
        argv, extra = _build_argv(tool, go, Path(tmp))
        source = paths.tool_source("s3restore") if tool == "refbench-s3restore" else contextlib.nullcontext(tmp)
        with source as cwd:
            p = subprocess.run(argv, cwd=cwd, env={**build_env(), **extra}, capture_output=True, text=True)
        # `go install` names the binary after the package's last element (toxiproxy's is "server")
        built = Path(tmp) / (tool if tool == "refbench-s3restore" else argv[2].split("@")[0].rsplit("/", 1)[-1])
        if p.returncode != 0 or not built.is_file():
            raise RefbenchError(f"building {tool} {version_of(tool)} with {TOOLS_GO} failed: {' '.join(argv[1:])} "
                                f"exited {p.returncode}", detail=p.stderr[-3000:])
        got = sha256_of(built)
        if pin is not None and got != pin.sha256:
            raise RefbenchError(f"built {tool} {pin.version} with {TOOLS_GO} for {pin.platform}: SHA-256 {got}, "
                                f"but {pin.sha256} is pinned (refbench/pins.py); the build is not the reproducible "
                                f"one (another Go, or a GOFLAGS/GOAMD64/CGO setting leaking in?): not used")
        built.chmod(0o755)
        os.replace(built, dest)
    return dest
