"""--shard I/N, `build --out` / `--builds-dir` reuse, and `merge`."""
from __future__ import annotations

import copy
import json
import os
import time

import pytest
from scipy.stats import false_discovery_control

from conftest import ROOT, S5_RUN_ARGS, run_bench
from refbench import merge as mg, shard
from refbench.results import Results
from refbench.pipeline import select_scenarios
from refbench.config import load_config
from refbench.errors import RefbenchError


# ---- the partition --------------------------------------------------------------------------
def scenarios(target="s5cmd", quick=True):
    cfg = load_config(ROOT / "refbench" / "scenarios.toml")
    return [s.for_quick(quick) for s in cfg.scenarios_for(target)]


@pytest.mark.parametrize("target,n", [("s5cmd", 2), ("s5cmd", 3), ("kubo", 4), ("kubo", 2)])
def test_shards_cover_every_step_once_and_balance(target, n):
    scs = scenarios(target)
    every = {(s.name, st.name) for s in scs for st in s.steps}
    seen, loads = [], []
    for i in range(1, n + 1):
        chosen, keep = shard.select(scs, None, (i, n), runs=10)
        mine = [(s.name, st.name) for s in chosen for st in s.steps if keep(s, st)]
        assert mine, f"shard {i}/{n} is empty"
        seen += mine
        costs = dict(zip([(s.name, st.name) for s in scs for st in s.steps],
                         shard.expected_times([(s, st) for s in scs for st in s.steps], 10, 2, None)))
        loads.append(sum(costs[k] for k in mine))
    assert sorted(seen) == sorted(every)  # each step in exactly one shard
    # LPT: no shard carries more than the biggest step on top of an even share
    assert max(loads) <= sum(loads) / n + max(costs.values()) + 1e-9
    # deterministic: the same inputs give the same partition
    assert shard.plan(scs, None, n, 10) == shard.plan(scenarios(target), None, n, 10)


def test_shard_respects_only_and_refuses_too_many_shards():
    scs = scenarios()
    sel, keep = select_scenarios(scs, ["small files"])
    parts = shard.plan(sel, keep, 3, 6)
    assert sorted(x for p in parts for x in p) == ["small files/download", "small files/remove",
                                                   "small files/upload"]
    with pytest.raises(RefbenchError, match="only 3 steps to share between 4 shards"):
        shard.select(sel, keep, (4, 4), runs=6)
    for bad in ("0/2", "3/2", "1/0", "x", "1-2"):
        with pytest.raises(Exception):
            shard.parse(bad)
    assert shard.parse("2/3") == (2, 3)


def test_balance_from_an_earlier_results_file(tmp_path):
    """Measured step times win over the size model: a step the file shows to be slow gets a shard
    of its own."""
    scs = scenarios()
    sel, keep = select_scenarios(scs, ["small files"])
    prior = {"schema": "refbench/results", "version": 1, "scenarios": [{"name": "small files", "steps": [
        {"name": "upload", "hyperfine_seconds": 100.0, "builds": {"a": {"times": [1] * 10}}},
        {"name": "download", "hyperfine_seconds": 1.0, "builds": {"a": {"times": [1] * 10}}},
        {"name": "remove", "hyperfine_seconds": 1.0, "builds": {"a": {"times": [1] * 10}}}]}]}
    (tmp_path / "prior.json").write_text(json.dumps(prior))
    parts = shard.plan(sel, keep, 2, 10, weights=tmp_path / "prior.json")
    assert ["small files/upload"] in parts


# ---- merge: refusals and the re-adjustment ----------------------------------------------------
def comp(p_raw: float, rel: float = 0.02):
    return {"baseline": "v1", "contender": "v2", "ratio": 1 + rel, "rel": rel, "ci_low": rel - 0.01,
            "ci_high": rel + 0.01, "p_value": min(1.0, p_raw * 3), "p_raw": p_raw, "verdict": "inconclusive",
            "noisy": False, "mde": 0.05, "runs_needed": 20, "factor": 1 + rel, "factor_err": 0.01,
            "faster": "v1", "slower_label": "v2", "phrase": "'v1' ran ...", "unknown_future_key": 1}


def fake_shard(i: int, n: int, steps: list[tuple[str, float]]) -> dict:
    return {
        "schema": "refbench/results", "version": 1, "created": "2026-11-22T00:00:00+0000",
        "target": {"name": "s5cmd", "repo": "/o.git", "source": "git", "backend": "s3"},
        "environment": {"host": f"runner-{i}", "cpu_model": "EPYC", "cpus": 4, "memory_bytes": 16 << 30,
                        "load_before": 0.1 * i},
        "settings": {"runs": 6, "warmup": 1, "rounds": 3, "quick": True, "threshold": 0.05, "alpha": 0.05,
                     "noise_limit": 0.1, "only": [], "shard": f"{i}/{n}",
                     "shard_steps": ["small files/upload", "small files/download", "small files/remove"]},
        "builds": [{"label": "v1", "ref": "v1", "kind": "tag", "sha": "a" * 40, "binary_sha256": "1" * 64,
                    "toolchain": "go1.24", "source": "git", "binary": f"/runner{i}/a/s5cmd", "cached": True,
                    "build_seconds": 0},
                   {"label": "v2", "ref": "v2", "kind": "tag", "sha": "b" * 40, "binary_sha256": "2" * 64,
                    "toolchain": "go1.24", "source": "git", "binary": f"/runner{i}/b/s5cmd", "cached": True,
                    "build_seconds": 0}],
        "backend": {"kind": "minio"},
        "scenarios": [{"name": "small files", "fixture": {"size": "256K", "count": 200, "kind": "sparse", "files": 200},
                       "steps": [{"name": name, "builds": {}, "comparisons": [comp(p)], "hyperfine_seconds": 3.0}
                                 for name, p in steps]}],
        "timing": {"wall_seconds": 10.0 * i, "hyperfine_seconds": 5.0},
        "scoreboard": None,
    }


def merge(shards, allow_missing=False):
    """mg.merge over the shards' documents (typed as the files are read); the merged document."""
    merged, warnings = mg.merge([(name, Results.from_json(r, name)) for name, r in shards], allow_missing)
    return merged.to_json(), warnings


def two_shards():
    return [("shard1.json", fake_shard(1, 2, [("upload", 0.01), ("remove", 0.04)])),
            ("shard2.json", fake_shard(2, 2, [("download", 0.02)]))]


def test_merge_orders_steps_and_adjusts_over_all_shards():
    merged, warnings = merge(two_shards())
    assert warnings == []
    steps = [st["name"] for st in merged["scenarios"][0]["steps"]]
    assert steps == ["upload", "download", "remove"] and len(merged["scenarios"]) == 1  # the run's own order
    got = {st["name"]: st["comparisons"][0]["p_value"] for st in merged["scenarios"][0]["steps"]}
    expected = dict(zip(["upload", "remove", "download"], false_discovery_control([0.01, 0.04, 0.02], method="bh")))
    assert got == pytest.approx(expected)
    assert all(st["comparisons"][0]["p_raw"] is not None for st in merged["scenarios"][0]["steps"])
    assert "shard" not in merged["settings"] and "shard_steps" not in merged["settings"]
    assert merged["settings"]["merged_shards"] == 2
    assert [s["shard"] for s in merged["shards"]] == ["1/2", "2/2"]
    assert merged["environment"]["load_before"] == pytest.approx(0.2)


@pytest.mark.parametrize("tamper,message", [
    (lambda r: r["builds"][1].update(sha="c" * 40), "shard2.json: build 2 (v2) commit cccccccccccc differs from "
                                                   "shard1.json's bbbbbbbbbbbb"),
    (lambda r: r["builds"][0].update(binary_sha256="9" * 64), "build 1 (v1) binary hash 999999999999 differs"),
    (lambda r: r["settings"].update(runs=10), "shard2.json: setting runs = 10 differs from shard1.json's 6"),
    (lambda r: r["settings"].update(quick=False), "setting quick = False differs"),
    (lambda r: r["target"].update(repo="/other.git"), "target repo '/other.git' differs"),
    (lambda r: r["settings"].update(shard="1/2"), "shard2.json: shard 1/2 again (also shard1.json)"),
    (lambda r: r["settings"].update(shard="2/3"), "shards of different splits"),
    (lambda r: r["scenarios"][0]["steps"][0].update(name="upload"), "step small files / upload is also in shard1.json"),
    (lambda r: r["scenarios"][0]["steps"].clear(), "step small files/download of the comparison is in no shard"),
    (lambda r: r["settings"]["shard_steps"].pop(), "setting shard_steps = ['small files/upload', 'small files/download'] "
                                                   "differs"),
])
def test_tampered_shards_are_refused(tamper, message):
    shards = two_shards()
    tamper(shards[1][1])
    with pytest.raises(RefbenchError) as e:
        merge(shards)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_missing_shard_and_machine_types():
    shards = two_shards()
    with pytest.raises(RefbenchError, match="shard 2/2 missing"):
        merge(shards[:1])
    merged, warnings = merge(shards[:1], allow_missing=True)
    assert "shard 2/2 missing" in warnings[0]
    shards[1][1]["environment"].update(cpu_model="Xeon", cpus=2)
    merged, warnings = merge(shards)
    assert len(warnings) == 1 and "different machine types" in warnings[0] and "Xeon x2" in warnings[0]


def test_merge_command_refuses_in_one_line(tmp_path):
    shards = two_shards()
    shards[1][1]["builds"][1]["sha"] = "c" * 40
    for name, r in shards:
        (tmp_path / name).write_text(json.dumps(r))
    proc = run_bench("merge", str(tmp_path / "shard1.json"), str(tmp_path / "shard2.json"), "-o",
                     str(tmp_path / "m.json"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "commit" in proc.stderr and not (tmp_path / "m.json").exists()


# ---- end to end: two shards one after the other, as two runners would ------------------------------
# The unsharded run's arguments at the cheapest sampling that still gives every step both builds'
# samples in interleaved rounds: what is checked here is how the steps are split and merged back,
# which the unsharded run's 20 x 5 (chosen for its verdicts' power) adds nothing to but time.
SHARD_RUNS, SHARD_ROUNDS = 4, 2
RUN = tuple(str(SHARD_RUNS) if prev == "-r" else str(SHARD_ROUNDS) if prev == "--rounds" else a
            for prev, a in zip(("",) + S5_RUN_ARGS, S5_RUN_ARGS))


@pytest.mark.slow
def test_sharded_comparison_matches_unsharded(tmp_path, s5_origin, builds_dir, s5_run):
    # the build job: build once, hand the binaries over as an "artifact"
    art = tmp_path / "artifact"
    t0 = time.monotonic()
    b = run_bench("build", "-s", "v1.0.0", "7", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                  "--out", str(art))
    build_wall = time.monotonic() - t0
    assert b.returncode == 0, b.stderr
    manifest = json.loads((art / "refbench-builds.json").read_text())
    assert b.stdout.split() == [e["sha"] for e in manifest["builds"]] == [s5_origin.shas["old"], s5_origin.shas["slow"]]
    for e in manifest["builds"]:
        os.chmod(art / e["binary"], 0o644)  # artifacts lose the executable bit

    walls, files = [], []
    for i in (1, 2):
        out = tmp_path / f"shard{i}"
        t0 = time.monotonic()
        proc = run_bench("-s", "v1.0.0", "7", "--repo", str(s5_origin.path), "--builds-dir", str(art), *RUN,
                         "--shard", f"{i}/2", "-o", str(out / "summary.md"), "--json", str(out / "results.json"),
                         cwd=tmp_path)
        walls.append(time.monotonic() - t0)
        assert proc.returncode == 0, proc.stderr[-3000:]
        files.append(out / "results.json")
    shard_results = [json.loads(f.read_text()) for f in files]
    for r in shard_results:  # the artifact's binaries were used, not rebuilt
        assert all(bd["cached"] and bd["binary"].startswith(str(art)) for bd in r["builds"])

    merged_path = tmp_path / "merged.json"
    t0 = time.monotonic()
    m = run_bench("merge", *map(str, files), "-o", str(merged_path), "--summary", str(tmp_path / "summary.md"))
    merge_wall = time.monotonic() - t0
    assert m.returncode == 0, m.stderr
    merged = json.loads(merged_path.read_text())
    single = json.loads(s5_run["results"].read_text())

    def steps(r):
        return [(sc["name"], st["name"], sorted(st["builds"]), len(st["comparisons"]))
                for sc in r["scenarios"] for st in sc["steps"]]

    assert steps(merged) == steps(single)
    # not only the shape: each step ran in exactly one shard, and the merged file holds that shard's
    # samples and estimates unchanged; only p-values and verdicts are judged again, over the whole
    # run's family, as the unsharded run's are (the same family size: settings, below)
    ran = {}
    for r in shard_results:
        for sc in r["scenarios"]:
            for st in sc["steps"]:
                assert (sc["name"], st["name"]) not in ran, st["name"]
                ran[(sc["name"], st["name"])] = st
    assert sorted(ran) == sorted((sc["name"], st["name"]) for sc in merged["scenarios"] for st in sc["steps"])
    for sc in merged["scenarios"]:
        for st in sc["steps"]:
            own = ran[(sc["name"], st["name"])]
            assert {lab: b["times"] for lab, b in st["builds"].items()} == \
                {lab: b["times"] for lab, b in own["builds"].items()}
            assert [(c["metric"], c["contender"], c["rel"], c["ci_low"], c["ci_high"], c["p_raw"])
                    for c in st["comparisons"]] == \
                [(c["metric"], c["contender"], c["rel"], c["ci_low"], c["ci_high"], c["p_raw"])
                 for c in own["comparisons"]]
    keys = ("label", "ref", "sha", "binary_sha256", "toolchain")
    assert [{k: b[k] for k in keys} for b in merged["builds"]] == [{k: b[k] for k in keys} for b in single["builds"]]
    assert all(len(st["builds"][lab]["times"]) == SHARD_RUNS for sc in merged["scenarios"] for st in sc["steps"]
               for lab in st["builds"])
    # every setting the unsharded run records, the merged file records alike, but for the sampling
    # the shards were given
    # every run draws its rounds' orders, each shard its own (kept per shard): no one seed to compare
    assert "order_seed" not in merged["settings"] and all(isinstance(s["order_seed"], int) for s in merged["shards"])
    assert {k: v for k, v in merged["settings"].items() if k != "merged_shards"} == \
        {**{k: v for k, v in single["settings"].items() if k != "order_seed"}, "runs": SHARD_RUNS,
         "rounds": SHARD_ROUNDS}
    # the views read the merged file
    rep = run_bench("report", str(merged_path), "--html", str(tmp_path / "r.html"), "--csv", str(tmp_path / "r.csv"),
                    "--format", "github", "-o", str(tmp_path / "comment.md"))
    assert rep.returncode == 0, rep.stderr
    assert (tmp_path / "r.html").read_text().count("<svg") >= 3
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 1 + 3 * 2
    assert "<!-- refbench:pr-comment -->" in (tmp_path / "comment.md").read_text()
    cmp = run_bench("compare", str(s5_run["results"]), str(merged_path))
    assert cmp.returncode == 0, cmp.stderr
    assert "small files" in cmp.stdout

    # a tampered shard is refused
    bad = copy.deepcopy(shard_results[1])
    bad["builds"][1]["sha"] = "0" * 40
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    refused = run_bench("merge", str(files[0]), str(tmp_path / "bad.json"), "-o", str(tmp_path / "x.json"))
    assert refused.returncode == 2 and "commit 000000000000 differs" in refused.stderr

    report_line = (f"sharded: build {build_wall:.1f} s + shard 1 {walls[0]:.1f} s + shard 2 {walls[1]:.1f} s + merge "
                   f"{merge_wall:.1f} s = {build_wall + sum(walls) + merge_wall:.1f} s; in-process wall shard 1 "
                   f"{shard_results[0]['timing']['wall_seconds']:.1f} s, shard 2 "
                   f"{shard_results[1]['timing']['wall_seconds']:.1f} s; unsharded in-process wall "
                   f"{single['timing']['wall_seconds']:.1f} s")
    print(report_line)


# ---- a build shared as an artifact is verified by its hash --------------------------------------
def test_shared_binary_is_verified_by_its_hash(tmp_path):
    import hashlib

    from refbench import builds as bl, refs
    from refbench.config import TargetSpec

    target = TargetSpec(name="tool", repo=str(tmp_path / "origin"), binary="tool", build=("go", "build", "-o", "{out}"),
                    backend="s3")
    src = bl.Builder(target, tmp_path / "cache")
    r = refs.ResolvedRef("v1", "tag", "a" * 40, "v1", toolchain=src.toolchain())  # this machine's Go: no go.mod
    d = src.build_dir(r.sha)
    d.mkdir(parents=True)
    (d / "tool").write_bytes(b"#!/bin/sh\necho tool\n")
    (d / "build.json").write_text(json.dumps(src.build_record(r, hashlib.sha256(b"#!/bin/sh\necho tool\n").hexdigest())))
    build = src.build(r, "v1")
    assert not build.built_now and build.binary_sha256 == hashlib.sha256(b"#!/bin/sh\necho tool\n").hexdigest()
    copied = src.export(build, tmp_path / "artifact")
    assert copied == tmp_path / "artifact" / "tool" / ("a" * 40) / "tool"
    os.chmod(copied, 0o644)  # what an artifact download does
    other = bl.Builder(target, tmp_path / "artifact")  # --builds-dir on the shard runner
    assert other.cached(r) == copied and os.access(copied, os.X_OK)
    assert other.build(r, "v1").binary_sha256 == build.binary_sha256
    copied.write_bytes(b"#!/bin/sh\necho tampered\n")
    assert bl.Builder(target, tmp_path / "artifact").cached(r) is None  # would be rebuilt, never trusted
