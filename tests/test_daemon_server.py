"""The S3 server's CPU per timed run (issue 36, part 3): the embedded MinIO probed around each
timed run as kubo's daemon is (refbench.daemon), kept as `server-cpu` beside the request counts:
context in results.json, the summary and the CSV, a verdict only when the run asks for it
(`--metric-threshold server-cpu=X`), and not measured on a user's bucket (-b)."""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest

import factories
from refbench import daemon, pairing, results as rs
from refbench.figures import criteria
from refbench.runner import BuildSamples
from refbench.verdict import Verdict, asked, is_daemon_metric


def _server_doc(extra: float = 0.0) -> dict:
    doc = factories.results_doc({("upload", "upload"): {"old": factories.times(1.0, seed=1),
                                                        "new": factories.times(1.0, seed=2)}})
    for lab, more in (("old", 0.0), ("new", extra)):
        b = doc["scenarios"][0]["steps"][0]["builds"][lab]
        b["server_cpu"] = [0.040 + more + 0.0001 * i for i in range(len(b["times"]))]
    return doc


def test_a_servers_usage_is_its_cpu_only_and_lands_in_the_samples():
    u = daemon.Usage(0.0123, 50 << 20, 4096, None, None, "cgroup")
    assert u.values("server") == {"server-cpu": 0.0123}
    s = BuildSamples(command="x")
    s.add_daemon([u, u], "server")
    assert s.probed("server") == 2 and s.probed("daemon") == 0
    assert set(s.daemon) == {"server-cpu"}  # none of the daemon's metrics: MinIO's memory is not asked for
    doc = rs.Samples.measured([1.0, 1.1], [0.1, 0.1], [0.0, 0.0], [0, 0], [0, 0], [None, None], daemon=s.daemon)
    assert doc.server_cpu == (0.0123, 0.0123) and doc.daemon_values() == {}
    back = rs.Samples.read(json.loads(json.dumps(doc.to_json())), "t")
    assert back.values("server-cpu") == (0.0123, 0.0123)


def test_server_cpu_is_context_unless_the_run_asks_for_it():
    assert not asked("server-cpu", criteria().metric_thresholds)
    assert asked("server-cpu", criteria(metric_thresholds={"server-cpu": 0.05}).metric_thresholds)
    assert asked("daemon-cpu", ()) and asked("wall", ())
    assert is_daemon_metric("server-cpu")  # when judged, in the family beside the client's: no cost to wall
    from refbench.commands._args import metric_list, metric_threshold
    assert metric_threshold("server-cpu=0.05") == ("server-cpu", 0.05) and metric_list("server-cpu") == ("server-cpu",)
    old, new = rs.Results.from_json(_server_doc(), "old"), rs.Results.from_json(_server_doc(0.02), "new")
    metrics = lambda rc: {c.metric: c.verdict for row in rc.rows for c in row.all_contrasts()}  # noqa: E731
    assert "server-cpu" not in metrics(pairing.pair_runs(old, new))
    judged = metrics(pairing.pair_runs(old, new, criteria(metric_thresholds={"server-cpu": 0.05})))
    assert judged["server-cpu"] == Verdict.SLOWER, judged


def test_the_views_show_the_servers_cpu_per_timed_run(tmp_path):
    from refbench.render.explain import markdown_parts
    from refbench.render.csv import CSV_FIELDS, write_csv

    doc = _server_doc(0.02)
    st = doc["scenarios"][0]["steps"][0]
    q = {"by_api": {"PutObject": 3}, "total": 3, "received_bytes": 10, "sent_bytes": 0, "errors_4xx": 0,
         "errors_5xx": 0, "canceled": 0}
    st["requests"] = {"old": q, "new": q}
    r = rs.Results.from_json(doc, "t")
    table = markdown_parts(r)["requests"]
    assert "Server CPU per timed run (mean)" in table and "40" in table and "60" in table, table
    write_csv(r, tmp_path / "a.csv")
    header, row_old = (tmp_path / "a.csv").read_text().splitlines()[:2]
    cols = header.split(",")
    assert cols[:len(CSV_FIELDS)] == CSV_FIELDS and "server_cpu_mean" in cols and "daemon_cpu_mean" not in cols
    assert float(row_old.split(",")[cols.index("server_cpu_mean")]) == pytest.approx(0.04, abs=0.001)


def test_an_asked_server_cpu_verdict_is_shown_in_every_view(tmp_path):
    from refbench import analysis, judge
    from refbench.render.html import render_html
    from refbench.render.markdown import render_markdown

    doc = _server_doc(0.02)
    st = doc["scenarios"][0]["steps"][0]
    old, new = st["builds"]["old"]["server_cpu"], st["builds"]["new"]["server_cpu"]
    st["comparisons"].append(judge.contrast_metric("server-cpu", "old", old, "new", new).to_json())
    r = rs.Results.from_json(doc, "t")
    assert r.judged_metrics() == ("server-cpu",)
    assert "Server CPU" in render_markdown(r)
    assert 'data-metric="server-cpu" data-verdict="slower"' in render_html(r, analysis.analyse(r))


def test_a_users_bucket_says_the_server_cpu_is_not_measured():
    from refbench.backends.s3 import SERVER_CPU_NONE, S3Backend
    b = S3Backend("theirs", "p/run", "http://127.0.0.1:9", None)
    assert b.daemon_probes("old") is None
    assert b.describe()["server cpu"] == SERVER_CPU_NONE and "-b" in SERVER_CPU_NONE
    from refbench import accounting
    assert "server CPU per run" in accounting.BUCKET_NOTE


@pytest.mark.slow
def test_the_embedded_minio_is_probed_around_each_run_per_build(tmp_path):
    """A real MinIO: its own cgroup (µs), one probe server per build, each build's requests charged
    to its own runs (a build making 40 requests a run costs the server more than one making 2)."""
    from conftest import need
    from refbench.backends.minio import MinioServer
    from refbench.tools import find_tool
    if not find_tool("minio"):
        need("minio", "run `make setup`")
    server = MinioServer(tmp_path).start()
    try:
        assert server.cpu_cgroup is not None, server.cpu_why
        hooks = {lab: server.probes(lab) for lab in ("light", "heavy")}
        assert all(h.role == "server" for h in hooks.values()) and hooks["light"].out != hooks["heavy"].out
        for lab, n in (("light", 2), ("heavy", 40), ("heavy", 40), ("light", 2)):
            before, after = hooks[lab].hooks(own_shell=True)
            subprocess.run(before, shell=True, check=True)
            for _ in range(n):
                urllib.request.urlopen(f"{server.endpoint}/minio/health/ready", timeout=5).read()
            subprocess.run(after, shell=True, check=True)
        light, heavy = (daemon.read_usages(hooks[lab].out) for lab in ("light", "heavy"))
        assert len(light) == len(heavy) == 2 and {u.cpu_source for u in light + heavy} == {"cgroup"}
        assert max(u.cpu for u in light) < min(u.cpu for u in heavy), (light, heavy)
        assert "usage_usec" in server.cpu_fact()
        cgroup, probe_pids = server.cpu_cgroup.path, [s.proc.pid for s in server.probe_servers.values()]
    finally:
        server.stop()
    assert not cgroup.exists()
    assert "usage_usec" in server.cpu_fact()  # still said after the stop: results.json describes the backend then
    assert all(subprocess.run([sys.executable, "-c", f"import os; os.kill({p}, 0)"]).returncode for p in probe_pids)


@pytest.mark.slow
def test_a_run_on_the_embedded_minio_keeps_its_cpu_per_timed_run_as_context(explain_run):
    """Through the runner and hyperfine's hooks (the shared --quick run of tests/test_accounting.py):
    every timed run of every build has the server's CPU, the build doing every command twice costs
    it more on upload, and no verdict is given on it (the run did not ask)."""
    r = rs.load(explain_run["results"])
    base, twice, _ = r.labels
    for _, st in r.steps():
        for lab, b in st.builds.items():
            v = b.values("server-cpu")
            assert v is not None and len(v) == len(b.times) and all(x > 0 for x in v), (st.name, lab, v)
        assert not any(c.metric == "server-cpu" for c in st.metric_comparisons)
    up = {st.name: st for _, st in r.steps()}["upload"]
    mean = lambda lab: sum(up.builds[lab].server_cpu) / len(up.builds[lab].server_cpu)  # noqa: E731
    assert mean(twice) > 1.3 * mean(base), (mean(base), mean(twice))
    assert "usage_usec" in r.backend["server cpu"]
    assert "Server CPU per timed run (mean)" in explain_run["summary"].read_text()
