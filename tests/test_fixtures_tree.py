"""Seeded random fixtures (`random`, `tree`): deterministic for a seed, incompressible, and with no
repeated 256 KiB chunk (kubo's default chunk): zero-filled or repeating files would collapse into a
few blocks and time nothing."""
from __future__ import annotations

import hashlib
import zlib
from pathlib import Path

import pytest

from refbench import fixtures as fx
from refbench.config import FixtureSpec
from refbench.units import parse_size

CHUNK = 256 * 1024


def tree(seed=1, dirs=3, count=6, depth=2, size="40K", fanout=True, rsize=True) -> FixtureSpec:
    return FixtureSpec("tree", parse_size(size), count, seed, dirs, depth, fanout, rsize)


def listing(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def chunks(root: Path, size: int = CHUNK) -> list[bytes]:
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            out += [data[i:i + size] for i in range(0, len(data), size)]
    return out


@pytest.mark.parametrize("spec", [
    FixtureSpec("random", parse_size("300K"), 5, seed=7),
    tree(seed=7),
], ids=["random", "tree"])
def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path, spec):
    a = fx.ensure(spec, tmp_path / "a")
    b = fx.ensure(spec, tmp_path / "b")
    la, lb = listing(a.root), listing(b.root)
    assert la and la == lb
    other = fx.ensure(FixtureSpec(**{**spec.__dict__, "seed": 8}), tmp_path / "c")
    lo = listing(other.root)
    assert set(la.values()).isdisjoint(lo.values())


def test_random_files_have_no_repeated_chunk_and_do_not_compress(tmp_path):
    # 3 files x 1.25 MiB: 15 chunks of 256 KiB, across files and across the 4 MiB write blocks
    f = fx.ensure(FixtureSpec("random", parse_size("1280K"), 3, seed=3), tmp_path)
    cs = chunks(f.root)
    assert len(cs) == 15 and len(set(cs)) == len(cs)
    assert all(c.count(0) < len(c) // 100 for c in cs)  # nothing like a zero-filled file
    data = b"".join(cs)
    assert len(zlib.compress(data, 6)) > 0.99 * len(data)
    # and smaller chunkers find no repeats either (size-65536, and 4 KiB)
    for size in (65536, 4096):
        small = chunks(f.root, size)
        assert len(set(small)) == len(small)


def test_large_file_blocks_beyond_one_write_block_are_distinct(tmp_path):
    # 9 MiB: three 4 MiB write blocks, each a window of the same pool plus its own addend
    f = fx.ensure(FixtureSpec("random", parse_size("9M"), 1, seed=11), tmp_path)
    cs = chunks(f.root)
    assert len(cs) == 36 and len(set(cs)) == 36
    assert f.allocated == f.bytes == 9 * 1024 * 1024


def test_tree_shape_follows_go_random_files(tmp_path):
    spec = tree(seed=5, dirs=4, count=35, depth=5, size="4K")
    plan = fx._tree_plan(spec)
    f = fx.ensure(spec, tmp_path)
    files = [p for p in f.root.rglob("*") if p.is_file()]
    assert len(files) == f.files == len(plan)
    assert sum(p.stat().st_size for p in files) == f.bytes
    for p in files:
        rel = p.relative_to(f.root)
        assert len(rel.parts) - 1 <= spec.depth  # at most `depth` levels of sub-directories
        assert 1 <= p.stat().st_size <= spec.size  # random sizes, never empty, never above the max
    for d in [f.root, *[p for p in f.root.rglob("*") if p.is_dir()]]:
        kids = list(d.iterdir())
        assert sum(k.is_file() for k in kids) <= spec.count
        assert sum(k.is_dir() for k in kids) <= spec.dirs
    # random fan-out and random sizes really vary
    per_dir = {len([k for k in d.iterdir() if k.is_file()]) for d in [f.root, *f.root.rglob("dir*")]}
    assert len(per_dir) > 3
    assert len({p.stat().st_size for p in files}) > len(files) // 2
    # the shape depends on the seed
    assert fx._tree_plan(tree(seed=6, dirs=4, count=35, depth=5, size="4K")) != plan


def test_tree_without_random_fanout_is_full(tmp_path):
    spec = tree(seed=1, dirs=2, count=3, depth=2, size="1K", fanout=False, rsize=False)
    f = fx.ensure(spec, tmp_path)
    # 1 + 2 + 4 directories, 3 files of exactly 1 KiB each
    assert f.files == 7 * 3
    assert {p.stat().st_size for p in f.root.rglob("*") if p.is_file()} == {1024}


def test_tree_files_are_distinct(tmp_path):
    f = fx.ensure(tree(seed=2, dirs=3, count=10, depth=3, size="300K"), tmp_path)
    digests = list(listing(f.root).values())
    assert len(digests) > 20 and len(set(digests)) == len(digests)
    cs = chunks(f.root)
    assert len(set(cs)) == len(cs)


def test_interrupted_generation_is_redone(tmp_path):
    spec = tree(seed=4)
    f = fx.ensure(spec, tmp_path)
    before = listing(f.root)
    fx.marker_path(f.root).unlink()
    victim = next(p for p in f.root.rglob("*") if p.is_file())
    victim.write_bytes(b"half-written")
    again = fx.ensure(spec, tmp_path)
    assert listing(again.root) == before
