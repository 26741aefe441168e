"""Byte-identical binaries start every step from one page-cache state (issue 34's cause).

A binary just built or restored from a cache sits in the page cache in the write path's folios,
dirty; one run before from a cold cache sits in what exec's faults brought in. Measured here
(kernel 6.18, ext4, a 23 MB s5cmd): 100% against 24% of its pages in large folios. Under memory
pressure that was worth up to +11% CPU on a short step for one of two identical builds, for a
whole A/A run (large file / remove, 3 of 8 runs, benchmarks/page_cache.py). Dropping the pages
was not enough: dirty pages cannot be dropped. The runner now settles every build's binary
(backends.process.settle_page_cache: fsync, drop, read back in order) before a step's warm-ups.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import run_bench
from folios import exec_filled, layout, rewritten

from refbench.backends.process import settle_page_cache
from refbench.tools import find_tool

ROOT = Path(__file__).resolve().parent.parent


def _need_kpageflags() -> None:
    if not os.access("/proc/kpageflags", os.R_OK):
        pytest.fail("/proc/kpageflags is not readable: these tests read the page cache's folios and run as root")


def _whole(lay) -> bool:
    """Read back whole: every page resident but a few a proactive reclaimer (DAMON here) may take
    back between the read and the probe (7 of 2,937 once, under a parallel suite)."""
    return lay.resident >= 0.99 * lay.pages


def _scratch() -> Path:
    # beside the checkout, on the disk builds live on: a tmpfs keeps its pages whatever one advises
    return Path(tempfile.mkdtemp(dir=ROOT, prefix=".pagecache-"))


def test_settled_twins_share_one_layout_whatever_their_history():
    """Two copies of one Go binary, one run once from a cold cache and one just written, sit in the
    page cache differently; settled, they sit alike (and wholly resident)."""
    _need_kpageflags()
    tool = find_tool("refbench-s3restore")
    if tool is None:
        pytest.fail("refbench-s3restore is not installed: run make setup")
    where = _scratch()
    try:
        a, b = where / "a", where / "b"
        for p in (a, b):
            shutil.copyfile(tool, p)
            os.chmod(p, 0o755)
        exec_filled(a)
        rewritten(b)
        before = layout(a), layout(b)
        assert abs(before[0].large_share - before[1].large_share) > 0.2, before  # the asymmetry is real here
        assert settle_page_cache(a) and settle_page_cache(b)
        la, lb = layout(a), layout(b)
        assert _whole(la) and _whole(lb), (la, lb)
        assert abs(la.large_share - lb.large_share) < 0.02, (la, lb)
        assert settle_page_cache(where / "missing") is False
    finally:
        shutil.rmtree(where)


@pytest.mark.slow
def test_a_run_settles_a_just_built_twin_like_its_baseline(tmp_path, s5_origin, builds_dir):
    """End to end: an A/A run whose contender's binary was just rewritten (as a build or a cache
    restore leaves it) and whose baseline was run once from a cold cache. After the run both
    binaries sit in the page cache alike. Before the fix, the runner's drop left the contender's
    dirty pages where they were: 100% in large folios against the baseline's quarter."""
    _need_kpageflags()
    args = ("-s", "v1.0.0", "docs-only", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
            "--quick", "--measure-identical", "--only", "large file/remove", "-r", "4", "--rounds", "2",
            "-w", "1", "--budget", "none", "--no-profile", "--json", str(tmp_path / "results.json"),
            "-o", str(tmp_path / "summary.md"))
    first = run_bench(*args, cwd=tmp_path)  # builds both (or finds them cached)
    assert first.returncode == 0, first.stderr[-3000:]
    builds = json.loads((tmp_path / "results.json").read_text())["builds"]
    base, cont = (Path(b["binary"]) for b in builds)
    assert base != cont and base.read_bytes() == cont.read_bytes()
    exec_filled(base, "version")
    rewritten(cont)
    assert abs(layout(base).large_share - layout(cont).large_share) > 0.2
    again = run_bench(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    lb, lc = layout(base), layout(cont)
    assert _whole(lb) and _whole(lc), (lb, lc)
    assert abs(lb.large_share - lc.large_share) < 0.02, (lb, lc)
