"""nightly: two consecutive nights on a test origin, with a regression pushed to master between them."""
from __future__ import annotations

import json
import re
import sqlite3

import pytest

from conftest import run_bench
from origins import S5CMD_NEW, new_origin, s5cmd_files

pytestmark = pytest.mark.slow
# The regression hunted here is 2x: a 25% threshold keeps night 2 far beyond it and stops night 1
# (identical code, one comparison at alpha) from tripping on a chance few-percent "slower".
RUN = ("--measure-identical", "--quick", "--only", "small files/remove", "-r", "6", "-w", "1", "--rounds", "3", "--threshold", "0.25")


def test_two_nights_with_a_regression_between(tmp_path_factory, builds_dir):
    root = tmp_path_factory.mktemp("nightly")
    scratch = root / "scratch"
    o = new_origin(root)
    o.commit("release", s5cmd_files(S5CMD_NEW, scratch, note="release\n"), "release 1.0.0", tags=["v1.0.0"])
    o.commit("night1", s5cmd_files(S5CMD_NEW, scratch, note="tidy up\n"), "tidy up")
    db_path = root / "hist" / "bench.db"
    trend = root / "hist" / "trend.html"
    # two nights are too few for a change point: this test keeps the old rule (tonight's verdict)
    common = ("--history", str(db_path), "--trend", str(trend), "--repo", str(o.path),
              "--builds-dir", str(builds_dir), "--alarm", "verdict", *RUN)

    # night 1: latest_release vs master, same code: nothing slower
    first = run_bench("nightly", *common, cwd=root)
    assert first.returncode == 0, first.stderr[-3000:] + first.stdout

    # a regression lands on master during the day
    o.commit("night2", s5cmd_files(S5CMD_NEW, scratch, slow=100, note="oops\n"), "make remove slower")
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


def test_render_only_and_empty_history(tmp_path):
    db = tmp_path / "h.db"
    proc = run_bench("nightly", "--history", str(db), "--render-only")
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "trend.html").read_text()
    assert "No completed runs yet" in page
    bad = run_bench("nightly", "--history", str(db), "-s", "a", "b")
    assert bad.returncode == 2 and "nightly sets -s itself" in bad.stderr


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
