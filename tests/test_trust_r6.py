"""The fifth reading's LOWs (issue 35, /work/wt/review35e.md), closed: each attack planted in a
throw-away cache, and what refbench must do instead of trusting it."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import run_cli
from refbench import paths
from refbench.errors import RefError
from test_builds import builder, origin, run, target  # noqa: F401  (origin: a pytest fixture)
from test_trust_cache import keyed  # noqa: F401  (a pytest fixture: a run given the shared key)


def _users_checkout(tmp_path: Path) -> Path:
    """A directory of the user's that a planted link aims the cache at."""
    users = tmp_path / "users-checkout"
    users.mkdir()
    (users / "notes.txt").write_text("mine\n")
    return users


# ---- the default builds directory resolved through a planted link ----------------------------------
@pytest.mark.parametrize("link", ["builds", "cache root"])
def test_a_link_planted_at_the_cache_roots_builds_is_refused_and_nothing_written_through_it(
        origin, tmp_path, monkeypatch, link):
    users = _users_checkout(tmp_path)
    xdg = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    xdg.mkdir()
    if link == "builds":  # a restore of ~/.cache/refbench holding builds -> the user's checkout
        (xdg / "refbench").mkdir()
        (xdg / "refbench" / "builds").symlink_to(users)
    else:
        (xdg / "refbench").symlink_to(users)
    with pytest.raises(paths.CacheLinkError, match="is a symbolic link"):
        builder(origin, paths.cache_root() / "builds")
    proc = run_cli("build", "-s", "v1.0.0", "--repo", str(origin.path), "--out", str(tmp_path / "out"),
                   "--builds-dir", str(xdg / "refbench" / "builds"), env={"XDG_CACHE_HOME": str(xdg)})
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "symbolic link" in proc.stderr, proc.stderr
    assert sorted(os.listdir(users)) == ["notes.txt"]


def test_a_builds_directory_the_user_links_elsewhere_is_theirs(origin, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    (tmp_path / "big-disk").mkdir()
    (tmp_path / "my-builds").symlink_to(tmp_path / "big-disk")  # not where a cache restore writes
    b = builder(origin, tmp_path / "my-builds")
    assert b.builds_dir == tmp_path / "big-disk"


# ---- a HEAD file in the cached clone that is not a ref ---------------------------------------------
@pytest.mark.parametrize("head", [b"garbage\n", b"ref: refs/remotes/origin/master\n", "fifo"])
def test_a_clone_head_that_is_no_branch_is_cloned_anew_not_a_crash(origin, tmp_path, head):
    first = builder(origin, tmp_path)
    assert first.resolve("v1.0.0", go="local").sha == origin.shas["one"]
    planted = first.clone_dir / "HEAD"
    planted.unlink()
    if head == "fifo":
        os.mkfifo(planted)
    else:
        planted.write_bytes(head)
    for _ in range(2):  # every later run, not only the first
        again = builder(origin, tmp_path)
        assert again.resolve("v1.1.0", go="local").sha == origin.shas["two"]
    assert (first.clone_dir / "HEAD").read_bytes().startswith(b"ref: refs/heads/")


# ---- a FIFO where refbench reads a cached record ---------------------------------------------------
def _returns_within(fn, fifo: Path, seconds: float = 10.0):
    """fn()'s value, asserting it came within `seconds`: a read of the FIFO would block for good, so
    the FIFO is then opened for writing and closed, which ends that read, and the test fails."""
    import threading
    got: list = []
    worker = threading.Thread(target=lambda: got.append(fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the blocked reader gets EOF
        worker.join(seconds)
        pytest.fail(f"reading {fifo} blocked (a FIFO planted in the cache)")
    return got[0]


def test_a_fifo_as_the_go_toolchain_listing_blocks_nothing(tmp_path):
    from refbench import toolchain as tc
    listing = tmp_path / tc.LIST_FILE
    os.mkfifo(listing)
    assert _returns_within(lambda: tc._read_listing(listing), listing) is None


@pytest.mark.parametrize("where", ["impl.json", "a file of its tree"])
def test_a_fifo_as_an_installs_record_or_in_its_tree_blocks_nothing(tmp_path, monkeypatch, where):
    from refbench import implementations as impls
    from test_trust_walks import fake_registry
    impl, installers = fake_registry(tmp_path, monkeypatch)
    got = impls.install(impl, installers=installers)
    planted = impls.install_dir(impl) / "impl.json" if where == "impl.json" else got.root / "bin" / "helper"
    if where == "impl.json":
        planted.unlink()
    os.mkfifo(planted)  # read (the record) or hashed (the tree), it would block for good
    assert _returns_within(lambda: impls.cached(impl), planted) is None
    again = impls.install(impl, installers=installers)
    assert again.built_now and impls.cached(impl) is not None
    assert where == "impl.json" or not os.path.lexists(planted)


def test_a_fifo_as_a_kubo_states_record_blocks_nothing(tmp_path):
    from refbench.backends.snapshot import STATE_FILE, StateCache
    state = tmp_path / "repo"
    state.mkdir()
    os.mkfifo(state / STATE_FILE)
    assert _returns_within(lambda: StateCache.seal_of(state), state / STATE_FILE) is None


# ---- the sixth reading's MEDIUMs: refuse_unmerged fooled by a cached clone -------------------------
@pytest.fixture(scope="module")
def line_origin(tmp_path_factory):
    """master c0 (v1.0.0) - c1 - c2, no ref on c1; `topic` off c0, never merged (a PR's commit)."""
    from origins import new_origin
    o = new_origin(tmp_path_factory.mktemp("line-origin"))
    for name in ("c0", "c1", "c2"):
        o.commit(name, {"go.mod": "module example.com/line\n\ngo 1.21\n", "f": name}, name,
                 tags=["v1.0.0"] if name == "c0" else [])
    o.commit("topic", {"f": "the PR's"}, "topic", branch="topic", parent="c0")
    return o


def _replace_commit(clone: Path, sha: str, body: bytes) -> None:
    """The loose object file of `sha` rewritten to hold `body` as a commit (the clone exploded first)."""
    import zlib
    from test_trust_cache import _explode
    _explode(clone)
    loose = clone / "objects" / sha[:2] / sha[2:]
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"commit %d\0" % len(body) + body))


@pytest.mark.parametrize("plant", ["a release tag", "the default branch"])
def test_a_dangling_symbolic_ref_planted_in_the_clone_makes_no_unmerged_commit_merged(
        origin, tmp_path, keyed, plant):
    """review35f F1: for-each-ref skips a symbolic ref whose target is missing, so the sweep kept it,
    and the fetch then made its target: an unmerged branch of the origin."""
    from test_trust_cache import _clone_git
    unmerged = origin.shas["broken"]
    first = builder(origin, tmp_path)
    first.resolve("v1.0.0", go="local")
    clone = first.clone_dir
    _clone_git(clone, "update-ref", "-d", "refs/remotes/origin/broken")  # left out of the entry
    name = "refs/tags/v99.0.0" if plant == "a release tag" else "refs/remotes/origin/master"
    _clone_git(clone, "update-ref", "-d", name) if plant != "a release tag" else None
    (clone / name).parent.mkdir(parents=True, exist_ok=True)
    (clone / name).write_text("ref: refs/remotes/origin/broken\n")
    with pytest.raises(RefError, match=f"{unmerged[:12]}.* is not reachable from master"):
        builder(origin, tmp_path).resolve(unmerged, go="local")
    assert builder(origin, tmp_path).resolve("master", go="local").sha == origin.shas["two"]


def test_an_ancestor_replaced_to_name_an_unmerged_commit_as_its_parent_makes_it_no_merged_code(
        line_origin, tmp_path, keyed):
    """review35f F2: git walks parents without re-hashing a commit, so c1 (no ref names it)
    rewritten to add the unmerged topic commit as a parent made that commit look merged."""
    from test_trust_cache import _clone_git
    unmerged, c1 = line_origin.shas["topic"], line_origin.shas["c1"]
    first = builder(line_origin, tmp_path)
    first.resolve("v1.0.0", go="local")
    clone = first.clone_dir
    body = _clone_git(clone, "cat-file", "commit", c1).encode() + b"\n"
    tree_and_parent, _, rest = body.partition(b"\nauthor ")  # git reads parents right after the tree
    _replace_commit(clone, c1, tree_and_parent + f"\nparent {unmerged}\nauthor ".encode() + rest)
    assert _clone_git(clone, "merge-base", "--is-ancestor", unmerged, "refs/remotes/origin/master") == ""
    with pytest.raises(RefError, match=f"{unmerged[:12]}.* is not reachable from master"):
        builder(line_origin, tmp_path).resolve(unmerged, go="local")
    assert builder(line_origin, tmp_path).resolve(c1, go="local").sha == c1  # cloned anew: the real line


# ---- a commit object replaced under its id: cloned anew, not failed for good -----------------------
def test_a_commit_replaced_under_its_id_is_cloned_anew_not_failed_for_good(line_origin, tmp_path, keyed):
    """review35e LOW: c1's object (no ref names it) rewritten as another valid commit: `rev-parse`
    re-hashes it and finds no commit, nothing else looks, and every keyed run naming c1 failed."""
    from test_trust_cache import _clone_git
    c1, c2 = line_origin.shas["c1"], line_origin.shas["c2"]
    first = builder(line_origin, tmp_path)
    first.resolve(c1, go="local")
    other = _clone_git(first.clone_dir, "cat-file", "commit", c2).encode() + b"\n"
    _replace_commit(first.clone_dir, c1, other)  # a valid commit body, under the wrong id
    for _ in range(2):
        assert builder(line_origin, tmp_path).resolve(c1, go="local").sha == c1


# ---- refs' public functions ----------------------------------------------------------------------
def test_no_module_calls_a_private_function_of_refs():
    import ast
    import refbench
    found = []
    for path in sorted(Path(refbench.__file__).parent.rglob("*.py")):
        tree = ast.parse(path.read_text())
        found += [f"{path.name}: refs.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                  and isinstance(n.value, ast.Name) and n.value.id == "refs" and n.attr.startswith("_")]
    assert found == []


# ---- an install's toolchain, reported from an unsealed field -----------------------------------------
def test_an_installs_toolchain_is_sealed_not_taken_from_the_record(tmp_path, monkeypatch):
    import json
    from refbench import implementations as impls
    from test_trust_walks import fake_registry
    impl, installers = fake_registry(tmp_path, monkeypatch)
    assert impls.install(impl, installers=installers).toolchain == "python3.11"
    record = impls.install_dir(impl) / "impl.json"
    doc = json.loads(record.read_text())
    record.write_text(json.dumps({**doc, "toolchain": "python3.13"}))  # the seal kept, the label changed
    assert impls.cached(impl) is None
    assert impls.install(impl, installers=installers).toolchain == "python3.11"


# ---- a go.mod above the temporary directory where refbench asks go ----------------------------------
def test_go_is_never_asked_inside_a_module_planted_above_its_scratch_directory(tmp_path):
    import shutil
    from refbench import toolchain as tc
    from refbench.errors import BuildError
    if not shutil.which("go"):
        from conftest import need
        need("go", "run `make setup`")
    (tmp_path / "go.mod").write_text("module example.com/planted\n\ngo 1.21\n")
    (tmp_path / "t").mkdir()
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": ""}
    with pytest.raises(BuildError, match=f"inside the Go module of {tmp_path / 'go.mod'}"):
        tc._run_go(["env", "GOMOD"], env, tmp=str(tmp_path / "t"))
    (tmp_path / "go.mod").unlink()
    assert tc._run_go(["env", "GOMOD"], env, tmp=str(tmp_path / "t")).strip() == os.devnull


# ---- writes through a planted link: the crash file and the toolchain listing's temporary file ------------
def test_a_crash_file_is_never_written_through_a_planted_crashes_link(tmp_path, monkeypatch):
    from refbench import cli
    elsewhere = tmp_path / "users-dir"
    elsewhere.mkdir()
    xdg = tmp_path / "xdg-cache"
    (xdg / "refbench").mkdir(parents=True)
    (xdg / "refbench" / "crashes").symlink_to(elsewhere)
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    monkeypatch.delenv("REFBENCH_CRASH_DIR", raising=False)
    saved = cli.save_traceback("Traceback: the run's own\n")
    assert os.listdir(elsewhere) == []
    assert saved is not None and saved.read_text() == "Traceback: the run's own\n"  # in the temp directory


def test_the_toolchain_listing_is_never_written_through_a_link_at_its_temporary_name(tmp_path):
    from refbench import toolchain as tc
    victim = tmp_path / "users-file"
    victim.write_text("mine\n")
    listing = tmp_path / "builds" / tc.LIST_FILE
    listing.parent.mkdir()
    for name in (f"{tc.LIST_FILE}.{os.getpid()}.tmp", f".{tc.LIST_FILE}.tmp-{os.getpid()}"):
        (listing.parent / name).symlink_to(victim)  # a restored link at each name a writer may use
    tc._write_listing(listing, 0.0, "linux-amd64", ())
    assert victim.read_text() == "mine\n"
    assert not listing.is_symlink() and '"platform": "linux-amd64"' in listing.read_text()


def test_a_prefix_names_no_commit_an_ancestor_replaced_under_its_id_routes_history_through(
        line_origin, tmp_path, monkeypatch):
    """review35f F2, the prefix side: refs._reached took reachability from git's walk, which read
    a replaced c1's planted parent (a commit the origin never had) without re-hashing it."""
    from test_trust_cache import _clone_git
    from test_trust_symref import _planted_commit
    monkeypatch.delenv("REFBENCH_CACHE_KEY_FILE", raising=False)
    c1 = line_origin.shas["c1"]
    first = builder(line_origin, tmp_path)
    first.resolve("v1.0.0", go="local")
    clone = first.clone_dir
    evil = _planted_commit(clone)
    body = _clone_git(clone, "cat-file", "commit", c1).encode() + b"\n"
    tree_and_parent, _, rest = body.partition(b"\nauthor ")
    _replace_commit(clone, c1, tree_and_parent + f"\nparent {evil}\nauthor ".encode() + rest)
    assert _clone_git(clone, "merge-base", "--is-ancestor", evil, "refs/remotes/origin/master") == ""
    with pytest.raises(RefError, match=f"ref not found: '{evil[:12]}'"):
        builder(line_origin, tmp_path).resolve(evil[:12], go="local")


# ---- fixtures: allocated zeros for a sparse spec, and an intact fixture read through a link ---------
def test_a_sparse_fixture_restored_as_allocated_zeros_is_made_again(tmp_path):
    """review35f F3: a fully allocated file of zeros (a non-sparse copy) passed as the sparse fixture,
    so the benchmark read a disk where the spec has holes, and the report said allocated: 0."""
    from refbench import fixtures as fx
    from refbench.config import FixtureSpec
    spec = FixtureSpec(kind="sparse", size=1 << 20, count=2)
    made = fx.ensure(spec, tmp_path)
    for name in ("tmp0", "tmp1"):
        (made.root / name).write_bytes(bytes(1 << 20))  # zeros, every block allocated
        assert os.lstat(made.root / name).st_blocks > 0
    marker = fx.marker_path(made.root)
    st = os.lstat(marker)
    os.utime(marker, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # restored: a marker this run never checked
    again = fx.ensure(spec, tmp_path)
    assert [os.lstat(again.root / n).st_blocks for n in ("tmp0", "tmp1")] == [0, 0]


def test_an_intact_fixture_behind_a_planted_fixtures_link_is_refused_not_read(tmp_path):
    """review35f F4: only the write side walked the cache through no link; an intact fixture (and
    its marker) behind `fixtures -> <another disk>` was read there."""
    from refbench import fixtures as fx
    from refbench.config import FixtureSpec
    spec = FixtureSpec(kind="random", size=10_000, count=2, seed=5)
    elsewhere = tmp_path / "another-disk"
    fx.ensure(spec, elsewhere)  # intact, with its marker
    cache = tmp_path / "builds"
    cache.mkdir()
    (cache / "fixtures").symlink_to(elsewhere / "fixtures")
    with pytest.raises(paths.CacheLinkError, match="fixtures is a symbolic link"):
        fx.ensure(spec, cache)


# ---- the sixth reading's HIGH and LOWs on the clone's refs ----------------------------------------------
def test_a_dangling_checkout_head_symref_makes_no_release_tag_of_the_checkouts_head(
        origin, tmp_path, keyed, monkeypatch):
    """review35f F7: the checkout-mode fetch's `+HEAD:refs/refbench/checkout-head` wrote through a
    planted, dangling `checkout-head -> refs/tags/v99.0.0`, making a plain tag at the checkout's
    HEAD after --prune had run: latest_release was HEAD, reported as v99.0.0."""
    from test_trust_cache import _clone_git
    monkeypatch.setenv("REFBENCH_DEFAULT_BRANCH", "master")  # the Action's event names it
    first = builder(origin, tmp_path, checkout=True)
    first.resolve("v1.0.0", go="local")
    head = first.clone_dir / "refs" / "refbench" / "checkout-head"
    _clone_git(first.clone_dir, "update-ref", "-d", "refs/refbench/checkout-head")
    head.parent.mkdir(parents=True, exist_ok=True)
    head.write_text("ref: refs/tags/v99.0.0\n")
    latest = builder(origin, tmp_path, checkout=True).resolve("latest_release", go="local")
    assert latest.display == "latest_release (v1.1.0)", latest


def test_a_planted_pull_ref_is_no_fetched_pr_a_prefix_may_be_reached_from(origin, tmp_path, monkeypatch):
    """review35f F5: the sweep kept every refs/refbench/pull/*, and a planted one reaching a planted
    commit let an unkeyed run take that commit by its prefix."""
    from test_trust_cache import _clone_git
    from test_trust_symref import _planted_commit
    monkeypatch.delenv("REFBENCH_CACHE_KEY_FILE", raising=False)
    first = builder(origin, tmp_path)
    first.resolve("v1.0.0", go="local")
    evil = _planted_commit(first.clone_dir)
    _clone_git(first.clone_dir, "update-ref", "refs/refbench/pull/999", evil)
    with pytest.raises(RefError, match=f"'{evil[:12]}' names {evil[:12]}, which no branch, tag or fetched PR"):
        builder(origin, tmp_path).resolve(evil[:12], go="local")


def test_a_ref_named_with_a_unicode_line_separator_is_swept_not_a_crash(origin, tmp_path):
    """review35f F6: str.splitlines broke for-each-ref's listing at U+2028, and every run failed
    with a ValueError (exit 3) before the sweep deleted anything."""
    from test_trust_cache import _clone_git
    first = builder(origin, tmp_path)
    first.resolve("v1.0.0", go="local")
    _clone_git(first.clone_dir, "update-ref", "refs/tags/x\u2028y", origin.shas["broken"])
    for _ in range(2):
        assert builder(origin, tmp_path).resolve("latest_release", go="local").display == "latest_release (v1.1.0)"


def test_a_commit_subject_with_a_unicode_line_separator_is_merged_code_all_the_same(tmp_path, keyed):
    """The line refuse_unmerged re-hashes is read one commit a row: str.splitlines broke a row at a
    subject's U+2028 and called a merged commit's history forged."""
    from origins import new_origin
    (tmp_path / "origin").mkdir()
    o = new_origin(tmp_path / "origin")
    o.commit("c0", {"go.mod": "module example.com/u\n\ngo 1.21\n"}, "c0", tags=["v1.0.0"])
    o.commit("c1", {"f": "1"}, "pasted\u2028text")
    o.commit("c2", {"f": "2"}, "c2")
    assert builder(o, tmp_path / "builds").resolve(o.shas["c0"], go="local").sha == o.shas["c0"]
