"""Input files: sparse (truncate-style), seeded random bytes, seeded random directory trees.

Generated once per spec into ``<cache>/fixtures/<spec-key>/`` and reused across refs and runs;
a ``.complete`` marker is written last so an interrupted generation is redone, not trusted.

Random content is incompressible and not dedupable (kubo turns zero-filled files into one block),
and is produced at disk speed: one random pool per spec from numpy's Philox generator, and each
4 MiB block of each file is a window of the pool plus a distinct 64-bit addend per (file, block),
so no two blocks or chunks repeat while the generator runs once, not once per byte.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import paths, results
from .config import FixtureSpec
from .units import human_bytes
from .errors import RunError

BLOCK = 4 * 1024 * 1024  # bytes written per call
POOL = 64 * 1024 * 1024  # random pool per spec
_ODD = np.uint64(0x9E3779B97F4A7C15)  # golden-ratio odd constant: k*_ODD differs for every k < 2**64


@dataclass(frozen=True)
class FixtureFiles:
    spec: FixtureSpec
    root: Path  # directory holding the files
    files: int
    bytes: int  # apparent size, all files
    allocated: int  # bytes actually taking disk space

    @property
    def first_file(self) -> Path:
        return self.root / _file_name(0) if self.spec.kind != "tree" else self.root

    def record(self) -> results.Fixture:
        """The fixture as the results file holds it (a tree's shape only for trees)."""
        tree = self.spec.kind == "tree"
        return results.Fixture(
            kind=self.spec.kind, size=self.spec.label_size, size_bytes=self.spec.size, count=self.spec.count,
            files=self.files, bytes=self.bytes, seed=self.spec.seed, path=str(self.root),
            dirs=self.spec.dirs if tree else None, depth=self.spec.depth if tree else None,
            random_fanout=self.spec.random_fanout if tree else None,
            random_size=self.spec.random_size if tree else None)


def _file_name(i: int) -> str:
    return f"tmp{i}"  # as s5cmd's bench names them


def planned_bytes(spec: FixtureSpec, plan: list[tuple[str, int]] | None = None) -> tuple[int, int, int]:
    """(files, apparent bytes, bytes that will be allocated on disk) without writing anything."""
    if spec.kind == "tree":
        files = [size for _, size in (plan if plan is not None else _tree_plan(spec))]
        total = sum(files)
        return len(files), total, total
    total = spec.size * spec.count
    return spec.count, total, (0 if spec.kind == "sparse" else total)


def fixture_dir(spec: FixtureSpec, cache_dir: Path) -> Path:
    """Where a fixture lives in the build cache: one directory per spec."""
    return Path(cache_dir) / "fixtures" / spec.key()


def planned(spec: FixtureSpec, cache_dir: Path) -> FixtureFiles:
    """The fixture as `ensure` makes it, with nothing written (what a dry run shows)."""
    files, total, allocated = planned_bytes(spec)
    return FixtureFiles(spec, fixture_dir(spec, cache_dir), files, total, allocated)


def ensure(spec: FixtureSpec, cache_dir: Path) -> FixtureFiles:
    """Create the fixture if it is not cached yet; return where it is."""
    root = fixture_dir(spec, cache_dir)
    marker = marker_path(root)
    plan = _tree_plan(spec) if spec.kind == "tree" else None
    files, total, allocated = planned_bytes(spec, plan)
    made = FixtureFiles(spec, root, files, total, allocated)
    if marker.exists():
        return made
    # two runs with a cold cache must not delete each other's half-written fixture: one writes it
    # (into a directory of its own, renamed into place when complete) while the other waits
    with paths.locked(root.with_name(root.name + ".lock")):
        if marker.exists():  # the other run made it while this one waited
            return made
        tmp = root.with_name(f"{root.name}.tmp-{os.getpid()}")
        for d in (tmp, root):
            if d.exists():
                shutil.rmtree(d)
        tmp.mkdir()
        if spec.kind == "sparse":
            write_sparse(tmp, spec.size, spec.count)
        elif spec.kind == "random":
            write_random(tmp, spec.size, spec.count, spec.seed)
        else:
            write_tree(tmp, spec, plan)
        tmp.rename(root)
        marker.write_text(json.dumps({"files": files, "bytes": total}))
    return made


def marker_path(root: Path) -> Path:
    """Written last, beside (not inside) the fixture directory, so globs over it never see it."""
    return root.with_name(root.name + ".complete")


def write_sparse(root: Path, size: int, count: int) -> None:
    """``truncate -s SIZE`` for COUNT files, in this one process (no process per file)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(count):
            fd = os.open(_file_name(i), flags, 0o644, dir_fd=dfd)
            try:
                os.ftruncate(fd, size)
            finally:
                os.close(fd)
    finally:
        os.close(dfd)


class RandomWriter:
    """Seeded, incompressible, non-repeating bytes at memory speed (see module docstring)."""

    def __init__(self, seed: int, pool_bytes: int = POOL):
        words = pool_bytes // 8
        self.pool = np.random.Generator(np.random.Philox(seed)).integers(
            0, np.iinfo(np.uint64).max, size=words + BLOCK // 8, dtype=np.uint64, endpoint=True)
        self.words = words
        self.buf = np.empty(BLOCK // 8, dtype=np.uint64)
        self.counter = 0

    def write(self, fh, nbytes: int, stream: int) -> None:
        """Write nbytes for the given stream (file) number."""
        block_no = 0
        while nbytes > 0:
            n = min(nbytes, BLOCK)
            nw = (n + 7) // 8
            # a different window of the pool for each (stream, block), plus a distinct addend
            key = (stream * 1_000_003 + block_no) & 0xFFFFFFFFFFFF
            start = (key * 7919 * 8) % self.words
            addend = np.uint64((key + 1) * int(_ODD) & 0xFFFFFFFFFFFFFFFF)
            out = self.buf[:nw]
            np.add(self.pool[start:start + nw], addend, out=out)
            fh.write(memoryview(out).cast("B")[:n])
            nbytes -= n
            block_no += 1


def write_random(root: Path, size: int, count: int, seed: int) -> None:
    gen = RandomWriter(seed, pool_bytes=min(POOL, max(1 << 20, size * count)))
    for i in range(count):
        with open(root / _file_name(i), "wb", buffering=0) as fh:
            gen.write(fh, size, i)


def _tree_plan(spec: FixtureSpec) -> list[tuple[str, int]]:
    """(relative path, size) of every file of a go-random-files style tree, deterministic for a seed."""
    rng = np.random.Generator(np.random.Philox(spec.seed))
    out: list[tuple[str, int]] = []

    def fanout(n: int) -> int:
        return int(rng.integers(1, n, endpoint=True)) if (spec.random_fanout and n > 0) else n

    def size() -> int:
        return int(rng.integers(1, spec.size, endpoint=True)) if (spec.random_size and spec.size > 0) else spec.size

    def walk(rel: str, level: int) -> None:
        for f in range(fanout(spec.count)):
            out.append((f"{rel}file{f}" if not rel else f"{rel}/file{f}", size()))
        if level < spec.depth:
            for d in range(fanout(spec.dirs)):
                walk(f"{rel}/dir{d}" if rel else f"dir{d}", level + 1)

    walk("", 0)
    return out


def write_tree(root: Path, spec: FixtureSpec, plan: list[tuple[str, int]] | None = None) -> None:
    plan = plan if plan is not None else _tree_plan(spec)
    gen = RandomWriter(spec.seed, pool_bytes=min(POOL, max(1 << 20, sum(s for _, s in plan))))
    made = set()
    for i, (rel, size) in enumerate(plan):
        path = root / rel
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        with open(path, "wb", buffering=0) as fh:
            gen.write(fh, size, i)


def check_disk(where: Path, need: int, what: str) -> None:
    """Refuse early, with the numbers, when the disk cannot hold what a run will write."""
    probe = Path(where)
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if need > free:
        raise RunError(f"not enough disk space in {probe}: {what} needs {human_bytes(need)}, "
                       f"{human_bytes(free)} free (use --only, --quick, or -l/--builds-dir elsewhere)")
