"""Pure parts of how kubo is run: an online repo's settings and the restore command of a cached
state (what the real-process tests in test_kubo_online.py exercise end to end)."""
from __future__ import annotations

import shlex
from pathlib import Path

from refbench.backends.ipfs import online_config
from refbench.backends.snapshot import StateCache, key, restore_command
from refbench.config import ShellCode, render


def test_online_config_sets_loopback_only_and_never_a_key_the_version_lacks():
    old = {"Addresses": {"API": "/ip4/0.0.0.0/tcp/5001", "Swarm": ["/ip4/0.0.0.0/tcp/4001"], "Gateway": "x"},
           "Bootstrap": ["/dnsaddr/bootstrap.libp2p.io/p2p/Qm"], "Discovery": {"MDNS": {"Enabled": True}},
           "Routing": {"Type": None}, "Swarm": {"DisableNatPortMap": False}, "Datastore": {"Spec": {"sync": True}}}
    got = online_config(old)
    assert got["Addresses"]["API"] == got["Addresses"]["Gateway"] == "/ip4/127.0.0.1/tcp/0"
    assert all(a.startswith("/ip4/127.0.0.1/") for a in got["Addresses"]["Swarm"])
    assert got["Bootstrap"] == [] and got["Discovery"]["MDNS"]["Enabled"] is False
    assert got["Routing"]["Type"] == "dht" and got["Swarm"]["DisableNatPortMap"] is True
    assert "AutoConf" not in got  # this version has no AutoConf table: nothing it does not know
    assert got["Datastore"] == old["Datastore"]  # the version's own datastore and sync settings
    assert old["Bootstrap"] != []  # the input is not changed
    assert online_config({**old, "AutoConf": {}})["AutoConf"] == {"Enabled": False}


def test_restore_command_is_one_quoted_line_that_remounts_fresh_layers(tmp_path):
    mount, scratch = tmp_path / "repo b0", tmp_path / "repo b0.upper"
    lowers = [tmp_path / "layer" / "upper", tmp_path / "state" / "repo"]
    cmd = restore_command(mount, lowers, scratch, user=False)
    words = shlex.split(cmd)
    assert words.count("umount") == 2 and words.count("mount") == 2
    opts = words[words.index("overlay") + 2]
    assert opts.startswith(f"lowerdir={lowers[0]}:{lowers[1]},upperdir={scratch}/upper,")
    assert "userxattr" not in opts and "userxattr" in restore_command(mount, lowers, scratch, user=True)
    assert words[-1] == str(mount)  # the spaces in the paths survive as one word


def test_a_backend_command_is_inserted_as_it_is_and_every_other_value_quoted():
    out = render("{{ restore }} && {{ bin }} repo gc", {"restore": ShellCode("umount /x && mount /y"),
                                                        "bin": "/a b/ipfs"})
    assert out == "umount /x && mount /y && '/a b/ipfs' repo gc"


def test_state_cache_keys_and_completeness(tmp_path):
    cache = StateCache(tmp_path / key("binary-sha") / key("recipe", "fixture"))
    assert key("a", "b") != key("ab") and len(key("x")) == 16
    cache.repo.mkdir(parents=True)
    assert not StateCache.ready(cache.repo)
    StateCache.mark(cache.repo, tmp_path, template="t")
    assert StateCache.ready(cache.repo)
    StateCache.clear(cache.root, tmp_path)
    assert not cache.root.exists()
    assert cache.layer("k") == cache.root / "layers" / "k"
    assert isinstance(cache.repo, Path)


def test_a_state_is_built_by_one_process_and_the_other_waits_then_finds_it(tmp_path):
    """Two runs on one machine (the nightly beside the PR bot) need the same state: the first to
    claim it builds it while holding its lock; the second waits for the lock, then finds the
    state ready and builds nothing. Two real processes, since flock is per open file."""
    import subprocess
    import sys
    import time

    where = tmp_path / "state" / "repo"
    first = StateCache.claim(where, tmp_path)
    assert first is not None  # nothing built yet: ours to build, and locked
    waiter = subprocess.Popen([sys.executable, "-c", (
        "import sys; from pathlib import Path; from refbench.backends.snapshot import StateCache; "
        f"lock = StateCache.claim(Path({str(where)!r}), Path({str(tmp_path)!r})); print('built by me' if lock else 'ready')")],
        stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    assert waiter.poll() is None  # blocked on our lock
    where.mkdir(parents=True)
    StateCache.mark(where, tmp_path, template="t")
    first.close()
    assert waiter.communicate(timeout=30)[0].strip() == "ready"
    assert StateCache.claim(where, tmp_path) is None  # and so for any later run
