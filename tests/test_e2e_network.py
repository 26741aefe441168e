"""End to end under network profiles (issue 26): real s5cmd builds of the test origin, real MinIO,
real toxiproxy, real hyperfine. A step behind a 20 ms round trip takes at least its requests times
20 ms; MinIO counts the same requests behind the proxy as without it; the bundled steps for s5cmd's
other commands run, check their results, and leave nothing in the bucket."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, need, run_bench
from refbench import accounting, paths, results as rs, tools

pytestmark = pytest.mark.slow

# smoke-sized: what is checked here is not a verdict, and no test here reads a profile
CHEAP = ("-r", "2", "-w", "0", "--rounds", "1", "--no-profile")


def need_shaper() -> None:
    if not tools.find_tool("toxiproxy-server"):
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


@pytest.mark.alone  # compares the shaped step's real times with the direct one's: load beside it would slow either
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
def all_versions(client, bucket: str) -> list[tuple[str, str]]:
    out = []
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        out += [(v["Key"], v["VersionId"]) for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
    return sorted(out)


N_OBJECTS, OBJECT_K, LARGE_M = 300, 4, 32


def smaller_bundled(tmp_path) -> Path:
    """The bundled scenarios file as shipped, with smaller --quick objects: every step's templates
    run as they are, at a smoke test's size (a few minutes on 2 busy cores, not ten)."""
    text = (ROOT / "refbench" / "scenarios.toml").read_text()
    for old, new, times in (('quick = { count = 2000, size = "16K" }',
                             f'quick = {{ count = {N_OBJECTS}, size = "{OBJECT_K}K" }}', 1),
                            ('quick = { size = "256M" }', f'quick = {{ size = "{LARGE_M}M" }}', 2)):
        assert text.count(old) == times, old  # the bundled sizes this test shrinks
        text = text.replace(old, new)
    path = tmp_path / "scenarios.toml"
    path.write_text(text)
    return path


def test_the_new_s5cmd_steps_check_their_results_and_leave_nothing_outside_the_prefix(
        minio, s5_origin, builds_dir, tmp_path):
    need_shaper()
    server, client = minio
    bucket = "e2e-network"
    client.create_bucket(Bucket=bucket)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for key in ("keep/me.txt", "refbench/other-run/x", "refbenchx"):
        client.put_object(Bucket=bucket, Key=key, Body=b"mine")
    before = all_versions(client, bucket)
    env = {k: v for k, v in server.env.items() if k != "S3_ENDPOINT_URL"}
    proc = run_bench("-s", "v1.0.0", "v1.1.0", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     "-b", bucket, "--endpoint-url", server.endpoint, "--quick", *CHEAP,
                     "--scenarios", str(smaller_bundled(tmp_path)),
                     "--only", "many objects", "--only", "large object, region", "--only", "large file/cat",
                     "--only", "small files, region", "-o", str(tmp_path / "s.md"), env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = rs.load(tmp_path / "results.json")
    checks = {(sc.name, st.name): {b.check for b in st.builds.values()} for sc, st in r.steps()}
    nets = {(sc.name, st.name): st.network for sc, st in r.steps()}
    n, size = N_OBJECTS, N_OBJECTS * OBJECT_K * 1024
    listed, counted = {f"{n} objects listed"}, {f"{size} bytes in {n} objects"}
    assert checks == {
        ("large file", "cat"): {"identical"},
        ("small files, region", "upload"): {None},
        ("small files, region", "download"): {"identical"},
        ("small files, region", "remove"): {None},
        ("large object, region", "cat"): {"identical"},
        ("large object, region", "download"): {"identical"},
        ("large object, region", "upload"): {f"{LARGE_M << 20} bytes in 1 objects"},
        ("many objects", "ls"): listed, ("many objects", "ls, region"): listed,
        ("many objects", "du"): counted,
        ("many objects", "run"): {"identical"},
        ("many objects", "sync up"): counted, ("many objects", "sync up, region"): counted,
        ("many objects", "sync down"): {"identical"}, ("many objects", "sync down, region"): {"identical"},
        ("many objects", "cp"): counted, ("many objects", "cp, region"): counted,
        ("many objects", "mv"): {f"{n} objects moved, 0 left"},
    }, checks
    assert not any(st.check_differs for _, st in r.steps())
    assert nets[("many objects", "ls")] == nets[("large file", "cat")] == "loopback"
    assert {nets[k] for k in nets if k[0].endswith(", region") or k[1].endswith(", region")} == {"region"}
    # the versioned branches ran: s3restore brought mv's source back before every run
    mv = next(st for sc, st in r.steps() if st.name == "mv")
    assert all("refbench-s3restore" in b.prepare for b in mv.builds.values())
    assert "**Network to the S3 server:**" in (tmp_path / "s.md").read_text()
    # every object and version the run made was under its own prefix, and is gone
    assert all_versions(client, bucket) == before
