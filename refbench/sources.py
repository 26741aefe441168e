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
import stat
import subprocess
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping

import git

from . import heldenv, paths, refs, toolchain as tc, tools, trust
from .errors import BuildError, RefbenchError, RefError

log = logging.getLogger(__name__)
#: given to every git refbench runs: no hook runs, no fsmonitor command starts, whatever a clone holds;
#: no commit-graph or multi-pack-index is read or written (git takes a commit's parents from a
#: commit-graph, which a restored cache may have patched to route history through a planted commit)
SAFE_GIT = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "core.commitGraph=false",
            "core.multiPackIndex=false", "gc.writeCommitGraph=false", "fetch.writeCommitGraph=false")
#: the refs a clone keeps from one run to the next: the origin's branches and tags (pruned on every
#: fetch). Any other ref in a cached clone is deleted before a fetch, PR and checkout heads too (a
#: run fetches those by name before it uses them: a planted `refs/refbench/pull/999` counted as a
#: fetched PR reaching a planted commit, review35f F5), and so is every symbolic ref wherever it is:
#: `fetch --prune` never prunes one, so a planted `refs/tags/v99.0.0 -> refs/refbench/evil` would
#: survive as a release tag (the fifth reading's HIGH); one git's listing skips is a clone fault
KEPT_REFS = ("refs/remotes/origin/", "refs/tags/")
CHECKOUT_HEAD = "refs/refbench/checkout-head"  # a checkout's HEAD, fetched anew by every fetch in checkout mode


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


_FILE, _DIR, _OTHER = "a file", "a directory", "a link or special file"
#: each entry a bare clone refbench made may hold where git puts it (git init, fetch, pack-refs), and
#: its kind. One of another kind is a clone fault: a `config` directory crashed own_clone, an
#: `objects` or `refs` file made git and GitPython take the clone for no repository, a `FETCH_HEAD`
#: directory failed every fetch, in every run until the cache was removed by hand. Each nested
#: entry's parent is here too, a directory (_kind_faults looks below it). Deeper entries (a ref, a
#: pack) are named by the origin: git failing on one is the fetch's fault (Clone.fetch)
CLONE_KINDS: Mapping[str, str] = MappingProxyType({
    **dict.fromkeys(("HEAD", "config", "description", "packed-refs", "FETCH_HEAD", "ORIG_HEAD", "shallow",
                     "info/exclude", "info/refs", "objects/info/packs"), _FILE),
    **dict.fromkeys(("objects", "refs", "info", "logs", "branches", "objects/info", "objects/pack", "refs/heads",
                     "refs/tags", "refs/remotes", "refs/remotes/origin", "refs/refbench"), _DIR),
})
#: the entries git cannot do without: a directory lacking one is no repository to git (a missing
#: HEAD is not among them: Clone.repo makes the clone anew without one)
CLONE_NEEDS = frozenset({"objects", "refs"})
#: what the top level of a bare clone refbench made holds; anything else was put there by someone else
CLONE_ENTRIES = frozenset(name for name in CLONE_KINDS if "/" not in name)
#: what refbench's clones hold under info/ and objects/info/: no attributes, grafts, alternates, and
#: no commit-graph or multi-pack-index (SAFE_GIT writes none; a planted one rewrites history)
ALLOWED_INFO = {rel: frozenset(name.rpartition("/")[2] for name in CLONE_KINDS if name.rpartition("/")[0] == rel)
                for rel in ("info", "objects/info")}
#: the environment of every git command on a cached clone: the clone named outright (no search
#: upwards into the checkout a builds directory sits in), and no replace refs (refs/replace/*
#: would swap one object for another under its id)
def clone_git_env(d: Path) -> dict:
    return {"GIT_DIR": str(d), "GIT_NO_REPLACE_OBJECTS": "1", "GIT_CEILING_DIRECTORIES": str(d.parent)}


def gitpython_env(d: Path) -> dict:
    """What a GitPython Repo on the clone at `d` adds to the copy of os.environ it runs git with:
    clone_git_env, and every name refbench holds emptied (heldenv.blanked) but those a build's git
    is given anyway (tools.child_env: the proxies and certificates a fetch goes through). GitPython
    starts git from os.environ, where heldenv put them back, beside a pull request's build (the
    re-reading's N3); so its git gets what refbench's own git commands get, and no more."""
    given = tools.child_env()
    return {**{k: v for k, v in heldenv.blanked().items() if k not in given}, **clone_git_env(d)}


def clone_faults(d: Path, allowed_info: Mapping[str, frozenset[str]] = ALLOWED_INFO) -> list[str]:
    """What makes the bare clone at `d` something refbench did not make: a symbolic link or special
    file anywhere in it, an entry git reads to go elsewhere or run something (commondir, gitdir,
    worktrees, hooks, config.worktree, info/attributes, info/grafts, objects/info/alternates, ...),
    an entry of another kind than git makes it or one git needs missing (_kind_faults), or anything
    else refbench never writes. Empty: only what git init and fetch make. A restored
    cache may hold any of them (the threat model is refbench.trust's): a `commondir` naming the
    user's checkout made refbench's `fetch --prune` run there, one naming a config of its own ran
    an `ext::` remote's command. Read with lstat only: nothing in the clone is followed."""
    names, fault = _clone_listing(d)
    if fault:
        return [fault]
    faults = [f"{name}: not something refbench's clones hold" for name in names if name not in CLONE_ENTRIES]
    faults += _kind_faults(d)
    if not _head_as_made(d / "HEAD"):
        faults.append("HEAD: not the branch `git init` names (git and GitPython refuse the clone)")
    faults += _symbolic_refs(d)
    faults += _info_faults(d, allowed_info)
    # an unlistable directory is a fault, not skipped: git opens a loose ref in it by path
    # (`rev-parse refs/tags/NAME`) while every listing, and os.walk's default, passes it over
    walk = os.walk(d, onerror=lambda e: faults.append(f"{os.path.relpath(e.filename, d)}: cannot be listed ({e.strerror})"))
    for top, dirs, files in walk:
        for name in dirs + files:
            rel = os.path.relpath(os.path.join(top, name), d)
            try:
                mode = os.lstat(os.path.join(top, name)).st_mode
            except OSError as e:  # listed (r), not searchable (x): a restored 0600 directory
                faults.append(_unsearchable(d, rel, e))
                continue
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                faults.append(f"{rel}: a link or special file")
            elif stat.S_ISDIR(mode) and mode & 0o700 != 0o700:
                faults.append(f"{rel}: a directory of mode {oct(stat.S_IMODE(mode))}, which git never makes")
            elif stat.S_ISREG(mode) and not mode & stat.S_IRUSR:
                faults.append(f"{rel}: a file its owner cannot read")
    return list(dict.fromkeys(faults))  # one line each: an unsearchable directory is met by several looks


def _clone_listing(d: Path) -> tuple[list[str], str | None]:
    """The names in the clone directory `d`, sorted, or the fault that keeps it from being checked:
    no directory, one that cannot be listed, or one of a mode git never makes. A restored clone of
    mode 000 (tar sets a directory's mode last) raised PermissionError here for a runner that is
    not root, and every run crashed (exit 3) until the cache was removed by hand. Such a clone is
    removed whole (_remove_clone), so nothing more is looked for in it."""
    try:
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode):
            return [], f"{d} is not a directory"
        names = sorted(os.listdir(d))
    except OSError as e:
        return [], f"{d}: cannot be listed ({e.strerror or e})"
    if st.st_mode & 0o700 != 0o700:  # listed, yet its entries may not be looked at: a 0600 one
        return [], f"{d}: a directory of mode {oct(stat.S_IMODE(st.st_mode))}, which git never makes"
    return names, None


def _info_faults(d: Path, allowed_info: Mapping[str, frozenset[str]]) -> list[str]:
    """Each entry of the clone's info directories (info/, objects/info/) that refbench's clones do not
    hold there (`allowed_info`: attributes, grafts, alternates, a commit-graph are not). One that
    cannot be listed is a fault too, naming it: what it holds cannot be known, and git reads it
    all the same (a restored mode 000 `info` raised PermissionError here, for a runner that is
    not root, in every run)."""
    faults = []
    for rel, allowed in allowed_info.items():
        try:
            kind = _kind(d / rel)
        except OSError as e:
            faults.append(_unsearchable(d, rel, e))
            continue
        if kind != _DIR:
            continue
        try:
            names = sorted(os.listdir(d / rel))
        except OSError as e:
            faults.append(f"{rel}: cannot be listed ({e.strerror or e})")
            continue
        faults += [f"{rel}/{name}: not something refbench's clones hold" for name in names if name not in allowed]
    return faults


def _kind_faults(d: Path) -> list[str]:
    """Each entry of CLONE_KINDS in the clone at `d` that is of another kind, and each of CLONE_NEEDS
    that is missing, named with the kind refbench's clones hold there. An entry is looked at only
    below a directory (parents first: sorted), so no link on its way is followed; a link or special
    file itself is left to clone_faults' walk, which names it."""
    found: dict[str, str | None] = {}
    faults = []
    for rel in sorted(CLONE_KINDS):
        parent, held = rel.rpartition("/")[0], CLONE_KINDS[rel]
        try:
            found[rel] = kind = _kind(d / rel) if not parent or found[parent] == _DIR else None
        except OSError as e:  # not absent, yet not to be looked at: not "missing" either
            found[rel] = None
            faults.append(_unsearchable(d, rel, e))
            continue
        if kind is None and rel in CLONE_NEEDS:
            faults.append(f"{rel}: missing, where refbench's clones hold {held} "
                          "(git takes the clone for no repository)")
        elif kind in (_FILE, _DIR) and kind != held:
            faults.append(f"{rel}: {kind}, where refbench's clones hold {held}")
    return faults


def _kind(path: Path) -> str | None:
    """What `path` is, read with lstat: _FILE, _DIR, _OTHER, or None when there is nothing. Any
    other OSError is raised: an entry in a directory that may not be searched (a restored mode 000
    `objects`, for a runner that is not root) is no missing one, and its caller names it."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    return _FILE if stat.S_ISREG(mode) else _DIR if stat.S_ISDIR(mode) else _OTHER


def _unsearchable(d: Path, rel: str, e: OSError) -> str:
    """The fault of the clone's entry `rel` that lstat refused (`e`): the fault of the directory it
    is in (the clone itself for a top-level one), whose entries cannot be looked at. Named so once
    for all its entries (clone_faults keeps one line of each)."""
    parent = rel.rpartition("/")[0]
    return f"{parent or d}: its entries cannot be looked at ({e.strerror or e})"


#: what `git init` writes in HEAD, and all a clone of refbench's holds there (it never checks out)
_INIT_HEAD = re.compile(rb"ref: refs/heads/[A-Za-z0-9._/-]{1,200}\n?")


def _head_as_made(head: Path) -> bool:
    """Whether the clone's HEAD is absent (git init makes it) or names a branch, as git init writes
    it. Any other HEAD (a restored `garbage`) makes git and GitPython refuse the whole directory, so
    every run crashed on it instead of cloning anew (review35e LOW). Read through no link, no FIFO."""
    if not os.path.lexists(head):
        return True
    data = paths.read_regular(head, limit=512)
    return data is not None and bool(_INIT_HEAD.fullmatch(data))


#: the one symbolic ref a clone of refbench's holds: the origin's HEAD, naming one of its branches
ORIGIN_HEAD = "refs/remotes/origin/HEAD"
_ORIGIN_HEAD_TARGET = re.compile(rb"ref: refs/remotes/origin/[A-Za-z0-9._/-]{1,200}\n?")


def _symbolic_refs(d: Path) -> list[str]:
    """Every loose ref under refs/ that is symbolic (a file reading `ref: ...`), but the origin's HEAD
    naming an origin branch. Read from the files, not git's listing: for-each-ref skips a symbolic
    ref whose target is missing, so a restored `refs/tags/v99.0.0 -> refs/remotes/origin/feature`
    without its target survived the sweep, and the fetch then made it a release tag holding an
    unmerged branch (review35f F1). Packed refs are never symbolic."""
    found = []
    for top, _, files in os.walk(d / "refs"):
        for name in files:
            path = Path(top) / name
            rel = path.relative_to(d).as_posix()
            data = paths.read_regular(path, limit=4096)
            if data is None or not data.startswith(b"ref:"):
                continue
            if rel == ORIGIN_HEAD and _ORIGIN_HEAD_TARGET.fullmatch(data):
                continue
            found.append(f"{rel}: a symbolic ref ({data[:80].decode(errors='replace').strip()}), which refbench never makes")
    return found


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


def _drop_scratch(scratch: Path, cache: Path) -> None:
    """A verified scratch repository goes with its Clone; at exit, a cache changed since (a link
    planted where it was) leaves it in place rather than fail the exit."""
    with contextlib.suppress(paths.CacheLinkError):
        paths.remove_tree(scratch, cache, ignore_errors=True)


def hashes_to(sha: str, kind: str, body: bytes) -> bool:
    """Whether an object of type `kind` holding `body` has the id `sha` (SHA-1, or SHA-256 for a
    64-hex id): what git computes and, where refbench reads an object, does not always check."""
    algo = hashlib.sha1 if len(sha) == 40 else hashlib.sha256
    return algo(kind.encode() + b" %d\0" % len(body) + body).hexdigest() == sha


def commit_parents(body: bytes) -> list[str] | None:
    """The parents git reads from a commit's content, lower case: only the run of `parent` lines
    right after the `tree` line (parse_commit_buffer). git ignores a `parent` line further down
    (after `committer`), and hash-object and fsck accept one, so counting it called every line
    through such a merged commit forged, for good (review35h H3). None: no `tree` line first."""
    lines = body.split(b"\n\n", 1)[0].split(b"\n")
    if not lines[0].startswith(b"tree "):
        return None
    parents = []
    for line in lines[1:]:
        if not line.startswith(b"parent "):
            break
        parents.append(line[7:].decode(errors="replace").lower())
    return parents


class _FetchFailed(Exception):
    """git could not sweep or fetch into the clone: `why` (git's line), and `fault`, what in the
    clone itself made it fail when that is known (the sweep reaches no network; a lock git left)."""

    def __init__(self, why: str, fault: str | None):
        super().__init__(why)
        self.why, self.fault = why, fault


class CloneFault(RefError):
    """The cached clone holds an object that is not what its id says (a commit replaced under its
    id, a history routed through a planted commit): Clone.resolve clones anew once, and a second one
    is this error's one line."""


class Clone:
    """The cached bare clone of one origin under `root` (builds/<target>/), and the commits
    verified out of it. `offline`: never fetch. `pr_remote`: where PR refs and unknown commits
    come from when the origin is a local checkout (its remote). `checkout`: the origin is a working
    checkout (not a bare mirror): also take its remote-tracking branches and whatever it has
    checked out (a detached PR merge commit in CI). `git_options` and `allowed_info`: what its git
    commands run with and what its info directories may hold (SAFE_GIT, ALLOWED_INFO; a test's
    looser ones show what the checks after them still catch)."""

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
        `index-pack --strict` into a fresh bare repository, shallow at `sha`): a blob replaced in
        the clone under its old id, a tree or commit that is not what its id says, or an object
        missing fails here, and the clone is cloned anew once. Everything built, and the tree and
        go.mod a build is keyed by, come from this repository, never from the clone itself.
        Made once per commit and run, removed when this Clone (and the Builder holding it) goes."""
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
        scratch = Path(tempfile.mkdtemp(prefix=f".verified-{sha[:10]}-", dir=paths.make_dirs(self.root, self.cache)))
        weakref.finalize(self, _drop_scratch, scratch, self.cache)
        git_bin, env = tools.git(), tools.child_env()
        subprocess.run([git_bin, *safe_git_args(), "init", "--quiet", "--bare", str(scratch)], check=True,
                       capture_output=True, env=env)
        paths.remove_tree(scratch / "hooks", self.cache, ignore_errors=True)
        paths.replace_file(scratch / "shallow", sha + "\n", within=self.cache)  # its parents are not needed, nor fetched
        src = {**env, **clone_git_env(self.clone_dir)}
        with _locked(self.clone_dir.with_suffix(".lock"), within=self.cache):
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
        repo.git.update_environment(**gitpython_env(scratch))
        if repo.git.rev_parse("--verify", "--quiet", f"{sha}^{{commit}}") != sha:
            raise BuildError(f"the cached clone {self.clone_dir}: {sha[:12]} is not a commit", sha=None)
        return repo

    def fetch(self) -> None:
        """Bring branches and tags up to date (once per run): the clone's branches and tags become
        the origin's, pruned, so none a cache planted (a tag v99.0.0 that latest_release would
        pick) survives, and refs of any other kind (refs/heads/*, refs/replace/*) are deleted.
        Then every ref's history must be whole (missing_objects) and every ref's own object what
        its id says (tip_fault): a fetch checks only the refs it moves, so a restored clone whose
        tips equal the origin's but whose packs lack an older commit kept lacking it, and a prefix
        of that commit named another one. A clone git cannot sweep or fetch into while the origin
        answers (a stale ref lock a killed fetch left, a packed-refs line git cannot parse: review35g
        G3), or with such a hole, is cloned anew, once; then one line."""
        if self._fetched or self.offline:
            return
        fault = self._fetch_fault()
        if fault:
            log.warning("the cached clone %s %s: cloning %s anew", self.clone_dir, fault, self.repo_url)
            self._drop_clone()
            fault = self._fetch_fault()
            if fault:
                raise RefError(f"cannot fetch {self.repo_url}: the clone {self.clone_dir}, made anew, still {fault}")
        self._fetched = True

    def _fetch_fault(self) -> str | None:
        """Sweep and fetch (_fetch_refs); what is wrong with the clone after it, or None. A fetch that
        fails is the clone's fault only when the clone shows one (a stale git lock, a ref's object
        not what its id says, a hole); else a RefError, the clone left in place: an origin that does
        not answer would fail a clone made anew too, and cost the next run a whole clone."""
        try:
            self._fetch_refs()
        except _FetchFailed as e:
            local = e.fault or self.tip_fault() or self.missing_objects()
            if not local:
                raise RefError(f"cannot fetch {self.repo_url}: {e.why}") from None
            return f"cannot be swept or fetched into: {e.why} ({local})"
        missing = self.missing_objects()
        if missing:
            return f"lacks objects its refs need ({missing})"
        wrong = self.tip_fault()
        return f"holds an object that is not what its id says ({wrong})" if wrong else None

    def _stale_locks(self) -> str | None:
        """git's lock files in the clone (`*.lock`), named, or None. git leaves one when it is killed
        mid-write (a cancelled job's fetch), then refuses to write that ref again: every run failed
        "cannot fetch" (review35g G3). refbench's own lock sits beside the clone (`<clone>.lock`) and
        every git that writes in the clone runs under it, so one found while it is held is stale:
        call this holding it."""
        found = sorted(os.path.relpath(os.path.join(top, name), self.clone_dir)
                       for top, _, files in os.walk(self.clone_dir) for name in files if name.endswith(".lock"))
        return f"a lock git left: {', '.join(found[:3])}" if found else None

    def missing_objects(self) -> str | None:
        """Why the clone's refs are not whole (the first object git cannot read, walking every
        object every ref reaches), or None. `rev-list --objects --all --missing=error`: 0.02 s on
        s5cmd's clone (604 commits), 0.36 s on kubo's (16,360 commits, 385 branches and tags)."""
        with _locked(self.clone_dir.with_suffix(".lock"), within=self.cache):
            proc = subprocess.run([tools.git(), *safe_git_args(), "rev-list", "--objects", "--all", "--missing=error"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  env={**tools.child_env(), **clone_git_env(self.clone_dir)})
        if proc.returncode == 0:
            return None
        return ((proc.stderr.decode(errors="replace").strip().splitlines() or ["git rev-list failed"])[-1]
                .removeprefix("fatal: "))

    def commits_between(self, good: str, bad: str) -> list[tuple[str, str]]:
        """(sha, subject) of the commits after GOOD up to and including BAD, oldest first (bisect's
        line), each listed commit read back and hashed: its content must hash to its id and name
        the parents git walked. BAD is a commit trusted by its id, so a line whose every commit
        names its own parents is the line the origin's history holds; parents taken from anything
        else (a planted commit-graph, shallow file or pack index) fail here (review35c)."""
        repo = self.repo()
        try:
            if not repo.is_ancestor(good, bad):
                raise RefError(f"GOOD ({good[:10]}) is not an ancestor of BAD ({bad[:10]})")
            rows = self._line(repo, good, bad)
        except git.GitCommandError as e:
            raise RefError(f"cannot list the commits between GOOD and BAD: {git_msg(e)}") from None
        wrong = self._line_fault(rows, good, bad)
        if wrong:
            raise RefError(f"the clone {self.clone_dir} does not hold the history between GOOD and BAD as the "
                           f"commits' ids say ({wrong}): remove it to fetch it anew")
        return [(sha, subject) for sha, _, subject in rows]

    def _line_fault(self, rows: list[tuple[str, list[str], str]], since: str, until: str) -> str | None:
        """Why `rows` (Clone._line(since, until), oldest first) is not the whole line from `since` to
        `until`, or None: it must end at `until`, its oldest commit must name `since` as a parent, and
        every commit must hash to its id and name the parents git walked. An empty line passes only
        when since == until: git lists it from the same unverified parents, so two commits replaced
        under their ids can empty it while merge-base still says 'reached' (review35g G1)."""
        if since == until:
            return None
        if not rows or rows[-1][0] != until or since not in rows[0][1]:
            return f"the line from {since[:12]} to {until[:12]} is not whole ({len(rows)} commits listed)"
        return self._unauthentic([(sha, parents) for sha, parents, _ in rows])

    def _unauthentic(self, commits: list[tuple[str, list[str]]]) -> str | None:
        """The first commit whose object in the clone does not hash to its id or does not name
        `parents` as its parents (as git reads them: commit_parents), or None (one `cat-file --batch`
        for all of them)."""
        for (sha, parents), obj in zip(commits, self._objects([sha for sha, _ in commits])):
            if obj is None or obj[0] != "commit":
                return f"{sha[:12]}: not a commit here"
            if not hashes_to(sha, *obj):
                return f"{sha[:12]}: its content hashes to another id"
            named = commit_parents(obj[1])
            if named != parents:
                return (f"{sha[:12]}: git walked parents {[p[:12] for p in parents]}, the commit names "
                        f"{[p[:12] for p in named or []]}")
        return None

    def tip_fault(self, *patterns: str) -> str | None:
        """Why an object a ref of the clone names (all refs, or those matching `patterns`) is not what
        its id says, or None (_named_fault). A fetch checks nothing when a ref's id is unchanged, and
        neither does missing_objects' walk, while every later rev-parse re-hashes the tip and finds
        no commit: a release tag's object (or a branch's tip) replaced under its id was "ref not
        found" in every run, and the clone was never made anew (review35h H1)."""
        try:
            listing = self.repo().git.for_each_ref("--format=%(objectname) %(refname)", *patterns)
        except git.GitCommandError as e:
            return f"its refs cannot be listed ({git_msg(e)})"
        named: dict[str, str] = {}  # object id -> the ref that names it, for the one line
        for row in listing.split("\n"):
            sha, _, ref = row.partition(" ")
            if sha:
                named.setdefault(sha, ref)
        return self._named_fault(named)

    def _named_fault(self, named: dict[str, str]) -> str | None:
        """The first of the objects `named` (id -> what names it), or of what an annotated tag among
        them names down to a commit, that is missing or does not hash to its id; None when all do.
        One `cat-file --batch` a level of tags; the commits below a tip are the line's to check
        (_line_fault)."""
        named, todo = dict(named), sorted(named)
        while todo:
            below = []
            for sha, obj in zip(todo, self._objects(todo)):
                if obj is None:
                    return f"{named[sha]}: no object {sha[:12]} here"
                if not hashes_to(sha, *obj):
                    return f"{named[sha]}: the object {sha[:12]} hashes to another id"
                target = re.match(rb"object ([0-9a-f]{40}|[0-9a-f]{64})\n", obj[1]) if obj[0] == "tag" else None
                if target and target.group(1).decode() not in named:
                    named[target.group(1).decode()] = named[sha]
                    below.append(target.group(1).decode())
            todo = below
        return None

    def _objects(self, shas: list[str]) -> list[tuple[str, bytes] | None]:
        """(type, content) of the object stored under each of `shas` in the clone, None where there
        is none: one `cat-file --batch`, which re-hashes nothing (hashes_to does)."""
        if not shas:
            return []
        with _locked(self.clone_dir.with_suffix(".lock"), within=self.cache):
            proc = subprocess.run([tools.git(), *safe_git_args(), "cat-file", "--batch"],
                                  input="".join(sha + "\n" for sha in shas).encode(), capture_output=True,
                                  env={**tools.child_env(), **clone_git_env(self.clone_dir)})
        data, at, found = proc.stdout, 0, []
        for _ in shas:
            end = data.find(b"\n", at)
            header = data[at:end].split() if end >= 0 else []
            if len(header) != 3 or not header[2].isdigit():  # `<id> missing`, or git died
                found.append(None)
                at = end + 1 if end >= 0 else len(data)
                continue
            size = int(header[2])
            found.append((header[1].decode(errors="replace"), data[end + 1:end + 1 + size]))
            at = end + 2 + size
        return found

    def _fetch_refs(self) -> None:
        """The sweep (_sweep_refs), then the fetch; a _FetchFailed when git fails at either. Whether
        git left a lock in the clone is looked at while refbench's lock is held: another process's
        git may hold one as soon as it is released."""
        r = self.repo()
        with _locked(self.clone_dir.with_suffix(".lock"), within=self.cache):
            try:
                self._sweep_refs(r)
            except (git.GitCommandError, OSError) as e:  # no network yet: the clone's ref store is the fault
                why = git_msg(e) if isinstance(e, git.GitCommandError) else f"{e.filename}: {e.strerror}"
                raise _FetchFailed(why, "its refs cannot be swept") from None
            tags = "+refs/tags/*:refs/tags/*"
            try:
                if self.checkout:  # its remote-tracking branches first; its own branches win
                    r.git.fetch("--quiet", "--force", "--prune", "--update-shallow", "origin",
                                "+refs/remotes/origin/*:refs/remotes/origin/*", tags, f"+HEAD:{CHECKOUT_HEAD}")
                # --update-shallow: an origin that is itself a shallow clone (CI checkouts) would
                # otherwise have its tags and branches silently rejected. A checkout's branches
                # come on top of its remote-tracking ones, just pruned to the origin's: not again
                r.git.fetch("--quiet", "--force", "--update-shallow", "origin",
                            *(() if self.checkout else ("--prune",)),
                            "+refs/heads/*:refs/remotes/origin/*", *(() if self.checkout else (tags,)))
            except git.GitCommandError as e:
                raise _FetchFailed(git_msg(e), self._stale_locks()) from None
            with contextlib.suppress(git.GitCommandError):
                branch = refs.head_branch(r.git.ls_remote("--symref", "origin", "HEAD"))
                if branch:
                    r.git.symbolic_ref("refs/remotes/origin/HEAD", f"refs/remotes/origin/{branch}")

    def _sweep_refs(self, r: git.Repo) -> None:
        """Before a fetch: every ref but the kept ones deleted, the HEAD files unlinked, and a
        `shallow` file the origin did not write dropped (_drop_planted_shallow)."""
        stray = [n for n, symref in refs.symbolic_listing(r, "%(refname)") if symref or not n.startswith(KEPT_REFS)]
        for name in stray:
            r.git.update_ref("--no-deref", "-d", name)
        # the origin's HEAD and the checkout's even when what they name is missing (a listing
        # skips them), so the fetch never writes a branch or a tag through one (review35f
        # F1, F7); the origin's is set again from its answer below, the checkout's fetched
        for name in (ORIGIN_HEAD, CHECKOUT_HEAD):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.clone_dir / name)
        self._drop_planted_shallow()

    def _drop_planted_shallow(self) -> None:
        """A planted shallow file hides history: a commit it names is walked with no parents, so an
        older commit is no ancestor (missing_objects, merge-base, bisect's line). Unlinked, unless
        each commit it names is one the checkout (in checkout mode) is itself shallow at: a CI
        checkout is a shallow clone, and `--update-shallow` writes its boundary back. Kept in
        checkout mode before, a planted one naming the default branch's tip refused every older
        merged commit, for good (review35h H2)."""
        planted = self.clone_dir / "shallow"
        if not os.path.lexists(planted):
            return
        if self.checkout:
            data = paths.read_regular(planted, limit=1 << 24)
            if data is not None and set(data.decode(errors="replace").split()) <= self._checkouts_shallow():
                return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(planted)

    def _checkouts_shallow(self) -> set[str]:
        """The commits the checkout (the origin, in checkout mode) is shallow at: its own `shallow`
        file's lines, as git names that file (`rev-parse --git-path shallow`); none when it has none."""
        p = subprocess.run([tools.git(), *safe_git_args(), "-C", self.repo_url, "rev-parse", "--path-format=absolute",
                            "--git-path", "shallow"], capture_output=True, text=True, env=tools.child_env())
        data = paths.read_regular(p.stdout.strip(), limit=1 << 24) if p.returncode == 0 and p.stdout.strip() else None
        return set(data.decode(errors="replace").split()) if data else set()

    def fetch_pr(self, number: int) -> None:
        """Fetch PR `number`'s head into refs/refbench/pull/N. A fetch that fails while the remote
        answers, or a head whose object is not what its id says (tip_fault: one an earlier run
        fetched, rewritten, is fetched no more), is a CloneFault: cloned anew once (review35h H1)."""
        if self.offline:
            return
        r, remote, name = self.repo(), self.pr_remote or "origin", f"refs/refbench/pull/{number}"
        failed = locks = None
        with _locked(self.clone_dir.with_suffix(".lock"), within=self.cache):
            try:
                r.git.fetch("--quiet", "--force", "--update-shallow", remote, f"+refs/pull/{number}/head:{name}")
            except git.GitCommandError as e:
                failed, locks = git_msg(e), self._stale_locks()
        if failed is not None:
            if "couldn't find remote ref" in failed or "not our ref" in failed:
                raise RefError(f"PR #{number} not found in {self.pr_remote or self.repo_url} "
                               f"(no refs/pull/{number}/head)")
            local = locks or self._pr_head_fault(remote, number)
            if local:
                raise CloneFault(f"the cached clone {self.clone_dir} cannot take PR #{number}'s head "
                                 f"({failed}: {local})")
            raise RefError(f"cannot fetch PR #{number} from {self.pr_remote or self.repo_url}: {failed}")
        wrong = self.tip_fault(name)
        if wrong:
            raise CloneFault(f"the cached clone {self.clone_dir} holds an object that is not what its id says "
                             f"({wrong})")

    def _pr_head_fault(self, remote: str, number: int) -> str | None:
        """Why the object the clone holds under PR `number`'s head id (as `remote` answers it) is not
        what its id says, or None: git's fetch re-hashes a tip it already has and fails, for good."""
        with contextlib.suppress(git.GitCommandError):
            head = self.repo().git.ls_remote("--end-of-options", remote, f"refs/pull/{number}/head").split()[:1]
            if head and self._holds_object(head[0]):
                return self._named_fault({head[0]: f"PR #{number}'s head"})
        return None

    def fetch_commit(self, sha: str) -> None:
        """Fetch one commit by its whole id, from the origin or else the PR remote; under the clone's
        lock, as every git that writes in the clone (_stale_locks counts on it)."""
        if self.offline:
            return
        r, lock = self.repo(), self.clone_dir.with_suffix(".lock")  # opened first: repo() takes the lock itself
        for remote in ("origin",) + ((self.pr_remote,) if self.pr_remote else ()):
            with contextlib.suppress(git.GitCommandError), _locked(lock, within=self.cache):
                r.git.fetch("--quiet", "--update-shallow", remote, sha)
                return

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
        with _locked(self.clone_dir.with_suffix(".lock"), within=self.cache):
            _remove_clone(self.clone_dir, self.cache)
        self._repo, self._fetched = None, False

    def _holds_object(self, sha: str) -> bool:
        """Whether the clone has an object stored under `sha` (`cat-file -e`, which re-hashes nothing)."""
        with _locked(self.clone_dir.with_suffix(".lock"), within=self.cache):
            return subprocess.run([tools.git(), *safe_git_args(), "cat-file", "-e", sha], capture_output=True,
                                  env={**tools.child_env(), **clone_git_env(self.clone_dir)}).returncode == 0

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
                if self._holds_object(text):  # there, yet no commit: its content hashes to another id
                    raise CloneFault(f"the cached clone {self.clone_dir} holds an object under {text[:12]} that "
                                     "is not the commit its id says") from None
                raise
        if by:  # a prefix: the ref that reaches it (refs.resolve) must truly
            tip = refs.commit_of(self.repo(), by)
            if tip is None:
                raise CloneFault(f"the cached clone {self.clone_dir}: {by} names no commit here")
            self._authentic_line(resolved.sha, tip, by)
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
        (_unauthentic): an ancestor replaced under its id to name a PR's commit as a parent makes
        that commit look merged (review35f F2), and is a CloneFault instead."""
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
        with _locked(self.clone_dir.with_suffix(".lock"), within=self.cache):
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
        self._authentic_line(sha, reached, by)

    def _authentic_line(self, sha: str, reached: str, by: str) -> None:
        """A CloneFault unless every commit from `sha` up to `reached` (the commit of the ref `by`)
        hashes to its id and names the parents git walked: git's reachability (merge-base,
        for-each-ref --contains) reads parents without re-hashing a commit (review35f F2).
        0.01-0.65 s on kubo's 15,943 commits (one commit, or 9,405 from v0.4.0 to master)."""
        wrong = self._line_fault(self._line(self.repo(), sha, reached), sha, reached)
        if wrong:
            raise CloneFault(f"the cached clone {self.clone_dir} does not hold the history from {sha[:12]} to {by} "
                             f"as the commits' ids say ({wrong})")

    def _symbolic(self, name: str) -> bool:
        """Whether the ref `name` is a symbolic one (`symbolic-ref -q` succeeds)."""
        try:
            self.repo().git.symbolic_ref("-q", name)
            return True
        except git.GitCommandError:
            return False

    @staticmethod
    def _line(repo: git.Repo, since: str, until: str) -> list[tuple[str, list[str], str]]:
        """(commit, the parents git walked, subject) of every commit after `since` up to `until`
        that descends from `since` (`rev-list --ancestry-path`), oldest first. Rows split at
        newlines only: a subject may hold U+2028, where str.splitlines would break a row."""
        out = repo.git.rev_list("--ancestry-path", "--topo-order", "--reverse", "--format=%H %P%x09%s",
                                f"{since}..{until}")
        return [(ids.split()[0], ids.split()[1:], subject) for ids, _, subject in
                (row.partition("\t") for row in out.split("\n") if row and not row.startswith("commit "))]

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



def git_msg(e: git.GitCommandError) -> str:
    text = (e.stderr or str(e)).strip().replace("stderr:", "").strip().strip("'").strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    return (fatal[0] if fatal else lines[-1] if lines else "git failed").removeprefix("fatal: ")
