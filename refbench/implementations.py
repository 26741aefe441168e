"""Implementations: other programs doing the target's job (aws-cli or rclone beside s5cmd), as builds.

A run compares builds; an implementation is one more kind of build. It is not built from a ref:
it is installed pinned from its own registry and hash-checked, then runs the same scenario
through its own commands, on the same fixture and server, against the same check. Everything
after the builds (verdicts, scoreboard, outputs) takes it as it takes a ref's build, labelled
`name version`.

Pinned. A bundled implementation (refbench/implementations.toml) is pinned in refbench's code:
- PyPI (aws-cli v1, s3cmd, s4cmd): a requirements file per implementation and version
  (refbench/impl_pins/), every file of the closure with its SHA-256, installed with
  `pip install --require-hashes --no-deps` into a venv of its own under refbench's cache. pip
  refuses any file whose hash is not listed;
- the Go module proxy (rclone): the module's go.sum hash (h1:), compared with what `go mod
  download -json` reports (which the checksum database vouches for) before `go install` builds it;
- npm (Helia): a package.json and package-lock.json (refbench/impl_pins/helia/) where every package
  of the tree carries its sha512 integrity, installed with `npm ci --ignore-scripts` (npm refuses a
  tarball whose hash is not the lock's; no install script runs) into a directory of its own, beside
  the program refbench ships for it (refbench/impl_src/), run by the machine's Node (>= 20) by
  absolute path through a wrapper in the install's bin/.
A user's own, declared in a scenarios file as [implementations.NAME], is pinned the same way by
the version and hashes it declares.

Sealed like a build. An install is used only when its record passes trust.gate: sealed under this
machine's (or job's) key over the name, version, pins and a digest of every file of the install
(tree_digest). A restored cache whose files changed is installed anew. Python programs run with
PYTHONPYCACHEPREFIX in the run's own directory, so no byte code in the cache is ever read (and
none is written there: the digest stays the install's).

Run by absolute path (the venv's or GOBIN's program), never found on PATH, with a HOME of the
run's own (runtime_env): no ~/.aws, ~/.s3cfg or rclone config of the user's, and no instance
metadata. A step an implementation declares no command for is `not supported`, never a failure.
"""
from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

from . import paths, pins, results, trust
from .cleanpath import child_env
from .errors import ConfigError, RefbenchError
from .tools import find_tool

log = logging.getLogger(__name__)

REGISTRIES = ("pypi", "go", "npm")
REGISTRY_NAMES = {"pypi": "PyPI", "go": "the Go module proxy", "npm": "npm"}
NPM_REGISTRY = "https://registry.npmjs.org/"
NPM_FILES = ("package.json", "package-lock.json")
NODE_MIN = 20  # the oldest Node an npm implementation runs on (Debian's nodejs where missing)
BUNDLED_NODE_NOTE = "5.5.1 does on Node 20"  # what the refusal of a newer Node points to instead
SEAL_PURPOSE = "refbench implementation install v1"
#: the fields of impl.json the seal covers
SEALED_FIELDS = ("name", "version", "registry", "pin", "platform", "program", "content_sha256")
#: what a step may declare for itself; the check is always the scenario's: one check for every build
STEP_FIELDS = ("command", "prepare", "setup", "cleanup")
SCENARIO_FIELDS = ("setup", "teardown")
#: installed first, then used to build any sdist in the closure (--no-build-isolation): so a
#: build dependency is hash-checked too, never fetched unpinned by an isolated build
BUILD_REQUIREMENTS = ("setuptools", "wheel", "packaging")
KIND = "implementation"  # results.Build.kind of an implementation's build
GO_FLAGS = "-mod=mod -trimpath -buildvcs=false"
VARIANT_PREFIX = "impl:"  # --variant NAME=impl:aws-cli,env=K=V: a named variant of an implementation


@dataclass(frozen=True)
class Implementation:
    """One program at one version, pinned, with its commands for the scenarios it runs."""
    name: str
    version: str
    registry: str  # REGISTRIES
    package: str  # PyPI project, or the Go package path `go install` builds
    program: str  # the executable's file name in the install's bin/
    backend: str = "s3"
    requirements: tuple[str, ...] = ()  # pypi: `name==version --hash=sha256:...` lines, the whole closure
    module: str = ""  # go: the module path
    module_sum: str = ""  # go: the module's go.sum hash, h1:...
    # go: the built binary's SHA-256 by "GO GOOS/GOARCH" (a reproducible build: pins.build_env), where pinned
    binary_sha256: Mapping[str, str] = field(default_factory=dict)
    # npm: package.json, package-lock.json and the program refbench ships, by file name: their text
    npm_files: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)  # its defaults, exported before its commands
    node_min: int = 0  # npm: the oldest Node major its tree runs on, as declared (`node`); NODE_MIN at least
    # ipfs: its own add defaults (KUBO_ADD_DEFAULTS' keys), which decide its root CIDs
    add_defaults: Mapping[str, str] = field(default_factory=dict)
    # scenario name -> {"setup"/"teardown": template, "steps": {step name: {field: template}}}
    scenarios: Mapping[str, Mapping] = field(default_factory=dict)
    description: str = ""
    license: str = ""
    origin: str = "bundled"  # bundled, or the scenarios file that declared it

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def pin(self) -> str:
        """One digest of everything the install is pinned by: its cache key and sealed field."""
        text = ("\n".join(sorted(self.requirements)) if self.registry == "pypi" else
                "\0".join(f"{k}\0{v}" for k, v in sorted(self.npm_files.items())) if self.registry == "npm" else
                f"{self.module} {self.module_sum}")
        return hashlib.sha256(f"{self.registry}\0{self.package}\0{self.version}\0{text}".encode()).hexdigest()

    @property
    def pinned_by(self) -> str:
        """What pins it, in a few words (a dry run's line)."""
        if self.registry == "pypi":
            return f"{len(self.requirements)} files pinned by SHA-256"
        if self.registry == "npm":
            n = len(json.loads(self.npm_files["package-lock.json"]).get("packages", {})) - 1
            return f"{n} packages pinned by sha512 integrity (package-lock.json)"
        return f"module {self.module_sum}"

    @property
    def in_process(self) -> bool:
        """An IPFS implementation is its own node in one process (Helia): the run gives it a fresh
        repo directory, and starts no kubo daemon for it."""
        return self.backend == "ipfs"

    @property
    def takes_flags(self) -> bool:
        """Whether any of its commands says where its flags go (`{{ extra }}`): a named variant's
        flags= are placed there, so without one they would reach nothing."""
        return any(_EXTRA.search(t) for t in _templates(self.scenarios))

    def supports(self, scenario: str, step: str) -> bool:
        return bool(self._step(scenario, step).get("command"))

    def _step(self, scenario: str, step: str) -> Mapping:
        return self.scenarios.get(scenario, {}).get("steps", {}).get(step, {})

    def step_template(self, scenario: str, step: str, what: str, default: str | None) -> str | None:
        """The implementation's own template for a step's `what` (STEP_FIELDS), else the scenario's
        (a prepare like `rm -rf {{ dest }}` serves every build)."""
        own = self._step(scenario, step)
        return own[what] if what in own else default

    def scenario_template(self, scenario: str, what: str) -> str | None:
        """Its own scenario setup / teardown: the scenario's use the target's program."""
        return self.scenarios.get(scenario, {}).get(what)


_EXTRA = re.compile(r"\{\{[^}]*\bextra\b")  # a template that places the build's flags


def _templates(scenarios: Mapping) -> list[str]:
    """Every template an implementation declares: its scenarios' setup / teardown and its steps' fields."""
    return [v for body in scenarios.values() for v in
            [*(body[k] for k in SCENARIO_FIELDS if k in body), *(f for st in body.get("steps", {}).values()
                                                                 for f in st.values())]]


# ---- declarations --------------------------------------------------------------------------
def from_table(name: str, t: object, where: str, fail: Callable[..., ConfigError], origin: str,
               base: Path | None = None) -> Implementation:
    """An [implementations.NAME] table (bundled or a user's): every error names the key."""
    if not isinstance(t, dict):
        raise fail(where, "a table")

    def text(key, required=False, default=""):
        v = t.get(key, default)
        if (required and key not in t) or not isinstance(v, str):
            raise fail(f"{where}.{key}", "a string" + (" (required)" if required else ""), t.get(key))
        return v

    registry = text("registry", required=True)
    if registry not in REGISTRIES:
        raise fail(f"{where}.registry", f"one of {', '.join(REGISTRIES)}", registry)
    if "mc" == name or "AGPL" in text("license").upper():
        raise fail(f"{where}.license", "a client not under the AGPL (refbench runs none)", t.get("license"))
    reqs: tuple[str, ...] = ()
    npm_files: dict[str, str] = {}
    if registry == "pypi":
        reqs = _requirements(t, where, fail, base)
    elif registry == "npm":
        npm_files = _npm_files(t, where, fail, base, text("package", required=True), text("program", required=True))
    elif not text("module_sum", required=True).startswith("h1:"):
        raise fail(f"{where}.module_sum", "the module's go.sum hash, h1:...", t.get("module_sum"))
    binaries = t.get("binary_sha256", {})
    if not isinstance(binaries, dict) or not all(isinstance(v, str) and len(v) == 64 for v in binaries.values()):
        raise fail(f"{where}.binary_sha256", 'a table of "GO GOOS/GOARCH" = SHA-256', binaries)
    env = t.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise fail(f"{where}.env", "a table of strings", env)
    node = t.get("node", 0)
    if not isinstance(node, int) or isinstance(node, bool) or node < 0:
        raise fail(f"{where}.node", "the oldest Node major its tree runs on, e.g. 22", node)
    return Implementation(
        name=name, version=text("version", required=True), registry=registry, package=text("package", required=True),
        program=text("program", required=True), backend=text("backend", default="s3"), requirements=reqs,
        module=text("module", default=text("package")), module_sum=text("module_sum"),
        binary_sha256=MappingProxyType(dict(binaries)), npm_files=MappingProxyType(npm_files),
        env=MappingProxyType(dict(env)), node_min=node, add_defaults=MappingProxyType(_add_defaults(t, where, fail)), scenarios=_scenarios(t.get("scenarios", {}), f"{where}.scenarios", fail),
        description=text("description"), license=text("license"), origin=origin)


def _requirements(t: dict, where: str, fail, base: Path | None) -> tuple[str, ...]:
    """The closure's pinned lines: `requirements` (a list) or `requirements_file` (beside the file
    that declares it). Every line must carry a hash: pip --require-hashes would refuse it anyway,
    but here the file and key are named."""
    if "requirements_file" in t:
        p = (base or Path(".")) / str(t["requirements_file"])
        try:
            lines = [ln.strip() for ln in p.read_text().splitlines()]
        except OSError as e:
            raise fail(f"{where}.requirements_file", f"a readable file ({e.strerror})", str(p)) from None
    else:
        lines = t.get("requirements")
        if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
            raise fail(f"{where}.requirements", "a list of `name==version --hash=sha256:...` lines (required)", lines)
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    bad = [ln for ln in lines if "==" not in ln or "--hash=sha256:" not in ln]
    if not lines or bad:
        raise fail(f"{where}.requirements", "every line `name==version --hash=sha256:...`", bad[:1] or lines)
    return tuple(lines)


def _add_defaults(t: dict, where: str, fail) -> dict[str, str]:
    """An IPFS implementation's own add defaults: every key of KUBO_ADD_DEFAULTS, as strings."""
    d = t.get("add_defaults", {})
    if d and (not isinstance(d, dict) or set(d) != set(KUBO_ADD_DEFAULTS) or not all(isinstance(v, str) for v in d.values())):
        raise fail(f"{where}.add_defaults", f"a table of strings with keys {', '.join(KUBO_ADD_DEFAULTS)}", d)
    return dict(d)


def _npm_files(t: dict, where: str, fail, base: Path | None, package: str, program: str) -> dict[str, str]:
    """`lock_dir` (package.json and package-lock.json) and `source` (the program refbench ships), both
    beside the declaring file. Pinned or refused here, naming the file: every dependency of package.json
    an exact version, every package of the lock with a sha512 integrity and from the npm registry
    (npm ci then refuses any tarball whose hash is not the lock's)."""
    out = {}
    for key, names in (("lock_dir", NPM_FILES), ("source", (program,))):
        if not isinstance(t.get(key), str):
            raise fail(f"{where}.{key}", "a path beside this file (required for npm)", t.get(key))
        for name in names:
            p = (base or Path(".")) / t[key] / name if key == "lock_dir" else (base or Path(".")) / t[key]
            try:
                out[name] = p.read_text()
            except OSError as e:
                raise fail(f"{where}.{key}", f"a readable {name} ({e.strerror})", str(p)) from None
    try:
        manifest, lock = json.loads(out["package.json"]), json.loads(out["package-lock.json"])
    except ValueError as e:
        raise fail(f"{where}.lock_dir", f"JSON package.json and package-lock.json ({e})") from None
    deps = manifest.get("dependencies", {})
    loose = [f"{k}@{v}" for k, v in deps.items() if not str(v)[:1].isdigit() or any(c in str(v) for c in "^~<>*| ")]
    if package not in deps or loose:
        raise fail(f"{where}.lock_dir", f"package.json with {package} and every dependency at an exact version",
                   loose[:3] or sorted(deps))
    bad = [k for k, v in lock.get("packages", {}).items()
           if k and (v.get("link") or not str(v.get("integrity", "")).startswith("sha512-")
                     or not str(v.get("resolved", NPM_REGISTRY)).startswith(NPM_REGISTRY))]
    if lock.get("lockfileVersion", 0) < 2 or len(lock.get("packages", {})) < 2 or bad:
        raise fail(f"{where}.lock_dir", f"a package-lock.json (v2+) whose every package has a sha512 integrity "
                   f"and comes from {NPM_REGISTRY}", bad[:3] or lock.get("lockfileVersion"))
    return out


def _scenarios(t: object, where: str, fail) -> Mapping:
    if not isinstance(t, dict):
        raise fail(where, "a table of scenario names")
    out = {}
    for sc, body in t.items():
        w = f"{where}.{sc!r}"
        if not isinstance(body, dict):
            raise fail(w, "a table")
        steps = body.get("steps", {})
        if not isinstance(steps, dict):
            raise fail(f"{w}.steps", "a table of step names")
        for st, fields in steps.items():
            if not isinstance(fields, dict) or not all(k in STEP_FIELDS and isinstance(v, str) for k, v in fields.items()):
                raise fail(f"{w}.steps.{st}", f"a table of templates ({', '.join(STEP_FIELDS)})", fields)
        for k in SCENARIO_FIELDS:
            if k in body and not isinstance(body[k], str):
                raise fail(f"{w}.{k}", "a template", body[k])
        out[sc] = MappingProxyType({**{k: body[k] for k in SCENARIO_FIELDS if k in body},
                                    "steps": MappingProxyType({k: MappingProxyType(v) for k, v in steps.items()})})
    return MappingProxyType(out)


def bundled_file() -> Path:
    return Path(__file__).with_name("implementations.toml")


def load_file(path: Path, origin: str) -> dict[str, Implementation]:
    """Every [implementations.NAME] of a TOML file, by name."""
    data = tomllib.loads(path.read_text())
    return tables(data.get("implementations", {}), path, origin)


def tables(t: object, path: Path, origin: str) -> dict[str, Implementation]:
    def fail(key, expected, got=None):
        return ConfigError(f"{path}: {key}: expected {expected}" + ("" if got is None else f", got {got!r}"))
    if not isinstance(t, dict):
        raise fail("implementations", "a table of implementation names")
    return {name: from_table(name, body, f"implementations.{name}", fail, origin, path.parent)
            for name, body in t.items()}


def bundled() -> dict[str, Implementation]:
    return load_file(bundled_file(), "bundled")


def choose(spec: str, declared: Mapping[str, Implementation]) -> Implementation:
    """The implementation `NAME[@VERSION]` names among the declared ones (the bundled, then the
    scenarios file's, which take precedence); a RefbenchError (one line) otherwise."""
    name, _, version = spec.partition("@")
    impl = declared.get(name)
    if impl is None:
        raise RefbenchError(f"--impl {spec}: unknown implementation {name!r} (known: {', '.join(sorted(declared))}; "
                            f"declare others as [implementations.NAME] in a scenarios file)")
    if version and version.lstrip("v") != impl.version.lstrip("v"):
        raise RefbenchError(f"--impl {spec}: {name} is pinned at {impl.version} ({impl.origin}); another version "
                            f"needs its own pins: declare [implementations.{name}] with version and hashes")
    return impl


# ---- install -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Installed:
    impl: Implementation
    root: Path  # the install (a venv, or a GOBIN's parent)
    program: Path  # absolute path of the program the commands run
    content_sha256: str
    built_now: bool
    seconds: float
    toolchain: str  # the Python or Go that installed it


def install_dir(impl: Implementation) -> Path:
    plat = pins.current_platform().replace("/", "-")
    return paths.cache_root() / "implementations" / f"{impl.name}-{impl.version}-{impl.pin[:12]}-{plat}"


def tree_digest(root: Path) -> str:
    """SHA-256 over every entry of an install: each directory's relative path and mode (so a
    planted directory, empty or unlistable, changes it), each file's path, executable bit and
    content, and a link's target: what the seal vouches for. Names are JSON-quoted so no name can
    forge a line. A directory that cannot be listed raises (paths.walk_all): never skipped."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in paths.walk_all(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        h.update(f"D {json.dumps(rel_dir)} {oct(stat.S_IMODE(os.lstat(dirpath).st_mode))}\n".encode())
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            mode = os.lstat(p).st_mode
            if stat.S_ISLNK(mode):
                h.update(f"L {json.dumps(rel)} {json.dumps(os.readlink(p))}\n".encode())
            elif not stat.S_ISREG(mode):  # a FIFO would block the hash for good: refused, installed again
                raise OSError(errno.EINVAL, "a special file, which no install holds", p)
            else:
                h.update(f"F {json.dumps(rel)} {int(os.access(p, os.X_OK))} {paths.file_sha256(Path(p))}\n".encode())
    return h.hexdigest()


def _fields(impl: Implementation, program: str, digest: str, toolchain: str) -> dict:
    """What an install's seal covers: every fact of impl.json a run uses or reports. The toolchain
    too: it reaches every report (results.Build.toolchain), and a restored impl.json could say any
    Python or Go there (review35e LOW)."""
    return {"name": impl.name, "version": impl.version, "registry": impl.registry, "pin": impl.pin,
            "platform": pins.current_platform(), "program": program, "content_sha256": digest,
            "toolchain": toolchain}


def cached(impl: Implementation) -> Installed | None:
    """The sealed install of `impl`, when its record passes trust.gate; None otherwise."""
    d = install_dir(impl)
    record = paths.read_record(d / "impl.json")  # through no link, and a FIFO there blocks nothing
    if record is None:
        return None
    fields = _fields(impl, str(record.get("program", "")), str(record.get("content_sha256", "")),
                     str(record.get("toolchain", "")))
    try:
        why = trust.gate(SEAL_PURPOSE, fields, record, "content_sha256", lambda: tree_digest(d / "root"))
    except OSError as e:  # a directory the digest cannot list: refused, loudly, never skipped
        why = f"cannot hash the install ({e})"
    if why:
        log.warning("%s: %s: installing %s again", d, why, impl.label)
        return None
    program = d / "root" / fields["program"]
    if impl.registry == "npm" and node_runtime(impl)[0] not in program.read_text():
        log.warning("%s: made for another Node than %s: installing %s again", d, node_runtime(impl)[0], impl.label)
        return None
    return Installed(impl, d / "root", program, fields["content_sha256"], False, 0.0, fields["toolchain"])


def install(impl: Implementation, say: Callable[[str], None] | None = None,
            installers: Mapping[str, Callable[["Implementation", Path], tuple[Path, str]]] | None = None) -> Installed:
    """The pinned install of `impl`: the sealed one in the cache, else installed from its registry
    (hash-checked) and sealed. A failure removes what it left. `installers`: (implementation, its
    directory) -> (program, toolchain) per registry, INSTALLERS unless given (a test's stand-in)."""
    d = install_dir(impl)
    if impl.registry == "npm":
        node_runtime(impl)  # refused with one line before anything is fetched
    # the slot is reached through no link, and a link at it is removed, not followed; a link at the
    # cache root itself is refused (paths.settled_cache_dir)
    cache = paths.settled_cache_dir(paths.cache_root())
    with paths.locked(d.with_name(d.name + ".lock"), within=cache):
        hit = cached(impl)
        if hit:
            return hit
        if say:
            say(f"installing {impl.label} from {REGISTRY_NAMES[impl.registry]} (pinned, hash-checked)")
        paths.remove_tree(d, cache, ignore_errors=True)
        paths.make_dirs(d / "root", cache)
        t0 = time.monotonic()
        try:
            installer = {**INSTALLERS, **(installers or {})}[impl.registry]
            program, toolchain = installer(impl, d)
        except BaseException:
            paths.remove_tree(d, cache, ignore_errors=True)
            raise
        rel = str(program.relative_to(d / "root"))
        digest = tree_digest(d / "root")
        fields = _fields(impl, rel, digest, toolchain)
        record = {**fields, "seconds": round(time.monotonic() - t0, 2),
                  "key_id": trust.key_id(), "seal": trust.seal(SEAL_PURPOSE, fields)}
        paths.replace_file(d / "impl.json", json.dumps(record, indent=2), within=cache)
        return Installed(impl, d / "root", program, digest, True, time.monotonic() - t0, toolchain)


def _run(argv: list[str], what: str, env: dict, cwd: Path | None = None,
         run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> subprocess.CompletedProcess:
    p = run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    if p.returncode != 0:
        raise RefbenchError(f"{what} failed (exit {p.returncode})", detail=f"{' '.join(argv)}\n{p.stderr[-3000:]}")
    return p


def _pip_env(d: Path) -> dict:
    """No pip configuration of the user's (an index, a cache of someone else's), byte code kept out
    of the install."""
    return {**child_env(), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PYTHONPYCACHEPREFIX": str(d / "pycache-install")}


def _install_pypi(impl: Implementation, d: Path) -> tuple[Path, str]:
    """A venv of its own (no pip in it: refbench's pip installs into it by --python), the build
    requirements first, then the closure, each file checked against its pinned hash."""
    root, env = d / "root", _pip_env(d)
    _run([sys.executable, "-m", "venv", "--without-pip", str(root)], f"creating a venv for {impl.label}", env)
    py = root / "bin" / "python"
    build = [ln for ln in impl.requirements if ln.split("==")[0].strip().lower() in BUILD_REQUIREMENTS]
    pip = [sys.executable, "-m", "pip", "--python", str(py), "install", "--quiet", "--no-compile",
           "--require-hashes", "--no-deps", "--no-cache-dir"]
    for group, extra in ((build, []), (impl.requirements, ["--no-build-isolation"])):
        if group:
            reqs = d / "requirements.txt"
            reqs.write_text("\n".join(group) + "\n")
            _run(pip + extra + ["-r", str(reqs)], f"pip install of {impl.label} (hash-checked)", env)
            reqs.unlink()
    shutil.rmtree(d / "pycache-install", ignore_errors=True)
    program = root / "bin" / impl.program
    if not program.is_file():
        raise RefbenchError(f"{impl.label}: the install has no bin/{impl.program} (implementations: program)")
    return program, f"python{sys.version_info.major}.{sys.version_info.minor}"


def module_sum(impl: Implementation, go: str, env: dict, runner: pins.GoRunner = pins.GO) -> str:
    """The module's go.sum hash as the module proxy serves it (checked by go against the checksum
    database on download)."""
    p = _run([go, "mod", "download", "-json", f"{impl.module}@{impl.version}"], f"go mod download of {impl.spec}",
             env, cwd=Path(env.get("GOTMPDIR") or "/"), run=runner.run)
    return json.loads(p.stdout).get("Sum", "")


def _drop_modcache(go: str, env: dict, modcache: Path, runner: pins.GoRunner = pins.GO) -> None:
    """Remove the install's own module cache: go makes it read-only, so `go clean -modcache` first."""
    if modcache.exists():
        runner.run([go, "clean", "-modcache"], env=env, capture_output=True, cwd=modcache.parent)
        shutil.rmtree(modcache, ignore_errors=True)


def _install_go(impl: Implementation, d: Path, runner: pins.GoRunner = pins.GO,
                gocache: Path | None = None) -> tuple[Path, str]:
    """`go install PACKAGE@VERSION` with the pinned tools' Go (pins.build_env: reproducible flags),
    after the module's hash is the pinned one. `runner`: which go, and how it is checked and run.
    `gocache`: a Go build cache its caller made and vouches for, and keeps (the test suite's, one per
    session, so its second install of a module does not compile the standard library again); never
    the user's GOCACHE. Without it, one of the install's own, removed after."""
    go = runner.find()
    if not go:
        raise RefbenchError(f"{impl.label}: no go on PATH to build it with")
    # A module cache of the install's own, empty: go trusts a cached module's .ziphash and compiles
    # its unpacked directory unhashed, so a restored ~/go/pkg/mod could hand it planted source
    # (review35d HIGH 3). Fresh, everything is downloaded from the proxy and checked on the way in.
    modcache = d / "gomodcache"
    # and a build cache of its own: the user's GOCACHE (restored with the module cache) holds compiled
    # packages go takes by their action id without compiling again (review35d)
    own_cache = gocache is None
    env = pins.verified_build_env(go, runner, GOFLAGS=GO_FLAGS, GOBIN=str(d / "root" / "bin"),
                                  GOMODCACHE=str(modcache), GOCACHE=str(d / "gocache" if own_cache else gocache))
    try:
        got = module_sum(impl, go, env, runner)
        if got != impl.module_sum:
            raise RefbenchError(f"refusing {impl.spec}: the module proxy's hash is {got or 'none'}, {impl.module_sum} "
                                f"is pinned ({impl.origin}): not the pinned source")
        _run([go, "install", f"{impl.package}@{impl.version}"], f"go install of {impl.spec}", env, cwd=d,
             run=runner.run)
    finally:
        _drop_modcache(go, env, modcache, runner)
        if own_cache:
            paths.remove_tree(d / "gocache", paths.cache_root(), ignore_errors=True)
    program = d / "root" / "bin" / impl.program
    if not program.is_file():
        raise RefbenchError(f"{impl.label}: go install made no bin/{impl.program} (implementations: program)")
    want = impl.binary_sha256.get(f"{pins.TOOLS_GO} {pins.current_platform()}")
    if want and paths.file_sha256(program) != want:
        raise RefbenchError(f"refusing {impl.spec}: built with {pins.TOOLS_GO}, its SHA-256 is "
                            f"{paths.file_sha256(program)[:16]}…, {want[:16]}… is pinned ({impl.origin}): not the "
                            f"pinned bytes (a GOFLAGS/GOAMD64/CGO setting leaking in?)")
    return program, pins.TOOLS_GO


_LOWER_BOUND = re.compile(r"^\s*>=\s*v?(\d+)(?:\.\d+){0,2}\s*$")  # `>=22`, `>= 22.19.0`: nothing else


def engines_floor(lock_text: str) -> tuple[int, str] | None:
    """(Node major, which package says so) of the highest plain lower bound (`>=N...`) among the
    lock's packages' `engines.node`: npm ci only warns where the machine's Node is older, and the
    tree then fails at run time (undici 8 under Helia 7 on Node 20). Ranges with `||`, `^` or an
    upper bound are left out: they name no single floor."""
    best: tuple[int, str] | None = None
    for key, pkg in json.loads(lock_text).get("packages", {}).items():
        engines = pkg.get("engines") if key else None
        m = _LOWER_BOUND.match(str(engines.get("node", ""))) if isinstance(engines, dict) else None
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), f"{key.rsplit('node_modules/', 1)[-1]}@{pkg.get('version', '?')}'s engines "
                                     f"say node {engines['node'].strip()}")
    return best


def node_needed(impl: Implementation) -> tuple[int, str]:
    """(the oldest Node major `impl` runs on, why ('' for refbench's own floor)): NODE_MIN, what its
    table declares (`node`), or what its lock's packages declare (engines_floor), whichever is
    highest. Majors only: a `>= 20.19.0` on Node 20.18 is npm's warning and the tree's failure."""
    need = (NODE_MIN, "")
    if impl.node_min > need[0]:
        need = (impl.node_min, f"{impl.origin}: node = {impl.node_min}")
    floor = engines_floor(impl.npm_files["package-lock.json"]) if "package-lock.json" in impl.npm_files else None
    return floor if floor and floor[0] > need[0] else need


def node_runtime(impl: Implementation) -> tuple[str, str]:
    """(absolute path, version) of the machine's Node, which runs an npm implementation; a one-line
    RefbenchError naming the Node found and the one needed (node_needed) when it is missing or older."""
    node = find_tool("node")
    need, why = node_needed(impl)
    if need <= NODE_MIN:  # refbench's own floor: Debian's nodejs is enough where it is new enough
        hint, tail = f"{impl.label} runs on the machine's Node >= {need} (Debian: apt-get install nodejs)", ""
    else:  # its tree's: name who asks for it, and the way out
        hint = f"{impl.label} runs on the machine's Node >= {need} ({why})"
        tail = (f"; install Node {need} or newer (Debian bookworm's own is 18), or pin a version whose tree runs "
                f"on an older Node (the bundled helia {BUNDLED_NODE_NOTE})")
    if not node:
        raise RefbenchError(f"{hint}: no node on PATH{tail}")
    try:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
        major = int(version.lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        raise RefbenchError(f"{hint}: {node} --version gave no version") from None
    if major < need:
        raise RefbenchError(f"{hint}: {node} is {version}{tail}")
    return node, version


def _npm_env(d: Path) -> dict:
    """No npm configuration of the user's (a registry, a token, a cache of someone else's): the
    public registry, a cache of the install's own (removed after), no audit, no update check."""
    # the machine's trust store and proxy (a TLS-intercepting proxy's CA is the machine's, not the user's npm config)
    machine = paths.layout().environ  # as the command line read it
    cafile = next((f for f in (machine.get("NODE_EXTRA_CA_CERTS"), machine.get("SSL_CERT_FILE"),
                               "/etc/ssl/certs/ca-certificates.crt") if f and os.path.isfile(f)), None)
    proxy = {k: v for k, v in machine.items() if k.lower() in ("https_proxy", "http_proxy", "no_proxy")}
    return {**child_env(), **proxy, **({"npm_config_cafile": cafile} if cafile else {}),
            "HOME": str(d / "home"), "npm_config_userconfig": str(d / "home" / ".npmrc"),
            "npm_config_globalconfig": os.devnull, "npm_config_cache": str(d / "npm-cache"),
            "npm_config_registry": NPM_REGISTRY, "npm_config_update_notifier": "false",
            "npm_config_audit": "false", "npm_config_fund": "false", "NODE_OPTIONS": ""}


def _install_npm(impl: Implementation, d: Path) -> tuple[Path, str]:
    """`npm ci --ignore-scripts` of the pinned lock into the install (npm checks every tarball
    against the lock's integrity; no package's install script runs), the program beside it, and
    bin/PROGRAM: a wrapper that runs it with the machine's Node by absolute path."""
    node, version = node_runtime(impl)
    npm = find_tool("npm")
    if not npm:
        raise RefbenchError(f"{impl.label}: no npm on PATH to install it with (Debian: apt-get install npm)")
    root = d / "root"
    for name, text in impl.npm_files.items():
        (root / name).write_text(text)
    (d / "home").mkdir()
    try:
        _run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
             f"npm ci of {impl.label} (integrity-checked)", _npm_env(d), cwd=root)
    finally:
        shutil.rmtree(d / "npm-cache", ignore_errors=True)
        shutil.rmtree(d / "home", ignore_errors=True)
    wrapper = root / "bin" / impl.name
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nexec {node} {root / impl.program} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper, f"node {version}"


#: how each registry's implementation is installed: (implementation, its directory) -> (program, toolchain)
INSTALLERS = {"pypi": _install_pypi, "go": _install_go, "npm": _install_npm}


# ---- running -------------------------------------------------------------------------------
def runtime_env(impl: Implementation, home: Path) -> dict[str, str]:
    """What an implementation's commands run with besides the run's own environment: a HOME of the
    run's (no ~/.aws, ~/.s3cfg, rclone config of the user's), no instance metadata, no config file
    of the user's elsewhere, byte code kept in the run's own directory, then its own defaults."""
    return {"HOME": str(home), "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": str(home / ".aws" / "config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(home / ".aws" / "credentials"), "AWS_DEFAULT_REGION": "us-east-1",
            "XDG_CONFIG_HOME": str(home / ".config"), "RCLONE_CONFIG": str(home / ".config" / "rclone" / "rclone.conf"),
            "PYTHONPYCACHEPREFIX": str(home / ".pycache"), "NODE_OPTIONS": "", "NODE_PATH": "", **impl.env}


@dataclass(frozen=True)
class ImplBuild:
    """An installed implementation as a run's build: what the runner, the verdicts and every view
    read of a build (label, binary, its hash, how long it took), so downstream cannot tell the kinds apart."""
    implementation: Implementation
    installed: Installed
    target: str
    name: str | None = None  # a named variant's (--variant NAME=impl:...): its label everywhere

    @property
    def label(self) -> str:
        return self.name or self.implementation.label

    @property
    def binary(self) -> Path:
        return self.installed.program

    @property
    def binary_sha256(self) -> str:
        return self.installed.content_sha256  # the whole install's, as sealed

    @property
    def built_now(self) -> bool:
        return self.installed.built_now

    @property
    def build_seconds(self) -> float:
        return self.installed.seconds

    @property
    def toolchain(self) -> str:
        return self.installed.toolchain

    @property
    def source(self) -> str:
        return self.implementation.registry

    def record(self):
        impl = self.implementation
        return results.Build(label=self.label, ref=impl.spec, kind=KIND, sha=impl.pin, display=self.label,
                             version=impl.version, binary=str(self.binary), source=impl.registry,
                             toolchain=self.toolchain, cached=not self.built_now,
                             build_seconds=round(self.build_seconds, 3), binary_sha256=self.binary_sha256,
                             registry=impl.registry)


def implementation_of(build) -> Implementation | None:
    return getattr(build, "implementation", None)


def extra_flags(build, target_flags: Sequence[str], own: Sequence[str]) -> list[str]:
    """A build's `{{ extra }}`: -sf's flags then its named variant's for a ref's build; its named
    variant's alone for an implementation (-sf's are the target's flags, which another client
    does not take). Each bundled implementation's commands place `{{ extra }}` where that client
    takes its options (docs/implementations.md)."""
    return list(own) if implementation_of(build) else [*target_flags, *own]


def step_template(build, scenario, step, what: str) -> str | None:
    """The template `build` runs for a step's `what`: an implementation's own, else the scenario's."""
    impl = implementation_of(build)
    default = getattr(step, what)
    return default if impl is None else impl.step_template(scenario.name, step.name, what, default)


def scenario_template(build, scenario, what: str) -> str | None:
    impl = implementation_of(build)
    return getattr(scenario, what) if impl is None else impl.scenario_template(scenario.name, what)


def in_process(build) -> bool:
    impl = implementation_of(build)
    return impl is not None and impl.in_process


def supports(build, scenario, step) -> bool:
    impl = implementation_of(build)
    return impl is None or impl.supports(scenario.name, step.name)


def refuse_for_refs(variant, command: str) -> None:
    """One line for a variant of an implementation (a [[variants]] table whose ref is `impl:NAME`)
    where a command walks a ref's commits (bisect): its environment is the implementation's, and
    the implementation is one pinned version, with no history to walk. Without this, its
    environment would silently be put on the refs."""
    if variant is not None and str(variant.ref or "").startswith(VARIANT_PREFIX):
        raise RefbenchError(f"{command} walks a ref's commits; --variant {variant.name} is a variant of an "
                            f"implementation ({variant.ref}), installed at its pinned version")


def refuse_go(specs: Sequence[str], variants: Sequence) -> None:
    """One line for --go beside an implementation, given plainly (--impl) or as a named variant
    (`--variant NAME=impl:...`, or a [[variants]] table whose ref is `impl:NAME`): the Go reaches
    the run's refs only, so the implementation would run as pinned while the command line said
    otherwise. Raised before anything is built or installed."""
    what = f"--impl {specs[0]}" if specs else f"--variant {variants[0].name}={variants[0].ref}"
    raise RefbenchError(f"--go applies to refs: {what} is installed pinned from its registry, not built with a Go "
                        "of the run's choosing")


def merge(refs: list, impls: list, impl_first: bool) -> list:
    """The run's builds in the order the command line gave its kinds: refs then implementations,
    or implementations first (the baseline an implementation)."""
    return list(impls) + list(refs) if impl_first else list(refs) + list(impls)


# ---- root CIDs: where two builds' roots differ, and why --------------------------------------
#: what decides a UnixFS root CID, as `ipfs add` flags, with kubo's defaults (a ref's build)
KUBO_ADD_DEFAULTS = MappingProxyType({"cid-version": "0", "raw-leaves": "false", "chunker": "size-262144",
                                      "max-links": "174"})
#: the environment names refbench's Helia program reads for the same settings (a named variant's env=)
ADD_ENV = MappingProxyType({"HELIA_CID_VERSION": "cid-version", "HELIA_RAW_LEAVES": "raw-leaves",
                            "HELIA_CHUNK_SIZE": "chunker", "HELIA_MAX_LINKS": "max-links"})
SETTING_NAMES = {"cid-version": "CID version", "raw-leaves": "raw leaves", "chunker": "chunker",
                 "max-links": "links per node"}
_CID = re.compile(r"^(Qm[1-9A-HJ-NP-Za-km-z]{44}|b[a-z2-7]{50,})$")


def add_settings(command: str, defaults: Mapping[str, str]) -> dict[str, str]:
    """The settings an add command ran with: `defaults`, then the environment it set (ADD_ENV),
    then its flags. As kubo (and refbench's Helia program) do, a CID version given without
    raw-leaves sets it: v1 raw leaves, v0 dag-pb leaves."""
    out, raw_given = dict(defaults), False
    for word in shlex.split(command.replace(">", " > ")) if command else ():
        key, _, value = word.partition("=")
        if key in ADD_ENV:
            out[ADD_ENV[key]] = value if ADD_ENV[key] != "chunker" else f"size-{value}"
            raw_given |= key == "HELIA_RAW_LEAVES"
        elif key.lstrip("-") in KUBO_ADD_DEFAULTS and key.startswith("--"):
            name = key[2:]
            out[name] = value or "true"
            raw_given |= name == "raw-leaves"
    if not raw_given and out["cid-version"] != defaults.get("cid-version"):
        out["raw-leaves"] = "true" if out["cid-version"] == "1" else "false"
    return out


def describe_settings(s: Mapping[str, str]) -> str:
    return (f"CIDv{s['cid-version']}, {'raw' if s['raw-leaves'] == 'true' else 'dag-pb'} leaves, "
            f"{s['chunker']}, {s['max-links']} links")


def cid_notes(scenarios, builds: list) -> tuple[str, ...]:
    """One line per step whose builds printed different root CIDs (results.Scenario records): each
    build's root and settings, which settings differ, and how to ask for the same roots. Where the
    settings are the same, the cause is what they do not name (directory sharding, the layout)."""
    defaults = {b.label: (impl.add_defaults if (impl := implementation_of(b)) else KUBO_ADD_DEFAULTS) for b in builds}
    notes = []
    for sc in scenarios:
        for st in sc.steps:
            roots = {k: str(v.check).strip() for k, v in st.builds.items() if v.check is not None}
            if len(set(roots.values())) < 2 or not all(_CID.match(r) for r in roots.values()) \
                    or not all(defaults.get(k) for k in roots):
                continue
            settings = {k: add_settings(st.builds[k].command, defaults[k]) for k in roots}
            differ = [SETTING_NAMES[n] for n in KUBO_ADD_DEFAULTS if len({s[n] for s in settings.values()}) > 1]
            each = "; ".join(f"{k} `{r}` ({describe_settings(settings[k])})" for k, r in roots.items())
            why = (f"different settings: {', '.join(differ)}. The same settings give the same root (kubo "
                   f"`add --cid-version=1 --raw-leaves --chunker=size-1048576` for Helia's; a named variant "
                   f"`impl:helia,env=HELIA_CID_VERSION=0,env=HELIA_CHUNK_SIZE=262144,env=HELIA_MAX_LINKS=174` for kubo's)"
                   if differ else "the same settings: the cause is one they do not name (directory sharding (HAMT) "
                   "thresholds, the DAG layout, the importer)")
            notes.append(f"{sc.name} / {st.name}: the root CIDs differ: {each}: {why}.")
    return tuple(notes)
