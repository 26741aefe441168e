"""`--shard I/N`: a deterministic, balanced share of a run's steps.

Every shard computes the same partition from the same inputs (scenarios file, --only, --quick,
-r, and the optional earlier results file), so N runners given 1/N .. N/N cover every selected
step exactly once without talking to each other. A shard runs all builds for its steps, so each
step's contrasts stay same-machine; `bench.py merge` puts the shards back together.

Balance: steps are dealt largest first to the shard with the least expected time so far (LPT).
Expected time comes from an earlier results file where it has the step (the hyperfine seconds it
took, scaled to this run's number of runs), otherwise from the scenario's sizes: per measured or
warm-up run, a fixed start-up cost, a cost per file and a cost per byte. Steps the earlier file
has calibrate the size model for the steps it has not.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from . import fixtures as fx, results
from .errors import RefbenchError
from .config import selected
from .sampling import effective_runs, effective_warmup

# size model: seconds per run (a rough s5cmd/kubo on loopback; only the ratios between steps matter)
START_SECONDS, PER_FILE_SECONDS, BYTES_PER_SECOND = 0.05, 0.002, 300 * 1024 ** 2


def parse(text: str) -> tuple[int, int]:
    """'2/4' -> (2, 4); argparse type for --shard."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m:
        raise argparse.ArgumentTypeError(f"expected I/N like 1/4, got {text!r}")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1 or not 1 <= i <= n:
        raise argparse.ArgumentTypeError(f"shard {text!r}: need 1 <= I <= N")
    return i, n


def label(shard: tuple[int, int]) -> str:
    return f"{shard[0]}/{shard[1]}"


_runs, _warmup = effective_runs, effective_warmup  # the one rule (sampling.py)


def size_estimate(scenario, step, runs: int, warmup: int = 2) -> float:
    """Expected seconds of one build's runs of a step, from the fixture's shape."""
    files, total, _ = fx.planned_bytes(scenario.fixture)
    per_run = START_SECONDS + files * PER_FILE_SECONDS + total / BYTES_PER_SECOND
    return (_runs(scenario, step, runs) + _warmup(scenario, step, warmup)) * per_run


def measured_times(path: str | Path) -> dict[tuple[str, str], float]:
    """{(scenario, step): seconds per measured run, all builds together} from an earlier results file."""
    data = results.load_document(path)  # step names and times are all it needs: no shape check
    out = {}
    for sc in data.get("scenarios", []):
        for st in sc.get("steps", []):
            n = max((len(b.get("times") or []) for b in (st.get("builds") or {}).values()), default=0)
            seconds = st.get("hyperfine_seconds")
            if seconds is None:
                seconds = sum(sum(b.get("times") or []) for b in (st.get("builds") or {}).values())
            if n and seconds and sc.get("name") and st.get("name"):
                out[(sc["name"], st["name"])] = float(seconds) / n
    return out


def expected_times(units: list[tuple], runs: int, warmup: int, weights: str | Path | None) -> list[float]:
    """Expected seconds per (scenario, step) unit."""
    model = [size_estimate(sc, st, runs, warmup) for sc, st in units]
    if not weights:
        return model
    measured = measured_times(weights)
    known = [(i, measured[(sc.name, st.name)] * _runs(sc, st, runs)) for i, (sc, st) in enumerate(units)
             if (sc.name, st.name) in measured]
    if not known:
        return model
    # calibrate the size model on the steps the file has, for the steps it has not
    ratios = sorted(t / model[i] for i, t in known if model[i] > 0)
    scale = ratios[len(ratios) // 2] if ratios else 1.0
    out = [m * scale for m in model]
    for i, t in known:
        out[i] = t
    return out


def assign(costs: list[float], n: int) -> list[int]:
    """Shard (0-based) of each unit: largest first to the least-loaded shard (ties: lower index)."""
    load = [0.0] * n
    where = [0] * len(costs)
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        k = min(range(n), key=lambda s: (load[s], s))
        where[i] = k
        load[k] += costs[i]
    return where


def select(scenarios: list, step_filter, shard: tuple[int, int], runs: int, warmup: int = 2,
           weights: str | Path | None = None):
    """(scenarios, step filter) of shard I of N, given the run's own selection."""
    i, n = shard
    units = selected(scenarios, step_filter)
    if len(units) < n:
        raise RefbenchError(f"--shard {i}/{n}: only {len(units)} step{'s' if len(units) != 1 else ''} to share "
                            f"between {n} shards; use at most {len(units)} shards")
    where = assign(expected_times(units, runs, warmup, weights), n)
    mine = {(sc.name, st.name) for (sc, st), k in zip(units, where) if k == i - 1}

    def keep(sc, st) -> bool:
        return (sc.name, st.name) in mine

    keep.shard = label(shard)
    keep.all_steps = [f"{sc.name}/{st.name}" for sc, st in units]  # the whole run's steps, in order
    return [sc for sc in scenarios if any(keep(sc, st) for st in sc.steps)], keep


def settings(step_filter) -> dict:
    """What a shard records in results.json settings: which shard, and every step of the whole
    run in order (the same in all shards: merge checks it, and orders and completes by it)."""
    if not hasattr(step_filter, "all_steps"):
        return {}
    return {"shard": step_filter.shard, "shard_steps": step_filter.all_steps}


def plan(scenarios: list, step_filter, n: int, runs: int, warmup: int = 2, weights=None) -> list[list[str]]:
    """Every shard's steps as 'scenario/step' (for --dry-run and the docs)."""
    units = selected(scenarios, step_filter)
    where = assign(expected_times(units, runs, warmup, weights), n)
    out: list[list[str]] = [[] for _ in range(n)]
    for (sc, st), k in zip(units, where):
        out[k].append(f"{sc.name}/{st.name}")
    return out
