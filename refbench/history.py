"""The nightly history: one schema, in SQLite (a file, the default) or PostgreSQL (a URL).

    open_history("bench.db")                          # SQLite, created if missing
    open_history("postgresql://user@host:5432/refbench")   # PostgreSQL (psycopg 3)

Tables (SQLAlchemy Core, so both backends get the same schema): runs, environment, commits,
steps (per-night statistics per step and build), samples (every run's time, and from v3 what
the build's daemon spent in it, from v4 what the embedded S3 server did), verdicts (wall time),
step_metrics and metric_verdicts (v3: the daemon's metrics per step and build, and their verdicts;
v4: the S3 server's CPU, `server-cpu`, too, its verdict only where a night asked for one: issue
36), changepoints (the change points found so far, so only new ones alarm), refbench_schema
(version).

Migrations are numbered; `open_history` brings an older history up to SCHEMA_VERSION inside one
transaction (a SQLite file of schema 1, written by an earlier refbench with PRAGMA user_version 1,
upgrades in place). Every write is one transaction: a run and all its rows, or nothing. Many
runners may write at once: PostgreSQL takes an advisory lock only while migrating; SQLite
transactions start with BEGIN IMMEDIATE and wait (busy timeout) for each other.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import sqlalchemy as sa

from .errors import RefbenchError
from .results import Results, cpu_model
from .metrics import table
from .verdict import DAEMON_METRICS, SERVER_METRICS, Verdict, count, is_daemon_metric

SCHEMA_VERSION = 4
_PG_LOCK = 0x7265_6662  # "refb": advisory lock key while migrating
md = sa.MetaData()

runs = sa.Table(
    "runs", md,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("started", sa.Text, nullable=False),  # UTC, ISO 8601
    sa.Column("finished", sa.Text),
    sa.Column("mode", sa.Text, nullable=False),  # release | since-last
    sa.Column("target", sa.Text), sa.Column("repo", sa.Text),
    sa.Column("base_ref", sa.Text), sa.Column("base_sha", sa.Text),
    sa.Column("head_ref", sa.Text), sa.Column("head_sha", sa.Text),
    sa.Column("exit_code", sa.Integer),  # 0 ok, 1 alarm, 2 error
    sa.Column("error", sa.Text),
    sa.Column("slower", sa.Integer), sa.Column("faster", sa.Integer), sa.Column("same", sa.Integer),
    sa.Column("inconclusive", sa.Integer),
    sa.Column("settings", sa.Text),  # JSON
    sa.Column("results_path", sa.Text),
    sa.Column("results", sa.Text),  # the whole results.json
    sa.Column("machine", sa.Text),  # v2: machine type (--machine, or CPU model x CPUs)
    sqlite_autoincrement=True,
)
environment = sa.Table(
    "environment", md,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    *[sa.Column(c, sa.Text) for c in ("host", "os", "kernel", "cpu_model")],
    sa.Column("cpus", sa.Integer), sa.Column("memory_bytes", sa.BigInteger),
    *[sa.Column(c, sa.Text) for c in ("python", "go", "hyperfine", "refbench")],
)
commits = sa.Table(
    "commits", md,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("role", sa.Text, primary_key=True),  # base / head
    *[sa.Column(c, sa.Text) for c in ("label", "ref", "kind", "sha", "version", "toolchain")],
    sa.Column("cached", sa.Integer), sa.Column("build_seconds", sa.Float),
)
steps = sa.Table(
    "steps", md,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("scenario", sa.Text, primary_key=True), sa.Column("step", sa.Text, primary_key=True),
    sa.Column("role", sa.Text, primary_key=True),
    sa.Column("label", sa.Text), sa.Column("sha", sa.Text), sa.Column("n", sa.Integer),
    *[sa.Column(c, sa.Float) for c in ("mean", "stddev", "median", "min", "max", "cv")],
    sa.Column("rss_kb", sa.Integer),
)
samples = sa.Table(
    "samples", md,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id")),
    *[sa.Column(c, sa.Text) for c in ("scenario", "step", "role", "sha")],
    sa.Column("idx", sa.Integer), sa.Column("round", sa.Integer),
    *[sa.Column(c, sa.Float) for c in ("seconds", "user_seconds", "system_seconds")],
    sa.Column("exit_code", sa.Integer),
    # v3: the build's daemon during the run (refbench.daemon; NULL where none was probed)
    sa.Column("daemon_cpu", sa.Float), *[sa.Column(c, sa.BigInteger) for c in ("daemon_memory", "daemon_writes",
                                                                                "daemon_alloc")],
    sa.Column("server_cpu", sa.Float),  # v4: the embedded S3 server's CPU during the run (NULL: none probed)
    sa.Index("samples_run", "run_id", "scenario", "step"),
)
DAEMON_SAMPLE_COLUMNS = ("daemon_cpu", "daemon_memory", "daemon_writes", "daemon_alloc")  # as DAEMON_METRICS
SERVER_SAMPLE_COLUMNS = ("server_cpu",)  # as SERVER_METRICS
PROBED_METRICS = DAEMON_METRICS + SERVER_METRICS  # a long-lived process's, probed around each run
PROBED_SAMPLE_COLUMNS = dict(zip(PROBED_METRICS, DAEMON_SAMPLE_COLUMNS + SERVER_SAMPLE_COLUMNS))


def probed_metrics() -> tuple[str, ...]:
    """The probed metrics of the table in use (metrics.table()), the daemon's then the S3 server's."""
    return table().names_of("probe", "server")


step_metrics = sa.Table(  # v3: a probed metric's statistics per night, step and build (v4: server-cpu too)
    "step_metrics", md,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("scenario", sa.Text, primary_key=True), sa.Column("step", sa.Text, primary_key=True),
    sa.Column("role", sa.Text, primary_key=True), sa.Column("metric", sa.Text, primary_key=True),
    sa.Column("label", sa.Text), sa.Column("sha", sa.Text), sa.Column("n", sa.Integer),
    *[sa.Column(c, sa.Float) for c in ("mean", "stddev", "median")],
)
metric_verdicts = sa.Table(  # v3: the head's verdict on a probed metric per night and step (where judged)
    "metric_verdicts", md,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("scenario", sa.Text, primary_key=True), sa.Column("step", sa.Text, primary_key=True),
    sa.Column("metric", sa.Text, primary_key=True),
    *[sa.Column(c, sa.Text) for c in ("baseline", "contender", "verdict")],
    *[sa.Column(c, sa.Float) for c in ("rel", "ci_low", "ci_high", "p_value", "ratio")],
    sa.Column("noisy", sa.Integer), sa.Column("threshold", sa.Float),
)
verdicts = sa.Table(
    "verdicts", md,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("scenario", sa.Text, primary_key=True), sa.Column("step", sa.Text, primary_key=True),
    *[sa.Column(c, sa.Text) for c in ("baseline", "contender", "verdict")],
    *[sa.Column(c, sa.Float) for c in ("rel", "ci_low", "ci_high", "p_value", "ratio")],
    sa.Column("noisy", sa.Integer), sa.Column("threshold", sa.Float),
)
changepoints = sa.Table(  # v2
    "changepoints", md,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    *[sa.Column(c, sa.Text) for c in ("target", "repo", "machine", "head_ref", "scenario", "step", "statistic")],
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id")),  # first night of the new level
    sa.Column("prev_run_id", sa.Integer, sa.ForeignKey("runs.id")),  # last night before it
    sa.Column("good_sha", sa.Text), sa.Column("bad_sha", sa.Text),
    *[sa.Column(c, sa.Float) for c in ("rel", "pvalue", "before", "after")],
    sa.Column("detected_run_id", sa.Integer, sa.ForeignKey("runs.id")),  # the night that found it
    sa.Column("detected_at", sa.Text),
    sa.Column("alarm", sa.Integer),  # 1: a new slower change point beyond the limits (exit 1)
    sa.Index("changepoints_series", "target", "machine", "scenario", "step"),
    sqlite_autoincrement=True,
)
schema_table = sa.Table("refbench_schema", md, sa.Column("version", sa.Integer, nullable=False))


def _v1_to_v2(conn: sa.Connection) -> None:
    """v2: runs.machine (filled from the recorded environment), the changepoints table."""
    conn.execute(sa.text("ALTER TABLE runs ADD COLUMN machine TEXT"))
    for row in conn.execute(sa.select(environment.c.run_id, environment.c.cpu_model, environment.c.cpus)):
        conn.execute(runs.update().where(runs.c.id == row.run_id).values(machine=machine_name(row.cpu_model, row.cpus)))
    changepoints.create(conn)
    schema_table.create(conn)


def _v2_to_v3(conn: sa.Connection) -> None:
    """v3: the daemon's figures in columns and tables of their own (issue 36). Nights recorded
    before keep them only inside their saved results.json: the step_metrics and metric_verdicts
    rows are filled from it here, so their series start with those nights; their samples' daemon
    columns stay NULL (the per-run figures are in runs.results)."""
    for col in DAEMON_SAMPLE_COLUMNS:
        kind = "DOUBLE PRECISION" if col == "daemon_cpu" else "BIGINT"
        conn.execute(sa.text(f"ALTER TABLE samples ADD COLUMN {col} {kind}"))
    step_metrics.create(conn)
    metric_verdicts.create(conn)
    for row in conn.execute(sa.select(runs.c.id, runs.c.results).where(runs.c.results.is_not(None))):
        if (results := _saved(row)) is None:
            continue
        _insert_saved(conn, row.id, results, DAEMON_METRICS)


def _v3_to_v4(conn: sa.Connection) -> None:
    """v4: the embedded S3 server's CPU per run (`server-cpu`, issue 36 part 3) beside the daemon's:
    a samples column, and step_metrics (and metric_verdicts, where judged) rows filled from the
    saved results of the nights already there, so their series start with those nights."""
    if "server_cpu" not in {c["name"] for c in sa.inspect(conn).get_columns("samples")}:
        conn.execute(sa.text("ALTER TABLE samples ADD COLUMN server_cpu DOUBLE PRECISION"))
    for row in conn.execute(sa.select(runs.c.id, runs.c.results).where(runs.c.results.is_not(None))):
        results = _saved(row)
        if results is not None:
            _insert_saved(conn, row.id, results, SERVER_METRICS)


def _saved(row) -> Results | None:
    """A night's saved results.json; None for one this refbench cannot read (it had no rows of
    these metrics either)."""
    try:
        return Results.from_json(json.loads(row.results), f"history run {row.id}")
    except (ValueError, RefbenchError):
        return None


def _insert_saved(conn: sa.Connection, run_id: int, results: Results, metrics: tuple[str, ...]) -> None:
    """A saved night's step_metrics and metric_verdicts rows of `metrics` (an upgrade's)."""
    for table, got in zip((step_metrics, metric_verdicts), daemon_rows(run_id, results, metrics)):
        if got:
            conn.execute(table.insert(), got)


MIGRATIONS = {2: _v1_to_v2, 3: _v2_to_v3, 4: _v3_to_v4}  # version reached -> how, from the one before


def _roles(results: Results) -> dict[str, str]:
    """Which build the history keeps as which: the first is the base, the last the head."""
    return {results.builds[0].label: "base", results.builds[-1].label: "head"}


def daemon_rows(run_id: int, results: Results, metrics: tuple[str, ...] | None = None
                ) -> tuple[list[dict], list[dict]]:
    """A night's step_metrics and metric_verdicts rows: each probed metric's statistics per step
    and build (where the daemon or the S3 server was probed), and the head's verdict on it (where
    judged: server-cpu only where the night asked for it). `metrics`: which (an upgrade's); None:
    every probed metric of the table in use (metrics.table(): those rows are keyed by the metric's
    name, so a metric added there has its series without a migration; the samples table's per-run
    columns stay the built-in ones, PROBED_SAMPLE_COLUMNS, and a new metric's runs stay in the
    night's results)."""
    if metrics is None:
        metrics = probed_metrics()
    roles, shas = _roles(results), {b.label: b.sha for b in results.builds}
    head = results.builds[-1].label
    thresholds = results.settings.metric_thresholds or {}
    stats_rows, verdict_rows = [], []
    for sc, st in results.steps():
        for label, side in st.builds.items():
            if label not in roles:
                continue
            for metric, values in {**side.daemon_values(), **side.server_values()}.items():
                if values and metric in metrics:
                    stats_rows.append({"run_id": run_id, "scenario": sc.name, "step": st.name, "role": roles[label],
                                       "metric": metric, "label": label, "sha": shas[label], "n": len(values),
                                       "mean": statistics.fmean(values), "median": statistics.median(values),
                                       "stddev": statistics.stdev(values) if len(values) > 1 else None})
        for c in st.metric_comparisons:
            if c.metric in metrics and c.contender == head:
                verdict_rows.append({"run_id": run_id, "scenario": sc.name, "step": st.name, "metric": c.metric,
                                     "baseline": c.baseline, "contender": c.contender, "verdict": c.verdict,
                                     "rel": c.rel, "ci_low": c.ci_low, "ci_high": c.ci_high, "p_value": c.p_value,
                                     "ratio": c.ratio, "noisy": int(bool(c.noisy)),
                                     "threshold": thresholds.get(c.metric, results.settings.threshold)})
    return stats_rows, verdict_rows


def machine_name(cpu_model: str | None, cpus: int | None) -> str:
    return f"{cpu_model or 'unknown CPU'} x{cpus or '?'}"


def _only(q, table, target: str | None, machine: str | None):
    """A query narrowed to one target and one machine type where they are given (the trend
    page's filters)."""
    if target:
        q = q.where(table.c.target == target)
    if machine:
        q = q.where(table.c.machine == machine)
    return q


def local_machine() -> str:
    return machine_name(cpu_model(), os.cpu_count())


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_url(where: str) -> bool:
    return "://" in str(where)


def mask_url(url: str) -> str:
    """A URL fit for a message or a log: its password, if any, replaced by ***."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/@:]*:)[^/@]*@", r"\1***@", str(url))


# ---- the records a series of nights is read as (nightly, render/trend) ----------------------
@dataclass(frozen=True)
class NightPoint:
    """One completed night of one step, as the history holds it (History.nights): the watched
    build (h_) and the baseline (b_) with tonight's verdict on the step. A night whose watched
    binary was identical to its baseline's (Verdict.IDENTICAL, rel 0) measured neither: its
    statistics are None here, and refbench.nightly gives it the values that binary was measured
    with on another night."""
    id: int  # the night's run id
    started: str
    mode: str  # "release" (a fixed baseline) or "since-last" (last night's head)
    target: str | None
    repo: str | None
    machine: str | None
    base_ref: str | None
    head_ref: str | None
    scenario: str
    step: str
    verdict: Verdict
    rel: float | None
    h_mean: float | None
    h_sd: float | None
    h_median: float | None
    h_sha: str
    h_label: str
    b_mean: float | None
    b_median: float | None
    b_sha: str
    b_label: str
    metric: str = "wall"  # or one of the daemon's (verdict.DAEMON_METRICS): seconds, bytes

    def value(self, statistic: str) -> float | None:
        """The watched build's night value the change points are found in (its mean where the
        statistic was not recorded; None where nothing was measured)."""
        v = getattr(self, f"h_{statistic}")
        return v if v is not None else self.h_mean


@dataclass(frozen=True)
class NightlyChangePoint:
    """A change point of a step's series of nights (changepoints.ChangePoint), placed in the
    history: between the last good night and the first bad one, with their commits."""
    index: int  # position of the first bad night in the series
    run_id: int  # the first bad night's run
    prev_run_id: int | None  # the last good night's run (None: the first bad night's own baseline)
    good_sha: str
    bad_sha: str
    rel: float  # after / before - 1 (> 0: slower)
    pvalue: float
    before: float  # the statistic's median before and after
    after: float
    slower: bool
    good_started: str
    bad_started: str
    bisect: str  # the ready `bench.py bisect` command line
    alarmed: bool = False  # reported with an alarm on an earlier night (the trend page says so)


@dataclass(frozen=True)
class TrendSeries:
    """One chart of the trend page: a step's nights (oldest first) on one machine type for one
    watched ref, and the change points found in them."""
    target: str | None
    machine: str | None
    head_ref: str | None
    scenario: str
    step: str
    nights: tuple[NightPoint, ...]
    changepoints: tuple[NightlyChangePoint, ...]
    metric: str = "wall"  # the series' metric: wall time, or one of the daemon's (issue 36)


class HistoryError(RefbenchError):
    """The history store failed (locked past its timeout, a connection dropped, a damaged or
    foreign file): one line naming the store, exit 2."""

    def __init__(self, display: str, e: Exception):
        said = (str(getattr(e, "orig", None) or e).strip().splitlines() or ["?"])[0]
        hint = ""
        if type(e) is sa.exc.DatabaseError:  # the file is not a database (or a damaged one)
            hint = ("; it is not a refbench history, or a damaged one: restore it from a backup, or move it "
                    "aside and a new history starts empty")
        super().__init__(f"history {display}: {said}{hint}")


class History:
    """A history store; `with History(...) as h:` or h.close()."""

    def __init__(self, where: str | Path):
        where = str(where)
        self.where = where
        if where.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
            url = sa.engine.make_url(where.replace("postgres://", "postgresql://", 1))
            url = url.set(drivername="postgresql+psycopg")
            self.display = url.render_as_string(hide_password=True)
            self.engine = sa.create_engine(url, pool_pre_ping=True)
            self.kind = "postgresql"
        elif is_url(where) and not where.startswith("sqlite:"):
            raise RefbenchError(f"--history {mask_url(where)!r}: expected a SQLite file or a postgresql:// URL")
        else:
            path = Path(where.removeprefix("sqlite:///")).expanduser()
            path.parent.mkdir(parents=True, exist_ok=True)
            self.path = path
            self.display = str(path)
            self.engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 120})
            self.kind = "sqlite"

            @sa.event.listens_for(self.engine, "connect")
            def _connect(dbapi, _record):
                dbapi.isolation_level = None  # SQLAlchemy's recipe: we emit BEGIN ourselves
                dbapi.execute("PRAGMA foreign_keys = ON")

            @sa.event.listens_for(self.engine, "begin")
            def _begin(conn):
                conn.exec_driver_sql("BEGIN IMMEDIATE")  # a writer waits here, never mid-transaction
        self.migrate()

    # ---- the store's connections: its failures are one HistoryError --------------------------
    @contextlib.contextmanager
    def _store(self, write: bool):
        """A transaction (write) or a connection; what the database answers with — locked, gone,
        a damaged or foreign file — is one HistoryError naming the store (exit 2), never a traceback."""
        try:
            with (self.engine.begin() if write else self.engine.connect()) as conn:
                yield conn
        except (sa.exc.IntegrityError, sa.exc.ProgrammingError):
            raise  # refbench's own mistake: a traceback (exit 3)
        except sa.exc.DBAPIError as e:
            raise HistoryError(self.display, e) from None

    # ---- schema -----------------------------------------------------------------------------
    def version(self, conn: sa.Connection) -> int:
        insp = sa.inspect(conn)
        if insp.has_table("refbench_schema"):
            v = conn.execute(sa.select(sa.func.max(schema_table.c.version))).scalar()
            return int(v or 0)
        if insp.has_table("runs"):
            return 1  # written by refbench before the history had its own version table
        return 0

    def migrate(self) -> None:
        with self._store(write=True) as conn:
            if self.kind == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK})
            v = self.version(conn)
            if v > SCHEMA_VERSION:
                raise RefbenchError(f"{self.display}: history schema {v} is newer than this refbench "
                                    f"({SCHEMA_VERSION}); upgrade refbench")
            if v == SCHEMA_VERSION:
                return
            if v == 0:
                md.create_all(conn)
            else:
                for to in range(v + 1, SCHEMA_VERSION + 1):
                    MIGRATIONS[to](conn)
            conn.execute(schema_table.delete())
            conn.execute(schema_table.insert().values(version=SCHEMA_VERSION))
            if self.kind == "sqlite":
                conn.exec_driver_sql(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- writes -----------------------------------------------------------------------------
    def record_run(self, *, started: str, mode: str, base_ref: str, head_ref: str, results: Results | None,
                   exit_code: int, error: str | None = None, results_path: str | None = None,
                   target: str | None = None, repo: str | None = None, machine: str | None = None) -> int:
        """One night, all its rows in one transaction; returns the run id."""
        builds = results.builds if results else ()
        env = results.environment if results else None
        machine = machine or (machine_name(env.cpu_model, env.cpus) if results else local_machine())
        counts = count(c.verdict for _, _, c in results.comparisons()) if results else {}
        with self._store(write=True) as conn:
            run_id = conn.execute(runs.insert().values(
                started=started, finished=now(), mode=mode,
                target=results.target.name if results else target,
                repo=results.target.repo if results else repo, base_ref=base_ref,
                base_sha=builds[0].sha if builds else None, head_ref=head_ref,
                head_sha=builds[-1].sha if builds else None, exit_code=exit_code, error=error,
                slower=counts.get(Verdict.SLOWER), faster=counts.get(Verdict.FASTER),
                same=counts.get(Verdict.SAME), inconclusive=counts.get(Verdict.INCONCLUSIVE),
                settings=json.dumps(results.settings.to_json()) if results else None, results_path=results_path,
                results=json.dumps(results.to_json()) if results else None, machine=machine)).inserted_primary_key[0]
            if not results:
                return run_id
            conn.execute(environment.insert().values(run_id=run_id, **{
                k: getattr(env, k) for k in ("host", "os", "kernel", "cpu_model", "cpus", "memory_bytes", "python",
                                             "go", "hyperfine", "refbench")}))
            roles = _roles(results)
            conn.execute(commits.insert(), [
                {"run_id": run_id, "role": roles[b.label], "label": b.label, "ref": b.ref, "kind": b.kind,
                 "sha": b.sha, "version": b.version, "toolchain": b.toolchain,
                 "cached": int(bool(b.cached)), "build_seconds": b.build_seconds}
                for b in (builds[0], builds[-1])])
            shas = {b.label: b.sha for b in builds}
            threshold = results.settings.threshold
            step_rows, sample_rows, verdict_rows = [], [], []
            for sc, st in results.steps():
                for label, side in st.builds.items():
                    role = roles.get(label)
                    if role is None:
                        continue
                    s, probed = side.stats, {**side.daemon_values(), **side.server_values()}
                    step_rows.append({"run_id": run_id, "scenario": sc.name, "step": st.name, "role": role,
                                      "label": label, "sha": shas[label], "rss_kb": side.rss_kb,
                                      **{k: getattr(s, k) if s else None
                                         for k in ("n", "mean", "stddev", "median", "min", "max", "cv")}})
                    sample_rows += [{"run_id": run_id, "scenario": sc.name, "step": st.name, "role": role,
                                     "sha": shas[label], "idx": i, "round": _at(side.rounds, i), "seconds": t,
                                     "user_seconds": _at(side.user, i), "system_seconds": _at(side.system, i),
                                     "exit_code": _at(side.exit_codes, i),
                                     **{col: _at(probed.get(m, ()), i) for m, col in PROBED_SAMPLE_COLUMNS.items()}}
                                    for i, t in enumerate(side.times)]
                for c in st.comparisons:
                    if c.contender != builds[-1].label:
                        continue
                    verdict_rows.append({"run_id": run_id, "scenario": sc.name, "step": st.name,
                                         "baseline": c.baseline, "contender": c.contender,
                                         "verdict": c.verdict, "rel": c.rel, "ci_low": c.ci_low,
                                         "ci_high": c.ci_high, "p_value": c.p_value,
                                         "ratio": c.ratio, "noisy": int(bool(c.noisy)),
                                         "threshold": threshold})
            metric_rows, metric_verdict_rows = daemon_rows(run_id, results)
            for table, rows in ((steps, step_rows), (samples, sample_rows), (verdicts, verdict_rows),
                                (step_metrics, metric_rows), (metric_verdicts, metric_verdict_rows)):
                if rows:
                    conn.execute(table.insert(), rows)
        return run_id

    def set_exit_code(self, run_id: int, code: int) -> None:
        with self._store(write=True) as conn:
            conn.execute(runs.update().where(runs.c.id == run_id).values(exit_code=code))

    def add_changepoints(self, rows: list[dict]) -> None:
        if rows:
            with self._store(write=True) as conn:
                conn.execute(changepoints.insert(), rows)

    # ---- reads ------------------------------------------------------------------------------
    def last_head(self, target: str, repo: str, head_ref: str, machine: str | None = None) -> str | None:
        q = (sa.select(runs.c.head_sha).where(runs.c.target == target, runs.c.repo == repo,
                                               runs.c.head_ref == head_ref, runs.c.exit_code.in_((0, 1)),
                                               runs.c.head_sha.is_not(None))
             .order_by(runs.c.id.desc()).limit(1))
        if machine:
            q = q.where(runs.c.machine == machine)
        with self._store(write=False) as conn:
            return conn.execute(q).scalar()

    def nights(self, target: str | None = None, machine: str | None = None, metric: str = "wall"
               ) -> list[NightPoint]:
        """Per completed night and step: head and baseline statistics with the verdict, oldest first.
        A step whose watched binary was identical to the baseline's has a verdict and no statistics
        (nothing was measured): it is a night all the same, with None statistics. `metric`: wall
        time (steps, verdicts) or a probed one, the daemon's or the S3 server's (step_metrics,
        metric_verdicts: the nights that judged it)."""
        daemon = is_daemon_metric(metric)
        stats_t, verdict_t = (step_metrics, metric_verdicts) if daemon else (steps, verdicts)
        h, b = stats_t.alias("h"), stats_t.alias("b")

        def side(t, role):
            on = [t.c.run_id == runs.c.id, t.c.scenario == verdict_t.c.scenario, t.c.step == verdict_t.c.step,
                  t.c.role == role]
            return sa.and_(*on, t.c.metric == metric) if daemon else sa.and_(*on)
        q = (sa.select(runs.c.id, runs.c.started, runs.c.mode, runs.c.target, runs.c.repo, runs.c.machine,
                       runs.c.base_ref, runs.c.head_ref, verdict_t.c.scenario, verdict_t.c.step, verdict_t.c.verdict,
                       verdict_t.c.rel, h.c.mean.label("h_mean"), h.c.stddev.label("h_sd"),
                       h.c.median.label("h_median"), runs.c.head_sha.label("h_sha"),
                       verdict_t.c.contender.label("h_label"), b.c.mean.label("b_mean"),
                       b.c.median.label("b_median"), runs.c.base_sha.label("b_sha"),
                       verdict_t.c.baseline.label("b_label"))
             .select_from(runs.join(verdict_t, verdict_t.c.run_id == runs.c.id)
                          .outerjoin(h, side(h, "head")).outerjoin(b, side(b, "base")))
             .where(runs.c.exit_code.in_((0, 1)))
             .order_by(runs.c.target, runs.c.machine, verdict_t.c.scenario, verdict_t.c.step, runs.c.started,
                       runs.c.id))
        if daemon:
            q = q.where(verdict_t.c.metric == metric)
        q = _only(q, runs, target, machine)
        with self._store(write=False) as conn:
            return [NightPoint(**{**r._mapping, "verdict": Verdict(r.verdict)}, metric=metric) for r in conn.execute(q)]

    def daemon_metrics(self, target: str | None = None, machine: str | None = None) -> list[str]:
        """The probed metrics some night judged (the table's order: the daemon's, then the S3
        server's where a night asked for its verdict): the series there are of them."""
        q = sa.select(metric_verdicts.c.metric).distinct().select_from(
            metric_verdicts.join(runs, runs.c.id == metric_verdicts.c.run_id))
        q = _only(q, runs, target, machine)
        with self._store(write=False) as conn:
            have = {r[0] for r in conn.execute(q)}
        return [m for m in probed_metrics() if m in have]

    def known_changepoints(self, target: str | None = None, machine: str | None = None) -> list[dict]:
        q = sa.select(changepoints).order_by(changepoints.c.id)
        q = _only(q, changepoints, target, machine)
        with self._store(write=False) as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def recent_runs(self, limit: int = 60, target: str | None = None, machine: str | None = None) -> list[dict]:
        q = (sa.select(runs.c.id, runs.c.started, runs.c.mode, runs.c.target, runs.c.machine, runs.c.base_ref,
                       runs.c.base_sha, runs.c.head_ref, runs.c.head_sha, runs.c.exit_code, runs.c.error,
                       runs.c.slower, runs.c.faster, runs.c.same, runs.c.inconclusive, environment.c.host,
                       environment.c.go)
             .select_from(runs.outerjoin(environment, environment.c.run_id == runs.c.id))
             .order_by(runs.c.id.desc()).limit(limit))
        q = _only(q, runs, target, machine)
        with self._store(write=False) as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def count(self, table: str) -> int:
        with self._store(write=False) as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(md.tables[table])).scalar()

    def machines_and_targets(self) -> tuple[list[str], list[str]]:
        with self._store(write=False) as conn:
            m = [r[0] for r in conn.execute(sa.select(runs.c.machine).distinct()) if r[0]]
            t = [r[0] for r in conn.execute(sa.select(runs.c.target).distinct()) if r[0]]
        return sorted(m), sorted(t)


def _at(seq, i):
    return seq[i] if i < len(seq) else None


def open_history(where: str | Path) -> History:
    return History(where)
