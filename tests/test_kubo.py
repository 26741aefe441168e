"""The kubo target end to end: two real kubo builds (kubo v0.40.1 in two
wrappers that differ by a line, in a local origin) compared on the --quick kubo scenarios through real hyperfine, on throw-away repos run as
the bundled scenarios say (an online daemon in the run's own network namespace; GC without one).

Asserts behaviour only: root CIDs recorded and equal for equal settings, a reported difference when
a scenario varies a CID-changing flag between builds, byte-for-byte download checks, both builds'
timings and a verdict for every step, and nothing left behind (daemons, repos, scratch files).
"""
from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path

import pytest

from conftest import ROOT, run_bench

pytestmark = pytest.mark.slow

CID = re.compile(r"^(Qm[1-9A-HJ-NP-Za-km-z]{44}|b[a-z2-7]{50,})$")
COMMON = ("-t", "kubo", "-s", "v1.0.0", "v1.1.0")


def processes_under(path: Path) -> list[str]:
    """Command lines of live processes whose executable or arguments mention `path`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmd:
            found.append(f"{pid}: {cmd}")
    return found


def kubo_section() -> str:
    """The kubo target exactly as scenarios.toml declares it, for the tests' own scenario files."""
    t = tomllib.loads((ROOT / "refbench" / "scenarios.toml").read_text())["targets"]["kubo"]
    build = ", ".join(json.dumps(a) for a in t["build"])
    return (f'[targets.kubo]\nrepo = "{t["repo"]}"\nmodule = "{t["module"]}"\npackage = "{t["package"]}"\n'
            f'build = [{build}]\nbinary = "{t["binary"]}"\nbackend = "{t["backend"]}"\n')


@pytest.fixture(scope="module")
def kubo_run(tmp_path_factory, kubo_origin, builds_dir, ram_root):
    """One --quick comparison of every kubo scenario: v1.0.0 vs v1.1.0 (both kubo v0.40.1), its repos
    on a tmpfs (conftest.ram_root: 87 s on the machines' disk, 56 s there)."""
    import tempfile
    out = tmp_path_factory.mktemp("kubo-run")
    local = Path(tempfile.mkdtemp(prefix="kubo-run-", dir=ram_root))
    # --no-profile: no test here reads a profile (kubo's are test_profile's and test_daemon_online's),
    # and since the daemon's metrics count as moved, profiling took 208 s of this fixture's 249 s
    proc = run_bench(*COMMON, "--repo", str(kubo_origin.path), "--builds-dir", str(builds_dir), "--quick",
                     "-r", "2", "-w", "1", "--rounds", "2", "--no-profile", "-l", str(local),
                     "-o", str(out / "summary.md"), "--json", str(out / "results.json"), cwd=out)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {"out": out, "local": local, "proc": proc, "summary": (out / "summary.md").read_text(),
            "results": json.loads((out / "results.json").read_text())}


def steps(results: dict) -> dict[tuple[str, str], dict]:
    return {(sc["name"], st["name"]): st for sc in results["scenarios"] for st in sc["steps"]}


def test_every_kubo_scenario_and_step_ran_for_both_builds(kubo_run):
    from refbench.config import load_config

    scenarios = load_config(ROOT / "refbench" / "scenarios.toml").scenarios_for("kubo")
    declared = {(s.name, st.name) for s in scenarios if not s.opt_in for st in s.steps}
    got = steps(kubo_run["results"])
    assert set(got) == declared
    # an opt-in scenario (kubo beside Helia) runs only when asked for, never in a plain run
    assert not {s.name for s in scenarios if s.opt_in} & {name for name, _ in got}
    labels = [b["label"] for b in kubo_run["results"]["builds"]]
    assert labels == ["v1.0.0", "v1.1.0"]
    for key, st in got.items():
        for lab in labels:
            b = st["builds"][lab]
            assert len(b["times"]) == 2 and all(t > 0 for t in b["times"]), key
            assert set(b["exit_codes"]) == {0}, key
        wall = [c for c in st["comparisons"] if c["metric"] == "wall"]
        assert len(wall) == 1 and wall[0]["verdict"], key


def test_summary_shows_both_timings_a_verdict_and_the_check_for_every_step(kubo_run):
    summary = kubo_run["summary"]
    assert summary.startswith("# refbench: kubo")
    for (scenario, step), st in steps(kubo_run["results"]).items():
        # the verdict table: one row per step
        assert re.search(rf"\|\s*{re.escape(scenario)}\s*\|\s*{re.escape(step)}\s*\|", summary), (scenario, step)
        # the detailed table: a timing row per build
        for lab in ("v1.0.0", "v1.1.0"):
            assert re.search(rf"\|\s*{re.escape(step)} {re.escape(scenario)}\s*\|\s*{re.escape(lab)}\s*\|\s*\d",
                             summary), (scenario, step, lab)
        # and the result check of every step, identical for both builds
        assert f"- {scenario} / {step}: identical for every build:" in summary, (scenario, step)
    assert "produced different results" not in summary  # the warning of a CID (check) difference


def test_same_settings_give_the_same_root_cid_in_both_kubo_versions(kubo_run):
    got = steps(kubo_run["results"])
    cids = {}
    for (scenario, step), st in got.items():
        if not step.startswith("add"):
            continue
        values = {lab: b["check"] for lab, b in st["builds"].items()}
        assert all(v and CID.match(v) for v in values.values()), (scenario, step, values)
        assert len(set(values.values())) == 1 and st["check_differs"] is False, (scenario, step, values)
        cids[(scenario, step)] = values["v1.0.0"]
    # pinning does not change a CID; --raw-leaves does
    assert cids[("tree", "add")] == cids[("tree", "add --pin=false")]
    assert cids[("tree", "add --raw-leaves")] == cids[("tree", "add --raw-leaves --pin=false")]
    assert cids[("tree", "add")] != cids[("tree", "add --raw-leaves")]
    assert len({cids[("tree", "add")], cids[("large file", "add")], cids[("small files", "add")]}) == 3


def test_downloads_match_the_fixture_byte_for_byte(kubo_run):
    got = steps(kubo_run["results"])
    for key in [("tree", "get"), ("large file", "get"), ("large file", "cat"), ("small files", "get")]:
        assert {b["check"] for b in got[key]["builds"].values()} == {"identical to the fixture"}, key
    for key in [("concurrent fetch", "sequential"), ("concurrent fetch", "concurrent 8")]:
        assert {b["check"] for b in got[key]["builds"].values()} == {"64 objects identical to the fixture"}, key


def test_garbage_collection_steps_collect_what_each_state_left_unpinned(kubo_run):
    """The cached state: 4 files of 1 MiB in 1 KiB blocks (1024 leaves and their dag-pb parents
    each), two pinned (and the empty MFS root), two not; a layer per step over it."""
    got = steps(kubo_run["results"])
    counts = {}
    for step in ("repo gc", "repo gc, already collected", "repo gc, raw-leaf garbage", "repo gc, dag-pb-leaf garbage"):
        st = got[("garbage collection", step)]
        for lab, b in st["builds"].items():
            m = re.match(r"^(\d+) blocks before, (\d+) after \((\d+) recursive pins\)$", b["check"] or "")
            assert m, (step, lab, b["check"])
            counts[step] = tuple(map(int, m.groups()))
        assert st["check_differs"] is False, step
    full, half, pins = counts["repo gc"]
    assert full > 4 * 1024 and abs(half - full / 2) <= 0.01 * full and pins == 3, counts  # the unpinned half goes
    assert counts["repo gc, already collected"] == (half, half, pins)  # nothing more to collect
    # one unpinned file pinned in its layer: the other file (raw or dag-pb leaves) alone goes
    for step in ("repo gc, raw-leaf garbage", "repo gc, dag-pb-leaf garbage"):
        before, after, layer_pins = counts[step]
        assert before == full and abs((before - after) - (full - half) / 2) <= 8 and layer_pins == pins + 1, counts
    scenario = next(sc for sc in kubo_run["results"]["scenarios"] if sc["name"] == "garbage collection")
    assert scenario["daemon"] == "none"
    assert {sc["daemon"] for sc in kubo_run["results"]["scenarios"] if sc["name"] != "garbage collection"} == {"online"}


def test_nothing_is_left_behind(kubo_run, builds_dir):
    assert list(kubo_run["local"].iterdir()) == []  # repos, daemon logs, downloads: gone
    assert processes_under(Path(builds_dir) / "kubo") == []  # no daemon (or anything) still running


def test_a_cid_changing_flag_is_reported(tmp_path, kubo_origin, builds_dir, kubo_run, ram_local):
    """One scenario varies --raw-leaves between the builds: the CIDs differ and the summary warns;
    one varies only --pin=false: the CIDs agree."""
    scen = tmp_path / "scenarios.toml"
    scen.write_text(kubo_section() + '''
[[scenarios]]
name = "leaves"
target = "kubo"
fixture = { kind = "tree", dirs = 2, count = 4, depth = 2, size = "64K", random_fanout = true, random_size = true, seed = 3 }
vary = { leaves = [[], ["--raw-leaves"]] }
  [[scenarios.steps]]
  name = "add"
  command = "{{ bin }} add -r -Q {{ leaves }} {{ fixture }} > {{ work ~ '/cid' }}"
  check = "cat {{ work ~ '/cid' }}"

[[scenarios]]
name = "pinning"
target = "kubo"
fixture = { kind = "tree", dirs = 2, count = 4, depth = 2, size = "64K", random_fanout = true, random_size = true, seed = 3 }
vary = { pin = [[], ["--pin=false"]] }
  [[scenarios.steps]]
  name = "add"
  command = "{{ bin }} add -r -Q {{ pin }} {{ fixture }} > {{ work ~ '/cid' }}"
  check = "cat {{ work ~ '/cid' }}"
''')
    local = ram_local
    # --no-profile: what is read is the CIDs and the summary's warning, never a profile
    proc = run_bench(*COMMON, "--repo", str(kubo_origin.path), "--builds-dir", str(builds_dir), "--scenarios",
                     str(scen), "-r", "2", "-w", "0", "--rounds", "1", "--no-profile", "-l", str(local),
                     "-o", str(tmp_path / "summary.md"), "--json", str(tmp_path / "results.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = steps(json.loads((tmp_path / "results.json").read_text()))
    leaves, pinning = got[("leaves", "add")], got[("pinning", "add")]
    old, new = leaves["builds"]["v1.0.0"]["check"], leaves["builds"]["v1.1.0"]["check"]
    assert CID.match(old) and CID.match(new) and old != new
    assert leaves["check_differs"] is True
    assert pinning["check_differs"] is False
    assert pinning["builds"]["v1.0.0"]["check"] == pinning["builds"]["v1.1.0"]["check"] == old
    summary = (tmp_path / "summary.md").read_text()
    warnings = [ln for ln in summary.splitlines() if "produced different results" in ln]
    assert len(warnings) == 1 and "leaves / add" in warnings[0] and old in warnings[0] and new in warnings[0]
    assert f"- pinning / add: identical for every build: `{old}`" in summary
    assert list(local.iterdir()) == []


def test_a_failing_daemon_step_still_stops_the_daemon_and_removes_the_repos(tmp_path, kubo_origin, builds_dir,
                                                                          kubo_run):
    scen = tmp_path / "scenarios.toml"
    scen.write_text(kubo_section() + '''
[[scenarios]]
name = "broken"
target = "kubo"
fixture = { kind = "random", size = "4K", count = 2 }
daemon = true
setup = "test -n {{ api }} && {{ bin }} id >/dev/null"
  [[scenarios.steps]]
  name = "fails"
  command = "{{ bin }} cat bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy"
''')
    local = tmp_path / "local"
    local.mkdir()
    proc = run_bench(*COMMON, "--repo", str(kubo_origin.path), "--builds-dir", str(builds_dir), "--scenarios",
                     str(scen), "-r", "1", "-w", "0", "--rounds", "1", "-l", str(local),
                     "-o", str(tmp_path / "summary.md"), cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "broken" in proc.stderr
    assert list(local.iterdir()) == []
    assert processes_under(Path(builds_dir) / "kubo") == []


def test_a_third_go_target_needs_only_a_scenarios_entry(tmp_path, kubo_origin, builds_dir, kubo_run, ram_local):
    """A target refbench has never heard of, declared in a scenarios file and nowhere else: it is
    cloned, built, given its backend and run like s5cmd and kubo."""
    scen = tmp_path / "scenarios.toml"
    scen.write_text('''
[targets.mytool]
description = "any Go CLI: here the kubo wrapper origin under another name"
repo = "https://example.invalid/never-fetched"
build = ["go", "build", "-o", "{out}", "./cmd/ipfs"]
binary = "mytool"
backend = "ipfs"

[[scenarios]]
name = "hash"
target = "mytool"
fixture = { kind = "random", size = "300K", count = 3, seed = 9 }
  [[scenarios.steps]]
  name = "add -n"
  command = "{{ bin }} add -Q -n {{ fixture ~ '/tmp1' }}"
  check = "test {{ ipfs_path }} = \\"$IPFS_PATH\\" && {{ bin }} add -Q -n {{ fixture ~ '/tmp1' }}"
''')
    local = ram_local
    proc = run_bench("-t", "mytool", "-s", "v1.0.0", "v1.0.0", "--measure-identical", "--repo", str(kubo_origin.path),
                     "--builds-dir", str(builds_dir), "--scenarios", str(scen), "-r", "2", "-w", "0",
                     "--rounds", "1", "--no-profile", "-l", str(local), "-o", str(tmp_path / "summary.md"),
                     "--json", str(tmp_path / "results.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["target"]["name"] == "mytool"
    assert Path(results["builds"][0]["binary"]).name == "mytool"
    st = steps(results)[("hash", "add -n")]
    assert [len(b["times"]) for b in st["builds"].values()] == [2, 2]
    assert {CID.match(b["check"] or "") is not None for b in st["builds"].values()} == {True}
    assert list(local.iterdir()) == []


def test_ipfs_backend_repos_are_offline_loopback_only_and_removed(tmp_path, kubo_run):
    """The backend on its own, `daemon = "offline"`: a fresh repo per build (test profile: no
    bootstrap peers, loopback addresses only), a daemon whose API answers on 127.0.0.1 from this
    network namespace, and nothing left after close."""
    import subprocess
    import urllib.request
    from types import SimpleNamespace

    from refbench.backends import IpfsBackend

    binaries = [b["binary"] for b in kubo_run["results"]["builds"]]
    backend = IpfsBackend.open(tmp_path / "work")
    scenario = SimpleNamespace(name="probe", slug="probe", daemon_mode="offline", state=None)
    try:
        backend.open_scenario(scenario, ["old", "new"], binaries, tmp_path / "work")
        paths = [backend.repos[lab].path for lab in ("old", "new")]
        assert len(set(paths)) == 2 and all((p / "config").exists() for p in paths)
        for lab, binary in zip(("old", "new"), binaries):
            repo = backend.repos[lab]
            assert repo.api.startswith("http://127.0.0.1:")
            with urllib.request.urlopen(urllib.request.Request(f"{repo.api}/api/v0/version", method="POST"),
                                        timeout=10) as r:
                assert r.status == 200 and b"Version" in r.read()
            cfg = json.loads((repo.path / "config").read_text())
            assert cfg["Bootstrap"] in (None, [])
            listen = cfg["Addresses"]["Swarm"] + [cfg["Addresses"]["API"], cfg["Addresses"]["Gateway"]]
            assert all(a.startswith("/ip4/127.0.0.1/") for a in listen), listen
            env = {**os.environ, **backend.context_env("probe", lab)}
            assert env["IPFS_PATH"] == str(repo.path) and env["IPFS_TELEMETRY"] == "off"
            # with the exported environment, the CLI works on this build's own repo
            out = subprocess.run([binary, "config", "Addresses.API"], env=env, capture_output=True, text=True)
            assert out.returncode == 0 and out.stdout.strip() == cfg["Addresses"]["API"]
        daemons = [backend.repos[lab].daemon.pid for lab in ("old", "new")]
    finally:
        backend.close()
    assert not (tmp_path / "work" / "ipfs").exists()
    for pid in daemons:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
