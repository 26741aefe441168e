"""Request accounting and kubo's repo counters: what each build asked the server to do, and what
its repo holds, beside the times.

Fast unit tests read MinIO's real metrics v3 text; the end-to-end tests run real builds of the
explain origin (tests/origins.py: a contender that performs every command twice) against the
embedded MinIO, and two kubo builds that chunk differently.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import MappingProxyType

import pytest

import factories
from conftest import run_bench
from refbench import accounting, results as rs
from refbench.render.explain import fmt_change

# a real page of /minio/metrics/v3/api/requests (MinIO 2026-02), after PutBucket, PutObject,
# a GetObject and a GetObject of a missing key
PAGE = """# HELP minio_api_requests_4xx_errors_total Total number of requests with 4xx errors
# TYPE minio_api_requests_4xx_errors_total counter
minio_api_requests_4xx_errors_total{name="GetObject",server="127.0.0.1:19123",type="s3"} 1
# HELP minio_api_requests_errors_total Total number of requests with (4xx and 5xx) errors
# TYPE minio_api_requests_errors_total counter
minio_api_requests_errors_total{name="GetObject",server="127.0.0.1:19123",type="s3"} 1
# HELP minio_api_requests_incoming_total Total number of incoming requests
# TYPE minio_api_requests_incoming_total counter
minio_api_requests_incoming_total{server="127.0.0.1:19123",type="s3"} 4
# HELP minio_api_requests_total Total number of requests
# TYPE minio_api_requests_total counter
minio_api_requests_total{name="GetObject",server="127.0.0.1:19123",type="s3"} 2
minio_api_requests_total{name="PutBucket",server="127.0.0.1:19123",type="s3"} 1
minio_api_requests_total{name="PutObject",server="127.0.0.1:19123",type="s3"} 1
minio_api_requests_total{name="Heal",server="127.0.0.1:19123",type="admin"} 7
# HELP minio_api_requests_traffic_received_bytes Total number of bytes received
# TYPE minio_api_requests_traffic_received_bytes counter
minio_api_requests_traffic_received_bytes{server="127.0.0.1:19123",type="s3"} 1000
# HELP minio_api_requests_traffic_sent_bytes Total number of bytes sent
# TYPE minio_api_requests_traffic_sent_bytes counter
minio_api_requests_traffic_sent_bytes{server="127.0.0.1:19123",type="s3"} 1323
# HELP minio_api_requests_ttfb_seconds_distribution Distribution of time to first byte across API calls
# TYPE minio_api_requests_ttfb_seconds_distribution counter
minio_api_requests_ttfb_seconds_distribution{le="+Inf",name="GetObject",server="127.0.0.1:19123",type="s3"} 2
"""


def test_a_metrics_page_parses_into_s3_counters():
    c = accounting.parse(PAGE)
    assert dict(c.by_api) == {"GetObject": 2, "PutBucket": 1, "PutObject": 1}  # the admin API left out
    assert (c.errors_4xx, c.errors_5xx, c.canceled) == (1, 0, 0)
    assert (c.received_bytes, c.sent_bytes) == (1000, 1323)
    assert accounting.parse("") == accounting.Counters()  # a fresh server's page is empty


def test_delta_counts_a_label_that_appears_after_the_first_read_from_zero():
    before = accounting.Counters(by_api={"PutObject": 5}, received_bytes=100)
    after = accounting.Counters(by_api={"PutObject": 9, "ListObjectsV2": 1}, received_bytes=300, sent_bytes=7)
    d = accounting.delta(before, after)
    assert dict(d.by_api) == {"ListObjectsV2": 1, "PutObject": 4}
    assert (d.received_bytes, d.sent_bytes, d.total) == (200, 7, 5)


def test_changes_name_every_counter_that_differs_and_nothing_else():
    a = rs.Requests(by_api=MappingProxyType({"PutObject": 200}), received_bytes=1_000_000)
    b = rs.Requests(by_api=MappingProxyType({"PutObject": 400, "ListObjectsV2": 1}), received_bytes=2_000_000)
    ch = accounting.changes(a, b, "new")
    assert [(c.name, c.baseline_value, c.value) for c in ch] == [
        ("ListObjectsV2", 0, 1), ("PutObject", 200, 400), ("bytes received", 1_000_000, 2_000_000)]
    assert fmt_change(ch[1]) == "PutObject 200 → 400 (×2.00)"
    assert fmt_change(ch[0]) == "ListObjectsV2 0 → 1"
    assert accounting.changes(a, a, "same") == ()
    # a few bytes of server-written metadata (ids, times in a listing) are not a change
    noisy = dataclasses.replace(a, sent_bytes=82)
    assert accounting.changes(a, noisy, "same") == ()


def test_an_older_results_file_loads_and_a_new_one_round_trips():
    r = rs.load(Path(__file__).parent / "data" / "results-s5cmd.json")
    assert all(st.requests is None and st.profiles is None and not st.requests_differ for _, st in r.steps())
    sc = r.scenarios[0]
    req = rs.Requests(by_api=MappingProxyType({"PutObject": 3}), sent_bytes=9)
    prof = rs.Profile(baseline="a", contender="b", samples=MappingProxyType({"a": 10, "b": 12}),
                      top=(rs.FunctionShift(function="main.f", baseline_share=0.1, contender_share=0.3),),
                      stacks=(("s5cmd;main.main;main.f", 1, 4),))
    st = dataclasses.replace(sc.steps[0], requests=MappingProxyType({"a": req}), profiles=(prof,),
                             request_changes=(rs.RequestChange(contender="b", name="PutObject", baseline_value=3,
                                                               value=6),))
    new = r.replace(scenarios=(dataclasses.replace(sc, steps=(st,)),), explain_notes=("no profile: perf not found",))
    back = rs.Results.from_json(json.loads(json.dumps(new.to_json())))
    assert back == new and back.scenarios[0].steps[0].requests_differ
    assert back.scenarios[0].steps[0].profiles[0].top[0].points == pytest.approx(20.0)


def test_with_a_users_bucket_the_run_says_accounting_needs_the_embedded_server(tmp_path):
    from refbench.explain import Explainer

    class UserBucket:
        kind, server = "s3", None

    e = Explainer(UserBucket(), tmp_path, profile_mode="off")
    assert not e.wants_run() and e.notes == [accounting.BUCKET_NOTE]
    assert "embedded MinIO" in accounting.BUCKET_NOTE


# ---- end to end ------------------------------------------------------------------------------
def _steps(path) -> dict:
    r = rs.load(path)
    return {st.name: st for _, st in r.steps()}, r


@pytest.mark.slow
def test_a_contender_doing_everything_twice_shows_twice_the_requests_and_bytes(explain_run):
    steps, r = _steps(explain_run["results"])
    base, twice, burn = r.labels
    up, down, rm = steps["upload"], steps["download"], steps["remove"]
    files = r.scenarios[0].fixture.files
    assert up.requests[base].by_api["PutObject"] == files and up.requests[twice].by_api["PutObject"] == 2 * files
    assert up.requests[twice].received_bytes == 2 * up.requests[base].received_bytes > 0
    assert down.requests[twice].by_api["GetObject"] == 2 * down.requests[base].by_api["GetObject"] == 2 * files
    assert down.requests[twice].sent_bytes == 2 * down.requests[base].sent_bytes > 0
    # the second rm lists the prefix again and finds nothing left to delete
    assert rm.requests[twice].by_api["ListObjectsV2"] == 2 * rm.requests[base].by_api["ListObjectsV2"]
    assert rm.requests[twice].total > rm.requests[base].total
    for st in (up, down, rm):  # flagged whatever the times say
        assert st.requests_differ and {c.contender for c in st.request_changes} == {twice}
        # identical requests from the build that only burns CPU: identical counts (a listing's or
        # a multi-delete's response differs by a few bytes of ids and times, inside the slack)
        assert st.requests[burn].by_api == st.requests[base].by_api
        assert st.requests[burn].received_bytes == st.requests[base].received_bytes
        assert all(q.errors_4xx == q.errors_5xx == 0 for q in st.requests.values())
        assert all(q.server_cpu is not None and q.server_cpu >= 0 for q in st.requests.values())  # MinIO's, context
    summary = explain_run["summary"].read_text()
    assert "Server CPU (context)" in summary
    assert f"PutObject {files} → {2 * files} (×2.00)" in summary
    assert "requests differ: PutObject" in summary  # beside the upload step's verdict
    comment = explain_run["comment"].read_text()
    assert f"PutObject {files} → {2 * files} (×2.00)" in comment
    html = explain_run["html"].read_text()
    assert "made different S3 requests" in html and f"PutObject {files} → {2 * files} (×2.00)" in html


KUBO_CHUNKING = '''
[[scenarios]]
name = "chunking"
target = "kubo"
fixture = { kind = "random", size = "1M", count = 2, seed = 5 }
# the CLI alone does the work: perf and IPFS_PROF profile the command hyperfine runs, which with an
# online daemon is a thin client (the daemon's own profile is not taken yet)
daemon = "none"
vary = { chunker = [["--chunker=size-262144"], ["--chunker=size-65536"]] }
  [[scenarios.steps]]
  name = "add"
  prepare = "{{ bin }} pin ls --type=recursive -q | xargs -r {{ bin }} pin rm >/dev/null && {{ bin }} repo gc -q >/dev/null"
  command = "{{ bin }} add -r -Q {{ chunker }} {{ fixture }} > {{ work ~ '/cid' }}"
'''


@pytest.mark.slow
def test_kubo_contender_chunking_differently_stores_different_block_counts_and_profiles_both_ways(
        tmp_path, kubo_origin, builds_dir, ram_local):
    """Block counts per build, and with --profile kubo's own pprof view (IPFS_PROF) beside perf's."""
    from test_kubo import COMMON, kubo_section

    scen = tmp_path / "scenarios.toml"
    scen.write_text(kubo_section() + KUBO_CHUNKING)
    local = ram_local  # repos on a tmpfs (conftest.ram_root): the test reads block counts and profiles
    proc = run_bench(*COMMON, "--repo", str(kubo_origin.path), "--builds-dir", str(builds_dir), "--scenarios",
                     str(scen), "-r", "2", "-w", "1", "--rounds", "1", "-l", str(local), "--profile",
                     "-o", str(tmp_path / "summary.md"), "--json", str(tmp_path / "results.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    steps, r = _steps(tmp_path / "results.json")
    repo = steps["add"].repo
    old, new = repo[r.labels[0]], repo[r.labels[1]]
    # 2 files of 1 MiB: 4 leaves each at 256 KiB, 16 at 64 KiB, plus their roots and the directory
    assert old.num_objects < new.num_objects
    assert new.num_objects - old.num_objects == 2 * (16 - 4)
    assert old.repo_size_estimate and new.repo_size_estimate
    summary = (tmp_path / "summary.md").read_text()
    assert f"blocks {old.num_objects} → {new.num_objects}" in summary
    assert "Blocks (NumObjects, exact)" in summary and "kubo's estimate" in summary
    # --profile: perf's profile and kubo's own, each over both builds' profiled runs
    by_source = {p.source: p for p in steps["add"].profiles}
    assert set(by_source) == {None, "pprof"}, steps["add"].profile_note
    pprof = by_source["pprof"]
    assert all(pprof.samples[lab] > 0 for lab in r.labels[:2]), pprof
    assert all(stack.startswith("ipfs;") for stack, _, _ in pprof.stacks)
    assert any("github.com/ipfs/" in stack for stack, _, _ in pprof.stacks)  # Go's own symbols, kubo's frames
    assert "(kubo pprof)" in summary
    assert list(local.iterdir()) == []


def test_the_servers_cpu_over_a_run_is_kept_beside_its_requests_as_context(tmp_path):
    """MinIO's CPU time over a build's accounting run (issue 36 part 3): the difference of two
    reads, none where a read was missing; kept in results.json beside the counts and older files
    (without it) load; the requests table shows it as context."""
    import subprocess
    import sys

    from refbench.backends.minio import MinioServer
    from refbench.render.explain import markdown_parts

    q = rs.Requests(by_api=MappingProxyType({"PutObject": 3}), received_bytes=300)
    assert accounting.server_cpu(q, 1.25, 1.5).server_cpu == 0.25
    assert accounting.server_cpu(q, None, 1.5).server_cpu is None
    assert "server_cpu" not in q.to_json()  # a file without it reads as before
    doc = accounting.server_cpu(q, 0.0, 0.03).to_json()
    assert rs.Requests.read(json.loads(json.dumps(doc)), "t").server_cpu == 0.03
    # the server's CPU time, read from /proc of its process (a stand-in that burns CPU)
    server = MinioServer(tmp_path)
    # it says when it has burnt 0.3 s of CPU: a fixed wait of 1 s read 0.16 s at load 10 on 2 cores
    server.proc = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                                    "while time.process_time() - t < 0.3: pass\nprint('burnt', flush=True)\n"
                                    "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.proc.stdout.readline().strip() == "burnt"
        assert server.cpu_seconds() >= 0.25
    finally:
        server.proc.kill()
        server.proc.wait()
    assert server.cpu_seconds() is None  # gone: no figure, not a zero
    doc = factories.results_doc({("upload", "upload"): {"old": factories.times(1.0, seed=1),
                                                        "new": factories.times(1.0, seed=2)}})
    st = doc["scenarios"][0]["steps"][0]
    st["requests"] = {"old": q.to_json(), "new": accounting.server_cpu(q, 0.0, 0.042).to_json()}
    table = markdown_parts(rs.Results.from_json(doc, "t"))["requests"]
    assert "Server CPU (context)" in table and "42" in table and "n/a" in table
