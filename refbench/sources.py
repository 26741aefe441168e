"""Getting a target's sources, from git or the Go module proxy, and verifying them: everything
refbench does with git.

A cached bare clone per origin (builds/<target>/clones/<origin-slug>/) is fetched, never re-cloned,
and trusted for nothing that is built (the threat model is docs/threat-model.md's):

- git runs with hooks off (core.hooksPath=/dev/null) and core.fsmonitor off, on the clone named
  outright (GIT_DIR: never a directory above it); a clone holding anything refbench never makes
  (commondir, worktrees, hooks, alternates, attributes, grafts, a commit-graph, a link: clone_faults) is cloned
  anew, and its config is written anew each time it is opened; its branches and tags are pruned to
  the origin's on every fetch, other refs deleted, and each ref's own object re-hashed (Clone.fetch);
- nothing is built from the clone itself: each commit's objects are copied into a fresh
  repository where git computes every id from the content (Clone.verified), and the build, the
  tree and the go.mod it is keyed by come from there, so an object replaced under its id fails.

Where each part lives: the options and environment every git gets, refbench.clone_git; what a
clone may hold on disk, refbench.clone_faults; whether its objects are what their ids say,
refbench.clone_objects; fetching, refbench.clone_fetch. This module opens the clone, resolves refs
in it and makes it anew once where a verification finds a fault; it re-exports their names that other
modules import from here.

The module source (ModuleSource) asks the Go module proxy which version and commit a ref names,
with an empty module cache of its own, never a restored one's word.

What is built from these sources, and how, is refbench.builds'.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import git

from . import clone_fetch, clone_objects as objs, paths, refs, toolchain as tc, tools, trust
from .clone_faults import (  # noqa: F401  (the names other modules import from here)
    ALLOWED_INFO, CLONE_ENTRIES, CLONE_KINDS, CLONE_NEEDS, ORIGIN_HEAD, clone_faults)
from .clone_fetch import CHECKOUT_HEAD, KEPT_REFS  # noqa: F401
from .clone_git import (  # noqa: F401
    SAFE_GIT, CloneFault, ClonePlace, clone_git_env, git_msg, gitpython_env, safe_git_args)
from .clone_objects import commit_parents, hashes_to  # noqa: F401
from .errors import BuildError, RefbenchError, RefError

log = logging.getLogger(__name__)


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
            p = subprocess.run(absolute(["git", *safe_git_args(), *args]), cwd=start or os.getcwd(),
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


def clone_config(url: str) -> str:
    """The whole config of a bare clone, as refbench writes it: the origin and nothing else."""
    if any(c in url for c in "\n\r\0"):
        raise RefError(f"an origin URL with a line break or NUL cannot be written to a git config: {url!r}")
    quoted = '"' + url.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return ("[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"
            f'[remote "origin"]\n\turl = {quoted}\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n')


def own_clone(d: Path, url: str, within: Path | None = None) -> None:
    """Write the bare clone's config anew (refbench's own: the origin and nothing else), through a
    new file renamed over the old, so a `config` that is a link to elsewhere is replaced, not
    written through. What else a restored cache may have put in the clone is clone_faults'."""
    paths.replace_file(d / "config", clone_config(url), within=within)


def origin_slug(url: str) -> str:
    """A readable, unique directory name for an origin URL or path."""
    norm = url.rstrip("/")
    if "://" not in norm and not re.match(r"^[\w.-]+@", norm):
        norm = os.path.abspath(os.path.expanduser(norm))
    tail = re.sub(r"[^A-Za-z0-9._-]+", "_", norm.split("/")[-1].removesuffix(".git"))[-40:]
    return f"{tail}-{hashlib.sha256(norm.encode()).hexdigest()[:10]}"


_locked = paths.locked  # one lock helper for builds, clones and fixtures


def _remove_clone(d: Path, cache: Path) -> None:
    """Remove the cached clone `d`, which refbench is to make anew (paths.remove_tree gives each
    directory in it its owner's permissions back on the way: a restored mode 000 one can be neither
    listed nor emptied without, for a runner that is not root). One that still cannot go (a
    directory of another user's in it) is one line naming it, exit 2: the OSError crashed every run
    (exit 3) until the cache was removed by hand."""
    try:
        paths.remove_tree(d, cache)
    except OSError as e:
        raise RefbenchError(f"cannot remove the cached clone {d}, which refbench makes anew "
                            f"({e.filename or d}: {e.strerror or e}); remove it by hand") from None


class Clone:
    """The cached bare clone of one origin under `root` (builds/<target>/), and the commits
    verified out of it. `offline`: never fetch. `pr_remote`: where PR refs and unknown commits
    come from when the origin is a local checkout (its remote). `checkout`: the origin is a working
    checkout (not a bare mirror): also take its remote-tracking branches and whatever it has
    checked out (a detached PR merge commit in CI). `git_options` and `allowed_info`: what its git
    commands run with and what its info directories may hold (SAFE_GIT, ALLOWED_INFO; a test's
    looser ones show what the verifications after them still catch). The fetching is refbench.clone_fetch's,
    the verification of what it holds refbench.clone_faults' and clone_objects'; this class opens the
    clone, resolves refs in it, and makes it anew, once, where one of those finds a fault."""

    def __init__(self, root: Path, repo_url: str, offline: bool = False, pr_remote: str | None = None,
                 checkout: bool = False, git_options: tuple[str, ...] = SAFE_GIT,
                 allowed_info: Mapping[str, frozenset[str]] = ALLOWED_INFO):
        self.root = root
        self.cache = root.parent  # the builds directory: nothing is written or removed through a link in it
        self.repo_url = repo_url
        self.offline = offline
        self.pr_remote = pr_remote
        self.checkout = checkout
        self.git_options, self.allowed_info = git_options, allowed_info
        self._repo: git.Repo | None = None
        self._fetched = False
        self._verified: dict[str, git.Repo] = {}  # by commit: its checked objects (verified())

    @property
    def clone_dir(self) -> Path:
        return self.root / "clones" / origin_slug(self.repo_url)

    @property
    def place(self) -> ClonePlace:
        """The clone as the fetches and checks on it see it, as this Clone's settings are now."""
        return ClonePlace(clone_dir=self.clone_dir, cache=self.cache, url=self.repo_url, pr_remote=self.pr_remote,
                          checkout=self.checkout)

    def repo(self) -> git.Repo:
        """The cached bare clone, opened as refbench's own: one with anything refbench never makes
        in it (clone_faults) is removed and cloned anew, its config is written anew, and every git
        command on it names it outright (clone_git_env). Its objects are trusted for nothing that
        is built: verified() checks those of each commit built."""
        if self._repo is None:
            d = self.clone_dir
            # GitPython runs this absolute git, not whichever PATH names first; named, not refreshed:
            # git.refresh runs `git version` with a copy of os.environ, held names and all (the
            # third reading of issue 54, G1)
            git.Git.GIT_PYTHON_GIT_EXECUTABLE = tools.git()
            with _locked(d.with_suffix(".lock"), within=self.cache):
                faults = clone_faults(d, self.allowed_info) if os.path.lexists(d) else []
                if faults:
                    log.warning("%s holds what refbench never puts in a clone (%s): cloning %s anew", d,
                                "; ".join(faults[:3]) + (f"; {len(faults) - 3} more" if len(faults) > 3 else ""),
                                self.repo_url)
                    _remove_clone(d, self.cache)
                if not (d / "HEAD").exists():
                    log.info("initialising clone of %s in %s", self.repo_url, d)
                    _remove_clone(d, self.cache)
                    paths.make_dirs(d, self.cache)
                    subprocess.run([tools.git(), *safe_git_args(), "init", "--quiet", "--bare", str(d)], check=True,
                                   capture_output=True, env=tools.child_env())
                    paths.remove_tree(d / "hooks", self.cache, ignore_errors=True)  # git init's samples: no clone of ours has hooks
                own_clone(d, self.repo_url, self.cache)
                repo = git.Repo(d)
                repo.git.set_persistent_git_options(c=list(self.git_options))
                repo.git.update_environment(**gitpython_env(d))
                self._repo = repo
        return self._repo

    def verified(self, sha: str) -> git.Repo:
        """A repository holding exactly the objects of commit `sha` and its tree, each one's id
        computed anew by git from its content (`pack-objects` of the closure in the cached clone,
        `index-pack --strict` into a fresh bare repository, shallow at `sha`: clone_objects.
        verify_into_scratch): a blob replaced in the clone under its old id, a tree or commit that
        is not what its id says, or an object missing fails here, and the clone is cloned anew once.
        Everything built, and the tree and go.mod a build is keyed by, come from this repository,
        never from the clone itself. Made once per commit and run, removed when this Clone (and the
        Builder holding it) goes."""
        if sha not in self._verified:
            if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", sha):
                raise BuildError(f"the clone of {self.repo_url} holds no commit {sha[:12]}", sha=None)
            try:  # a commit replaced under its id fails the first check: cloned anew as well
                self._verified[sha] = self._verify_into_scratch(self._commit_here(sha))
            except BuildError as e:
                if self.offline:
                    raise
                log.warning("%s; cloning %s anew", e, self.repo_url)
                self._drop_clone()
                self.fetch()
                if not refs.commit_of(self.repo(), sha):
                    self.fetch_commit(sha)
                self._verified[sha] = self._verify_into_scratch(self._commit_here(sha))
        return self._verified[sha]

    def _commit_here(self, sha: str) -> str:
        """`sha`, once the clone holds it as a commit (its object re-hashed); else a BuildError."""
        if refs.commit_of(self.repo(), sha) != sha:
            raise BuildError(f"the clone of {self.repo_url} holds no commit {sha[:12]}", sha=None)
        return sha

    def _verify_into_scratch(self, sha: str) -> git.Repo:
        """clone_objects.verify_into_scratch, its repository removed when this Clone goes."""
        return objs.verify_into_scratch(self.place, self.root, sha, owner=self)

    def fetch(self) -> None:
        """Bring branches and tags up to date (once per run): the clone's branches and tags become
        the origin's, pruned, so none a cache planted (a tag v99.0.0 that latest_release would
        pick) survives, and refs of any other kind (refs/heads/*, refs/replace/*) are deleted.
        Then every ref's history must be whole (missing_objects) and every ref's own object what
        its id says (tip_fault): a fetch checks only the refs it moves, so a restored clone whose
        tips equal the origin's but whose packs lack an older commit kept lacking it, and a prefix
        of that commit named another one. A clone git cannot sweep or fetch into while the origin
        answers (a stale ref lock a killed fetch left, a packed-refs line git cannot parse: review35g
        G3), or with such a hole, is cloned anew, once; then one line (clone_fetch.fetch_fault)."""
        if self._fetched or self.offline:
            return
        fault = clone_fetch.fetch_fault(self.place, self.repo())
        if fault:
            log.warning("the cached clone %s %s: cloning %s anew", self.clone_dir, fault, self.repo_url)
            self._drop_clone()
            fault = clone_fetch.fetch_fault(self.place, self.repo())
            if fault:
                raise RefError(f"cannot fetch {self.repo_url}: the clone {self.clone_dir}, made anew, still {fault}")
        self._fetched = True

    def missing_objects(self) -> str | None:
        """Why the clone's refs are not whole, or None (clone_objects.missing_objects)."""
        return objs.missing_objects(self.place)

    def tip_fault(self, *patterns: str) -> str | None:
        """Why an object a ref of the clone names is not what its id says, or None
        (clone_objects.tip_fault)."""
        return objs.tip_fault(self.place, self.repo(), *patterns)

    def fetch_pr(self, number: int) -> None:
        """Fetch PR `number`'s head into refs/refbench/pull/N (clone_fetch.fetch_pr: a CloneFault
        when the clone cannot take it); nothing offline."""
        if self.offline:
            return
        clone_fetch.fetch_pr(self.place, self.repo(), number)

    def fetch_commit(self, sha: str) -> None:
        """Fetch one commit by its whole id (clone_fetch.fetch_commit); nothing offline."""
        if self.offline:
            return
        clone_fetch.fetch_commit(self.place, self.repo(), sha)

    def commits_between(self, good: str, bad: str) -> list[tuple[str, str]]:
        """(sha, subject) of the commits after GOOD up to and including BAD, oldest first (bisect's
        line), each commit checked against its id (clone_objects.commits_between)."""
        return objs.commits_between(self.place, self.repo(), good, bad)

    def resolve(self, text: str) -> refs.ResolvedRef:
        """The commit `text` names in the origin, fetched first (a PR's head, or an unknown
        commit, by name). A clone holding an object that is not what its id says (CloneFault) is
        cloned anew once: a restored one would otherwise fail every run naming that commit, for
        good (review35e LOW), or vouch for a history it made up (review35f F2)."""
        try:
            return self._resolve(text)
        except CloneFault as e:
            if self.offline:
                raise
            log.warning("%s: cloning %s anew", e, self.repo_url)
            self._drop_clone()
            return self._resolve(text)

    def _drop_clone(self) -> None:
        """Remove the cached clone: the next repo() makes it anew, the next fetch fills it."""
        with self.place.lock():
            _remove_clone(self.clone_dir, self.cache)
        self._repo, self._fetched = None, False

    def _resolve(self, text: str) -> refs.ResolvedRef:
        ref = refs.classify(text)
        self.fetch()
        if ref.kind == "pr":
            self.fetch_pr(ref.pr)
        # HEAD: the checkout's own, as this fetch brought it, never the clone's HEAD file
        head = CHECKOUT_HEAD if self.checkout else None
        whole = trust.key_given()  # a keyed run takes no commit prefix (refs.resolve says why)
        try:
            resolved, by = refs.resolve_reaching(self.repo(), text, head=head, whole=whole)
        except RefError:
            if not (ref.kind == "commit" and refs.is_whole_commit(text)):
                raise
            self.fetch_commit(text)  # git fetches a commit by its whole id only
            try:
                resolved, by = refs.resolve_reaching(self.repo(), text, head=head, whole=whole)
            except RefError:
                if objs.holds_object(self.place, text):  # there, yet no commit: its content hashes to another id
                    raise CloneFault(f"the cached clone {self.clone_dir} holds an object under {text[:12]} that "
                                     "is not the commit its id says") from None
                raise
        if by:  # a prefix: the ref that reaches it (refs.resolve) must truly
            tip = refs.commit_of(self.repo(), by)
            if tip is None:
                raise CloneFault(f"the cached clone {self.clone_dir}: {by} names no commit here")
            objs.authentic_line(self.place, self.repo(), resolved.sha, tip, by)
        if trust.merged_only():
            self.refuse_unmerged(resolved)
        return resolved

    def refuse_unmerged(self, resolved: refs.ResolvedRef) -> None:
        """A RefError, one line naming the ref and the commit, when `resolved` is not merged code:
        not reachable from the origin's default branch nor contained in a release tag (v*), as
        this run's fetch brought them (branches and tags pruned to the origin's). A keyed run and
        a job that writes the default branch's cache scope build nothing else (trust.merged_only),
        whichever way the ref came: -s, --variant, the nightly's or bisect's (whose line lies below
        BAD). `merge-base --is-ancestor`, then `for-each-ref --contains` only when that fails. git
        walks parents there without re-hashing a commit, so the line from the commit to the branch
        or tag that reaches it is then read back, each commit hashed and its parents checked
        (clone_objects.authentic_line): an ancestor replaced under its id to name a PR's commit as a
        parent makes that commit look merged (review35f F2), and is a CloneFault instead."""
        if self.offline:  # no fetch, so no sweep: the clone's refs are as the cache left them
            raise RefError(f"{resolved.text} ({resolved.sha[:12]}): an offline run cannot tell merged code (the cached "
                           f"clone of {self.repo_url} is not fetched, and its refs may be planted): a run holding the "
                           "cache key, or a push, schedule or manual job, runs online")
        repo, sha = self.repo(), resolved.sha
        branch = self.default_branch()
        branch_ref = f"refs/remotes/origin/{branch}"
        tip = refs.commit_of(repo, branch_ref)
        if tip is None or self._symbolic(branch_ref):  # the fetch writes a branch through a symbolic ref
            raise RefError(f"{resolved.text} ({sha[:12]}): cannot tell merged code: no branch {branch} in "
                           f"{self.repo_url}")
        with self.place.lock():
            try:
                repo.git.merge_base("--is-ancestor", sha, tip)
                reached, by = tip, branch
            except git.GitCommandError:
                tag = refs.containing(repo, sha, "refs/tags/v[0-9]*")
                reached, by = (refs.commit_of(repo, tag), tag.removeprefix("refs/tags/")) if tag else (None, None)
        if reached is None:
            raise RefError(f"{resolved.text} ({sha[:12]}) is not reachable from {branch} or a release tag of "
                           f"{self.repo_url}: a run holding the cache key, or a push, schedule or manual job, "
                           "builds merged code only")
        objs.authentic_line(self.place, repo, sha, reached, by)

    def _symbolic(self, name: str) -> bool:
        """Whether the ref `name` is a symbolic one (`symbolic-ref -q` succeeds)."""
        try:
            self.repo().git.symbolic_ref("-q", name)
            return True
        except git.GitCommandError:
            return False

    def default_branch(self) -> str:
        """The origin's default branch: as the job's event names it (trust.default_branch_given),
        else as the origin answers `ls-remote --symref` (in a checkout, its own remote's: the
        checkout's HEAD is whatever it has checked out); offline, as the clone last recorded it."""
        given = trust.default_branch_given()
        if given:
            refs.validate(given)
            return given
        repo = self.repo()
        if not self.checkout:  # this run's fetch set it from the origin's answer (offline: the clone's)
            with contextlib.suppress(git.GitCommandError):
                return repo.git.symbolic_ref("--short", "refs/remotes/origin/HEAD").removeprefix("origin/")
            raise RefError(f"cannot tell the default branch of {self.repo_url}: it names no HEAD "
                           f"(name it in {trust.DEFAULT_BRANCH_ENV})")
        if not self.pr_remote or self.offline:
            raise RefError(f"cannot tell the default branch of the checkout {self.repo_url}'s origin "
                           f"(name it in {trust.DEFAULT_BRANCH_ENV})")
        try:
            head = repo.git.ls_remote("--symref", "--end-of-options", self.pr_remote, "HEAD")
        except git.GitCommandError as e:
            raise RefError(f"cannot tell the default branch of {self.pr_remote}: {git_msg(e)} "
                           f"(name it in {trust.DEFAULT_BRANCH_ENV})") from None
        branch = refs.head_branch(head)
        if not branch:
            raise RefError(f"cannot tell the default branch of {self.pr_remote}: its HEAD names no branch "
                           f"(name it in {trust.DEFAULT_BRANCH_ENV})")
        return branch


class ModuleSource:
    """A target's sources through the Go module proxy (--source module): which version and commit a
    ref names, and the go.mod the proxy serves with it. `env()`: the environment of a go command
    (this machine's Go). Asked of the proxy with an empty module cache of its own: for an exact
    version go answers from the module cache's .info without asking the proxy, and a restored
    cache's .info may name any commit, that of another version, whose sealed build would then be
    taken for this one (review35). `offline`: there is no proxy to ask, so the module cache
    answers; the sealed module and version (builds.MODULE_FIELDS) still keep versions apart. The
    module's code itself is checked by go against go.sum and the checksum database when built."""

    def __init__(self, module: str, offline: bool, env: Callable[[], dict]):
        self.module = module
        self.offline = offline
        self._env = env

    def info(self, text: str, query: str) -> dict:
        """`go list -m -json MODULE@QUERY`: the version, its commit (Origin.Hash) and its go.mod's
        text (GoModText); a RefError naming `text` when the proxy has no such version."""
        with tempfile.TemporaryDirectory(prefix="refbench-mod-") as tmp:
            scratch = Path(tmp) / "scratch"
            scratch.mkdir()
            env = self._env()
            if not self.offline:
                env["GOMODCACHE"] = str(Path(tmp) / "modcache")
                env["GOFLAGS"] += " -modcacherw"  # the go command's read-only files would outlive the directory
            init = subprocess.run(absolute(["go", "mod", "init", "refbench.local/build"]), cwd=scratch,
                                  capture_output=True, text=True, env=env)
            proc = init if init.returncode != 0 else subprocess.run(
                absolute(["go", "list", "-m", "-json", f"{self.module}@{query}"]), cwd=scratch, capture_output=True,
                text=True, env=env)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["unknown error"])[-1].strip()
                raise RefError(f"ref not found: {text!r} in module {self.module}: {last}")
            info = json.loads(proc.stdout)
            try:
                info["GoModText"] = Path(info["GoMod"]).read_text(errors="replace") if info.get("GoMod") else None
            except OSError:
                info["GoModText"] = None
        return info

    def resolve(self, ref: refs.Ref) -> tuple[refs.ResolvedRef, tc.GoMod | None]:
        """The version and commit `ref` names in the module proxy, and the go.mod served with it.
        A run holding the key takes a commit by its whole id only (refs.refuse_prefix)."""
        if ref.kind == "pr":
            raise RefError(f"PR #{ref.pr}: pull requests are not served by the Go module proxy; "
                           "use --source git")
        if ref.kind == "commit" and trust.key_given() and not refs.is_whole_commit(ref.text):
            refs.refuse_prefix(ref.text)
        query = {"latest_release": "latest", "head": "HEAD"}.get(ref.kind, ref.text)
        info = self.info(ref.text, query)
        version = info["Version"]
        sha = (info.get("Origin") or {}).get("Hash")
        if not sha:
            m = re.search(r"-([0-9a-f]{12})$", version)  # pseudo-version: the commit prefix
            sha = m.group(1) if m else version
        plain = version.removesuffix("+incompatible")  # both tests on it: v3.0.0-2026…-abcdef+incompatible is any commit (review35g G5)
        if trust.merged_only() and (not refs.semver_key(plain) or re.search(r"\d{14}-[0-9a-f]{12}$", plain)):
            # no clone to walk: a release version (a tag of the module's) is the only merged code the proxy names
            raise RefError(f"{ref.text} ({version}) is no release version of {self.module}: a run holding the cache "
                           "key, or a push, schedule or manual job, builds merged code only")
        display = f"latest_release ({version})" if ref.kind == "latest_release" else (
            ref.text if ref.text == version else f"{ref.text} ({version})")
        return refs.ResolvedRef(ref.text, ref.kind, sha, display, version=version), gomod_of(info)

    def gomod(self, text: str, version: str) -> tc.GoMod | None:
        """The go.mod of the module at `version`, as the proxy serves it (None without one)."""
        return gomod_of(self.info(text, version))


def gomod_of(info: dict) -> tc.GoMod | None:
    """A module's go.mod as the module proxy served it (ModuleSource.info's GoModText)."""
    return tc.parse_gomod(info["GoModText"]) if info.get("GoModText") else None


def absolute(argv: list[str]) -> list[str]:
    """`argv` with a leading bare `go` or `git` made the absolute path refbench.tools finds (never a
    cache directory's); FileNotFoundError when there is none."""
    if argv and argv[0] in ("go", "git"):
        found = tools.go() if argv[0] == "go" else tools.which("git")
        if not found:
            raise FileNotFoundError(argv[0])
        return [found, *argv[1:]]
    return argv
