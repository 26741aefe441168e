"""What 'merged' rests on is hashed (issue 35, review35f F2).

A keyed run, or a push, schedule or manual job, builds only commits the default branch or a release
tag reaches (sources.Clone.refuse_unmerged). git answers that by walking parents, and its walk does
not re-hash the commit objects it passes: a commit of master replaced in the cached clone under its
own id, now naming an unmerged commit as a second parent, made that commit 'merged'. The attacker
needed only a poisoned cache entry and a PR of their own; nothing on the origin.
"""
from __future__ import annotations

import subprocess
import zlib

import pytest

from origins import new_origin
from refbench import builds as bl, trust
from test_builds import GOMOD, MAIN, builder
from test_trust_cache import _clone_git, keyed  # noqa: F401  (keyed: a pytest fixture)


def _replace_with_extra_parent(clone, sha: str, parent: str) -> None:
    """Rewrite the loose object of `sha` in `clone` so that it names `parent` as a second parent."""
    body = subprocess.run(["git", "--git-dir", str(clone), "cat-file", "commit", sha], check=True,
                          capture_output=True).stdout
    lines = body.split(b"\n")
    at = max(i for i, ln in enumerate(lines[:4]) if ln.startswith((b"tree ", b"parent "))) + 1
    lines.insert(at, b"parent " + parent.encode())
    fake = b"\n".join(lines)
    obj = clone / "objects" / sha[:2] / sha[2:]
    assert obj.exists(), "the test origin is small enough for the fetch to leave its objects loose"
    obj.chmod(0o644)
    obj.write_bytes(zlib.compress(b"commit %d\0" % len(fake) + fake))


@pytest.fixture(scope="module")
def line_origin(tmp_path_factory):
    """master: c0 (v1.0.0) - c1 - c2, where c1 is named by no ref (git re-hashes a ref's tip, not
    the commits below it); pr: e on c0, never merged."""
    o = new_origin(tmp_path_factory.mktemp("line-origin"))
    o.commit("c0", {"go.mod": GOMOD, "main.go": MAIN.format(word="c0")}, "c0", tags=["v1.0.0"])
    o.commit("c1", {"main.go": MAIN.format(word="c1")}, "c1")
    o.commit("c2", {"main.go": MAIN.format(word="c2")}, "c2")
    o.commit("e", {"main.go": MAIN.format(word="e")}, "e: the attacker's", branch="pr", parent="c0")
    return o


@pytest.mark.parametrize("checkout", (False, True))
def test_a_replaced_ancestor_does_not_make_an_unmerged_commit_merged(line_origin, tmp_path, keyed, monkeypatch,
                                                                     checkout):
    monkeypatch.setenv(trust.DEFAULT_BRANCH_ENV, "master")  # as the Action sets it for a checkout
    origin, unmerged = line_origin, line_origin.shas["e"]
    first = builder(origin, tmp_path, checkout=checkout)
    first.resolve("v1.0.0", go="local")
    _replace_with_extra_parent(first.clone_dir, origin.shas["c1"], unmerged)  # c1 now "merges" e
    assert _clone_git(first.clone_dir, "merge-base", "--is-ancestor", unmerged, "refs/remotes/origin/master") == ""
    with pytest.raises(bl.RefError, match=unmerged[:12]):  # the clone made anew, then refused: not merged
        builder(origin, tmp_path, checkout=checkout).resolve(unmerged, go="local")


@pytest.fixture(scope="module")
def cycle_origin(tmp_path_factory):
    """master: a0 (v1.0.0) - c0 - c1 - c2, with c0 and c1 named by no ref; pr: e on c0, never merged."""
    o = new_origin(tmp_path_factory.mktemp("cycle-origin"))
    o.commit("a0", {"go.mod": GOMOD, "main.go": MAIN.format(word="a0")}, "a0", tags=["v1.0.0"])
    o.commit("c0", {"main.go": MAIN.format(word="c0")}, "c0")
    o.commit("c1", {"main.go": MAIN.format(word="c1")}, "c1")
    o.commit("c2", {"main.go": MAIN.format(word="c2")}, "c2")
    o.commit("e", {"main.go": MAIN.format(word="e")}, "e: the attacker's", branch="pr", parent="c0")
    return o


@pytest.mark.parametrize("checkout", (False, True))
def test_an_emptied_line_does_not_make_an_unmerged_commit_merged(cycle_origin, tmp_path, keyed, monkeypatch, checkout):
    """Review35g G1: with c1 made to name e as a parent (F2's plant) and also e's own parent c0 made
    to name c1, `rev-list --ancestry-path e..master` lists nothing, so nothing was re-hashed and an
    empty line passed, while merge-base still said 'merged'."""
    monkeypatch.setenv(trust.DEFAULT_BRANCH_ENV, "master")
    origin, unmerged = cycle_origin, cycle_origin.shas["e"]
    first = builder(origin, tmp_path, checkout=checkout)
    first.resolve("master", go="local")
    _replace_with_extra_parent(first.clone_dir, origin.shas["c1"], unmerged)
    _replace_with_extra_parent(first.clone_dir, origin.shas["c0"], origin.shas["c1"])
    assert _clone_git(first.clone_dir, "merge-base", "--is-ancestor", unmerged, "refs/remotes/origin/master") == ""
    assert _clone_git(first.clone_dir, "rev-list", "--ancestry-path", f"{unmerged}..refs/remotes/origin/master") == ""
    with pytest.raises(bl.RefError, match=unmerged[:12]):
        builder(origin, tmp_path, checkout=checkout).resolve(unmerged, go="local")
