"""Change points in the nightly: the backtest from issue 13, night by night through the history.

40 synthetic nights of one step: noise, a +15% step from night 25 on, and single-night +30%
spikes at nights 10 and 32. Each night is recorded in a SQLite history exactly as the nightly
records a real run, and the nightly's own change-point check runs after it. The step must alarm
once, located at night 25 ± 1; the spikes must alarm never.
"""
from __future__ import annotations

import html
import sqlite3
from types import SimpleNamespace

import numpy as np
import pytest

from refbench import changepoints as cpd, nightly
from refbench.render import trend
from refbench.commands import nightly as nightly_cmd
from refbench.history import SCHEMA_VERSION, open_history
from refbench.results import Results

NIGHTS, STEP_AT, SPIKES = 40, 25, (10, 32)  # 1-based nights


def night_levels(seed: int, noise: float = 0.02) -> list[float]:
    rng = np.random.default_rng(seed)
    levels = []
    for night in range(1, NIGHTS + 1):
        v = 10.0 * (1 + noise * rng.standard_normal())
        if night >= STEP_AT:
            v *= 1.15
        if night in SPIKES:
            v *= 1.30
        levels.append(v)
    return levels


def sha_of(night: int) -> str:
    return f"{night:02x}" * 20


def fake_results(night: int, level: float, rng, base_level: float = 10.0) -> Results:
    """A night's results as the comparison returns them: one step, baseline and head, 6 runs each."""
    return Results.from_json(fake_results_doc(night, level, rng, base_level), f"night {night}")


def fake_results_doc(night: int, level: float, rng, base_level: float = 10.0) -> dict:
    """The same, as results.json holds it."""
    def side(mu):
        times = [float(mu * (1 + 0.01 * rng.standard_normal())) for _ in range(6)]
        a = np.asarray(times)
        return {"times": times, "user": [t * 0.5 for t in times], "system": [t * 0.1 for t in times],
                "exit_codes": [0] * 6, "rounds": [0, 0, 1, 1, 2, 2], "rss_kb": 1000,
                "stats": {"n": 6, "mean": float(a.mean()), "stddev": float(a.std(ddof=1)),
                          "median": float(np.median(a)), "min": float(a.min()), "max": float(a.max()),
                          "p95": float(np.percentile(a, 95)),
                          "cv": float(a.std(ddof=1) / a.mean())}}
    base, head = side(base_level), side(level)
    rel = head["stats"]["mean"] / base["stats"]["mean"] - 1
    verdict = "slower" if rel > 0.05 else "faster" if rel < -0.05 else "no significant change"
    return {
        "schema": "refbench/results", "version": 1,
        "target": {"name": "s5cmd", "repo": "/srv/origin.git", "source": "git", "backend": "s3"},
        "environment": {"host": "ci-1", "cpu_model": "Test CPU", "cpus": 2, "go": "go1.24", "hyperfine": "1.18"},
        "settings": {"threshold": 0.05, "alpha": 0.05},
        "builds": [{"label": "v1.0.0", "ref": "latest_release", "kind": "latest_release", "sha": "b" * 40},
                   {"label": "master", "ref": "master", "kind": "branch", "sha": sha_of(night)}],
        "scenarios": [{"name": "small files", "fixture": {}, "steps": [{
            "name": "upload", "builds": {"v1.0.0": base, "master": head},
            "comparisons": [{"baseline": "v1.0.0", "contender": "master", "verdict": verdict, "rel": rel,
                             "ratio": rel + 1, "p_value": 0.01, "ci_low": rel - 0.01, "ci_high": rel + 0.01}]}]}],
    }


def backtest(tmp_path, seed: int, params: cpd.Params = cpd.Params()):
    """Record the 40 nights one by one; return {night of the alarm: [first bad nights]} and the db."""
    db = open_history(tmp_path / f"bench-{seed}.db")
    rng = np.random.default_rng(1000 + seed)
    alarms: dict[int, list[int]] = {}
    night_of_run = {}
    for night, level in enumerate(night_levels(seed), start=1):
        run_id = db.record_run(started=f"2026-01-{night:02d}T03:17:00Z" if night <= 31 else
                               f"2026-02-{night - 31:02d}T03:17:00Z", mode="release", base_ref="latest_release",
                               head_ref="master", results=fake_results(night, level, rng), exit_code=0)
        night_of_run[run_id] = night
        found = nightly.new_changepoints(db, target="s5cmd", machine="Test CPU x2", head_ref="master",
                                         params=params, statistic="median", run_id=run_id)
        for c in found:
            if c.alarm:
                alarms.setdefault(night, []).append(night_of_run[c.run_id])
    return alarms, db


def test_backtest_finds_the_step_and_ignores_the_spikes(tmp_path):
    alarms, db = backtest(tmp_path, seed=7)
    print("alarms (night raised: first bad night):", alarms)
    # one alarm in 40 nights: the step, located at night 25 +- 1, raised within three nights of it
    assert len(alarms) == 1 and len(next(iter(alarms.values()))) == 1, alarms
    (raised, [located]), = alarms.items()
    assert abs(located - STEP_AT) <= 1
    assert STEP_AT < raised <= STEP_AT + 3
    # nothing at all on the spike nights or the night after them
    assert not set(alarms) & {10, 11, 32, 33}

    # the whole series, analysed at the end: one change point, the step
    values = [n.h_median for n in nightly.series(db)[("s5cmd", "Test CPU x2", "master", "small files", "upload")]]
    cps = cpd.detect(values)
    assert [abs(c.index + 1 - STEP_AT) <= 1 and c.slower for c in cps] == [True]
    assert 0.10 < cps[0].rel < 0.20

    # the trend page marks it with its commit range and the ready bisect line
    page = html.unescape(trend.write_trend(db, tmp_path / "trend.html").read_text())
    good, bad = sha_of(located - 1), sha_of(located)
    assert page.count('class="changepoint"') == 1
    assert f"./bench.py bisect {good[:12]} {bad[:12]} --only 'small files/upload' --repo /srv/origin.git" in page
    assert "alarmed" in page
    # the alarm is remembered: the exit code rule is "a new change point", so re-checking finds nothing
    assert nightly.new_changepoints(db, target="s5cmd", machine="Test CPU x2", head_ref="master",
                                    params=cpd.Params(), statistic="median", run_id=None) == []
    db.close()


@pytest.mark.parametrize("seed", range(10, 18))
def test_backtest_over_noise_draws(tmp_path, seed):
    """The same backtest over other noise draws: the rule is not tuned to one lucky series."""
    alarms, db = backtest(tmp_path, seed)
    db.close()
    located = [n for ns in alarms.values() for n in ns]
    assert len(located) == 1 and abs(located[0] - STEP_AT) <= 1, alarms


def test_single_slow_last_night_is_not_a_change_point():
    flat = [10.0, 10.1, 9.9, 10.05, 9.95, 10.0, 10.1, 9.9]
    assert cpd.detect(flat + [13.0]) == []  # one slow night: wait for the next
    assert cpd.detect(flat + [13.0, 10.0]) == []  # ... which is back to normal: a spike
    confirmed = cpd.detect(flat + [11.5, 11.6, 11.55])
    assert [(c.index, c.slower) for c in confirmed] == [(len(flat), True)]


def test_old_verdict_rule_and_flags_parse():
    args, request = nightly_cmd.parse(["--history", "h.db", "--alarm", "verdict", "--cp-window", "20",
                                       "--cp-pvalue", "0.001", "--threshold", "0.1"])
    assert args.alarm == "verdict"
    params = nightly_cmd.cp_params(args, request)
    assert (params.window, params.max_pvalue, params.min_magnitude) == (20, 0.001, 0.1)


def test_schema_v1_sqlite_history_upgrades(tmp_path):
    """A history written by refbench before SQLAlchemy (PRAGMA user_version 1) upgrades in place."""
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(V1_SCHEMA)
    old.execute("INSERT INTO runs (started, mode, target, repo, base_ref, head_ref, exit_code) "
                "VALUES ('2026-01-01T00:00:00Z', 'release', 's5cmd', 'r', 'latest_release', 'master', 0)")
    old.execute("INSERT INTO environment (run_id, cpu_model, cpus) VALUES (1, 'Old CPU', 4)")
    old.execute("PRAGMA user_version = 1")
    old.commit()
    old.close()
    db = open_history(path)
    assert db.count("runs") == 1 and db.count("changepoints") == 0
    assert db.recent_runs()[0]["machine"] == "Old CPU x4"
    rid = db.record_run(started="2026-01-02T00:00:00Z", mode="release", base_ref="latest_release",
                        head_ref="master", results=fake_results(2, 10.0, np.random.default_rng(0)), exit_code=0)
    assert rid == 2 and db.count("samples") == 12
    db.close()
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert raw.execute("SELECT version FROM refbench_schema").fetchall() == [(SCHEMA_VERSION,)]
    fresh = open_history(tmp_path / "fresh.db")
    fresh.close()
    cols = {t: [r[1] for r in raw.execute(f"PRAGMA table_info({t})")]
            for t in ("runs", "changepoints", "samples", "step_metrics", "metric_verdicts")}
    new = sqlite3.connect(tmp_path / "fresh.db")
    assert cols == {t: [r[1] for r in new.execute(f"PRAGMA table_info({t})")] for t in cols}


V1_SCHEMA = """
CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, started TEXT NOT NULL, finished TEXT, mode TEXT NOT NULL,
    target TEXT, repo TEXT, base_ref TEXT, base_sha TEXT, head_ref TEXT, head_sha TEXT, exit_code INTEGER,
    error TEXT, slower INTEGER, faster INTEGER, same INTEGER, inconclusive INTEGER, settings TEXT,
    results_path TEXT, results TEXT);
CREATE TABLE environment (run_id INTEGER PRIMARY KEY REFERENCES runs(id), host TEXT, os TEXT, kernel TEXT,
    cpu_model TEXT, cpus INTEGER, memory_bytes INTEGER, python TEXT, go TEXT, hyperfine TEXT, refbench TEXT);
CREATE TABLE commits (run_id INTEGER REFERENCES runs(id), role TEXT, label TEXT, ref TEXT, kind TEXT, sha TEXT,
    version TEXT, toolchain TEXT, cached INTEGER, build_seconds REAL, PRIMARY KEY (run_id, role));
CREATE TABLE steps (run_id INTEGER REFERENCES runs(id), scenario TEXT, step TEXT, role TEXT, label TEXT, sha TEXT,
    n INTEGER, mean REAL, stddev REAL, median REAL, min REAL, max REAL, cv REAL, rss_kb INTEGER,
    PRIMARY KEY (run_id, scenario, step, role));
CREATE TABLE samples (run_id INTEGER REFERENCES runs(id), scenario TEXT, step TEXT, role TEXT, sha TEXT,
    idx INTEGER, round INTEGER, seconds REAL, user_seconds REAL, system_seconds REAL, exit_code INTEGER);
CREATE TABLE verdicts (run_id INTEGER REFERENCES runs(id), scenario TEXT, step TEXT, baseline TEXT, contender TEXT,
    verdict TEXT, rel REAL, ci_low REAL, ci_high REAL, p_value REAL, ratio REAL, noisy INTEGER, threshold REAL,
    PRIMARY KEY (run_id, scenario, step));
CREATE INDEX samples_run ON samples(run_id, scenario, step);
"""


def test_nightly_command_exit_codes_over_the_backtest(tmp_path, monkeypatch, capsys):
    """The nightly command itself with the change-point rule alone, night after night over the
    backtest series (the comparison replaced by the synthetic results): exit 1 exactly once, on the
    night the step is confirmed;
    the old rule (--alarm verdict) would have alarmed on every slow night, spikes included."""
    levels = night_levels(7)
    rng = np.random.default_rng(1007)
    night = {"n": 0}

    def fake_run(request, outputs, reporter):
        night["n"] += 1
        return fake_results(night["n"], levels[night["n"] - 1], rng)

    common = ["--history", str(tmp_path / "h.db"), "--machine", "ci", "--builds-dir", str(tmp_path / "b"),
              "--out-dir", str(tmp_path / "out")]
    codes, lines = [], []
    for _ in range(NIGHTS):
        codes.append(nightly_cmd.main([*common, "--alarm", "changepoint"], measure=fake_run))
        lines += [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("CHANGE POINT")]
    assert [i + 1 for i, c in enumerate(codes) if c == 1] == [28]
    assert len(lines) == 1 and "small files / upload" in lines[0] and \
        f"bisect: ./bench.py bisect {sha_of(24)[:12]} {sha_of(25)[:12]}" in lines[0]

    old = tmp_path / "old"
    old.mkdir()
    night["n"], rng = 0, np.random.default_rng(1007)
    verdict_codes = [nightly_cmd.main([*common[:1], str(old / "h.db"), *common[2:], "--alarm", "verdict"], measure=fake_run)
                     for _ in range(NIGHTS)]
    slow_nights = [i + 1 for i, c in enumerate(verdict_codes) if c == 1]
    assert 10 in slow_nights and len(slow_nights) >= 15  # the spike night, and every night of the step


IDENTICAL = None  # a night whose binary is the baseline's: nothing measured (pipeline.identical_contenders)


def identical_results(night: int) -> Results:
    """A night whose watched binary is byte-identical to the baseline's, as the comparison returns
    it: the step's verdict `identical binary`, nothing measured."""
    doc = fake_results_doc(night, 1.0, np.random.default_rng(0))
    step = doc["scenarios"][0]["steps"][0]
    step["builds"] = {}
    step["comparisons"] = [{"baseline": "v1.0.0", "contender": "master", "verdict": "identical binary", "rel": 0.0,
                            "ratio": 1.0, "p_value": None, "ci_low": None, "ci_high": None}]
    return Results.from_json(doc, f"night {night}")


def _nightly_over(levels: list[float | None], tmp_path, monkeypatch, capsys, *extra: str,
                  base_level: float | None = None) -> tuple[list[int], list[str]]:
    """The nightly command night after night over `levels` (the comparison replaced by synthetic
    results against a fixed baseline; IDENTICAL: the night's binary is the baseline's): the exit
    codes and the alarm lines printed."""
    rng = np.random.default_rng(2026)
    night = {"n": 0}
    base_level = levels[0] if base_level is None else base_level

    def fake_run(request, outputs, reporter):
        night["n"] += 1
        level = levels[night["n"] - 1]
        return identical_results(night["n"]) if level is IDENTICAL else fake_results(night["n"], level, rng,
                                                                                      base_level=base_level)

    common = ["--history", str(tmp_path / "h.db"), "--machine", "ci", "--builds-dir", str(tmp_path / "b"),
              "--out-dir", str(tmp_path / "out"), *extra]
    codes, lines = [], []
    for _ in levels:
        codes.append(nightly_cmd.main(common, measure=fake_run))
        lines += [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("LASTING", "CHANGE POINT"))]
    return codes, lines


def test_lasting_regression_alarms_by_its_second_night_and_never_on_a_spike(tmp_path, monkeypatch, capsys):
    """The line of issue 18: line-1, line-2, a one-night +150 ms spike, line-3, line-4, then line-5
    to line-8 with +150 ms for good, on a 0.3 s step. The default rule alarms on line-6's night,
    once, and names line-5 as the first slow commit; the spike never alarms."""
    base, slow = 0.3, 0.45
    levels = [base, base, slow, base, base, slow, slow, slow, slow]  # nights 1..9 = line-1 .. line-8 (+ spike)
    codes, lines = _nightly_over(levels, tmp_path, monkeypatch, capsys)
    assert [i + 1 for i, c in enumerate(codes) if c == 1] == [7], (codes, lines)
    assert len(lines) == 1 and lines[0].startswith("LASTING REGRESSION small files / upload"), lines
    assert f"slower since {sha_of(6)[:10]}" in lines[0] and f"bisect: ./bench.py bisect {sha_of(5)[:12]} " \
        f"{sha_of(6)[:12]}" in lines[0]


def test_a_spike_an_identical_night_and_a_step_blame_the_step(tmp_path, monkeypatch, capsys):
    """Issue 27's nights, as a cron sees a branch moved each night, against the release (line-1):
    line-1 itself (identical binary), a one-night +150 ms spike, a commit whose binary is
    identical to the release, then the real +150 ms step for two nights. The identical nights are
    points of the series (unchanged, exactly), so the spike and the step are no streak: the alarm
    comes on the step's second night, names the step's commit, and bisects from the identical
    night's commit (never one commit on both ends)."""
    base, slow = 0.3, 0.45
    levels = [IDENTICAL, slow, IDENTICAL, slow, slow]
    codes, lines = _nightly_over(levels, tmp_path, monkeypatch, capsys, base_level=base)
    assert codes == [0, 0, 0, 0, 1], (codes, lines)
    (line,) = lines
    assert line.startswith("LASTING REGRESSION small files / upload"), line
    assert f"slower since {sha_of(4)[:10]} (run 4; before it {sha_of(3)[:10]}, run 3)" in line, line
    assert line.endswith(f"bisect: ./bench.py bisect {sha_of(3)[:12]} {sha_of(4)[:12]} --only 'small files/upload' "
                         "--repo /srv/origin.git"), line
    db = open_history(tmp_path / "h.db")
    nights = nightly.series(db)[("s5cmd", "ci", "master", "small files", "upload")]
    assert [str(n.verdict) for n in nights] == ["identical binary", "slower", "identical binary", "slower", "slower"]
    assert [n.rel for n in nights][::2] == [0.0, 0.0, nights[4].rel]
    # an identical night's value is its binary's (the release's, measured as the baseline nearby)
    assert nights[0].h_mean == nights[1].b_mean and nights[2].h_mean == nights[1].b_mean
    db.close()


def test_the_bisect_never_has_one_commit_on_both_ends():
    """The last good commit is the latest night before the first bad one on another commit; with
    none, the first bad night's own baseline."""
    def night(i, sha, base="b" * 40, verdict="slower"):
        return SimpleNamespace(id=i, h_sha=sha, b_sha=base, verdict=verdict)
    a, b = "a" * 40, "c" * 40
    assert nightly.last_good([night(1, a, verdict="no significant change"), night(2, b)], 1) == (a, 1)
    # the same commit measured twice (fine, then slow): bisect from the commit before it
    assert nightly.last_good([night(1, a, verdict="same"), night(2, b, verdict="same"), night(3, b)], 2) == (a, 1)
    assert nightly.last_good([night(1, b)], 0) == ("b" * 40, None)  # the first night: its baseline
    assert nightly.last_good([night(1, b, base=b)], 0) == (None, None)
    assert nightly.bisect_line(None, b, "s", "t", None, None) == "(no earlier commit to bisect from)"


def test_backtest_default_rule_alarms_on_the_second_slow_night_once(tmp_path, monkeypatch, capsys):
    """The 40-night backtest under the default rule: one alarm, on the step's second night (the
    change point Otava confirms later is the same shift and does not alarm again); the spikes never."""
    codes, lines = _nightly_over(night_levels(7), tmp_path, monkeypatch, capsys)
    assert [i + 1 for i, c in enumerate(codes) if c == 1] == [STEP_AT + 1], (codes, lines)
    assert len(lines) == 1 and lines[0].startswith("LASTING REGRESSION"), lines


def test_lasting_start_since_last_and_fixed_baseline():
    """The rule on its own: against last night, a jump that holds the next night lasts and one that
    comes back is a spike; against a fixed baseline, two slow nights running, reported once."""
    def nights(mode, verdicts):
        return [SimpleNamespace(mode=mode, verdict=v) for v in verdicts]
    same, slow, fast = "no significant change", "slower", "faster"
    assert nightly.lasting_start(nights("since-last", [same, slow, same])) == 1
    assert nightly.lasting_start(nights("since-last", [same, slow, fast])) is None  # a spike
    assert nightly.lasting_start(nights("since-last", [same, slow])) is None  # one night: wait
    assert nightly.lasting_start(nights("release", [same, slow, slow])) == 1
    assert nightly.lasting_start(nights("release", [same, slow, same])) is None
    assert nightly.lasting_start(nights("release", [slow, slow, slow])) is None  # reported on the second night
    assert nightly.lasting_start(nights("release", [slow])) is None
