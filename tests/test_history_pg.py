"""The history on a real PostgreSQL server (a throw-away cluster: initdb, a free loopback port),
and concurrent writers on PostgreSQL and on a SQLite file.

Skips, saying why, where the PostgreSQL server binaries are not installed (scripts/setup.sh
installs the Debian `postgresql` package when it runs as root).
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, need, run_bench
from refbench import changepoints as cpd, nightly
from refbench.render import trend
from refbench.history import open_history
from test_changepoints import fake_results

WRITERS, RUNS_EACH = 2, 8


def pg_bin() -> Path | None:
    """Directory of initdb and pg_ctl: PATH, else the newest /usr/lib/postgresql/*/bin."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2].split(".")[0]))
    for d in reversed(dirs):
        if os.access(f"{d}/initdb", os.X_OK) and os.access(f"{d}/pg_ctl", os.X_OK):
            return Path(d)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pg_url():
    bindir = pg_bin()
    if bindir is None:
        need("PostgreSQL server", "binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin: "
                    "install the Debian postgresql package (scripts/setup.sh does as root)")
    root = Path(tempfile.mkdtemp(prefix="refbench-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root: run the cluster as the postgres user
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(root)
            need("postgres user", "running as root and there is no postgres user to run the throw-away cluster as")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"] if shutil.which("runuser") else []
        if not as_user:
            need("runuser", "running as root without runuser: cannot start PostgreSQL as another user")
    data = root / "data"

    def run(*argv, check=True):
        proc = subprocess.run([*as_user, *map(str, argv)], capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0 or not check, f"{argv[0]} failed: {proc.stdout}{proc.stderr}"
        return proc.returncode

    run(bindir / "initdb", "-D", data, "-U", "refbench", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync")
    # PostgreSQL cannot bind port 0 (its socket file is named by the port): the server binds a port
    # that was free a moment ago, and one another process took in between is tried again, never shared
    for attempt in range(5):
        port, log = free_port(), root / f"server-{attempt}.log"
        if run(bindir / "pg_ctl", "-D", data, "-l", log, "-w", "-t", "60", "-o",
               f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start", check=False) == 0:
            break
        assert "already in use" in log.read_text(), log.read_text()[-2000:]
    else:
        pytest.fail("PostgreSQL found no free port on 127.0.0.1 in 5 tries")
    try:
        import psycopg
        with psycopg.connect(f"postgresql://refbench@127.0.0.1:{port}/postgres", autocommit=True) as c:
            c.execute("CREATE DATABASE refbench")
        yield f"postgresql://refbench@127.0.0.1:{port}/refbench"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)


def fresh_db(pg_url: str, name: str) -> str:
    import psycopg
    admin = pg_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}"')
        c.execute(f'CREATE DATABASE "{name}"')
    return pg_url.rsplit("/", 1)[0] + "/" + name


def test_postgresql_round_trip_and_change_points(pg_url, tmp_path):
    url = fresh_db(pg_url, "roundtrip")
    db = open_history(url)
    assert db.kind == "postgresql" and "refbench@127.0.0.1" in db.display
    rng = np.random.default_rng(3)
    levels = [10.0] * 8 + [11.5] * 4
    levels = [v * (1 + 0.01 * rng.standard_normal()) for v in levels]
    ids = [db.record_run(started=f"2026-03-{i + 1:02d}T03:17:00Z", mode="release", base_ref="latest_release",
                         head_ref="master", results=fake_results(i + 1, v, rng), exit_code=0)
           for i, v in enumerate(levels)]
    assert ids == list(range(1, 13))
    assert db.count("runs") == 12 and db.count("samples") == 12 * 12 and db.count("steps") == 24
    nights = nightly.series(db)[("s5cmd", "Test CPU x2", "master", "small files", "upload")]
    assert [n.id for n in nights] == ids and nights[3].h_median == pytest.approx(levels[3], rel=0.05)
    found = nightly.new_changepoints(db, target="s5cmd", machine="Test CPU x2", head_ref="master",
                                     params=cpd.Params(), statistic="median", run_id=ids[-1])
    assert [(c.run_id, c.alarm) for c in found] == [(9, 1)]
    assert db.count("changepoints") == 1
    assert db.last_head("s5cmd", "/srv/origin.git", "master") == f"{12:02x}" * 20
    # a failed night is a row too
    db.record_run(started="2026-03-13T03:17:00Z", mode="release", base_ref="latest_release", head_ref="master",
                  results=None, exit_code=2, error="boom", target="s5cmd", repo="/srv/origin.git", machine="m")
    assert db.recent_runs(1)[0]["error"] == "boom"
    db.close()
    # reopening runs no migration again; the nightly renders the page from the URL
    page = tmp_path / "trend.html"
    proc = run_bench("nightly", "--history", url, "--render-only", "--trend", str(page))
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert text.count('class="changepoint"') == 1 and "bisect" in text and "boom" in text


WRITER = textwrap.dedent("""
    import sys, numpy as np
    sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
    from refbench.history import open_history
    from refbench.results import Results
    from test_changepoints import fake_results_doc
    who, where, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    db = open_history(where)          # both writers may be the first: the migration races too
    rng = np.random.default_rng(who)
    for i in range(n):
        r = fake_results_doc(100 * who + i, 10.0, rng)
        r["environment"]["host"] = f"writer-{{who}}"
        db.record_run(started=f"2026-04-01T03:{{i:02d}}:00Z", mode="release", base_ref="latest_release",
                      head_ref="master", results=Results.from_json(r), exit_code=0, machine=f"machine-{{who}}")
    db.close()
""").format(root=str(ROOT), tests=str(ROOT / "tests"))


def concurrent_writers(where: str) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(w), where, str(RUNS_EACH)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(1, WRITERS + 1)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    db = open_history(where)
    try:
        assert db.count("runs") == WRITERS * RUNS_EACH
        assert db.count("samples") == WRITERS * RUNS_EACH * 12
        assert db.count("steps") == db.count("commits") == WRITERS * RUNS_EACH * 2
        assert db.count("environment") == db.count("verdicts") == WRITERS * RUNS_EACH
        runs = db.recent_runs(100)
        assert sorted(r["machine"] for r in runs) == sorted(f"machine-{w}" for w in range(1, WRITERS + 1)
                                                            for _ in range(RUNS_EACH))
        assert {r["host"] for r in runs} == {f"writer-{w}" for w in range(1, WRITERS + 1)}
        assert len({r["id"] for r in runs}) == WRITERS * RUNS_EACH
        # the trend page filters by machine (and target)
        page = trend.write_trend(db, Path(tempfile.mkdtemp()) / "t.html", machine="machine-1").read_text()
        assert page.count('data-machine="machine-1"') >= RUNS_EACH and 'data-machine="machine-2"' not in page
        page = trend.write_trend(db, Path(tempfile.mkdtemp()) / "t.html").read_text()
        assert "<select" in page and page.count('<section class="chart-block"') == WRITERS
    finally:
        db.close()


def test_two_concurrent_writers_postgresql(pg_url):
    concurrent_writers(fresh_db(pg_url, "concurrent"))


def test_two_concurrent_writers_sqlite(tmp_path):
    concurrent_writers(str(tmp_path / "shared.db"))


def test_history_refuses_other_urls(tmp_path):
    from refbench.errors import RefbenchError
    with pytest.raises(RefbenchError, match="postgresql:// URL"):
        open_history("mysql://x@y/z")


def test_postgresql_keeps_the_daemon_metrics_and_upgrades_a_schema_2_history(pg_url):
    """The daemon's rows on PostgreSQL, and the v2 -> v3 migration there: a history at schema 2
    (the daemon's tables and sample columns not there yet) gets them, filled from the saved
    results of the nights it holds."""
    import sqlalchemy as sa

    from refbench import history
    from test_daemon_metrics import _judged_daemon_results
    url = fresh_db(pg_url, "daemon")
    db = open_history(url)
    db.record_run(started="2026-11-01T03:00:00Z", mode="release", base_ref="v1", head_ref="master",
                  results=_judged_daemon_results(), exit_code=0)
    assert [n.verdict for n in db.nights(metric="daemon-memory")] == ["slower"]
    with db.engine.begin() as conn:  # back to schema 2 as refbench wrote it before
        for t in ("metric_verdicts", "step_metrics"):
            conn.execute(sa.text(f"DROP TABLE {t}"))
        for col in history.DAEMON_SAMPLE_COLUMNS:
            conn.execute(sa.text(f"ALTER TABLE samples DROP COLUMN {col}"))
        conn.execute(sa.text("UPDATE refbench_schema SET version = 2"))
    db.close()
    db = open_history(url)
    [night] = db.nights(metric="daemon-memory")
    assert night.verdict == "slower" and night.h_mean > night.b_mean + (60 << 20)
    assert {s.metric for s in nightly.trend_series(db)} >= {"wall", "daemon-memory"}
    db.record_run(started="2026-11-02T03:00:00Z", mode="release", base_ref="v1", head_ref="master",
                  results=_judged_daemon_results(), exit_code=0)
    assert len(db.nights(metric="daemon-memory")) == 2
    with db.engine.connect() as conn:
        filled = conn.execute(sa.text("SELECT DISTINCT run_id FROM samples WHERE daemon_memory IS NOT NULL")).all()
        assert filled == [(2,)]  # the new night's runs; the old night's figures stay in its results
    db.close()


# ---- the embedded S3 server's CPU (`server-cpu`, issue 36 part 3) in the history --------------
def _server_results(asked: bool = True):
    """One night of an s3 step whose builds carry the embedded MinIO's CPU per run (the head's
    10 ms more), judged on it where the run asked (`--metric-threshold server-cpu=0.05`)."""
    from refbench import judge, results as rs
    from test_daemon_server import _server_doc
    doc = _server_doc(0.010)
    if asked:
        st = doc["scenarios"][0]["steps"][0]
        old, new = st["builds"]["old"]["server_cpu"], st["builds"]["new"]["server_cpu"]
        st["comparisons"].append(judge.contrast_metric("server-cpu", "old", old, "new", new).to_json())
        doc["settings"]["metric_thresholds"] = {**doc["settings"].get("metric_thresholds", {}), "server-cpu": 0.05}
    return rs.Results.from_json(doc, "t")


def _server_night(db, started: str, asked: bool = True) -> int:
    return db.record_run(started=started, mode="release", base_ref="v1", head_ref="master",
                         results=_server_results(asked), exit_code=0)


def _server_rows(conn) -> tuple:
    """(samples with server_cpu, its step_metrics rows by role, its verdicts) of a history (a
    sqlite3 or an SQLAlchemy connection)."""
    import sqlalchemy as sa
    q = lambda sql: conn.execute(sql if hasattr(conn, "cursor") else sa.text(sql)).fetchall()  # noqa: E731
    return (q("SELECT COUNT(*) FROM samples WHERE server_cpu IS NOT NULL")[0][0],
            sorted(q("SELECT role, n FROM step_metrics WHERE metric = 'server-cpu'")),
            q("SELECT verdict FROM metric_verdicts WHERE metric = 'server-cpu'"))


def test_the_history_keeps_server_cpu_and_its_series_where_a_night_judged_it(tmp_path):
    """server-cpu is stored as the daemon's metrics are (per-run column, per-step statistics, the
    verdict where judged), and a night that asked for its verdict makes it a nightly series,
    drawn in seconds; one that did not keeps the figures without a verdict."""
    import sqlite3
    db = open_history(tmp_path / "h.db")
    _server_night(db, "2026-11-01T03:00:00Z", asked=False)
    assert db.nights(metric="server-cpu") == [] and db.daemon_metrics() == []  # context: no series
    _server_night(db, "2026-11-02T03:00:00Z")
    [night] = db.nights(metric="server-cpu")
    assert night.verdict == "slower" and night.metric == "server-cpu"
    assert night.h_mean == pytest.approx(night.b_mean + 0.010, rel=1e-6)
    assert db.daemon_metrics() == ["server-cpu"]
    assert [len(v) for v in nightly.series(db, metric="server-cpu").values()] == [1]
    assert {s.metric for s in nightly.trend_series(db)} == {"wall", "server-cpu"}
    html = trend.render_trend(nightly.trend_page(db))
    chart = html[html.index("upload / upload: server CPU"):]
    assert ">0.0582 s<" in chart and "0.050 s ± 0.000" in chart  # seconds, as daemon CPU (not bytes)
    db.close()
    n = len(_server_results().scenarios[0].steps[0].builds["old"].times)
    assert _server_rows(sqlite3.connect(tmp_path / "h.db")) == (
        4 * n, [("base", n), ("base", n), ("head", n), ("head", n)], [("slower",)])


def test_a_schema_3_history_upgrades_and_its_server_cpu_becomes_rows(tmp_path):
    """tests/data/history-v3-server.db was written by refbench's history schema 3 (its night's
    server-cpu only inside the saved results.json; made by the script in its docstring's test):
    it upgrades in place, the old night's figures and verdict become rows and a series."""
    import sqlite3
    path = tmp_path / "old.db"
    shutil.copy(ROOT / "tests" / "data" / "history-v3-server.db", path)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 3
    assert "server_cpu" not in {r[1] for r in raw.execute("PRAGMA table_info(samples)")}
    raw.close()
    db = open_history(path)
    [old] = db.nights(metric="server-cpu")
    assert old.verdict == "slower" and old.h_mean == pytest.approx(old.b_mean + 0.010, rel=1e-6)
    _server_night(db, "2026-11-02T03:00:00Z")
    assert [len(v) for v in nightly.series(db, metric="server-cpu").values()] == [2]
    db.close()
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 4
    # the old night's samples keep a NULL server_cpu (its per-run figures stay in its results)
    assert raw.execute("SELECT COUNT(*) FROM samples WHERE run_id = 1 AND server_cpu IS NOT NULL").fetchone()[0] == 0
    assert raw.execute("SELECT COUNT(*) FROM samples WHERE run_id = 2 AND server_cpu IS NOT NULL").fetchone()[0] > 0


def test_postgresql_keeps_server_cpu_and_upgrades_a_schema_3_history(pg_url):
    """server-cpu's rows on PostgreSQL, and the v3 -> v4 migration there: a history at schema 3
    (no server_cpu column, no server-cpu rows) gets them, filled from the saved results."""
    import sqlalchemy as sa
    url = fresh_db(pg_url, "server")
    db = open_history(url)
    _server_night(db, "2026-11-01T03:00:00Z")
    with db.engine.connect() as conn:
        assert _server_rows(conn)[2] == [("slower",)]
    with db.engine.begin() as conn:  # back to schema 3 as refbench wrote it before
        conn.execute(sa.text("DELETE FROM metric_verdicts WHERE metric = 'server-cpu'"))
        conn.execute(sa.text("DELETE FROM step_metrics WHERE metric = 'server-cpu'"))
        conn.execute(sa.text("ALTER TABLE samples DROP COLUMN server_cpu"))
        conn.execute(sa.text("UPDATE refbench_schema SET version = 3"))
    db.close()
    db = open_history(url)
    [night] = db.nights(metric="server-cpu")
    assert night.verdict == "slower"
    _server_night(db, "2026-11-02T03:00:00Z")
    assert len(db.nights(metric="server-cpu")) == 2
    with db.engine.connect() as conn:
        filled = conn.execute(sa.text("SELECT DISTINCT run_id FROM samples WHERE server_cpu IS NOT NULL")).all()
        assert filled == [(2,)]  # the new night's runs; the old night's figures stay in its results
    db.close()
