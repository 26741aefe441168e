"""Implementations (refbench/implementations.py): other programs beside the refs, as builds.

Fast: the bundled pins and their refusals, the seal every cached install passes (an install stood in
by a few files), and whole mixed runs through cli.main on the mock executor: a ref beside an
implementation, the baseline an implementation, a step one has no command for (`not supported`),
and bad input (one line, exit 2). Slow: a real install from PyPI and from the Go module proxy,
hash-checked and refused when a hash differs, and a mixed run end to end on MinIO.
"""
from __future__ import annotations

import csv
import functools
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import need, run_cli
from fakes.pipeline import mock_args, scenarios_file
from origins import module_proxy
from refbench import implementations as impls, pins, results as rs, trust
from refbench.errors import EXIT_ERROR, EXIT_OK, ConfigError, RefbenchError
from refbench.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent
FIXED = ("-r", "4", "--rounds", "2", "-w", "0", "--no-rss", "--no-profile", "--budget", "none")

# a target and a scenario, and a user's own implementation of it: `copy` has its command; `list` has none
SCENARIOS = """
[targets.fake]
repo = "https://example.invalid/fake"
build = ["go", "build", "-o", "{out}", "."]
binary = "fake"
backend = "s3"

[[scenarios]]
name = "tiny"
target = "fake"
fixture = { kind = "sparse", size = "1K", count = 2 }
setup = "{{ bin }} put {{ fixture }}"

  [[scenarios.steps]]
  name = "list"
  command = "{{ bin }} ls {{ fixture }}"

  [[scenarios.steps]]
  name = "copy"
  command = "{{ bin }} cp {{ fixture }} {{ work }}"
  check = "echo same-check-for-every-build"

[implementations.other-cli]
version = "3.1"
registry = "pypi"
package = "other-cli"
program = "other"
requirements = ["other-cli==3.1 --hash=sha256:0000000000000000000000000000000000000000000000000000000000000000"]

  [implementations.other-cli.scenarios.tiny]
  setup = "{{ bin }} upload {{ fixture }}"
  [implementations.other-cli.scenarios.tiny.steps.copy]
  command = "{{ bin }} {{ extra }} copy --own-defaults {{ fixture }} {{ work }}"
"""


@pytest.fixture
def scenarios(tmp_path, monkeypatch) -> Path:
    return scenarios_file(monkeypatch, tmp_path, SCENARIOS)


def bench(scenarios: Path, out: Path, *argv, binaries=None):
    binaries = binaries or {"v1.0.0": "fake-1.00", "other-cli": "fake-2.00"}
    return run_cli("-t", "fake", "--scenarios", scenarios, "--builds-dir", scenarios.parent / "builds",
                   *mock_args(binaries, "I", 0.005), "-o", out / "summary.md", "--json", out / "results.json",
                   "--html", out / "report.html", "--csv", out / "results.csv", *FIXED, *argv)


# ---- the bundled pins ---------------------------------------------------------------------------
def test_the_bundled_clients_are_pinned_by_version_and_hash_and_none_is_agpl():
    b = impls.bundled()
    assert {"aws-cli", "s3cmd", "s4cmd", "rclone"} <= set(b) and "mc" not in b
    assert b["aws-cli"].label == "aws-cli 1.46.2" and b["aws-cli"].registry == "pypi"
    for name in ("aws-cli", "s3cmd", "s4cmd"):  # every file of the closure, each with its hash
        reqs = b[name].requirements
        assert reqs and all("==" in ln and "--hash=sha256:" in ln for ln in reqs), name
        assert any(ln.startswith(b[name].package + "==" + b[name].version) for ln in reqs), name
    rclone = b["rclone"]
    assert rclone.registry == "go" and rclone.module_sum.startswith("h1:")
    assert rclone.binary_sha256[f"{pins.TOOLS_GO} linux/amd64"]
    assert all("AGPL" not in i.license.upper() for i in b.values())
    # every bundled command is a template of the s3 clients scenarios, one per step it supports
    from refbench.config import load_config
    cfg = load_config(ROOT / "refbench" / "scenarios.toml")
    clients = {s.name: s for s in cfg.scenarios if s.name.startswith("s3 clients, ")}
    for impl in (i for i in b.values() if i.backend == "s3"):  # helia's are the ipfs scenarios' (test_helia.py)
        for sc in clients.values():
            assert all(impl.supports(sc.name, st.name) for st in sc.steps), (impl.name, sc.name)


def test_a_table_is_refused_naming_its_key(tmp_path):
    def load(body: str):
        p = tmp_path / "x.toml"
        p.write_text(body)
        return impls.load_file(p, str(p))

    with pytest.raises(ConfigError, match=r"implementations.x.registry: expected a string \(required\)"):
        load('[implementations.x]\nversion = "1"\npackage = "x"\nprogram = "x"\n')
    with pytest.raises(ConfigError, match=r"implementations.x.registry: expected one of pypi, go, npm, got 'npmjs'"):
        load('[implementations.x]\nregistry = "npmjs"\nversion = "1"\npackage = "x"\nprogram = "x"\n')
    with pytest.raises(ConfigError, match="implementations.x.requirements: expected every line"):
        load('[implementations.x]\nregistry = "pypi"\nversion = "1"\npackage = "x"\nprogram = "x"\n'
             'requirements = ["x==1"]\n')
    with pytest.raises(ConfigError, match="not under the AGPL"):
        load('[implementations.mc]\nregistry = "go"\nversion = "1"\npackage = "m"\nprogram = "mc"\n'
             'module_sum = "h1:x"\nlicense = "AGPL-3.0"\n')


def test_choose_names_what_is_known_and_what_is_pinned():
    b = impls.bundled()
    assert impls.choose("rclone@v1.76.0", b) is b["rclone"] and impls.choose("aws-cli@1.46.2", b) is b["aws-cli"]
    with pytest.raises(RefbenchError, match="unknown implementation 'mc' .known: aws-cli, helia, rclone, s3cmd, s4cmd"):
        impls.choose("mc", b)
    with pytest.raises(RefbenchError, match="rclone is pinned at v1.76.0"):
        impls.choose("rclone@v1.75.0", b)


# ---- the seal ----------------------------------------------------------------------------------
def test_an_install_is_sealed_reused_and_installed_again_when_its_files_change(tmp_path, monkeypatch):
    """The registry stood in by a function that writes a program: what is checked is the cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    made = []

    def fake_pypi(impl, d):
        (d / "root" / "bin").mkdir(parents=True)
        program = d / "root" / "bin" / impl.program
        program.write_text("#!/bin/sh\necho pinned\n")
        program.chmod(0o755)
        made.append(impl.name)
        return program, "python3.11"

    installers = {"pypi": fake_pypi}
    impl = impls.bundled()["s3cmd"]
    first = impls.install(impl, installers=installers)
    assert first.built_now and made == ["s3cmd"] and first.program.is_absolute()
    record = json.loads((impls.install_dir(impl) / "impl.json").read_text())
    assert record["seal"] and record["content_sha256"] == impls.tree_digest(first.root)
    again = impls.install(impl, installers=installers)
    assert not again.built_now and made == ["s3cmd"]  # cached: its seal and its files hold
    first.program.write_text("#!/bin/sh\necho planted\n")  # a restored cache changed a file
    assert impls.cached(impl) is None
    third = impls.install(impl, installers=installers)
    assert third.built_now and made == ["s3cmd", "s3cmd"] and "pinned" in third.program.read_text()
    # a record sealed under another key (another job's cache) is not trusted either
    (tmp_path / "config" / "refbench" / "cache-key").write_text("f" * 64 + "\n")
    with trust.key_in_use(None):  # no key held: the key file is read again, as by a new run
        assert impls.cached(impl) is None


def test_each_implementation_runs_with_a_home_of_the_runs_own(tmp_path):
    env = impls.runtime_env(impls.bundled()["aws-cli"], tmp_path / "home")
    assert env["HOME"] == str(tmp_path / "home") and env["AWS_EC2_METADATA_DISABLED"] == "true"
    assert all(str(tmp_path / "home") in env[k] for k in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
                                                          "RCLONE_CONFIG", "PYTHONPYCACHEPREFIX"))
    assert not any(k.startswith("AWS_ACCESS") or "SECRET" in k for k in env)  # the run's keys come from the backend


# ---- mixed runs on the mock ---------------------------------------------------------------------
def test_a_ref_beside_an_implementation_through_the_mock(scenarios, tmp_path):
    proc = bench(scenarios, tmp_path, "-s", "v1.0.0", "--impl", "other-cli")
    assert proc.returncode == EXIT_OK, proc.stderr
    res = rs.load(tmp_path / "results.json")
    assert [b.label for b in res.builds] == ["v1.0.0", "other-cli 3.1"] and res.baseline == "v1.0.0"
    impl = res.builds[1]
    assert (impl.kind, impl.registry, impl.ref, impl.version) == ("implementation", "pypi", "other-cli@3.1", "3.1")
    verdicts = {st.name: [c.verdict for c in st.comparisons if c.metric == "wall"] for _, st in res.steps()}
    assert verdicts == {"list": [Verdict.NOT_SUPPORTED], "copy": [Verdict.SLOWER]}  # fake-2.00: twice the time
    # its own commands, with its own defaults and the run's HOME; the check is the scenario's
    copy = next(st for _, st in res.steps() if st.name == "copy")
    assert "copy --own-defaults" in copy.builds["other-cli 3.1"].command
    assert "HOME=" in copy.builds["other-cli 3.1"].command and "HOME=" not in copy.builds["v1.0.0"].command
    assert "other-cli 3.1" not in next(st for _, st in res.steps() if st.name == "list").builds
    summary = (tmp_path / "summary.md").read_text()
    assert "other-cli 3.1" in summary and "not supported" in summary and "1 not supported" in summary
    assert "differ in Go version" not in summary  # another program: its Python is not a cause to warn of
    assert "other-cli 3.1" in (tmp_path / "report.html").read_text()
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert {r.get("contender") or r.get("build") for r in rows} >= {"other-cli 3.1"}
    # compare takes it as it takes a build
    again = tmp_path / "again"
    assert bench(scenarios, again, "-s", "v1.0.0", "--impl", "other-cli").returncode == EXIT_OK
    cmp = run_cli("compare", tmp_path / "results.json", again / "results.json")
    assert cmp.returncode == EXIT_OK and "other-cli 3.1" in cmp.stdout, cmp.stderr


def test_a_dry_run_lists_each_implementation_with_its_pins(scenarios, tmp_path):
    proc = bench(scenarios, tmp_path, "-s", "v1.0.0", "--impl", "other-cli", "--dry-run")
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "implementation other-cli 3.1: PyPI other-cli, 1 files pinned by SHA-256 -> would install" in proc.stdout


def test_the_baseline_may_be_an_implementation(scenarios, tmp_path):
    proc = bench(scenarios, tmp_path, "--impl", "other-cli", "-s", "v1.0.0")
    assert proc.returncode == EXIT_OK, proc.stderr
    res = rs.load(tmp_path / "results.json")
    assert res.baseline == "other-cli 3.1" and [b.label for b in res.builds] == ["other-cli 3.1", "v1.0.0"]
    verdicts = {st.name: [c.verdict for c in st.comparisons if c.metric == "wall"] for _, st in res.steps()}
    # the baseline cannot list: nothing to compare there; the ref copies in half the time
    assert verdicts == {"list": [Verdict.NOT_SUPPORTED], "copy": [Verdict.FASTER]}


@pytest.mark.parametrize("argv, message", [
    (("-s", "v1.0.0", "--impl", "nosuch"), "--impl nosuch: unknown implementation 'nosuch'"),
    (("-s", "v1.0.0", "--impl", "other-cli@9"), "other-cli is pinned at 3.1"),
    (("-s", "v1.0.0", "--impl", "other-cli", "--go", "1.25"), "--go applies to refs: --impl other-cli"),
    (("--impl", "other-cli"), "give at least two refs to compare"),
    (("-s", "v1.0.0", "--impl", "other-cli", "--impl", "other-cli"), "other-cli 3.1 given twice"),
])
def test_bad_input_is_one_line_and_exit_2(scenarios, tmp_path, argv, message):
    proc = bench(scenarios, tmp_path, *argv)
    assert proc.returncode == EXIT_ERROR and message in proc.stderr, proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("refbench: error")]) == 1


@pytest.mark.parametrize("variant, names", [
    ("x=impl:other-cli,env=OTHER_THREADS=16", "--variant x=impl:other-cli"),
    ("bulk", "--variant bulk=impl:other-cli"),  # a [[variants]] table naming an implementation
])
def test_go_beside_a_named_variant_of_an_implementation_is_refused_before_anything_is_built(
        tmp_path, monkeypatch, variant, names):
    """--go reaches the refs only: with a variant of an implementation it was silently ignored for
    it (the ref built with that Go, the implementation installed as pinned). One line, exit 2,
    before any build or install, as --go with --impl is."""
    path = scenarios_file(monkeypatch, tmp_path, SCENARIOS + '[[variants]]\nname = "bulk"\nref = "impl:other-cli"\n'
                          'env = { OTHER_THREADS = "16" }\n')
    proc = bench(path, tmp_path, "-s", "v1.0.0", "--variant", variant, "--go", "1.25")
    assert proc.returncode == EXIT_ERROR, proc.stderr
    assert f"--go applies to refs: {names} is installed pinned from its registry" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # nothing resolved, built or installed first
    assert not (tmp_path / "builds").exists() and not (tmp_path / "results.json").exists()


def test_the_machines_go_setting_is_not_refused_beside_an_implementation(scenarios, tmp_path, monkeypatch):
    """REFBENCH_GO is the machine's choice for every ref, not the command line's: it stays allowed."""
    monkeypatch.setenv("REFBENCH_GO", "local")
    proc = bench(scenarios, tmp_path, "-s", "v1.0.0", "--variant", "x=impl:other-cli,env=OTHER_THREADS=16")
    assert proc.returncode == EXIT_OK, proc.stderr


def test_a_missing_registry_in_the_scenarios_file_is_one_line_and_exit_2(tmp_path, monkeypatch):
    path = scenarios_file(monkeypatch, tmp_path, SCENARIOS.replace('registry = "pypi"\n', ""))
    proc = bench(path, tmp_path, "-s", "v1.0.0", "--impl", "other-cli")
    assert proc.returncode == EXIT_ERROR, proc.stderr
    assert "implementations.other-cli.registry: expected a string (required)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_bisect_takes_no_implementation(tmp_path):
    proc = run_cli("bisect", "v1.0.0", "v2.0.0", "--only", "small files", "--impl", "aws-cli")
    assert proc.returncode == EXIT_ERROR and "bisect walks a ref's commits; --impl aws-cli" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("variant, says", [
    ("bulk", "bisect walks a ref's commits; --variant bulk is a variant of an implementation (impl:other-cli)"),
    ("b=impl:other-cli,env=X=1", "expected settings without a ref"),
])
def test_bisect_refuses_a_variant_of_an_implementation_before_fetching(tmp_path, monkeypatch, variant, says):
    """A [[variants]] table on an implementation, named to bisect: one line, before the origin is
    fetched (the target's repo, example.invalid, cannot be). Before, its environment was put on the
    refs and the bisect ran."""
    path = scenarios_file(monkeypatch, tmp_path, SCENARIOS + '[[variants]]\nname = "bulk"\nref = "impl:other-cli"\n'
                          'env = { OTHER_THREADS = "16" }\n')
    proc = run_cli("bisect", "v1.0.0", "v2.0.0", "--only", "tiny/copy", "-t", "fake", "--scenarios", path,
                   "--builds-dir", tmp_path / "b", "--variant", variant)
    assert proc.returncode == EXIT_ERROR and says in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "cannot fetch" not in proc.stderr, proc.stderr


# ---- Node for an npm implementation ---------------------------------------------------------------
def _fake_node(tmp_path: Path, monkeypatch, version: str) -> Path:
    """The machine's PATH holding only a node that says `version`; the cache a fresh one."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "node").write_text(f"#!/bin/sh\necho {version}\n")
    (bindir / "node").chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return bindir / "node"


def _with_engines(impl: impls.Implementation, package: str, engines: str) -> impls.Implementation:
    import dataclasses
    lock = json.loads(impl.npm_files["package-lock.json"])
    key = next(k for k in lock["packages"] if k.endswith("node_modules/" + package))
    lock["packages"][key]["engines"] = {"node": engines}
    return dataclasses.replace(impl, npm_files={**impl.npm_files, "package-lock.json": json.dumps(lock)})


def test_a_tree_that_needs_a_newer_node_is_refused_naming_both_nodes(tmp_path, monkeypatch):
    """Helia 7's tree needs Node 22 (undici 8; here a package of the pinned tree made to say so): on
    Node 20 npm ci only warns and the program fails at run time. Now one line before anything is
    fetched: the Node found, the Node needed, and which package (or the table) asks for it."""
    node = _fake_node(tmp_path, monkeypatch, "v20.20.2")
    helia = impls.bundled()["helia"]
    assert impls.node_needed(helia) == (20, "")  # the pinned 5.5.1 tree runs on Node 20
    newer = _with_engines(helia, "libp2p", ">=22.19.0")
    version = json.loads(newer.npm_files["package-lock.json"])["packages"]["node_modules/libp2p"]["version"]
    assert impls.node_needed(newer) == (22, f"libp2p@{version}'s engines say node >=22.19.0")
    with pytest.raises(RefbenchError) as e:
        impls.install(newer)
    assert str(e.value).startswith(f"helia 5.5.1 runs on the machine's Node >= 22 (libp2p@{version}'s engines say "
                                   f"node >=22.19.0): {node} is v20.20.2; install Node 22 or newer")
    assert "\n" not in str(e.value) and not (tmp_path / "cache").exists()
    import dataclasses
    declared = dataclasses.replace(helia, node_min=22, origin="mine.toml")  # a table's `node = 22`
    with pytest.raises(RefbenchError, match=r"Node >= 22 \(mine.toml: node = 22\): .* is v20.20.2"):
        impls.install(declared)
    # a range that names no single floor is no floor; an older floor is refbench's own
    assert impls.node_needed(_with_engines(helia, "libp2p", "^18 || >=22")) == (20, "")


def test_a_tables_node_must_be_a_major_version(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text('[implementations.x]\nregistry = "go"\nversion = "1"\npackage = "m"\nprogram = "x"\n'
                 'module_sum = "h1:x"\nnode = "22"\n')
    with pytest.raises(ConfigError, match=r"implementations.x.node: expected the oldest Node major its tree runs on"):
        impls.load_file(p, str(p))


# ---- real registries (slow) ----------------------------------------------------------------------
def _user_impl(tmp_path: Path, body: str, name: str) -> impls.Implementation:
    p = tmp_path / "impl.toml"
    p.write_text(body)
    return impls.load_file(p, str(p))[name]


@pytest.mark.slow
def test_pypi_installs_pinned_and_refuses_a_file_whose_hash_differs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    s3cmd = impls.bundled()["s3cmd"]
    got = impls.install(s3cmd)
    assert got.built_now and got.program == impls.install_dir(s3cmd) / "root" / "bin" / "s3cmd"
    assert not list(got.root.rglob("__pycache__"))  # no byte code in the sealed install
    home = tmp_path / "home"
    home.mkdir()
    import subprocess
    out = subprocess.run([str(got.program), "--version"], capture_output=True, text=True,
                         env={**impls.runtime_env(s3cmd, home), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0 and "2.4.0" in out.stdout + out.stderr
    assert not list(got.root.rglob("__pycache__"))  # running it wrote none into the install either
    assert not impls.install(s3cmd).built_now
    # one hash changed: pip refuses the file, nothing is left in the cache
    bad = [ln if not ln.startswith("s3cmd==") else ln[:-8] + "00000000" for ln in s3cmd.requirements]
    import dataclasses
    tampered = dataclasses.replace(s3cmd, requirements=tuple(bad))
    with pytest.raises(RefbenchError, match="pip install of s3cmd 2.4.0 .hash-checked. failed") as e:
        impls.install(tampered)
    assert "DO NOT MATCH" in e.value.detail.upper() or "hash" in e.value.detail.lower()
    assert not impls.install_dir(tampered).exists()



# The one platform wheel in a bundled client's closure (aws-cli's PyYAML): pinned for the machines a
# user or a CI runner has (Linux x86_64 and aarch64, macOS Intel and Apple silicon) on every Python
# refbench runs with (3.11-3.14), so aws-cli installs there too, still hash-checked.
OTHER_PLATFORMS = [(plat, py) for plat in ("manylinux2014_x86_64", "manylinux2014_aarch64", "macosx_10_15_x86_64",
                                           "macosx_11_0_arm64") for py in ("3.11", "3.12", "3.13", "3.14")]


@pytest.mark.slow
def test_the_bundled_platform_wheels_are_pinned_for_other_machines_and_pythons(tmp_path):
    """pip itself, against PyPI, downloads each platform's wheel of the closure's platform-specific
    requirement with --require-hashes: a platform or Python whose wheel's hash is not pinned fails."""
    import subprocess
    import sys
    line = next(ln for ln in impls.bundled()["aws-cli"].requirements if ln.lower().startswith("pyyaml=="))
    reqs = tmp_path / "req.txt"
    reqs.write_text(line + "\n")
    from concurrent.futures import ThreadPoolExecutor

    def download(case):  # network-bound: four at once
        plat, py = case
        return case, subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                                     "--require-hashes", "--only-binary=:all:", "--platform", plat,
                                     "--python-version", py, "-r", str(reqs), "-d", str(tmp_path / f"{plat}-{py}")],
                                    capture_output=True, text=True, timeout=300)
    with ThreadPoolExecutor(4) as pool:
        for (plat, py), out in pool.map(download, OTHER_PLATFORMS):
            assert out.returncode == 0, f"{plat} / Python {py}: {out.stderr.strip()[-400:]}"
            assert len(list((tmp_path / f"{plat}-{py}").glob("*.whl"))) == 1


TOXIPROXY = """
[implementations.toxiproxy]
version = "v2.12.0"
registry = "go"
module = "github.com/Shopify/toxiproxy/v2"
package = "github.com/Shopify/toxiproxy/v2/cmd/server"
program = "server"
module_sum = "{sum}"
binary_sha256 = {{ "{go} linux/amd64" = "{binary}" }}
"""


def built_with(gocache: Path) -> dict:
    """impls.install's `installers`: a Go implementation built with the session's Go build cache
    (conftest.go_build_cache), every other registry as refbench installs it."""
    return {"go": functools.partial(impls._install_go, gocache=gocache)}


@pytest.mark.slow
def test_the_go_module_proxy_installs_pinned_and_refuses_another_hash(tmp_path, monkeypatch, go_build_cache):
    """A small module (toxiproxy's server, whose reproducible binary pins.py pins) as a user declares it.
    Built with the session's Go build cache (go_build_cache), so its second build links only."""
    from refbench.tools import find_tool
    if not find_tool("go"):
        need("go", "building an implementation from the Go module proxy")
    if pins.current_platform() != "linux/amd64":
        pytest.skip("the binary pin below is linux/amd64's")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    go_installer = built_with(go_build_cache)
    binary = pins.pin_for("toxiproxy-server", "linux/amd64").sha256
    real_sum = "h1:" + "x" * 43
    probe = _user_impl(tmp_path, TOXIPROXY.format(sum=real_sum, go=pins.TOOLS_GO, binary=binary), "toxiproxy")
    from refbench.tools import go
    real_sum = impls.module_sum(probe, go(), {**pins.build_env(), "GOFLAGS": impls.GO_FLAGS})
    assert real_sum.startswith("h1:")
    with pytest.raises(RefbenchError, match="refusing toxiproxy@v2.12.0: the module proxy's hash is h1:"):
        impls.install(probe, installers=go_installer)  # the declared h1:xxx is not the module's
    good = _user_impl(tmp_path, TOXIPROXY.format(sum=real_sum, go=pins.TOOLS_GO, binary=binary), "toxiproxy")
    got = impls.install(good, installers=go_installer)
    assert got.built_now and pins.sha256_of(got.program) == binary
    assert (go_build_cache / "README").is_file()  # the build went through the given cache, which stays
    wrong = _user_impl(tmp_path, TOXIPROXY.format(sum=real_sum, go=pins.TOOLS_GO, binary="0" * 64), "toxiproxy")
    shutil.rmtree(impls.install_dir(wrong), ignore_errors=True)
    with pytest.raises(RefbenchError, match="not the pinned bytes"):
        impls.install(wrong, installers=go_installer)
    assert not impls.install_dir(wrong).exists()


@pytest.mark.slow
def test_a_ref_beside_an_implementation_end_to_end(s5_origin, builds_dir, tmp_path, implementations_cache):
    """s5cmd's fixture commit beside s3cmd on the embedded MinIO: one fixture, one check, both decided."""
    from refbench.tools import find_tool
    if not find_tool("hyperfine"):
        need("hyperfine", "timing the commands")
    out = tmp_path / "out"
    from conftest import run_bench
    proc = run_bench("-s", "v1.0.0", "--impl", "s3cmd", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     "--only", "s3 clients, small files", "--quick", "-r", "3", "-w", "1", "--rounds", "3",
                     "--budget", "none", "--no-profile", "-o", str(out / "summary.md"),
                     "--json", str(out / "results.json"), cwd=tmp_path, env=implementations_cache)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    res = rs.load(out / "results.json")
    assert [b.label for b in res.builds] == ["v1.0.0", "s3cmd 2.4.0"]
    steps = {st.name: st for _, st in res.steps()}
    assert set(steps) == {"upload", "download", "remove"}
    assert all(c.verdict != Verdict.NOT_SUPPORTED for st in steps.values() for c in st.comparisons)
    download = steps["download"]
    assert {b.check for b in download.builds.values()} == {"identical"} and not download.check_differs
    impl = res.builds[1]  # run by absolute path from its sealed install, never found on PATH
    assert os.path.isabs(impl.binary) and "/implementations/s3cmd-2.4.0-" in impl.binary
    assert (impl.kind, impl.registry) == ("implementation", "pypi")


@pytest.mark.slow
def test_a_named_variants_flags_reach_an_implementation_end_to_end(s5_origin, builds_dir, tmp_path,
                                                                  implementations_cache):
    """s3cmd (the cheapest to install: PyPI, cached) beside itself with flags=--dry-run, placed where
    s3cmd takes its options: the variant's upload asks MinIO for no PutObject, the plain one's for
    one per object (the embedded MinIO's request counts, exact)."""
    from refbench.tools import find_tool
    if not find_tool("hyperfine"):
        need("hyperfine", "timing the commands")
    out = tmp_path / "out"
    from conftest import run_bench
    proc = run_bench("-s", "v1.0.0", "--impl", "s3cmd", "--variant", "s3cmd-dry=impl:s3cmd,flags=--dry-run",
                     "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     "--only", "s3 clients, small files/upload", "--quick", "-r", "2", "-w", "0", "--rounds", "2",
                     "--budget", "none", "--no-profile", "--no-rss", "--json", str(out / "results.json"), cwd=tmp_path,
                     env=implementations_cache)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    res = rs.load(out / "results.json")
    assert [b.label for b in res.builds] == ["v1.0.0", "s3cmd 2.4.0", "s3cmd-dry"]
    assert tuple(res.builds[2].flags) == ("--dry-run",) and res.builds[2].kind == "implementation"
    (_, upload), = list(res.steps())
    assert "/s3cmd --dry-run -q --no-ssl" in upload.builds["s3cmd-dry"].command
    puts = {lab: r.by_api.get("PutObject", 0) for lab, r in upload.requests.items()}
    assert puts["s3cmd 2.4.0"] == 200 and puts["s3cmd-dry"] == 0, puts


def test_rclones_upload_starts_every_run_from_an_empty_destination():
    """rclone copy skips what the destination holds already (same size and modtime or MD5), so each
    of its upload steps empties, before every run, the very destination its command writes to."""
    rclone = impls.bundled()["rclone"]
    for sc in ("s3 clients, small files", "s3 clients, large file"):
        step = rclone.scenarios[sc]["steps"]["upload"]
        dest = re.findall(r"\{\{[^}]*\}\}", step["command"])[-1]
        assert " delete " in step["prepare"] and step["prepare"].endswith(dest), (sc, step)


def test_shards_of_a_mixed_run_merge_with_the_implementation_as_a_build(scenarios, tmp_path):
    for i in (1, 2):
        proc = bench(scenarios, tmp_path / f"s{i}", "-s", "v1.0.0", "--impl", "other-cli", "--shard", f"{i}/2")
        assert proc.returncode == EXIT_OK, proc.stderr
    merged = run_cli("merge", *(tmp_path / f"s{i}" / "results.json" for i in (1, 2)), "-o", tmp_path / "m.json")
    assert merged.returncode == EXIT_OK, merged.stderr
    joined = rs.load(tmp_path / "m.json")
    assert [(b.label, b.kind) for b in joined.builds] == [("v1.0.0", "tag"), ("other-cli 3.1", "implementation")]
    verdicts = {st.name: [c.verdict for c in st.comparisons if c.metric == "wall"] for _, st in joined.steps()}
    assert verdicts == {"list": [Verdict.NOT_SUPPORTED], "copy": [Verdict.SLOWER]}


THIRD = SCENARIOS + """
[implementations.third-cli]
version = "0.9"
registry = "go"
package = "example.com/third/cmd/third"
program = "third"
module_sum = "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

  [implementations.third-cli.scenarios.tiny.steps.copy]
  command = "{{ bin }} copy {{ fixture }} {{ work }}"
"""


def test_the_scoreboard_ranks_refs_and_implementations_alike(tmp_path, monkeypatch):
    path = scenarios_file(monkeypatch, tmp_path, THIRD)
    proc = bench(path, tmp_path, "-s", "v1.0.0", "--impl", "other-cli", "--impl", "third-cli",
                 binaries={"v1.0.0": "fake-1.00", "other-cli": "fake-2.00", "third-cli": "fake-0.50"})
    assert proc.returncode == EXIT_OK, proc.stderr
    res = rs.load(tmp_path / "results.json")
    assert res.builds[2].source == "go" and res.builds[2].label == "third-cli 0.9"
    # over the steps every build ran (copy): third-cli's half the time is 0.5, not diluted by list's 1.0
    assert {k: round(v["geomean_vs_baseline"], 1) for k, v in res.scoreboard.items()} == \
        {"v1.0.0": 1.0, "other-cli 3.1": 2.0, "third-cli 0.9": 0.5}
    board = (tmp_path / "summary.md").read_text().split("### Scoreboard", 1)[1]
    assert board.index("| third-cli 0.9") < board.index("| v1.0.0") < board.index("| other-cli 3.1")


def test_results_written_before_implementations_still_load_as_refs_builds():
    old = rs.load(ROOT / "tests" / "data" / "results-demo.json")
    assert old.builds and all(b.registry is None and b.kind != impls.KIND for b in old.builds)
    assert "registry" not in json.dumps(old.to_json()["builds"])  # a ref's build writes no registry key


def test_a_named_variant_of_an_implementation_runs_it_with_its_environment(scenarios, tmp_path):
    """The settings its docs recommend for bulk transfers, as a build of its own: named, env only."""
    proc = bench(scenarios, tmp_path, "-s", "v1.0.0", "--impl", "other-cli",
                 "--variant", "other-bulk=impl:other-cli,env=OTHER_THREADS=16")
    assert proc.returncode == EXIT_OK, proc.stderr
    res = rs.load(tmp_path / "results.json")
    assert [b.label for b in res.builds] == ["v1.0.0", "other-cli 3.1", "other-bulk"]
    bulk = res.builds[2]
    assert (bulk.kind, bulk.ref, dict(bulk.env)) == ("implementation", "other-cli@3.1", {"OTHER_THREADS": "16"})
    copy = next(st for _, st in res.steps() if st.name == "copy")
    assert "OTHER_THREADS=16" in copy.builds["other-bulk"].command and "HOME=" in copy.builds["other-bulk"].command
    assert "OTHER_THREADS" not in copy.builds["other-cli 3.1"].command
    bad = bench(scenarios, tmp_path / "bad", "-s", "v1.0.0", "--variant", "x=impl:other-cli,go=1.25")
    assert bad.returncode == EXIT_ERROR and "an implementation takes env= and flags=, not go=" in bad.stderr


def test_a_named_variant_of_an_implementation_puts_its_flags_where_that_client_takes_them(scenarios, tmp_path):
    """flags= apply to both kinds (issue 37): an implementation's own command line, at its `{{ extra }}`,
    in the label's build as for a ref. -sf's flags are the target's and reach no implementation."""
    proc = bench(scenarios, tmp_path, "-s", "v1.0.0", "--impl", "other-cli", "-sf", "--target-only",
                 "--variant", "other-fast=impl:other-cli,flags=--threads 16 --no-check,env=OTHER_X=1")
    assert proc.returncode == EXIT_OK, proc.stderr
    res = rs.load(tmp_path / "results.json")
    assert [b.label for b in res.builds] == ["v1.0.0", "other-cli 3.1", "other-fast"]
    fast = res.builds[2]
    assert (fast.kind, tuple(fast.flags), dict(fast.env)) == ("implementation", ("--threads", "16", "--no-check"),
                                                              {"OTHER_X": "1"})
    copy = next(st for _, st in res.steps() if st.name == "copy")
    assert " --threads 16 --no-check copy --own-defaults" in copy.builds["other-fast"].command
    assert "--threads" not in copy.builds["other-cli 3.1"].command  # the plain install: its own defaults
    assert not any("--target-only" in copy.builds[k].command for k in ("other-cli 3.1", "other-fast"))
    builds_table = (tmp_path / "summary.md").read_text().split("### Builds", 1)[1].split("###", 1)[0]
    assert "other-fast" in builds_table and "--threads 16 --no-check" in builds_table


def test_flags_on_an_implementation_whose_commands_place_none_are_refused(tmp_path, monkeypatch):
    """A user's implementation without `{{ extra }}` anywhere: the flags would reach nothing."""
    path = scenarios_file(monkeypatch, tmp_path, THIRD)
    proc = bench(path, tmp_path, "-s", "v1.0.0", "--variant", "t=impl:third-cli,flags=--fast")
    assert proc.returncode == EXIT_ERROR, proc.stderr
    assert "--variant t=impl:third-cli: flags= go where third-cli 0.9's commands place {{ extra }}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_every_bundled_implementation_places_a_variants_flags_in_every_command_that_runs_it():
    """Each bundled client's commands (setup, steps, cleanup, teardown) take a named variant's flags,
    as a ref's do: every template that runs the program has `{{ extra }}` (Helia: its add commands)."""
    for impl in impls.bundled().values():
        assert impl.takes_flags, impl.name
        for body in impl.scenarios.values():
            templates = [*(body.get(k) for k in ("setup", "teardown")),
                         *(v for st in body["steps"].values() for v in st.values())]
            for t in filter(None, templates):
                runs_it = t.lstrip("{%if not versioned %}").startswith("{{ bin }}") and " get " not in t
                assert not runs_it or "{{ extra }}" in t, (impl.name, t)


@pytest.mark.slow
def test_a_go_implementation_is_built_from_a_module_cache_of_its_own(tmp_path, monkeypatch, go_build_cache):
    """Review35d HIGH 3: go answered `go mod download` from the user's (restored) module cache's
    .ziphash and compiled its unpacked source unhashed, so a planted main.go was built and sealed.
    A stand-in module on a file:// proxy (GONOSUMDB only because it is not in sum.golang.org). Built
    with the session's Go build cache (go_build_cache: the standard library compiled once), which
    never held the planted source; the install's own build cache is test_trust_toolchain's."""
    import subprocess
    from refbench.tools import find_tool
    if not find_tool("go"):
        need("go", "building an implementation from the Go module proxy")
    proxy = module_proxy(tmp_path, "example.com/tool",
                         {"main.go": 'package main\nimport "fmt"\nfunc main() { fmt.Println("genuine tool") }\n'})
    user_cache = tmp_path / "gomod"
    for k, v in {"XDG_CACHE_HOME": tmp_path / "cache", "XDG_CONFIG_HOME": tmp_path / "config",
                 "GOMODCACHE": user_cache, "GOCACHE": tmp_path / "gocache",
                 "GOPROXY": f"file://{proxy}", "GONOSUMDB": "example.com"}.items():
        monkeypatch.setenv(k, str(v))
    from refbench.tools import go
    env = {**pins.build_env(), "GOFLAGS": "-mod=mod -modcacherw"}
    pinned = json.loads(subprocess.run([go(), "mod", "download", "-json", "example.com/tool@v1.0.0"], env=env,
                                       cwd=tmp_path, capture_output=True, text=True, check=True).stdout)["Sum"]
    (user_cache / "example.com" / "tool@v1.0.0" / "main.go").write_text(
        'package main\nimport "fmt"\nfunc main() { fmt.Println("PLANTED") }\n')  # the restored cache's edit
    impl = impls.from_table("tool", {"version": "v1.0.0", "registry": "go", "package": "example.com/tool",
                                     "module": "example.com/tool", "module_sum": pinned, "program": "tool"},
                            "implementations.tool", lambda *a: ValueError(a), "test")
    got = impls.install(impl, installers=built_with(go_build_cache))
    out = subprocess.run([str(got.program)], capture_output=True, text=True).stdout
    assert out.strip() == "genuine tool", out
    assert not (impls.install_dir(impl) / "gomodcache").exists()  # the install's own cache is removed after
