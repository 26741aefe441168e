"""A metric is a record (issue 56 part 1): one `metrics.Metric` added to the table, and nothing else
edited, is measured, judged, stored, merged, compared and shown.

The metric added is the daemon's GC cycles, which refbench.daemon already reads with every probe
(`Usage.gc`, go_gc_duration_seconds_count) and kept as context only. Its record says where its
figure comes from (the daemon's probes, `Usage.gc`), its family (the daemon's), its default
threshold and its name in the views; the fixture puts it in the table for one test
(`metrics.extended`, the table's seam), so no module of refbench is patched."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import factories
from refbench import daemon, judge, looks, merge as mg, metrics, pairing, results as rs
from refbench.commands._args import metric_list, metric_threshold
from refbench.figures import criteria
from refbench.hyperfine import CommandResult
from refbench.rounds import BuildSamples
from refbench.verdict import Verdict

GC = metrics.Metric(name="daemon-gc", display="daemon GC cycles", unit="count", source="probe", family="daemon",
                    threshold=0.10, read=lambda usage: usage.gc)
N = 12


@pytest.fixture
def gc_metric():
    with metrics.extended(GC) as table:
        yield table


def _samples(gc: int, seed: int) -> BuildSamples:
    """One build's runs as the runner collects them: hyperfine's export (wall the same for both
    builds) and the daemon's probes around each run, whose GC count differs."""
    t = factories.times(1.0, n=N, seed=seed)
    s = BuildSamples(command="ipfs add x")
    s.add(CommandResult("b", tuple(t), tuple(x * 0.3 for x in t), tuple(x * 0.1 for x in t), (0,) * N,
                        tuple(30 << 20 for _ in t), True, own_memory=True), 0)
    s.add_daemon([daemon.Usage(0.5 + 0.001 * i, (100 << 20) + 1000 * i, 4096 + i, 50_000_000 + i, gc + i % 3)
                  for i in range(N)])
    return s


def _run(gc_new: int = 30) -> rs.Results:
    """A run's one step built from the runner's samples and looks, then judged as a run is."""
    samples = {"old": _samples(20, 1), "new": _samples(gc_new, 2)}
    builds = [SimpleNamespace(label="old"), SimpleNamespace(label="new")]
    comps = looks.contrasts(builds, samples, ("wall",), criteria(), family_size=1)
    doc = factories.results_doc({("add", "add"): {"old": samples["old"].times, "new": samples["new"].times}})
    st = doc["scenarios"][0]["steps"][0]
    st["builds"] = {lab: s.record().to_json() for lab, s in samples.items()}
    st["comparisons"] = [c.to_json() for c in comps]
    r = rs.Results.from_json(json.loads(json.dumps(doc)), "t")
    judged = judge.verdicts(r.scenarios, r.labels, r.settings.criteria)
    return r.replace(scenarios=judged.scenarios, scoreboard=judged.scoreboard)


def test_the_runner_reads_the_new_metric_through_its_record_and_judges_it(gc_metric):
    usage = daemon.Usage(0.5, 1 << 20, 4096, 10, 7)
    assert usage.values()["daemon-gc"] == 7  # the probe's figure, read by the record
    s = _samples(20, 1)
    assert s.values("daemon-gc") == [20.0 + i % 3 for i in range(N)]
    r = _run()
    st = r.scenarios[0].steps[0]
    by = {c.metric: c for c in st.all_contrasts()}
    assert by["daemon-gc"].verdict == Verdict.SLOWER and by["daemon-gc"].rel == pytest.approx(0.5, abs=0.05)
    assert by["wall"].verdict != Verdict.SLOWER
    # in the daemon's family: wall time's adjusted p is what it is without the new member
    alone = judge.adjust_family([c for c in st.all_contrasts() if not judge.is_daemon_metric(c.metric)])
    assert [c.p_value for c in alone if c.metric == "wall"] == [by["wall"].p_value]
    assert "daemon-gc" in r.judged_metrics()
    # its default threshold, the options that name it, and what fails a run
    assert criteria().threshold_for("daemon-gc") == 0.10
    assert metric_threshold("daemon-gc=0.2") == ("daemon-gc", 0.2) and metric_list("wall,daemon-gc") == ("wall", "daemon-gc")
    assert judge.failing(st.all_contrasts()) == []
    assert [c.metric for c in judge.failing(st.all_contrasts(), ("daemon-gc",))] == ["daemon-gc"]


def test_results_json_keeps_it_under_its_key_and_a_file_without_it_is_as_before(tmp_path):
    plain = factories.results_doc({("add", "add"): {"old": factories.times(1.0), "new": factories.times(1.0)}})
    before = json.dumps(rs.Results.from_json(plain, "t").to_json())  # the built-in table's
    with metrics.extended(GC):
        r = _run()
        rs.write(r, tmp_path / "r.json")
        doc = json.loads((tmp_path / "r.json").read_text())
        keys = list(doc["scenarios"][0]["steps"][0]["builds"]["new"])
        assert keys.index("daemon_gc") == keys.index("daemon_alloc") + 1 and keys[keys.index("daemon_gc") + 1] == "stats"
        assert doc["version"] == rs.SCHEMA_VERSION == 2
        back = rs.load(tmp_path / "r.json")
        assert back == r and back.to_json() == r.to_json()
        b = back.scenarios[0].steps[0].builds["new"]
        assert b.daemon_gc == tuple(30 + i % 3 for i in range(N)) and b.values("daemon-gc")[0] == 30.0
        # by name in memory, and by its key in the keyword constructor as a field of its own would be
        assert b.metrics["daemon-gc"] == b.daemon_gc
        assert rs.Samples(times=(1.0, 1.1), daemon_gc=(3, 4)).values("daemon-gc") == (3.0, 4.0)
        # a run whose daemon gave no GC count writes exactly the file it wrote before the metric
        assert json.dumps(rs.Results.from_json(plain, "t").to_json()) == before


def test_a_refbench_without_the_record_refuses_its_verdict_by_name(tmp_path):
    with metrics.extended(GC):
        rs.write(_run(), tmp_path / "r.json")
    with pytest.raises(Exception, match="daemon-gc"):
        rs.load(tmp_path / "r.json")
    with pytest.raises(Exception, match="daemon-gc"):
        metric_list("daemon-gc")


def test_merge_and_compare_take_it(gc_metric):
    shards = factories.two_shards(_run())
    merged, _ = mg.merge(shards)
    back = rs.Results.from_json(json.loads(json.dumps(merged.to_json())), "merged")
    for _, st in back.steps():
        assert st.by_metric("new")["daemon-gc"].verdict == Verdict.SLOWER
        assert st.builds["new"].daemon_gc == shards[0][1].scenarios[0].steps[0].builds["new"].daemon_gc
    # compare: the new run's `new` (30 cycles) against the old run's `new` (20: as its baseline)
    rc = pairing.pair_runs(_run(gc_new=20), _run(gc_new=30))
    by = {c.metric: c.verdict for row in rc.rows for c in row.all_contrasts()}
    assert by["daemon-gc"] == Verdict.SLOWER and by["daemon-memory"] != Verdict.SLOWER, by
    from refbench.render.markdown import render_pairing_md
    assert "daemon GC cycles +" in render_pairing_md(rc)


def test_the_views_show_it(gc_metric, tmp_path):
    from refbench import analysis
    from refbench.render.csv import CSV_FIELDS, write_csv
    from refbench.render.html import render_html
    from refbench.render.markdown import render_github, render_markdown

    r = _run()
    md = render_markdown(r)
    assert "Daemon GC cycles" in md and "daemon-gc ±10.0%" in md
    assert "Daemon GC cycles" in render_github(r)
    html = render_html(r, analysis.analyse(r))
    assert 'data-metric="daemon-gc" data-verdict="slower"' in html and "Daemon GC cycles" in html
    write_csv(r, tmp_path / "r.csv")
    header, _, row_new = (tmp_path / "r.csv").read_text().splitlines()[:3]
    cols = header.split(",")
    assert cols[:len(CSV_FIELDS)] == CSV_FIELDS and "daemon_gc_mean" in cols
    assert row_new.split(",")[cols.index("daemon_gc_verdict")] == "slower"
    assert float(row_new.split(",")[cols.index("daemon_gc_mean")]) == pytest.approx(31.0)


def test_a_mock_run_takes_it_in_its_options_and_writes_what_it_measured(gc_metric, tmp_path):
    """`--executor mock`: the options name the new metric (its threshold recorded as any other's);
    the mock's runs have no daemon, so no figure of it, and the file has no key for it."""
    from conftest import run_cli
    from refbench.errors import EXIT_OK

    proc = run_cli("--executor", "mock", "-s", "v1", "v2", "--quick", "--only", "small files/upload",
                   "--fail-on", "daemon-gc", "--metric-threshold", "daemon-gc=0.2",
                   "--builds-dir", tmp_path / "builds", "-o", tmp_path / "s.md", "--json", tmp_path / "r.json",
                   "--csv", tmp_path / "r.csv", cwd=tmp_path)
    assert proc.returncode == EXIT_OK, proc.stderr
    r = rs.load(tmp_path / "r.json")
    assert r.settings.metric_thresholds["daemon-gc"] == 0.2
    doc = json.loads((tmp_path / "r.json").read_text())
    assert all("daemon_gc" not in b for sc in doc["scenarios"] for st in sc["steps"] for b in st["builds"].values())
    assert "daemon_gc" not in (tmp_path / "r.csv").read_text().splitlines()[0]


def test_the_nightly_keeps_its_series(gc_metric, tmp_path):
    """The history keeps a probed metric's statistics and verdicts in rows keyed by its name, so the
    new one has its series and its line on the trend page without a migration."""
    from refbench import nightly
    from refbench.history import open_history
    from refbench.render.trend import render_trend

    db = open_history(tmp_path / "h.db")
    for night in ("2026-11-01T03:00:00Z", "2026-11-02T03:00:00Z"):
        db.record_run(started=night, mode="release", base_ref="v1", head_ref="master", results=_run(), exit_code=0)
    assert "daemon-gc" in db.daemon_metrics()
    nights = db.nights(metric="daemon-gc")
    assert [n.verdict for n in nights] == ["slower", "slower"] and nights[0].h_mean == pytest.approx(31.0)
    assert "daemon-gc" in {s.metric for s in nightly.trend_series(db)}
    assert "add: daemon GC cycles" in render_trend(nightly.trend_page(db))
    db.close()
