"""kubo's daemons restarted every K rounds (issue 36): one daemon's runs are correlated (it drifts
into a state of its own), so a daemon serves at most K rounds of a step, then every build's is
restarted on its own repo, untimed, at the same API address. Through the runner on the
MockExecutor with a stand-in `ipfs` that records each daemon it starts."""
from __future__ import annotations

import collections
import json
import os
import sys
from pathlib import Path

import pytest

from fakes.executor import MockExecutor
from refbench import results as rs, runner as rn, stats
from refbench.backends import IpfsBackend
from refbench.backends.ipfs import restarts_fact
from refbench.builds import BuiltRef
from refbench.config import FixtureSpec, ScenarioSpec, StepSpec
from refbench.fixtures import FixtureFiles
from refbench.refs import ResolvedRef
from refbench.sampling import Sampling
from test_kubo_online import namespaces  # noqa: F401 (a fixture of the slow test; kubo_binaries is conftest's)

# an `ipfs` with just what IpfsBackend asks of it offline: init writes a config, config succeeds,
# daemon listens on the config's API address (a free port for tcp/0), writes the api file, says it
# is ready, notes "IPFS_PATH pid port fresh|old" in starts.log beside itself (old: a daemon ran on
# this repo before) and waits for SIGTERM; init notes IPFS_PATH in inits.log, in the order repos are made
FAKE_IPFS = r'''#!PYTHON
import json, os, signal, socket, sys, time
from pathlib import Path
repo = Path(os.environ["IPFS_PATH"])
cmd = sys.argv[1]
if cmd == "init":
    repo.mkdir(parents=True, exist_ok=True)
    with open(Path(__file__).with_name("inits.log"), "a") as fh:
        fh.write(f"{repo}\n")
    (repo / "config").write_text(json.dumps({"Addresses": {"API": "/ip4/127.0.0.1/tcp/0"}}))
elif cmd == "daemon":
    port = int(json.loads((repo / "config").read_text())["Addresses"]["API"].rsplit("/", 1)[1])
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    port = s.getsockname()[1]
    def bye(*a):
        (repo / "api").unlink(missing_ok=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, bye)
    history = "old" if (repo / "history").exists() else "fresh"  # what an earlier daemon left in the repo
    (repo / "history").write_text("a daemon ran here")
    with open(Path(__file__).with_name("starts.log"), "a") as fh:
        fh.write(f"{repo} {os.getpid()} {port} {history}\n")
    (repo / "api").write_text(f"/ip4/127.0.0.1/tcp/{port}")
    print("Daemon is ready", flush=True)
    while True:
        time.sleep(1)
'''


@pytest.fixture
def fake_ipfs(tmp_path) -> Path:
    path = tmp_path / "bin" / "ipfs"
    path.parent.mkdir()
    path.write_text(FAKE_IPFS.replace("PYTHON", sys.executable, 1))
    path.chmod(0o755)
    return path


def starts(fake_ipfs: Path) -> list[tuple[str, int, int, str]]:
    """Every daemon the stand-in started: (its repo's name, pid, API port, fresh or old), in order."""
    log = fake_ipfs.with_name("starts.log")
    rows = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return [(Path(r[0]).name, int(r[1]), int(r[2]), r[3]) for r in rows]


executor_shells: list = []  # the last run's MockExecutor.shells (the untimed commands it was given)
warmup_calls: list = []  # [the builds of each warm-up call of the last run, in the order they ran]
round_calls: list = []  # (where, Call) of each round's hyperfine call in the last run


def run_offline(tmp_path, fake_ipfs, every: int | None, rounds: int = 5, steps: int = 1, setup: bool = True,
                seed: int | None = None, pair_runs: int | None = None):
    """One offline kubo scenario of `steps` steps (each with a setup, unless not `setup`), two
    builds, through the runner: the backend's facts, the daemon pid each build's rounds met (and
    "warm-up" for a warm-up call), the runner's progress."""
    backend = IpfsBackend.open(tmp_path / "work", restart_every=every)
    backend.daemon_probes = lambda label: None  # the MockExecutor runs no hook: no probe to read
    seen = collections.defaultdict(list)  # label -> the daemon pid at each round, "warm-up" at a warm-up call

    class Watch(MockExecutor):
        def measure(self, where, call, env):
            for label, repo in backend.repos.items():
                seen[label].append(repo.daemon.pid if " round " in where else "warm-up")
            if " round " not in where:
                warmup_calls[0].append(list(call.names))
            else:
                round_calls.append((where, call))
            return super().measure(where, call, env)

    executor = Watch()
    round_calls.clear()
    executor_shells.clear()
    executor_shells.append(executor.shells)
    warmup_calls.clear()
    warmup_calls.append([])
    built = [BuiltRef("kubo", ResolvedRef(f"r{i}", "tag", f"{i:040d}", f"r{i}"), f"b{i}", fake_ipfs, "git", "go",
                      False, 0.0) for i in range(2)]
    bench = rn.Bench(builds=tuple(built), backend=backend, executor=executor, workdir=tmp_path / "run",
                     cache_dir=tmp_path, sampling=Sampling(runs=2 * rounds, warmup=1, rounds=rounds, order_seed=seed,
                                                       pair_runs=pair_runs),
                     criteria=stats.Criteria(), measure_rss=False, clock=executor.clock, steps=steps)
    (tmp_path / "run").mkdir()
    spec = FixtureSpec(kind="sparse", size=1, count=1)
    step_specs = tuple(StepSpec(f"step{j}", "{{ bin }} add x", setup="{{ bin }} add setup-marker" if setup else None)
                       for j in range(steps))
    sc = ScenarioSpec("s", "t", spec, spec, step_specs, daemon="offline")
    with backend:
        runner = rn.Runner(bench)
        runner.run_scenario(sc, FixtureFiles(spec, tmp_path, 1, 1, 0))
        facts = backend.describe()
    return facts, dict(seen), runner.progress


def per_build(fake_ipfs) -> collections.Counter:
    return collections.Counter(name for name, *_ in starts(fake_ipfs))


@pytest.mark.parametrize("every, rounds, steps, refreshes, warmups", [
    (1, 5, 1, 4, 5),   # fresh repos and daemons for every round, warmed up before it
    (2, 5, 1, 2, 3),   # rounds 0-1, 2-3, 4
    (0, 5, 1, 0, 1),   # never: the scenario's one repo and daemon
    (1, 3, 2, 5, 6),   # the second step's own warm-ups already meet fresh ones
])
def test_the_runner_restarts_every_builds_daemon_every_k_rounds(tmp_path, fake_ipfs, every, rounds, steps, refreshes,
                                                                warmups):
    facts, seen, progress = run_offline(tmp_path, fake_ipfs, every, rounds, steps)
    # each refresh: a daemon on a fresh repo for the setup's add, then one on that repo for the runs
    # (the setup's work left the first one's heap grown)
    assert per_build(fake_ipfs) == {"s-b0": 1 + 2 * refreshes, "s-b1": 1 + 2 * refreshes}
    for label, calls in seen.items():
        # the step's warm-ups, then one warm-up call before each round that meets fresh daemons
        assert calls.count("warm-up") == warmups, calls
        assert all(a != "warm-up" or b != "warm-up" for a, b in zip(calls, calls[1:]))
        pids = [c for c in calls if c != "warm-up"]
        assert len(pids) == rounds * steps
        if every == 1:  # no two rounds met the same daemon
            assert len(set(pids)) == len(pids), (label, pids)
        if every == 0:
            assert len(set(pids)) == 1
    ports = collections.defaultdict(set)
    histories = collections.defaultdict(list)
    for name, _, port, history in starts(fake_ipfs):
        ports[name].add(port)
        histories[name].append(history)
    # each build's daemon kept its API address (the step's files name it)
    assert all(len(p) == 1 for p in ports.values()), ports
    # every refresh starts from a repo no daemon ran on: a repo's history is not kept
    assert all(h == ["fresh"] + ["fresh", "old"] * refreshes for h in histories.values()), histories
    # a fresh repo gets back what the step's setup put in the old one: once per repo and build
    assert sum("setup-marker" in cmd for cmd in executor_shells[0]) == 2 * (steps + refreshes)
    # the restarts' cost is untimed and accounted for; results.json's backend facts say K
    assert (progress.untimed.get("daemon_restart", 0.0) > 0) == (refreshes > 0)
    restarts = 2 * refreshes
    words = {1: f"on fresh repos every round; {restarts} restarts, ",
             2: f"on fresh repos every 2 rounds; {restarts} restarts, ", 0: "never: one repo and daemon per build"}[every]
    assert facts["daemon restarts"].startswith(words), facts


@pytest.mark.parametrize("seed, setup", [(None, False), (7, True), (1357245469, False)])
def test_each_refresh_makes_the_builds_repos_in_the_coming_rounds_order(tmp_path, fake_ipfs, seed, setup):
    """A restart makes the repos and starts the daemons build by build in the order the round it
    serves runs them (drawn per pair of rounds from the run's seed), not always the first build
    first: a build made first every time carries whatever that position costs into every round
    (issue 36: the first build's daemons cost 20-30% more CPU in every refreshed round of a full
    A/A's tree adds)."""
    rounds = 8
    run_offline(tmp_path, fake_ipfs, 1, rounds=rounds, setup=setup, seed=seed)
    made = [Path(line).name for line in fake_ipfs.with_name("inits.log").read_text().splitlines()]
    assert made[:2] == ["s-b0", "s-b1"]  # the scenario's own repos, at its start
    refreshes = [made[i:i + 2] for i in range(2, len(made), 2)]  # a setup's restart keeps the repos
    assert len(refreshes) == rounds - 1
    leads = [f"s-b{rn.round_orders(2, rounds, seed)[r][0]}" for r in range(1, rounds)]
    assert [first for first, _ in refreshes] == leads, (refreshes, leads)
    assert {first for first, _ in refreshes} == {"s-b0", "s-b1"}  # each build is made first in some rounds
    # and the warm-up call on the fresh daemons runs in the round's order reversed: the round's
    # lead warms up last (as before the first round), not the same build last in every round
    orders = rn.round_orders(2, rounds, seed)
    assert warmup_calls[0][0] == [f"b{i}" for i in orders[1]]  # the step's own warm-ups: as before
    assert warmup_calls[0][1:] == [[f"b{i}" for i in orders[r][::-1]] for r in range(1, rounds)]


def test_a_replaced_repo_gives_its_bytes_back_at_once_and_its_inodes_when_the_run_ends(tmp_path, fake_ipfs):
    """A restart's old repo is not deleted while the run measures: deleted inodes make the next
    repo's file creations slower on ext4 without a journal, by how many and how near (dirs.Retired).
    It keeps its inodes (the same file, now empty: no bytes held) until the backend closes."""
    from types import SimpleNamespace
    backend = IpfsBackend.open(tmp_path / "work", restart_every=1)
    with backend:
        backend.open_scenario(SimpleNamespace(name="s", slug="s", daemon_mode="offline", state=None),
                              ["a", "b"], [str(fake_ipfs)] * 2, tmp_path / "work")
        blob = backend.repos["a"].path / "blocks" / "X" / "blob.data"
        blob.parent.mkdir(parents=True)
        blob.write_bytes(os.urandom(1 << 20))
        ino = blob.stat().st_ino
        backend.before_round(timed=True)
        assert backend.before_round(timed=True) > 0  # restarted on fresh repos
        assert not blob.exists()
        kept = list((tmp_path / "work" / "ipfs" / "retired").rglob("blob.data"))
        assert len(kept) == 1 and kept[0].stat().st_ino == ino
        assert kept[0].stat().st_size == 0 and kept[0].stat().st_blocks == 0
        backend.close_scenario()  # the scenario's last repos wait there too
        assert len(list((tmp_path / "work" / "ipfs" / "retired").glob("s-b*.*"))) == 4
    assert not (tmp_path / "work" / "ipfs").exists()


def test_retiring_a_tree_never_touches_what_its_links_point_to(tmp_path):
    """Only a file of the tree's own is emptied: a symbolic link's target and a file a hard link
    shares with the outside keep their bytes; a FIFO does not block it."""
    from refbench.backends.dirs import Retired
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "sym").write_bytes(b"s" * 100)
    (outside / "hard").write_bytes(b"h" * 100)
    tree = tmp_path / "repo"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "own").write_bytes(b"o" * 100)
    (tree / "d" / "sym").symlink_to(outside / "sym")
    (tree / "dirlink").symlink_to(outside, target_is_directory=True)
    os.link(outside / "hard", tree / "d" / "hard")
    os.mkfifo(tree / "d" / "fifo")
    retired = Retired(tmp_path / "retired")
    retired.retire(tree)
    assert not tree.exists()
    (kept,) = list((tmp_path / "retired").rglob("own"))
    assert kept.stat().st_size == 0
    assert (outside / "sym").read_bytes() == b"s" * 100 and (outside / "hard").read_bytes() == b"h" * 100
    retired.clear()
    assert not (tmp_path / "retired").exists()
    assert sorted(p.name for p in outside.iterdir()) == ["hard", "sym"]
    assert (outside / "hard").read_bytes() == b"h" * 100


def test_past_its_cap_of_inodes_the_oldest_retired_tree_goes_at_once(tmp_path):
    """A run large enough to hold a quarter of the file system's free inodes in retired repos
    removes the oldest instead of running the disk out of inodes."""
    from refbench.backends.dirs import Retired
    retired = Retired(tmp_path / "retired", cap=25)
    for i in range(3):
        tree = tmp_path / f"repo{i}"
        tree.mkdir()
        for j in range(10):
            (tree / f"f{j}").write_bytes(b"x")
        retired.retire(tree)
    names = sorted(p.name for p in (tmp_path / "retired").glob("*/*"))
    assert names == ["repo1", "repo2"]  # 11 inodes each: the first went when the third came


def test_a_retired_tree_counts_each_of_its_inodes_once(tmp_path):
    """The cap counts inodes: a nested tree's directories are counted once each, not once as a
    parent's entry and again as themselves."""
    from refbench.backends.dirs import empty_files
    tree = tmp_path / "repo"
    (tree / "a" / "b").mkdir(parents=True)
    for d in (tree, tree / "a", tree / "a" / "b"):
        (d / "f").write_bytes(b"x")
    (tree / "link").symlink_to(tree / "a", target_is_directory=True)
    assert empty_files(tree) == 7  # repo, a, b, three files, the link


def test_a_round_longer_than_a_pair_may_serve_is_run_by_fresh_pairs_in_turn(tmp_path, fake_ipfs):
    """Each daemon has a level of its own that all of its runs share (issue 36: 20-40% apart at
    times, with the same allocations); a budget's later rounds grew to 16 runs a build on one pair,
    whose split then outweighed every other round (a false `faster` in a full A/A). A round of more
    runs than a pair may serve (the planned round size; here pair_runs=1 against 2 runs a round)
    is served in parts, each by a fresh pair warmed up first, the parts' lead alternating; the
    runs stay in their round (the statistics' block) and the step keeps its rounds."""
    rounds = 3
    facts, seen, _ = run_offline(tmp_path, fake_ipfs, 1, rounds=rounds, setup=False, seed=5, pair_runs=1)
    for label, calls in seen.items():
        pids = [c for c in calls if c != "warm-up"]
        assert len(pids) == 2 * rounds and len(set(pids)) == len(pids), (label, calls)  # a pair per part
        # the step's warm-ups, then one before every part but the first (it meets the warmed-up pair)
        assert calls.count("warm-up") == 2 * rounds, calls
    parts = list(round_calls)
    assert len(parts) == 2 * rounds
    assert all(call.runs == 1 for _, call in parts), parts  # one run a build each
    orders = rn.round_orders(2, rounds, 5)
    for r in range(rounds):
        (w1, c1), (w2, c2) = parts[2 * r], parts[2 * r + 1]
        assert w1.endswith(f" round {r + 1}") and w2.endswith(f" round {r + 1}")
        assert c1.names == tuple(f"b{i}" for i in orders[r]) and c2.names == c1.names[::-1]
    assert facts["daemon restarts"].startswith(f"on fresh repos every round; {2 * rounds - 1} restarts, ")  # a refresh of both counts once


def test_a_round_is_cut_into_parts_as_even_as_they_go():
    assert rn.pair_parts(16, 4) == [4, 4, 4, 4]
    assert rn.pair_parts(13, 4) == [4, 3, 3, 3]
    assert rn.pair_parts(4, 4) == [4] and rn.pair_parts(3, 4) == [3]
    assert rn.pair_parts(9, None) == [9]  # no fresh daemons: the round is one call


def test_a_restart_takes_the_repos_in_the_order_it_is_given():
    from refbench.backends.ipfs import restart_order

    repos = {"a": "A", "b": "B", "c": "C"}
    assert restart_order(repos, ["c", "a", "b"]) == ["C", "A", "B"]
    assert restart_order(repos, ["b"]) == ["B", "A", "C"]  # the rest in their own order
    assert restart_order(repos, ()) == ["A", "B", "C"]
    assert restart_order(repos, ["x", "c"]) == ["C", "A", "B"]  # a label it does not run is skipped


def test_the_default_restarts_every_round_and_the_fact_says_so(tmp_path, fake_ipfs):
    facts, seen, _ = run_offline(tmp_path, fake_ipfs, None, rounds=3, setup=False)
    # no setup to put back: one restart a refresh, every daemon on a fresh repo
    assert per_build(fake_ipfs) == {"s-b0": 3, "s-b1": 3}
    assert {history for *_, history in starts(fake_ipfs)} == {"fresh"}
    assert facts["daemon restarts"].startswith("on fresh repos every round; 2 restarts, ")
    assert restarts_fact(0, []) == "never: one repo and daemon per build for the whole scenario"
    assert restarts_fact(3, [0.5, 0.7]) == "on fresh repos every 3 rounds; 2 restarts, 1.2 s in all, untimed"
    assert restarts_fact(2, [0.5]) == "on fresh repos every 2 rounds; 1 restart, 0.5 s in all, untimed"


def test_the_summary_says_how_often_the_daemons_were_restarted():
    from refbench.render import markdown
    from factories import results_doc

    doc = results_doc({("s", "add"): {"old": [1.0] * 8, "new": [1.0] * 8}})
    doc["scenarios"][0]["daemon"] = "online"
    doc["backend"] = {"kind": "ipfs", "daemon": "s: online", "daemon restarts": restarts_fact(1, [1.0, 1.5])}
    text = markdown.render_markdown(rs.Results.from_json(json.loads(json.dumps(doc))))
    assert "daemons restarted on fresh repos every round; 2 restarts, 2.5 s in all, untimed" in text


def online_pair(tmp_path, kubo_binaries):
    """Both kubo builds' online daemons of one scenario ("probe", K=1) on a backend the caller closes:
    (backend, a 64 KiB file, the labels, ipfs(label, binary, *args) -> its stdout, asserting success)."""
    import subprocess
    from types import SimpleNamespace

    backend = IpfsBackend.open(tmp_path / "work", restart_every=1)
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(1 << 16))
    labels = ("old", "new")
    try:
        backend.open_scenario(SimpleNamespace(name="probe", slug="probe", daemon_mode="online", state=None),
                              list(labels), kubo_binaries, tmp_path / "work")
    except BaseException:
        backend.close()
        raise

    def ipfs(lab, binary, *args):
        p = subprocess.run([*backend.command_prefix(), binary, *args], capture_output=True, text=True,
                           env={**os.environ, **backend.context_env("probe", lab)}, timeout=60)
        assert p.returncode == 0, (args, p.stderr)
        return p.stdout.strip()
    return backend, data, labels, ipfs


@pytest.mark.slow
def test_online_kubo_daemons_restart_on_fresh_repos_in_the_namespace_at_their_api(tmp_path, namespaces,  # noqa: F811
                                                                                  kubo_binaries):
    """Real kubo, online, K=1: before the second round each build has a new daemon (another pid,
    still in the run's namespace, at the same API address) on a repo without the first's content."""
    backend, data, labels, ipfs = online_pair(tmp_path, kubo_binaries)
    try:
        first = {lab: (backend.repos[lab].daemon.pid, backend.repos[lab].api) for lab in labels}
        cids = {lab: ipfs(lab, b, "add", "-Q", str(data)) for lab, b in zip(labels, kubo_binaries)}
        assert backend.before_round(timed=False) == 0.0  # fresh daemons: the warm-ups use them
        assert backend.before_round(timed=True) == 0.0  # round 1: the same daemons
        cgroups = [backend.repos[lab].cpu_cgroup.path for lab in labels if backend.repos[lab].cpu_cgroup]
        seconds = backend.before_round(timed=True)  # round 2: new ones
        assert seconds > 0
        for lab, binary in zip(labels, kubo_binaries):
            repo = backend.repos[lab]
            old = Path(f"/proc/{first[lab][0]}")
            assert repo.daemon.pid != first[lab][0] and (not old.exists() or "zombie" in (old / "status").read_text())
            assert repo.api == first[lab][1]  # where the step's commands reach it
            assert os.readlink(f"/proc/{repo.daemon.pid}/ns/net") != os.readlink("/proc/self/ns/net")
            assert cids[lab] not in ipfs(lab, binary, "pin", "ls", "--type=recursive", "-q")  # a fresh repo
            assert ipfs(lab, binary, "add", "-Q", "--pin=false", str(data)) == cids[lab]
        assert not any(c.exists() for c in cgroups)  # the old daemons' cgroups went with them
        assert backend.describe()["daemon restarts"].startswith("on fresh repos every round; 1 restart, ")
    finally:
        backend.close()


@pytest.mark.slow
def test_two_online_daemons_of_a_run_never_peer_before_or_after_a_restart(tmp_path, namespaces,  # noqa: F811
                                                                         kubo_binaries):
    """Both builds' online daemons listen on the loopback of one namespace, with the DHT on: were
    they peers (mDNS, a bootstrap entry, Peering), one build's adds would make the other's daemon
    work (provider records, bitswap), a coupling an A/A must not have (issue 36, hypothesis 1).
    Neither has a peer after both added the same data, nor after a refresh."""
    backend, data, labels, ipfs = online_pair(tmp_path, kubo_binaries)
    try:
        for refresh in range(2):
            if refresh:  # fresh repos and daemons, as before a round
                backend.before_round(timed=True)
                assert backend.before_round(timed=True) > 0
            for lab, binary in zip(labels, kubo_binaries):
                ipfs(lab, binary, "add", "-Q", str(data))
            for lab, binary in zip(labels, kubo_binaries):
                cfg = json.loads((backend.repos[lab].path / "config").read_text())
                assert cfg["Bootstrap"] == [] and cfg["Discovery"]["MDNS"]["Enabled"] is False
                assert not (cfg.get("Peering") or {}).get("Peers")
                assert ipfs(lab, binary, "swarm", "peers") == "", (lab, refresh)
    finally:
        backend.close()


@pytest.mark.parametrize("flag, bad", [("--daemon-restart-every", "-1"), ("--runs-per-daemon", "0")])
def test_the_knob_is_refused_with_one_line_for_a_target_without_a_daemon(tmp_path, monkeypatch, flag, bad):
    from fakes.pipeline import scenarios_file
    from refbench.errors import EXIT_ERROR
    from test_cli_mock import FIXED, bench
    from test_judge import SCENARIOS

    scenarios = scenarios_file(monkeypatch, tmp_path, SCENARIOS)  # the mock S3 target "fake"
    proc = bench(scenarios, tmp_path, *FIXED, flag, "2")
    assert proc.returncode == EXIT_ERROR and f"{flag} applies to IPFS targets" in proc.stderr, proc.stderr
    assert proc.stderr.startswith("refbench: error:") and "Traceback" not in proc.stderr
    assert bench(scenarios, tmp_path / "neg", *FIXED, flag, bad).returncode == EXIT_ERROR


def test_runs_per_daemon_is_the_samplings_pair_runs():
    """--runs-per-daemon N reaches the runner as Sampling.pair_runs, the most runs a build makes on
    one pair of fresh daemons (Runner.pair_cap; a pair per run is tested with pair_runs=1 above);
    unset, None: the planned round's runs."""
    from refbench.pipeline import RunRequest

    assert RunRequest(refs=("a", "b"), runs_per_daemon=1).sampling.pair_runs == 1
    assert RunRequest(refs=("a", "b")).sampling.pair_runs is None


@pytest.mark.slow
def test_each_daemon_starts_on_a_binary_settled_in_the_page_cache(kubo_binaries):
    """A daemon maps its binary's pages for its whole life, and a settle (backends.process) drops
    only pages no process maps: were a binary settled after its daemon started, that daemon would
    keep the folios the binary was in (one run once from a cold cache: start-up's pages, in small
    ones), and so would every CLI run of that build, which maps the same pages. The CLI's peak RSS
    carries them (kubo: 60 MB on small folios, 82 MB on large), and in a hold64 run the contender's
    CLI was `faster` on memory on 10 steps for it (issue 36). So the backend settles each binary
    before its daemon starts, and again between a restart's stop and start: after the scenario's
    start and after a restart, both builds sit alike, whatever their history."""
    import shutil
    import tempfile
    from types import SimpleNamespace

    from folios import exec_filled, layout, rewritten
    from refbench.backends.process import settle_page_cache

    if not os.access("/proc/kpageflags", os.R_OK):
        pytest.fail("/proc/kpageflags is not readable: this test reads the page cache's folios and runs as root")
    root = Path(__file__).resolve().parent.parent  # on the disk builds live on: a tmpfs keeps its pages
    where = Path(tempfile.mkdtemp(dir=root, prefix=".pagecache-"))
    backend = IpfsBackend.open(where / "work", restart_every=1)
    try:
        bins = [where / "a" / "ipfs", where / "b" / "ipfs"]
        for src, dst in zip(kubo_binaries, bins):
            dst.parent.mkdir()
            shutil.copyfile(src, dst)
            dst.chmod(0o755)
        exec_filled(bins[0], "version")  # start-up's pages only, in small folios
        rewritten(bins[1])  # just built: dirty, in the write path's folios
        before = layout(bins[0]), layout(bins[1])
        assert abs(before[0].large_share - before[1].large_share) > 0.2, before  # the asymmetry is real here

        def alike(when):
            for b in bins:  # as the runner does before each step, with the daemons running
                settle_page_cache(b)
            la, lb = layout(bins[0]), layout(bins[1])
            assert la.resident >= 0.99 * la.pages and lb.resident >= 0.99 * lb.pages, (when, la, lb)
            assert abs(la.large_share - lb.large_share) < 0.02, (when, la, lb)

        backend.open_scenario(SimpleNamespace(name="probe", slug="probe", daemon_mode="offline", state=None),
                              ["a", "b"], [str(b) for b in bins], where / "work")
        assert all(backend.repos[lab].daemon is not None for lab in ("a", "b"))
        alike("after the scenario's start")
        backend.before_round(timed=False)
        backend.before_round(timed=True)
        assert backend.before_round(timed=True) > 0  # a restart
        alike("after a restart")
    finally:
        backend.close()
        shutil.rmtree(where, ignore_errors=True)
