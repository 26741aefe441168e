"""One CSV row per step and build with every statistic the run stored, for spreadsheets and
notebooks (`--csv`)."""
from __future__ import annotations

import csv
from pathlib import Path

from ._compat import normalise

CSV_FIELDS = ["scenario", "step", "build", "is_baseline", "ref", "sha", "n", "mean_s", "stddev_s", "median_s",
              "min_s", "max_s", "p95_s", "cv", "user_mean_s", "system_mean_s", "cpu_mean_s", "cpu_wall_ratio",
              "peak_rss_kib", "throughput_bytes_per_s", "fixture_kind", "fixture_files", "fixture_bytes",
              "runs", "warmup", "rounds", "baseline", "ratio", "rel_change", "ci_low", "ci_high", "p_value",
              "verdict", "noisy", "mde", "runs_needed", "check", "check_differs", "command", "times_s"]


def csv_rows(results: dict) -> list[dict]:
    """One row per step × build with every statistic (the baseline's comparison fields empty)."""
    results = normalise(results)
    builds = {b["label"]: b for b in results["builds"]}
    out = []
    for sc in results["scenarios"]:
        fx = sc["fixture"]
        for st in sc["steps"]:
            comp = {c["contender"]: c for c in st["comparisons"]}
            for lab, b in st["builds"].items():
                s = b.get("stats") or {}
                c = comp.get(lab, {})
                user, system = b.get("user") or [], b.get("system") or []
                row = {
                    "scenario": sc["name"], "step": st["name"], "build": lab,
                    "is_baseline": lab == results.get("baseline"), "ref": builds.get(lab, {}).get("ref"),
                    "sha": builds.get(lab, {}).get("sha"), "n": s.get("n"), "mean_s": s.get("mean"),
                    "stddev_s": s.get("stddev"), "median_s": s.get("median"), "min_s": s.get("min"),
                    "max_s": s.get("max"), "p95_s": s.get("p95"), "cv": s.get("cv"),
                    "user_mean_s": sum(user) / len(user) if user else None,
                    "system_mean_s": sum(system) / len(system) if system else None,
                    "cpu_mean_s": b.get("cpu_mean"), "cpu_wall_ratio": b.get("cpu_wall_ratio"),
                    "peak_rss_kib": b.get("rss_kb"),
                    "throughput_bytes_per_s": (fx.get("bytes") / s["mean"]) if fx.get("bytes") and s.get("mean")
                    else None,
                    "fixture_kind": fx.get("kind"), "fixture_files": fx.get("files"), "fixture_bytes": fx.get("bytes"),
                    "runs": st.get("runs"), "warmup": st.get("warmup"), "rounds": st.get("rounds"),
                    "baseline": c.get("baseline", results.get("baseline")), "ratio": c.get("ratio"),
                    "rel_change": c.get("rel"), "ci_low": c.get("ci_low"), "ci_high": c.get("ci_high"),
                    "p_value": c.get("p_value"), "verdict": c.get("verdict"), "noisy": c.get("noisy"),
                    "mde": c.get("mde"), "runs_needed": c.get("runs_needed"), "check": b.get("check"),
                    "check_differs": st.get("check_differs"), "command": b.get("command"),
                    "times_s": " ".join(f"{t:.6f}" for t in b.get("times") or []),
                }
                out.append(row)
    return out


def write_csv(results: dict, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        for row in csv_rows(results):
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})
