"""One CSV row per step and build with every statistic the run stored, for spreadsheets and
notebooks (`--csv`): where the step ran (its S3 network profile, kubo's daemon mode), wall time's
contrast in the unprefixed columns (the primary metric), each
other metric's under its own prefix, and the build's S3 requests and kubo repo counts where the
run measured them (empty where it did not)."""
from __future__ import annotations

import csv
from pathlib import Path

from ..results import Results, Samples, Step
from ..metrics import table

METRIC_FIELDS = ("rel_change", "ci_low", "ci_high", "p_value", "verdict")


def _other_metrics() -> tuple[str, ...]:
    """The timer's metrics other than wall time (of metrics.table()), each with its own contrast columns."""
    return tuple(m.name for m in table().of("timer") if m.name != "wall")


def _probed_fields(source: str) -> list[str]:
    """The columns of the table's metrics of one source ("probe": the daemon's, "server"): each one's
    mean per run, then each one's contrast."""
    ms = table().of(source)
    return [*(f"{m.key}_mean" for m in ms), *(f"{m.key}_{f}" for m in ms for f in METRIC_FIELDS)]


REQUEST_FIELDS = ["requests_total", "requests_by_api", "received_bytes", "sent_bytes", "errors_4xx", "errors_5xx",
                  "canceled", "requests_differ", "repo_objects"]

_BASE_FIELDS = ["scenario", "step", "network", "daemon", "build", "is_baseline", "ref", "sha", "n", "mean_s", "stddev_s",
                "median_s",
                "min_s", "max_s", "p95_s", "cv", "user_mean_s", "system_mean_s", "cpu_mean_s", "cpu_wall_ratio",
                "peak_rss_kib", "throughput_bytes_per_s", "fixture_kind", "fixture_files", "fixture_bytes",
                "runs", "warmup", "rounds", "baseline", "ratio", "rel_change", "ci_low", "ci_high", "p_value",
                "verdict", "noisy", "mde", "runs_needed", "check", "check_differs", "command", "times_s",
                "instructions_mean"]


def _csv_fields() -> list[str]:
    """Every run's columns: CSV_FIELDS's first part, each other timer metric's contrast, the requests."""
    return [*_BASE_FIELDS, *[f"{m.replace('-', '_')}_{f}" for m in _other_metrics() for f in METRIC_FIELDS],
            *REQUEST_FIELDS]


CSV_FIELDS = _csv_fields()  # of the built-in metrics
# a run whose daemon was probed (kubo online/offline) gets these too, after CSV_FIELDS; others not
DAEMON_FIELDS = _probed_fields("probe")
# a run on the embedded MinIO gets its CPU per timed run (context; the verdict where asked)
SERVER_FIELDS = _probed_fields("server")


def fields_of(results: Results) -> list[str]:
    """The CSV's columns: the daemon's (the S3 server's) only where some step has its figures (a
    run without one keeps the columns it always had)."""
    probed = any(b.daemon_values() for _, st in results.steps() for b in st.builds.values())
    served = any(b.server_values() for _, st in results.steps() for b in st.builds.values())
    return _csv_fields() + (_probed_fields("probe") if probed else []) + (_probed_fields("server") if served else [])


def _daemon_columns(st: Step, label: str, b: Samples) -> dict:
    """The build's daemon (and S3 server): each metric's mean per run and the contender's verdict on it."""
    return {**_probed_columns(st, label, b.daemon_values(), table().names_of("probe")),
            **_probed_columns(st, label, b.server_values(), table().names_of("server"))}


def _probed_columns(st: Step, label: str, values: dict, metrics: tuple[str, ...]) -> dict:
    if not values:
        return {}
    by_metric = st.by_metric(label)
    out = {f"{m.replace('-', '_')}_mean": _mean(v) for m, v in values.items()}
    for m in metrics:
        c, k = by_metric.get(m), m.replace("-", "_")
        out.update({f"{k}_rel_change": _of(c, "rel"), f"{k}_ci_low": _of(c, "ci_low"),
                    f"{k}_ci_high": _of(c, "ci_high"), f"{k}_p_value": _of(c, "p_value"),
                    f"{k}_verdict": _of(c, "verdict")})
    return out


def _of(obj, name: str):
    """A field of a summary or contrast that may be absent (the baseline has no contrast)."""
    return getattr(obj, name) if obj is not None else None


def _mean(values) -> float | None:
    return sum(values) / len(values) if values else None


def _metric_columns(st: Step, label: str) -> dict:
    """A contender's verdict on every other metric (empty for the baseline and unmeasured metrics)."""
    by_metric = st.by_metric(label)
    out = {}
    for m in _other_metrics():
        c, m = by_metric.get(m), m.replace("-", "_")
        out.update({f"{m}_rel_change": _of(c, "rel"), f"{m}_ci_low": _of(c, "ci_low"), f"{m}_ci_high": _of(c, "ci_high"),
                    f"{m}_p_value": _of(c, "p_value"), f"{m}_verdict": _of(c, "verdict")})
    return out


def _request_columns(st: Step, label: str) -> dict:
    """The build's requests in the step's accounting run and its kubo repo's block count."""
    q = (st.requests or {}).get(label)
    repo = (st.repo or {}).get(label)
    return {"requests_total": _of(q, "total"),
            "requests_by_api": " ".join(f"{k}={v}" for k, v in sorted(q.by_api.items())) if q else None,
            "received_bytes": _of(q, "received_bytes"), "sent_bytes": _of(q, "sent_bytes"),
            "errors_4xx": _of(q, "errors_4xx"), "errors_5xx": _of(q, "errors_5xx"), "canceled": _of(q, "canceled"),
            "requests_differ": any(c.contender == label for c in st.request_changes or ()) if q else None,
            "repo_objects": _of(repo, "num_objects")}


def csv_rows(results: Results) -> list[dict]:
    """One row per step × build with every statistic (the baseline's contrast fields empty)."""
    builds = {b.label: b for b in results.builds}
    out = []
    for sc, st in results.steps():
        fx = sc.fixture
        comp = {c.contender: c for c in st.comparisons}
        # a contender answered `identical binary` has no samples: its row holds the verdict alone
        unmeasured = {lab: Samples(times=()) for lab in comp if lab not in st.builds}
        for lab, b in {**st.builds, **unmeasured}.items():
            s, c, build = b.stats, comp.get(lab), builds.get(lab)
            out.append({
                "scenario": sc.name, "step": st.name, "network": st.network, "daemon": sc.daemon,
                "build": lab, "is_baseline": lab == results.baseline,
                "ref": _of(build, "ref"), "sha": _of(build, "sha"),
                "n": _of(s, "n"), "mean_s": _of(s, "mean"), "stddev_s": _of(s, "stddev"),
                "median_s": _of(s, "median"), "min_s": _of(s, "min"), "max_s": _of(s, "max"), "p95_s": _of(s, "p95"),
                "cv": _of(s, "cv"),
                "user_mean_s": _mean(b.user), "system_mean_s": _mean(b.system),
                "cpu_mean_s": b.cpu_mean, "cpu_wall_ratio": b.cpu_wall_ratio, "peak_rss_kib": b.rss_kb,
                "throughput_bytes_per_s": fx.throughput(b)[0],
                "fixture_kind": fx.kind, "fixture_files": fx.files, "fixture_bytes": fx.bytes,
                "runs": st.runs, "warmup": st.warmup, "rounds": st.rounds,
                "baseline": c.baseline if c else results.baseline, "ratio": _of(c, "ratio"),
                "rel_change": _of(c, "rel"), "ci_low": _of(c, "ci_low"), "ci_high": _of(c, "ci_high"),
                "p_value": _of(c, "p_value"), "verdict": _of(c, "verdict"), "noisy": _of(c, "noisy"),
                "mde": _of(c, "mde"), "runs_needed": _of(c, "runs_needed"),
                "check": b.check, "check_differs": st.check_differs, "command": b.command,
                "times_s": " ".join(f"{t:.6f}" for t in b.times),
                "instructions_mean": _mean([i for i in b.instructions or () if i is not None]),
                **_metric_columns(st, lab), **_request_columns(st, lab), **_daemon_columns(st, lab, b),
            })
    return out


def write_csv(results: Results, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields_of(results))
        w.writeheader()
        for row in csv_rows(results):
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})
