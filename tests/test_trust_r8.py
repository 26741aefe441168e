"""The eighth reading's LOWs (issue 35, /work/wt/review35h.md: H1-H3), the seventh's G3, and `setup`
through a link at the cache root, closed: each attack planted in a throw-away cache or origin. All
of them failed closed (nothing unmerged was built), but for good: a release tag "not found", every
older commit refused, every run "cannot fetch", until someone removed the cache by hand."""
from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import zlib
from pathlib import Path

import pytest

from origins import git, new_origin
from refbench import paths, refs, sources, trust
from refbench.errors import RefError
from test_trust_cache import _clone_git, _explode, keyed  # noqa: F401  (keyed: a pytest fixture)

GOMOD = "module example.com/r8\n\ngo 1.21\n"


def _origin(root: Path):
    """master: c0 (v1.0.0) - c1 - c2 (v1.1.0), annotated tags; PR #7: e on c0, never merged."""
    root.mkdir(parents=True, exist_ok=True)
    o = new_origin(root)
    o.commit("c0", {"go.mod": GOMOD, "f": "c0"}, "c0", tags=["v1.0.0"])
    o.commit("c1", {"f": "c1"}, "c1")
    o.commit("c2", {"f": "c2"}, "c2", tags=["v1.1.0"])
    o.commit("e", {"f": "the PR's"}, "e: the attacker's", parent="c0", pull=7)
    return o


@pytest.fixture(scope="module")
def r8_origin(tmp_path_factory):
    return _origin(tmp_path_factory.mktemp("r8-origin"))


@pytest.fixture
def master(monkeypatch):
    monkeypatch.setenv(trust.DEFAULT_BRANCH_ENV, "master")  # as the Action's event names it


def _clone(origin, tmp_path: Path, checkout: bool = False, offline: bool = False) -> sources.Clone:
    """A cached clone of `origin` under tmp_path/builds, as a Builder makes one (each call: a new run)."""
    root = tmp_path / "builds" / "r8"
    root.mkdir(parents=True, exist_ok=True)
    return sources.Clone(root, str(origin.path), offline=offline, checkout=checkout)


def _replace(clone: Path, sha: str, kind: bytes, body: bytes) -> None:
    """The object `sha` of `clone` (its packs exploded first) rewritten to hold `body`, under its id."""
    _explode(clone)
    loose = clone / "objects" / sha[:2] / sha[2:]
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(kind + b" %d\0" % len(body) + body))


def _object(clone: Path, kind: str, sha: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(clone), "cat-file", kind, sha], check=True,
                          capture_output=True).stdout


def _names_no_commit(clone: Path, name: str) -> bool:
    """Whether git finds no commit under `name` in `clone` (it re-hashes the object it ends at)."""
    return subprocess.run(["git", "--git-dir", str(clone), "rev-parse", "--verify", "-q", f"{name}^{{commit}}"],
                          capture_output=True).returncode != 0


# ---- H1: a ref's own object replaced under its id ------------------------------------------------------
@pytest.mark.parametrize("checkout", (False, True))
def test_a_release_tags_object_replaced_under_its_id_is_cloned_anew_not_lost_for_good(
        r8_origin, tmp_path, keyed, master, checkout):
    """H1: the annotated tag v1.1.0's object rewritten to name the PR's e. A fetch sees the tag's
    id unchanged and fetches nothing, no sweep hashed a tag object, so v1.1.0 was "ref not found"
    in every run and latest_release died on `for-each-ref --contains=None` (a traceback)."""
    o = r8_origin
    first = _clone(o, tmp_path, checkout)
    first.resolve("v1.1.0")
    first.fetch_pr(7)  # e in the clone's objects, as a run that built the PR leaves it
    tag = _clone_git(first.clone_dir, "rev-parse", "refs/tags/v1.1.0")
    _replace(first.clone_dir, tag, b"tag", _object(first.clone_dir, "tag", tag).replace(
        o.shas["c2"].encode(), o.shas["e"].encode()))
    assert _names_no_commit(first.clone_dir, "refs/tags/v1.1.0")  # the plant is in effect
    for _ in range(2):  # every later run, not only the first
        assert _clone(o, tmp_path, checkout).resolve("v1.1.0").sha == o.shas["c2"]
        assert _clone(o, tmp_path, checkout).resolve("latest_release").display == "latest_release (v1.1.0)"


def test_the_default_branchs_tip_replaced_under_its_id_is_cloned_anew(r8_origin, tmp_path, keyed, master):
    """H1: master's tip commit rewritten (same parents, another message): "ref not found: 'master'"
    and "cannot tell merged code: no branch master" for every merged commit, until master moved."""
    o = r8_origin
    first = _clone(o, tmp_path)
    first.resolve("master")
    tip = o.shas["c2"]
    _replace(first.clone_dir, tip, b"commit", _object(first.clone_dir, "commit", tip).replace(b"c2", b"x2"))
    assert _names_no_commit(first.clone_dir, "refs/remotes/origin/master")
    for _ in range(2):
        assert _clone(o, tmp_path).resolve("master").sha == tip
        assert _clone(o, tmp_path).resolve(o.shas["c1"]).sha == o.shas["c1"]


def test_a_pr_heads_commit_replaced_under_its_id_is_cloned_anew(r8_origin, tmp_path, monkeypatch):
    """H1, a PR's side: its head's object already in the clone (an earlier run fetched it) and
    rewritten: the fetch of refs/pull/7/head brought nothing, and the PR was "not found" for good."""
    monkeypatch.delenv(trust.KEY_FILE_ENV, raising=False)
    o = r8_origin
    first = _clone(o, tmp_path)
    first.resolve("#7")
    head = o.shas["e"]
    planted = _object(first.clone_dir, "commit", head).replace(b"attacker", b"planter")
    _replace(first.clone_dir, head, b"commit", planted)
    for _ in range(2):
        assert _clone(o, tmp_path).resolve("#7").sha == head


def test_latest_release_whose_tag_names_no_commit_is_a_one_line_refusal_not_a_crash(r8_origin, tmp_path,
                                                                                      monkeypatch):
    """H1: refs.resolve returned latest_release with sha None (then a TypeError, or an uncaught
    GitCommandError in a keyed run). Offline nothing is fetched or swept, so the plant stays."""
    monkeypatch.delenv(trust.KEY_FILE_ENV, raising=False)
    o = r8_origin
    first = _clone(o, tmp_path)
    first.resolve("v1.1.0")
    tag = _clone_git(first.clone_dir, "rev-parse", "refs/tags/v1.1.0")
    _replace(first.clone_dir, tag, b"tag", _object(first.clone_dir, "tag", tag).replace(b"tag v1.1.0", b"tag v1.1.1"))
    with pytest.raises(RefError, match="latest_release: the tag v1.1.0 names no commit"):
        refs.resolve(_clone(o, tmp_path, offline=True).repo(), "latest_release")


# ---- H2: a planted shallow file in checkout mode -------------------------------------------------------
def test_a_shallow_file_planted_in_a_checkouts_clone_refuses_no_merged_commit_for_good(
        r8_origin, tmp_path, keyed, master):
    """H2: in checkout mode the sweep kept `shallow`; one naming master's tip made git walk it with
    no parents, so every older merged commit was "not reachable from master", in every run."""
    o = r8_origin
    first = _clone(o, tmp_path, checkout=True)
    first.resolve("master")
    (first.clone_dir / "shallow").write_text(o.shas["c2"] + "\n")
    for _ in range(2):
        assert _clone(o, tmp_path, checkout=True).resolve(o.shas["c1"]).sha == o.shas["c1"]
        assert _clone(o, tmp_path, checkout=True).resolve("v1.0.0").sha == o.shas["c0"]


def test_a_shallow_checkouts_own_boundary_is_kept_not_cloned_anew_each_run(r8_origin, tmp_path, caplog):
    """What H2's fix must keep: a CI checkout is a shallow clone, and its clone holds the same
    boundary; that one is the checkout's own, so no run clones anew for it."""
    shallow = tmp_path / "ci-checkout.git"
    subprocess.run(["git", "clone", "-q", "--bare", "--depth", "1", f"file://{r8_origin.path}", str(shallow)],
                   check=True)
    origin = type(r8_origin)(shallow, shallow)
    assert _clone(origin, tmp_path, checkout=True).resolve("HEAD").sha == r8_origin.shas["c2"]
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            assert _clone(origin, tmp_path, checkout=True).resolve("HEAD").sha == r8_origin.shas["c2"]
    assert "anew" not in caplog.text
    clone = _clone(origin, tmp_path, checkout=True).clone_dir
    assert set((clone / "shallow").read_text().split()) == {r8_origin.shas["c2"]}


# ---- H3: a `parent` line git ignores ------------------------------------------------------------------
@pytest.fixture(scope="module")
def stray_parent_origin(tmp_path_factory):
    """master: c0 (v1.0.0) - c1 - x - y, where x's header holds, after `committer`, a `parent` line
    naming c0 (git takes parents only from the lines right after `tree`; hash-object and fsck accept
    it), and y names x by a parent line in upper-case hex (git reads it; %P prints lower case)."""
    o = new_origin(tmp_path_factory.mktemp("stray-parent-origin"))
    o.commit("c0", {"go.mod": GOMOD, "f": "c0"}, "c0", tags=["v1.0.0"])
    o.commit("c1", {"f": "c1"}, "c1")
    tree = git(o.work, "rev-parse", "HEAD^{tree}")
    who = "a <a@refbench.invalid> 1700000000 +0000"
    x = _hash_commit(o.work, f"tree {tree}\nparent {o.shas['c1']}\nauthor {who}\ncommitter {who}\n"
                             f"parent {o.shas['c0']}\n\nx, with a stray parent header\n")
    y = _hash_commit(o.work, f"tree {tree}\nparent {x.upper()}\nauthor {who}\ncommitter {who}\n\ny\n")
    git(o.work, "push", "-q", "origin", f"{y}:refs/heads/master")
    o.shas.update(x=x, y=y)
    return o


def _hash_commit(work: Path, text: str) -> str:
    return subprocess.run(["git", "hash-object", "-t", "commit", "-w", "--stdin"], cwd=work, input=text.encode(),
                          check=True, capture_output=True).stdout.decode().strip()


def test_a_parent_line_git_ignores_makes_no_merged_commit_unmerged(stray_parent_origin, tmp_path, keyed, master):
    """H3: _unauthentic counted every `parent` line of the header, so the line through x was "git
    walked parents [c1], the commit names [c1, c0]": cloned anew and refused, every run, for every
    commit older than x (releases too), once such a commit was merged."""
    o = stray_parent_origin
    assert _clone_git(o.path, "log", "-1", "--format=%P", o.shas["x"]) == o.shas["c1"]  # git's own reading
    for _ in range(2):
        assert _clone(o, tmp_path).resolve(o.shas["c1"]).sha == o.shas["c1"]
        assert _clone(o, tmp_path).resolve("v1.0.0").sha == o.shas["c0"]


# ---- G3: what a killed fetch leaves, and a packed-refs line git cannot parse ---------------------------
@pytest.mark.parametrize("plant", ["a packed-refs line git cannot parse", "a stale lock of master",
                                   "a stale lock of the checkout's head"])
def test_a_clone_git_cannot_fetch_into_is_cloned_anew_not_failed_for_good(tmp_path, keyed, master, plant):
    """review35g G3: the sweep or the fetch died on it ("cannot fetch"), and nothing removed the
    clone, so every later run failed the same way. A killed fetch (a cancelled CI job) leaves such a
    lock, so this is not only a plant."""
    o = _origin(tmp_path / "origin")
    checkout = plant.endswith("checkout's head")
    first = _clone(o, tmp_path, checkout)
    first.resolve("master")
    clone = first.clone_dir
    if plant.startswith("a packed-refs"):
        _clone_git(clone, "pack-refs", "--all")
        with open(clone / "packed-refs", "a") as fh:
            fh.write("not a ref line\n")
    elif plant == "a stale lock of master":
        (clone / "refs" / "remotes" / "origin" / "master.lock").write_text("")
        o.commit("c3", {"f": "c3"}, "c3")  # the fetch must move master, so it needs the lock
    else:
        (clone / sources.CHECKOUT_HEAD).with_suffix(".lock").write_text("")
    tip = o.shas.get("c3", o.shas["c2"])
    for _ in range(2):
        assert _clone(o, tmp_path, checkout).resolve("master").sha == tip
        assert _clone(o, tmp_path, checkout).resolve(o.shas["c1"]).sha == o.shas["c1"]


def test_an_origin_that_does_not_answer_leaves_the_cached_clone_in_place(tmp_path, monkeypatch):
    """What G3's fix must keep: a fetch that fails because the origin is gone is no clone fault;
    removing the clone would only cost the next run a whole clone."""
    monkeypatch.delenv(trust.KEY_FILE_ENV, raising=False)
    o = _origin(tmp_path / "origin")
    first = _clone(o, tmp_path)
    first.resolve("master")
    o.path.rename(o.path.with_name("gone.git"))
    with pytest.raises(RefError, match=f"cannot fetch {o.path}"):
        _clone(o, tmp_path).resolve("master")
    assert _clone_git(first.clone_dir, "rev-parse", "refs/remotes/origin/master") == o.shas["c2"]


# ---- setup writes no pinned tool through a link at the cache root -------------------------------------
def test_setup_refuses_a_link_at_the_cache_root_and_writes_nothing_through_it(tmp_path, monkeypatch):
    """The pinned builds and the hyperfine wheel went wherever a link at $XDG_CACHE_HOME/refbench
    pointed (their bytes are checked at every use: availability and hygiene, not a way in)."""
    from refbench import pins
    from refbench.commands import setup
    users = tmp_path / "users-dir"
    users.mkdir()
    xdg = tmp_path / "xdg-cache"
    xdg.mkdir()
    (xdg / "refbench").symlink_to(users)
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    monkeypatch.delenv(pins.UNPINNED_ENV, raising=False)

    def wheel(tool: str, out_dir: Path) -> Path:
        (out_dir / tool).write_bytes(b"hyperfine\n")
        return out_dir / tool
    fake = pins.Pin("hyperfine", pins.version_of("hyperfine"), pins.WHEEL, pins.current_platform(),
                    hashlib.sha256(b"hyperfine\n").hexdigest())
    with pins.installed(pins.Pinning(table=(fake,), from_wheel=wheel)):
        with pytest.raises(paths.CacheLinkError, match="is a symbolic link"):
            setup.run_setup(tmp_path / "bin", build_hyperfine=False, minio=False)
    assert os.listdir(users) == []
