"""Issue 35: a link in an earlier component of a path refbench writes or removes in a cache
(<builds>/ipfs-states/<k1> -> $HOME, <builds>/<target> -> elsewhere) took the write or removal
outside the cache. Every such path now goes through paths.remove_tree / make_dirs / replace_file /
locked, which walk down from the cache root with O_NOFOLLOW and refuse a link (CacheLinkError).
Each test plants the link in a throw-away cache; each failed before (the commit says how)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from refbench import paths
from refbench.backends.snapshot import StateCache
from test_builds import builder, origin  # noqa: F401  (origin: a pytest fixture)


def _users_files(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "k2" / "layers" / "step").mkdir(parents=True)
    (home / "k2" / "layers" / "step" / "thesis.tex").write_text("years of work\n")
    (home / "k2" / "repo").mkdir()
    (home / "k2" / "repo" / "notes").write_text("more work\n")
    return home


def test_clearing_a_state_under_a_planted_link_removes_nothing_outside_the_cache(tmp_path):
    builds, home = tmp_path / "builds", _users_files(tmp_path)
    (builds / "ipfs-states").mkdir(parents=True)
    os.symlink(home, builds / "ipfs-states" / "k1")
    state = StateCache(builds / "ipfs-states" / "k1" / "k2")
    for where in (state.root / "layers", state.repo, state.layer("step")):
        with pytest.raises(paths.CacheLinkError, match="symbolic link"):
            StateCache.clear(where, builds)
    assert (home / "k2" / "layers" / "step" / "thesis.tex").read_text() == "years of work\n"
    assert (home / "k2" / "repo" / "notes").read_text() == "more work\n"


def test_a_state_is_neither_locked_nor_sealed_through_a_planted_link(tmp_path):
    builds, home = tmp_path / "builds", _users_files(tmp_path)
    (builds / "ipfs-states").mkdir(parents=True)
    os.symlink(home, builds / "ipfs-states" / "k1")
    where = builds / "ipfs-states" / "k1" / "k2" / "repo"
    with pytest.raises(paths.CacheLinkError):
        StateCache.claim(where, builds)
    with pytest.raises(paths.CacheLinkError):
        StateCache.mark(where, builds, template="t")
    assert sorted(os.listdir(home / "k2")) == ["layers", "repo"]
    assert os.listdir(home / "k2" / "repo") == ["notes"]


def test_the_states_directory_itself_as_a_link_is_refused(tmp_path):
    builds, home = tmp_path / "builds", _users_files(tmp_path)
    builds.mkdir()
    os.symlink(home, builds / "ipfs-states")
    with pytest.raises(paths.CacheLinkError):
        StateCache.clear(builds / "ipfs-states" / "k2" / "layers", builds)
    assert (home / "k2" / "layers" / "step" / "thesis.tex").exists()


def test_a_build_directory_under_a_planted_target_link_is_not_removed(origin, tmp_path):
    """<builds>/<target> -> elsewhere: a build not cached there was removed (rmtree) before the
    rebuild, whatever the link named."""
    builds = tmp_path / "builds"
    first = builder(origin, builds)
    built = first.build(first.resolve("v1.0.0"), "v1.0.0")
    elsewhere = tmp_path / "elsewhere"
    first.root.rename(elsewhere)
    os.symlink(elsewhere, first.root)
    victim = elsewhere / built.binary.parent.name
    (victim / "build.json").unlink()  # not cached: rebuilt, after its directory is removed
    (victim / "thesis.tex").write_text("years of work\n")
    with pytest.raises(paths.CacheLinkError, match="symbolic link"):
        again = builder(origin, builds)
        again.build(again.resolve("v1.0.0"), "v1.0.0")
    assert (victim / "thesis.tex").read_text() == "years of work\n"


def test_the_helpers_act_inside_the_cache_and_refuse_what_is_outside(tmp_path):
    cache = tmp_path / "cache"
    paths.replace_file(cache / "a" / "b" / "f", "hi", within=cache)
    assert (cache / "a" / "b" / "f").read_text() == "hi"
    with paths.locked(cache / "a" / "x.lock", within=cache):
        pass
    paths.remove_tree(cache / "a", cache)
    assert not (cache / "a").exists()
    paths.remove_tree(cache / "never-made", cache)  # absent: nothing to do
    with pytest.raises(paths.CacheLinkError, match="not inside the cache"):
        paths.remove_tree(tmp_path / "elsewhere", cache)
    os.symlink(tmp_path, cache / "link")
    paths.remove_tree(cache / "link", cache)  # the link itself goes, never what it names
    assert tmp_path.is_dir() and not os.path.lexists(cache / "link")


def test_a_go_work_planted_in_the_builds_directory_is_not_used(origin, tmp_path):
    """Go reads go.work in every parent of a build's directory, which is inside the cache: a planted
    one with a `replace` built the attacker's code (review35, HIGH); for the git source it failed
    every build, blaming the commit."""
    builds = tmp_path / "builds"
    b = builder(origin, builds)
    for where in (builds, b.root):
        (where / "go.work").write_text("go 1.21\n\nuse ./nowhere\n")
    built = b.build(b.resolve("v1.0.0"), "v1.0.0")
    assert built.built_now and built.binary.is_file()


def test_a_sealed_state_copied_into_another_slot_is_not_ready(tmp_path):
    """review35 MEDIUM: the seal did not say whose state it was; one sealed for one kubo binary or
    fixture, copied into another's slot, was ready there."""
    import shutil
    builds = tmp_path / "builds"
    mine = builds / "ipfs-states" / "k-old" / "k2" / "repo"
    (mine / "blocks").mkdir(parents=True)
    (mine / "blocks" / "b.data").write_bytes(b"block")
    StateCache.mark(mine, builds, template="t")
    assert StateCache.ready(mine, builds)
    other = builds / "ipfs-states" / "k-new" / "k2" / "repo"
    shutil.copytree(mine, other)
    assert not StateCache.ready(other, builds)
    assert StateCache.claim(other, builds) is not None  # rebuilt, not used


def test_a_sealed_layer_over_another_state_is_not_ready(tmp_path):
    """review35 MEDIUM: a layer's seal did not name the state below it. A restored cache could keep
    a layer a trusted run sealed over an earlier state and pair it with the current one (same slot,
    both seals valid): every GC run then measured a repo no recipe made."""
    import shutil
    builds = tmp_path / "builds"
    root = builds / "ipfs-states" / "k1" / "k2"
    base, layer = root / "repo", root / "layers" / "collected"
    (base / "blocks").mkdir(parents=True)
    (base / "blocks" / "b.data").write_bytes(b"first state")
    StateCache.mark(base, builds, template="t")
    (layer / "upper").mkdir(parents=True)
    (layer / "upper" / "gc.done").write_text("over the first state")
    StateCache.mark(layer, builds, template="t")
    assert StateCache.ready(layer, builds)
    kept = tmp_path / "kept-layer"
    shutil.copytree(layer, kept)
    # the state is rebuilt (its layers with it), then the old layer comes back from a cache
    shutil.rmtree(root)
    (base / "blocks").mkdir(parents=True)
    (base / "blocks" / "b.data").write_bytes(b"second state")
    StateCache.mark(base, builds, template="t")
    shutil.copytree(kept, layer)
    assert StateCache.ready(base, builds)
    assert not StateCache.ready(layer, builds)
    assert StateCache.claim(layer, builds) is not None  # rebuilt, not used


def test_an_implementations_install_replaces_a_link_at_its_slot_not_writing_through_it(tmp_path, monkeypatch):
    """Review35d LOW 12: implementations.install removed its slot with shutil.rmtree(ignore_errors),
    which silently leaves a link, then wrote the venv and its sealed impl.json through it."""
    from refbench import implementations as impls
    from test_trust_walks import fake_registry
    impl, installers = fake_registry(tmp_path, monkeypatch)
    slot = impls.install_dir(impl)
    elsewhere = tmp_path / "users-dir"
    elsewhere.mkdir()
    slot.parent.mkdir(parents=True)
    os.symlink(elsewhere, slot)
    done = impls.install(impl, installers=installers)
    assert list(elsewhere.iterdir()) == []  # nothing written through the link
    assert not slot.is_symlink() and slot.is_dir() and done.program.read_text().endswith("echo pinned\n")
    assert impls.cached(impl) is not None  # sealed where it was written
