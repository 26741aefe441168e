"""The daemon's metrics as verdicts (issue 36): a family of their own, the options that name
them, results.json's keys (none in `none` mode; older files load), compare."""
from __future__ import annotations

import argparse
import json

import pytest

import factories
from refbench import pairing, judge, results as rs
from refbench.commands._args import metric_list, metric_threshold
from refbench.verdict import DAEMON_METRICS, Verdict

MiB = 1 << 20


def test_daemon_metrics_do_not_cost_wall_time_any_power():
    """Wall time's adjusted p-values are exactly what they are without the daemon's members, however
    many and however small their p: the daemon's metrics are adjusted in a family of their own.
    (So the loss at +10% that tests/test_stats_sim.py's simulations would show is 0 points.)"""
    import numpy as np
    rng = np.random.default_rng(3)
    client = []
    for k in range(9):
        base = list(1 + 0.02 * rng.standard_normal(10))
        cont = list((1.04 if k < 3 else 1.0) * (1 + 0.02 * rng.standard_normal(10)))
        client += [judge.contrast_metric(m, "a", base, "b", cont) for m in ("wall", "cpu")]
    daemon = [judge.contrast_metric(m, "a", [1.0, 1.01, 0.99, 1.0] * 3, "b", [2.0, 2.02, 1.98, 2.0] * 3)
              for m in DAEMON_METRICS for _ in range(9)]
    alone = judge.adjust_family(client)
    mixed = judge.adjust_family(client + daemon)
    assert [c.p_value for c in mixed[:len(client)]] == [c.p_value for c in alone]
    assert [c.verdict for c in mixed[:len(client)]] == [c.verdict for c in alone]
    assert all(c.verdict == Verdict.SLOWER for c in mixed[len(client):])
    assert all(c.p_raw is not None for c in mixed[len(client):])  # adjusted among themselves


def test_the_options_take_the_daemon_metrics():
    assert metric_threshold("daemon-memory=0.1") == ("daemon-memory", 0.1)
    assert metric_list("wall,daemon-cpu") == ("wall", "daemon-cpu")
    with pytest.raises(argparse.ArgumentTypeError, match="daemon-alloc"):
        metric_list("daemon-nothing")
    slow = judge.contrast_metric("daemon-memory", "a", [1.0, 1.01, 0.99] * 4, "b", [1.5, 1.51, 1.49] * 4)
    assert slow.verdict == Verdict.SLOWER
    assert judge.failing([slow]) == [] and judge.failing([slow], ("daemon-memory",)) == [slow]


def _daemon_doc(heavy: int = 64 * MiB) -> dict:
    doc = factories.results_doc({("add", "add"): {"old": factories.times(1.0, seed=1),
                                                  "new": factories.times(1.0, seed=2)}})
    for lab, extra in (("old", 0), ("new", heavy)):
        b = doc["scenarios"][0]["steps"][0]["builds"][lab]
        n = len(b["times"])
        b["memory_bytes"] = [30 * MiB + 4096 * ((i * 7) % 5) for i in range(n)]  # the CLI's: unchanged
        b["daemon_cpu"] = [0.5 + 0.001 * i for i in range(n)]
        b["daemon_memory"] = [100 * MiB + extra + 1000 * i for i in range(n)]
        b["daemon_writes"] = [4096 * (i % 3) for i in range(n)]
        b["daemon_alloc"] = [50_000_000 + i for i in range(n)]
    return doc


def test_results_keep_the_daemon_figures_and_none_mode_adds_no_key(tmp_path):
    plain = factories.results_doc({("add", "add"): {"old": factories.times(1.0), "new": factories.times(1.0)}})
    back = json.loads(json.dumps(rs.Results.from_json(plain, "t").to_json()))
    assert not any(k.startswith("daemon") for k in back["scenarios"][0]["steps"][0]["builds"]["old"])
    r = rs.Results.from_json(_daemon_doc(), "t")
    b = r.scenarios[0].steps[0].builds["new"]
    assert b.values("daemon-memory")[0] == 164 * MiB
    again = rs.Results.from_json(json.loads(json.dumps(r.to_json())), "t")
    assert again.scenarios[0].steps[0].builds["new"].daemon_alloc == b.daemon_alloc
    s = rs.Samples.measured([1.0, 1.1], [0.1, 0.1], [0.0, 0.0], [0, 0], [0, 0], [None, None],
                            daemon={"daemon-cpu": [0.5, 0.6], "daemon-alloc": [None, 5]})
    assert s.daemon_cpu == (0.5, 0.6) and s.daemon_alloc is None  # a metric every run lacks none of


def test_compare_judges_the_daemon_metrics_apart_from_the_client():
    old = rs.Results.from_json(_daemon_doc(0), "old")
    new = rs.Results.from_json(_daemon_doc(64 * MiB), "new")
    # same labels: compare the new run's heavy `new` against the old run's light `new`
    rc = pairing.pair_runs(old, new)
    comps = [c for row in rc.rows for c in row.all_contrasts()]
    by = {c.metric: c.verdict for c in comps}
    assert by["daemon-memory"] == Verdict.SLOWER, by
    assert by["memory"] == Verdict.SAME and by["daemon-cpu"] != Verdict.SLOWER, by
    assert "daemon-writes" not in by  # 0 in some runs: not on a log scale, not judged
    assert json.dumps(rc.rows[0].to_json())  # and it serialises


def _judged_daemon_results() -> rs.Results:
    doc = _daemon_doc()
    st = doc["scenarios"][0]["steps"][0]
    old, new = st["builds"]["old"], st["builds"]["new"]
    for m in ("memory", *DAEMON_METRICS):
        k = "memory_bytes" if m == "memory" else m.replace("-", "_")
        if all(v > 0 for v in old[k] + new[k]):
            st["comparisons"].append(judge.contrast_metric(m, "old", old[k], "new", new[k]).to_json())
    return rs.Results.from_json(doc, "t")


def test_the_views_say_whose_figures_are_whose(tmp_path):
    from refbench.render.csv import CSV_FIELDS, write_csv
    from refbench.render.markdown import render_github, render_markdown

    r = _judged_daemon_results()
    md = render_markdown(r)
    assert "Daemon memory" in md and "the CLI's, the client process hyperfine timed" in md
    assert "kubo daemon spent during each run" in render_github(r)
    write_csv(r, tmp_path / "a.csv")
    header, row_old, row_new = (tmp_path / "a.csv").read_text().splitlines()[:3]
    assert header.split(",")[:len(CSV_FIELDS)] == CSV_FIELDS and "daemon_memory_verdict" in header
    assert "slower" in row_new.split(",")[header.split(",").index("daemon_memory_verdict")]
    plain = factories.basic()
    write_csv(plain, tmp_path / "b.csv")
    assert (tmp_path / "b.csv").read_text().splitlines()[0].split(",") == CSV_FIELDS  # no daemon: as before
    assert "Whose figures" not in render_markdown(plain)
    from refbench import analysis
    from refbench.render.html import render_html
    html = render_html(r, analysis.analyse(r))
    assert 'data-metric="daemon-memory" data-verdict="slower"' in html and "Daemon memory" in html


def test_the_daemon_metrics_survive_shard_and_merge():
    from refbench import merge as mg

    shards = factories.two_shards(_judged_daemon_results())
    merged, _ = mg.merge(shards)
    back = rs.Results.from_json(json.loads(json.dumps(merged.to_json())), "merged")
    assert [st.name for _, st in back.steps()] == ["add", "cat"]
    for _, st in back.steps():
        assert st.by_metric("new")["daemon-memory"].verdict == Verdict.SLOWER
        assert st.builds["new"].daemon_memory == shards[0][1].scenarios[0].steps[0].builds["new"].daemon_memory
    assert "daemon-memory" in back.judged_metrics()


def test_a_daemon_figure_that_is_zero_in_every_run_is_not_judged():
    """kubo's daemon wrote nothing (a tmpfs, or nothing to write) in every run of both builds: no
    ratio or log of a zero exists, so the figure is left out. Before, the runner contrasted it and
    died dividing by a zero mean (tests/test_kubo.py, every test, in CI)."""
    from refbench.results import contrastable

    assert not contrastable((0, 0, 0), (0, 0))
    assert not contrastable((0, 5), (4, 5))
    assert not contrastable((), (1,))
    assert contrastable((3, 4), (5, 6))


def test_the_summary_says_which_counter_the_daemons_cpu_came_from():
    """results.json's backend fact `daemon cpu` (IpfsBackend.describe) is in the 'whose figures' note."""
    from refbench.daemon import CPU_SOURCES
    from refbench.render.markdown import render_markdown

    r = _judged_daemon_results()
    doc = r.to_json()
    doc["backend"] = {**doc.get("backend", {}), "kind": "ipfs", "daemon cpu": CPU_SOURCES["cgroup"]}
    md = render_markdown(rs.Results.from_json(json.loads(json.dumps(doc)), "t"))
    # the fact comes from the results file, so the summary writes it escaped (md_escape: `_` as
    # `\_`), which reads the same
    from refbench.render.format import md_escape
    assert f"its CPU time ({md_escape(CPU_SOURCES['cgroup'])})" in md
    assert "its CPU time (" not in render_markdown(r)  # an older file: no source, nothing said
