"""Put the results files of a sharded comparison (`--shard I/N`) back together.

The shards must have compared the same builds (labels, refs, commits, binary hashes, toolchain)
of the same target with the same settings; the first difference is refused in one line naming it.
Different machine types are allowed (each step's comparison ran on one machine) but warned about.
The run-wide multiple-testing adjustment is recomputed over every shard's comparisons, from each
step's own p-value, exactly as one unsharded run would have done it.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from . import __version__, report, stats
from .errors import RefbenchError

# keys of a build that must be identical in every shard (binary is a path: machine-local)
BUILD_KEYS = ("label", "ref", "sha", "binary_sha256", "toolchain", "source")
TARGET_KEYS = ("name", "repo", "source", "backend")
MACHINE_KEYS = ("cpu_model", "cpus", "memory_bytes")
_BUILD_WORDS = {"sha": "commit", "binary_sha256": "binary hash", "ref": "ref", "label": "label",
                "toolchain": "Go toolchain", "source": "source"}


def _short(v) -> str:
    s = str(v)
    return s[:12] if len(s) >= 40 else s


def check(shards: list[tuple[str, dict]], allow_missing: bool = False) -> list[str]:
    """Refuse (RefbenchError, one line) shards that cannot be merged; return warnings."""
    (name0, first), rest = shards[0], shards[1:]
    for name, r in rest:
        for k in TARGET_KEYS:
            a, b = first["target"].get(k), r["target"].get(k)
            if a != b:
                raise RefbenchError(f"{name}: target {k} {b!r} differs from {name0}'s {a!r}")
        if len(r["builds"]) != len(first["builds"]):
            raise RefbenchError(f"{name}: {len(r['builds'])} builds, {name0} has {len(first['builds'])}")
        for i, (a, b) in enumerate(zip(first["builds"], r["builds"])):
            for k in BUILD_KEYS:
                if a.get(k) != b.get(k):
                    raise RefbenchError(f"{name}: build {i + 1} ({a['label']}) {_BUILD_WORDS[k]} "
                                        f"{_short(b.get(k))} differs from {name0}'s {_short(a.get(k))}")
        s0, s1 = _settings(first), _settings(r)
        for k in sorted(set(s0) | set(s1)):
            if s0.get(k) != s1.get(k):
                raise RefbenchError(f"{name}: setting {k} = {s1.get(k)!r} differs from {name0}'s {s0.get(k)!r}")
    # which shard is which: all of one N, each index once
    specs = [(name, r["settings"].get("shard")) for name, r in shards]
    sharded = [s for _, s in specs if s]
    warnings = []
    if sharded:
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
        if missing:
            warnings.append(f"shard {', '.join(missing)} missing: the merged results cover "
                            f"{len(seen)} of {n} shards")
    # every step once
    where: dict[str, str] = {}
    for name, r in shards:
        for sc in r["scenarios"]:
            for st in sc["steps"]:
                key = f"{sc['name']}/{st['name']}"
                if key in where:
                    raise RefbenchError(f"{name}: step {sc['name']} / {st['name']} is also in {where[key]}")
                where[key] = name
    lost = [s for s in first["settings"].get("shard_steps") or [] if s not in where]
    if lost and not any("missing" in w for w in warnings):
        # every shard ran, yet a step is absent: a shard failed part-way or was edited
        if not allow_missing:
            raise RefbenchError(f"step {lost[0]} of the comparison is in no shard (--allow-missing to merge anyway)")
        warnings.append(f"{len(lost)} step(s) of the comparison are in no shard: {', '.join(lost)}")
    machines = {}
    for name, r in shards:
        env = r.get("environment") or {}
        machines.setdefault(tuple(env.get(k) for k in MACHINE_KEYS), []).append(name)
    if len(machines) > 1:
        desc = "; ".join(f"{_machine(m)} ({', '.join(ns)})" for m, ns in machines.items())
        warnings.append(f"the shards ran on different machine types: {desc}. Each step's comparison is "
                        "still same-machine, but times of steps on different machines do not compare")
    return warnings


def _machine(m: tuple) -> str:
    cpu, cpus, mem = m
    return f"{cpu or 'unknown CPU'} x{cpus or '?'}" + (f", {mem / 1024 ** 3:.0f} GiB" if mem else "")


def _settings(r: dict, drop=("shard",)) -> dict:
    return {k: v for k, v in (r.get("settings") or {}).items() if k not in drop}


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


def comparison_from_json(d: dict) -> stats.Comparison:
    """A Comparison from its results.json form with the step's own (unadjusted) p-value."""
    fields = {f.name: f for f in dataclasses.fields(stats.Comparison)}
    kw = {k: v for k, v in d.items() if k in fields}
    if d.get("p_raw") is not None:  # p_value was adjusted within the shard; start from the step's own
        kw["p_value"] = d["p_raw"]
    if "p_raw" in fields:
        kw["p_raw"] = None
    missing = [k for k, f in fields.items() if k not in kw and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise RefbenchError(f"a comparison in the results lacks {', '.join(missing)}: cannot re-adjust it")
    return stats.Comparison(**kw)


def readjust(scenarios: list[dict], settings: dict) -> None:
    """The run-wide multiple-testing adjustment over all the merged comparisons, in place."""
    family = [(st, i) for sc in scenarios for st in sc["steps"] for i in range(len(st["comparisons"]))]
    comps = [comparison_from_json(st["comparisons"][i]) for st, i in family]
    keys = {f.name for f in dataclasses.fields(stats.Settings)}
    s = stats.Settings(**{k: settings[k] for k in keys if settings.get(k) is not None})
    for (st, i), c in zip(family, stats.adjust_family(comps, s)):
        st["comparisons"][i] = {**st["comparisons"][i], **c.to_json()}


def merge(shards: list[tuple[str, dict]], allow_missing: bool = False) -> tuple[dict, list[str]]:
    """(merged results, warnings); refuses shards that differ (RefbenchError)."""
    if not shards:
        raise RefbenchError("nothing to merge")
    warnings = check(shards, allow_missing)
    first = shards[0][1]
    by_scenario: dict[str, dict] = {}
    for _, r in shards:
        for sc in r["scenarios"]:
            have = by_scenario.get(sc["name"])
            if have is None:
                by_scenario[sc["name"]] = {**sc, "steps": list(sc["steps"])}
            else:
                have["steps"].extend(sc["steps"])
    # the order of the whole comparison (recorded by every shard), else one consistent with each shard's
    full = [tuple(s.split("/", 1)) for s in first["settings"].get("shard_steps") or []]
    scen_order = _ordered_union([list(dict.fromkeys(sc for sc, _ in full))] +
                                [[sc["name"] for sc in r["scenarios"]] for _, r in shards])
    scenarios = []
    for name in scen_order:
        if name not in by_scenario:
            continue
        sc = by_scenario[name]
        step_order = _ordered_union([[st for s, st in full if s == name]] +
                                    [[st["name"] for s in r["scenarios"] if s["name"] == name for st in s["steps"]]
                                     for _, r in shards])
        steps = {st["name"]: st for st in sc["steps"]}
        scenarios.append({**sc, "steps": [steps[n] for n in step_order if n in steps]})
    settings = {**_settings(first, ("shard", "shard_steps")), "merged_shards": len(shards)}
    readjust(scenarios, settings)
    labels = [b["label"] for b in first["builds"]]
    scoreboard = None
    if len(labels) > 2:
        ratios: dict[str, list[float]] = {lab: [] for lab in labels}
        for sc in scenarios:
            for st in sc["steps"]:
                for c in st["comparisons"]:
                    ratios[c["contender"]].append(c["ratio"])
                ratios[labels[0]].append(1.0)
        scoreboard = stats.geomean_scoreboard(ratios)
    timing = {}
    for _, r in shards:
        for k, v in (r.get("timing") or {}).items():
            if isinstance(v, (int, float)) and not k.endswith("share"):
                timing[k] = round(timing.get(k, 0) + v, 3)
    timing["shard_wall_seconds"] = [(r.get("timing") or {}).get("wall_seconds") for _, r in shards]
    envs = [r.get("environment") or {} for _, r in shards]
    env = dict(envs[0])
    for k in ("load_before", "competing_cpu_share"):  # the busiest shard speaks for the run
        vals = [e.get(k) for e in envs if e.get(k) is not None]
        env[k] = max(vals) if vals else None
    env["hosts"] = sorted({e.get("host") for e in envs if e.get("host")})
    merged = report.build_results(
        target=first["target"], builds=first["builds"], backend=first.get("backend") or {}, settings=settings,
        scenarios=scenarios, timing=timing, env=env, scoreboard=scoreboard,
        command_line=["merge", *[name for name, _ in shards]])
    merged["refbench"] = __version__
    merged["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    merged["shards"] = [{"file": name, "shard": r["settings"].get("shard"), "host": (r.get("environment") or {}).get("host"),
                         "created": r.get("created"),
                         "steps": [f"{sc['name']}/{st['name']}" for sc in r["scenarios"] for st in sc["steps"]]}
                        for name, r in shards]
    return merged, warnings


def merge_files(paths: list[Path], allow_missing: bool = False) -> tuple[dict, list[str]]:
    unique = len({Path(q).name for q in paths}) == len(paths)
    return merge([(Path(p).name if unique else str(p), report.load_results(Path(p))) for p in paths],
                 allow_missing)
