"""Sparse fixtures, the fixture cache and the free-disk check."""
import os

import pytest

from refbench import fixtures as fx
from refbench.config import FixtureSpec
from refbench.errors import RunError


def test_sparse_files_have_size_but_no_blocks(tmp_path):
    spec = FixtureSpec(kind="sparse", size=1 << 20, count=50)
    f = fx.ensure(spec, tmp_path)
    names = sorted(os.listdir(f.root))
    assert len(names) == 50 and "tmp0" in names and "tmp49" in names
    for n in names:
        st = os.stat(f.root / n)
        assert st.st_size == 1 << 20
        assert st.st_blocks == 0  # sparse, as truncate makes them
    assert (f.files, f.bytes, f.allocated) == (50, 50 << 20, 0)


def test_fixture_is_cached_and_marker_sits_outside_the_directory(tmp_path):
    spec = FixtureSpec(kind="sparse", size=4096, count=3)
    f = fx.ensure(spec, tmp_path)
    assert fx.marker_path(f.root).exists()
    assert sorted(os.listdir(f.root)) == ["tmp0", "tmp1", "tmp2"]  # nothing a glob would pick up
    mtime = os.stat(f.root / "tmp0").st_mtime_ns
    again = fx.ensure(spec, tmp_path)
    assert again.root == f.root and os.stat(f.root / "tmp0").st_mtime_ns == mtime


def test_interrupted_generation_is_redone(tmp_path):
    spec = FixtureSpec(kind="sparse", size=10, count=4)
    root = tmp_path / "fixtures" / spec.key()
    root.mkdir(parents=True)
    (root / "tmp0").write_text("partial")  # no marker: generation never finished
    f = fx.ensure(spec, tmp_path)
    assert sorted(os.listdir(f.root)) == ["tmp0", "tmp1", "tmp2", "tmp3"]
    assert os.stat(f.root / "tmp0").st_size == 10


def test_random_fixture_is_seeded(tmp_path):
    a = fx.ensure(FixtureSpec(kind="random", size=300_000, count=2, seed=7), tmp_path / "a")
    b = fx.ensure(FixtureSpec(kind="random", size=300_000, count=2, seed=7), tmp_path / "b")
    c = fx.ensure(FixtureSpec(kind="random", size=300_000, count=2, seed=8), tmp_path / "c")
    data = (a.root / "tmp0").read_bytes()
    assert len(data) == 300_000 and data == (b.root / "tmp0").read_bytes()
    assert data != (c.root / "tmp0").read_bytes() and data != (a.root / "tmp1").read_bytes()


def test_disk_check_refuses_with_numbers(tmp_path):
    with pytest.raises(RunError) as e:
        fx.check_disk(tmp_path / "not" / "yet", 1 << 50, "scenario 'huge'")
    msg = str(e.value)
    assert "not enough disk space" in msg and "scenario 'huge' needs 1024.0 TiB" in msg and "free" in msg
    fx.check_disk(tmp_path, 1, "a byte")  # fine
