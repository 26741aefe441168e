"""Issue 35: a Go toolchain in the module cache (GOMODCACHE/golang.org/toolchain@...) ran as it was
found when GOTOOLCHAIN switched to it: Go checks a toolchain only when it downloads one, and a
module cache may come from a cache restore. refbench now checks the unpacked toolchain against the
checksum database's h1: before any go command switches to it (toolchain.verify_cached)."""
from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from conftest import need
from refbench import toolchain as tc
from refbench.errors import BuildError
from test_toolchain import builder, go125  # noqa: F401  (go125: a pytest fixture)

PREFIX = "golang.org/toolchain@v0.0.1-go1.99.0.linux-amd64"
FILES = {"VERSION": b"go1.99.0\n", "bin/go": b"\x7fELF the go command", "src/cmd/_go.mod": b"module cmd\n",
         "src/cmd/go/main.go": b"package main\n"}


def zip_h1(path: Path) -> str:
    """Go's dirhash.HashZip, written out apart from the code under test."""
    with zipfile.ZipFile(path) as z:
        names = sorted(n for n in z.namelist() if not n.endswith("/"))
        lines = "".join(f"{hashlib.sha256(z.read(n)).hexdigest()}  {n}\n" for n in names)
    return "h1:" + base64.b64encode(hashlib.sha256(lines.encode()).digest()).decode()


def _unpacked(tmp_path: Path) -> tuple[Path, str]:
    """A toolchain zip and the directory Go unpacks it to (each _go.mod also as go.mod)."""
    zpath, d = tmp_path / "tc.zip", tmp_path / PREFIX
    with zipfile.ZipFile(zpath, "w") as z:
        for name, data in FILES.items():
            z.writestr(f"{PREFIX}/{name}", data)
    for name, data in FILES.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
    (d / "src/cmd/go.mod").write_bytes(FILES["src/cmd/_go.mod"])
    return d, zip_h1(zpath)


def test_an_unpacked_toolchain_hashes_as_the_zip_it_came_from(tmp_path):
    d, want = _unpacked(tmp_path)
    assert tc.dir_hash(d, PREFIX) == want


@pytest.mark.parametrize("plant", ["a changed go", "an added file", "a go.mod unlike its _go.mod", "a link"])
def test_a_changed_unpacked_toolchain_does_not_hash_as_its_zip(tmp_path, plant):
    d, want = _unpacked(tmp_path)
    if plant == "a changed go":
        (d / "bin/go").write_bytes(b"#!/bin/sh\ncat /proc/$PPID/environ\n")
    elif plant == "an added file":
        (d / "bin/gofmt").write_bytes(b"#!/bin/sh\n")
    elif plant == "a go.mod unlike its _go.mod":
        (d / "src/cmd/go.mod").write_bytes(b"module evil\n")
    else:
        (d / "bin/go").unlink()
        (d / "bin/go").symlink_to("/bin/true")
    try:
        got = tc.dir_hash(d, PREFIX)
    except BuildError:
        return
    assert got != want


def _plant_toolchain(name: str, modcache: Path, marker: Path) -> Path:
    """A throw-away module cache holding toolchain `name` as the real one's files (hard links),
    its download record and the checksum database's cached tiles, with bin/go replaced by a
    script that records that it ran."""
    real = Path(tc.own_caches(os.environ)["GOMODCACHE"])  # where refbench's builds fetched it, not go's default
    plat = "-".join(subprocess.run(["go", "env", "GOHOSTOS", "GOHOSTARCH"], capture_output=True, text=True,
                                   check=True).stdout.split())
    version = f"v0.0.1-{name}.{plat}"
    src = real / f"golang.org/toolchain@{version}"
    if not (src / "bin" / "go").is_file():
        need(f"Go toolchain {name} in the module cache", "the slow toolchain tests fetch it (GOTOOLCHAIN)")
    dest = modcache / f"golang.org/toolchain@{version}"
    shutil.copytree(src, dest, copy_function=os.link)
    dl = modcache / "cache/download/golang.org/toolchain/@v"
    dl.mkdir(parents=True)
    for f in (real / "cache/download/golang.org/toolchain/@v").glob(f"{version}.*"):
        if not f.name.endswith(".lock"):
            os.link(f, dl / f.name)
    shutil.copytree(real / "cache/download/sumdb", modcache / "cache/download/sumdb", copy_function=os.link)
    go = dest / "bin" / "go"
    go.parent.chmod(0o755)
    go.unlink()  # a new file: the real toolchain's bin/go (linked) stays as it is
    go.write_text(f"#!/bin/sh\necho ran >> {marker}\nexit 1\n")
    go.chmod(0o755)
    return dest


def _writable(tree: Path) -> None:
    for top, dirs, _ in os.walk(tree):
        os.chmod(top, 0o755)


@pytest.mark.slow
def test_a_planted_go_in_a_cached_toolchain_never_runs(go125, tmp_path, monkeypatch):
    """A build with Go 1.25 switched to the planted toolchain's bin/go (GOTOOLCHAIN) and ran it."""
    first = builder(go125, tmp_path / "warm")
    name = first.resolve("v1.0.0").toolchain  # the newest go1.25.N: fetched once, by the slow tests
    first.build(first.resolve("v1.0.0"), "v1.0.0")
    marker, modcache = tmp_path / "planted-go-ran", tmp_path / "modcache"
    _plant_toolchain(name, modcache, marker)
    monkeypatch.setenv("GOMODCACHE", str(modcache))
    monkeypatch.setenv("GOPROXY", "off")
    tc._VERIFIED.clear()
    (tmp_path / "builds").mkdir()
    shutil.copy(tmp_path / "warm" / tc.LIST_FILE, tmp_path / "builds" / tc.LIST_FILE)  # the proxy's listing, kept
    b = builder(go125, tmp_path / "builds")
    try:
        with pytest.raises(BuildError, match="not the one the checksum database lists") as e:
            b.build(b.resolve("v1.0.0"), "v1.0.0")
        assert e.value.sha is None  # no commit's fault
        assert not marker.exists(), "the planted bin/go ran"
    finally:
        _writable(modcache)


# ---- the toolchain listing in the builds cache ------------------------------------------------------
def test_a_planted_or_future_dated_toolchain_listing_is_not_taken(tmp_path, monkeypatch):
    """Review35d LOW 11: builds/go-toolchains.json was taken as it was while `now - listed_at` was
    under a day, so a planted one with a `listed_at` far ahead decided for ever which Go builds a
    `go 1.24` go.mod. Now a listing is sealed under the run's key and none dated ahead is taken."""
    import json
    import time
    monkeypatch.setenv("PATH", str(tmp_path / "no-go-here"))  # asking the proxy fails: only a kept listing serves
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / tc.LIST_FILE).write_text(json.dumps({"listed_at": time.time() + 10 * 365 * 86400,
                                                     "platform": "linux-amd64", "module": tc.TOOLCHAIN_MODULE,
                                                     "versions": ["go1.24.0"]}))
    with pytest.raises(BuildError, match="cannot list the Go toolchains"):
        tc.available(planted)
    ahead = tmp_path / "ahead"  # sealed, but dated ahead: refused too
    ahead.mkdir()
    tc._write_listing(ahead / tc.LIST_FILE, time.time() + 86400, "linux-amd64",
                      [tc.parse_version("go1.24.0", listed=True)])
    with pytest.raises(BuildError, match="cannot list the Go toolchains"):
        tc.available(ahead)
    kept = tmp_path / "kept"  # this machine's own, listed an hour ago: taken without asking
    kept.mkdir()
    tc._write_listing(kept / tc.LIST_FILE, time.time() - 3600, "linux-amd64",
                      [tc.parse_version("go1.24.4", listed=True)])
    assert [v.name for v in tc.available(kept)] == ["go1.24.4"]


# ---- pinned tools and Go implementations switch to TOOLS_GO only after checking it -------------------
@pytest.fixture
def planted_tools_go():
    """This machine's Go is not TOOLS_GO, and the TOOLS_GO in the module cache fails its check: what
    runs afterwards is recorded, so a test sees whether anything ran before the check. The go
    runner (pins.GoRunner) pins and implementations are given."""
    from refbench import pins
    ran: list[list[str]] = []
    checked: list[dict] = []

    class Planted(pins.GoRunner):
        def find(self):
            return "/usr/bin/go-stand-in"

        def version(self, env):
            return "go1.25.0"

        def verify(self, name, env):
            checked.append(dict(env))
            raise BuildError(f"the Go toolchain {name} in the module cache is not the checksum database's", sha=None)

        def run(self, argv, **kw):
            ran.append(list(argv))
            return subprocess.CompletedProcess(argv, 1, "", "stubbed")

    return ran, checked, Planted()


def test_a_pinned_tool_is_built_only_after_its_go_is_checked(tmp_path, monkeypatch, planted_tools_go):
    """Review35d LOW 14: pins.build_env set GOTOOLCHAIN=go1.26.8 and `refbench setup` ran go
    without toolchain.verify_cached, so a planted go1.26.8 in the module cache ran."""
    from refbench import pins
    ran, checked, runner = planted_tools_go
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(BuildError, match="not the checksum database's"):
        pins.install("minio", "go", runner=runner)
    assert ran == [] and checked and checked[0]["GOTOOLCHAIN"] == pins.TOOLS_GO


def test_a_go_implementation_is_built_after_its_go_is_checked_with_a_build_cache_of_its_own(
        tmp_path, monkeypatch, planted_tools_go):
    """Review35d LOW 14, and its note on GOCACHE: the install's go ran unchecked, with the user's
    build cache (restored beside the module cache), whose compiled packages go reuses by id."""
    from refbench import implementations as impls
    ran, checked, runner = planted_tools_go
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("GOCACHE", str(tmp_path / "users-gocache"))
    impl = impls.bundled()["rclone"]
    d = tmp_path / "slot"
    (d / "root").mkdir(parents=True)
    with pytest.raises(BuildError, match="not the checksum database's"):
        impls._install_go(impl, d, runner)
    assert ran == []  # nothing of go ran before the check
    env = checked[0]
    assert env["GOCACHE"] == str(d / "gocache") and env["GOMODCACHE"] == str(d / "gomodcache"), env
