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

import pytest

from origins import git
from refbench import builds as bl, trust
from test_builds import builder, origin  # noqa: F401  (origin: a pytest fixture)
from test_trust_cache import _clone_git, keyed  # noqa: F401  (keyed: a pytest fixture)


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


def _dangling(clone, name: str, target: str) -> None:
    """A symbolic ref whose target is absent from the clone: `for-each-ref` does not list it (no
    warning), and the fetch that follows creates its target (review35f F1)."""
    _clone_git(clone, "update-ref", "-d", target)
    _clone_git(clone, "symbolic-ref", name, target)


def test_a_dangling_symbolic_ref_does_not_make_an_unmerged_commit_merged(origin, tmp_path, keyed, monkeypatch):
    """Review35f F1: a dangling symbolic tag (or a default branch made a symbolic ref to another
    branch) survived the sweep, since `for-each-ref` skips it; after the fetch it named the origin's
    unmerged branch, so refuse_unmerged took `reworded` for a release's commit (or the default
    branch's), and main resolved to the unmerged branch's tip."""
    unmerged = origin.shas["reworded"]
    monkeypatch.setenv(trust.DEFAULT_BRANCH_ENV, "master")  # as the Action sets it for a checkout
    for checkout in (False, True):
        for name in ("refs/tags/v99.0.0", "refs/remotes/origin/master"):
            builds = tmp_path / f"{checkout}-{name.rsplit('/', 1)[1]}"
            first = builder(origin, builds, checkout=checkout)
            first.resolve("v1.0.0", go="local")
            _dangling(first.clone_dir, name, "refs/remotes/origin/reworded")
            again = builder(origin, builds, checkout=checkout)
            with pytest.raises(bl.RefError, match=unmerged[:12]):
                again.resolve(unmerged, go="local")
            assert again.resolve("master", go="local").sha == origin.shas["two"], (checkout, name)
            left = _clone_git(again.clone_dir, "for-each-ref", "--format=%(refname) %(symref)",
                              "refs/tags", "refs/remotes/origin/master")
            assert "v99.0.0" not in left and "reworded" not in left, (checkout, name, left)


def test_an_offline_keyed_run_cannot_call_anything_merged(origin, tmp_path, keyed):
    """Without a fetch there is no sweep: the clone's refs are as the cache left them, so a planted
    symbolic tag or default branch would still decide 'merged' (review35f F1, the offline path)."""
    builder(origin, tmp_path).resolve("v1.0.0", go="local")
    with pytest.raises(bl.RefError, match="offline run cannot tell merged code"):
        builder(origin, tmp_path, offline=True).resolve(origin.shas["one"], go="local")


def test_a_dangling_checkout_head_does_not_write_a_release_tag(origin, tmp_path, keyed, monkeypatch):
    """Review35f F7: in checkout mode every fetch writes `+HEAD:refs/refbench/checkout-head`, and git
    writes through a symbolic destination: a dangling checkout-head -> refs/tags/v99.0.0 became a
    plain tag at the checkout's HEAD, which latest_release then picked (main against itself, labelled
    as the latest release), with no ref named by the attacker."""
    monkeypatch.setenv(trust.DEFAULT_BRANCH_ENV, "master")
    first = builder(origin, tmp_path, checkout=True)
    first.resolve("v1.0.0", go="local")
    _dangling(first.clone_dir, "refs/refbench/checkout-head", "refs/tags/v99.0.0")
    latest = builder(origin, tmp_path, checkout=True).resolve("latest_release", go="local")
    assert latest.sha == git(origin.work, "rev-parse", "v1.1.0^{commit}") and "v99" not in latest.display, latest


def test_a_stale_pull_ref_planted_in_the_clone_is_not_a_fetched_pr(origin, tmp_path):
    """Review35f F5: refs/refbench/pull/N was kept by the sweep, so a planted one on a commit the
    origin never had counted as 'a fetched PR' and a prefix (an unkeyed run) named that commit."""
    first = builder(origin, tmp_path)
    first.resolve("v1.0.0")
    evil = _planted_commit(first.clone_dir)
    _clone_git(first.clone_dir, "update-ref", "refs/refbench/pull/999", evil)
    with pytest.raises(bl.RefError, match="reaches"):
        builder(origin, tmp_path).resolve(evil[:12])


def test_a_ref_name_with_a_unicode_line_separator_does_not_crash_the_sweep(origin, tmp_path):
    """Review35f F6: str.splitlines broke for-each-ref's listing at U+2028 (valid in a ref name):
    every run failed with a ValueError, for good."""
    first = builder(origin, tmp_path)
    first.resolve("v1.0.0")
    _clone_git(first.clone_dir, "update-ref", "refs/tags/x\u2028y", origin.shas["one"])
    _clone_git(first.clone_dir, "update-ref", "refs/refbench/x\u0085y", origin.shas["one"])
    assert builder(origin, tmp_path).resolve("latest_release").sha == git(origin.work, "rev-parse", "v1.1.0^{commit}")
