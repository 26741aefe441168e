"""The build cache and its errors, through builds.Builder on a throw-away local origin holding a
stdlib-only Go program (no module download: a build takes about a second): built once and then
reused, rebuilt when what made it changed or its binary no longer matches its recorded hash,
byte-identical binaries for the same code, exported builds reused, and every failure a one-line
error that names the ref, the commit and the log, with nothing cached from it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import need
from origins import git, local_go, new_origin, toolchain_line
from refbench import builds as bl
from refbench.config import TargetSpec
from refbench.errors import BuildError, RefError

MAIN = 'package main\n\nimport "fmt"\n\nfunc main() {{ fmt.Println("{word}") }}\n'
GOMOD = "module example.com/hello\n\ngo 1.21\n"  # + toolchain_line(): built with this machine's Go


@pytest.fixture(scope="module")
def origin(tmp_path_factory):
    if not shutil.which("go"):
        need("go", "run `make setup`")
    root = tmp_path_factory.mktemp("hello-origin")
    o = new_origin(root)
    o.commit("one", {"go.mod": GOMOD + toolchain_line(), "main.go": MAIN.format(word="one")}, "one", tags=["v1.0.0"])
    o.commit("docs", {"README.md": "same code\n"}, "docs only", tags=["v1.0.1"])
    o.commit("two", {"main.go": MAIN.format(word="two")}, "two", tags=["v1.1.0"])
    o.commit("broken", {"main.go": "package main\n\nfunc main() { not go }\n"}, "broken", branch="broken",
             parent="two")
    git(o.work, "checkout", "-q", "master")
    return o


def target(**kw) -> TargetSpec:
    return TargetSpec(**{"name": "hello", "repo": "", "binary": "hello", "build": ("go", "build", "-o", "{out}", "."),
                          "backend": "s3", **kw})


def builder(origin, builds_dir: Path, **kw) -> bl.Builder:
    return bl.Builder(kw.pop("target", None) or target(), builds_dir, repo_url=str(origin.path), **kw)


def run(binary: Path) -> str:
    return subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.strip()


def test_a_ref_is_built_once_then_reused_from_the_cache(origin, tmp_path):
    b = builder(origin, tmp_path)
    first = b.build(b.resolve("v1.0.0"), "v1.0.0")
    assert first.built_now and run(first.binary) == "one"
    meta = json.loads((first.binary.parent / "build.json").read_text())
    assert meta["sha"] == first.ref.sha and meta["binary_sha256"] == first.binary_sha256
    again = builder(origin, tmp_path).build(b.resolve("v1.0.0"), "v1.0.0")  # a new run, the same cache
    assert not again.built_now and again.build_seconds == 0.0
    assert (again.binary, again.binary_sha256) == (first.binary, first.binary_sha256)
    assert again.record().cached and not first.record().cached


def test_the_same_code_gives_a_byte_identical_binary(origin, tmp_path):
    """v1.0.1 only adds a README: no VCS stamp and no paths in the binary, so the two builds are
    the same bytes (what lets a run answer `identical binary` without measuring)."""
    b = builder(origin, tmp_path)
    one, docs, two = (b.build(b.resolve(r), r) for r in ("v1.0.0", "v1.0.1", "v1.1.0"))
    assert one.ref.sha != docs.ref.sha and one.binary != docs.binary
    assert one.binary_sha256 == docs.binary_sha256 != two.binary_sha256


def test_a_cached_binary_that_no_longer_matches_its_hash_is_rebuilt(origin, tmp_path):
    b = builder(origin, tmp_path)
    first = b.build(b.resolve("v1.0.0"), "v1.0.0")
    os.chmod(first.binary, 0o755)
    first.binary.write_bytes(first.binary.read_bytes() + b"tampered")
    again = builder(origin, tmp_path).build(b.resolve("v1.0.0"), "v1.0.0")
    assert again.built_now and again.binary_sha256 == first.binary_sha256 and run(again.binary) == "one"


def test_another_build_command_or_goflags_rebuilds(origin, tmp_path, monkeypatch):
    b = builder(origin, tmp_path)
    b.build(b.resolve("v1.0.0"), "v1.0.0")
    other = builder(origin, tmp_path, target=target(build=("go", "build", "-trimpath", "-o", "{out}", ".")))
    assert other.build(other.resolve("v1.0.0"), "v1.0.0").built_now
    monkeypatch.setenv("GOFLAGS", "-ldflags=-s")
    flags = builder(origin, tmp_path, target=target(build=("go", "build", "-trimpath", "-o", "{out}", ".")))
    assert flags.build(flags.resolve("v1.0.0"), "v1.0.0").built_now


def test_an_exported_build_is_reused_from_its_new_place(origin, tmp_path):
    b = builder(origin, tmp_path / "cache")
    built = b.build(b.resolve("v1.1.0"), "v1.1.0")
    copied = b.export(built, tmp_path / "artifact")
    assert copied.read_bytes() == built.binary.read_bytes()
    elsewhere = builder(origin, tmp_path / "artifact", offline=True)
    reused = elsewhere.build(built.ref, "v1.1.0")
    assert not reused.built_now and reused.binary == copied.resolve()


def test_a_commit_that_does_not_build_is_one_error_naming_it_and_leaves_no_binary(origin, tmp_path):
    b = builder(origin, tmp_path)
    ref = b.resolve("broken")
    with pytest.raises(BuildError) as e:
        b.build(ref, "broken")
    msg = str(e.value)
    assert "\n" not in msg and ref.sha[:10] in msg and "build.log" in msg
    assert f"failed with {local_go()} (exit 1; go.mod asks for toolchain {local_go()})" in msg  # which Go, and why
    assert e.value.sha == ref.sha and "syntax error" in (e.value.detail or "")  # the compiler's words
    assert b.cached(ref) is None and not (b.build_dir(ref.sha) / "hello").exists()
    with pytest.raises(BuildError):  # tried again, not answered from a half-made cache
        b.build(ref, "broken")


def test_go_missing_is_a_build_error_of_no_commit(origin, tmp_path, monkeypatch):
    b = builder(origin, tmp_path)
    ref = b.resolve("v1.0.0")
    b.toolchain()  # known before PATH loses go
    only_git = tmp_path / "bin"
    only_git.mkdir()
    (only_git / "git").symlink_to(shutil.which("git"))
    monkeypatch.setenv("PATH", str(only_git))
    with pytest.raises(BuildError, match="go not found on PATH"):
        b.build(ref, "v1.0.0")


def test_refs_that_do_not_exist_and_bad_settings_are_named(origin, tmp_path):
    b = builder(origin, tmp_path)
    with pytest.raises(RefError, match="v9.9.9"):
        b.resolve("v9.9.9")
    with pytest.raises(RefError, match=r"PR #42 not found in .*no refs/pull/42/head"):
        b.resolve("42")
    with pytest.raises(BuildError, match="unknown source 'svn'"):
        builder(origin, tmp_path, source="svn")
    with pytest.raises(BuildError, match="declares no Go module/package; --source module needs both"):
        builder(origin, tmp_path, source="module")


def test_labels_are_unique_among_the_compared_builds(origin, tmp_path):
    b = builder(origin, tmp_path)
    one = b.resolve("v1.0.0")
    assert bl.unique_labels([one, one, b.resolve("v1.1.0"), one]) == ["v1.0.0", "v1.0.0 #2", "v1.1.0", "v1.0.0 #3"]
