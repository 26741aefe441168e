"""Issue 35: each way around the cache's trust boundary, planted in a throw-away cache, and shown
to fail. Each test failed on the code before the fix (the commit that added it says how).

Cached clones (builds.Builder.repo, verified), tools and PATH (refbench.tools), the key
(refbench.trust, action.yml, bench-sharded.yml, scripts/key-gate.sh), kubo's cached states
(backends/snapshot.py), and the lows (lock files and configs written through links, the build's
environment)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from conftest import run_bench, usual_gocache
from origins import git
from refbench import builds as bl, trust
from refbench.backends import snapshot
from refbench.backends.snapshot import StateCache
from test_builds import MAIN, builder, origin, run, target  # noqa: F401  (origin: a pytest fixture)

ROOT = Path(__file__).resolve().parent.parent


def _clone_git(clone: Path, *args: str) -> str:
    """git on the cached clone, as an attacker planting in it would run it; with an identity of its
    own (commit-tree needs one, and a new machine's HOME has no ~/.gitconfig)."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "attacker", "GIT_AUTHOR_EMAIL": "a@refbench.invalid",
           "GIT_COMMITTER_NAME": "attacker", "GIT_COMMITTER_EMAIL": "a@refbench.invalid"}
    return subprocess.run(["git", "--git-dir", str(clone), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


# ---- cached clones ----------------------------------------------------------------------------
def test_a_planted_commondir_with_an_ext_remote_runs_no_command(origin, tmp_path):
    """A commondir made GitPython take the clone for a linked worktree and run git in the directory
    above it, where a planted .git allows ext:: and names an origin that is a shell command:
    refbench's own fetch ran it."""
    first = builder(origin, tmp_path)
    first.resolve("v1.0.0")
    evil, ran = first.clone_dir.parent / ".git", tmp_path / "ext-ran"
    subprocess.run(["git", "init", "-q", "--bare", str(evil)], check=True)
    with open(evil / "config", "a") as fh:
        fh.write(f'[protocol "ext"]\n\tallow = always\n[remote "origin"]\n\turl = "ext::sh -c touch% {ran}"\n'
                 "\tfetch = +refs/heads/*:refs/remotes/origin/*\n")
    (first.clone_dir / "commondir").write_text(str(evil) + "\n")
    again = builder(origin, tmp_path)
    try:
        resolved = again.resolve("v1.1.0")
    finally:
        assert not ran.exists(), "the planted ext:: remote ran"
    assert resolved.sha == git(origin.work, "rev-parse", "v1.1.0^{commit}")
    assert not (again.clone_dir / "commondir").exists()


def test_a_commondir_naming_the_users_checkout_leaves_it_alone(origin, tmp_path):
    """The builds directory sits in a checkout by default: a commondir naming its .git made
    refbench's `fetch --prune` delete the checkout's own tag."""
    user = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(origin.path), str(user)], check=True)
    git(user, "tag", "my-local-tag")
    first = builder(origin, user / "builds")
    first.resolve("v1.0.0")
    (first.clone_dir / "commondir").write_text(str(user / ".git") + "\n")
    builder(origin, user / "builds").resolve("v1.1.0")
    assert "my-local-tag" in git(user, "tag", "--list").split()
    assert not (user / ".git" / "worktrees").exists()


def _explode(clone: Path) -> None:
    """Every object of the clone as a loose file (a fetch leaves packs), as a planted cache may."""
    for pack in sorted((clone / "objects" / "pack").glob("*.pack")):
        data = pack.read_bytes()
        pack.unlink()
        pack.with_suffix(".idx").unlink()
        subprocess.run(["git", "--git-dir", str(clone), "unpack-objects", "-q"], input=data, check=True)


def test_a_blob_replaced_under_its_id_is_not_built(origin, tmp_path):
    """The commit's and the tree's ids still match, so nothing but re-hashing the blob tells: a
    trusted job built the attacker's main.go, sealed and ran it."""
    first = builder(origin, tmp_path)
    first.resolve("v1.1.0")
    clone = first.clone_dir
    _explode(clone)
    blob = _clone_git(clone, "rev-parse", "v1.1.0:main.go")
    evil = MAIN.format(word="evil").encode()
    loose = clone / "objects" / blob[:2] / blob[2:]
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob %d\0" % len(evil) + evil))
    assert _clone_git(clone, "cat-file", "-p", blob).startswith("package main")  # git itself serves it
    again = builder(origin, tmp_path)
    built = again.build(again.resolve("v1.1.0"), "v1.1.0")
    assert run(built.binary) == "two"


def test_a_planted_release_tag_does_not_survive_the_fetch(origin, tmp_path):
    """The Action builds from its checkout, whose fetch pruned nothing: a planted v99.0.0 was
    what latest_release picked."""
    first = builder(origin, tmp_path, checkout=True)
    first.resolve("v1.0.0")
    _clone_git(first.clone_dir, "update-ref", "refs/tags/v99.0.0", origin.shas["broken"])
    _clone_git(first.clone_dir, "update-ref", "refs/heads/v1.1.0", origin.shas["broken"])
    again = builder(origin, tmp_path, checkout=True)
    latest = again.resolve("latest_release")
    assert "v99.0.0" not in latest.display and latest.sha == git(origin.work, "rev-parse", "v1.1.0^{commit}")
    assert "refs/heads/v1.1.0" not in _clone_git(again.clone_dir, "for-each-ref", "--format=%(refname)")


def _repack_without(clone: Path, sha: str) -> None:
    """The clone's objects repacked without object `sha`: its refs still equal the origin's tips,
    so a fetch transfers nothing and (before) checked nothing."""
    objs = _clone_git(clone, "rev-list", "--objects", "--all").splitlines()
    keep = "".join(o.split()[0] + "\n" for o in objs if not o.startswith(sha))
    stage = clone.parent / "stage"
    stage.mkdir()
    subprocess.run(["git", "--git-dir", str(clone), "pack-objects", "-q", str(stage / "pack")], input=keep,
                   text=True, check=True, capture_output=True)
    for old in (clone / "objects" / "pack").glob("*"):
        old.unlink()
    for sub in (clone / "objects").iterdir():
        if len(sub.name) == 2:
            shutil.rmtree(sub)
    for new in stage.iterdir():
        new.rename(clone / "objects" / "pack" / new.name)
    stage.rmdir()


def test_a_clone_lacking_an_older_merged_commit_is_fetched_whole(origin, tmp_path):
    """Review35's MEDIUM: a planted clone with the origin's tips but without an older merged commit
    C passed every check, refbench's fetch brought nothing (its refs were up to date), and C's
    prefix then named whatever commit of that prefix the clone held (a planted one: ~2^28 tries
    for 7 hex), built and sealed in a keyed job; without one, a merged commit was 'not found'."""
    first = builder(origin, tmp_path)
    first.fetch()
    older = origin.shas["docs"]
    _repack_without(first.clone_dir, older)
    assert bl.clone_faults(first.clone_dir) == []
    assert subprocess.run(["git", "--git-dir", str(first.clone_dir), "cat-file", "-e", older]).returncode != 0
    again = builder(origin, tmp_path)
    assert again.resolve(older[:10], go="local").sha == older
    assert again.sources.missing_objects() is None


@pytest.fixture
def keyed(tmp_path, monkeypatch):
    """A run given the shared key, as the Action's trusted jobs are (REFBENCH_CACHE_KEY_FILE): no
    key held in this process before (trust.key_in_use(None)), so the named file is read."""
    key = tmp_path / "key"
    key.write_text("k" * 40 + "\n")
    key.chmod(0o600)
    monkeypatch.setenv(trust.KEY_FILE_ENV, str(key))
    with trust.key_in_use(None):
        yield key


def test_a_keyed_run_refuses_a_commit_prefix(origin, tmp_path, keyed):
    """A prefix is looked up in the cached clone, which may hold another commit that starts the
    same: a run holding the key takes whole ids only (key-gate.sh gives them)."""
    b = builder(origin, tmp_path)
    sha = origin.shas["docs"]
    with pytest.raises(bl.RefError, match="whole 40-hex id"):
        b.resolve(sha[:12], go="local")
    assert b.resolve(sha, go="local").sha == sha
    assert b.resolve("v1.1.0", go="local").sha == origin.shas["two"]


def test_a_keyed_build_given_a_commit_prefix_exits_2_with_one_line(origin, tmp_path, keyed):
    from conftest import run_cli
    proc = run_cli("build", "-s", origin.shas["docs"][:12], "--repo", str(origin.path), "--out",
                   str(tmp_path / "out"), "--builds-dir", str(tmp_path / "builds"))
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "whole 40-hex id" in proc.stderr


@pytest.mark.parametrize("planted", ["worktrees", "objects/info/alternates", "info/grafts", "link"])
def test_a_clone_holding_what_refbench_never_makes_is_cloned_anew(origin, tmp_path, planted):
    first = builder(origin, tmp_path)
    first.resolve("v1.0.0")
    clone = first.clone_dir
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if planted == "worktrees":
        (clone / "worktrees" / "x").mkdir(parents=True)
        (clone / "worktrees" / "x" / "gitdir").write_text(str(elsewhere / ".git") + "\n")
    elif planted == "link":
        (clone / "refs" / "evil").symlink_to(elsewhere)
    else:
        (clone / planted).parent.mkdir(parents=True, exist_ok=True)
        (clone / planted).write_text(f"{elsewhere}\n")
    assert bl.clone_faults(clone)
    again = builder(origin, tmp_path)
    assert again.resolve("v1.1.0").sha == git(origin.work, "rev-parse", "v1.1.0^{commit}")
    assert bl.clone_faults(again.clone_dir) == []


def test_a_ref_hidden_in_an_unlistable_refs_dir_is_not_built(origin, tmp_path, monkeypatch):
    """Review35d HIGH 4: a 0311 refs/tags/ hid a tag named after the branch from os.walk and git's
    listings, but `rev-parse refs/tags/main` opened it by path: the run asked for main built it.
    (Root lists a 0311 directory anyway; its mode alone is the fault here, and an os.scandir
    raising PermissionError stands in for what a non-root runner sees.)"""
    first = builder(origin, tmp_path)
    main = first.resolve("master").sha
    clone = first.clone_dir
    planted = origin.shas["broken"]
    assert planted != main
    (clone / "refs" / "tags").mkdir(exist_ok=True)
    (clone / "refs" / "tags" / "master").write_text(planted + "\n")
    (clone / "refs" / "tags").chmod(0o311)
    assert any("refs/tags" in f for f in bl.clone_faults(clone))
    real = os.scandir

    def scandir(path="."):
        if os.path.realpath(path) == os.path.realpath(clone / "refs" / "tags"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)
    monkeypatch.setattr(os, "scandir", scandir)
    assert any("cannot be listed" in f for f in bl.clone_faults(clone))
    monkeypatch.setattr(os, "scandir", real)
    again = builder(origin, tmp_path)
    assert again.resolve("master").sha == main
    assert bl.clone_faults(again.clone_dir) == []


def test_a_clone_config_or_lock_that_is_a_link_is_replaced_not_written_through(origin, tmp_path):
    first = builder(origin, tmp_path)
    first.resolve("v1.0.0")
    precious = tmp_path / "precious"
    precious.write_text("years of work\n")
    (first.clone_dir / "config").unlink()
    (first.clone_dir / "config").symlink_to(precious)
    lock = first.clone_dir.with_suffix(".lock")
    lock.unlink()
    lock.symlink_to(precious)
    again = builder(origin, tmp_path)
    again.resolve("v1.1.0")
    assert precious.read_text() == "years of work\n"
    assert not (again.clone_dir / "config").is_symlink() and not lock.is_symlink()


# ---- tools and PATH -----------------------------------------------------------------------------
def _plant(dirs: list[Path], marker: Path, names=("go", "git", "sh", "go1.26.8")) -> None:
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        for name in names:
            (d / name).write_text(f"#!/bin/sh\necho \"$0 $*\" >> {marker}\ncat /proc/$$/environ >> {marker}\nexit 1\n")
            (d / name).chmod(0o755)


def test_a_planted_go_or_git_in_a_cache_directory_never_runs(origin, tmp_path, monkeypatch):
    """~/.cache/refbench/bin and the hyperfine wheel's bin/ were put first on PATH, and the Action
    caches both: what they held ran as go, git or sh."""
    from refbench import pins
    xdg = tmp_path / "xdg"
    monkeypatch.setenv("GOCACHE", usual_gocache())  # before XDG_CACHE_HOME moves go's default
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    marker = tmp_path / "planted-ran"
    cache_bins = [xdg / "refbench" / "bin", pins.cached_path("hyperfine").parent]
    _plant(cache_bins, marker)
    proc = run_bench("doctor", env={"XDG_CACHE_HOME": str(xdg),
                                    "PATH": os.pathsep.join([*map(str, cache_bins), os.environ["PATH"]])})
    assert not marker.exists(), marker.read_text()
    assert "go" in proc.stdout
    # and a build in this process, with the cache's bin/ first on the PATH it was given
    monkeypatch.setenv("PATH", os.pathsep.join([*map(str, cache_bins), os.environ["PATH"]]))
    b = builder(origin, tmp_path / "builds")
    built = b.build(b.resolve("v1.0.0"), "v1.0.0")
    assert run(built.binary) == "one"
    assert not marker.exists(), marker.read_text()


def test_setup_runs_nothing_with_the_key_in_its_environment(tmp_path):
    marker = tmp_path / "planted-ran"
    planted = tmp_path / "bin"
    _plant([planted], marker, names=("go",))
    proc = run_bench("setup", "--no-minio", "--no-build-hyperfine", timeout=300,
                     env={"REFBENCH_CACHE_KEY": "k" * 40, "XDG_CACHE_HOME": str(tmp_path / "xdg"),
                          "PATH": f"{planted}:{os.environ['PATH']}"})
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "REFBENCH_CACHE_KEY_FILE" in proc.stderr
    assert not marker.exists() or "k" * 40 not in marker.read_text()


def test_a_build_gets_an_allow_listed_environment(origin, tmp_path, monkeypatch):
    """The nightly's history URL (with its password) and any token reached every `go` a build ran."""
    monkeypatch.setenv("REFBENCH_HISTORY_URL", "postgresql://u:hunter2@db/x")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret")
    t = target(build=("sh", "-c", "env > {out}.env && go build -o {out} ."))
    b = builder(origin, tmp_path, target=t)
    built = b.build(b.resolve("v1.0.0"), "v1.0.0")
    seen = Path(str(built.binary.parent / "hello.tmp.env")).read_text()
    assert "hunter2" not in seen and "ghp_secret" not in seen
    assert "PATH=" in seen and "GOFLAGS=" in seen


# ---- the key ------------------------------------------------------------------------------------
_CHILD_READS_PARENT = (
    "import subprocess, sys\n"
    "from refbench import trust\n"
    "from refbench.errors import RefbenchError\n"
    "try:\n"
    "    trust.cache_key()\n"
    "except RefbenchError as e:\n"
    "    print('REFUSED', e); sys.exit(0)\n"
    "out = subprocess.run(['sh', '-c', 'cat /proc/$PPID/environ /proc/$PPID/cmdline'], capture_output=True, env={})\n"
    "sys.stdout.write(out.stdout.decode(errors='replace'))\n"
    "print('KEY_ID', trust.key_id())\n")


def test_a_child_cannot_read_the_key_from_refbenchs_environ(tmp_path):
    """The key was popped from os.environ, but /proc/<pid>/environ keeps what the process started with."""
    secret = "s3cr3t-" + "x" * 40
    base = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    given = subprocess.run([sys.executable, "-c", _CHILD_READS_PARENT], capture_output=True, text=True,
                           env={**base, "REFBENCH_CACHE_KEY": secret})
    assert given.returncode == 0, given.stderr
    assert secret not in given.stdout and "REFUSED" in given.stdout  # given in the environment: refused
    key_file = tmp_path / "key"
    key_file.write_text(secret + "\n")
    key_file.chmod(0o600)
    from_file = subprocess.run([sys.executable, "-c", _CHILD_READS_PARENT], capture_output=True, text=True,
                               env={**base, "REFBENCH_CACHE_KEY_FILE": str(key_file)})
    assert from_file.returncode == 0, from_file.stderr
    assert secret not in from_file.stdout and "KEY_ID" in from_file.stdout
    import hashlib
    assert hashlib.sha256(b"refbench key id\0" + secret.encode()).hexdigest()[:12] in from_file.stdout
    key_file.chmod(0o644)  # readable by others: refused
    loose = subprocess.run([sys.executable, "-c", _CHILD_READS_PARENT], capture_output=True, text=True,
                           env={**base, "REFBENCH_CACHE_KEY_FILE": str(key_file)})
    assert "REFUSED" in loose.stdout and "0600" in loose.stdout


def _steps(text: str) -> list[str]:
    return text.split("\n    - ")


def test_the_key_is_in_no_environment_of_the_action_or_the_sharded_workflow():
    """The Setup step got the key, the Benchmark step had it in its environment, and
    bench-sharded.yml passed the secret to bench.py whatever it built."""
    action = (ROOT / "action.yml").read_text()
    sharded = (ROOT / ".github" / "workflows" / "bench-sharded.yml").read_text()
    for text in (action, sharded):
        assert "REFBENCH_CACHE_KEY:" not in text
        for step in _steps(text):
            if "cache-key }}" in step.split("description:")[0] or "secrets.REFBENCH_CACHE_KEY" in step:
                # the only step that sees the secret writes it to a 0600 file, and runs nothing else
                assert "umask 077" in step and "refbench" not in step.split("run:")[1].replace("refbench-key", ""), step
                assert "trusted == 'true'" in step, step
    setup = next(s for s in _steps(action) if s.startswith("name: Set up hyperfine"))
    assert "KEY" not in setup
    assert "REFBENCH_CACHE_KEY_FILE: ${{ steps.key.outputs.file }}" in action
    assert "key-gate.sh" in sharded and "fetch-depth: 0" in sharded


def test_no_go_toolchain_from_a_cache_runs_in_the_action():
    """Go runs a toolchain unpacked in the module cache (golang.org/toolchain@.../bin/go) as it finds
    it: it checks one only when it downloads it. A planted one ran, and read the key's path from
    /proc/$PPID/environ (the second reading of issue 35). The Action saves none, and deletes any a
    restore brought before anything runs go."""
    steps = _steps((ROOT / "action.yml").read_text())
    for step in steps:
        if "~/go/pkg/mod\n" in step + "\n" and "actions/cache" in step:
            assert "!~/go/pkg/mod/golang.org/toolchain@*" in step and \
                "!~/go/pkg/mod/cache/download/golang.org/toolchain" in step, step
    names = [s.split("\n", 1)[0] for s in steps]
    drop = next(i for i, n in enumerate(names) if n.startswith("name: Drop Go toolchains"))
    assert all(i < drop for i, s in enumerate(steps) if "actions/cache" in s and "go/pkg/mod" in s)
    first_go = next(i for i, s in enumerate(steps) if "refbench setup" in s or "bench.py" in s)
    assert drop < first_go
    assert 'rm -rf "$d"' in steps[drop] and "golang.org/toolchain@*" in steps[drop]


@pytest.fixture(scope="module")
def gate_repo(tmp_path_factory):
    """A checkout with a default branch, a release tag on an older commit, a merged commit, and an
    unmerged branch (a PR's)."""
    root = tmp_path_factory.mktemp("gate")
    origin_dir = root / "origin"
    git(root, "init", "-q", "-b", "main", str(origin_dir))
    for n in ("one", "two"):
        (origin_dir / "f").write_text(n)
        git(origin_dir, "add", "f")
        git(origin_dir, "commit", "-q", "-m", n)
    git(origin_dir, "tag", "v1.0.0", "HEAD~1")
    git(origin_dir, "checkout", "-q", "-b", "feature")
    (origin_dir / "f").write_text("unmerged")
    git(origin_dir, "commit", "-q", "-am", "unmerged")
    git(origin_dir, "checkout", "-q", "main")
    checkout = root / "checkout"
    subprocess.run(["git", "clone", "-q", str(origin_dir), str(checkout)], check=True)
    return checkout


def _gate(repo: Path, *refs: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / "key-gate.sh"), str(repo), "main", *refs],
                          capture_output=True, text=True)


@pytest.mark.parametrize("refs,trusted", [
    (("v1.0.0", "main"), True), (("latest_release", "HEAD"), True), (("v1.0.0", "feature"), False),
    (("v1.0.0", "17"), False), (("v1.0.0", "#17"), False), ((), False), (("v1.0.0", "no-such-ref"), False)])
def test_a_job_building_unmerged_code_gets_no_key(gate_repo, refs, trusted):
    proc = _gate(gate_repo, *refs)
    assert (proc.returncode == 0) == trusted, proc.stdout + proc.stderr
    if not trusted:
        assert len(proc.stdout.strip().splitlines()) == 1, proc.stdout
    unmerged = git(gate_repo, "rev-parse", "origin/feature")
    assert _gate(gate_repo, "v1.0.0", unmerged[:12]).returncode == 1


def test_the_key_gate_passes_on_the_whole_commit_of_a_prefix_it_checked(gate_repo):
    """refbench in a keyed job takes no prefix: the Action gives it the ids key-gate printed."""
    merged = git(gate_repo, "rev-parse", "main~1")
    proc = _gate(gate_repo, "v1.0.0", merged[:9], "main", "latest_release")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tags = git(gate_repo, "rev-parse", "v1.0.0^{commit}")
    assert proc.stdout.split() == [tags, merged, git(gate_repo, "rev-parse", "origin/main"), "latest_release"]
    action = (ROOT / "action.yml").read_text()
    assert "steps.trust.outputs.refs" in action and 'echo "refs=$gated"' in action


def test_the_key_gate_refuses_a_shallow_checkout(gate_repo, tmp_path):
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{gate_repo}", str(shallow)], check=True)
    proc = _gate(shallow, "main")
    assert proc.returncode == 1 and "shallow" in proc.stdout


# ---- kubo's cached states ----------------------------------------------------------------------
def _state(tmp_path: Path) -> Path:
    where = tmp_path / "state" / "repo"
    (where / "blocks" / "AB").mkdir(parents=True)
    (where / "blocks" / "AB" / "CIQA.data").write_bytes(b"block one")
    (where / "config").write_text("{}")
    return where


def test_a_state_with_a_bare_state_json_is_not_ready(tmp_path):
    """A state counted as ready once state.json existed: anyone could make one."""
    where = _state(tmp_path)
    (where / "state.json").write_text(json.dumps({"built_at": "now", "template": "t"}))
    assert not StateCache.ready(where)
    assert StateCache.claim(where, tmp_path) is not None


def test_a_sealed_state_whose_content_changed_is_not_ready(tmp_path, monkeypatch):
    where = _state(tmp_path)
    StateCache.mark(where, tmp_path, template="t")
    assert StateCache.ready(where)
    # a block swapped for another of the same size and times, and the state.json copied over
    block = where / "blocks" / "AB" / "CIQA.data"
    st = block.stat()
    block.write_bytes(b"block two")
    os.utime(block, ns=(st.st_atime_ns, st.st_mtime_ns))
    snapshot._verified.clear()  # a new run: what a cache restored is checked again
    assert not StateCache.ready(where)


def test_a_state_sealed_under_another_key_is_not_ready(tmp_path, monkeypatch):
    where = _state(tmp_path)
    with trust.key_in_use(b"a-pull-requests-own-key-0123456789"):
        StateCache.mark(where, tmp_path, template="t")
    with trust.key_in_use(b"the-trusted-jobs-key-0123456789abcd"):
        assert not StateCache.ready(where)


def test_a_state_with_plugins_is_refused(tmp_path):
    """kubo loads $IPFS_PATH/plugins/*.so at start."""
    where = _state(tmp_path)
    StateCache.mark(where, tmp_path, template="t")
    (where / "plugins").mkdir()
    (where / "plugins" / "evil.so").write_bytes(b"\x7fELF")
    snapshot._verified.clear()
    assert not StateCache.ready(where)


def test_head_in_a_checkout_is_the_checkouts_never_the_cached_clones_head_file(origin, tmp_path):
    """The second reading's first HIGH: with the origin a checkout on a detached HEAD (actions/checkout
    of a tag or SHA) and no origin/HEAD, `-s HEAD` resolved to the bare clone's own HEAD file, which
    a restored cache wrote: the attacker's commit, planted in the clone, passed verification (its
    objects are consistent) and was built and sealed by a trusted job. HEAD is now the checkout's,
    as every fetch brings it; a planted checkout-head in a plain clone is pruned."""
    co = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(origin.path), str(co))
    git(co, "checkout", "-q", "--detach", "v1.0.0")
    git(co, "remote", "remove", "origin")  # the checkout knows no default branch of its own
    b = bl.Builder(target(), tmp_path / "builds", repo_url=str(co), checkout=True)
    b.fetch()  # the clone, as a cache keeps it
    clone = b.clone_dir
    # the attacker's commit in the clone, and the clone's HEAD file pointing at it
    evil = tmp_path / "evil"
    git(tmp_path, "clone", "-q", str(origin.path), str(evil))
    (evil / "main.go").write_text(MAIN.format(word="evil"))
    git(evil, "commit", "-qam", "evil")
    evil_sha = git(evil, "rev-parse", "HEAD")
    subprocess.run(["git", f"--git-dir={clone}", "fetch", "-q", str(evil), "HEAD"], check=True)
    (clone / "HEAD").write_text(evil_sha + "\n")
    again = bl.Builder(target(), tmp_path / "builds", repo_url=str(co), checkout=True)
    assert again.resolve("HEAD", go="local").sha == origin.shas["one"]


# ---- the module source -----------------------------------------------------------------------------
HELLO_MOD = "module example.com/hello\n\ngo 1.21\n"
COMMITS = {"v1.0.0": "a" * 40, "v1.1.0": "b" * 40}  # what the proxy's .info says each version's commit is


def _hello_proxy(root: Path) -> Path:
    """A Go module proxy in a directory serving example.com/hello v1.0.0 (prints one) and v1.1.0 (two),
    each .info naming its commit as proxy.golang.org's do (Origin.Hash)."""
    import zipfile
    at = root / "proxy" / "example.com" / "hello" / "@v"
    at.mkdir(parents=True)
    (at / "list").write_text("".join(v + "\n" for v in COMMITS))
    for (version, sha), word in zip(COMMITS.items(), ("one", "two")):
        (at / f"{version}.info").write_text(json.dumps({"Version": version, "Time": "2026-01-01T00:00:00Z",
                                                        "Origin": {"VCS": "git", "URL": "https://example.com/hello",
                                                                   "Hash": sha, "Ref": f"refs/tags/{version}"}}))
        (at / f"{version}.mod").write_text(HELLO_MOD)
        with zipfile.ZipFile(at / f"{version}.zip", "w") as z:
            z.writestr(f"example.com/hello@{version}/go.mod", HELLO_MOD)
            z.writestr(f"example.com/hello@{version}/main.go", MAIN.format(word=word))
    return root / "proxy"


@pytest.fixture
def module_proxy(tmp_path, monkeypatch):
    """The environment of a run whose module proxy is _hello_proxy's: its module cache, what a cache
    restores."""
    if not shutil.which("go"):
        pytest.fail("go not found: run `make setup`")
    modcache = tmp_path / "modcache"
    for k, v in {"GOPROXY": f"file://{_hello_proxy(tmp_path)}", "GONOSUMDB": "example.com",
                 "GOMODCACHE": str(modcache)}.items():
        monkeypatch.setenv(k, v)
    return modcache


def _module_builder(tmp_path: Path, **kw) -> bl.Builder:
    """A module-source builder; its module cache stays removable (-modcacherw)."""
    kw.setdefault("goflags", "-modcacherw")
    return bl.Builder(target(module="example.com/hello", package="example.com/hello"), tmp_path / "builds",
                      source="module", **kw)


def _plant_info(modcache: Path, version: str, sha: str) -> None:
    planted = modcache / "cache" / "download" / "example.com" / "hello" / "@v" / f"{version}.info"
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(json.dumps({"Version": version, "Time": "2026-01-01T00:00:00Z",
                                   "Origin": {"VCS": "git", "Hash": sha}}))


def test_a_planted_module_info_naming_another_versions_commit_is_not_built_as_it(tmp_path, module_proxy):
    """Review35's MEDIUM: --source module keyed a build by the commit the module cache's .info named
    (go answers an exact version from the cache without asking the proxy): a restored cache's
    v1.1.0.info naming v1.0.0's commit made a trusted run take v1.0.0's sealed binary for v1.1.0 and
    report its figures under v1.1.0's name. The commit is now asked of the proxy alone."""
    first = _module_builder(tmp_path)
    one = first.build(first.resolve("v1.0.0", go="local"), "v1.0.0")
    assert run(one.binary) == "one" and one.ref.sha == COMMITS["v1.0.0"]
    _plant_info(module_proxy, "v1.1.0", COMMITS["v1.0.0"])
    again = _module_builder(tmp_path)
    ref = again.resolve("v1.1.0", go="local")
    assert ref.sha == COMMITS["v1.1.0"], "the commit came from the planted .info"
    assert run(again.build(ref, "v1.1.0").binary) == "two"


def test_a_sealed_module_build_is_no_build_of_another_version(tmp_path, module_proxy):
    """The same attack where the cache is all there is to ask (offline): the version is sealed, so
    v1.0.0's sealed binary is never v1.1.0's, whatever commit the .info names."""
    first = _module_builder(tmp_path)
    first.build(first.resolve("v1.0.0", go="local"), "v1.0.0")
    offline = _module_builder(tmp_path, offline=True)
    _plant_info(module_proxy, "v1.1.0", COMMITS["v1.0.0"])
    ref = offline.resolve("v1.1.0", go="local")
    assert ref.sha == COMMITS["v1.0.0"] and ref.version == "v1.1.0"  # offline, the cache's word is all there is
    assert offline.cached(ref) is None


@pytest.fixture
def hex_named_branch(tmp_path):
    """An origin whose main holds the merged commit C and whose branch named by C's 40 hex digits
    points at an unmerged commit E (a plain git or Gitea origin takes such a name), and a full
    checkout of it as the Action's."""
    origin_dir = tmp_path / "hexorigin"
    git(tmp_path, "init", "-q", "-b", "main", str(origin_dir))
    for n in ("one", "two"):
        (origin_dir / "f").write_text(n)
        git(origin_dir, "add", "f")
        git(origin_dir, "commit", "-q", "-m", n)
    merged = git(origin_dir, "rev-parse", "HEAD")
    git(origin_dir, "checkout", "-q", "-b", "feature")
    (origin_dir / "f").write_text("unmerged")
    git(origin_dir, "commit", "-q", "-am", "unmerged")
    unmerged = git(origin_dir, "rev-parse", "HEAD")
    git(origin_dir, "checkout", "-q", "main")
    git(origin_dir, "branch", merged, unmerged)
    checkout = tmp_path / "hexcheckout"
    subprocess.run(["git", "clone", "-q", str(origin_dir), str(checkout)], check=True, capture_output=True)
    return origin_dir, checkout, merged, unmerged


def test_a_whole_id_is_the_commit_not_a_branch_named_by_it(hex_named_branch, tmp_path, keyed):
    """Review35c: key-gate turned C's prefix into C, and refbench then looked C up as a tag or
    branch first, so a branch named C (at unmerged E) was built and sealed. Both take a whole id
    as the commit first, as git does."""
    from refbench import sources
    origin_dir, checkout, merged, unmerged = hex_named_branch
    proc = _gate(checkout, merged[:7])
    assert proc.returncode == 0 and proc.stdout.split() == [merged], proc.stdout + proc.stderr
    assert _gate(checkout, merged).returncode == 0  # C is checked, not the branch named C
    (tmp_path / "builds").mkdir()
    resolved = sources.Clone(tmp_path / "builds", str(origin_dir)).resolve(merged)
    assert (resolved.kind, resolved.sha) == ("commit", merged), resolved


def test_the_key_gate_pins_a_branch_to_the_commit_it_checked(hex_named_branch):
    """Review35c: key-gate passed a branch as its name, and refbench fetched it again later, so an
    unmerged commit pushed to it in between was built and sealed with the key."""
    origin_dir, checkout, merged, _ = hex_named_branch
    git(origin_dir, "branch", "topic", "main")
    git(checkout, "fetch", "-q", "origin")
    proc = _gate(checkout, "topic", "HEAD")
    assert proc.returncode == 0 and proc.stdout.split() == [merged, merged], proc.stdout + proc.stderr


def _trust_step(checkout: Path, tmp_path: Path, target: str = "", args: str = "") -> dict[str, str]:
    """The outputs of action.yml's step trust, run as a push job with its env."""
    from action_harness import load_action, read_env_file
    step = next(s for s in load_action()[1] if s.get("id") == "trust")
    out = tmp_path / "github-output"
    out.write_text("")
    env = {**os.environ, "TRUSTED_EVENT": "true", "WANTS_KEY": "true", "REFS": "main", "BENCH_COMMAND": "",
           "PR_NUMBER": "", "DEFAULT_BRANCH": "main", "TARGET": target, "ARGS": args,
           "GITHUB_ACTION_PATH": str(ROOT), "GITHUB_OUTPUT": str(out), "GITHUB_EVENT_NAME": "push"}
    proc = subprocess.run(["bash", "-c", step["run"]], cwd=checkout, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return read_env_file(out)


@pytest.mark.parametrize("target,args,trusted", [
    ("", "", True), ("", "--scenarios cp --source git", True), ("kubo", "", False),
    ("", "--repo https://example.invalid/x", False), ("", "--rep=x", False), ("", "-tkubo", False),
    ("", "--source module", False), ("", "--target=kubo", False)])
def test_the_action_gives_no_key_when_refbench_builds_from_elsewhere(gate_repo, tmp_path, target, args, trusted):
    """Review35c: key-gate answers for the checkout; with another target, --repo or --source module
    refbench fetches another origin (or the same one later), so the answer says nothing of it."""
    out = _trust_step(gate_repo, tmp_path, target, args)
    assert (out["trusted"] == "true") == trusted, out
    if trusted:
        assert out["refs"] == git(gate_repo, "rev-parse", "origin/main")


@pytest.fixture
def line_origin(tmp_path):
    """An origin whose main is c1..c4, and a fetched clone of it: bisect's line from c1 to c4."""
    from refbench import sources
    o = tmp_path / "lineorigin"
    git(tmp_path, "init", "-q", "-b", "main", str(o))
    shas = []
    for i in range(1, 5):
        (o / "f").write_text(str(i))
        git(o, "add", "f")
        git(o, "commit", "-q", "-m", f"c{i}")
        shas.append(git(o, "rev-parse", "HEAD"))
    (tmp_path / "builds").mkdir()
    clone = sources.Clone(tmp_path / "builds", str(o))
    clone.fetch()
    return o, clone.clone_dir, shas


def _plant_commit_graph(clone: Path, shas: list[str]) -> str:
    """A commit-graph in the clone in which c3's first parent is E, a commit planted in the clone
    and reached by no ref of the origin (review35c's reproducer); E's id."""
    import struct
    tree = _clone_git(clone, "rev-parse", f"{shas[3]}^{{tree}}")
    evil = _clone_git(clone, "commit-tree", tree, "-p", shas[0], "-m", "evil")
    subprocess.run(["git", "--git-dir", str(clone), "commit-graph", "write", "--stdin-commits"],
                   input="\n".join(shas + [evil]) + "\n", check=True, capture_output=True, text=True)
    graph = clone / "objects" / "info" / "commit-graph"
    b = bytearray(graph.read_bytes())
    chunks = {bytes(b[8 + 12 * k:12 + 12 * k]): struct.unpack(">Q", b[12 + 12 * k:20 + 12 * k])[0]
              for k in range(b[6] + 1)}
    oids = [bytes(b[chunks[b"OIDL"] + 20 * i:chunks[b"OIDL"] + 20 * i + 20]).hex() for i in range(5)]
    at = chunks[b"CDAT"] + 36 * oids.index(shas[2]) + 20
    b[at:at + 4] = struct.pack(">I", oids.index(evil))
    graph.chmod(0o644)
    graph.write_bytes(bytes(b))
    assert evil in _clone_git(clone, "-c", "core.commitGraph=true", "rev-list", f"{shas[0]}..{shas[3]}")
    return evil


def test_a_planted_commit_graph_is_not_read_and_the_clone_is_cloned_anew(line_origin, tmp_path):
    """Review35c: git took c3's parent from a planted commit-graph, so bisect's line ran through E
    (no origin ref reaches it), which a keyed bisect would build and seal."""
    from refbench import sources
    o, clone, shas = line_origin
    evil = _plant_commit_graph(clone, shas)
    assert sources.clone_faults(clone)
    again = sources.Clone(tmp_path / "builds", str(o))
    again.fetch()  # as bisect's resolve of GOOD and BAD does
    line = [sha for sha, _ in again.commits_between(shas[0], shas[3])]
    assert line == shas[1:] and evil not in line
    assert not (clone / "objects" / "info" / "commit-graph").exists()


def test_bisects_line_is_checked_against_the_commits_ids(line_origin, tmp_path):
    """Whatever git takes parents from besides the commits themselves (a commit-graph here, as if
    SAFE_GIT and clone_faults let it through: the Clone's git_options and allowed_info), a line
    whose commits do not name it is refused."""
    from refbench import sources
    o, clone, shas = line_origin
    _plant_commit_graph(clone, shas)
    loose = sources.Clone(tmp_path / "builds", str(o), git_options=("core.hooksPath=/dev/null", "core.fsmonitor=false"),
                          allowed_info={**sources.ALLOWED_INFO, "objects/info": frozenset({"packs", "commit-graph"})})
    with pytest.raises(bl.RefError, match="as the commits' ids say"):
        loose.commits_between(shas[0], shas[3])


def test_a_planted_shallow_file_is_removed_before_a_fetch(line_origin, tmp_path):
    """Review35c: a planted `shallow` at c3 hid the clone's lack of c1 and c2 from missing_objects
    and cut bisect's line from c1 short (0 commits listed)."""
    from refbench import sources
    o, clone, shas = line_origin
    (clone / "shallow").write_text(shas[2] + "\n")
    for args in (("reflog", "expire", "--expire=now", "--all"), ("repack", "-a", "-d", "-q"), ("prune", "--expire=now")):
        _clone_git(clone, *args)
    assert subprocess.run(["git", "--git-dir", str(clone), "cat-file", "-e", shas[0]]).returncode != 0
    again = sources.Clone(tmp_path / "builds", str(o))
    again.fetch()
    assert not (clone / "shallow").exists() and again.missing_objects() is None
    assert [sha for sha, _ in again.commits_between(shas[0], shas[3])] == shas[1:]
