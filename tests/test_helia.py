"""Helia beside kubo (refbench/implementations.py, registry npm): the IPFS half of issue 37.

Fast: Helia's pins (every package of the lock by sha512 integrity, exact versions), their refusals,
Node missing or too old (one line), the settings an add ran with, and the root-CID note that says
where two builds' roots differ and why. Slow: a real `npm ci` of the pins, refused when one
integrity differs, and the `ipfs implementations` comparison end to end: a real kubo build (the
local kubo origin's v1.0.0, kubo v0.40.1) beside the real Helia install.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import need, run_bench
from refbench import implementations as impls, results as rs
from refbench.errors import ConfigError, RefbenchError
from refbench.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent
PINS = ROOT / "refbench" / "impl_pins" / "helia"


# ---- the pins --------------------------------------------------------------------------------
def test_helia_is_pinned_from_npm_by_every_packages_integrity():
    helia = impls.bundled()["helia"]
    assert (helia.registry, helia.backend, helia.label) == ("npm", "ipfs", "helia 5.5.1") and helia.in_process
    lock = json.loads(helia.npm_files["package-lock.json"])
    packages = {k: v for k, v in lock["packages"].items() if k}
    assert len(packages) > 100 and all(v["integrity"].startswith("sha512-") for v in packages.values())
    deps = json.loads(helia.npm_files["package.json"])["dependencies"]
    assert {"@helia/unixfs", "@helia/utils", "blockstore-fs", "datastore-level"} <= set(deps)
    assert all(v[0].isdigit() and "^" not in v and "~" not in v for v in deps.values())
    # the program refbench ships is part of the pin: another program is another install
    assert "bench.mjs" in helia.npm_files and "unixfs" in helia.npm_files["bench.mjs"]
    other = dataclasses.replace(helia, npm_files={**helia.npm_files, "bench.mjs": "// changed\n"})
    assert other.pin != helia.pin
    assert helia.pinned_by == f"{len(packages)} packages pinned by sha512 integrity (package-lock.json)"


def _table(tmp_path: Path, lock: dict | None = None, manifest: dict | None = None) -> Path:
    pins = tmp_path / "pins"
    pins.mkdir(exist_ok=True)
    (pins / "package.json").write_text(json.dumps(manifest or json.loads((PINS / "package.json").read_text())))
    (pins / "package-lock.json").write_text(json.dumps(lock or json.loads((PINS / "package-lock.json").read_text())))
    shutil.copy(ROOT / "refbench" / "impl_src" / "helia" / "bench.mjs", tmp_path / "bench.mjs")
    p = tmp_path / "impl.toml"
    p.write_text('[implementations.h]\nregistry = "npm"\nversion = "1"\npackage = "@helia/unixfs"\n'
                 'program = "bench.mjs"\nbackend = "ipfs"\nlock_dir = "pins"\nsource = "bench.mjs"\n')
    return p


def test_a_lock_that_does_not_pin_every_package_is_refused_naming_it(tmp_path):
    assert impls.load_file(_table(tmp_path), "mine")["h"].registry == "npm"
    lock = json.loads((PINS / "package-lock.json").read_text())
    victim = next(k for k in lock["packages"] if k)
    del lock["packages"][victim]["integrity"]
    with pytest.raises(ConfigError, match=rf"implementations.h.lock_dir: expected a package-lock.json .*{victim}"):
        impls.load_file(_table(tmp_path, lock=lock), "mine")
    lock = json.loads((PINS / "package-lock.json").read_text())
    lock["packages"][victim]["resolved"] = "https://npm.example.invalid/x.tgz"
    with pytest.raises(ConfigError, match="comes from https://registry.npmjs.org/"):
        impls.load_file(_table(tmp_path, lock=lock), "mine")
    manifest = json.loads((PINS / "package.json").read_text())
    manifest["dependencies"]["@helia/unixfs"] = "^5.1.0"
    with pytest.raises(ConfigError, match=r"every dependency at an exact version.*@helia/unixfs@\^5.1.0"):
        impls.load_file(_table(tmp_path, manifest=manifest), "mine")
    p = _table(tmp_path)
    (tmp_path / "bench.mjs").unlink()
    with pytest.raises(ConfigError, match="implementations.h.source: expected a readable bench.mjs"):
        impls.load_file(p, "mine")


@pytest.mark.parametrize("node, message", [
    (None, "helia 5.5.1 runs on the machine's Node >= 20 (Debian: apt-get install nodejs): no node on PATH"),
    ("v18.19.1", "is v18.19.1"),
])
def test_node_missing_or_older_than_20_is_one_line(tmp_path, monkeypatch, node, message):
    bindir = tmp_path / "bin"  # the machine's PATH: node there, or no node at all
    bindir.mkdir()
    if node:
        fake = bindir / "node"
        fake.write_text(f"#!/bin/sh\necho {node}\n")
        fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(RefbenchError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        impls.install(impls.bundled()["helia"])
    assert "\n" not in str(e.value)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("impl.json"))


def test_helia_runs_with_no_node_options_of_the_users(tmp_path):
    env = impls.runtime_env(impls.bundled()["helia"], tmp_path)
    assert env["HOME"] == str(tmp_path) and env["NODE_OPTIONS"] == "" and env["NODE_PATH"] == ""


# ---- the settings an add ran with, and the root CIDs -------------------------------------------
def test_the_settings_an_add_ran_with():
    helia, kubo = impls.bundled()["helia"].add_defaults, impls.KUBO_ADD_DEFAULTS
    assert impls.add_settings("/b/ipfs add -r -Q /f > /w/add.cid", kubo) == dict(kubo)
    # --cid-version=1 alone brings raw leaves, as in kubo
    assert impls.add_settings("ipfs add -r -Q --cid-version=1 /f", kubo)["raw-leaves"] == "true"
    assert impls.add_settings("ipfs add --cid-version=1 --raw-leaves=false /f", kubo)["raw-leaves"] == "false"
    as_kubo = impls.add_settings("HOME=/h HELIA_CID_VERSION=0 HELIA_CHUNK_SIZE=262144 HELIA_MAX_LINKS=174 "
                                 "/c/bin/helia add -r /f > /w/add.cid", helia)
    assert as_kubo == dict(kubo)


V0 = "QmX4AYbpv6s3b9HWGZbHjhSdyn2NAZLjJ1dGYGW5Lzp7wC"
V1 = "bafybeia5kena2dzeoseb7eqzs53sqwxr4uqd5w4kh4umumnd2qhyquoqxi"
V1B = "bafybeihumrxvxxbxzvfdnmlxm7kc4nzh5gvxr3zx5mx6elkvynwqm6vcwe"


def _step(name: str, **builds):
    """A results step: label -> (command, root CID)."""
    return SimpleNamespace(name=name, builds={k: SimpleNamespace(command=c, check=r) for k, (c, r) in builds.items()})


def _builds():
    return [SimpleNamespace(label="v0.40.1"), SimpleNamespace(label="helia 5.5.1", implementation=impls.bundled()["helia"])]


def test_roots_that_differ_are_flagged_with_each_sides_settings_and_the_cause():
    sc = SimpleNamespace(name="ipfs implementations", steps=(
        _step("add", **{"v0.40.1": ("ipfs add -r -Q /f", V0), "helia 5.5.1": ("helia add -r /f", V1)}),
        _step("add, v1", **{"v0.40.1": ("ipfs add -r -Q --cid-version=1 --raw-leaves --chunker=size-1048576 /f", V1),
                            "helia 5.5.1": ("helia add -r /f", V1)}),
        _step("get", **{"v0.40.1": ("ipfs get", "identical to the fixture"),
                        "helia 5.5.1": ("helia get", "identical to the fixture")}),
    ))
    notes = impls.cid_notes([sc], _builds())
    assert len(notes) == 1  # the same settings gave the same root; `get` prints no CID
    note = notes[0]
    assert note.startswith("ipfs implementations / add: the root CIDs differ")
    assert f"v0.40.1 `{V0}` (CIDv0, dag-pb leaves, size-262144, 174 links)" in note
    assert f"helia 5.5.1 `{V1}` (CIDv1, raw leaves, size-1048576, 1024 links)" in note
    assert "different settings: CID version, raw leaves, chunker, links per node" in note
    # the same declared settings, different roots: the cause is one the settings do not name
    same = SimpleNamespace(name="t", steps=(_step("add", **{
        "v0.40.1": ("ipfs add -r -Q --cid-version=1 --raw-leaves --chunker=size-1048576 --max-links=1024 /f", V1),
        "helia 5.5.1": ("helia add -r /f", V1B)}),))
    assert "directory sharding (HAMT)" in impls.cid_notes([same], _builds())[0]


def test_a_table_with_partial_add_defaults_is_refused(tmp_path):
    p = _table(tmp_path)
    p.write_text(p.read_text() + 'add_defaults = { cid-version = "1" }\n')
    with pytest.raises(ConfigError, match="implementations.h.add_defaults: expected a table of strings with keys"):
        impls.load_file(p, "mine")


# ---- real npm, real kubo (slow) ----------------------------------------------------------------
def _need_node():
    from refbench.tools import find_tool
    for tool in ("node", "npm"):
        if not find_tool(tool):
            need(tool, "installing and running Helia")


@pytest.mark.slow
def test_npm_installs_helia_pinned_and_refuses_a_package_whose_integrity_differs(tmp_path, monkeypatch):
    _need_node()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    helia = impls.bundled()["helia"]
    got = impls.install(helia)
    assert got.built_now and got.program == impls.install_dir(helia) / "root" / "bin" / "helia"
    assert got.toolchain.startswith("node v") and "/node " in got.program.read_text()
    assert not impls.install(helia).built_now  # sealed and cached
    home, fixture = tmp_path / "home", tmp_path / "fx"
    (fixture / "sub").mkdir(parents=True)
    (fixture / "a").write_bytes(bytes(range(256)) * 1200)
    (fixture / "sub" / "b").write_bytes(b"b" * 1000)
    home.mkdir()
    env = {**impls.runtime_env(helia, home), "PATH": "/usr/bin:/bin", "IPFS_PATH": str(tmp_path / "repo")}
    import subprocess
    add = subprocess.run([str(got.program), "add", "-r", str(fixture)], capture_output=True, text=True, env=env)
    assert add.returncode == 0 and add.stdout.startswith("bafy"), add.stderr
    out = tmp_path / "out"
    back = subprocess.run([str(got.program), "get", add.stdout.strip(), str(out)], capture_output=True, text=True, env=env)
    assert back.returncode == 0 and (out / "a").read_bytes() == (fixture / "a").read_bytes(), back.stderr
    # one package's integrity changed in the lock: npm ci refuses its tarball, nothing is left
    lock = json.loads(helia.npm_files["package-lock.json"])
    victim = next(k for k, v in lock["packages"].items() if k.endswith("/it-last"))
    lock["packages"][victim]["integrity"] = "sha512-" + "A" * 86 + "=="
    tampered = dataclasses.replace(helia, npm_files={**helia.npm_files, "package-lock.json": json.dumps(lock)})
    with pytest.raises(RefbenchError, match=r"npm ci of helia 5.5.1 \(integrity-checked\) failed") as e:
        impls.install(tampered)
    assert "EINTEGRITY" in e.value.detail or "integrity" in e.value.detail.lower()
    assert not impls.install_dir(tampered).exists()


@pytest.mark.slow
def test_kubo_beside_helia_end_to_end(kubo_origin, builds_dir, tmp_path, implementations_cache, ram_local):
    """The `ipfs implementations` scenario: a real kubo build and the real Helia install, each
    side's roots recorded; with each side's defaults they differ and the summary says why; with
    the same settings they are identical; the tree comes back identical to the fixture."""
    _need_node()
    from refbench.tools import find_tool
    if not find_tool("hyperfine"):
        need("hyperfine", "timing the commands")
    out = tmp_path / "out"
    proc = run_bench("-t", "kubo", "-s", "v1.0.0", "--impl", "helia", "--repo", str(kubo_origin.path),
                     "--builds-dir", str(builds_dir), "--quick", "-r", "2", "-w", "1", "--rounds", "2",
                     "--budget", "none", "--no-profile", "-l", str(ram_local), "-o", str(out / "summary.md"),
                     "--json", str(out / "results.json"), cwd=tmp_path, env=implementations_cache)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    res = rs.load(out / "results.json")
    assert [b.label for b in res.builds] == ["v1.0.0", "helia 5.5.1"]
    assert (res.builds[1].kind, res.builds[1].registry) == ("implementation", "npm")
    steps = {st.name: st for _, st in res.steps()}
    assert set(steps) == {"add", "add, CIDv1 raw leaves 1 MiB chunks", "get"}
    assert all(c.verdict != Verdict.NOT_SUPPORTED for st in steps.values() for c in st.comparisons)
    add = {k: v.check for k, v in steps["add"].builds.items()}
    assert add["v1.0.0"].startswith("Qm") and add["helia 5.5.1"].startswith("bafy") and steps["add"].check_differs
    same = {k: v.check for k, v in steps["add, CIDv1 raw leaves 1 MiB chunks"].builds.items()}
    assert len(set(same.values())) == 1 and not steps["add, CIDv1 raw leaves 1 MiB chunks"].check_differs
    assert {v.check for v in steps["get"].builds.values()} == {"identical to the fixture"}
    summary = (out / "summary.md").read_text()
    assert "ipfs implementations / add: the root CIDs differ" in summary and "different settings: CID version" in summary
