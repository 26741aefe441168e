"""The ninth reading (issue 35, /work/wt/review35i.md): the Go module cache a cache restore brings,
one directory over from what the earlier readings closed. Each attack planted in a throw-away
module cache, and what a keyed run must do instead of trusting it."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from conftest import need
from origins import git, new_origin
from refbench import builds as bl
from refbench.errors import BuildError, RefbenchError
from test_builds import builder, run, target
from test_trust_cache import keyed  # noqa: F401  (a pytest fixture: a run given the shared key)

ROOT = Path(__file__).resolve().parent.parent
PRIVATE = "github.com/refbench-tests/private"  # fetched by go through git (GOPRIVATE), never reached
DEP_MOD = "module example.com/dep\n\ngo 1.21\n"
DEP_GO = 'package dep\n\nfunc Word() string { return "genuine" }\n'
APP_GO = 'package main\n\nimport (\n\t"fmt"\n\n\t"example.com/dep"\n)\n\nfunc main() { fmt.Println(dep.Word()) }\n'


def _builder(o, tmp_path: Path, **kw) -> bl.Builder:
    """A builder whose module cache stays removable (-modcacherw), with the machine's GOFLAGS."""
    goflags = " ".join(filter(None, ("-modcacherw", kw.pop("goflags", ""))))
    return builder(o, tmp_path / "builds", goflags=goflags, **kw)


def _go_or_fail() -> None:
    if not shutil.which("go"):
        need("go", "run `make setup`")


@pytest.fixture
def dep_proxy(tmp_path, monkeypatch):
    """A module proxy in a directory serving example.com/dep v1.0.0, and a module cache of the
    test's own (what a cache restore writes): the environment of the build."""
    _go_or_fail()
    at = tmp_path / "proxy" / "example.com" / "dep" / "@v"
    at.mkdir(parents=True)
    (at / "list").write_text("v1.0.0\n")
    (at / "v1.0.0.info").write_text(json.dumps({"Version": "v1.0.0", "Time": "2026-01-01T00:00:00Z"}))
    (at / "v1.0.0.mod").write_text(DEP_MOD)
    with zipfile.ZipFile(at / "v1.0.0.zip", "w") as z:
        z.writestr("example.com/dep@v1.0.0/go.mod", DEP_MOD)
        z.writestr("example.com/dep@v1.0.0/dep.go", DEP_GO)
    modcache = tmp_path / "modcache"
    for k, v in {"GOPROXY": f"file://{tmp_path / 'proxy'}", "GONOSUMDB": "example.com", "GONOSUMCHECK": "1",
                 "GOMODCACHE": str(modcache)}.items():
        monkeypatch.setenv(k, v)
    return modcache


def _app_origin(root: Path, where: str) -> object:
    """An origin whose program uses example.com/dep from the module at `where` ('' the root, or
    'cmd/x': a nested module, as multi-module repositories keep their programs), go.sum made by go."""
    root.mkdir(parents=True)
    o = new_origin(root)
    mod = o.work / where if where else o.work
    mod.mkdir(parents=True, exist_ok=True)
    (o.work / "go.mod").write_text("module example.com/app\n\ngo 1.21\n")
    (mod / "go.mod").write_text(f"module example.com/app{'/' + where if where else ''}\n\ngo 1.21\n\n"
                                "require example.com/dep v1.0.0\n")
    (mod / "main.go").write_text(APP_GO)
    env = {**os.environ, "GOFLAGS": "-mod=mod -modcacherw", "GOTOOLCHAIN": "local"}
    subprocess.run(["go", "mod", "tidy"], cwd=mod, env=env, check=True, capture_output=True)
    files = {str(p.relative_to(o.work)): p.read_text() for p in o.work.rglob("*")
             if p.is_file() and ".git" not in p.parts}
    o.commit("one", files, "one", tags=["v1.0.0"])
    return o


def _plant_in_unpacked(modcache: Path) -> None:
    """The dependency's unpacked directory changed; its zip and .ziphash left as downloaded."""
    d = modcache / "example.com" / "dep@v1.0.0"
    os.chmod(d, 0o755)
    (d / "dep.go").chmod(0o644)
    (d / "dep.go").write_text(DEP_GO.replace('"genuine"', '"PLANTED"'))


def _next_commit(o, name: str) -> None:
    o.commit(name, {"README.md": f"{name}\n"}, f"{name}: a README", tags=[f"v1.0.{len(o.shas)}"])


# ---- I2: a build that compiles a module other than the worktree's root one --------------------------
@pytest.mark.parametrize("where", ["cmd/x", ""])
def test_a_planted_module_compiled_by_a_nested_modules_build_is_refused_before_it_is_sealed(
        tmp_path, dep_proxy, keyed, where):
    """`go mod verify` re-hashes the unpacked modules of the worktree's root module only; a target
    built with `go build -C cmd/x` compiled the planted directory, and a keyed run sealed and ran it
    (review35i I2). What the binary was built from is now checked against its recorded sums."""
    o = _app_origin(tmp_path / "origin", where)
    build = ("go", "build", "-C", where, "-o", "{out}", ".") if where else ("go", "build", "-o", "{out}", ".")
    t = target(build=build, binary="app")
    first = _builder(o, tmp_path, target=t)
    assert run(first.build(first.resolve("v1.0.0", go="local"), "v1.0.0").binary) == "genuine"
    _plant_in_unpacked(dep_proxy)
    _next_commit(o, "two")
    again = _builder(o, tmp_path, target=t)
    ref = again.resolve("master", go="local")
    with pytest.raises(BuildError, match="not what") as e:
        again.build(ref, "master")
    assert e.value.sha is None  # the module cache's fault, not the commit's
    assert not (again.build_dir(ref.sha, ref.toolchain) / "app").exists(), "a binary was kept"


def test_a_root_module_without_go_sum_built_under_mod_mod_is_checked_too(tmp_path, dep_proxy, keyed, monkeypatch):
    """I2b: with no go.sum in the commit there is nothing for `go mod verify` to check; go fills one
    (GOFLAGS=-mod=mod, the machine's) from the genuine .ziphash and compiles the planted directory."""
    (tmp_path / "origin").mkdir()
    o = new_origin(tmp_path / "origin")
    o.commit("one", {"go.mod": "module example.com/app\n\ngo 1.21\n\nrequire example.com/dep v1.0.0\n",
                     "main.go": APP_GO}, "one", tags=["v1.0.0"])
    b = _builder(o, tmp_path, target=target(binary="app"), goflags="-mod=mod")
    assert run(b.build(b.resolve("v1.0.0", go="local"), "v1.0.0").binary) == "genuine"
    _plant_in_unpacked(dep_proxy)
    _next_commit(o, "two")
    again = _builder(o, tmp_path, target=target(binary="app"), goflags="-mod=mod")
    with pytest.raises(BuildError, match="not what"):
        again.build(again.resolve("master", go="local"), "master")


# ---- I7: a module cache's own fault is not the commit's ---------------------------------------------
def test_a_missing_ziphash_is_the_module_caches_fault_not_the_commits(tmp_path, dep_proxy):
    """`go mod verify` fails with "missing ziphash" when a restored cache lacks one: the commit was
    called one that does not build, every run, and bisect skipped it (review35i I7)."""
    o = _app_origin(tmp_path / "origin", "")
    b = _builder(o, tmp_path, target=target(binary="app"))
    b.build(b.resolve("v1.0.0", go="local"), "v1.0.0")
    (dep_proxy / "cache" / "download" / "example.com" / "dep" / "@v" / "v1.0.0.ziphash").unlink()
    _next_commit(o, "two")
    again = _builder(o, tmp_path, target=target(binary="app"))
    with pytest.raises(BuildError) as e:
        again.build(again.resolve("master", go="local"), "master")
    assert e.value.sha is None, f"the commit was blamed: {e.value}"
    assert "module cache" in str(e.value)


# ---- I5: go's VCS work directories in a restored module cache ---------------------------------------
def _plant_vcs(modcache: Path, marker: Path, tmp_path: Path) -> Path:
    """go's work directory for PRIVATE as go makes it ($GOMODCACHE/cache/vcs/<sha256 of its key>),
    whose origin runs a script through git's ext:: transport."""
    key = f"git3:https://{PRIVATE}"
    d = modcache / "cache" / "vcs" / hashlib.sha256(key.encode()).hexdigest()
    d.parent.mkdir(parents=True, exist_ok=True)
    git(tmp_path, "init", "-q", "--bare", str(d))
    Path(f"{d}.info").write_text(key)
    script = tmp_path / "evil.sh"
    script.write_text(f"#!/bin/sh\necho ran > {marker}\nexit 1\n")
    git(tmp_path, "--git-dir", str(d), "config", "protocol.ext.allow", "always")
    git(tmp_path, "--git-dir", str(d), "remote", "add", "origin", f"ext::sh {script}")
    return d


def test_a_planted_vcs_work_directory_in_the_module_cache_runs_nothing_in_a_keyed_build(
        tmp_path, keyed, monkeypatch):
    """A merged commit needs a module go fetches through git (GOPRIVATE): go ran git in the
    restored cache's work directory for it, with that directory's config, during refbench's own
    `go mod verify`, and the planted command read the key (review35i I5). It is removed first."""
    _go_or_fail()
    modcache, marker = tmp_path / "modcache", tmp_path / "ran"
    # git's fetch of the module, once nothing planted answers it, goes to a closed loopback port: only
    # loopback is ever a target of traffic (curl resolves no host it reaches through a proxy)
    for k, v in {"GOMODCACHE": str(modcache), "GOPRIVATE": "github.com/refbench-tests", "GIT_TERMINAL_PROMPT": "0",
                 "HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "NO_PROXY": "",
                 "no_proxy": ""}.items():
        monkeypatch.setenv(k, v)
    (tmp_path / "origin").mkdir()
    o = new_origin(tmp_path / "origin")
    o.commit("one", {"go.mod": f"module example.com/app\n\ngo 1.21\n\nrequire {PRIVATE} v1.0.0\n",
                     "go.sum": f"{PRIVATE} v1.0.0 h1:{'A' * 43}=\n{PRIVATE} v1.0.0/go.mod h1:{'A' * 43}=\n",
                     "main.go": "package main\n\nfunc main() {}\n"}, "one", tags=["v1.0.0"])
    _plant_vcs(modcache, marker, tmp_path)
    b = _builder(o, tmp_path, target=target(binary="app"))
    with pytest.raises(BuildError):  # the private module is out of reach here: the build fails
        b.build(b.resolve("v1.0.0", go="local"), "v1.0.0")
    assert not marker.exists(), "the planted work directory's command ran"


def test_the_action_keeps_no_vcs_work_directory_and_drops_through_no_link(tmp_path):
    """The Action neither saves nor keeps go's VCS work directories, and its drop step removes a
    link on the way to what it drops instead of following it: `chmod -R` changed a tree outside the
    cache, and `rm -rf` through a linked golang.org deleted a directory outside it (review35i I3)."""
    from ruamel.yaml import YAML
    action = YAML(typ="safe").load((ROOT / "action.yml").read_text())
    steps = {s.get("name"): s for s in action["runs"]["steps"]}
    for step in steps.values():
        paths = step.get("with", {}).get("path", "") if isinstance(step.get("with"), dict) else ""
        if "~/go/pkg/mod" in paths:
            assert "!~/go/pkg/mod/cache/vcs" in paths, step.get("name")
    script = next(s["run"] for n, s in steps.items() if n and n.startswith("Drop Go toolchains"))
    home = tmp_path / "home"
    mod = home / "go" / "pkg" / "mod"
    outside = tmp_path / "outside"
    kept = outside / "toolchain@v0.0.1-go1.99.0.linux-amd64" / "bin"
    kept.mkdir(parents=True)
    (kept / "go").write_text("theirs\n")
    kept.chmod(0o555)
    (mod / "cache" / "download").mkdir(parents=True)
    (mod / "golang.org").symlink_to(outside)  # a restored link on the way to the toolchains
    (mod / "cache" / "vcs").mkdir()
    (mod / "cache" / "vcs" / "planted").mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], env=env, check=True,
                   cwd=tmp_path)
    assert (kept / "go").read_text() == "theirs\n", "the drop step followed the link"
    assert oct(kept.stat().st_mode & 0o777) == oct(0o555), "the drop step changed a mode outside the cache"
    assert not os.path.lexists(mod / "golang.org") and not os.path.lexists(mod / "cache" / "vcs")
    kept.chmod(0o755)


def test_setups_tool_builds_drop_a_planted_vcs_work_directory_first(tmp_path, monkeypatch):
    """refbench setup's `go install` of the pinned tools runs with the restored module cache too:
    with GOPROXY=direct, the same plant ran there (review35i I5, the Setup half)."""
    from refbench import pins
    modcache = tmp_path / "modcache"
    monkeypatch.setenv("GOMODCACHE", str(modcache))
    d = _plant_vcs(modcache, tmp_path / "ran", tmp_path)
    go = shutil.which("go") or need("go", "run `make setup`")
    pins.verified_build_env(go, GOBIN=str(tmp_path / "bin"))
    assert not d.exists() and not (modcache / "cache" / "vcs").exists()


def test_bl_cache_faults_name_what_go_mod_verify_says_of_the_cache():
    assert all(any(w in said for w in bl.CACHE_FAULTS) for said in (
        "github.com/x/y v1.0.0: dir has been modified (/m/github.com/x/y@v1.0.0)",
        "github.com/x/y v1.0.0: missing ziphash: open /m/cache/download/github.com/x/y/@v/v1.0.0.ziphash",
        "github.com/x/y v1.0.0: zip: not a valid zip file"))


# ---- I1 / I1b: what a restore left where refbench keeps a lock, or a tree it must remove -------------
@pytest.mark.parametrize("plant", ["directory", "fifo"])
def test_a_lock_path_that_is_no_file_is_made_anew_not_a_crash(tmp_path, plant):
    """A directory planted where refbench keeps a lock crashed every run (exit 3, IsADirectoryError),
    and nothing made it anew (review35i I1)."""
    from refbench import paths
    cache = tmp_path / "cache"
    lock = cache / "clones" / "origin-abc.lock"
    lock.parent.mkdir(parents=True)
    if plant == "directory":
        (lock / "inside").mkdir(parents=True)
        (lock / "inside" / "f").write_text("x")
    else:
        os.mkfifo(lock)
    with paths.locked(lock, within=cache):
        assert lock.is_file() and not lock.is_symlink()
    with paths.locked(lock, within=cache):  # and the next run takes it as usual
        pass


def _as_nobody(fn) -> int:
    """fn() in a child process that is not root (a GitHub runner is not), its exit code: 0 when it
    returned, 1 when it raised (printed). As the current user when that is not root already."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover  (the child)
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            fn()
            os._exit(0)
        except BaseException as e:  # noqa: BLE001  (reported, then the child ends)
            print(f"{type(e).__name__}: {e}", flush=True)
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_read_only_directory_in_a_restored_tree_is_removed_by_a_runner_that_is_not_root():
    """tar keeps modes: a restored clone or build holding a 0555 directory could not be removed by
    a runner that is not root, so the clone it marked faulty stayed, every run (review35i I1b)."""
    import tempfile
    from refbench import paths
    top = Path(tempfile.mkdtemp(prefix="refbench-ro-"))
    try:
        cache = top / "cache"
        ro = cache / "clones" / "origin-abc" / "objects" / "info" / "ro"
        ro.mkdir(parents=True)
        (ro / "f").write_text("x")
        for p in [top, *ro.parents, ro]:
            if p.is_relative_to(top):
                os.chown(p, 65534, 65534) if os.geteuid() == 0 else None
        if os.geteuid() == 0:
            os.chown(ro / "f", 65534, 65534)
        top.chmod(0o755)
        ro.chmod(0o555)
        ro.parent.chmod(0o555)
        assert _as_nobody(lambda: paths.remove_tree(cache / "clones" / "origin-abc", cache)) == 0
        assert not (cache / "clones" / "origin-abc").exists()
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(top)], check=False)
        shutil.rmtree(top, ignore_errors=True)


# ---- I4: setup's links through a restored bin link -----------------------------------------------------
def test_setup_links_no_tool_through_a_bin_link_a_restore_planted(tmp_path, monkeypatch):
    """An installed refbench links its tools in the cache's bin/, which the Action restores: a
    restored `bin` -> a directory on PATH made setup replace the user's files there (review35i I4)."""
    from refbench import paths
    from refbench.commands import setup
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    root = paths.cache_root()
    root.mkdir(parents=True)
    onpath = tmp_path / "onpath"
    onpath.mkdir()
    (onpath / "minio").write_text("the user's own\n")
    (root / "bin").symlink_to(onpath)
    with pytest.raises(paths.CacheLinkError):
        setup._link(root / "minio-pinned", "minio", root / "bin")
    assert (onpath / "minio").read_text() == "the user's own\n" and not (onpath / "minio").is_symlink()
    mine = tmp_path / "my-bin"  # a --bin-dir of the user's own is theirs
    setup._link(root / "minio-pinned", "minio", mine)
    assert os.readlink(mine / "minio") == str(root / "minio-pinned")


# ---- the tenth reading (review35j) J1-J3: which Go caches a target's build uses -------------------------
def test_a_targets_build_uses_go_caches_of_refbenchs_own_that_no_restore_fills(tmp_path, monkeypatch):
    """go compiles a module's unpacked directory and takes a compiled package from its build cache
    without re-hashing either, and a build command may run what it compiled (`go run -C tools .`)
    before anything is checked: planted code ran in a keyed build and read the key (J1), a planted
    archive in the user's GOCACHE was linked in and sealed (J2), and a `go env -w GOMODCACHE`
    moved go's module cache where refbench did not look (J3). With neither named in the machine's
    environment, a build's go uses refbench's own, in its data directory (no cache step restores
    it), whatever go's env file says; asked of go itself."""
    from refbench import paths
    _go_or_fail()
    for k in ("GOMODCACHE", "GOCACHE", "GOPATH", "GOENV"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # where go keeps its env file
    (tmp_path / "config" / "go").mkdir(parents=True)
    (tmp_path / "config" / "go" / "env").write_text(f"GOMODCACHE={tmp_path / 'restored-mod'}\n"
                                                     f"GOCACHE={tmp_path / 'restored-build'}\n")
    (tmp_path / "origin").mkdir()
    o = new_origin(tmp_path / "origin")
    o.commit("one", {"go.mod": "module example.com/app\n\ngo 1.21\n", "main.go": "package main\n\nfunc main() {}\n"},
             "one", tags=["v1.0.0"])
    b = builder(o, tmp_path / "builds", target=target(binary="app"))
    env = b._go_env()
    go = shutil.which("go")
    said = subprocess.run([go, "env", "GOMODCACHE", "GOCACHE"], env=env, capture_output=True, text=True,
                          check=True).stdout.split()
    own = paths.data_root() / "go"
    assert said == [str(own / "mod"), str(own / "build")], said
    # a user who names their own keeps them
    monkeypatch.setenv("GOCACHE", str(tmp_path / "mine"))
    assert builder(o, tmp_path / "builds", target=target(binary="app"))._go_env()["GOCACHE"] == str(tmp_path / "mine")


def test_gos_settings_file_is_no_input_of_a_targets_build(tmp_path, monkeypatch):
    """go reads its settings file (what `go env -w` writes) unless GOENV=off: a GOCACHEPROG named
    there replaced the build cache refbench set, ran in a keyed build and read the key (review35k
    K2); GOSUMDB, GOINSECURE, GOPROXY and CC there passed the allow-list too. Asked of go itself."""
    from refbench import pins
    _go_or_fail()
    monkeypatch.delenv("GOENV", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    (tmp_path / "config" / "go").mkdir(parents=True)
    (tmp_path / "config" / "go" / "env").write_text(f"GOCACHEPROG={tmp_path / 'planted'}\nGOINSECURE=*\n")
    (tmp_path / "origin").mkdir()
    o = new_origin(tmp_path / "origin")
    o.commit("one", {"go.mod": "module example.com/app\n\ngo 1.21\n"}, "one", tags=["v1.0.0"])
    go = shutil.which("go")
    for env in (builder(o, tmp_path / "builds", target=target(binary="app"))._go_env(), pins.build_env()):
        said = subprocess.run([go, "env", "GOCACHEPROG", "GOINSECURE"], env={**env, "GOTOOLCHAIN": "local"},
                              capture_output=True, text=True, check=True).stdout.split()
        assert said == [], said


@pytest.mark.parametrize("plant", ["another go", "an entry above"])
def test_setup_refuses_a_go_toolchain_zip_the_checksum_database_does_not_list(tmp_path, monkeypatch, plant):
    """With no Go on the machine, `refbench setup` fetched a toolchain zip from the first GOPROXY
    (a plain http:// one too) and unpacked it unchecked, entry names included: a planted bin/go
    became the Go of every build, and a `../` entry was written above the data directory
    (review35k K1). A loopback server stands in for the proxy."""
    import io
    from fakes.loopback import serving
    from refbench.commands import setup
    prefix = f"golang.org/toolchain@v0.0.1-{setup.DEFAULT_GO_TOOLCHAIN}.linux-amd64/"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(prefix + "bin/go", "#!/bin/sh\necho planted\n")
        if plant == "an entry above":
            z.writestr(prefix + "../../../ESCAPED", "x")
    with serving(buf.getvalue()) as url:
        monkeypatch.setenv("GOPROXY", url)
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "a" / "b" / "data"))
        monkeypatch.setenv("PATH", str(tmp_path / "no-go"))  # no Go on it: setup fetches one
        monkeypatch.delenv("REFBENCH_UNPINNED_TOOLS", raising=False)
        monkeypatch.setattr("platform.machine", lambda: "x86_64")  # the pinned platform
        with pytest.raises(RefbenchError, match="refusing the Go toolchain"):
            setup.ensure_go(tmp_path / "bin")
    assert not list(tmp_path.rglob("ESCAPED")) and not list((tmp_path / "a").rglob("bin/go"))


def test_go_tool_pprof_runs_with_refbenchs_own_go_caches_and_no_secret(tmp_path, monkeypatch):
    """Since Go 1.24, `go tool pprof` is built on first use into the build cache and run from there
    unhashed: a same-size script planted in a restored ~/.cache/go-build ran when refbench profiled a
    kubo step, read the key file its environment named, and its frames came back as the profile
    (review35l L1). pprof now runs as a build's go does: refbench's own Go caches, the allow-listed
    environment, no settings file, this machine's Go, outside any module. A stand-in go says what
    it was given."""
    from refbench import paths, profile, trust
    monkeypatch.delenv("GOCACHE", raising=False)
    monkeypatch.delenv("GOMODCACHE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv(trust.KEY_FILE_ENV, str(tmp_path / "key"))
    seen = tmp_path / "seen"
    go = tmp_path / "go"
    go.write_text(f"#!/bin/sh\nenv > {seen}\npwd >> {seen}\nls >> {seen}\n")
    go.chmod(0o755)
    (tmp_path / "cpu.prof").write_bytes(b"")
    assert profile.pprof_folded(str(go), str(tmp_path / "ipfs"), [tmp_path / "cpu.prof"]) == {}
    said = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert said.get("GOCACHE") == str(paths.data_root() / "go" / "build"), said.get("GOCACHE")
    assert said.get("GOENV") == "off" and said.get("GOTOOLCHAIN") == "local"
    assert trust.KEY_FILE_ENV not in said
    assert "go.mod" not in seen.read_text().splitlines()


def test_asking_go_its_version_switches_to_no_toolchain(tmp_path, monkeypatch):
    """`go env GOVERSION` (a results file's environment) and `go version` (doctor, setup) ran in the
    current directory with GOTOOLCHAIN as the machine has it: under `auto`, a go.mod there asking for
    a newer Go switches to a toolchain unpacked in the module cache, which a restore may have planted
    (review35l L2). They ask that Go itself, outside any module. A stand-in go says what it was given."""
    from refbench import results as rs
    from refbench.commands import doctor
    (tmp_path / "bin").mkdir()
    seen = tmp_path / "seen"
    go = tmp_path / "bin" / "go"
    go.write_text(f"#!/bin/sh\necho \"GOTOOLCHAIN=$GOTOOLCHAIN PWD=$(pwd)\" >> {seen}\necho go1.26.8\n")
    go.chmod(0o755)
    here = tmp_path / "checkout"
    here.mkdir()
    (here / "go.mod").write_text("module example.com/x\n\ngo 1.99\n\ntoolchain go1.99.0\n")
    monkeypatch.chdir(here)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("GOTOOLCHAIN", "auto")
    assert rs.Environment.probe(None, hyperfine="hyperfine 2.0.0").go == "go1.26.8"
    assert doctor._first_line([str(go), "version"]) == "go1.26.8"
    # both outside any module (no go.mod to switch for) and with GOTOOLCHAIN=local (the probe's set
    # through env(1): a results file's module reads no environment; review35m found it dropped)
    assert seen.read_text().splitlines() == ["GOTOOLCHAIN=local PWD=/", "GOTOOLCHAIN=local PWD=/"]
