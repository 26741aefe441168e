"""pins.install places a pinned tool under a cache root a cache restore may have written (review F4, F5).

Each test plants in a throw-away XDG_CACHE_HOME what a restored cache could hold where the
pinned hyperfine goes (pins.cached_path), and installs it from a fake wheel pinned by its hash
(test_hyperfine's _pinned), so no network and no Go build is needed. A planted directory failed
every `refbench setup` with exit 3 after its build (F4); a planted link made setup delete and
write files outside the cache (F5). What a restore left in the tool's place goes, with a
warning; a link is removed, never followed; any other failure to place is one line (exit 2).
"""
from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from refbench import hyperfine, paths, pins
from refbench.errors import RefbenchError
from test_hyperfine import _fake_hyperfine, _pinned

OUTSIDE_BYTES = b"the user's own file, outside the cache\n"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A throw-away cache root (the restore's target), pinned tools required to be the pinned ones."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(pins.UNPINNED_ENV, raising=False)
    root = tmp_path / "xdg" / "refbench"
    root.mkdir(parents=True)
    return root


@pytest.fixture
def wheel(tmp_path) -> bytes:
    """The pinned hyperfine is a fake binary its fake wheel holds; its bytes."""
    binary = _fake_hyperfine(tmp_path / "wheel", hyperfine.PINNED_VERSION)

    def from_wheel(tool: str, out_dir: Path) -> Path:
        (out_dir / tool).write_bytes(binary.read_bytes())
        return out_dir / tool
    with pins.installed(_pinned(binary, from_wheel=from_wheel)):
        yield binary.read_bytes()


@pytest.fixture
def outside(tmp_path) -> Path:
    """A directory of the user's outside the cache, holding bin/hyperfine: what a planted link names."""
    d = tmp_path / "elsewhere"
    (d / "bin").mkdir(parents=True)
    (d / "bin" / "hyperfine").write_bytes(OUTSIDE_BYTES)
    return d


def _entry(cache: Path) -> Path:
    """The pinned hyperfine's own directory under the cache root (hyperfine-2.0.0-wheel-<platform>)."""
    return cache / pins.cached_path("hyperfine").relative_to(cache).parts[0]


def _assert_placed(cache: Path, data: bytes) -> Path:
    """The pinned bytes are the regular file at cached_path, reached through no link from the root."""
    dest = pins.cached_path("hyperfine")
    assert dest.is_relative_to(cache) and not dest.is_symlink() and dest.is_file(), dest
    assert dest.read_bytes() == data and os.access(dest, os.X_OK)
    assert not any((cache / p).is_symlink() for p in dest.relative_to(cache).parents)
    assert pins.verify("hyperfine", dest) == dest  # what tools.find_tool and hyperfine.locate check at use
    return dest


def _assert_untouched(outside: Path) -> None:
    assert sorted(str(p.relative_to(outside)) for p in outside.rglob("*")) == ["bin", "bin/hyperfine"]
    assert (outside / "bin" / "hyperfine").read_bytes() == OUTSIDE_BYTES


def test_a_directory_planted_at_the_pinned_file_is_replaced_by_it(cache, wheel, caplog):
    """F4: `mkdir -p .../bin/hyperfine/x` made os.replace fail with IsADirectoryError (exit 3)
    after the build, in every job until the cache was removed by hand."""
    dest = pins.cached_path("hyperfine")
    (dest / "x").mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="refbench.pins"):
        assert pins.install("hyperfine", "") == dest
    _assert_placed(cache, wheel)
    assert "is a directory, not the pinned hyperfine file" in caplog.text


def test_a_file_planted_at_the_pinned_tools_directory_is_replaced(cache, wheel):
    """F4's cousin: a file where the tool's directory goes made mkdir(parents=True) fail with
    FileExistsError (exit 3)."""
    _entry(cache).write_bytes(b"planted\n")
    assert pins.install("hyperfine", "") == pins.cached_path("hyperfine")
    _assert_placed(cache, wheel)


@pytest.mark.parametrize("at", ["the tool's directory", "its bin"])
def test_a_link_on_the_way_to_the_pinned_file_is_never_followed(cache, wheel, outside, at, caplog):
    """F5: a restored `hyperfine-2.0.0-wheel-linux-amd64 -> /elsewhere` made setup delete
    /elsewhere/bin/hyperfine ("refusing ... removing it and building again") and write the pinned
    bytes there. The link goes (never what it names) and the tool is placed inside the cache."""
    if at == "its bin":
        (_entry(cache)).mkdir()
        (_entry(cache) / "bin").symlink_to(outside / "bin")
    else:
        _entry(cache).symlink_to(outside)
    with caplog.at_level(logging.WARNING, logger="refbench.pins"):
        assert pins.install("hyperfine", "") == pins.cached_path("hyperfine")
    _assert_untouched(outside)
    _assert_placed(cache, wheel)
    assert "is a symbolic link" in caplog.text and "own directory" in caplog.text


def test_a_link_at_the_pinned_file_itself_leaves_what_it_names_alone(cache, wheel, tmp_path):
    """A link at cached_path to a file outside the cache was followed: a file holding the pinned
    bytes there was taken as the install (its path returned, the link left), one not holding them
    was checked by reading it. The link goes and the pinned file is placed in its stead; the file
    it named keeps its bytes and its mode."""
    elsewhere = tmp_path / "users-hyperfine"
    elsewhere.write_bytes(wheel)
    elsewhere.chmod(0o644)
    dest = pins.cached_path("hyperfine")
    dest.parent.mkdir(parents=True)
    dest.symlink_to(elsewhere)
    assert pins.install("hyperfine", "") == dest
    _assert_placed(cache, wheel)
    assert elsewhere.read_bytes() == wheel and (elsewhere.stat().st_mode & 0o777) == 0o644


def test_a_fifo_at_the_pinned_file_or_linked_from_it_blocks_nothing(cache, wheel, tmp_path):
    """A FIFO, or a link to one outside, is never opened (lstat first): removed and replaced.
    (A guard: the old code replaced both too, with a rename.)"""
    dest = pins.cached_path("hyperfine")
    dest.parent.mkdir(parents=True)
    os.mkfifo(dest)
    assert pins.install("hyperfine", "") == dest
    _assert_placed(cache, wheel)
    fifo = tmp_path / "users-fifo"
    os.mkfifo(fifo)
    dest.unlink()
    dest.symlink_to(fifo)
    assert pins.install("hyperfine", "") == dest
    _assert_placed(cache, wheel)
    assert fifo.is_fifo()


def test_a_link_at_the_cache_root_is_refused_in_one_line(tmp_path, monkeypatch, wheel, outside):
    """The cache root itself is where the user named it: a link there is refused, never followed
    (paths.settled_cache_dir), and nothing is written through it."""
    (tmp_path / "xdg").mkdir()
    (tmp_path / "xdg" / "refbench").symlink_to(outside)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with pytest.raises(paths.CacheLinkError, match="is a symbolic link") as got:
        pins.install("hyperfine", "")
    assert "\n" not in str(got.value)
    _assert_untouched(outside)


def test_an_oserror_while_placing_is_one_line_naming_the_tool_and_its_path(cache, tmp_path):
    """(d) What the cache cannot take (here a rename across file systems, as a restore's odd mount
    would refuse one) is a RefbenchError (exit 2) naming the tool and where it goes, not an
    OSError (exit 3)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(cache).st_dev:
        pytest.skip("needs /dev/shm on a file system of its own")
    with tempfile.TemporaryDirectory(dir=shm) as away:
        binary = _fake_hyperfine(Path(away), hyperfine.PINNED_VERSION)
        with pins.installed(_pinned(binary, from_wheel=lambda tool, out_dir: binary)):
            with pytest.raises(RefbenchError, match="cannot place the pinned hyperfine at .*bin/hyperfine") as got:
                pins.install("hyperfine", "")
    assert "\n" not in str(got.value) and not isinstance(got.value, OSError)
    assert not os.path.lexists(pins.cached_path("hyperfine"))


class _FakeGo(pins.GoRunner):
    """A go whose `install` writes `data` as the binary (GOBIN): no Go build, no toolchain check."""

    def __init__(self, data: bytes):
        self.data = data

    def version(self, env: dict) -> str:
        return pins.TOOLS_GO

    def run(self, argv, **kw):
        (Path(kw["env"]["GOBIN"]) / "minio").write_bytes(self.data)
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_a_directory_planted_at_a_go_tools_file_is_replaced_by_it(cache, monkeypatch):
    """The Go tools' files sit right under the cache root: a directory there is removed the same way."""
    monkeypatch.setenv("GOMODCACHE", str(cache.parent / "gomod"))  # no cache of the user's is named
    monkeypatch.setenv("GOCACHE", str(cache.parent / "gocache"))
    data = b"#!/bin/sh\necho minio\n"
    pin = pins.Pin("minio", pins.version_of("minio"), pins.TOOLS_GO, pins.current_platform(),
                   hashlib.sha256(data).hexdigest())
    dest = pins.cached_path("minio")
    (dest / "x").mkdir(parents=True)
    with pins.installed(pins.Pinning(table=(pin,))):
        assert pins.install("minio", "go", runner=_FakeGo(data)) == dest
        assert pins.verify("minio", dest) == dest
    assert not dest.is_symlink() and dest.read_bytes() == data
