"""bisect on a line of 8 commits with a known slow commit (c5) and one that does not build (c6)."""
from __future__ import annotations

import json
import math

import pytest

from conftest import run_bench
from origins import make_bisect_origin

pytestmark = pytest.mark.slow


def test_bisect_finds_the_slow_commit_in_about_log2_builds(tmp_path_factory, builds_dir):
    root = tmp_path_factory.mktemp("bisect-origin")
    o = make_bisect_origin(root, n=8, slow_from=5, broken=(6,))
    log = root / "bisect.json"
    proc = run_bench("bisect", "v1.0.0", "master", "--only", "small files/remove", "--repo", str(o.path),
                     "--builds-dir", str(builds_dir), "--quick", "-r", "6", "-w", "1", "--rounds", "3", "--max-runs", "24",
                     "--log", str(log), cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(log.read_text())
    assert out["first_slower"] == o.shas["c5"], proc.stdout
    assert out["candidates"] == [o.shas["c5"]]
    assert f"first slower commit for 'small files/remove': {o.shas['c5']}" in proc.stdout
    assert out["commits"] == 7  # c2 .. c8 after GOOD
    by_sha = {p["sha"]: p for p in out["probes"]}
    # the commit that does not build was skipped, as git bisect skip does, and not blamed
    assert by_sha[o.shas["c6"]]["verdict"] == "skip"
    assert out["failed_builds"] == 1
    for name in ("c2", "c3", "c4"):
        if o.shas[name] in by_sha:
            assert by_sha[o.shas[name]]["verdict"] != "slower"
    assert by_sha[o.shas["c5"]]["verdict"] == "slower"
    # GOOD + BAD (verified first) + about log2(7) midpoints (+1 for the skipped one)
    midpoints = [p for p in out["probes"] if p["sha"] != o.shas["c8"]]
    assert len(midpoints) <= math.ceil(math.log2(7)) + 1
    assert out["builds"] == 2 + len(midpoints)  # every probed commit built once, GOOD once
    assert f"{out['builds']} builds (1 failed)" in proc.stdout
