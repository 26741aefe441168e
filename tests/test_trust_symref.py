"""A symbolic tag planted in a cached clone (issue 35, the fifth reading's HIGH).

`git fetch --prune` never prunes a symbolic ref, and the sweep of stray refs kept everything under
refs/tags/ and refs/refbench/. So `refs/tags/v99.0.0 -> refs/refbench/evil -> E`, with E a commit
planted in the clone (or any unmerged branch's commit), survived refbench's fetch, and
latest_release, the one ref key-gate hands a keyed run by name, resolved to E: the trusted job
built it, ran it and sealed it.
"""
from __future__ import annotations

import os
import subprocess

from origins import git
from test_builds import builder, origin  # noqa: F401  (origin: a pytest fixture)
from test_trust_cache import _clone_git


def _plant_symbolic_release(clone, target_sha: str) -> None:
    _clone_git(clone, "update-ref", "refs/refbench/evil", target_sha)
    _clone_git(clone, "symbolic-ref", "refs/tags/v99.0.0", "refs/refbench/evil")


def _planted_commit(clone) -> str:
    tree = _clone_git(clone, "mktree")
    env = {**os.environ, **{f"GIT_{who}_{what}": v for who in ("AUTHOR", "COMMITTER")
                            for what, v in (("NAME", "x"), ("EMAIL", "x@x"))}}
    return subprocess.run(["git", "--git-dir", str(clone), "commit-tree", tree, "-m", "E: the attacker's"],
                          check=True, capture_output=True, text=True, env=env).stdout.strip()


def test_a_symbolic_release_tag_planted_in_the_clone_is_not_latest_release(origin, tmp_path):
    for checkout in (False, True):
        builds = tmp_path / f"checkout-{checkout}"
        first = builder(origin, builds, checkout=checkout)
        first.resolve("v1.0.0")
        evil = _planted_commit(first.clone_dir)
        _plant_symbolic_release(first.clone_dir, evil)
        again = builder(origin, builds, checkout=checkout)
        latest = again.resolve("latest_release")
        assert "v99.0.0" not in latest.display and latest.sha == git(origin.work, "rev-parse", "v1.1.0^{commit}"), \
            (checkout, latest)
        refs = _clone_git(again.clone_dir, "for-each-ref", "--format=%(refname) %(symref)")
        assert "v99.0.0" not in refs and "refs/refbench/evil" not in refs, refs


def test_a_symbolic_tag_naming_an_unmerged_branch_is_not_a_release(origin, tmp_path):
    """No planted objects at all: the symbolic tag names the origin's own unmerged branch."""
    first = builder(origin, tmp_path)
    first.resolve("v1.0.0")
    _clone_git(first.clone_dir, "symbolic-ref", "refs/tags/v99.0.0", "refs/remotes/origin/broken")
    latest = builder(origin, tmp_path).resolve("latest_release")
    assert latest.sha == git(origin.work, "rev-parse", "v1.1.0^{commit}"), latest
