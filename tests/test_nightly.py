"""nightly: two consecutive nights on a test origin, with a regression pushed to master between them."""
from __future__ import annotations

import json
import re
import sqlite3

import numpy as np
import pytest

from conftest import ROOT, run_bench, run_cli
from origins import S5CMD_NEW, new_origin, s5cmd_files
# The regression hunted here is 2x. Night 1 measures identical code: at the default alpha its one
# comparison calls a chance "slower" 5% of the time (a wide interval reaching past the threshold
# is enough: [+1.5%, +36.9%] at +3.8% was one), which would fail this test of the nightly's
# bookkeeping one run in twenty; alpha 0.001 makes that 0.1%, and a 2x slow-down on 6 runs a build
# is still far beyond it. A 25% threshold keeps night 2's step 'slower', not a few-percent change.
# --no-profile: no test here reads a profile, and perf's runs of night 2's slower step were half of it.
RUN = ("--measure-identical", "--quick", "--only", "small files/remove", "-r", "6", "-w", "1", "--rounds", "3", "--threshold", "0.25",
       "--alpha", "0.001", "--no-profile")


def release_and_a_commit(root):
    """A test origin with v1.0.0 (commit "release") and one commit after it on master ("night1"),
    both with the tree of the s5cmd origin's v1.1.0: one build serves them all."""
    o = new_origin(root)
    o.commit("release", s5cmd_files(S5CMD_NEW, root / "scratch"), "release 1.0.0", tags=["v1.0.0"])
    o.commit("night1", s5cmd_files(S5CMD_NEW, root / "scratch"), "tidy up")
    return o


@pytest.mark.slow
@pytest.mark.alone  # the alarm is tonight's verdict, read off real timings
def test_two_nights_with_a_regression_between(tmp_path_factory, builds_dir):
    root = tmp_path_factory.mktemp("nightly")
    scratch = root / "scratch"
    o = release_and_a_commit(root)
    db_path = root / "hist" / "bench.db"
    trend = root / "hist" / "trend.html"
    # two nights are too few for a change point: this test keeps the old rule (tonight's verdict)
    common = ("--history", str(db_path), "--trend", str(trend), "--repo", str(o.path),
              "--builds-dir", str(builds_dir), "--alarm", "verdict", *RUN)

    # night 1: latest_release vs master, same code: nothing slower
    first = run_bench("nightly", *common, cwd=root)
    assert first.returncode == 0, first.stderr[-3000:] + first.stdout

    # a regression lands on master during the day
    o.commit("night2", s5cmd_files(S5CMD_NEW, scratch, slow=100), "make remove slower")  # the bisect line's slow tree
    second = run_bench("nightly", "--since-last", *common, cwd=root)
    assert second.returncode == 1, second.stderr[-3000:] + second.stdout
    assert "REGRESSION small files / remove" in second.stdout

    db = sqlite3.connect(db_path)
    db.row_factory = sqlite3.Row
    runs = db.execute("SELECT * FROM runs ORDER BY id").fetchall()
    assert [(r["mode"], r["base_sha"], r["head_sha"], r["exit_code"], r["slower"]) for r in runs] == [
        ("release", o.shas["release"], o.shas["night1"], 0, 0),
        ("since-last", o.shas["night1"], o.shas["night2"], 1, 1),
    ]
    assert runs[0]["base_ref"] == "latest_release" and runs[0]["head_ref"] == "master"
    commits = db.execute("SELECT run_id, role, sha FROM commits ORDER BY run_id, role").fetchall()
    assert [tuple(c) for c in commits] == [(1, "base", o.shas["release"]), (1, "head", o.shas["night1"]),
                                           (2, "base", o.shas["night1"]), (2, "head", o.shas["night2"])]
    env = db.execute("SELECT host, go, hyperfine, cpus FROM environment ORDER BY run_id").fetchall()
    assert len(env) == 2 and all(e["go"] and e["hyperfine"] and e["cpus"] for e in env)
    verdicts = db.execute("SELECT run_id, scenario, step, verdict, rel FROM verdicts ORDER BY run_id").fetchall()
    assert [(v["run_id"], v["scenario"], v["step"]) for v in verdicts] == [(1, "small files", "remove"),
                                                                          (2, "small files", "remove")]
    assert verdicts[0]["verdict"] != "slower" and verdicts[1]["verdict"] == "slower" and verdicts[1]["rel"] > 0.05
    samples = db.execute("SELECT run_id, role, COUNT(*), MIN(seconds) FROM samples GROUP BY run_id, role").fetchall()
    # the nightly samples on a budget by default: every step gets its planned 6 runs, undecided
    # ones more; the history holds every run each night made
    nights = [json.loads(p.read_text()) for p in sorted((root / "hist" / "nightly").glob("*/results.json"))]
    assert [r["settings"]["budget_seconds"] for r in nights] == [1800.0, 1800.0]
    counts = [len(b["times"]) for r in nights for b in r["scenarios"][0]["steps"][0]["builds"].values()]
    assert all(n >= 6 for n in counts), counts
    assert [(s[0], s[1], s[2]) for s in samples] == [(1, "base", counts[0]), (1, "head", counts[1]),
                                                     (2, "base", counts[2]), (2, "head", counts[3])]
    assert all(s[3] > 0 for s in samples)
    steps = db.execute("SELECT mean, n FROM steps WHERE run_id = 2 ORDER BY role").fetchall()
    assert steps[1]["mean"] > steps[0]["mean"] and steps[0]["n"] == counts[2]

    # the trend page: self-contained, one chart for the step, both nights plotted, the regression marked
    page = trend.read_text()
    assert page.startswith("<!doctype html>")
    assert not re.search(r"<script[^>]+src=|<link[^>]+stylesheet|https?://", page)
    assert page.count("<svg") == 1 and "small files / remove" in page
    assert page.count('class="pt') == 2
    assert page.count('class="ring regression"') == 1
    assert o.shas["night2"][:10] in page

    # a third night with no new commit on master: nothing to compare, nothing recorded
    third = run_bench("nightly", "--since-last", *common, cwd=root)
    assert third.returncode == 0, third.stderr[-2000:]
    assert "nothing new" in third.stderr
    assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2


@pytest.mark.slow
def test_render_only_and_empty_history(tmp_path):
    db = tmp_path / "h.db"
    proc = run_bench("nightly", "--history", str(db), "--render-only")
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "trend.html").read_text()
    assert "No completed runs yet" in page
    bad = run_bench("nightly", "--history", str(db), "-s", "a", "b")
    assert bad.returncode == 2 and "nightly sets -s itself" in bad.stderr


@pytest.mark.slow
def test_a_failed_night_is_recorded_and_exits_2(tmp_path):
    o = new_origin(tmp_path)
    o.commit("one", {"NOTE": "1\n"}, "one", tags=["v1.0.0"])
    db_path = tmp_path / "bench.db"
    proc = run_bench("nightly", "--history", str(db_path), "--repo", str(o.path), "--head", "no-such-branch",
                     "--builds-dir", str(tmp_path / "builds"), *RUN)
    assert proc.returncode == 2, proc.stderr
    assert "no-such-branch" in proc.stderr and "Traceback" not in proc.stderr
    row = sqlite3.connect(db_path).execute("SELECT exit_code, error, head_ref, results FROM runs").fetchone()
    assert row[0] == 2 and "no-such-branch" in row[1] and row[2] == "no-such-branch" and row[3] is None
    assert "error:" in (tmp_path / "trend.html").read_text()



@pytest.mark.slow
@pytest.mark.alone
def test_a_night_with_a_variant_on_real_s5cmd(tmp_path_factory, builds_dir):
    """One real night with `--variant w2=master,flags=--numworkers 2`: two series in the history,
    the variant's comparison runs both builds with --numworkers 2 and is labelled w2.base / w2
    (the two commits build one binary: --measure-identical has it measured all the same)."""
    root = tmp_path_factory.mktemp("nightly-variant")
    o = release_and_a_commit(root)
    db_path = root / "hist" / "bench.db"
    proc = run_bench("nightly", "--history", str(db_path), "--repo", str(o.path), "--builds-dir", str(builds_dir),
                     "--variant", "w2=master,flags=--numworkers 2", "--measure-identical", "--quick",
                     "--only", "small files/remove",
                     "-r", "3", "-w", "0", "--rounds", "1", "--budget", "none", cwd=root)
    assert proc.returncode in (0, 1), proc.stderr[-3000:] + proc.stdout
    assert "nightly [w2]:" in proc.stdout, proc.stdout
    rows = sqlite3.connect(db_path).execute("SELECT head_ref, base_sha, head_sha FROM runs ORDER BY id").fetchall()
    assert rows == [("master", o.shas["release"], o.shas["night1"]), ("master [w2]", o.shas["release"], o.shas["night1"])]
    (night_dir,) = (root / "hist" / "nightly").iterdir()
    doc = json.loads((night_dir / "variants" / "w2" / "results.json").read_text())
    assert [b["label"] for b in doc["builds"]] == ["w2.base", "w2"]
    commands = [b["command"] for b in doc["scenarios"][0]["steps"][0]["builds"].values()]
    assert len(commands) == 2 and all("--numworkers 2 " in c for c in commands), commands
    assert (night_dir / "results.json").exists() and "--numworkers" not in (night_dir / "results.json").read_text()

# ---- a variant's series ------------------------------------------------------------------------------
GC = "gc200"  # the variant of the tests below: master with GOGC=200
VARIANT = f"{GC}=master,env=GOGC=200"


def series_results(request, night: int, level: float, rng):
    """A night's results for `request` as the comparison returns them (test_changepoints' night),
    its builds labelled as the request names them: a variant's series is NAME.base vs NAME."""
    from refbench.results import Results
    from test_changepoints import fake_results_doc
    doc = fake_results_doc(night, level, rng, base_level=1.0)
    if request.variants:
        base, head = (v.name for v in request.variants)
        doc = json.loads(json.dumps(doc).replace('"v1.0.0"', f'"{base}"').replace('"master"', f'"{head}"'))
    return Results.from_json(doc, f"night {night}")


def nights_with_a_variant(tmp_path, monkeypatch, capsys, plain, variant, *extra, fail_variant=False):
    """The nightly command night after night with `--variant gc200=master,env=GOGC=200`: each
    night's comparisons replaced by synthetic results at `plain[i]` and `variant[i]` (the
    baseline at 1.0 in both); (exit codes, stdout of each night, the requests each night made)."""
    from refbench.commands import nightly as nightly_cmd
    from refbench.errors import BuildError, RefbenchError
    rng = np.random.default_rng(26)
    night, requests = {"n": 0}, []

    def fake_run(request, outputs, reporter):
        requests.append((request, outputs))
        if request.variants:
            if fail_variant:
                raise BuildError("build of master (abc) failed with go1.26.8 (exit 1)", sha="abc")
            return series_results(request, night["n"], variant[night["n"] - 1], rng)
        night["n"] += 1
        return series_results(request, night["n"], plain[night["n"] - 1], rng)

    common = ["--history", str(tmp_path / "h.db"), "--machine", "ci", "--builds-dir", str(tmp_path / "b"),
              "--out-dir", str(tmp_path / "out"), "--trend", str(tmp_path / "trend.html"), "--variant", VARIANT,
              *extra]
    codes, outs = [], []
    for _ in plain:
        try:
            codes.append(nightly_cmd.main(common, measure=fake_run))
        except RefbenchError as e:  # as cli.main ends it
            codes.append(e.code)
        outs.append(capsys.readouterr().out)
    return codes, outs, requests


def test_a_variant_is_a_series_of_its_own_with_its_own_alarm(tmp_path, monkeypatch, capsys):
    """master under GOGC=200 regresses from night 2 while plain master does not: the variant's
    series alarms on its second slow night, named by the variant, with a bisect line under the
    variant's settings; the plain series stays quiet; each series is its own run in the history,
    its nights under head_ref `master [gc200]`."""
    plain, variant = [1.0, 1.0, 1.0], [1.0, 1.5, 1.5]
    codes, outs, requests = nights_with_a_variant(tmp_path, monkeypatch, capsys, plain, variant)
    assert codes == [0, 0, 1], outs
    (line,) = [ln for ln in outs[2].splitlines() if ln.startswith("LASTING")]
    assert line.startswith(f"LASTING REGRESSION small files / upload [{GC}]: +"), line
    assert line.endswith("--only 'small files/upload' --repo /srv/origin.git --variant env=GOGC=200"), line
    assert not any(ln.startswith(("LASTING", "CHANGE POINT")) and f"[{GC}]" not in ln for o in outs
                   for ln in o.splitlines())

    # tonight's comparisons: the plain one as before; the variant's both sides under GOGC=200, in their own files
    (plain_req, plain_out), (var_req, var_out) = requests[-2:]
    assert plain_req.refs == ("latest_release", "master") and plain_req.variants == ()
    assert var_req.refs == () and [(v.name, v.ref, v.env) for v in var_req.variants] == [
        (f"{GC}.base", "latest_release", (("GOGC", "200"),)), (GC, "master", (("GOGC", "200"),))]
    assert var_out.json == tmp_path / "out" / "variants" / GC / "results.json"
    assert plain_out.json == tmp_path / "out" / "results.json"
    assert var_req.command_line[:4] == ("--variant", f"{GC}.base=latest_release,env=GOGC=200",
                                        "--variant", f"{GC}=master,env=GOGC=200")

    db = sqlite3.connect(tmp_path / "h.db")
    rows = db.execute("SELECT head_ref, base_ref, exit_code FROM runs ORDER BY id").fetchall()
    assert rows == [("master", "latest_release", 0), (f"master [{GC}]", "latest_release", 0)] * 2 + [
        ("master", "latest_release", 0), (f"master [{GC}]", "latest_release", 1)]
    assert db.execute("SELECT DISTINCT head_ref FROM changepoints").fetchall() == [(f"master [{GC}]",)]
    page = (tmp_path / "trend.html").read_text()
    assert f"master [{GC}]" in page and page.count("<svg") == 2  # a chart per series


def test_a_variant_series_bisects_and_compares_from_its_own_nights(tmp_path):
    """--since-last: a variant's baseline is its own series' last head; the series key and the
    bisect line are the variant's."""
    from refbench import nightly, variants as vr
    from refbench.history import open_history
    from refbench.pipeline import RunRequest
    from test_changepoints import fake_results
    rng = np.random.default_rng(3)
    db = open_history(tmp_path / "h.db")
    db.record_run(started="2026-01-01T03:00:00Z", mode="release", base_ref="latest_release", head_ref="master",
                  results=fake_results(1, 1.0, rng), exit_code=0, machine="ci")
    db.record_run(started="2026-01-01T03:10:00Z", mode="release", base_ref="latest_release",
                  head_ref=f"master [{GC}]", results=fake_results(7, 1.0, rng), exit_code=0, machine="ci")
    v = vr.parse(VARIANT, {})
    req = nightly.NightRequest(run=RunRequest(refs=(), target="s5cmd"), machine="ci", home=tmp_path,
                               trend=tmp_path / "t.html", draw=str, since_last=True, variants=(v,))
    plain, var = req.watched()
    assert (plain.key, var.key) == ("master", f"master [{GC}]") and nightly.variant_of(var.key) == GC
    assert nightly.variant_of("master") is None
    assert nightly.baseline(db, req, "/srv/origin.git", watched=var) == ("07" * 20, "since-last")
    assert nightly.baseline(db, req, "/srv/origin.git", watched=plain) == ("01" * 20, "since-last")
    assert nightly.bisect_variant(var.key, {}) == GC  # a [[variants]] table's name, when only the history is known
    db.close()


def test_a_failing_variant_does_not_stop_the_head_series(tmp_path, monkeypatch, capsys):
    """A variant whose build fails (another Go, say) is a failed night of its series, recorded with
    its error; the head's series is measured and recorded all the same, and the night exits 2."""
    codes, outs, _ = nights_with_a_variant(tmp_path, monkeypatch, capsys, [1.0], [1.0], fail_variant=True)
    assert codes == [2]
    rows = sqlite3.connect(tmp_path / "h.db").execute("SELECT head_ref, exit_code, error FROM runs").fetchall()
    assert rows[0] == ("master", 0, None) and rows[1][:2] == (f"master [{GC}]", 2) and "go1.26.8" in rows[1][2]


@pytest.mark.parametrize("argv,says", [
    (("--variant", "go=1.26"), "settings alone"),
    (("--variant", "a=master", "--variant", "a=main"), "'a' is named twice"),
    (("--variant", "nosuch"), "or the name of a [[variants]] table"),
    # an implementation's series (issue 37): checked as a run checks its --impl
    (("--impl", "nosuch"), "--impl nosuch: unknown implementation 'nosuch'"),
    (("--impl", "rclone@v1.0"), "rclone is pinned at v1.76.0"),
    (("--impl", "helia"), "--impl helia@5.5.1: a ipfs client; 's5cmd' uses the s3 backend"),
    (("--impl", "rclone", "--impl", "rclone"), "rclone v1.76.0 given twice"),
    (("--variant", "x=impl:rclone,go=1.26"), "an implementation takes env= and flags=, not go="),
    (("--variant", "x=impl:rclone", "--go", "1.26"), "--go applies to refs: --variant x=impl:rclone"),
])
def test_a_bad_nightly_variant_is_one_line(tmp_path, argv, says):
    proc = run_cli("nightly", "--history", tmp_path / "h.db", "--builds-dir", tmp_path / "b", *argv)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_variant_night_on_the_mock(tmp_path, monkeypatch):
    """The whole nightly on --executor mock: the variant's series is a real pipeline run whose two
    builds carry its flags, labelled by its name, written in variants/NAME. (The mock's scenarios
    have no {{ extra }}, and it reads a command's figures from its first word, which a variant's
    environment would make `export`: test_variants checks that both reach the commands.)"""
    from fakes.pipeline import mock_args, scenarios_file
    from refbench import results as rs
    from test_judge import BINARIES, SCENARIOS
    scenarios = scenarios_file(monkeypatch, tmp_path, SCENARIOS)
    proc = run_cli("nightly", "--history", tmp_path / "h.db", "--scenarios", scenarios, "-t", "fake", "--base",
                   "v1.0.0", "--head", "new", "--out-dir", tmp_path / "night", "--builds-dir", tmp_path / "b",
                   "-r", "6", "--rounds", "3", "-w", "0", "--no-rss", "--no-profile", "--budget", "none",
                   *mock_args(BINARIES, "B", 0.005), "--alarm", "verdict", "--variant", "w2=new,flags=--workers 2")
    assert proc.returncode == 1, proc.stderr  # `new` is 8% slower: tonight's verdict, in both series
    assert "REGRESSION tiny / list:" in proc.stdout and "REGRESSION tiny / list [w2]:" in proc.stdout
    r = rs.load(tmp_path / "night" / "variants" / "w2" / "results.json")
    assert [(b.label, b.ref, b.flags) for b in r.builds] == [("w2.base", "v1.0.0", ("--workers", "2")),
                                                             ("w2", "new", ("--workers", "2"))]
    assert all(st.comparisons[0].contender == "w2" for _, st in r.steps())
    assert rs.load(tmp_path / "night" / "results.json").baseline == "v1.0.0"


# ---- the daemon's metrics in the history and the nightly's series (issue 36) ----------------
def _daemon_night(db, started: str) -> int:
    from test_daemon_metrics import _judged_daemon_results
    return db.record_run(started=started, mode="release", base_ref="v1", head_ref="master",
                         results=_judged_daemon_results(), exit_code=0)


def test_the_history_keeps_the_daemon_metrics_in_rows_of_their_own(tmp_path):
    from refbench.history import open_history
    db = open_history(tmp_path / "h.db")
    rid = _daemon_night(db, "2026-11-02T03:00:00Z")
    db.close()
    raw = sqlite3.connect(tmp_path / "h.db")
    got = raw.execute("SELECT role, daemon_memory FROM samples WHERE run_id = ? AND idx = 0 ORDER BY role",
                      (rid,)).fetchall()
    assert got == [("base", 100 << 20), ("head", (100 + 64) << 20)]
    rows = dict(raw.execute("SELECT metric, verdict FROM metric_verdicts WHERE run_id = ?", (rid,)).fetchall())
    assert rows == {"daemon-cpu": "no significant change", "daemon-memory": "slower",
                    "daemon-alloc": "no significant change"}
    assert raw.execute("SELECT COUNT(*) FROM step_metrics WHERE metric = 'daemon-writes'").fetchone()[0] == 2
    db = open_history(tmp_path / "h.db")
    [night] = db.nights(metric="daemon-memory")
    assert night.verdict == "slower" and night.metric == "daemon-memory"
    assert night.h_mean == pytest.approx(night.b_mean + (64 << 20), rel=1e-6)
    assert [n.metric for n in db.nights()] == ["wall"]  # wall time's series as before
    db.close()


def test_a_history_written_before_upgrades_and_its_daemon_figures_become_series(tmp_path):
    """tests/data/history-v2-daemon.db was written by refbench's history schema 2 (the daemon's
    figures only inside the saved results.json): it upgrades in place, its night's daemon
    metrics are rows, and the nightly's series and trend page include them."""
    import shutil

    from refbench import nightly
    from refbench.history import SCHEMA_VERSION, open_history
    from refbench.render.trend import render_trend
    path = tmp_path / "old.db"
    shutil.copy(ROOT / "tests" / "data" / "history-v2-daemon.db", path)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 2
    db = open_history(path)
    [old] = db.nights(metric="daemon-memory")
    assert old.verdict == "slower" and old.h_mean > old.b_mean + (60 << 20)
    _daemon_night(db, "2026-11-02T03:00:00Z")
    memory = nightly.series(db, metric="daemon-memory")
    assert [len(v) for v in memory.values()] == [2]
    trend = nightly.trend_series(db)
    assert {s.metric for s in trend} == {"wall", "daemon-cpu", "daemon-memory", "daemon-alloc"}
    html = render_trend(nightly.trend_page(db))
    assert "add: daemon memory" in html and "MiB" in html
    db.close()
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    # the old night's samples have no daemon columns filled (its per-run figures stay in results)
    assert raw.execute("SELECT COUNT(*) FROM samples WHERE run_id = 1 AND daemon_cpu IS NOT NULL").fetchone()[0] == 0


# ---- an implementation's pinned version as a series of its own (issue 37) --------------------
def test_an_implementation_is_a_series_of_its_own_on_the_mock(tmp_path, monkeypatch):
    """`nightly --impl other-cli`, two nights on --executor mock into a SQLite history: each night
    the head's series as before, and the implementation's: tonight's head against it at its pinned
    version, recorded under `impl:other-cli@3.1` with the head as its baseline, in
    implementations/NAME@VERSION, on the trend page as a chart of its own. It is twice as slow as
    the head by design: no alarm, no REGRESSION line, no bisect line, while the head's series is
    judged as ever."""
    from fakes.pipeline import mock_args, scenarios_file
    from refbench import results as rs
    from test_implementations import SCENARIOS  # a target `fake`, and other-cli 3.1 with a command for `copy`
    scenarios = scenarios_file(monkeypatch, tmp_path, SCENARIOS)
    binaries = {"v1.0.0": "fake-1.00", "other-cli": "fake-2.00"}
    common = ("--history", tmp_path / "h.db", "--scenarios", scenarios, "-t", "fake", "--base", "v1.0.0",
              "--head", "v1.0.0", "--builds-dir", tmp_path / "b", "--trend", tmp_path / "trend.html",
              "-r", "6", "--rounds", "3", "-w", "0", "--no-rss", "--no-profile", "--budget", "none",
              "--measure-identical", "--alarm", "both", "--impl", "other-cli")
    for night in (1, 2):
        proc = run_cli("nightly", *common, "--out-dir", tmp_path / f"night{night}",
                       *mock_args(binaries, f"N{night}", 0.005))
        assert proc.returncode == 0, proc.stderr + proc.stdout
        assert "nightly [other-cli@3.1]:" in proc.stdout and "REGRESSION" not in proc.stdout, proc.stdout
        assert "v1.0.0 vs other-cli 3.1 (pinned, pypi)" in proc.stderr
        r = rs.load(tmp_path / f"night{night}" / "implementations" / "other-cli@3.1" / "results.json")
        assert [(b.label, b.kind) for b in r.builds] == [("v1.0.0", "tag"), ("other-cli 3.1", "implementation")]
        assert {st.name: [c.verdict for c in st.comparisons if c.metric == "wall"] for _, st in r.steps()} == {
            "list": ["not supported"], "copy": ["slower"]}  # its own command where it has one
        assert "--impl other-cli@3.1" in " ".join(r.command_line)

    db = sqlite3.connect(tmp_path / "h.db")
    rows = db.execute("SELECT head_ref, base_ref, mode, exit_code FROM runs ORDER BY id").fetchall()
    assert rows == [("v1.0.0", "v1.0.0", "release", 0), ("impl:other-cli@3.1", "v1.0.0", "implementation", 0)] * 2
    heads = db.execute("SELECT DISTINCT c.label, c.kind, c.ref FROM commits c JOIN runs r ON r.id = c.run_id "
                       "WHERE r.head_ref = 'impl:other-cli@3.1' AND c.role = 'head'").fetchall()
    assert heads == [("other-cli 3.1", "implementation", "other-cli@3.1")]
    from refbench import nightly
    from refbench.history import open_history
    h = open_history(tmp_path / "h.db")
    s = nightly.series(h, head_ref="impl:other-cli@3.1")
    h.close()
    machine = nightly_machine(db)
    nights, unsupported = (s[("fake", machine, "impl:other-cli@3.1", "tiny", step)] for step in ("copy", "list"))
    assert len(nights) == 2 and all(n.verdict == "slower" and n.rel > 0.5 and n.h_median for n in nights)
    assert all(n.verdict == "not supported" and n.h_mean is None for n in unsupported)  # no point to plot
    page = (tmp_path / "trend.html").read_text()
    # a chart per step of each series: the head's list and copy, the implementation's copy (list has no point)
    assert "impl:other-cli@3.1" in page and page.count("<svg") == 3


def test_a_named_variant_of_an_implementation_is_a_series_of_its_own(tmp_path, monkeypatch):
    """`nightly --variant bulk=impl:other-cli,env=OTHER_THREADS=16`: the implementation under its
    variant's environment against tonight's head, recorded under `impl:other-cli@3.1 [bulk]`
    (its own series beside the plain one), labelled by the variant's name, in
    implementations/bulk, never an alarm. Before, it was taken for a ref's variant: its baseline
    the base ref under the implementation's environment, its alarm the verdict of another program."""
    from fakes.pipeline import mock_args, scenarios_file
    from refbench import results as rs
    from test_implementations import SCENARIOS
    scenarios = scenarios_file(monkeypatch, tmp_path, SCENARIOS)
    proc = run_cli("nightly", "--history", tmp_path / "h.db", "--scenarios", scenarios, "-t", "fake", "--base",
                   "v1.0.0", "--head", "v1.0.0", "--builds-dir", tmp_path / "b", "--trend", tmp_path / "trend.html",
                   "-r", "4", "--rounds", "2", "-w", "0", "--no-rss", "--no-profile", "--budget", "none",
                   "--alarm", "both", "--out-dir", tmp_path / "night", "--impl", "other-cli",
                   "--variant", "bulk=impl:other-cli,env=OTHER_THREADS=16",
                   *mock_args({"v1.0.0": "fake-1.00", "other-cli": "fake-2.00"}, "V", 0.005))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "nightly [bulk]:" in proc.stdout and "nightly [other-cli@3.1]:" in proc.stdout, proc.stdout
    assert "v1.0.0 vs variant bulk (env OTHER_THREADS=16) of other-cli 3.1 (pinned, pypi)" in proc.stderr
    r = rs.load(tmp_path / "night" / "implementations" / "bulk" / "results.json")
    assert [(b.label, b.kind, dict(b.env or {})) for b in r.builds] == [
        ("v1.0.0", "tag", {}), ("bulk", "implementation", {"OTHER_THREADS": "16"})]
    assert "--variant bulk=impl:other-cli,env=OTHER_THREADS=16" in " ".join(r.command_line)
    db = sqlite3.connect(tmp_path / "h.db")
    assert db.execute("SELECT head_ref, base_ref, mode, exit_code FROM runs ORDER BY id").fetchall() == [
        ("v1.0.0", "v1.0.0", "release", 0), ("impl:other-cli@3.1", "v1.0.0", "implementation", 0),
        ("impl:other-cli@3.1 [bulk]", "v1.0.0", "implementation", 0)]
    from refbench import nightly
    assert nightly.impl_of("impl:other-cli@3.1 [bulk]") == "other-cli@3.1"
    assert nightly.series_label("impl:other-cli@3.1 [bulk]") == "bulk"


def nightly_machine(db) -> str:
    return db.execute("SELECT DISTINCT machine FROM runs").fetchone()[0]


def test_a_shift_in_an_implementations_series_is_found_but_never_alarms(tmp_path):
    """Ten nights of an implementation's series whose own times step up by 30% at night 6 (its
    program the same pinned bytes: the machine moved): the change point is found and recorded,
    without an alarm and without a bisect line (no commit to walk); the same nights under a ref's
    key alarm, with one."""
    from refbench import changepoints as cpd, nightly
    from refbench.history import open_history
    from test_changepoints import fake_results
    rng = np.random.default_rng(37)
    db = open_history(tmp_path / "h.db")
    found = {}
    for key in ("impl:other-cli@3.1", "master"):
        for night in range(1, 11):
            run_id = db.record_run(started=f"2026-01-{night:02d}T03:00:00Z", mode="implementation",
                                   base_ref="master", head_ref=key, exit_code=0, machine="ci",
                                   results=fake_results(night, 13.0 if night >= 6 else 10.0, rng))
            found.setdefault(key, []).extend(nightly.new_changepoints(
                db, target="s5cmd", machine="ci", head_ref=key, params=cpd.Params(), statistic="median",
                run_id=run_id, alarms=nightly.impl_of(key) is None))
    (impl_shift,), (ref_shift,) = found["impl:other-cli@3.1"], found["master"]
    assert impl_shift.rel > 0.2 and not impl_shift.alarm and impl_shift.bisect == nightly.NO_BISECT
    assert ref_shift.alarm and ref_shift.bisect.startswith("./bench.py bisect")
    assert {(k["head_ref"], k["alarm"]) for k in db.known_changepoints()} == {("impl:other-cli@3.1", 0),
                                                                           ("master", 1)}
    assert nightly.series_label("impl:other-cli@3.1") == "other-cli@3.1" and nightly.series_label("master") is None
    # the trend page marks the ref's change point as alarmed, never the implementation's
    charts = {t.head_ref: t for t in nightly.trend_series(db, "s5cmd", "ci")}
    assert [c.alarmed for c in charts["master"].changepoints] == [True]
    assert [c.alarmed for c in charts["impl:other-cli@3.1"].changepoints] == [False]
    db.close()


@pytest.mark.slow
def test_a_real_night_with_an_implementation(s5_origin, builds_dir, tmp_path, implementations_cache):
    """One real night on the embedded MinIO with `--impl s3cmd` (a PyPI install: seconds, where rclone
    is a Go build): the head's series (v1.0.0 against itself: an identical binary) and s3cmd's,
    measured against the head on one step of the small-files scenario, recorded as `impl:s3cmd@2.4.0`."""
    from conftest import need
    from refbench.tools import find_tool
    if not find_tool("hyperfine"):
        need("hyperfine", "timing the commands")
    db_path = tmp_path / "h.db"
    proc = run_bench("nightly", "--history", str(db_path), "--repo", str(s5_origin.path), "--base", "v1.0.0",
                     "--head", "v1.0.0", "--builds-dir", str(builds_dir), "--impl", "s3cmd", "--machine", "ci",
                     "--only", "s3 clients, small files/upload", "--quick", "-r", "2", "-w", "0", "--rounds", "1",
                     "--budget", "none", "--no-profile", "--out-dir", str(tmp_path / "night"), cwd=tmp_path,
                     env=implementations_cache)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    assert "nightly [s3cmd@2.4.0]:" in proc.stdout
    db = sqlite3.connect(db_path)
    assert db.execute("SELECT head_ref, mode, exit_code FROM runs ORDER BY id").fetchall() == [
        ("v1.0.0", "release", 0), ("impl:s3cmd@2.4.0", "implementation", 0)]
    steps = db.execute("SELECT DISTINCT s.step FROM steps s JOIN runs r ON r.id = s.run_id WHERE s.role = 'head' "
                       "AND r.head_ref = 'impl:s3cmd@2.4.0' AND s.median > 0").fetchall()
    assert [s[0] for s in steps] == ["upload"]
    assert "impl:s3cmd@2.4.0" in (tmp_path / "trend.html").read_text()
