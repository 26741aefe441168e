"""The fifth reading's LOWs (issue 35, /work/wt/review35e.md), closed: each attack planted in a
throw-away cache, and what refbench must do instead of trusting it."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import run_cli
from refbench import paths
from test_builds import builder, origin, run, target  # noqa: F401  (origin: a pytest fixture)


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
