"""Exit codes that never lie (issue 27, part 1), each driven through cli.main in-process (run_cli):
0 success; 1 only a judged regression or a nightly alarm; 2 bad input, a failed build or run, a
damaged history, no space for an output; 3 refbench itself failed (one line and the path of the
saved traceback, the run's cleanup done); 130 interrupted. Whole runs and nights go through the
`--executor mock` (refbench.mock): no process, no Go, no MinIO.
"""
from __future__ import annotations

import errno
import json
import re
import sqlite3
from pathlib import Path

import pytest

import factories as fx
from conftest import run_cli
from fakes.pipeline import mock_args, scenarios_file
from refbench import history
from refbench.commands import compare as compare_cmd
from refbench.errors import EXIT_CRASH, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION
from test_judge import BINARIES, SCENARIOS

DATA = Path(__file__).resolve().parent / "data" / "results-s5cmd.json"


def saved(tmp_path: Path, regressed: float) -> tuple[Path, Path]:
    """Two saved runs of one step; the new one `regressed` times slower."""
    old = fx.results_doc({("s", "a"): {"old": fx.times(1.0, seed=1), "new": fx.times(1.0, seed=2)}})
    new = fx.results_doc({("s", "a"): {"old": fx.times(1.0, seed=3), "new": fx.times(regressed, seed=4)}})
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    return tmp_path / "old.json", tmp_path / "new.json"


def crash_dir(tmp_path: Path) -> dict:
    return {"REFBENCH_CRASH_DIR": str(tmp_path / "crashes")}


def one_crash_line(proc) -> Path:
    """The crash's one line and the traceback file it names."""
    lines = [line for line in proc.stderr.splitlines() if line.startswith("refbench:")]
    assert len(lines) == 1 and "internal error (refbench failed, not the code under test)" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr  # printed only with -v
    path = Path(re.search(r"traceback saved to (\S+);", lines[0]).group(1))
    assert path.is_file() and "Traceback (most recent call last)" in path.read_text()
    return path


# ---- every code, through cli.main ------------------------------------------------------------------
def test_every_exit_code_through_cli_main(tmp_path, monkeypatch):
    old, new = saved(tmp_path, 1.35)
    assert run_cli("compare", old, new).returncode == EXIT_OK  # a regression, but nobody asked to fail on it
    assert run_cli("compare", old, new, "--fail-on-regression").returncode == EXIT_REGRESSION
    bad = run_cli("compare", old, tmp_path / "missing.json")
    assert bad.returncode == EXIT_ERROR and bad.stderr.count("\n") == 1 and "missing.json" in bad.stderr
    assert run_cli("compare", old, new, "--alpha", "2").returncode == EXIT_ERROR  # a bad flag

    def boom(*a, **k):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(compare_cmd, "pair_runs", boom)
    crash = run_cli("compare", old, new, "--fail-on-regression", env=crash_dir(tmp_path))
    assert crash.returncode == EXIT_CRASH  # never 1: a crash is not a regression
    path = one_crash_line(crash)
    assert path.parent == tmp_path / "crashes" and "RuntimeError: boom" in path.read_text()
    assert "RuntimeError: boom;" in crash.stderr  # the error's first line only

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(compare_cmd, "pair_runs", interrupt)
    stopped = run_cli("compare", old, new)
    assert stopped.returncode == EXIT_INTERRUPTED and "interrupted" in stopped.stderr


def test_no_space_for_an_output_is_exit_2_naming_the_file(tmp_path, monkeypatch):
    """The comment body written to a full disk (/dev/full answers ENOSPC): one line naming the
    file, exit 2, no traceback; so for the other outputs; and a full disk anywhere else (a write
    that does not name its file) is exit 2 too, never a crash."""
    proc = run_cli("comment", DATA, "--dry-run", "--body-out", "/dev/full")
    assert proc.returncode == EXIT_ERROR and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == ("refbench: error: cannot write the comment body to /dev/full: "
                                   "No space left on device")
    html = run_cli("report", DATA, "--html", "/dev/full")
    assert html.returncode == EXIT_ERROR and "cannot write the HTML report to /dev/full" in html.stderr

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(compare_cmd, "pair_runs", full)
    anywhere = run_cli("compare", DATA, DATA)
    assert anywhere.returncode == EXIT_ERROR and anywhere.stderr.startswith("refbench: error: no space left on device")


def test_a_damaged_history_is_exit_2_naming_the_file(tmp_path):
    db = tmp_path / "bench.db"
    db.write_bytes(b"not a database " * 100)
    proc = run_cli("nightly", "--history", db, "--render-only")
    assert proc.returncode == EXIT_ERROR and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and f"history {db}: file is not a database" in proc.stderr
    assert "move it aside" in proc.stderr


# ---- whole runs and nights on `--executor mock` ------------------------------------------------------
@pytest.fixture
def scenarios(tmp_path, monkeypatch) -> Path:
    return scenarios_file(monkeypatch, tmp_path, SCENARIOS)


RUN = ("-r", "6", "--rounds", "3", "-w", "0", "--no-rss", "--no-profile", "--budget", "none",
       *mock_args(BINARIES, "B", 0.005))
CRASH = ("--mock", "crash=3")  # the third hyperfine call raises, as a bug of refbench's would: mid-run


def test_a_crash_mid_run_is_exit_3_after_the_cleanup(scenarios, tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    argv = ("-s", "v1.0.0", "new", "-t", "fake", *RUN, *CRASH, "--scenarios", scenarios, "-l", local,
            "--builds-dir", tmp_path / "b", "-o", tmp_path / "s.md")
    proc = run_cli(*argv, "--fail-on-regression", env=crash_dir(tmp_path))
    assert proc.returncode == EXIT_CRASH
    assert "MockCrash: a bug in the middle of a run" in one_crash_line(proc).read_text()
    # the backend closed (the mock's removes its remote), the workdir removed
    assert list((tmp_path / "b").glob("mock-remote-*")) == [] and list(local.iterdir()) == []
    assert not (tmp_path / "s.md").exists()  # nothing written for a run that crashed
    verbose = run_cli(*argv, "-v", env=crash_dir(tmp_path))
    assert verbose.returncode == EXIT_CRASH and "Traceback (most recent call last)" in verbose.stderr  # -v shows it


def nightly(scenarios, tmp_path, db: Path, *argv):
    return run_cli("nightly", "--history", db, "--scenarios", scenarios, "--base", "v1.0.0", "--head", "new",
                   "--out-dir", tmp_path / "night", *RUN, "--machine", "m1", *argv, env=crash_dir(tmp_path))


def test_a_history_that_cannot_take_the_night_keeps_its_record_for_replay(scenarios, tmp_path):
    db = tmp_path / "bench.db"
    history.open_history(db).close()
    with sqlite3.connect(db) as conn:  # the history goes wrong after the night started (a dropped table)
        conn.execute("DROP TABLE commits")
        conn.execute("DROP TABLE environment")
        conn.execute("ALTER TABLE runs RENAME TO runs_gone")
    proc = nightly(scenarios, tmp_path, db, "-t", "fake")
    assert proc.returncode == EXIT_ERROR, proc.stderr
    kept = tmp_path / "night" / "night-record.json"
    assert (tmp_path / "night" / "results.json").is_file() and kept.is_file()  # nothing measured is lost
    line = [x for x in proc.stderr.splitlines() if x.startswith("refbench: error:")]
    assert len(line) == 1 and "no such table: runs" in line[0] and f"--replay {kept}" in line[0]
    # the history mended (here: a new one), the night is recorded from its kept record
    fresh = tmp_path / "fresh.db"
    replayed = run_cli("nightly", "--history", fresh, "--scenarios", scenarios, "-t", "fake", "--replay", kept)
    assert replayed.returncode == EXIT_OK, replayed.stderr
    row = sqlite3.connect(fresh).execute("SELECT exit_code, head_ref, machine, results IS NOT NULL FROM runs").fetchall()
    assert row == [(0, "new", "m1", 1)] and not kept.exists()
    again = run_cli("nightly", "--history", fresh, "--scenarios", scenarios, "-t", "fake", "--replay", kept)
    assert again.returncode == EXIT_ERROR and "cannot read a night's record" in again.stderr


def test_a_night_where_refbench_fails_is_recorded_and_exits_3(scenarios, tmp_path):
    db = tmp_path / "bench.db"
    proc = nightly(scenarios, tmp_path, db, "-t", "fake", *CRASH)
    assert proc.returncode == EXIT_CRASH
    one_crash_line(proc)
    row = sqlite3.connect(db).execute("SELECT exit_code, error FROM runs").fetchone()
    assert row == (EXIT_CRASH, "a bug in the middle of a run (--mock crash=3)")
