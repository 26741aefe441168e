"""Fetching into a cached clone: the sweep before each fetch (every ref refbench does not keep
deleted, the HEAD files unlinked, a planted `shallow` file dropped), the fetch of the origin's
branches and tags, pruned, a PR's head and a commit by its id; and what in the clone made a fetch
fail (a lock git left, an object not what its id says, a hole), which sources.Clone answers by
cloning anew once. The threat model is docs/threat-model.md's.

Functions of one clone (a clone_git.ClonePlace, and its opened git.Repo); whether to fetch at all
(offline) and what a fault costs are sources.Clone's."""
from __future__ import annotations

import contextlib
import os
import subprocess

import git

from . import clone_objects as objs, paths, refs, tools
from .clone_faults import ORIGIN_HEAD
from .clone_git import CloneFault, ClonePlace, git_msg, safe_git_args
from .errors import RefError

#: the refs a clone keeps from one run to the next: the origin's branches and tags (pruned on every
#: fetch). Any other ref in a cached clone is deleted before a fetch, PR and checkout heads too (a
#: run fetches those by name before it uses them: a planted `refs/refbench/pull/999` counted as a
#: fetched PR reaching a planted commit, review35f F5), and so is every symbolic ref wherever it is:
#: `fetch --prune` never prunes one, so a planted `refs/tags/v99.0.0 -> refs/refbench/evil` would
#: survive as a release tag (the fifth reading's HIGH); one git's listing skips is a clone fault
KEPT_REFS = ("refs/remotes/origin/", "refs/tags/")
CHECKOUT_HEAD = "refs/refbench/checkout-head"  # a checkout's HEAD, fetched anew by every fetch in checkout mode


class _FetchFailed(Exception):
    """git could not sweep or fetch into the clone: `why` (git's line), and `fault`, what in the
    clone itself made it fail when that is known (the sweep reaches no network; a lock git left)."""

    def __init__(self, why: str, fault: str | None):
        super().__init__(why)
        self.why, self.fault = why, fault


def stale_locks(place: ClonePlace) -> str | None:
    """git's lock files in the clone (`*.lock`), named, or None. git leaves one when it is killed
    mid-write (a cancelled job's fetch), then refuses to write that ref again: every run failed
    "cannot fetch" (review35g G3). refbench's own lock sits beside the clone (`<clone>.lock`) and
    every git that writes in the clone runs under it, so one found while it is held is stale:
    call this holding it."""
    found = sorted(os.path.relpath(os.path.join(top, name), place.clone_dir)
                   for top, _, files in os.walk(place.clone_dir) for name in files if name.endswith(".lock"))
    return f"a lock git left: {', '.join(found[:3])}" if found else None


def fetch_fault(place: ClonePlace, repo: git.Repo) -> str | None:
    """Sweep and fetch (fetch_refs); what is wrong with the clone after it, or None. A fetch that
    fails is the clone's fault only when the clone shows one (a stale git lock, a ref's object
    not what its id says, a hole); else a RefError, the clone left in place: an origin that does
    not answer would fail a clone made anew too, and cost the next run a whole clone."""
    try:
        fetch_refs(place, repo)
    except _FetchFailed as e:
        local = e.fault or objs.tip_fault(place, repo) or objs.missing_objects(place)
        if not local:
            raise RefError(f"cannot fetch {place.url}: {e.why}") from None
        return f"cannot be swept or fetched into: {e.why} ({local})"
    missing = objs.missing_objects(place)
    if missing:
        return f"lacks objects its refs need ({missing})"
    wrong = objs.tip_fault(place, repo)
    return f"holds an object that is not what its id says ({wrong})" if wrong else None


def fetch_refs(place: ClonePlace, r: git.Repo) -> None:
    """The sweep (sweep_refs), then the fetch; a _FetchFailed when git fails at either. Whether
    git left a lock in the clone is looked at while refbench's lock is held: another process's
    git may hold one as soon as it is released."""
    with place.lock():
        try:
            sweep_refs(place, r)
        except (git.GitCommandError, OSError) as e:  # no network yet: the clone's ref store is the fault
            why = git_msg(e) if isinstance(e, git.GitCommandError) else f"{e.filename}: {e.strerror}"
            raise _FetchFailed(why, "its refs cannot be swept") from None
        tags = "+refs/tags/*:refs/tags/*"
        try:
            if place.checkout:  # its remote-tracking branches first; its own branches win
                r.git.fetch("--quiet", "--force", "--prune", "--update-shallow", "origin",
                            "+refs/remotes/origin/*:refs/remotes/origin/*", tags, f"+HEAD:{CHECKOUT_HEAD}")
            # --update-shallow: an origin that is itself a shallow clone (CI checkouts) would
            # otherwise have its tags and branches silently rejected. A checkout's branches
            # come on top of its remote-tracking ones, just pruned to the origin's: not again
            r.git.fetch("--quiet", "--force", "--update-shallow", "origin",
                        *(() if place.checkout else ("--prune",)),
                        "+refs/heads/*:refs/remotes/origin/*", *(() if place.checkout else (tags,)))
        except git.GitCommandError as e:
            raise _FetchFailed(git_msg(e), stale_locks(place)) from None
        with contextlib.suppress(git.GitCommandError):
            branch = refs.head_branch(r.git.ls_remote("--symref", "origin", "HEAD"))
            if branch:
                r.git.symbolic_ref("refs/remotes/origin/HEAD", f"refs/remotes/origin/{branch}")


def sweep_refs(place: ClonePlace, r: git.Repo) -> None:
    """Before a fetch: every ref but the kept ones deleted, the HEAD files unlinked, and a
    `shallow` file the origin did not write dropped (drop_planted_shallow)."""
    stray = [n for n, symref in refs.symbolic_listing(r, "%(refname)") if symref or not n.startswith(KEPT_REFS)]
    for name in stray:
        r.git.update_ref("--no-deref", "-d", name)
    # the origin's HEAD and the checkout's even when what they name is missing (a listing
    # skips them), so the fetch never writes a branch or a tag through one (review35f
    # F1, F7); the origin's is set again from its answer below, the checkout's fetched
    for name in (ORIGIN_HEAD, CHECKOUT_HEAD):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(place.clone_dir / name)
    drop_planted_shallow(place)


def drop_planted_shallow(place: ClonePlace) -> None:
    """A planted shallow file hides history: a commit it names is walked with no parents, so an
    older commit is no ancestor (missing_objects, merge-base, bisect's line). Unlinked, unless
    each commit it names is one the checkout (in checkout mode) is itself shallow at: a CI
    checkout is a shallow clone, and `--update-shallow` writes its boundary back. Kept in
    checkout mode before, a planted one naming the default branch's tip refused every older
    merged commit, for good (review35h H2)."""
    planted = place.clone_dir / "shallow"
    if not os.path.lexists(planted):
        return
    if place.checkout:
        data = paths.read_regular(planted, limit=1 << 24)
        if data is not None and set(data.decode(errors="replace").split()) <= checkouts_shallow(place):
            return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(planted)


def checkouts_shallow(place: ClonePlace) -> set[str]:
    """The commits the checkout (the origin, in checkout mode) is shallow at: its own `shallow`
    file's lines, as git names that file (`rev-parse --git-path shallow`); none when it has none."""
    p = subprocess.run([tools.git(), *safe_git_args(), "-C", place.url, "rev-parse", "--path-format=absolute",
                        "--git-path", "shallow"], capture_output=True, text=True, env=tools.child_env())
    data = paths.read_regular(p.stdout.strip(), limit=1 << 24) if p.returncode == 0 and p.stdout.strip() else None
    return set(data.decode(errors="replace").split()) if data else set()


def fetch_pr(place: ClonePlace, r: git.Repo, number: int) -> None:
    """Fetch PR `number`'s head into refs/refbench/pull/N. A fetch that fails while the remote
    answers, or a head whose object is not what its id says (tip_fault: one an earlier run
    fetched, rewritten, is fetched no more), is a CloneFault: cloned anew once (review35h H1)."""
    remote, name = place.pr_remote or "origin", f"refs/refbench/pull/{number}"
    failed = locks = None
    with place.lock():
        try:
            r.git.fetch("--quiet", "--force", "--update-shallow", remote, f"+refs/pull/{number}/head:{name}")
        except git.GitCommandError as e:
            failed, locks = git_msg(e), stale_locks(place)
    if failed is not None:
        if "couldn't find remote ref" in failed or "not our ref" in failed:
            raise RefError(f"PR #{number} not found in {place.pr_remote or place.url} "
                           f"(no refs/pull/{number}/head)")
        local = locks or pr_head_fault(place, r, remote, number)
        if local:
            raise CloneFault(f"the cached clone {place.clone_dir} cannot take PR #{number}'s head "
                             f"({failed}: {local})")
        raise RefError(f"cannot fetch PR #{number} from {place.pr_remote or place.url}: {failed}")
    wrong = objs.tip_fault(place, r, name)
    if wrong:
        raise CloneFault(f"the cached clone {place.clone_dir} holds an object that is not what its id says "
                         f"({wrong})")


def pr_head_fault(place: ClonePlace, r: git.Repo, remote: str, number: int) -> str | None:
    """Why the object the clone holds under PR `number`'s head id (as `remote` answers it) is not
    what its id says, or None: git's fetch re-hashes a tip it already has and fails, for good."""
    with contextlib.suppress(git.GitCommandError):
        head = r.git.ls_remote("--end-of-options", remote, f"refs/pull/{number}/head").split()[:1]
        if head and objs.holds_object(place, head[0]):
            return objs.named_fault(place, {head[0]: f"PR #{number}'s head"})
    return None


def fetch_commit(place: ClonePlace, r: git.Repo, sha: str) -> None:
    """Fetch one commit by its whole id, from the origin or else the PR remote; under the clone's
    lock, as every git that writes in the clone (stale_locks counts on it). `r`: opened before,
    since opening takes the lock itself."""
    for remote in ("origin",) + ((place.pr_remote,) if place.pr_remote else ()):
        with contextlib.suppress(git.GitCommandError), place.lock():
            r.git.fetch("--quiet", "--update-shallow", remote, sha)
            return
