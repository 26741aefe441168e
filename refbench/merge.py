"""Put the results files of a sharded run (`--shard I/N`) back together.

The shards must have compared the same builds (labels, refs, commits, binary hashes, toolchain)
of the same target with the same settings; the first difference is refused in one line naming it.
Different machine types are allowed (each step's contrasts were measured on one machine) but warned about.
The run's verdicts are judged again by the verdict engine (refbench.judge) over every shard's
contrasts, from each step's own p-value, with the criteria the shards recorded (metric
thresholds included), exactly as one unsharded run would have judged them.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from . import __version__, judge, results as rs
from .errors import RefbenchError
from .results import Results, Scenario, Step, load

# keys of a build that must be identical in every shard (binary is a path: machine-local)
BUILD_KEYS = ("label", "ref", "sha", "binary_sha256", "toolchain", "source")
TARGET_KEYS = ("name", "repo", "source", "backend")
MACHINE_KEYS = ("cpu_model", "cpus", "memory_bytes")
_BUILD_WORDS = {"sha": "commit", "binary_sha256": "binary hash", "ref": "ref", "label": "label",
                "toolchain": "Go toolchain", "source": "source"}


def _short(v) -> str:
    s = str(v)
    return s[:12] if len(s) >= 40 else s


def check(shards: list[tuple[str, Results]], allow_missing: bool = False) -> list[str]:
    """Refuse (RefbenchError, one line) shards that cannot be merged; return warnings."""
    _check_same(shards)
    warnings = _check_split(shards, allow_missing)
    warnings += _check_steps(shards, allow_missing, shards_missing=bool(warnings))
    return warnings + _machine_warnings(shards)


def _check_same(shards: list[tuple[str, Results]]) -> None:
    """Same target, builds and settings in every shard as in the first."""
    (name0, first), rest = shards[0], shards[1:]
    for name, r in rest:
        for k in TARGET_KEYS:
            a, b = getattr(first.target, k), getattr(r.target, k)
            if a != b:
                raise RefbenchError(f"{name}: target {k} {b!r} differs from {name0}'s {a!r}")
        if len(r.builds) != len(first.builds):
            raise RefbenchError(f"{name}: {len(r.builds)} builds, {name0} has {len(first.builds)}")
        for i, (a, b) in enumerate(zip(first.builds, r.builds)):
            for k in BUILD_KEYS:
                if getattr(a, k) != getattr(b, k):
                    raise RefbenchError(f"{name}: build {i + 1} ({a.label}) {_BUILD_WORDS[k]} "
                                        f"{_short(getattr(b, k))} differs from {name0}'s {_short(getattr(a, k))}")
        s0, s1 = _settings(first), _settings(r)
        for k in sorted(set(s0) | set(s1)):
            if s0.get(k) != s1.get(k):
                raise RefbenchError(f"{name}: setting {k} = {s1.get(k)!r} differs from {name0}'s {s0.get(k)!r}")


def _check_split(shards: list[tuple[str, Results]], allow_missing: bool) -> list[str]:
    """Which shard is which: all of one N, each index once; a warning when some are missing."""
    specs = [(name, r.settings.shard) for name, r in shards]
    sharded = [s for _, s in specs if s]
    if not sharded:
        return []
    if len(sharded) != len(specs):
        plain = next(n for n, s in specs if not s)
        raise RefbenchError(f"{plain}: not a shard (no --shard), the others are")
    counts = {s.split("/")[1] for s in sharded}
    if len(counts) > 1:
        raise RefbenchError(f"shards of different splits: {', '.join(f'{n} is {s}' for n, s in specs)}")
    seen: dict[str, str] = {}
    for name, s in specs:
        if s in seen:
            raise RefbenchError(f"{name}: shard {s} again (also {seen[s]})")
        seen[s] = name
    n = int(next(iter(counts)))
    missing = [f"{i}/{n}" for i in range(1, n + 1) if f"{i}/{n}" not in seen]
    if missing and not allow_missing:
        raise RefbenchError(f"shard {', '.join(missing)} missing (give every shard's results, "
                            "or --allow-missing)")
    return [f"shard {', '.join(missing)} missing: the merged results cover {len(seen)} of {n} shards"] \
        if missing else []


def _check_steps(shards: list[tuple[str, Results]], allow_missing: bool, shards_missing: bool) -> list[str]:
    """Every step once; every step of the run in some shard (unless shards are missing)."""
    where: dict[str, str] = {}
    for name, r in shards:
        for sc, st in r.steps():
            key = f"{sc.name}/{st.name}"
            if key in where:
                raise RefbenchError(f"{name}: step {sc.name} / {st.name} is also in {where[key]}")
            where[key] = name
    lost = [s for s in shards[0][1].settings.shard_steps or () if s not in where]
    if not lost or shards_missing:
        return []
    # every shard ran, yet a step is absent: a shard failed part-way or was edited
    if not allow_missing:
        raise RefbenchError(f"step {lost[0]} of the comparison is in no shard (--allow-missing to merge anyway)")
    return [f"{len(lost)} step(s) of the comparison are in no shard: {', '.join(lost)}"]


def _machine_warnings(shards: list[tuple[str, Results]]) -> list[str]:
    machines = {}
    for name, r in shards:
        machines.setdefault(tuple(getattr(r.environment, k) for k in MACHINE_KEYS), []).append(name)
    if len(machines) < 2:
        return []
    desc = "; ".join(f"{_machine(m)} ({', '.join(ns)})" for m, ns in machines.items())
    return [f"the shards ran on different machine types: {desc}. Each step's contrasts are "
            "still same-machine, but times of steps on different machines do not compare"]


def _machine(m: tuple) -> str:
    cpu, cpus, mem = m
    return f"{cpu or 'unknown CPU'} x{cpus or '?'}" + (f", {mem / 1024 ** 3:.0f} GiB" if mem else "")


def _settings(r: Results, drop=("shard", "order_seed")) -> dict:
    """The settings as the file holds them, less what may differ between shards (each shard draws
    its own rounds' orders)."""
    return {k: v for k, v in r.settings.to_json().items() if k not in drop}


def _ordered_union(lists: list[list[str]]) -> list[str]:
    """Names in an order that keeps every list's own order (each shard keeps the scenarios file's)."""
    after: dict[str, set[str]] = {}
    first_seen: dict[str, int] = {}
    for lst in lists:
        for i, x in enumerate(lst):
            first_seen.setdefault(x, len(first_seen))
            after.setdefault(x, set()).update(lst[:i])
    out, done = [], set()
    while len(out) < len(first_seen):
        ready = [x for x in first_seen if x not in done and after[x] <= done]
        x = min(ready or [x for x in first_seen if x not in done], key=first_seen.get)
        out.append(x)
        done.add(x)
    return out


def _ordered_scenarios(shards: list[tuple[str, Results]]) -> list[Scenario]:
    """Every shard's scenarios and steps, in the whole run's order (recorded by every
    shard), else in one consistent with each shard's."""
    first = shards[0][1]
    by_scenario: dict[str, tuple[Scenario, list[Step]]] = {}
    for _, r in shards:
        for sc in r.scenarios:
            by_scenario.setdefault(sc.name, (sc, []))[1].extend(sc.steps)
    full = [tuple(s.split("/", 1)) for s in first.settings.shard_steps or ()]
    scen_order = _ordered_union([list(dict.fromkeys(sc for sc, _ in full))] +
                                [[sc.name for sc in r.scenarios] for _, r in shards])
    out = []
    for name in scen_order:
        if name not in by_scenario:
            continue
        sc, all_steps = by_scenario[name]
        step_order = _ordered_union([[st for s, st in full if s == name]] +
                                    [[st.name for s in r.scenarios if s.name == name for st in s.steps]
                                     for _, r in shards])
        steps = {st.name: st for st in all_steps}
        out.append(dataclasses.replace(sc, steps=tuple(steps[n] for n in step_order if n in steps)))
    return out


def _timing(shards: list[tuple[str, Results]]) -> rs.Timing:
    """Every shard's seconds added up; each shard's wall time apart."""
    sums: dict[str, float] = {}
    for _, r in shards:
        for f in dataclasses.fields(rs.Timing) if r.timing else ():
            v = getattr(r.timing, f.name)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not f.name.endswith("share"):
                sums[f.name] = round(sums.get(f.name, 0) + v, 3)
    return rs.Timing(**sums, shard_wall_seconds=tuple(r.timing.wall_seconds if r.timing else None
                                                      for _, r in shards))


def _environment(shards: list[tuple[str, Results]]) -> rs.Environment:
    """The first shard's machine; the busiest shard's load speaks for the run; every host."""
    envs = [r.environment for _, r in shards]

    def busiest(k):
        vals = [getattr(e, k) for e in envs if getattr(e, k) is not None]
        return max(vals) if vals else None

    return dataclasses.replace(envs[0], load_before=busiest("load_before"),
                               competing_cpu_share=busiest("competing_cpu_share"),
                               hosts=tuple(sorted({e.host for e in envs if e.host})))


def merge(shards: list[tuple[str, Results]], allow_missing: bool = False) -> tuple[Results, list[str]]:
    """(merged results, warnings); refuses shards that differ (RefbenchError)."""
    if not shards:
        raise RefbenchError("nothing to merge")
    warnings = check(shards, allow_missing)
    first = shards[0][1]
    settings = dataclasses.replace(first.settings, shard=None, shard_steps=None, merged_shards=len(shards),
                                   order_seed=None)  # each shard's own is in `shards`
    judged = judge.rejudge(_ordered_scenarios(shards), first.labels, judge.recorded(settings))
    merged = first.replace(
        refbench=__version__, created=rs.created_now(), command_line=("merge", *[name for name, _ in shards]),
        environment=_environment(shards), settings=settings, scenarios=judged.scenarios,
        scoreboard=rs.frozen(judged.scoreboard), timing=_timing(shards), resources=None, stopped=None,
        shards=tuple(rs.frozen({"file": name, "shard": r.settings.shard, "host": r.environment.host,
                                "order_seed": r.settings.order_seed,
                                "created": r.created, "steps": [f"{sc.name}/{st.name}" for sc, st in r.steps()]})
                     for name, r in shards))
    return merged, warnings


def merge_files(paths: list[Path], allow_missing: bool = False) -> tuple[Results, list[str]]:
    unique = len({Path(q).name for q in paths}) == len(paths)
    return merge([(Path(p).name if unique else str(p), load(p)) for p in paths], allow_missing)
