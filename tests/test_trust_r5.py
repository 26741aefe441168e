"""The fifth reading of the trust boundary (issue 35, /work/wt/review35e.md): each attack planted in a
throw-away cache, and what refbench must do instead of trusting it."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from refbench import fixtures as fx, paths
from refbench.config import FixtureSpec
from refbench.errors import BuildError
from test_builds import builder, origin, run  # noqa: F401  (origin: a pytest fixture)


def _next_run() -> fx.Verifications:
    """A later refbench run: a new process, which has checked no fixture yet."""
    return fx.Verifications()


def _genuine(spec: FixtureSpec, where: Path) -> dict[str, bytes]:
    """Every file of the fixture `spec` makes in a fresh cache, by relative path."""
    root = fx.ensure(spec, where).root
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ---- fixtures: trusted by their .complete marker alone (HIGH) --------------------------------------
def test_planted_small_files_in_a_random_fixture_are_made_again(tmp_path):
    spec = FixtureSpec(kind="random", size=300_000, count=3, seed=5)
    want = _genuine(spec, tmp_path / "fresh")
    made = fx.ensure(spec, tmp_path / "cache")
    for rel in want:  # a restored entry: the marker kept, every file 10 zero bytes
        (made.root / rel).write_bytes(bytes(10))
    again = fx.ensure(spec, tmp_path / "cache", _next_run())
    assert {rel: (again.root / rel).read_bytes() for rel in want} == want


def test_same_size_files_with_other_bytes_are_made_again(tmp_path):
    spec = FixtureSpec(kind="tree", size=20_000, count=3, dirs=2, depth=2, seed=9)
    want = _genuine(spec, tmp_path / "fresh")
    made = fx.ensure(spec, tmp_path / "cache")
    rel = sorted(want)[-1]
    (made.root / rel).write_bytes(bytes(len(want[rel])))  # zeros kubo would deduplicate, same size
    again = fx.ensure(spec, tmp_path / "cache", _next_run())
    assert (again.root / rel).read_bytes() == want[rel]


def test_a_link_an_extra_file_and_a_fifo_in_a_fixture_are_made_again(tmp_path):
    spec = FixtureSpec(kind="sparse", size=4096, count=3)
    made = fx.ensure(spec, tmp_path)
    (made.root / "tmp0").unlink()
    (made.root / "tmp0").symlink_to("/dev/zero")
    os.mkfifo(made.root / "tmp1.fifo")
    (made.root / "tmp1").unlink()
    os.mkfifo(made.root / "tmp1")  # read, it would block the run for good
    (made.root / "extra").write_bytes(b"x" * 4096)  # s5cmd uploads every file of the directory
    again = fx.ensure(spec, tmp_path, _next_run())
    assert sorted(os.listdir(again.root)) == ["tmp0", "tmp1", "tmp2"]
    for name in ("tmp0", "tmp1", "tmp2"):
        st = os.lstat(again.root / name)
        assert st.st_size == 4096 and st.st_blocks == 0 and not os.path.islink(again.root / name)


def test_a_sparse_file_filled_with_data_is_made_again(tmp_path):
    spec = FixtureSpec(kind="sparse", size=8192, count=2)
    made = fx.ensure(spec, tmp_path)
    (made.root / "tmp1").write_bytes(b"\1" * 8192)
    again = fx.ensure(spec, tmp_path, _next_run())
    assert (again.root / "tmp1").read_bytes() == bytes(8192)


def test_a_fifo_as_the_marker_does_not_block_the_run(tmp_path):
    spec = FixtureSpec(kind="sparse", size=10, count=2)
    made = fx.ensure(spec, tmp_path)
    marker = fx.marker_path(made.root)
    marker.unlink()
    os.mkfifo(marker)
    fx.ensure(spec, tmp_path, _next_run())
    assert marker.is_file() and not marker.is_fifo()


def test_a_planted_fixtures_link_is_refused_and_nothing_is_written_through_it(tmp_path):
    elsewhere = tmp_path / "users-files"
    elsewhere.mkdir()
    cache = tmp_path / "builds"
    cache.mkdir()
    (cache / "fixtures").symlink_to(elsewhere)
    with pytest.raises(paths.CacheLinkError):
        fx.ensure(FixtureSpec(kind="sparse", size=10, count=2), cache)
    assert os.listdir(elsewhere) == []


def test_an_intact_fixture_is_kept_and_checked_once_per_run(tmp_path):
    spec = FixtureSpec(kind="random", size=100_000, count=2, seed=3)
    made = fx.ensure(spec, tmp_path)
    mtime = os.stat(made.root / "tmp0").st_mtime_ns
    calls = []
    run = fx.Verifications(intact=lambda *a: calls.append(a) or fx.intact(*a))  # a later run, its check spied on
    fx.ensure(spec, tmp_path, run)
    fx.ensure(spec, tmp_path, run)
    assert len(calls) == 1 and os.stat(made.root / "tmp0").st_mtime_ns == mtime


# ---- a go.mod planted in the builds cache above the worktree (MEDIUM) -------------------------------
PRE_MODULES_MAIN = 'package main\n\nimport (\n\t"fmt"\n\n\t"example.com/greet"\n)\n\nfunc main() { fmt.Println(greet.Word()) }\n'


@pytest.fixture(scope="module")
def pre_modules_origin(tmp_path_factory):
    """A commit from before modules: no go.mod, an import the build cannot resolve on its own."""
    from origins import new_origin
    o = new_origin(tmp_path_factory.mktemp("pre-modules"))
    o.commit("gopath", {"main.go": PRE_MODULES_MAIN}, "before modules", tags=["v0.1.0"])
    return o


def _plant_module(where: Path) -> None:
    """A go.mod whose replace sends the commit's import to source planted beside it."""
    (where / "evil").mkdir(parents=True)
    (where / "go.mod").write_text("module example.com/evil\n\ngo 1.21\n\nrequire example.com/greet v0.0.0\n\n"
                                  "replace example.com/greet => ./evil\n")
    (where / "evil" / "go.mod").write_text("module example.com/greet\n\ngo 1.21\n")
    (where / "evil" / "greet.go").write_text('package greet\n\nfunc Word() string { return "PLANTED" }\n')


def test_a_go_mod_planted_above_the_worktree_in_the_cache_is_not_built_in(pre_modules_origin, tmp_path):
    b = builder(pre_modules_origin, tmp_path / "builds")
    resolved = b.resolve("v0.1.0")
    _plant_module(b.root)
    try:
        built = b.build(resolved, "v0.1.0")
    except BuildError as e:
        assert "go.mod" in (e.detail or str(e))  # the commit cannot build without a module: its own failure
    else:
        pytest.fail(f"a commit without go.mod was built in the planted module: it prints {run(built.binary)!r}")
    assert not (b.root / "go.mod").exists()  # removed from the cache, not saved with it again


def test_a_go_mod_above_the_builds_directory_fails_the_build_naming_it(pre_modules_origin, tmp_path):
    _plant_module(tmp_path)
    b = builder(pre_modules_origin, tmp_path / "builds")
    with pytest.raises(BuildError, match=f"module of {tmp_path / 'go.mod'}, above the builds directory"):
        b.build(b.resolve("v0.1.0"), "v0.1.0")
    assert (tmp_path / "go.mod").is_file()  # the user's: named, never removed


# ---- Builder.export copies a cached build's files through links (MEDIUM) ----------------------------
def test_export_copies_no_file_a_planted_link_in_a_cached_build_names(origin, tmp_path):
    secret = tmp_path / "checkout-config"
    secret.write_text("AUTHORIZATION: basic c2VjcmV0LXRva2Vu\n")  # a persisted checkout token, say
    b = builder(origin, tmp_path / "builds")
    first = b.build(b.resolve("v1.1.0"), "v1.1.0")
    log_file = first.binary.parent / "build.log"
    log_file.unlink()
    log_file.symlink_to(secret)  # a restored cache: the sealed binary and record, build.log a link
    cached = builder(origin, tmp_path / "builds").build(first.ref, "v1.1.0")
    assert not cached.built_now
    copied = b.export(cached, tmp_path / "out")
    out = copied.parent
    assert not any("c2VjcmV0LXRva2Vu" in p.read_text(errors="replace") for p in out.iterdir() if p.name != "hello")
    assert not any(p.is_symlink() for p in out.iterdir())
    assert sorted(p.name for p in out.iterdir()) == ["build.json", "hello"]


def test_export_refuses_a_cached_record_that_is_a_link(origin, tmp_path):
    b = builder(origin, tmp_path / "builds")
    built = b.build(b.resolve("v1.1.0"), "v1.1.0")
    meta = built.binary.parent / "build.json"
    kept = tmp_path / "record.json"
    meta.rename(kept)
    meta.symlink_to(kept)  # the same sealed record, reached through a link a cache could aim elsewhere
    with pytest.raises(BuildError, match="build.json"):
        b.export(built, tmp_path / "out")


# ---- a FIFO planted as a cached build.json or binary (LOW) ------------------------------------------
@pytest.mark.parametrize("where", ["this commit's build.json", "another commit's build.json", "the binary"])
def test_a_fifo_in_a_cached_build_does_not_block_the_build(origin, tmp_path, where):
    import subprocess
    import sys
    import textwrap
    builds = tmp_path / "builds"
    b = builder(origin, builds)
    resolved = b.resolve("v1.1.0")
    if where == "the binary":  # a genuine record, the binary a FIFO: hashing it would block
        built = b.build(resolved, "v1.1.0")
        built.binary.unlink()
        os.mkfifo(built.binary)
    else:
        d = b.build_dir(resolved.sha if where.startswith("this") else "0" * 40, resolved.toolchain)
        d.mkdir(parents=True)
        (d / "hello").write_bytes(b"")
        os.mkfifo(d / "build.json")
    # in a child, so a blocked read fails the test instead of hanging the suite
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_builds import builder, origin
        class O: path = {str(origin.path)!r}
        b = builder(O, {str(builds)!r})
        built = b.build(b.resolve("v1.1.0"), "v1.1.0")
        print("built", built.built_now)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "built True" in proc.stdout


# ---- a symbolic ref planted as a tag survives every fetch (review35e HIGH 0) ------------------------
def test_a_symbolic_tag_planted_in_a_cached_clone_is_not_latest_release(origin, tmp_path):
    """`fetch --prune` never prunes a symbolic ref, and the sweep kept everything under refs/tags/:
    a planted `refs/tags/v99.0.0 -> refs/remotes/origin/broken` (an unmerged branch the origin has)
    was latest_release, the one ref key-gate passes by name."""
    import subprocess
    b = builder(origin, tmp_path / "builds")
    assert b.resolve("latest_release").display.endswith("(v1.1.0)")
    clone = b.clone_dir
    subprocess.run(["git", "--git-dir", str(clone), "symbolic-ref", "refs/tags/v99.0.0", "refs/remotes/origin/broken"],
                   check=True, capture_output=True)
    again = builder(origin, tmp_path / "builds").resolve("latest_release")
    assert again.sha == origin.shas["two"] and "v99" not in again.display
