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
from origins import git, local_go, module_proxy, new_origin, toolchain_line
from refbench import builds as bl, trust
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
    # v1.0.0's tree under another commit (a reworded message, a rebase): the same source
    o.commit("reworded", {}, "one, reworded", branch="reworded", parent="one")
    git(o.work, "checkout", "-q", "master")
    return o


def target(**kw) -> TargetSpec:
    return TargetSpec(**{"name": "hello", "repo": "", "binary": "hello", "build": ("go", "build", "-o", "{out}", "."),
                          "backend": "s3", **kw})


def another_jobs_key(monkeypatch, tmp_path: Path) -> None:
    """From here on the key is another job's: the machine's settings name another config directory
    (XDG_CONFIG_HOME, read through paths.Layout), whose cache-key is made at its first use."""
    monkeypatch.delenv(trust.KEY_FILE_ENV, raising=False)
    before = trust.key_id()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "another-jobs-config"))
    assert trust.key_id() != before


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


def test_a_commit_with_the_tree_of_a_built_one_reuses_its_binary(origin, tmp_path):
    """A `go build` under the reproducible flags reads the tree and nothing of the commit: another
    commit of the same tree gets the built binary, copied under a sealed record of its own."""
    b = builder(origin, tmp_path)
    one = b.build(b.resolve("v1.0.0"), "v1.0.0")
    from refbench import dryrun
    (planned,) = dryrun.planned_builds(b, [b.resolve("reworded")], ["reworded"])  # what a dry run says
    assert (planned.cached, planned.same_tree_as) == (False, one.ref.sha)
    same = b.build(b.resolve("reworded"), "reworded")
    assert one.built_now and not same.built_now and same.build_seconds == 0.0 and same.record().cached
    assert same.ref.sha == origin.shas["reworded"] != one.ref.sha
    assert same.binary != one.binary and same.binary_sha256 == one.binary_sha256 and run(same.binary) == "one"
    meta = json.loads((same.binary.parent / "build.json").read_text())
    tree = git(origin.work, "rev-parse", "v1.0.0^{tree}")
    assert (meta["sha"], meta["tree"], meta["same_tree_as"]) == (same.ref.sha, tree, one.ref.sha)
    assert builder(origin, tmp_path).cached(same.ref) == same.binary  # its own sealed entry from now on
    assert b.build(b.resolve("v1.0.1"), "v1.0.1").built_now  # a README more is another tree: built


def test_a_same_tree_binary_that_no_longer_matches_its_seal_is_not_reused(origin, tmp_path):
    b = builder(origin, tmp_path)
    one = b.build(b.resolve("v1.0.0"), "v1.0.0")
    os.chmod(one.binary, 0o755)
    one.binary.write_bytes(one.binary.read_bytes() + b"planted")
    same = b.build(b.resolve("reworded"), "reworded")
    assert same.built_now and same.binary_sha256 == one.binary_sha256 and run(same.binary) == "one"


@pytest.mark.parametrize("how", ["a build command that may read the commit", "-buildvcs back on in GOFLAGS",
                                 "another key's record"])
def test_a_build_that_may_depend_on_the_commit_or_is_not_sealed_here_is_not_shared_by_tree(
        origin, tmp_path, monkeypatch, how):
    kw = {"target": target(build=("sh", "-c", "go build -o {out} ."))} if how.startswith("a build command") else {}
    if how.startswith("-buildvcs"):
        kw["goflags"] = "-buildvcs=true"
    b = builder(origin, tmp_path, **kw)
    one = b.build(b.resolve("v1.0.0"), "v1.0.0")
    assert one.built_now
    if how == "another key's record":
        another_jobs_key(monkeypatch, tmp_path)
    assert not b.tree_determined(one.ref.toolchain) if kw else b.tree_determined(None)
    same = b.build(b.resolve("reworded"), "reworded")
    assert same.built_now and run(same.binary) == "one"


def test_a_cached_binary_that_no_longer_matches_its_hash_is_rebuilt(origin, tmp_path):
    b = builder(origin, tmp_path)
    first = b.build(b.resolve("v1.0.0"), "v1.0.0")
    os.chmod(first.binary, 0o755)
    first.binary.write_bytes(first.binary.read_bytes() + b"tampered")
    again = builder(origin, tmp_path).build(b.resolve("v1.0.0"), "v1.0.0")
    assert again.built_now and again.binary_sha256 == first.binary_sha256 and run(again.binary) == "one"


def test_a_tampered_binary_with_a_matching_tampered_record_is_rebuilt(origin, tmp_path):
    """Whoever swaps a cached binary can rewrite its build.json too: the hash beside the binary
    proves nothing. The record's seal (an HMAC under a key that is in no cache) does."""
    b = builder(origin, tmp_path)
    first = b.build(b.resolve("v1.0.0"), "v1.0.0")
    meta_path = first.binary.parent / "build.json"
    os.chmod(first.binary, 0o755)
    first.binary.write_bytes(first.binary.read_bytes() + b"planted")
    meta = json.loads(meta_path.read_text())
    meta["binary_sha256"] = bl.file_sha256(first.binary)  # the record agrees with the planted binary
    meta_path.write_text(json.dumps(meta))
    again = builder(origin, tmp_path).build(b.resolve("v1.0.0"), "v1.0.0")
    assert again.built_now and again.binary_sha256 == first.binary_sha256 and run(again.binary) == "one"


@pytest.mark.parametrize("forgery", ["no seal", "no hash", "another key"])
def test_a_record_that_is_not_sealed_under_this_key_is_rebuilt(origin, tmp_path, monkeypatch, forgery):
    b = builder(origin, tmp_path)
    first = b.build(b.resolve("v1.0.0"), "v1.0.0")
    meta_path = first.binary.parent / "build.json"
    meta = json.loads(meta_path.read_text())
    if forgery == "no seal":
        del meta["seal"]
    elif forgery == "no hash":  # an entry from before hashes were recorded is no longer trusted
        del meta["binary_sha256"], meta["seal"]
    meta_path.write_text(json.dumps(meta))
    if forgery == "another key":  # a job with its own key (a pull request's) made the entry
        another_jobs_key(monkeypatch, tmp_path)
    again = builder(origin, tmp_path).build(b.resolve("v1.0.0"), "v1.0.0")
    assert again.built_now and run(again.binary) == "one"
    assert builder(origin, tmp_path).cached(again.ref) == again.binary  # sealed under this key now


def test_a_planted_hook_or_config_in_a_cached_clone_does_not_run(origin, tmp_path):
    """A restored cache may carry the bare clone's hooks/ and config: `git worktree add` would run
    post-checkout, and a config can name a hooks directory or an fsmonitor command."""
    b = builder(origin, tmp_path)
    b.build(b.resolve("v1.0.0"), "v1.0.0")
    clone = b.clone_dir
    ran = tmp_path / "hook-ran"
    script = f"#!/bin/sh\necho \"$0\" >> {ran}\n"
    for where in (clone / "hooks", tmp_path / "planted-hooks"):
        where.mkdir(exist_ok=True)
        for hook in ("post-checkout", "reference-transaction", "post-index-change"):
            (where / hook).write_text(script)
            (where / hook).chmod(0o755)
    with open(clone / "config", "a") as fh:
        fh.write(f"[core]\n\thooksPath = {tmp_path / 'planted-hooks'}\n\tfsmonitor = {tmp_path / 'planted-hooks' / 'post-checkout'}\n")
    (clone / "info").mkdir(exist_ok=True)
    (clone / "info" / "attributes").write_text("*.go filter=planted\n")
    again = builder(origin, tmp_path)  # a new run opens the cached clone
    built = again.build(again.resolve("v1.1.0"), "v1.1.0")
    assert built.built_now and run(built.binary) == "two"
    assert not ran.exists(), ran.read_text()
    assert "hooksPath" not in (clone / "config").read_text() and not (clone / "hooks").exists()
    assert not (clone / "info" / "attributes").exists()


def test_another_build_command_or_goflags_rebuilds(origin, tmp_path, monkeypatch):
    b = builder(origin, tmp_path)
    b.build(b.resolve("v1.0.0"), "v1.0.0")
    other = builder(origin, tmp_path, target=target(build=("go", "build", "-trimpath", "-o", "{out}", ".")))
    assert other.build(other.resolve("v1.0.0"), "v1.0.0").built_now
    flags = builder(origin, tmp_path, target=target(build=("go", "build", "-trimpath", "-o", "{out}", ".")),
                    goflags="-ldflags=-s")
    assert flags.build(flags.resolve("v1.0.0"), "v1.0.0").built_now


def test_the_users_goflags_come_from_the_command_line_not_the_environment(origin, tmp_path, monkeypatch):
    """Issue 38 part 4: the environment is read once, at the command line (MachineSettings), and
    passed down; a Builder reads no GOFLAGS of its own."""
    from refbench import pipeline, runenv
    assert runenv.MachineSettings.from_environ({"GOFLAGS": " -ldflags=-s "}).goflags == "-ldflags=-s"
    monkeypatch.setenv("GOFLAGS", "-ldflags=-s")
    assert "-ldflags=-s" not in builder(origin, tmp_path)._go_env()["GOFLAGS"]
    site = runenv.BuildSite(pipeline.RunRequest(refs=(), target="hello", repo=str(origin.path),
                                                builds_dir=str(tmp_path)), target())
    made = runenv.real(runenv.MachineSettings(goflags="-tags=x")).builder(site)
    assert made._go_env()["GOFLAGS"].endswith(" -tags=x")


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


def test_a_changed_module_in_the_module_cache_fails_the_build_naming_it(tmp_path, monkeypatch):
    """A restored module cache (GOMODCACHE) with a module changed after download: `go mod verify`
    stops the build instead of building the change in; the failure is no commit's."""
    if not shutil.which("go"):
        need("go", "run `make setup`")
    proxy = module_proxy(tmp_path, "example.com/dep", {"dep.go": 'package dep\n\nfunc Word() string { return "dep" }\n'})
    env = {"GOPROXY": f"file://{proxy}", "GONOSUMDB": "example.com", "GONOSUMCHECK": "1",
           "GOMODCACHE": str(tmp_path / "modcache"), "GOFLAGS": "-mod=mod"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    o = new_origin(tmp_path)
    main = 'package main\n\nimport (\n\t"fmt"\n\t"example.com/dep"\n)\n\nfunc main() {{ fmt.Println(dep.Word(), "{n}") }}\n'
    o.commit("one", {"go.mod": GOMOD + toolchain_line() + "\nrequire example.com/dep v1.0.0\n",
                     "main.go": main.format(n=1)}, "one", tags=["v1.0.0"])
    subprocess.run(["go", "mod", "tidy"], cwd=o.work, check=True, capture_output=True,
                   env={**os.environ, "GOTOOLCHAIN": "local"})
    git(o.work, "add", "go.sum")
    git(o.work, "commit", "-q", "-m", "go.sum")
    git(o.work, "tag", "v1.0.1")
    git(o.work, "push", "-q", "origin", "HEAD:master", "v1.0.1")
    o.commit("two", {"main.go": main.format(n=2)}, "two", tags=["v1.1.0"])
    monkeypatch.setenv("GOFLAGS", "")
    b = builder(o, tmp_path / "builds")
    assert run(b.build(b.resolve("v1.0.1"), "v1.0.1").binary) == "dep 1"
    planted = tmp_path / "modcache" / "example.com" / "dep@v1.0.0" / "dep.go"
    planted.chmod(0o644)
    planted.write_text('package dep\n\nfunc Word() string { return "planted" }\n')
    ref = b.resolve("v1.1.0")
    with pytest.raises(BuildError, match="Go module cache holds a module that is not what its checksum says") as e:
        b.build(ref, "v1.1.0")
    assert e.value.sha is None and "example.com/dep" in (e.value.detail or "")
    assert b.cached(ref) is None


def test_goflags_leave_out_buildvcs_before_go_1_18():
    """Go 1.17 refuses every GOFLAGS over an unknown -buildvcs (s5cmd's commits of 2023 ask for go
    1.17): those builds get -trimpath alone; 1.18 on, and this machine's Go, get both."""
    from refbench.builds import REPRODUCIBLE_GOFLAGS, reproducible_goflags
    assert reproducible_goflags("go1.17.13") == "-trimpath"
    assert reproducible_goflags("go1.13.15") == "-trimpath"
    assert reproducible_goflags("go1.18") == REPRODUCIBLE_GOFLAGS
    assert reproducible_goflags("go1.24.4") == REPRODUCIBLE_GOFLAGS
    assert reproducible_goflags(None) == REPRODUCIBLE_GOFLAGS
