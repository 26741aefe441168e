"""`refbench setup`: install or locate the tools a run needs, idempotently.

What a pip-installed user lacks, from the package registries only (never GitHub):

- Go: a toolchain from the Go module proxy (golang.org/toolchain), only when none is installed;
- hyperfine 2.0 (each run's own CPU time and peak memory): the binary of the pinned wheel
  (astral-dev-toolchain-hyperfine from PyPI, `pip download`), refused unless it has the SHA-256
  pinned in refbench/pins.py; where no wheel can be had, built from crates.io with
  `cargo +1.97.0 install --locked` (after `rustup toolchain install 1.97.0 --profile minimal`),
  which is not pinned (used only under REFBENCH_UNPINNED_TOOLS=1); 1.20 where that fails (saying
  what is lost); without cargo, the Debian package;
- MinIO: `go install` of a pinned pseudo-version from the Go module proxy, once per machine, built
  reproducibly and refused unless it has the SHA-256 pinned in refbench/pins.py;
- toxiproxy (the network profiles' shaper, refbench/network.py): `go install` of a pinned release's
  server from the Go module proxy, once per machine, pinned the same way;
- refbench-s3restore: built from the Go source shipped in the package, cached by its hash, pinned
  the same way;
- GNU time, only while the hyperfine found cannot report peak memory itself.

Everything pinned is kept in $XDG_CACHE_HOME/refbench and linked into the tools directory
(paths.tools_bin(): tools/bin in a checkout, else the cache's bin/); refbench runs each only after
checking it against its pin, and never puts either directory on PATH. What cannot be checked
against a pin, a Go fetched here and a hyperfine built with cargo, goes to $XDG_DATA_HOME/refbench,
which no cache step restores: setup runs nothing from a cache that is not the pinned bytes. setup
runs nothing with the cache key: it refuses REFBENCH_CACHE_KEY and drops REFBENCH_CACHE_KEY_FILE
before it starts anything. scripts/setup.sh (`make setup`) calls this, so there is one implementation.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
import zlib
from pathlib import Path
from typing import Callable

from .. import hyperfine, paths, pins, tools, trust
from ..errors import EXIT_ERROR, EXIT_OK, RefbenchError

DEFAULT_GO_TOOLCHAIN = "go1.24.6"  # fetched only when no Go is installed; GO_TOOLCHAIN names another
# the checksum database's h1: of each toolchain zip setup may fetch (sum.golang.org's lookup of
# golang.org/toolchain@v0.0.1-<go>.<os>-<arch>): the proxy, or the network to it, is not trusted to
# hand over the Go that builds everything after (review35k K1)
GO_ZIP_SUMS = {
    "go1.24.6 linux/amd64": "h1:ddMwad9gwMnW/sEogIxiiTOS/KOJdVWoJQMCga/Sc3Q=",
}


def say(msg: str) -> None:
    print(f"setup: {msg}", file=sys.stderr, flush=True)


def _link(target: Path, name: str, bin_dir: Path) -> Path:
    """bin_dir/name -> target (replaced atomically). Where bin_dir is the cache's own bin/ (an
    installed refbench's), it is reached through no link: a restored `bin` -> ~/go/bin made setup
    replace the user's files of those names there (review35i I4); a --bin-dir of the user's is
    theirs, links and all."""
    link = bin_dir / name
    if link.is_symlink() and os.readlink(link) == str(target):
        return link
    root, where = os.path.abspath(paths.cache_root()), Path(os.path.abspath(bin_dir))
    if where.is_relative_to(root):
        settled = paths.settled_cache_dir(root)
        paths.replace_link(settled / where.relative_to(root) / name, target, within=settled)
    else:
        paths.replace_link(link, target)
    return link


def _root_apt() -> list[str] | None:
    """apt-get argv prefix when packages can be installed (root, or password-less sudo)."""
    if not shutil.which("apt-get"):
        return None
    if os.geteuid() == 0:
        return ["apt-get"]
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "apt-get"]
    return None


def apt_install(*packages: str) -> bool:
    apt = _root_apt()
    if not apt:
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = [*apt, "install", "-y", "-qq", "--no-install-recommends", *packages]
    if subprocess.run(cmd, capture_output=True, env=env).returncode == 0:
        return True
    subprocess.run([*apt, "update", "-qq"], capture_output=True, env=env)
    return subprocess.run(cmd, capture_output=True, env=env).returncode == 0


# ---- the pieces ---------------------------------------------------------------------------
def zip_hash(z: zipfile.ZipFile) -> str:
    """Go's h1: of a module zip (golang.org/x/mod/sumdb/dirhash HashZip): the sorted lines
    'sha256-hex  name' of its files, hashed."""
    h = hashlib.sha256()
    for name in sorted(i.filename for i in z.infolist() if not i.is_dir()):
        h.update(f"{hashlib.sha256(z.read(name)).hexdigest()}  {name}\n".encode())
    return "h1:" + base64.b64encode(h.digest()).decode()


def _leaves_its_directory(name: str) -> bool:
    """Whether a zip entry's name, or what is left of it once a leading part is cut off, could
    name a place outside the directory it is unpacked into, or the directory itself: an absolute
    name, a `..` or `.` component, or an empty one (`a//b`: cut after `a/`, the rest is the
    absolute `/b`). A directory entry's trailing `/` is no empty component."""
    parts = name.split("/")
    return name.startswith("/") or ".." in parts or "." in parts or "" in parts[:-1]


# what a damaged zip raises on reading (a bad CRC, garbled or encrypted data, an unknown method, an
# end record that points before the file's start); an unpinned Go's zip is read unhashed
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, RuntimeError, NotImplementedError, EOFError, ValueError)


def _check_go_zip(z: zipfile.ZipFile, which: str, url: str) -> None:
    """The fetched toolchain zip is the one the checksum database lists (GO_ZIP_SUMS; another Go
    only where unpinned tools are allowed), and no entry would land outside the directory it is
    unpacked into (a `../` name was written above the data directory; a `PREFIX//abs/path` one at
    /abs/path, since what is written is the name with PREFIX cut off, review35m M1)."""
    bad = next((i.filename for i in z.infolist() if _leaves_its_directory(i.filename)), None)
    want, got = GO_ZIP_SUMS.get(which), None
    if not bad and want:
        got = zip_hash(z)
    if bad or (want and got != want) or (not want and not pins.unpinned_allowed()):
        why = (f"an entry named {bad!r}" if bad else f"its hash is {got}, the checksum database's is {want}" if want
               else f"refbench pins no hash for Go {which} (pinned: {', '.join(GO_ZIP_SUMS)}; "
                    "REFBENCH_UNPINNED_TOOLS=1 takes it unchecked)")
        raise RefbenchError(f"refusing the Go toolchain from {url}: {why}; install Go, or fetch it from another GOPROXY")


def _unpack(z: zipfile.ZipFile, prefix: str, tmp: Path) -> None:
    """The files of `z` under `prefix`, written below `tmp` without it (names checked before:
    _check_go_zip); executables, and what sits in a bin/ or tool/ directory, made runnable."""
    for info in z.infolist():
        if not info.filename.startswith(prefix) or info.is_dir():
            continue
        out = tmp / info.filename[len(prefix):]
        out.parent.mkdir(parents=True, exist_ok=True)
        with z.open(info) as src, open(out, "wb") as fh:
            shutil.copyfileobj(src, fh)
        mode = (info.external_attr >> 16) & 0o777
        if mode & 0o111 or "/bin/" in str(out) or "/tool/" in str(out):
            out.chmod(0o755)


def ensure_go(bin_dir: Path) -> str:
    """The Go refbench builds with (tools.go: the machine's, on PATH); where there is none, a Go
    toolchain fetched from the Go module proxy into refbench's data directory, not a cache: no
    cache is trusted to hold a program refbench runs (refbench.tools). `bin_dir` is not used for it."""
    go = tools.go()
    if go:
        return go
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), platform.machine())
    toolchain = os.environ.get("GO_TOOLCHAIN", DEFAULT_GO_TOOLCHAIN)  # read when asked, never at import
    dest = paths.data_root() / f"{toolchain}.linux-{arch}"
    if not (dest / "bin" / "go").is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        proxy = (os.environ.get("GOPROXY") or "https://proxy.golang.org").split(",")[0].split("|")[0]
        if proxy in ("direct", "off"):
            proxy = "https://proxy.golang.org"
        url = f"{proxy}/golang.org/toolchain/@v/v0.0.1-{toolchain}.linux-{arch}.zip"
        say(f"Go not found: fetching the {toolchain} toolchain from the Go module proxy")
        try:
            data = urllib.request.urlopen(url, timeout=300).read()
        except OSError as e:
            raise RefbenchError(f"cannot fetch Go from {url}: {e} (install Go, or set GOPROXY)") from None
        prefix = f"golang.org/toolchain@v0.0.1-{toolchain}.linux-{arch}/"
        try:  # checked before anything is written
            z = zipfile.ZipFile(io.BytesIO(data))
            _check_go_zip(z, f"{toolchain} linux/{arch}", url)
        except _ZIP_ERRORS as e:
            raise RefbenchError(f"refusing the Go toolchain from {url}: not a zip that reads ({e})") from None
        tmp = Path(tempfile.mkdtemp(prefix="go.", dir=dest.parent))
        with z:
            try:
                _unpack(z, prefix, tmp)
            except (OSError, *_ZIP_ERRORS) as e:  # a full disk, names that collide (a file where a directory goes)
                shutil.rmtree(tmp, ignore_errors=True)
                raise RefbenchError(f"cannot unpack the Go toolchain from {url} into {tmp.parent}: {e}") from None
        try:
            tmp.rename(dest)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(dest / "bin" / "go")


LOST_WITH_1_X = ("each run's own peak memory (1.x reports a running maximum across builds: memory "
                 "gets no verdict), CPU time per run outside interleaved rounds, instruction counts")


def _vtext(binary: str | None) -> str:
    return ".".join(map(str, hyperfine.version(binary) or ())) if binary else ""


def ensure_hyperfine(bin_dir: Path, build: bool = True, install: Callable = pins.install) -> str | None:
    """The pinned hyperfine 2.0, its wheel's binary (refbench.pins); where that cannot be had, a 2.x
    found on PATH (which measures the same), else a cargo build (not pinned), 1.20 where 2.0 cannot
    be built, saying what is lost; an older one (or the Debian package) as the last resort."""
    try:
        pinned = install("hyperfine", "", say)
    except RefbenchError as e:
        say(f"no pinned hyperfine: {e}")
    else:
        _link(pinned, "hyperfine", bin_dir)
        return str(pinned)
    try:
        found = hyperfine.locate()
    except RefbenchError as e:  # a hyperfine in the tools directories that is not the pinned one
        say(str(e))
        found = None
    if found and hyperfine.measures_own_runs(found):
        if Path(found) == hyperfine.cargo_path(hyperfine.PINNED_VERSION):
            _link(Path(found), "hyperfine", bin_dir)
        return found
    if build:
        cargo = shutil.which("cargo") or hyperfine._home_cargo()
        if cargo:
            if found:
                say(f"hyperfine {_vtext(found)} at {found} cannot measure each run's own CPU and memory "
                    f"(needs {hyperfine.PINNED_VERSION})")
            for version in (hyperfine.PINNED_VERSION, hyperfine.FALLBACK_VERSION):
                if version == hyperfine.FALLBACK_VERSION and found and hyperfine.exports_memory(found):
                    break  # a 1.20+ is already here: building the fallback adds nothing
                try:
                    pinned = hyperfine.install(version, cargo=cargo, say=say)
                except RefbenchError as e:
                    say(f"{e}" + (f"; building {hyperfine.FALLBACK_VERSION} instead, without "
                                  f"{LOST_WITH_1_X}" if version == hyperfine.PINNED_VERSION else ""))
                    if e.detail:
                        print(e.detail, file=sys.stderr)
                    continue
                _link(pinned, "hyperfine", bin_dir)
                if not pins.unpinned_allowed():
                    say(f"hyperfine {version} built here with cargo is not the pinned binary (a Rust build differs "
                        f"between machines): refbench runs it only with {pins.UNPINNED_ENV}=1")
                return str(pinned)
        elif not found:
            say(f"cargo not found: cannot build hyperfine {hyperfine.PINNED_VERSION}; trying the Debian package")
    if not found and apt_install("hyperfine"):
        found = shutil.which("hyperfine")
    if found and not hyperfine.measures_own_runs(found):
        say(f"using hyperfine {_vtext(found)} at {found}: no {LOST_WITH_1_X}"
            + ("" if hyperfine.exports_memory(found) else "; one untimed run's peak memory comes from GNU time")
            + f" (install cargo and rustup, then run `refbench setup` for {hyperfine.PINNED_VERSION})")
    return found


def ensure_minio(bin_dir: Path, go: str, install: Callable = pins.install) -> str:
    cached = install("minio", go, say)
    _link(cached, "minio", bin_dir)
    return str(cached)


def ensure_toxiproxy(bin_dir: Path, go: str, install: Callable = pins.install) -> str:
    """The network profiles' shaper (backends/toxiproxy.py), linked as toxiproxy-server."""
    cached = install("toxiproxy-server", go, say)
    _link(cached, "toxiproxy-server", bin_dir)
    return str(cached)


def ensure_s3restore(bin_dir: Path, go: str, install: Callable = pins.install) -> str:
    cached = install("refbench-s3restore", go, say)
    _link(cached, "refbench-s3restore", bin_dir)
    return str(cached)


def gnu_time() -> str | None:
    for p in ("/usr/bin/time", shutil.which("gtime") or ""):
        if p and os.access(p, os.X_OK) and subprocess.run([p, "-f", "%M", "true"], capture_output=True).returncode == 0:
            return p
    return None


def ensure_gnu_time(needed: bool) -> str | None:
    found = gnu_time()
    if found or not needed:
        return found
    if apt_install("time"):
        return gnu_time()
    say("GNU time not installed (apt-get install time): peak RSS will be n/a with this hyperfine")
    return None


# ---- the command ----------------------------------------------------------------------------
def run_setup(bin_dir: Path | None = None, build_hyperfine: bool = True, minio: bool = True,
              servers_on_first_use: bool = False, install: Callable = pins.install) -> dict:
    """Install or locate everything; returns {tool: path or None}. `servers_on_first_use`: MinIO,
    toxiproxy and refbench-s3restore are left to the first run that needs them (refbench.firstuse),
    which builds them the same way while its refs build. `install`: how a pinned tool is placed
    (pins.install; a test's recorder)."""
    # the pinned builds and the hyperfine wheel go under the cache root (pins.cached_path): a link
    # there, which a cache restore may have planted, is refused in one line, never written through
    paths.settled_cache_dir(paths.cache_root()).mkdir(parents=True, exist_ok=True)
    bin_dir = Path(bin_dir or paths.tools_bin())
    # what setup runs needs no key (cli.main has refused one in the environment, and has taken the
    # cache directories out of PATH: refbench.tools) and builds with pins.build_env's clean PATH
    os.environ.pop(trust.KEY_FILE_ENV, None)
    trust.refuse_key_in_environment()
    out: dict[str, str | None] = {}
    go = out["go"] = ensure_go(bin_dir)
    say(subprocess.run([go, "version"], capture_output=True, text=True, cwd="/",  # no go.mod to switch its Go
                       env={**tools.child_env(), "GOTOOLCHAIN": "local"}).stdout.strip())
    hf = out["hyperfine"] = ensure_hyperfine(bin_dir, build=build_hyperfine, install=install)
    if hf:
        say(f"hyperfine {_vtext(hf)} at {hf}")
    else:
        say("no hyperfine: install cargo (rustup) or the hyperfine package, then run `refbench setup` again")
    out["time"] = ensure_gnu_time(needed=not (hf and hyperfine.measures_own_runs(hf)))
    later = minio and servers_on_first_use  # the servers and the restore tool: the first run's to build
    servers = minio and not later
    out["minio"] = ensure_minio(bin_dir, go, install) if servers else tools.find_tool("minio")
    out["toxiproxy-server"] = ensure_toxiproxy(bin_dir, go, install) if servers else tools.find_tool("toxiproxy-server")
    out["refbench-s3restore"] = (ensure_s3restore(bin_dir, go, install) if not later
                                 else tools.find_tool("refbench-s3restore"))
    if later and not (out["minio"] and out["toxiproxy-server"] and out["refbench-s3restore"]):
        say("MinIO, toxiproxy and refbench-s3restore: built by the first run that needs them, while its refs "
            "build (`refbench setup` without --servers-on-first-use builds them now)")
    say(f"tools linked in {bin_dir}")
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="refbench setup", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", type=Path, help=f"where to link the tools (default: {paths.tools_bin()})")
    p.add_argument("--no-build-hyperfine", dest="build_hyperfine", action="store_false",
                   help="do not build hyperfine with cargo; use whatever hyperfine is installed")
    p.add_argument("--no-minio", dest="minio", action="store_false",
                   help="skip MinIO and toxiproxy (you will always pass -b BUCKET, reached over its own network)")
    p.add_argument("--servers-on-first-use", action="store_true",
                   help="leave MinIO, toxiproxy and refbench-s3restore to the first run that needs them, which "
                        "builds them (pinned and checked the same way) while its refs build: a first answer "
                        "sooner on a new machine")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    found = run_setup(args.bin_dir, args.build_hyperfine, args.minio, args.servers_on_first_use)
    missing = [k for k in ("go", "hyperfine") if not found.get(k)]
    if missing:
        say(f"still missing: {', '.join(missing)} (see `refbench doctor`)")
        return EXIT_ERROR
    say("ready (`refbench doctor` shows what was found)")
    return EXIT_OK
