"""Input files: sparse (truncate-style), seeded random bytes, seeded random directory trees.

Generated once per spec into ``<cache>/fixtures/<spec-key>/`` and reused across refs and runs;
a ``.complete`` marker is written last so an interrupted generation is redone. The marker vouches
for nothing else: the builds cache may be restored from an entry anyone wrote (refbench.trust), and
a planted fixture (10-byte files, zeros kubo deduplicates, a link to /dev/zero) would be what every
build is timed on while the report states the planned size. So a cached fixture is compared, once
per run, with what its generator makes (intact): the exact set of regular files, their sizes, and
their bytes, regenerated at memory speed (sparse files: no data, SEEK_DATA; else zeros read). A
fixture is a function of its spec, so no seal or key is needed, and comparing costs one read of it.

Random content is incompressible and not dedupable (kubo turns zero-filled files into one block),
and is produced at disk speed: one random pool per spec from numpy's Philox generator, and each
4 MiB block of each file is a window of the pool plus a distinct 64-bit addend per (file, block),
so no two blocks or chunks repeat while the generator runs once, not once per byte.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from . import paths, results
from .config import FixtureSpec
from .units import human_bytes
from .errors import RunError

log = logging.getLogger(__name__)
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


def ensure(spec: FixtureSpec, cache_dir: Path, verifications: "Verifications | None" = None) -> FixtureFiles:
    """Create the fixture unless an intact one is cached (intact); return where it is. Every write
    and removal goes through no link in the cache (paths.*, within the cache). `verifications`: what this
    run found intact (default: this process's, PROCESS_VERIFICATIONS; a test's new run passes a new one)."""
    verifications = verifications or PROCESS_VERIFICATIONS
    root = fixture_dir(spec, cache_dir)
    marker = marker_path(root)
    plan = _tree_plan(spec) if spec.kind == "tree" else None
    files, total, allocated = planned_bytes(spec, plan)
    made = FixtureFiles(spec, root, files, total, allocated)
    if _trusted(spec, root, plan, verifications, cache_dir):
        return made
    # two runs with a cold cache must not delete each other's half-written fixture: one writes it
    # (into a directory of its own, renamed into place when complete) while the other waits
    with paths.locked(root.with_name(root.name + ".lock"), within=cache_dir):
        if _trusted(spec, root, plan, verifications, cache_dir):  # the other run made it while this one waited
            return made
        tmp = root.with_name(f"{root.name}.tmp-{os.getpid()}")
        for d in (marker, tmp, root):
            paths.remove_tree(d, cache_dir)
        paths.make_dirs(tmp, cache_dir)
        if spec.kind == "sparse":
            write_sparse(tmp, spec.size, spec.count)
        elif spec.kind == "random":
            write_random(tmp, spec.size, spec.count, spec.seed)
        else:
            write_tree(tmp, spec, plan)
        tmp.rename(root)
        paths.replace_file(marker, json.dumps({"files": files, "bytes": total}), within=cache_dir)
        verifications.seen.add(_identity(marker))  # written by this run: no need to read it back
    return made


class Verifications:
    """One run's verifications of cached fixtures: the markers (path, inode, mtime) whose fixture it found
    intact or wrote, each fixture verified once per run, and the verifier itself (`intact`; a test's spy
    passes its own). A process is one run: ensure's default is the process's (PROCESS_VERIFICATIONS)."""

    def __init__(self, intact: Callable[..., str | None] | None = None):
        self.seen: set[tuple] = set()
        self.intact = intact  # None: fixtures.intact


PROCESS_VERIFICATIONS = Verifications()  # this process's run


def _identity(marker: Path) -> tuple:
    st = os.lstat(marker)
    return (str(marker), st.st_ino, st.st_mtime_ns)


def _trusted(spec: FixtureSpec, root: Path, plan: list[tuple[str, int]] | None, verifications: Verifications,
             cache_dir: Path) -> bool:
    """Whether the cached fixture at `root` is complete and intact, asked once per marker and run;
    a fixture with a marker that is not intact is logged (then made again). Reached through no
    link in the cache (paths.verified): a planted `fixtures -> <another disk>` holding an intact
    fixture would have every step read its input there, and the timings with it (review35f F4)."""
    marker = paths.verified(marker_path(root), cache_dir)
    paths.verified(root, cache_dir)
    try:
        st = os.lstat(marker)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode):
        log.warning("fixture %s: its marker %s is not a file; generating it again", root, marker)
        return False
    ident = _identity(marker)
    if ident in verifications.seen:
        return True
    why = (verifications.intact or intact)(spec, root, plan)
    if why:
        log.warning("cached fixture %s is not what its spec makes: %s; generating it again", root, why)
        return False
    verifications.seen.add(ident)
    return True


def expected_files(spec: FixtureSpec, plan: list[tuple[str, int]] | None = None) -> list[tuple[str, int]]:
    """(relative path, size) of every file the spec makes, in the order its generator writes them."""
    if spec.kind == "tree":
        return plan if plan is not None else _tree_plan(spec)
    return [(_file_name(i), spec.size) for i in range(spec.count)]


def intact(spec: FixtureSpec, root: Path, plan: list[tuple[str, int]] | None = None) -> str | None:
    """Why the fixture at `root` is not exactly what `spec`'s generator makes, or None when it is:
    a directory (not a link) holding the planned regular files and their directories and nothing
    else, each of its planned size with the generator's bytes. The bytes are made again at memory
    speed and compared, not hashed: a fixture is a function of its spec (module docstring). Files
    are opened with O_NOFOLLOW and O_NONBLOCK, so a planted link or FIFO is refused, never read."""
    want = expected_files(spec, plan)
    try:
        if not stat.S_ISDIR(os.lstat(root).st_mode):
            return f"{root} is not a directory"
        found = _entries(root)
    except OSError as e:
        return f"cannot list it: {e.strerror or e}"
    dirs = {os.path.dirname(rel) for rel, _ in want} - {""}
    dirs |= {str(p) for d in dirs for p in Path(d).parents} - {"."}
    expected = {rel: "file" for rel, _ in want} | {d: "dir" for d in dirs}
    for rel, kind in sorted(found.items()):
        if expected.get(rel) != kind:
            return f"it holds {rel} ({kind}), which the spec does not make"
    missing = sorted(set(expected) - set(found))
    if missing:
        return f"{missing[0]} is missing"
    gen = None
    if spec.kind != "sparse":
        gen = RandomWriter(spec.seed, pool_bytes=_pool_bytes(sum(size for _, size in want)))
    holes = spec.kind == "sparse" and makes_holes(root)
    for i, (rel, size) in enumerate(want):
        why = _file_differs(os.path.join(root, rel), size, None if gen is None else (gen, i), holes)
        if why:
            return f"{rel}: {why}"
    return None


def _entries(root: Path) -> dict[str, str]:
    """Every entry below `root` by relative path: 'dir', 'file' (regular), or what else it is (a
    link is listed, never followed). scandir's entry types need no stat per file (a million-file
    fixture); a directory it cannot list raises (OSError), never skipped."""
    found: dict[str, str] = {}
    todo = [("", str(root))]
    while todo:
        rel, full = todo.pop()
        with os.scandir(full) as it:
            for e in it:
                name = f"{rel}/{e.name}" if rel else e.name
                if e.is_dir(follow_symlinks=False):
                    found[name] = "dir"
                    todo.append((name, e.path))
                else:
                    found[name] = "file" if e.is_file(follow_symlinks=False) else \
                        "link" if e.is_symlink() else "not a regular file"
    return found


class _Differs(Exception):
    """Raised by _BlockVerifier at the first block that is not the generator's."""


class _BlockVerifier:
    """A file-like sink for RandomWriter.write that reads the same number of bytes from `fd` and
    compares them with what the generator wrote, instead of writing."""

    def __init__(self, fd: int):
        self.fd = fd

    def write(self, want: memoryview) -> None:
        if os.read(self.fd, len(want)) != want.tobytes():  # tobytes: bytes == bytes is one memcmp
            raise _Differs


_ZEROS = bytes(BLOCK)
_HOLES: dict[int, bool] = {}  # by device: whether its file system makes a truncated file a hole


def makes_holes(root: Path) -> bool:
    """Whether the file system `root` is on makes holes: a fresh unnamed file there (O_TMPFILE,
    nothing left behind), truncated to 1 MiB, has no block allocated. Asked once per device."""
    dev = os.stat(root).st_dev
    if dev not in _HOLES:
        try:
            with tempfile.TemporaryFile(dir=root) as fh:
                os.ftruncate(fh.fileno(), 1 << 20)
                _HOLES[dev] = os.fstat(fh.fileno()).st_blocks == 0
        except OSError:
            _HOLES[dev] = False
    return _HOLES[dev]


def _file_differs(path: str, size: int, random: tuple["RandomWriter", int] | None, holes: bool = True) -> str | None:
    """Why the file at `path` is not the generator's (`random`: the writer and the file's stream;
    None: a sparse file, all holes where the file system makes them (`holes`), else all zeros), or
    None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return f"cannot open it: {e.strerror}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        if st.st_size != size:
            return f"{st.st_size} bytes, not {size}"
        if random is not None:
            try:
                random[0].write(_BlockVerifier(fd), size, random[1])
            except _Differs:
                return "its bytes are not the generator's"
            return None
        try:
            os.lseek(fd, 0, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:
                return None  # no data anywhere: all holes, all zeros
            raise
        if holes:  # allocated blocks, zeros or not: the benchmark would read a disk where the spec has
            return "it holds allocated data where the spec has holes"  # holes (review35f F3)
        left = size
        while left > 0:  # a file system without holes: read the zeros
            chunk = os.read(fd, min(left, BLOCK))
            if not chunk or chunk != (_ZEROS if len(chunk) == BLOCK else bytes(len(chunk))):
                return "not all zeros"
            left -= len(chunk)
        return None
    finally:
        os.close(fd)


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


def _pool_bytes(total: int) -> int:
    """The random pool for a fixture of `total` bytes: what write_* and intact both use."""
    return min(POOL, max(1 << 20, total))


def write_random(root: Path, size: int, count: int, seed: int) -> None:
    gen = RandomWriter(seed, pool_bytes=_pool_bytes(size * count))
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
    gen = RandomWriter(spec.seed, pool_bytes=_pool_bytes(sum(s for _, s in plan)))
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
