"""End to end under network profiles (issue 26): real s5cmd builds of the test origin, real MinIO,
real toxiproxy, real hyperfine. A step behind a 20 ms round trip takes at least its requests times
20 ms; MinIO counts the same requests behind the proxy as without it; the bundled steps for s5cmd's
other commands run, check their results, and leave nothing in the bucket."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, need, run_bench
from refbench import accounting, paths, results as rs

pytestmark = pytest.mark.slow

CHEAP = ("-r", "2", "-w", "0", "--rounds", "1")  # smoke-sized: what is checked here is not a verdict


def need_shaper() -> None:
    if not paths.find_tool("toxiproxy-server"):
        need("toxiproxy-server", "the network profiles' shaper (`refbench setup` installs it)")


def s5cmd_target() -> str:
    text = (ROOT / "refbench" / "scenarios.toml").read_text()
    return text[text.index("[targets.s5cmd]"):text.index("# ---- s5cmd: the seed")]


N_CATS = 10
SEQUENTIAL = '''
[networks.rtt20]
rtt = 20
description = "a round trip of 20 ms, bandwidth not limited"

[[scenarios]]
name = "sequential"
target = "s5cmd"
fixture = { kind = "sparse", size = "4K", count = 1 }
setup = "{{ bin }} cp {{ file }} {{ remote ~ '/obj' }}"

  [[scenarios.steps]]
  name = "cats, loopback"
  network = "loopback"
  command = "for i in $(seq %(n)d); do {{ bin }} cat {{ remote ~ '/obj' }} > /dev/null; done"

  [[scenarios.steps]]
  name = "cats, rtt20"
  network = "rtt20"
  command = "for i in $(seq %(n)d); do {{ bin }} cat {{ remote ~ '/obj' }} > /dev/null; done"
''' % {"n": N_CATS}


def test_a_round_trip_of_20_ms_delays_every_sequential_request_and_minio_still_counts_them(
        s5_origin, builds_dir, tmp_path):
    need_shaper()
    scen = tmp_path / "scenarios.toml"
    scen.write_text(s5cmd_target() + SEQUENTIAL)
    local = tmp_path / "local"
    local.mkdir()
    proc = run_bench("-s", "v1.0.0", "v1.1.0", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     "--scenarios", str(scen), *CHEAP, "-l", str(local), "-o", str(tmp_path / "s.md"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = rs.load(tmp_path / "results.json")
    steps = {st.name: st for _, st in r.steps()}
    direct, shaped = steps["cats, loopback"], steps["cats, rtt20"]
    assert (direct.network, shaped.network) == ("loopback", "rtt20")
    assert r.backend["networks"]["rtt20"]["rtt_ms"] == 20
    for label in ("v1.0.0", "v1.1.0"):
        # requests counted behind the proxy equal those counted without it: MinIO's own metrics
        # are read directly, never through the proxy
        assert shaped.requests[label].by_api == direct.requests[label].by_api
        assert accounting.changes(direct.requests[label], shaped.requests[label], label) == ()
        n = sum(shaped.requests[label].by_api.values())  # each cat: a HeadObject, then a GetObject
        assert n >= N_CATS * 2, shaped.requests[label]
        # every one of them, one after the other, waits its round trip
        times = shaped.builds[label].times
        assert min(times) >= n * 0.020, (label, n, times)
        assert min(times) > max(direct.builds[label].times) + (n * 0.020) / 2, (times, direct.builds[label].times)
    md = (tmp_path / "s.md").read_text()
    assert ("**Network to the S3 server:** loopback (no shaping: MinIO directly on 127.0.0.1): sequential / cats, "
            "loopback; rtt20 (20 ms round trip): sequential / cats, rtt20.") in md
    # the shaper stopped with the run (its config lived in the run's dir, now gone)
    assert list(local.iterdir()) == []
    assert str(local) not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


# ---- the bundled steps for s5cmd's other commands, on a versioned bucket of the test MinIO -------
N_OBJECTS, OBJECT_K, LARGE_M = 300, 4, 32


