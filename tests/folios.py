"""How a file sits in the page cache: how many of its pages are resident (mincore, which reads
nothing in) and, of those, how many are in large folios (/proc/kpageflags, root only). Used by
tests/test_page_cache.py and benchmarks/page_cache.py (issue 34)."""
from __future__ import annotations

import ctypes
import mmap
import os
import struct
from dataclasses import dataclass

PAGE = mmap.PAGESIZE
COMPOUND_HEAD, COMPOUND_TAIL = 15, 16  # kpageflags bits (Documentation/admin-guide/mm/pagemap.rst)
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Layout:
    pages: int
    resident: int  # pages in the page cache before the probe mapped anything
    in_large: int  # resident pages in a compound (large) folio

    @property
    def large_share(self) -> float:
        return self.in_large / self.resident if self.resident else 0.0


def _address(m: mmap.mmap) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(m))


def layout(path: str | os.PathLike) -> Layout:
    """The file's layout, leaving it as it found it: only pages already resident are touched (a
    touch maps a cached page and reads nothing in), so a probe does not change what it measures."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        n = (size + PAGE - 1) // PAGE
        m = mmap.mmap(fd, size, prot=mmap.PROT_READ | mmap.PROT_WRITE, flags=mmap.MAP_PRIVATE)
    finally:
        os.close(fd)
    try:
        base = _address(m)
        vec = (ctypes.c_ubyte * n)()
        if _libc.mincore(ctypes.c_void_p(base), ctypes.c_size_t(size), vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        resident = [i for i in range(n) if vec[i] & 1]
        for i in resident:
            m[i * PAGE]  # a read fault on a cached page: mapped, nothing read from disk
        in_large = 0
        with open("/proc/self/pagemap", "rb") as pm, open("/proc/kpageflags", "rb") as kf:
            for i in resident:
                pm.seek((base // PAGE + i) * 8)
                entry = struct.unpack("Q", pm.read(8))[0]
                if not entry >> 63:
                    continue
                kf.seek((entry & ((1 << 55) - 1)) * 8)
                flags = struct.unpack("Q", kf.read(8))[0]
                in_large += bool(flags >> COMPOUND_HEAD & 1 or flags >> COMPOUND_TAIL & 1)
        return Layout(n, len(resident), in_large)
    finally:
        m.close()


def _written_back_and_dropped(fd: int) -> None:
    """Out of the page cache for sure: written back first, since dirty pages cannot be dropped."""
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def exec_filled(path: str | os.PathLike, *argv: str) -> None:
    """The state a binary is in after it was run once from a cold page cache: written back,
    dropped, then faulted in by exec (only what start-up touches, in small folios)."""
    import subprocess
    fd = os.open(path, os.O_RDONLY)
    try:
        _written_back_and_dropped(fd)
    finally:
        os.close(fd)
    subprocess.run([str(path), *argv], capture_output=True, check=False)


def rewritten(path: str | os.PathLike) -> None:
    """The state of a binary just built or restored from a cache: its pages written anew and
    still dirty (not yet written back), in the folios of the write path. Written in place with
    the same bytes, so its inode, its seal and its build record stay as they were."""
    data = open(path, "rb").read()
    fd = os.open(path, os.O_RDWR)
    try:
        _written_back_and_dropped(fd)
        for off in range(0, len(data), 1 << 20):
            os.pwrite(fd, data[off:off + (1 << 20)], off)
    finally:
        os.close(fd)


def aa_binaries(bench: str, origin: str, builds_dir: str, cwd, refs=("v1.0.0", "docs-only")) -> tuple[str, ...]:
    """The binaries of an A/A pair of refs, built (or found cached) by `refbench build` and named by
    a dry run, baseline first: what tests/test_aa_bias.py and benchmarks/aa_bias.py put in the
    states above before a run."""
    import re
    import subprocess
    import sys
    common = ["-s", *refs, "--repo", str(origin), "--builds-dir", str(builds_dir)]
    built = subprocess.run([sys.executable, bench, "build", *common, "--out", str(cwd / "out")], cwd=cwd,
                           capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"refbench build failed: {built.stderr[-2000:]}")
    dry = subprocess.run([sys.executable, bench, *common, "--dry-run"], cwd=cwd, capture_output=True, text=True)
    paths = tuple(re.findall(r"^  build \S+: .* -> cached (\S+)", dry.stdout, re.M))
    if dry.returncode != 0 or len(paths) != len(refs):
        raise RuntimeError(f"refbench --dry-run named {paths}: {dry.stderr[-2000:]}")
    return paths


def cache_evicting_load(n: int, seconds: float):
    """n processes that copy 128 MB arrays for `seconds` (a busy neighbour that evicts the CPU
    caches); returns them (Popen), to be waited for or killed."""
    import subprocess
    import sys
    code = ("import numpy as np, time\na = np.ones(16 << 20); b = np.empty_like(a)\n"
            f"end = time.time() + {seconds}\nwhile time.time() < end:\n    np.copyto(b, a); time.sleep(0.003)\n")
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
