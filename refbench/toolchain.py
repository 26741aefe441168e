"""Which Go builds each ref: by default the one its go.mod asks for, fetched through GOTOOLCHAIN.

Why: a release is what its users run, and they run it built with the Go it was made for. Old
releases do not always compile with today's Go (kubo v0.35.0's cockroachdb/swiss dependency fails
with Go 1.26: `undefined: hashFn`; its go.mod asks for go 1.24), and two refs built with two Go
releases differ by the compiler as well as by their code.

What go.mod asks for: its `toolchain` line when there is one (at least its `go` line), else its
`go` line's newest patch release that the Go module proxy serves (patch releases only fix bugs and
security problems; `go 1.24` and `go 1.24.0` both give the newest go1.24.N), never an older one.
When the proxy serves none of that minor line (a go.mod older than any toolchain it has), the
newest patch of the oldest newer line builds it, and the run says so.

refbench only chooses the name. The go command itself downloads golang.org/toolchain from the
module proxy when GOTOOLCHAIN names a toolchain; nothing is fetched from anywhere else. The
toolchains the proxy serves (`go list -m -versions golang.org/toolchain`) are asked once per
process and kept for a day under the builds directory, so a run does not ask every time.

The parts that decide (versions, go.mod lines, --go values, the pick) are pure functions; only
`go_version`, `available` and `verify_cached` run the go command. `Chooser` holds one builder's
choices: what each ref's go.mod asks for, this machine's Go, and the Go each ref settles on.
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from . import cleanpath, paths, refs, trust
from .errors import BuildError, RefbenchError

log = logging.getLogger(__name__)

LOCAL, MOD = "local", "mod"
ENV = "REFBENCH_GO"  # the default choice for every build, when --go does not say
TOOLCHAIN_MODULE = "golang.org/toolchain"
LIST_FILE = "go-toolchains.json"  # under the builds directory: what the proxy served, and when
LIST_MAX_AGE = 24 * 3600.0  # seconds a listing is trusted without asking the proxy again
EXPECTED = "local, mod, or a Go version such as 1.24.4, go1.24.4 or 1.24 (its newest patch)"

_VERSION = re.compile(r"(?:go)?(\d+)\.(\d+)(?:\.(\d+)|(alpha|beta|rc)(\d+))?")
_STAGES = {"alpha": 1, "beta": 2, "rc": 3}
_RELEASE, _LANGUAGE = 4, 0


@dataclass(frozen=True)
class GoVersion:
    """A Go version as GOTOOLCHAIN names it (go1.24.4, go1.25rc1, or go1.24 for a language
    version), with the go command's order: 1.24 < 1.24rc1 < 1.24.0 < 1.24.1."""
    name: str
    key: tuple[int, int, int, int]  # (major, minor, stage, patch or pre-release number)

    @property
    def line(self) -> tuple[int, int]:
        return self.key[:2]

    @property
    def released(self) -> bool:
        return self.key[2] == _RELEASE

    @property
    def number(self) -> str:
        """The version without its 'go': what --go and go.mod's go line take."""
        return self.name.removeprefix("go")


def parse_version(text: str, listed: bool = False) -> GoVersion | None:
    """'1.24.4', 'go1.24.4', '1.24', 'go1.25rc1' -> GoVersion; None for anything else. `listed`:
    a name from the toolchain module, where 'go1.20' is a release (Go before 1.21 named its first
    release of a line without '.0'); in go.mod or --go, '1.20' is the language version."""
    m = _VERSION.fullmatch(text.strip())
    if not m:
        return None
    major, minor, patch, stage, pre = m.groups()
    if patch is not None:
        key = (int(major), int(minor), _RELEASE, int(patch))
    elif stage:
        key = (int(major), int(minor), _STAGES[stage], int(pre))
    else:
        key = (int(major), int(minor), _RELEASE if listed else _LANGUAGE, 0)
    return GoVersion("go" + text.strip().removeprefix("go"), key)


@dataclass(frozen=True)
class GoMod:
    """The Go a go.mod asks for: its `go` and `toolchain` lines."""
    go: GoVersion | None
    toolchain: GoVersion | None

    @property
    def asks(self) -> GoVersion | None:
        """The oldest Go it accepts: the toolchain line when it is at least the go line (the go
        command ignores an older one)."""
        if self.toolchain and (self.go is None or self.toolchain.key >= self.go.key):
            return self.toolchain
        return self.go

    def describe(self) -> str:
        """What it asks for, in its own words: 'go 1.24' or 'toolchain go1.24.4'."""
        want = self.asks
        if want is None:
            return "no Go version"
        return f"toolchain {want.name}" if want is self.toolchain else f"go {want.number}"


def parse_gomod(text: str) -> GoMod:
    """The go and toolchain lines of a go.mod (comments dropped; `toolchain default` and
    unreadable values count as absent)."""
    found: dict[str, GoVersion | None] = {"go": None, "toolchain": None}
    for line in text.splitlines():
        m = re.fullmatch(r"\s*(go|toolchain)\s+(\S+)\s*", line.split("//", 1)[0])
        if m:
            found[m.group(1)] = parse_version(m.group(2))
    return GoMod(**found)


def listed_versions(output: str, platform: str) -> tuple[GoVersion, ...]:
    """The toolchains for `platform` ('linux-amd64') in the output of `go list -m -versions
    golang.org/toolchain` (the module path, then versions like v0.0.1-go1.24.4.linux-amd64)."""
    out = []
    for word in output.split()[1:]:
        m = re.fullmatch(r"v0\.0\.1-(go[^\s]+)\." + re.escape(platform), word)
        v = parse_version(m.group(1), listed=True) if m else None
        if v:
            out.append(v)
    return tuple(out)


def newest_patch(versions: Sequence[GoVersion], at_least: GoVersion, same_line: bool = False) -> GoVersion | None:
    """The newest release of the oldest minor line that has releases at or above `at_least` (only
    `at_least`'s own line with `same_line`); None when there is none."""
    ok = [v for v in versions if v.released and v.key >= at_least.key
          and (not same_line or v.line == at_least.line)]
    if not ok:
        return None
    line = min(v.line for v in ok)
    return max((v for v in ok if v.line == line), key=lambda v: v.key)


# ---- what the user asks for: --go and REFBENCH_GO -----------------------------------------------
def parse_choice(text: str, what: str = "--go") -> str:
    """'local', 'mod', or a version as GOTOOLCHAIN names it ('1.24.4' -> 'go1.24.4'; 'go1.24' is
    that line's newest patch)."""
    word = text.strip().lower()
    if word in (LOCAL, MOD):
        return word
    v = parse_version(word)
    if v is None:
        raise RefbenchError(f"{what} {text!r}: expected {EXPECTED}")
    return v.name


def parse_choices(text: str, what: str = "--go") -> tuple[str, ...]:
    """One choice for every build, or a comma-separated choice per build in -s order."""
    parts = text.split(",")
    if any(not p.strip() for p in parts):
        raise RefbenchError(f"{what} {text!r}: an empty value; expected {EXPECTED}, or one per build "
                            "separated by commas")
    return tuple(parse_choice(p, what) for p in parts)


def default_choice(environ: Mapping[str, str]) -> str:
    """REFBENCH_GO (one value), else mod: read once at the command line (runenv.environ_go)."""
    text = environ.get(ENV, "").strip()
    if not text:
        return MOD
    if "," in text:
        raise RefbenchError(f"{ENV}={text!r}: one value for every build ({EXPECTED}); "
                            "a value per build goes in --go")
    return parse_choice(text, ENV)


def per_build(choices: Sequence[str], n: int, default: str | None = None) -> tuple[str, ...]:
    """The choice for each of n builds: none given -> the default for all, one -> all, else one
    per build."""
    if not choices:
        return ((default or MOD),) * n
    if len(choices) == 1:
        return tuple(choices) * n
    if len(choices) != n:
        raise RefbenchError(f"--go gives {len(choices)} values for {n} builds: give one for every build, "
                            "or one per build in -s order")
    return tuple(choices)


# ---- the pick -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pick:
    name: str  # what GOTOOLCHAIN names (this machine's Go: its own GOVERSION)
    note: str | None = None  # what a user should know about it (a go.mod older than the proxy's toolchains)


def pick(choice: str, gomod: GoMod | None, local: str, listed: Callable[[], Sequence[GoVersion]]) -> Pick:
    """The Go a choice builds with. `local`: this machine's GOVERSION; `listed`: the toolchains the
    proxy serves, called only when the answer depends on them."""
    if choice == LOCAL:
        return Pick(local)
    if choice == MOD:
        want = gomod.asks if gomod else None
        if want is None:
            return Pick(local, "its go.mod asks for no Go version: built with this machine's Go")
        if want is gomod.toolchain:  # the exact toolchain it names
            return Pick(want.name)
        got = newest_patch(listed(), want)
        if got is None:
            raise BuildError(f"go.mod asks for {gomod.describe()}, newer than any Go toolchain the module proxy "
                             f"serves; use --go local or --go VERSION")
        note = None if got.line == want.line else (
            f"go.mod asks for {gomod.describe()}; the module proxy serves no go{want.line[0]}.{want.line[1]} "
            f"toolchain, so {got.name} builds it, the oldest newer line's newest patch (--go chooses another)")
        return Pick(got.name, note)
    wanted = parse_version(choice)
    if wanted is None:
        raise RefbenchError(f"--go {choice!r}: expected {EXPECTED}")
    if wanted.name == local:
        return Pick(local)
    versions = listed()
    if wanted.key[2] == _LANGUAGE:  # go1.24: that line's newest patch
        got = newest_patch(versions, wanted, same_line=True)
    else:
        got = wanted if any(v.key == wanted.key for v in versions) else None
    if got is None:
        line = sorted((v for v in versions if v.line == wanted.line and v.released), key=lambda v: v.key)
        has = f"its go{wanted.line[0]}.{wanted.line[1]} releases there: {', '.join(v.number for v in line[-5:])}" \
            if line else f"it has no go{wanted.line[0]}.{wanted.line[1]} release"
        raise BuildError(f"--go {wanted.number}: the Go module proxy serves no such toolchain ({has}); "
                         "--go local builds with this machine's Go")
    return Pick(got.name)


def hint(used: str, gomod: GoMod | None, wanted: str | None) -> str:
    """What a failed build's message says about Go: what go.mod asks for and, when the build used
    another Go than that, how to build with it ('go.mod asks for go 1.24; try --go mod or --go 1.24.4')."""
    if gomod is None or gomod.asks is None:
        return "its go.mod asks for no Go version"
    said = f"go.mod asks for {gomod.describe()}"
    if not wanted or wanted == used:
        return said
    return f"{said}; try --go mod or --go {wanted.removeprefix('go')}"


def gotoolchain(name: str, local: str) -> str:
    """GOTOOLCHAIN for a build with `name`: 'local' for this machine's own Go (no switch, no
    download), else the name, which the go command fetches from the module proxy."""
    return LOCAL if name == local else name


# ---- the go command -------------------------------------------------------------------------------
def go_version(env: dict | None = None) -> str:
    """The Go that builds under env: with GOTOOLCHAIN naming a toolchain, that one (fetched first
    when it is not here yet). Read from `go version`, which every Go has; `go env GOVERSION` came
    with Go 1.16, and an s5cmd commit of 2022 asks for go 1.13."""
    return version_of(_run_go(["version"], dict(paths.layout().environ) if env is None else env))


def version_of(output: str) -> str:
    """`go version go1.13.15 linux/amd64` -> go1.13.15 ('' when it says something else)."""
    words = output.split()
    return words[2] if len(words) > 2 and words[:2] == ["go", "version"] else ""


_LISTED: dict[str, tuple[GoVersion, ...]] = {}  # per process, by listing file


def available(cache_dir: Path, env: dict | None = None, max_age: float = LIST_MAX_AGE,
              now: Callable[[], float] = time.time) -> tuple[GoVersion, ...]:
    """The toolchains the Go module proxy serves for this machine: asked once per process and kept
    for `max_age` in cache_dir/go-toolchains.json. When the proxy cannot be reached, an older
    listing serves; without one, a one-line error that names --go local."""
    path = Path(cache_dir) / LIST_FILE
    if str(path) in _LISTED:
        return _LISTED[str(path)]
    env = {**(env or paths.layout().environ), "GOTOOLCHAIN": LOCAL}  # default: what the command line read
    kept = _read_listing(path, now())
    if kept and now() - kept[0] < max_age:
        _LISTED[str(path)] = kept[2]
        return kept[2]
    try:
        platform = _run_go(["env", "GOHOSTOS", "GOHOSTARCH"], env).split()
        output = _run_go(["list", "-m", "-versions", TOOLCHAIN_MODULE], env)
    except BuildError as e:
        if not kept:
            raise BuildError(f"cannot list the Go toolchains the module proxy serves ({e}); "
                             "build with this machine's Go instead: --go local") from None
        versions = kept[2]  # yesterday's answer beats none
    else:
        versions = listed_versions(output, "-".join(platform))
        _write_listing(path, now(), "-".join(platform), versions)
    _LISTED[str(path)] = versions
    return versions


def _run_go(args: list[str], env: dict, tmp: str | None = None, go: str | None = None) -> str:
    """stdout of `go ARGS` run outside any module (no go.mod of the current directory switches
    its Go, and `go mod download`'s answer, which verify_cached trusts, is the checksum database's,
    not a module's replace); BuildError with go's last line when it fails. go looks for a go.mod
    in every parent of its directory, a scratch one in `tmp` (default: the system's temp
    directory): one found there fails this, naming it (review35e LOW), and no go.work is read.
    `go`: default the go of `env`'s PATH (pins.verified_build_env puts the one it builds with
    first), else the one builds run (cleanpath.go: the Go `refbench setup` fetched into the data
    directory, which a bare `go` never found, review35m)."""
    go = go or shutil.which("go", path=env.get("PATH", "")) or cleanpath.go() or "go"
    switch = env.get("GOTOOLCHAIN", LOCAL)
    said = f"`go {' '.join(args)}`" + ("" if switch == LOCAL else f" with GOTOOLCHAIN={switch}")
    env = {**env, "GOWORK": "off"}
    with tempfile.TemporaryDirectory(prefix="refbench-go-", dir=tmp) as scratch:
        above = next((p / "go.mod" for p in Path(scratch).parents if os.path.lexists(p / "go.mod")), None)
        if above:
            raise BuildError(f"{said} would run inside the Go module of {above}, above the temporary directory "
                             f"{Path(scratch).parent}: remove it, or point TMPDIR elsewhere")
        try:
            p = subprocess.run([go, *args], capture_output=True, text=True, env=env, cwd=scratch, timeout=600)
        except FileNotFoundError:
            raise BuildError("go not found on PATH (run `make setup`, or install Go)") from None
        except subprocess.TimeoutExpired:
            raise BuildError(f"{said} timed out") from None
    if p.returncode != 0:
        raise BuildError(f"{said}: {(p.stderr.strip().splitlines() or ['failed'])[-1]}")
    return p.stdout


LISTING_SEAL = "go toolchain listing"  # trust.seal's purpose: a listing's seal passes for nothing else
CLOCK_SKEW = 300.0  # seconds a listing may seem to come from the future (another machine's clock)


def _read_listing(path: Path, now: float | None = None) -> tuple[float, str, tuple[GoVersion, ...]] | None:
    """(when it was listed, platform, versions) from the listing file, or None: also when it is not
    sealed under this run's key or says it was listed in the future. The file lives in the builds
    cache, which a restored cache may have written: its versions decide which patch release builds
    a `go 1.24` go.mod, and a planted `listed_at` far ahead kept it for ever (review35d LOW 11)."""
    try:
        doc = paths.read_record(path)  # through no link, and a FIFO there blocks nothing (review35e)
        if doc is None:
            return None
        fields = {k: doc[k] for k in ("listed_at", "platform", "module", "versions")}
        if not trust.sealed(LISTING_SEAL, fields, doc.get("seal")):
            return None
        when = float(doc["listed_at"])
        if when > (time.time() if now is None else now) + CLOCK_SKEW:
            return None
        versions = tuple(v for v in (parse_version(n, listed=True) for n in doc["versions"]) if v)
        return when, str(doc["platform"]), versions
    except (OSError, ValueError, KeyError, TypeError, RefbenchError):
        return None


def _write_listing(path: Path, when: float, platform: str, versions: Sequence[GoVersion]) -> None:
    """Sealed (trust.seal), written whole through a rename that replaces a link at its place
    (paths.replace_file): a concurrent run reads the old listing or the new one."""
    fields = {"listed_at": when, "platform": platform, "module": TOOLCHAIN_MODULE,
              "versions": [v.name for v in versions]}
    try:
        doc = {**fields, "seal": trust.seal(LISTING_SEAL, fields)}
        paths.replace_file(path, json.dumps(doc, indent=1), within=path.parent)
    except (OSError, RefbenchError):
        pass  # a listing that cannot be kept is asked again next time


# ---- a toolchain the module cache holds -------------------------------------------------------------
#: what must not weaken the checksum database's word on a toolchain when it is asked
NO_SUMDB_BYPASS = ("GONOSUMDB", "GONOSUMCHECK", "GOPRIVATE", "GOINSECURE", "GOFLAGS")
_VERIFIED: dict[tuple[str, str], str] = {}  # (toolchain, module cache) -> its directory, checked once per process


def dir_hash(d: Path, prefix: str, toolchain: bool = True) -> str:
    """Go's h1: hash (golang.org/x/mod/sumdb/dirhash Hash1) of the module unpacked at `d`, as the
    zip it came from: the sorted lines 'sha256-hex  PREFIX/relpath', hashed. Go unpacks each of a
    toolchain's _go.mod files also as go.mod (so the tree reads as a module); for a `toolchain`,
    such a go.mod must equal its _go.mod and is left out. A link or special file is refused: Go
    unpacks none."""
    entries = []
    for top, dirs, files in paths.walk_all(d):  # an unlistable directory raises, never skipped
        dirs.sort()
        for name in files + [x for x in dirs if os.path.islink(os.path.join(top, x))]:
            path = os.path.join(top, name)
            rel = os.path.relpath(path, d).replace(os.sep, "/")
            if not stat.S_ISREG(os.lstat(path).st_mode):
                raise BuildError(f"{path}: a link or special file, which no Go toolchain holds")
            if toolchain and name == "go.mod" and os.path.isfile(os.path.join(top, "_go.mod")):
                if _sha256(os.path.join(top, "_go.mod")) != _sha256(path):
                    raise BuildError(f"{path} is not its _go.mod, as Go unpacks it")
                continue
            entries.append((f"{prefix}/{rel}", path))
    h = hashlib.sha256()
    for name, path in sorted(entries):
        h.update(f"{_sha256(path)}  {name}\n".encode())
    return "h1:" + base64.b64encode(h.digest()).decode()


def _sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def module_cache(env: Mapping[str, str]) -> Path:
    """Where go keeps modules under `env`, found without running go (a go run here could switch
    to a toolchain the cache holds): GOMODCACHE, else the first GOPATH entry's pkg/mod, else
    ~/go/pkg/mod."""
    if env.get("GOMODCACHE"):
        return Path(env["GOMODCACHE"])
    gopath = (env.get("GOPATH") or "").split(os.pathsep)[0]
    return Path(gopath or Path(env.get("HOME") or Path.home()) / "go") / "pkg" / "mod"


def own_caches(environ: Mapping[str, str]) -> dict[str, str]:
    """GOMODCACHE and GOCACHE for building a target: refbench's own, in its data directory, which
    no cache step saves or restores, unless the machine's environment names its own (the user's
    choice, kept). go takes a compiled package from its build cache by its action id and compiles a
    module's unpacked directory as it finds it, without re-hashing either; a build may run what it
    compiled (`go run`) before anything is checked. So the Go caches a restore may fill (the
    default ~/go/pkg/mod and ~/.cache/go-build, which actions/setup-go saves and restores, or
    a `go env -w GOMODCACHE=...` refbench would not see) never feed a build a keyed run seals
    (review35j J1-J3). Set explicitly, the env file cannot move them (and builds run with GOENV=off)."""
    root = paths.data_root() / "go"
    return {"GOMODCACHE": environ.get("GOMODCACHE") or str(root / "mod"),
            "GOCACHE": environ.get("GOCACHE") or str(root / "build")}


def go_env() -> dict[str, str]:
    """The environment of every go command refbench runs: cleanpath.child_env's allow-list (no secret
    of the job, no cache directory on PATH), refbench's own Go caches (own_caches) and no settings
    file (GOENV=off: a GOCACHEPROG named there would replace the build cache, review35k K2). Since
    Go 1.24 even `go tool pprof` is built on first use into the build cache and run from there
    unhashed, so a restored ~/.cache/go-build ran in place of it (review35l L1)."""
    env = cleanpath.child_env()
    env.update(own_caches(paths.layout().environ))
    env["GOENV"] = "off"
    return env


_VCS_DROPPED: set[str] = set()  # module caches whose VCS work directories this process removed


def drop_vcs_work(env: Mapping[str, str]) -> None:
    """Remove go's VCS work directories ($GOMODCACHE/cache/vcs) before the first go command of
    this process under `env`. For a module it fetches straight from its repository (GOPRIVATE,
    GONOPROXY, GOPROXY=direct) go keeps a bare git repository there and runs git in it with that
    repository's own config: a restored module cache can hold one whose remote is `ext::sh ...`,
    and `go mod verify` in a keyed run then ran it, and it read the key (review35i I5). It is only
    a fetch cache: go clones anew. Removed through no link (paths.remove_tree); a link on the way
    is refused in one line."""
    mod = module_cache(env)
    if str(mod) in _VCS_DROPPED:
        return
    vcs = mod / "cache" / "vcs"
    try:
        # another refbench's go may be removing or refilling it at once (parallel runs): an error
        # the first time is retried once, and then it counts
        paths.remove_tree(vcs, mod, ignore_errors=True)
        if os.path.lexists(vcs):
            paths.remove_tree(vcs, mod)
    except paths.CacheLinkError as e:
        raise BuildError(f"the Go module cache {mod} holds a link where go keeps its VCS work directories "
                         f"(cache/vcs): {e}; `go clean -modcache` empties it", sha=None) from None
    except OSError as e:
        raise BuildError(f"cannot remove go's VCS work directories {vcs} ({e.strerror}); "
                         "`go clean -modcache` empties it", sha=None) from None
    _VCS_DROPPED.add(str(mod))


_ESCAPE = re.compile(r"[A-Z]")


def escaped(path: str) -> str:
    """A module path or version as the module cache spells it (golang.org/x/mod/module's
    EscapePath: an upper-case letter is `!` and its lower case)."""
    return _ESCAPE.sub(lambda m: "!" + m.group(0).lower(), path)


def compiled_modules(binary: Path, env: Mapping[str, str], go: str | None = None) -> list[tuple[str, str, str]]:
    """(module path, version, h1: sum) of every module `binary` says it was built from (`go
    version -m`: a dependency, or the module that replaced it, where it has a sum). A dependency
    replaced by a directory has no sum and is not in the module cache."""
    out = _run_go(["version", "-m", str(binary)], {**env, "GOTOOLCHAIN": LOCAL}, go=go)
    found: list[tuple[str, ...]] = []  # (line kind, path, version, sum); sum "" where none
    for line in out.splitlines():
        kind, *rest = line.strip().split("\t")
        if kind not in ("dep", "=>"):
            continue
        if kind == "=>" and found and found[-1][0] == "dep":
            found.pop()  # the dependency was replaced: what replaced it is what was compiled
        summed = len(rest) >= 3 and rest[2].startswith("h1:")
        found.append((kind, *rest[:3]) if summed else (kind, "", "", ""))
    found = [f for f in found if f[3]]
    return [(path, version, h1) for _, path, version, h1 in found]


def _verify_unpacked(where: Path, prefix: str, want: str, says: str, toolchain: bool = True) -> None:
    """The module unpacked at `where` hashes to `want` (dir_hash), else BuildError, no commit's
    fault: "the Go module cache SAYS (its hash, not want)"."""
    try:
        got = dir_hash(where, prefix, toolchain=toolchain)
    except (BuildError, OSError) as e:
        got = f"refused: {e}"
    if got != want:
        raise BuildError(f"the Go module cache {says} ({got}, not {want}): tampered with or corrupt; "
                         "`go clean -modcache` empties it", sha=None)


def verify_compiled(binary: Path, env: Mapping[str, str], go: str | None = None) -> int:
    """Every module `binary` was compiled from (compiled_modules), as unpacked in the module cache,
    hashes to the sum the build recorded for it. go checks a cached module's .ziphash when it loads
    it but compiles its unpacked directory as it finds it; `go mod verify` re-hashes that directory
    only for the root module's requirements, and a build may compile another module of the commit
    (`go build -C cmd/x`), or a root module without go.sum (review35i I2). This verifies what was
    built, before it is sealed. A module not in the cache was compiled from elsewhere (vendor/).
    How many modules were verified; BuildError (no commit's fault) on a mismatch."""
    mod = module_cache(env)
    verified = 0
    for path, version, want in compiled_modules(binary, env, go):
        where = mod / f"{escaped(path)}@{escaped(version)}"
        if not where.is_dir():
            continue
        _verify_unpacked(where, f"{path}@{version}", want, f"holds {path}@{version} ({where}) that is not what the "
                         "build recorded", toolchain=False)
        verified += 1
    return verified


def verify_cached(name: str, env: Mapping[str, str]) -> None:
    """Before GOTOOLCHAIN=`name` runs: the toolchain unpacked in the module cache is the one the
    checksum database lists, every file hashed. Go checks a toolchain only when it downloads it and
    runs an unpacked one as it finds it, and a module cache may come from a cache restore
    (refbench.trust): a planted bin/go would run. `go mod download -json` of the toolchain module
    gives its h1: from the checksum database (Go refuses a cached .ziphash that is not the
    database's, and fetches and unpacks a toolchain that is not there yet); the unpacked directory
    must hash to it. Once per toolchain and process: about 2 s for Go 1.25's 11,000 files
    (benchmarks/trust_cost.py). A mismatch is no commit's fault: BuildError with sha None."""
    if (name, env.get("GOMODCACHE", "")) in _VERIFIED:  # each module cache holds a copy of its own
        return
    drop_vcs_work(env)  # with GOPROXY=direct the toolchain module itself comes through git
    plain = {k: v for k, v in env.items() if k not in NO_SUMDB_BYPASS}
    if plain.get("GOSUMDB", "").strip() == "off":
        raise BuildError(f"GOSUMDB=off: refbench cannot check the Go toolchain {name} in the module cache against "
                         "the checksum database; unset GOSUMDB, or build with this machine's Go (--go local)", sha=None)
    platform = "-".join(_run_go(["env", "GOHOSTOS", "GOHOSTARCH"], {**plain, "GOTOOLCHAIN": LOCAL}).split())
    module = f"{TOOLCHAIN_MODULE}@v0.0.1-{name}.{platform}"
    try:
        out = _run_go(["mod", "download", "-json", module], {**plain, "GOTOOLCHAIN": LOCAL, "GOFLAGS": "-mod=mod"})
    except BuildError as e:
        raise BuildError(f"cannot check the Go toolchain {name} against the checksum database: {e}", sha=None) from None
    info = json.loads(out)
    want, where = info.get("Sum", ""), info.get("Dir", "")
    if not want.startswith("h1:") or not where:
        raise BuildError(f"`go mod download {module}` gave no checksum or directory: {info.get('Error', out[:200])}",
                         sha=None)
    _verify_unpacked(Path(where), module, want, f"holds the Go toolchain {name} ({where}) that is not the one the "
                     "checksum database lists")
    _VERIFIED[(name, env.get("GOMODCACHE", ""))] = where


# ---- one builder's choices ------------------------------------------------------------------------
class Chooser:
    """Which Go builds each ref of one builder, and what that Go calls itself: the one place a
    build's Go is chosen (refbench.builds builds with it and chooses nothing). `choice`: the Go
    every ref gets unless settle() is told otherwise (a --go value; MOD: what its go.mod asks for).
    `read_gomod(resolved)`: the ref's go.mod, from its verified sources or the module proxy (None
    without one); `gomod_key(resolved)`: what one go.mod is kept by (its commit, or its version);
    `env(toolchain, checked)`: the environment a go command runs under with that Go."""

    def __init__(self, choice: str, builds_dir: Path, env: Callable[..., dict],
                 read_gomod: Callable[[refs.ResolvedRef], GoMod | None],
                 gomod_key: Callable[[refs.ResolvedRef], str]):
        self.choice = choice
        self.builds_dir = builds_dir
        self._env, self._read_gomod, self._gomod_key = env, read_gomod, gomod_key
        self._local: str | None = None  # this machine's GOVERSION
        self._gomods: dict[str, GoMod | None] = {}  # by commit (git) or version (module)

    def local(self) -> str:
        """This machine's Go (GOVERSION with GOTOOLCHAIN=local), asked once."""
        if self._local is None:
            self._local = go_version(self._env())
        return self._local

    def listed(self) -> tuple[GoVersion, ...]:
        return available(self.builds_dir, self._env())

    def know(self, key: str, gomod: GoMod | None) -> None:
        """The go.mod of `key`, learnt on the way (the module proxy serves it with the version)."""
        self._gomods[key] = gomod

    def gomod(self, resolved: refs.ResolvedRef) -> GoMod | None:
        """What the ref's go.mod asks for (None without one), read once per commit or version."""
        key = self._gomod_key(resolved)
        if key not in self._gomods:
            self._gomods[key] = self._read_gomod(resolved)
        return self._gomods[key]

    def settle(self, resolved: refs.ResolvedRef, go: str | None = None) -> refs.ResolvedRef:
        """The ref with the Go that builds it: `go` (a --go value) or the builder's choice. A ref
        already settled keeps its Go unless `go` is given."""
        if resolved.toolchain and go is None:
            return resolved
        choice = parse_choice(go) if go else self.choice
        picked = pick(choice, self.gomod(resolved) if choice == MOD else None, self.local(), self.listed)
        if picked.note:
            log.warning("%s (%s): %s", resolved.display, resolved.short, picked.note)
        return dataclasses.replace(resolved, toolchain=picked.name)

    def hint(self, resolved: refs.ResolvedRef) -> str:
        """What a failed build's message says about Go (hint); never fails itself."""
        try:
            gomod = self.gomod(resolved)
        except RefbenchError:
            return "its go.mod could not be read"
        try:
            wanted = pick(MOD, gomod, self.local(), self.listed).name
        except RefbenchError:
            wanted = None
        return hint(resolved.toolchain or self.local(), gomod, wanted)

    def recorded(self, name: str) -> str:
        """The GOVERSION that builds with `name` (`go version` under its GOTOOLCHAIN, which fetches
        a toolchain that is not here yet): what build.json records and the cache compares."""
        if name == self.local():
            return name
        got = go_version(self._env(name, verified=True))
        if got != name:
            raise BuildError(f"GOTOOLCHAIN={name} runs {got}, not {name}")
        return got

    def of(self, resolved: refs.ResolvedRef | None = None) -> str:
        """The Go that builds `resolved`; without a ref, this machine's."""
        return self.settle(resolved).toolchain if resolved else self.local()
