"""bisect on a line of 8 commits with a known slow commit (c5) and one that does not build (c6).

The injected slow-down is 2x (slow=100): on a shared 2-core machine under load, +50% was at times
measured as inconclusive even after 24 runs, which tests statistical power, not the search."""
from __future__ import annotations

import json
import math

import pytest

from conftest import run_bench
from origins import make_bisect_origin, new_origin


@pytest.mark.slow
@pytest.mark.alone  # each probe's verdict is read off real timings
def test_bisect_finds_the_slow_commit_in_about_log2_builds(tmp_path_factory, builds_dir):
    root = tmp_path_factory.mktemp("bisect-origin")
    o = make_bisect_origin(root, n=8, slow_from=5, broken=(6,), slow=100)
    log = root / "bisect.json"
    proc = run_bench("bisect", "v1.0.0", "master", "--only", "small files/remove", "--repo", str(o.path),
                     "--builds-dir", str(builds_dir), "--quick", "-r", "6", "-w", "1", "--rounds", "3", "--max-runs", "24",
                     "--log", str(log), cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(log.read_text())
    assert out["first_slower"] == o.shas["c5"], proc.stdout
    assert out["candidates"] == [o.shas["c5"]]
    assert f"first slower commit for 'small files/remove': {o.shas['c5']}" in proc.stdout
    assert out["commits"] == 7  # c2 .. c8 after GOOD
    by_sha = {p["sha"]: p for p in out["probes"]}
    # the commit that does not build was skipped, as git bisect skip does, and not blamed
    assert by_sha[o.shas["c6"]]["verdict"] == "skip"
    assert out["failed_builds"] == 1
    for name in ("c2", "c3", "c4"):
        if o.shas[name] in by_sha:
            assert by_sha[o.shas[name]]["verdict"] != "slower"
    assert by_sha[o.shas["c5"]]["verdict"] == "slower"
    # GOOD + BAD (verified first) + about log2(7) midpoints (+1 for the skipped one)
    midpoints = [p for p in out["probes"] if p["sha"] != o.shas["c8"]]
    assert len(midpoints) <= math.ceil(math.log2(7)) + 1
    # every probed commit counted once, GOOD once: built, or from the cache. The line holds two trees
    # that build (c1's, c5's): only their first commits are built, if the session's cache holds
    # neither yet; every other commit of theirs gets that binary (and c6 fails to build)
    assert out["builds"] + out["cached"] == 2 + len(midpoints)
    assert out["builds"] - out["failed_builds"] <= 2
    cached = f"{out['cached']} {'binary' if out['cached'] == 1 else 'binaries'} from the cache"
    assert f"{out['builds']} build{'' if out['builds'] == 1 else 's'} (1 failed), {cached}" in proc.stdout



@pytest.mark.slow
@pytest.mark.alone
def test_bisect_under_a_variant_finds_the_slow_commit(tmp_path_factory, builds_dir):
    """A real bisect whose every build runs s5cmd with --numworkers 2: c3 sleeps as long again."""
    root = tmp_path_factory.mktemp("bisect-variant")
    o = make_bisect_origin(root, n=4, slow_from=3, broken=(), slow=100)
    log = root / "bisect.json"
    proc = run_bench("bisect", "v1.0.0", "master", "--only", "small files/remove", "--repo", str(o.path),
                     "--variant", "flags=--numworkers 2", "--builds-dir", str(builds_dir), "--quick", "-r", "6",
                     "-w", "1", "--rounds", "3", "--max-runs", "24", "--log", str(log), cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(log.read_text())
    assert out["first_slower"] == o.shas["c3"] and out["variant"] == {"name": None, "flags": ["--numworkers", "2"]}
    assert f"under variant flags --numworkers 2: {o.shas['c3']}" in proc.stdout
    assert "under variant flags --numworkers 2; at most" in proc.stderr

# ---- the search itself, with the comparisons faked (no Go, no hyperfine) ---------------------
def probe_results(good, mid, verdict, rel, good_cached=False, mid_cached=False):
    """What a probe's run returns: GOOD and MID built (or from the cache), one comparison."""
    from factories import document
    from refbench import results as rs
    comp = {"baseline": "good", "contender": "mid", "verdict": verdict, "rel": rel}
    step = {"name": "remove", "builds": {}, "comparisons": [comp]}
    doc = document(target={"name": "s5cmd"}, builds=[{"label": "good", "sha": good, "cached": good_cached},
                                                     {"label": "mid", "sha": mid, "cached": mid_cached}],
                   backend={}, settings={}, scenarios=[{"name": "small files", "fixture": {}, "steps": [step]}],
                   timing=None, env={})
    return rs.Results.from_json(doc, "probe")


def _fake_line(tmp_path, n):
    o = new_origin(tmp_path)
    for i in range(1, n + 1):
        o.commit(f"c{i}", {"NOTE": f"{i}\n"}, f"c{i}", tags=["good"] if i == 1 else ())
    return o


def test_probes_take_no_profile_unless_asked():
    """A probe is kept as its verdict: perf's runs of a probe that moved would be read by no one."""
    argv = ["good", "master", "--only", "small files/remove"]
    assert _search(argv)[1].profile == "off"
    assert _search([*argv, "--profile"])[1].profile == "on"
    assert _search([*argv, "--no-profile"])[1].profile == "off"


def _search(argv):
    """bisect's command line -> (search, the probes' run request), as `bench.py bisect` parses it."""
    from refbench.commands import bisect as bisect_cmd
    _, search, base = bisect_cmd.parse(argv)
    return search, base


def _bisect(tmp_path, monkeypatch, o, slow_from, broken=(), cached=(), extra=(), requests=None):
    from refbench import bisect as bs
    from refbench.errors import BuildError
    index = {sha: int(name[1:]) for name, sha in o.shas.items()}
    calls = []

    def fake_run(request, reporter):
        good, mid = request.refs or [v.ref for v in request.variants]  # under a variant: its builds
        calls.append(index[mid])
        if requests is not None:
            requests.append(request)
        if index[mid] in broken:
            raise BuildError(f"build of {mid[:10]} ({mid[:10]}) failed (exit 1)", sha=mid)
        verdict = "slower" if index[mid] >= slow_from else "no significant change"
        return probe_results(good, mid, verdict, 0.5 if verdict == "slower" else 0.0, index[good] in cached,
                             index[mid] in cached)

    search, base = _search(["good", "master", "--only", "small files/remove", "--repo", str(o.path),
                            "--builds-dir", str(tmp_path / "builds"), *extra])
    return bs.bisect(search, base, run=fake_run, say=lambda m: None), calls


@pytest.mark.parametrize("n,slow_from", [(8, 5), (8, 2), (8, 8), (17, 9), (33, 30)])
def test_search_takes_about_log2_probes(tmp_path, monkeypatch, n, slow_from):
    o = _fake_line(tmp_path, n)
    out, calls = _bisect(tmp_path, monkeypatch, o, slow_from)
    assert out.first_slower == o.shas[f"c{slow_from}"]
    assert calls[0] == n  # BAD verified first
    assert len(calls) - 1 <= math.ceil(math.log2(n - 1))
    assert out.builds == len(set(calls)) + 1  # + GOOD


def test_skipped_commits_and_ambiguity(tmp_path, monkeypatch):
    o = _fake_line(tmp_path, 8)
    out, calls = _bisect(tmp_path, monkeypatch, o, slow_from=5, broken=(6,))
    assert out.first_slower == o.shas["c5"] and 6 in calls and out.failed_builds == 1
    # when the only commits left are ones that do not build, say which ones it could be (git bisect does too)
    out, calls = _bisect(tmp_path, monkeypatch, o, slow_from=5, broken=(4, 5))
    assert out.first_slower is None and out.candidates == [o.shas["c4"], o.shas["c5"], o.shas["c6"]]
    assert out.failed_builds == 2


def test_cached_builds_are_counted_apart(tmp_path, monkeypatch):
    o = _fake_line(tmp_path, 8)
    out, _ = _bisect(tmp_path, monkeypatch, o, slow_from=5, cached=tuple(range(1, 9)))
    assert out.builds == 0 and out.cached >= 4


def test_bad_must_be_slower(tmp_path, monkeypatch):
    from refbench.errors import RefbenchError
    o = _fake_line(tmp_path, 4)
    with pytest.raises(RefbenchError, match="not slower than GOOD"):
        _bisect(tmp_path, monkeypatch, o, slow_from=99)
    from refbench import bisect as bs
    with pytest.raises(RefbenchError, match="not an ancestor"):
        search, base = _search(["master", "good", "--only", "x", "--repo", str(o.path),
                                "--builds-dir", str(tmp_path / "b")])
        bs.bisect(search, base, say=lambda m: None)


def test_a_small_false_slower_on_an_innocent_commit_does_not_mislead(tmp_path, monkeypatch):
    """Each probe is one test at alpha, so an innocent commit can come out "slower" by a few
    percent by chance. Midpoints are judged against half of the regression BAD showed."""
    from refbench import bisect as bs
    o = _fake_line(tmp_path, 8)
    index = {sha: int(name[1:]) for name, sha in o.shas.items()}
    thresholds = []

    def fake_run(request, reporter):
        good, mid = request.refs
        t = request.threshold
        thresholds.append(t)
        rel = 1.0 if index[mid] >= 5 else (0.08 if index[mid] == 4 else 0.0)  # c4: a +8% fluke
        verdict = "slower" if rel > t else "no significant change"
        return probe_results(good, mid, verdict, rel)

    search, base = _search(["good", "master", "--only", "small files/remove", "--repo", str(o.path),
                            "--builds-dir", str(tmp_path / "builds"), "--threshold", "0.05"])
    out = bs.bisect(search, base, run=fake_run, say=lambda m: None)
    assert out.first_slower == o.shas["c5"]
    assert thresholds[0] == 0.05 and all(t == 0.5 for t in thresholds[1:])  # half of BAD's +100%


# ---- under a variant: every build bisect makes gets its settings ---------------------------------
def test_a_variant_puts_its_settings_on_good_bad_and_every_probe(tmp_path, monkeypatch, capsys):
    """A regression that shows only with --numworkers 4 (or under another Go, or another GOGC) is
    bisected under those settings: GOOD, BAD and each midpoint are built and run with them, and
    the answer and the log say so."""
    from refbench import bisect as bs, variants as vr
    o = _fake_line(tmp_path, 8)
    requests = []
    out, calls = _bisect(tmp_path, monkeypatch, o, slow_from=5, requests=requests,
                         extra=("--variant", "go=1.26,flags=--numworkers 4,env=GOGC=200"))
    assert out.first_slower == o.shas["c5"]
    settings = vr.Variant("", None, "1.26", ("--numworkers", "4"), (("GOGC", "200"),))
    for request, probed in zip(requests, calls):
        assert request.refs == ()  # no plain build: both sides are the variant's
        good, mid = request.variants
        assert (good.ref, mid.ref) == (o.shas["c1"], o.shas[f"c{probed}"])
        assert all((v.go, v.flags, v.env) == (settings.go, settings.flags, settings.env) for v in (good, mid))
        assert good.name != mid.name  # two builds, two labels
    assert out.to_json()["variant"] == {"name": None, "go": "1.26", "flags": ["--numworkers", "4"],
                                        "env": {"GOGC": "200"}}
    bs.print_outcome(out)
    assert ("first slower commit for 'small files/remove' under variant flags --numworkers 4; env GOGC=200; "
            f"go 1.26: {o.shas['c5']}") in capsys.readouterr().out
    plain, _ = _bisect(tmp_path, monkeypatch, o, slow_from=5)
    assert plain.to_json()["variant"] is None


def test_a_variants_table_is_bisected_under_its_settings_not_its_ref(tmp_path, monkeypatch):
    from refbench import paths
    o = _fake_line(tmp_path, 4)
    scenarios = tmp_path / "s.toml"
    scenarios.write_text(paths.default_scenarios().read_text() + '''
[[variants]]
name = "w2"
ref = "v2.2.2"
flags = "--numworkers 2"
''')
    requests = []
    out, _ = _bisect(tmp_path, monkeypatch, o, slow_from=3, requests=requests,
                     extra=("--variant", "w2", "--scenarios", str(scenarios)))
    assert out.first_slower == o.shas["c3"] and out.variant.name == "w2"
    assert {v.ref for r in requests for v in r.variants} <= set(o.shas.values())  # never v2.2.2
    assert all(v.flags == ("--numworkers", "2") for r in requests for v in r.variants)
    assert requests[0].variants[1].name == "w2"  # the probed build is labelled by the variant's name


@pytest.mark.parametrize("argv,says", [
    (("--variant", "w4=v1.0.0,flags=--numworkers 4"), "bisect --variant 'w4=v1.0.0,flags=--numworkers 4': "
     "expected settings without a ref ([go=GO][,flags=FLAGS][,env=K=V ...]; bisect chooses the refs)"),
    (("--variant", "nosuch"), "or the name of a [[variants]] table"),
    (("--variant", "env=AWS_REGION=x"), "env 'AWS_REGION' is not a variable a variant may set"),
    (("--variant", "flags=-a", "--variant", "flags=-b"), "bisect takes one --variant"),
])
def test_a_bad_bisect_variant_is_one_line(tmp_path, argv, says):
    from conftest import run_cli
    o = _fake_line(tmp_path, 3)
    proc = run_cli("bisect", "good", "master", "--only", "small files/remove", "--repo", str(o.path),
                   "--builds-dir", str(tmp_path / "b"), *argv)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("slow_from", ["v1.1.0~3", "v1.1.0"])
def test_bisect_runs_on_the_mock_executor(tmp_path, slow_from):
    """`bench.py bisect --executor mock` stopped at its first step: the MockBuilder had no history to
    list. It now makes a line BAD~7 ... BAD, and a commit mapped to a slower binary slows every later one."""
    from conftest import run_cli
    log = tmp_path / "bisect.json"
    proc = run_cli("bisect", "v1.0.0", "v1.1.0", "--only", "small files/upload", "--executor", "mock",
                   "--mock", f"build={slow_from}:fake-1.20", "--builds-dir", tmp_path / "builds", "--log", log)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "first slower commit for 'small files/upload': " in proc.stdout
    assert proc.stdout.split("\n")[0].endswith(f"mock commit {slow_from}")
    outcome = json.loads(log.read_text())
    assert outcome["commits"] == 8 and len(outcome["probes"]) <= 4
