"""Results for tests, in both forms: the JSON document (to write to a file, or to spoil on purpose)
and the typed `Results` every view reads. Same shape as a real run's results.json."""
from __future__ import annotations


import numpy as np

from refbench import judge, results as rs, stats
from refbench.units import slug

CRITERIA = stats.Criteria()


def times(mean: float, n: int = 8, cv: float = 0.01, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(mean * (1 + cv * z)) for z in rng.standard_normal(n)]


_COMPARE_CACHE: dict = {}


def _compare(a, at, b, bt, cache: bool) -> dict:
    """judge.contrast; with cache, one computation per (rounded) ratio (for runs with 1000s of steps)."""
    if not cache:
        return judge.contrast(a, at, b, bt, CRITERIA).to_json()
    key = (a, b, round(float(np.mean(bt) / np.mean(at)), 1))
    if key not in _COMPARE_CACHE:
        _COMPARE_CACHE[key] = judge.contrast(a, at, b, bt, CRITERIA).to_json()
    return dict(_COMPARE_CACHE[key])


def document(*, target: dict, builds: list[dict], backend: dict, settings: dict, scenarios: list[dict],
             timing: dict | None, env: dict, scoreboard: dict | None = None,
             command_line: list[str] = ()) -> dict:
    """A results document with the file's top-level keys in the file's order."""
    return {"schema": rs.SCHEMA, "version": rs.SCHEMA_VERSION, "refbench": "test", "created": "2026-01-01T00:00:00+0000",
            "command_line": list(command_line), "target": target, "environment": env, "settings": settings,
            "builds": builds, "baseline": builds[0]["label"] if builds else None, "backend": backend,
            "scenarios": scenarios, "scoreboard": scoreboard, "timing": timing}


def results_doc(steps: dict, labels=("old", "new"), fixtures: dict | None = None, cache: bool = False) -> dict:
    """steps: {(scenario, step): {label: times}}; fixtures: {scenario: (files, bytes)}."""
    fixtures = fixtures or {}
    scenarios: dict[str, dict] = {}
    for (scn, stn), per_build in steps.items():
        files, nbytes = fixtures.get(scn, (10, 10 * 1024 * 1024))
        sc = scenarios.setdefault(scn, {
            "name": scn, "slug": slug(scn), "description": "",
            "fixture": {"kind": "sparse", "size": "1M", "size_bytes": nbytes // files, "count": files,
                        "files": files, "bytes": nbytes, "seed": 1, "path": "/tmp/fx"}, "steps": []})
        builds = {}
        for lab in labels:
            t = per_build[lab]
            builds[lab] = {"times": t, "user": [x * 0.3 for x in t], "system": [x * 0.1 for x in t],
                           "exit_codes": [0] * len(t), "rounds": [i % 2 for i in range(len(t))],
                           "stats": stats.summarize(t).to_json(), "cpu_mean": 0.4 * float(np.mean(t)),
                           "cpu_wall_ratio": 0.4, "rss_kb": 30000, "check": None,
                           "command": f"{lab}/s5cmd cp a b", "prepare": None}
        comps = [_compare(labels[0], per_build[labels[0]], lab, per_build[lab], cache) for lab in labels[1:]]
        sc["steps"].append({"name": stn, "runs": len(per_build[labels[0]]), "warmup": 1, "rounds": 2,
                            "builds": builds, "comparisons": comps, "check_differs": False,
                            "hyperfine_seconds": 1.0})
    blds = [{"label": lab, "ref": lab, "kind": "tag", "sha": f"{i:040x}", "display": lab, "version": lab,
             "binary": f"/b/{lab}", "source": "git", "toolchain": "go1.24", "cached": True, "build_seconds": 0.0}
            for i, lab in enumerate(labels)]
    return document(
        target={"name": "s5cmd", "repo": "https://example.invalid/s5cmd", "source": "git", "backend": "s3"},
        builds=blds, backend={"kind": "s3", "endpoint": "embedded MinIO (loopback)"},
        settings={"runs": 8, "warmup": 1, "rounds": 2, "quick": True, "threshold": 0.05, "alpha": 0.05,
                  "noise_limit": 0.1, "until_decided": False, "max_runs": 60, "only": [], "hyperfine_flags": [],
                  "target_flags": []},
        scenarios=list(scenarios.values()), timing={"wall_seconds": 1.0},
        env={"host": "h", "os": "linux", "cpus": 2, "go": "go1.24", "hyperfine": "hyperfine 1.18.0",
             "cpu_model": "cpu"}, command_line=["-s", "a", "b"])


def results(steps: dict, labels=("old", "new"), fixtures: dict | None = None, cache: bool = False) -> rs.Results:
    return rs.Results.from_json(results_doc(steps, labels, fixtures, cache), "test results")


def basic_doc() -> dict:
    """Three steps of one scenario: upload 30% slower, download unchanged, remove 20% faster."""
    return results_doc({
        ("small files", "upload"): {"old": times(1.0, seed=1), "new": times(1.3, seed=2)},
        ("small files", "download"): {"old": times(0.5, seed=3), "new": times(0.5, seed=4)},
        ("small files", "remove"): {"old": times(0.2, seed=5), "new": times(0.16, seed=6)},
    })


def basic() -> rs.Results:
    return rs.Results.from_json(basic_doc(), "test results")


def one_step_doc() -> dict:
    """A small but complete results document: one step where the contender is ~30% slower."""
    base = [1.00, 1.02, 0.99, 1.01, 1.00, 0.98]
    cont = [1.31, 1.29, 1.33, 1.30, 1.28, 1.32]
    comp = judge.contrast("v1.0.0", base, "PR #7", cont).to_json()

    def side(t):
        return {"times": t, "rounds": [0] * len(t), "stats": stats.summarize(t).to_json(),
                "cpu_mean": 0.5, "cpu_wall_ratio": 0.5, "rss_kb": 40000, "check": None, "command": "x",
                "prepare": None}

    builds = [{"label": lab, "ref": ref, "kind": kind, "sha": sha * 40, "display": lab, "version": None,
               "binary": "/b", "source": "git", "toolchain": "go1.26", "cached": False, "build_seconds": 3.0}
              for lab, ref, kind, sha in (("v1.0.0", "v1.0.0", "tag", "a"), ("PR #7", "7", "pr", "b"))]
    scen = {"name": "small files", "slug": "small-files", "description": "",
            "fixture": {"kind": "sparse", "size": "256K", "count": 200, "files": 200},
            "steps": [{"name": "remove", "runs": 6, "warmup": 1, "rounds": 3, "check_differs": False,
                       "hyperfine_seconds": 1.0, "builds": {"v1.0.0": side(base), "PR #7": side(cont)},
                       "comparisons": [comp]}]}
    return document(
        target={"name": "s5cmd", "repo": "/origin", "source": "git", "backend": "s3"}, builds=builds,
        backend={"kind": "s3"}, settings={"runs": 6, "warmup": 1, "rounds": 3, "quick": True, "threshold": 0.05,
                                          "alpha": 0.05, "noise_limit": 0.1, "until_decided": False,
                                          "max_runs": 60, "only": [], "hyperfine_flags": [], "target_flags": []},
        scenarios=[scen], timing={"wall_seconds": 1.0}, env=rs.Environment.probe("go1.26").to_json(),
        command_line=["-s", "v1.0.0", "7"])


def two_shards(results: rs.Results) -> list[tuple[str, rs.Results]]:
    """A one-step run as two shards of `merge`'s input: its step named add in one and cat in the
    other, on two hosts, each with the settings a sharded run records."""
    import json
    shards = []
    for i, step in ((1, "add"), (2, "cat")):
        doc = json.loads(json.dumps(results.to_json()))
        doc["scenarios"][0]["steps"][0]["name"] = step
        doc["settings"].update({"shard": f"{i}/2", "shard_steps": ["add/add", "add/cat"]})
        doc["environment"]["host"] = f"runner-{i}"
        shards.append((f"shard{i}.json", rs.Results.from_json(doc, f"shard{i}")))
    return shards
