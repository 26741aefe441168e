"""git on a cached clone refbench does not trust, said once for every module that runs it there
(sources, clone_objects, clone_fetch): the options each git gets, the environment naming the clone
outright, the clone's place and lock (ClonePlace), git's one line of a failure, and CloneFault.

It imports none of those modules, so they share it without a cycle. The threat model is
docs/threat-model.md's."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import git

from . import heldenv, paths, tools
from .errors import RefError

#: given to every git refbench runs: no hook runs, no fsmonitor command starts, whatever a clone holds;
#: no commit-graph or multi-pack-index is read or written (git takes a commit's parents from a
#: commit-graph, which a restored cache may have patched to route history through a planted commit)
SAFE_GIT = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "core.commitGraph=false",
            "core.multiPackIndex=false", "gc.writeCommitGraph=false", "fetch.writeCommitGraph=false")


def safe_git_args() -> list[str]:
    """`-c core.hooksPath=/dev/null -c core.fsmonitor=false` for a git command line."""
    return [a for opt in SAFE_GIT for a in ("-c", opt)]


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


def git_msg(e: git.GitCommandError) -> str:
    text = (e.stderr or str(e)).strip().replace("stderr:", "").strip().strip("'").strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    return (fatal[0] if fatal else lines[-1] if lines else "git failed").removeprefix("fatal: ")


class CloneFault(RefError):
    """The cached clone holds an object that is not what its id says (a commit replaced under its
    id, a history routed through a planted commit): Clone.resolve clones anew once, and a second one
    is this error's one line."""


@dataclass(frozen=True)
class ClonePlace:
    """One cached clone as the checks and fetches on it see it: its directory, the builds directory
    it sits in (nothing is written or removed through a link in it), the origin and where PR refs
    come from, and whether the origin is a working checkout. A value, made anew from the Clone
    whenever asked, so a Clone whose settings change (a test going offline) is seen as it is now."""
    clone_dir: Path
    cache: Path
    url: str
    pr_remote: str | None
    checkout: bool

    def lock(self):
        """The clone's lock (beside it, `<clone>.lock`): every git that reads or writes in the clone
        runs under it (clone_fetch.stale_locks counts on it)."""
        return paths.locked(self.clone_dir.with_suffix(".lock"), within=self.cache)

    def git_env(self) -> dict:
        """The environment of a git command refbench runs itself on the clone (tools.child_env's
        allow-list, and the clone named outright: clone_git_env)."""
        return {**tools.child_env(), **clone_git_env(self.clone_dir)}
