"""Issue 35's fifth round: a run that seals with the shared key, or a job whose cache token writes
the default branch's scope (push, schedule, workflow_dispatch), builds merged code only, whichever
way a ref reaches refbench (-s, --variant, the nightly, bisect), and the Action's gate checks the
checkout it runs in and fails such a job before any cache is restored (review35d's MEDIUMs 6 and 7
and HIGH 5). Each test failed before the fix (the commit that added it says how)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli
from origins import git
from refbench import builds as bl, sources, trust
from test_builds import builder, origin  # noqa: F401  (origin: a pytest fixture)
from test_trust_cache import keyed  # noqa: F401  (a pytest fixture: a run given the shared key)

ROOT = Path(__file__).resolve().parent.parent


def test_a_keyed_run_refuses_an_unmerged_commit_before_building(origin, tmp_path, keyed):
    """Review35d MEDIUM 6: refs given in the Action's args (-s, --variant) never reached key-gate,
    and refbench built them with the key. Now refbench itself refuses, in the clone it builds from."""
    b = builder(origin, tmp_path)
    unmerged = origin.shas["reworded"]  # branch reworded: on top of v1.0.0, never merged into master
    with pytest.raises(bl.RefError, match=rf"^reworded \({unmerged[:12]}\) is not reachable from master"):
        b.resolve("reworded", go="local")
    with pytest.raises(bl.RefError, match=unmerged[:12]):
        b.resolve(unmerged, go="local")
    with pytest.raises(bl.RefError, match="broken"):
        b.resolve("broken", go="local")  # the pushed branch above master's tip
    # merged code: the default branch's line, a release tag, HEAD
    assert b.resolve("master", go="local").sha == origin.shas["two"]
    assert b.resolve(origin.shas["docs"], go="local").sha == origin.shas["docs"]
    assert b.resolve("v1.0.0", go="local").sha == origin.shas["one"]
    assert b.resolve("HEAD", go="local").sha == origin.shas["two"]


def test_a_commit_only_a_release_tag_holds_is_merged(origin, tmp_path, keyed):
    git(origin.work, "tag", "v0.9.0-hotfix", origin.shas["reworded"])
    git(origin.work, "push", "-q", "origin", "refs/tags/v0.9.0-hotfix")
    try:
        assert builder(origin, tmp_path).resolve("reworded", go="local").sha == origin.shas["reworded"]
    finally:
        git(origin.work, "push", "-q", "origin", ":refs/tags/v0.9.0-hotfix")
        git(origin.work, "tag", "-d", "v0.9.0-hotfix")


def test_a_job_writing_the_default_branchs_cache_scope_builds_merged_code_only_without_a_key(
        origin, tmp_path, monkeypatch):
    """Review35d HIGH 5: a push, schedule or manual job may write cache entries every later job
    restores (actions/cache extracts them with tar -P), so it runs no unmerged code at all, keyed
    or not; an ordinary run still builds any ref."""
    monkeypatch.delenv(trust.KEY_FILE_ENV, raising=False)
    assert builder(origin, tmp_path / "plain").resolve("reworded", go="local").sha == origin.shas["reworded"]
    monkeypatch.setenv(trust.MERGED_ONLY_ENV, "1")
    with pytest.raises(bl.RefError, match="reworded"):
        builder(origin, tmp_path / "scoped").resolve("reworded", go="local")


def test_a_keyed_build_of_an_unmerged_ref_exits_2_with_one_line_and_builds_nothing(origin, tmp_path, keyed):
    out = tmp_path / "out"
    proc = run_cli("build", "-s", "v1.0.0", "reworded", "--repo", str(origin.path), "--out", str(out),
                   "--builds-dir", str(tmp_path / "builds"))
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "reworded" in proc.stderr and origin.shas["reworded"][:12] in proc.stderr
    assert not any(out.rglob("*")) if out.exists() else True  # refused before anything was built


def test_a_keyed_dry_run_refuses_an_unmerged_variant(s5_origin, tmp_path, keyed):
    """--variant NAME=REF is a build like -s's, checked the same way."""
    proc = run_cli("--dry-run", "-s", "v1.0.0", "--variant", "pr=hold-memory", "--repo", str(s5_origin.path),
                   "--builds-dir", str(tmp_path / "builds"), "--quick", "--only", "small files", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "hold-memory" in errors[0] and s5_origin.shas["hold"][:12] in errors[0], proc.stderr


def test_the_default_branch_the_event_names_is_the_one_checked(origin, tmp_path, keyed, monkeypatch):
    """The Action names the default branch from its event (REFBENCH_DEFAULT_BRANCH): a checkout's
    own HEAD names whatever it has checked out, never the default branch by itself."""
    monkeypatch.setenv(trust.DEFAULT_BRANCH_ENV, "reworded")
    assert builder(origin, tmp_path).resolve("reworded", go="local").sha == origin.shas["reworded"]
    monkeypatch.setenv(trust.DEFAULT_BRANCH_ENV, "no-such-branch")
    with pytest.raises(bl.RefError, match="no branch no-such-branch"):
        builder(origin, tmp_path / "b").resolve("v1.0.0", go="local")


def test_a_checkout_on_an_unmerged_branch_is_not_the_default_branch(origin, tmp_path, keyed):
    """In a checkout, the origin is the checkout, whose HEAD is the branch it has checked out: the
    default branch is its remote's (ls-remote --symref), so HEAD on an unmerged branch is refused."""
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(origin.path), str(checkout)], check=True, capture_output=True)
    git(checkout, "checkout", "-q", "reworded")
    (tmp_path / "builds").mkdir()
    clone = sources.Clone(tmp_path / "builds", str(checkout), pr_remote=str(origin.path), checkout=True)
    with pytest.raises(bl.RefError, match=rf"^HEAD \({origin.shas['reworded'][:12]}\) is not reachable from master"):
        clone.resolve("HEAD")
    assert clone.resolve("v1.1.0").sha == origin.shas["two"]


def test_a_prefix_never_names_a_commit_planted_in_the_cached_clone(origin, tmp_path):
    """Review35c's LOW: a run sealing with the machine's own key (no key file) took a commit prefix
    from the cached clone, where a restored cache may have planted a commit of that prefix; the
    machine's later runs trust what it sealed. A prefix now names only a commit some branch, tag or
    fetched PR of the origin reaches; unkeyed runs still take short ids of the origin's commits."""
    b = builder(origin, tmp_path)
    assert b.resolve(origin.shas["docs"][:9], go="local").sha == origin.shas["docs"]  # a short id still works
    clone = b.sources.clone_dir
    tree = subprocess.run(["git", "--git-dir", str(clone), "rev-parse", f"{origin.shas['two']}^{{tree}}"],
                          check=True, capture_output=True, text=True).stdout.strip()
    planted = subprocess.run(["git", "--git-dir", str(clone), "commit-tree", tree, "-m", "planted"], check=True,
                             capture_output=True, text=True,
                             env={**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x.invalid",
                                  "GIT_COMMITTER_NAME": "x", "GIT_COMMITTER_EMAIL": "x@x.invalid"}).stdout.strip()
    again = builder(origin, tmp_path)
    with pytest.raises(bl.RefError, match=rf"names {planted[:12]}, which no branch, tag or fetched PR .* reaches"):
        again.resolve(planted[:12], go="local")


class _ProxyAnswering(sources.ModuleSource):
    """A module source whose proxy answers `version` for every query (no network, no go)."""

    def __init__(self, version: str):
        super().__init__("example.com/hello/v3", offline=False, env=dict)
        self.version = version

    def info(self, text, query):
        return {"Version": self.version, "Origin": {"VCS": "git", "Hash": "ab" * 20}, "GoModText": None}


def test_a_pseudo_version_marked_incompatible_is_no_release(monkeypatch):
    """Review35g G5: the pseudo-version test ran before `+incompatible` was stripped, so a v2+
    module's pseudo-version of any commit passed a merged-only run as a release."""
    monkeypatch.setenv(trust.MERGED_ONLY_ENV, "1")
    for version in ("v3.0.0-20260101000000-abcdefabcdef+incompatible", "v3.0.1-0.20260101000000-abcdefabcdef"):
        with pytest.raises(bl.RefError, match="is no release version"):
            _ProxyAnswering(version).resolve(sources.refs.classify(version))
    assert _ProxyAnswering("v3.1.0+incompatible").resolve(sources.refs.classify("v3.1.0+incompatible"))[0].version
