"""Check out and build refs of a target, caching binaries by commit.

Layout under the builds directory (see paths.default_builds_dir()):

    builds/<target>/clones/<origin-slug>/   one bare clone per origin, fetched, never re-cloned
    builds/<target>/<sha>/<binary>          the binary built from that commit (git source), or
                                            copied from a build of another commit with the same tree
    builds/<target>/<sha>.module/<binary>   the same commit built through the Go module proxy
    builds/<target>/<sha>.go1.24.4/         built with a Go other than this machine's (GOTOOLCHAIN)
    .../build.log, build.json               how it was built; build.json is written last

Each build uses the Go its go.mod asks for unless --go says otherwise (refbench/toolchain.py); the
Go is settled when the ref is resolved (ResolvedRef.toolchain), is part of the cache key, and
names the directory when it is not this machine's own, so two builds of one commit with two Gos
are kept apart while caches made with the machine's Go keep their place.

A cache vouches for nothing by itself (the threat model is refbench.trust's: on some CI set-ups a
pull request's code can write a cache that a trusted run restores). So:

- build.json records the binary's SHA-256 and a seal, an HMAC of the record under a key that is in
  no cache (trust.seal); a cached binary is used only when its record's seal holds under this
  machine's (or job's) key and the binary still has the sealed hash. A record without a seal, with
  a seal of another key, or a binary of another hash is rebuilt. A binary shared as a CI artifact
  (`bench.py build --out DIR` then `--builds-dir DIR`) is verified the same way, under the key the
  jobs share, and gets its executable bit back: artifacts do not keep file modes. A commit whose
  tree a sealed record names (same target, Go, build command and GOFLAGS) gets a copy of that
  binary when the tree alone makes it (Builder.tree_determined), once the copy's hash is the
  sealed one, and a record of its own;
- git runs with hooks off (core.hooksPath=/dev/null) and core.fsmonitor off, on the clone named
  outright (GIT_DIR: never a directory above it); a clone holding anything refbench never makes
  (commondir, worktrees, hooks, alternates, attributes, grafts, a link: clone_faults) is cloned
  anew, and its config is written anew each time it is opened; its branches and tags are pruned to
  the origin's on every fetch, other refs deleted;
- nothing is built from the clone itself: each commit's objects are copied into a fresh
  repository where git computes every id from the content (Builder.verified), and the build, the
  tree and the go.mod it is keyed by come from there, so an object replaced under its id fails;
- builds get an allow-listed environment with no cache directory on PATH (tools.child_env);
- `go mod verify` runs before every build, so a module cache restored with a changed module fails
  the build, naming it, instead of building it in.
"""
from __future__ import annotations

import contextlib
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
import weakref
from dataclasses import dataclass
from pathlib import Path

import git

from . import paths, refs, results, toolchain as tc, tools, trust
from .config import TargetSpec
from .errors import BuildError, RefbenchError, RefError
from .toolchain import go_version

log = logging.getLogger(__name__)
SOURCES = ("git", "module")
REPRODUCIBLE_GOFLAGS = "-trimpath -buildvcs=false"
BUILDVCS_SINCE = (1, 18)  # Go 1.17 refuses all of GOFLAGS over an unknown -buildvcs (and stamps no VCS)
#: given to every git refbench runs: no hook runs, no fsmonitor command starts, whatever a clone holds
SAFE_GIT = ("core.hooksPath=/dev/null", "core.fsmonitor=false")
SEAL_PURPOSE = "refbench build record v1"
#: the refs a clone keeps: the origin's branches and tags (pruned on every fetch) and the PR and
#: checkout heads refbench fetches by name before it uses them; any other ref in a cached clone is
#: deleted before a fetch
KEPT_REFS = ("refs/remotes/origin/", "refs/tags/", "refs/refbench/")
#: the fields of build.json the seal covers: what the cache is keyed by, and the binary's hash
SEALED_FIELDS = ("target", "sha", "tree", "source", "toolchain", "build", "goflags", "binary_sha256")


def reproducible_goflags(toolchain: str | None) -> str:
    """The flags that make a build reproducible under `toolchain` (None: this machine's Go):
    without -buildvcs before Go 1.18, which has no VCS stamp to turn off."""
    version = tc.parse_version(toolchain) if toolchain else None
    return "-trimpath" if version is not None and version.line < BUILDVCS_SINCE else REPRODUCIBLE_GOFLAGS


@dataclass(frozen=True)
class BuiltRef:
    target: str
    ref: refs.ResolvedRef
    label: str  # unique display name among the compared builds
    binary: Path
    source: str
    toolchain: str
    built_now: bool  # False: came from the cache
    build_seconds: float
    binary_sha256: str | None = None

    def record(self) -> results.Build:
        """The build as the results file holds it."""
        return results.Build(
            label=self.label, ref=self.ref.text, kind=self.ref.kind, sha=self.ref.sha, display=self.ref.display,
            version=self.ref.version, binary=str(self.binary), source=self.source, toolchain=self.toolchain,
            cached=not self.built_now, build_seconds=round(self.build_seconds, 3), binary_sha256=self.binary_sha256)


file_sha256 = paths.file_sha256


@dataclass(frozen=True)
class Checkout:
    """A git checkout of a Go module, e.g. the project refbench is vendored in or the Action's."""
    root: Path  # top-level directory: the origin refbench builds from
    module: str  # the module its go.mod declares
    remote: str | None  # its `origin` remote, where PR refs (refs/pull/N/head) are fetched from

    @property
    def url(self) -> str:
        return str(self.root)


_MODULE_RE = re.compile(r'^\s*module\s+"?([^\s"]+)"?', re.MULTILINE)


def go_checkout(start: Path | None = None) -> Checkout | None:
    """The git checkout around `start` (default: the current directory) when its top level has a
    go.mod, with the module it declares; None outside a checkout or without go.mod."""
    def git_out(*args: str) -> str | None:
        try:
            p = subprocess.run(_absolute(["git", *safe_git_args(), *args]), cwd=start or os.getcwd(),
                               capture_output=True, text=True, timeout=30, env=tools.child_env())
        except (OSError, subprocess.SubprocessError):
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    top = git_out("rev-parse", "--show-toplevel")
    if not top:
        return None
    try:
        text = (Path(top) / "go.mod").read_text(errors="replace")
    except OSError:
        return None
    m = _MODULE_RE.search(re.sub(r"//[^\n]*", "", text))
    if not m:
        return None
    remote = git_out("config", "--get", "remote.origin.url")
    if remote and "://" not in remote and not re.match(r"^[\w.-]+@[\w.-]+:", remote) and not os.path.isabs(remote):
        remote = os.path.normpath(os.path.join(top, remote))  # a relative path remote
    return Checkout(Path(top), m.group(1), remote or None)


def safe_git_args() -> list[str]:
    """`-c core.hooksPath=/dev/null -c core.fsmonitor=false` for a git command line."""
    return [a for opt in SAFE_GIT for a in ("-c", opt)]


def clone_config(url: str) -> str:
    """The whole config of a bare clone, as refbench writes it: the origin and nothing else."""
    if any(c in url for c in "\n\r\0"):
        raise RefError(f"an origin URL with a line break or NUL cannot be written to a git config: {url!r}")
    quoted = '"' + url.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return ("[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"
            f'[remote "origin"]\n\turl = {quoted}\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n')


#: what the top level of a bare clone refbench made holds (git init, fetch, pack-refs); anything
#: else was put there by someone else
CLONE_ENTRIES = frozenset({"HEAD", "config", "description", "objects", "refs", "packed-refs", "FETCH_HEAD",
                           "ORIG_HEAD", "shallow", "info", "logs", "branches"})
#: what refbench's clones hold under info/ and objects/info/: no attributes, grafts, alternates
ALLOWED_INFO = {"info": frozenset({"exclude", "refs"}),
                "objects/info": frozenset({"packs", "commit-graph", "commit-graphs", "multi-pack-index"})}
#: the environment of every git command on a cached clone: the clone named outright (no search
#: upwards into the checkout a builds directory sits in), and no replace refs (refs/replace/*
#: would swap one object for another under its id)
def clone_git_env(d: Path) -> dict:
    return {"GIT_DIR": str(d), "GIT_NO_REPLACE_OBJECTS": "1", "GIT_CEILING_DIRECTORIES": str(d.parent)}


def clone_faults(d: Path) -> list[str]:
    """What makes the bare clone at `d` something refbench did not make: a symbolic link or special
    file anywhere in it, an entry git reads to go elsewhere or run something (commondir, gitdir,
    worktrees, hooks, config.worktree, info/attributes, info/grafts, objects/info/alternates, ...),
    or anything else refbench never writes. Empty: only what git init and fetch make. A restored
    cache may hold any of them (the threat model is refbench.trust's): a `commondir` naming the
    user's checkout made refbench's `fetch --prune` run there, one naming a config of its own ran
    an `ext::` remote's command. Read with lstat only: nothing in the clone is followed."""
    if d.is_symlink() or not d.is_dir():
        return [f"{d} is not a directory"]
    faults = [f"{name}: not something refbench's clones hold" for name in sorted(os.listdir(d))
              if name not in CLONE_ENTRIES]
    for rel, allowed in ALLOWED_INFO.items():
        sub = d / rel
        if sub.is_dir() and not sub.is_symlink():
            faults += [f"{rel}/{name}: not something refbench's clones hold" for name in sorted(os.listdir(sub))
                       if name not in allowed]
    for top, dirs, files in os.walk(d):
        for name in dirs + files:
            mode = os.lstat(os.path.join(top, name)).st_mode
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                faults.append(f"{os.path.relpath(os.path.join(top, name), d)}: a link or special file")
    return faults


def own_clone(d: Path, url: str) -> None:
    """Write the bare clone's config anew (refbench's own: the origin and nothing else), through a
    new file renamed over the old, so a `config` that is a link to elsewhere is replaced, not
    written through. What else a restored cache may have put in the clone is clone_faults'."""
    paths.replace_file(d / "config", clone_config(url))


def origin_slug(url: str) -> str:
    """A readable, unique directory name for an origin URL or path."""
    norm = url.rstrip("/")
    if "://" not in norm and not re.match(r"^[\w.-]+@", norm):
        norm = os.path.abspath(os.path.expanduser(norm))
    tail = re.sub(r"[^A-Za-z0-9._-]+", "_", norm.split("/")[-1].removesuffix(".git"))[-40:]
    return f"{tail}-{hashlib.sha256(norm.encode()).hexdigest()[:10]}"


_locked = paths.locked  # one lock helper for builds and fixtures


def _remove(d: Path) -> None:
    """Remove a directory (or a link or file in its place) without following any link in it."""
    if d.is_symlink() or d.is_file():
        d.unlink()
    elif d.exists():
        shutil.rmtree(d)


class Builder:
    """Resolves refs and builds them, for one target from one origin (git) or the module proxy.
    `go`: the Go every build uses unless resolve() is told otherwise (a --go value; default
    REFBENCH_GO, else mod: what each ref's go.mod asks for)."""

    def __init__(self, target: TargetSpec, builds_dir: Path, repo_url: str | None = None,
                 source: str = "git", offline: bool = False, pr_remote: str | None = None,
                 checkout: bool = False, go: str | None = None):
        if source not in SOURCES:
            raise BuildError(f"unknown source {source!r} (expected git or module)")
        if source == "module" and not (target.module and target.package):
            raise BuildError(f"target {target.name!r} declares no Go module/package; "
                             "--source module needs both in scenarios.toml")
        self.target = target
        self.builds_dir = paths.make_cache_dir(Path(builds_dir).resolve())  # marked: `clean` may remove it
        self.repo_url = repo_url or target.repo
        if "://" not in self.repo_url and os.path.exists(os.path.expanduser(self.repo_url)):
            self.repo_url = os.path.abspath(os.path.expanduser(self.repo_url))
        self.source = source
        self.offline = offline
        # where PR refs and unknown commits come from when the origin is a local checkout (its remote)
        self.pr_remote = pr_remote
        # the origin is a working checkout (not a bare mirror): also take its remote-tracking
        # branches and whatever it has checked out (a detached PR merge commit in CI)
        self.checkout = checkout
        self.root = self.builds_dir / target.name
        self._repo: git.Repo | None = None
        self._fetched = False
        self.go = tc.parse_choice(go) if go else tc.MOD  # REFBENCH_GO comes as the request's go
        self._local: str | None = None  # this machine's GOVERSION
        self._gomods: dict[str, tc.GoMod | None] = {}  # by commit (git) or version (module)
        self._trees: dict[str, str | None] = {}  # by commit (git)
        self._verified: dict[str, git.Repo] = {}  # by commit: its checked objects (verified())
        trust.cache_key()  # now: a key given in the environment is refused before any git or go runs

    # ---- git source -----------------------------------------------------------------------
    @property
    def clone_dir(self) -> Path:
        return self.root / "clones" / origin_slug(self.repo_url)

    def repo(self) -> git.Repo:
        """The cached bare clone, opened as refbench's own: one with anything refbench never makes
        in it (clone_faults) is removed and cloned anew, its config is written anew, and every git
        command on it names it outright (clone_git_env). Its objects are trusted for nothing that
        is built: verified() checks those of each commit built."""
        if self._repo is None:
            d = self.clone_dir
            git.refresh(tools.git())  # GitPython runs this absolute git, not whichever PATH names first
            with _locked(d.with_suffix(".lock")):
                faults = clone_faults(d) if os.path.lexists(d) else []
                if faults:
                    log.warning("%s holds what refbench never puts in a clone (%s): cloning %s anew", d,
                                "; ".join(faults[:3]) + (f"; {len(faults) - 3} more" if len(faults) > 3 else ""),
                                self.repo_url)
                    _remove(d)
                if not (d / "HEAD").exists():
                    log.info("initialising clone of %s in %s", self.repo_url, d)
                    _remove(d)
                    d.mkdir(parents=True)
                    subprocess.run([tools.git(), *safe_git_args(), "init", "--quiet", "--bare", str(d)], check=True,
                                   capture_output=True, env=tools.child_env())
                    shutil.rmtree(d / "hooks", ignore_errors=True)  # git init's samples: no clone of ours has hooks
                own_clone(d, self.repo_url)
                repo = git.Repo(d)
                repo.git.set_persistent_git_options(c=list(SAFE_GIT))
                repo.git.update_environment(**clone_git_env(d))
                self._repo = repo
        return self._repo

    def verified(self, sha: str) -> git.Repo:
        """A repository holding exactly the objects of commit `sha` and its tree, each one's id
        computed anew by git from its content (`pack-objects` of the closure in the cached clone,
        `index-pack --strict` into a fresh bare repository, shallow at `sha`): a blob replaced in
        the clone under its old id, a tree or commit that is not what its id says, or an object
        missing fails here, and the clone is cloned anew once. Everything built, and the tree and
        go.mod a build is keyed by, come from this repository, never from the clone itself.
        Made once per commit and run, removed when the builder goes."""
        if sha not in self._verified:
            if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", sha) or refs._rev(self.repo(), sha) != sha:
                raise BuildError(f"the clone of {self.repo_url} holds no commit {sha[:12]}", sha=None)
            try:
                self._verified[sha] = self._verify_into_scratch(sha)
            except BuildError as e:
                if self.offline:
                    raise
                log.warning("%s; cloning %s anew", e, self.repo_url)
                with _locked(self.clone_dir.with_suffix(".lock")):
                    _remove(self.clone_dir)
                self._repo, self._fetched = None, False
                self.fetch()
                if not refs._rev(self.repo(), sha):
                    self._fetch_commit(sha)
                self._verified[sha] = self._verify_into_scratch(sha)
        return self._verified[sha]

    def _verify_into_scratch(self, sha: str) -> git.Repo:
        scratch = Path(tempfile.mkdtemp(prefix=f".verified-{sha[:10]}-", dir=self.root))
        weakref.finalize(self, shutil.rmtree, scratch, True)
        git_bin, env = tools.git(), tools.child_env()
        subprocess.run([git_bin, *safe_git_args(), "init", "--quiet", "--bare", str(scratch)], check=True,
                       capture_output=True, env=env)
        shutil.rmtree(scratch / "hooks", ignore_errors=True)
        paths.replace_file(scratch / "shallow", sha + "\n")  # its parents are not needed, nor fetched
        src = {**env, **clone_git_env(self.clone_dir)}
        with _locked(self.clone_dir.with_suffix(".lock")):
            listing = subprocess.run([git_bin, *safe_git_args(), "rev-list", "--objects", "--no-walk", sha],
                                     capture_output=True, env=src)
            # no delta search, no compression: the pack lives for one run, and this is 4x faster
            # (0.27 s instead of 1.16 s for s5cmd's 974-file tree; benchmarks/trust_cost.py)
            packed = subprocess.run([git_bin, *safe_git_args(), "pack-objects", "--stdout", "-q", "--window=0",
                                     "--compression=0"],
                                    input=listing.stdout, capture_output=True, env=src) if listing.returncode == 0 else None
        indexed = subprocess.run([git_bin, *safe_git_args(), "index-pack", "--stdin", "--strict"], input=packed.stdout,
                                 capture_output=True, env={**env, "GIT_DIR": str(scratch)}) if packed else None
        if not indexed or indexed.returncode != 0:
            failed = indexed or packed or listing
            why = (failed.stderr.decode(errors="replace").strip().splitlines() or ["git failed"])[-1]
            raise BuildError(f"the cached clone {self.clone_dir} does not hold commit {sha[:12]} and its files as "
                             f"their ids say ({why.removeprefix('fatal: ')})", sha=None)
        repo = git.Repo(scratch)
        repo.git.set_persistent_git_options(c=list(SAFE_GIT))
        repo.git.update_environment(**clone_git_env(scratch))
        if repo.git.rev_parse("--verify", "--quiet", f"{sha}^{{commit}}") != sha:
            raise BuildError(f"the cached clone {self.clone_dir}: {sha[:12]} is not a commit", sha=None)
        return repo

    def fetch(self) -> None:
        """Bring branches and tags up to date (once per run): the clone's branches and tags become
        the origin's, pruned, so none a cache planted (a tag v99.0.0 that latest_release would
        pick) survives, and refs of any other kind (refs/heads/*, refs/replace/*) are deleted."""
        if self._fetched or self.offline:
            return
        r = self.repo()
        with _locked(self.clone_dir.with_suffix(".lock")):
            try:
                stray = [n for n in r.git.for_each_ref("--format=%(refname)").splitlines()
                         if not n.startswith(KEPT_REFS)]
                for name in stray:
                    r.git.update_ref("--no-deref", "-d", name)
                tags = "+refs/tags/*:refs/tags/*"
                if self.checkout:  # its remote-tracking branches first; its own branches win
                    r.git.fetch("--quiet", "--force", "--prune", "--update-shallow", "origin",
                                "+refs/remotes/origin/*:refs/remotes/origin/*", tags, "+HEAD:refs/refbench/checkout-head")
                # --update-shallow: an origin that is itself a shallow clone (CI checkouts) would
                # otherwise have its tags and branches silently rejected. A checkout's branches
                # come on top of its remote-tracking ones, just pruned to the origin's: not again
                r.git.fetch("--quiet", "--force", "--update-shallow", "origin",
                            *(() if self.checkout else ("--prune",)),
                            "+refs/heads/*:refs/remotes/origin/*", *(() if self.checkout else (tags,)))
            except git.GitCommandError as e:
                raise RefError(f"cannot fetch {self.repo_url}: {_git_msg(e)}") from None
            with contextlib.suppress(git.GitCommandError):
                head = r.git.ls_remote("--symref", "origin", "HEAD")
                m = re.search(r"ref: refs/heads/(\S+)\s+HEAD", head)
                if m:
                    r.git.symbolic_ref("refs/remotes/origin/HEAD", f"refs/remotes/origin/{m.group(1)}")
        self._fetched = True

    def _fetch_pr(self, number: int) -> None:
        if self.offline:
            return
        r = self.repo()
        with _locked(self.clone_dir.with_suffix(".lock")):
            try:
                r.git.fetch("--quiet", "--force", "--update-shallow", self.pr_remote or "origin",
                            f"+refs/pull/{number}/head:refs/refbench/pull/{number}")
            except git.GitCommandError as e:
                msg = _git_msg(e)
                if "couldn't find remote ref" in msg or "not our ref" in msg:
                    raise RefError(f"PR #{number} not found in {self.pr_remote or self.repo_url} "
                                   f"(no refs/pull/{number}/head)") from None
                raise RefError(f"cannot fetch PR #{number} from {self.pr_remote or self.repo_url}: {msg}") from None

    def _fetch_commit(self, sha: str) -> None:
        if self.offline:
            return
        for remote in ("origin",) + ((self.pr_remote,) if self.pr_remote else ()):
            with contextlib.suppress(git.GitCommandError):
                self.repo().git.fetch("--quiet", "--update-shallow", remote, sha)
                return

    def resolve(self, text: str, go: str | None = None) -> refs.ResolvedRef:
        """The commit `text` names, with the Go that builds it (`go`: a --go value, else the
        builder's)."""
        return self.settle(self._resolve_commit(text), go)

    def resolve_all(self, texts: tuple[str, ...] | list[str], go: tuple[str, ...] = ()) -> list[refs.ResolvedRef]:
        """The refs of one comparison, each with its Go: `go` holds one --go value for all of
        them or one per ref in their order (none: the builder's choice)."""
        return [self.resolve(t, g) for t, g in zip(texts, tc.per_build(go, len(texts), self.go))]

    def _resolve_commit(self, text: str) -> refs.ResolvedRef:
        ref = refs.classify(text)
        if self.source == "module":
            return self._resolve_module(ref)
        self.fetch()
        if ref.kind == "pr":
            self._fetch_pr(ref.pr)
        try:
            return refs.resolve(self.repo(), text)
        except RefError:
            if ref.kind in ("commit",):
                self._fetch_commit(text)
                return refs.resolve(self.repo(), text)
            raise

    # ---- module source --------------------------------------------------------------------
    def _scratch_module(self, where: Path, toolchain: str | None = None) -> Path:
        where.mkdir(parents=True, exist_ok=True)
        if not (where / "go.mod").exists():
            self._go(["go", "mod", "init", "refbench.local/build"], where, where / "init.log", toolchain=toolchain)
        return where

    def _resolve_module(self, ref: refs.Ref) -> refs.ResolvedRef:
        if ref.kind == "pr":
            raise RefError(f"PR #{ref.pr}: pull requests are not served by the Go module proxy; "
                           "use --source git")
        query = {"latest_release": "latest", "head": "HEAD"}.get(ref.kind, ref.text)
        info = self._module_info(ref.text, query)
        version = info["Version"]
        self._gomods[version] = _read_gomod_file(info.get("GoMod"))
        sha = (info.get("Origin") or {}).get("Hash")
        if not sha:
            m = re.search(r"-([0-9a-f]{12})$", version)  # pseudo-version: the commit prefix
            sha = m.group(1) if m else version
        display = f"latest_release ({version})" if ref.kind == "latest_release" else (
            ref.text if ref.text == version else f"{ref.text} ({version})")
        return refs.ResolvedRef(ref.text, ref.kind, sha, display, version=version)

    def _module_info(self, text: str, query: str) -> dict:
        """`go list -m -json MODULE@QUERY`: the version, its commit and its go.mod file (GoMod)."""
        with tempfile.TemporaryDirectory(prefix="refbench-mod-") as tmp:
            mod = self._scratch_module(Path(tmp))
            proc = subprocess.run(_absolute(["go", "list", "-m", "-json", f"{self.target.module}@{query}"]),
                                  cwd=mod, capture_output=True, text=True, env=self._go_env())
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["unknown error"])[-1].strip()
            raise RefError(f"ref not found: {text!r} in module {self.target.module}: {last}")
        return json.loads(proc.stdout)

    # ---- which Go builds a ref ----------------------------------------------------------------
    def local_go(self) -> str:
        """This machine's Go (GOVERSION with GOTOOLCHAIN=local), asked once."""
        if self._local is None:
            self._local = go_version(self._go_env())
        return self._local

    def _listed(self) -> tuple[tc.GoVersion, ...]:
        return tc.available(self.builds_dir, self._go_env())

    def gomod(self, resolved: refs.ResolvedRef) -> tc.GoMod | None:
        """What the ref's go.mod asks for (None without one): the top-level go.mod of the commit
        (even when the build command runs in a sub-directory), or the module's at its version."""
        key = resolved.version if self.source == "module" else resolved.sha
        if key not in self._gomods:
            if self.source == "module":
                self._gomods[key] = _read_gomod_file(self._module_info(resolved.text, key).get("GoMod"))
            else:
                self._gomods[key] = self._git_gomod(resolved)
        return self._gomods[key]

    def _git_gomod(self, resolved: refs.ResolvedRef) -> tc.GoMod | None:
        try:
            text = self.verified(resolved.sha).git.show(f"{resolved.sha}:go.mod")
        except git.GitCommandError as e:
            msg = _git_msg(e)
            if "does not exist" in msg or "exists on disk, but not in" in msg:
                return None  # a commit from before modules: nothing asked
            raise BuildError(f"cannot read go.mod of {resolved.display} ({resolved.short}): {msg}") from None
        return tc.parse_gomod(text)

    def settle(self, resolved: refs.ResolvedRef, go: str | None = None) -> refs.ResolvedRef:
        """The ref with the Go that builds it: `go` (a --go value) or the builder's choice. A ref
        already settled keeps its Go unless `go` is given."""
        if resolved.toolchain and go is None:
            return resolved
        choice = tc.parse_choice(go) if go else self.go
        picked = tc.pick(choice, self.gomod(resolved) if choice == tc.MOD else None, self.local_go(), self._listed)
        if picked.note:
            log.warning("%s (%s): %s", resolved.display, resolved.short, picked.note)
        return dataclasses.replace(resolved, toolchain=picked.name)

    def _hint(self, resolved: refs.ResolvedRef) -> str:
        """What a failed build's message says about Go (toolchain.hint); never fails itself."""
        try:
            gomod = self.gomod(resolved)
        except RefbenchError:
            return "its go.mod could not be read"
        try:
            wanted = tc.pick(tc.MOD, gomod, self.local_go(), self._listed).name
        except RefbenchError:
            wanted = None
        return tc.hint(resolved.toolchain or self.local_go(), gomod, wanted)

    def _recorded_go(self, name: str) -> str:
        """The GOVERSION that builds with `name` (`go env GOVERSION` under its GOTOOLCHAIN, which
        fetches a toolchain that is not here yet): what build.json records and the cache compares."""
        if name == self.local_go():
            return name
        got = go_version(self._go_env(name))
        if got != name:
            raise BuildError(f"GOTOOLCHAIN={name} runs {got}, not {name}")
        return got

    # ---- building -------------------------------------------------------------------------
    def _go_env(self, toolchain: str | None = None) -> dict:
        """Reproducible builds: no VCS stamp and no checkout paths in the binary, so two commits
        with the same Go code (a README change) give byte-identical binaries, answered without
        measuring (pipeline.identical_contenders). The user's own GOFLAGS come after ours.
        GOTOOLCHAIN: `toolchain` (fetched by the go command from the module proxy), or this
        machine's Go with no switching, so the Go recorded is the Go that built. The environment
        is tools.child_env's: an allow-list, with no cache directory on PATH (where go would look
        for a `go1.26.8` before fetching one)."""
        env = tools.child_env()  # allow-listed: the job's secrets never reach go or a build script
        env["GOFLAGS"] = " ".join(filter(None, (reproducible_goflags(toolchain), os.environ.get("GOFLAGS", ""))))
        env["GOTOOLCHAIN"] = tc.gotoolchain(toolchain, self.local_go()) if toolchain else tc.LOCAL
        return env

    def toolchain(self, resolved: refs.ResolvedRef | None = None) -> str:
        """The Go that builds `resolved`; without a ref, this machine's."""
        return self.settle(resolved).toolchain if resolved else self.local_go()

    def build_dir(self, sha: str, toolchain: str | None = None) -> Path:
        name = sha if self.source == "git" else f"{sha}.module"
        if toolchain and toolchain != self.local_go():
            name += f".{toolchain}"
        return self.root / name

    def cached(self, resolved: refs.ResolvedRef) -> Path | None:
        resolved = self.settle(resolved)
        d = self.build_dir(resolved.sha, resolved.toolchain)
        meta, binary = d / "build.json", d / self.target.binary
        if not (meta.exists() and binary.exists()):
            return None
        try:
            info = json.loads(meta.read_text())
        except ValueError:
            return None
        if not isinstance(info, dict) or "tree" not in info:
            return None  # not a record, or one of a refbench from before trees were sealed: rebuild
        fields = {k: info.get(k) for k in SEALED_FIELDS}
        # the commit names its tree: the sealed one stands (an artifact's builder may hold no clone)
        if not fields.get("binary_sha256") or self._sealed_fields(resolved, fields["binary_sha256"],
                                                                  tree=fields["tree"]) != fields:
            return None  # no hash, or another commit, Go, command or GOFLAGS: rebuild
        if not trust.sealed(SEAL_PURPOSE, fields, info.get("seal")):
            log.warning("%s: not sealed under this machine's cache key (%s; see refbench/trust.py): rebuilding",
                        meta, "no seal" if "seal" not in info else f"sealed by key {info.get('key_id', '?')}")
            return None
        got = file_sha256(binary)
        if got != fields["binary_sha256"]:
            log.warning("%s: binary hash %s is not the %s sealed in %s: rebuilding", binary, got[:12],
                        fields["binary_sha256"][:12], meta)
            return None
        if not os.access(binary, os.X_OK):
            binary.chmod(binary.stat().st_mode | 0o111)
        return binary

    def tree(self, resolved: refs.ResolvedRef) -> str | None:
        """The git tree of the ref's commit (git source; None for the module source or a commit the
        clone does not hold), asked once per commit."""
        if self.source != "git":
            return None
        if resolved.sha not in self._trees:
            try:
                self._trees[resolved.sha] = self.verified(resolved.sha).git.rev_parse(
                    "--verify", "--quiet", f"{resolved.sha}^{{tree}}") or None
            except (git.GitCommandError, RefbenchError):
                self._trees[resolved.sha] = None
        return self._trees[resolved.sha]

    def tree_determined(self, toolchain: str | None) -> bool:
        """Whether a build's binary is a function of the commit's tree alone: the build command is
        `go build` under the reproducible GOFLAGS (no VCS stamp, no checkout paths), with no
        -toolexec and no -buildvcs turned back on by the user's GOFLAGS or the command. Then two
        commits with one tree (a rebase, a merge that changes nothing, a reworded message) build
        the same binary, and one build serves both. Any other build command may read the commit
        itself (`git rev-parse HEAD` in a Makefile), so its builds stay keyed by commit alone."""
        argv = list(self.target.build)
        if len(argv) < 2 or Path(argv[0]).name != "go" or argv[1] != "build":
            return False
        stamp = False
        for flag in self._go_env(toolchain)["GOFLAGS"].split() + argv[2:]:
            name, _, value = flag.lstrip("-").partition("=")
            if name == "toolexec":
                return False
            if name == "buildvcs":
                stamp = value != "false"  # a bare -buildvcs is true; auto stamps inside a checkout
        return not stamp

    def same_tree_build(self, resolved: refs.ResolvedRef) -> tuple[Path, dict] | None:
        """A cached build of another commit with this ref's tree, made the same way (target, Go,
        build command, GOFLAGS) and sealed under this machine's key: its binary and its sealed
        fields. None when the build is not determined by the tree (tree_determined) or there is
        none. Its binary is not trusted here: the caller copies it and checks the copy's hash
        against the sealed one."""
        if self.source != "git" or not self.tree_determined(resolved.toolchain):
            return None
        want = self._sealed_fields(resolved, None)
        if not want["tree"]:
            return None
        ignore = {"sha": None, "binary_sha256": None}
        for meta in sorted(self.root.glob("*/build.json")):
            try:
                info = json.loads(meta.read_text())
            except (OSError, ValueError):
                continue
            if not isinstance(info, dict):
                continue
            fields = {k: info.get(k) for k in SEALED_FIELDS}
            if fields["sha"] == resolved.sha or not fields["binary_sha256"] or {**fields, **ignore} != {**want, **ignore}:
                continue
            if trust.sealed(SEAL_PURPOSE, fields, info.get("seal")) and (meta.parent / self.target.binary).is_file():
                return meta.parent / self.target.binary, fields
        return None

    def build_record(self, resolved: refs.ResolvedRef, digest: str, **extra) -> dict:
        """build.json of `resolved` built into a binary of SHA-256 `digest`: the fields the cache is
        keyed by and the hash, sealed under this machine's (or job's) key, and `extra`."""
        sealed = self._sealed_fields(resolved, digest)
        return {**sealed, **extra, "seal": trust.seal(SEAL_PURPOSE, sealed), "key_id": trust.key_id()}

    def _sealed_fields(self, resolved: refs.ResolvedRef, digest: str | None, **tree) -> dict:
        """What a build record must say for `resolved` as this builder builds it: the fields the seal
        covers (SEALED_FIELDS). `tree=`: the commit's tree as a record already says it, else asked."""
        return {"target": self.target.name, "sha": resolved.sha,
                "tree": tree["tree"] if "tree" in tree else self.tree(resolved), "source": self.source,
                "toolchain": resolved.toolchain, "build": list(self.target.build),
                "goflags": self._go_env(resolved.toolchain)["GOFLAGS"], "binary_sha256": digest}

    def export(self, build: "BuiltRef", out_dir: Path) -> Path:
        """Copy a build (binary, build.json, build.log) into out_dir with the cache's own layout, so
        `--builds-dir out_dir` reuses it (verified by its hash). Returns the copied binary."""
        src = build.binary.parent
        dest = Path(out_dir).resolve() / self.target.name / src.name
        if dest == src:
            return build.binary
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for name in (self.target.binary, "build.json", "build.log"):
            if (src / name).exists():
                shutil.copy2(src / name, tmp / name)
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
        return dest / self.target.binary

    def build(self, resolved: refs.ResolvedRef, label: str) -> BuiltRef:
        resolved = self.settle(resolved)
        d = self.build_dir(resolved.sha, resolved.toolchain)
        with _locked(d.with_name(d.name + ".lock")):
            binary = self.cached(resolved)
            if binary:
                log.info("%s: cached build %s", label, binary)
                return BuiltRef(self.target.name, resolved, label, binary, self.source, resolved.toolchain,
                                False, 0.0, file_sha256(binary))
            t0 = time.monotonic()
            if d.exists():
                shutil.rmtree(d)
            reused = self._reuse_same_tree(resolved, d)
            if reused:
                log.info("%s: the tree of %s, built before: %s", label, reused[1][:12], reused[0])
                return BuiltRef(self.target.name, resolved, label, reused[0], self.source, resolved.toolchain,
                                False, 0.0, file_sha256(reused[0]))
            go = self._recorded_go(resolved.toolchain)
            d.mkdir(parents=True)
            tmp_bin = d / (self.target.binary + ".tmp")
            log_path = d / "build.log"
            if self.source == "git":
                self._build_git(resolved, tmp_bin, log_path)
            else:
                self._build_module(resolved, tmp_bin, log_path, d)
            binary = d / self.target.binary
            tmp_bin.rename(binary)
            seconds = time.monotonic() - t0
            digest = file_sha256(binary)
            (d / "build.json").write_text(json.dumps(self.build_record(
                resolved, digest, ref=resolved.text, version=resolved.version, seconds=round(seconds, 2),
                built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z")), indent=2))
        return BuiltRef(self.target.name, resolved, label, binary, self.source, go, True, seconds, digest)

    def _reuse_same_tree(self, resolved: refs.ResolvedRef, d: Path) -> tuple[Path, str] | None:
        """Put the binary of a sealed build of the same tree (same_tree_build) in `d` as this
        commit's, with a record of its own: (the binary, the commit it was built from), or None
        (nothing to reuse, or a copy whose hash is not the sealed one: then `d` is left empty)."""
        twin = self.same_tree_build(resolved)
        if not twin:
            return None
        src, fields = twin
        d.mkdir(parents=True)
        tmp_bin = d / (self.target.binary + ".tmp")
        try:
            shutil.copyfile(src, tmp_bin)
        except OSError:
            shutil.rmtree(d, ignore_errors=True)
            return None
        digest = file_sha256(tmp_bin)
        if digest != fields["binary_sha256"]:
            log.warning("%s: binary hash %s is not the %s sealed beside it: building %s instead", src, digest[:12],
                        fields["binary_sha256"][:12], resolved.short)
            shutil.rmtree(d, ignore_errors=True)
            return None
        tmp_bin.chmod(0o755)
        binary = d / self.target.binary
        tmp_bin.rename(binary)
        (d / "build.json").write_text(json.dumps(self.build_record(
            resolved, digest, ref=resolved.text, version=resolved.version, seconds=0.0, same_tree_as=fields["sha"],
            built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z")), indent=2))
        return binary, fields["sha"]

    def _build_git(self, resolved: refs.ResolvedRef, out: Path, log_path: Path) -> None:
        """Check the commit out of its verified repository (verified()), never the cached clone."""
        repo = self.verified(resolved.sha)
        wt = Path(tempfile.mkdtemp(prefix=f"wt-{resolved.sha[:10]}-", dir=self.root))
        try:
            repo.git.worktree("add", "--detach", "--force", str(wt), resolved.sha)
            self._verify_modules(wt, log_path, resolved)
            argv = [a.replace("{out}", str(out)) for a in self.target.build]
            self._go(argv, wt, log_path, what=f"build of {resolved.display} ({resolved.short})", sha=resolved.sha,
                     ref=resolved)
        finally:
            with contextlib.suppress(git.GitCommandError):
                repo.git.worktree("remove", "--force", str(wt))
            shutil.rmtree(wt, ignore_errors=True)
            with contextlib.suppress(git.GitCommandError):
                repo.git.worktree("prune")

    def _build_module(self, resolved: refs.ResolvedRef, out: Path, log_path: Path, d: Path) -> None:
        # made by the Go that builds, so its go line asks for no newer one
        mod = self._scratch_module(d / "mod", resolved.toolchain)
        what = f"module build of {self.target.package}@{resolved.version}"
        try:
            self._go(["go", "get", f"{self.target.package}@{resolved.version}"], mod, log_path, what=what,
                     sha=resolved.sha, ref=resolved)
            self._verify_modules(mod, log_path, resolved)
            self._go(["go", "build", "-o", str(out), self.target.package], mod, log_path, what=what, sha=resolved.sha,
                     ref=resolved)
        finally:
            shutil.rmtree(mod, ignore_errors=True)

    def _verify_modules(self, root: Path, log_path: Path, resolved: refs.ResolvedRef) -> None:
        """`go mod verify` in the module at `root`: every module its go.sum lists that the module
        cache holds must still be what was downloaded. The module cache may come from a cache
        restore (refbench.trust), and a changed module would be built into the binary. A module
        without go.sum has nothing downloaded to check. A changed module fails the build as no
        commit's fault (BuildError.sha None); any other failure is the commit's."""
        if not (root / "go.sum").is_file():
            return
        try:
            self._go(["go", "mod", "verify"], root, log_path, what=f"go mod verify of {resolved.display} "
                     f"({resolved.short})", sha=resolved.sha, ref=resolved)
        except BuildError as e:
            if "modified" in (e.detail or ""):
                raise BuildError(f"the Go module cache holds a module that is not what its checksum says (go mod "
                                 f"verify, building {resolved.display} ({resolved.short})): tampered with or "
                                 f"corrupt; `go clean -modcache` empties it; log: {log_path}", detail=e.detail,
                                 sha=None) from None
            raise

    def _go(self, argv: list[str], cwd: Path, log_path: Path, what: str = "build", sha: str | None = None,
            ref: refs.ResolvedRef | None = None, toolchain: str | None = None) -> None:
        """Run a go command of a build with the ref's Go (or `toolchain`); a failure names the Go
        it used and the one go.mod asks for."""
        toolchain = ref.toolchain if ref else toolchain
        log.debug("$ %s  (in %s, Go %s)", " ".join(argv), cwd, toolchain or "local")
        with open(log_path, "a") as fh:
            fh.write(f"$ {' '.join(argv)}\n")
            fh.flush()
            try:
                rc = subprocess.run(_absolute(argv), cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
                                    env=self._go_env(toolchain)).returncode
            except FileNotFoundError:
                raise BuildError(f"{what} failed: {argv[0]} not found on PATH", sha=sha) from None
        if rc != 0:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
            how = f" with {ref.toolchain} (exit {rc}; {self._hint(ref)})" if ref else f" (exit {rc})"
            raise BuildError(f"{what} failed{how}; log: {log_path}", detail=tail, sha=sha)


def unique_labels(resolved: list[refs.ResolvedRef]) -> list[str]:
    """Display names, made unique: builds of one ref with different Go say which
    ('v1.0.0 (go1.25.9)'); an A/A comparison of one ref with one Go gets '#2'."""
    gos: dict[str, set] = {}
    for r in resolved:
        gos.setdefault(r.display, set()).add(r.toolchain)
    labels, seen = [], {}
    for r in resolved:
        base = f"{r.display} ({r.toolchain})" if len(gos[r.display]) > 1 and r.toolchain else r.display
        seen[base] = seen.get(base, 0) + 1
        labels.append(base if seen[base] == 1 else f"{base} #{seen[base]}")
    return labels


def _absolute(argv: list[str]) -> list[str]:
    """`argv` with a leading bare `go` or `git` made the absolute path refbench.tools finds (never a
    cache directory's); FileNotFoundError when there is none."""
    if argv and argv[0] in ("go", "git"):
        found = tools.go() if argv[0] == "go" else tools.which("git")
        if not found:
            raise FileNotFoundError(argv[0])
        return [found, *argv[1:]]
    return argv


def _read_gomod_file(path: str | None) -> tc.GoMod | None:
    """A module's go.mod as the module proxy served it (the GoMod path `go list -m -json` gives)."""
    try:
        return tc.parse_gomod(Path(path).read_text(errors="replace")) if path else None
    except OSError:
        return None


def _git_msg(e: git.GitCommandError) -> str:
    text = (e.stderr or str(e)).strip().replace("stderr:", "").strip().strip("'").strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    return (fatal[0] if fatal else lines[-1] if lines else "git failed").removeprefix("fatal: ")
