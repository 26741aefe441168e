"""The thirteenth reading (issue 35, /work/wt/review35m.md): what is left around the edges of the
trust boundary, LOWs each, closed with the attack planted in a throw-away place."""
from __future__ import annotations

import contextlib
import io
import os
import zipfile
from pathlib import Path

import pytest

from refbench.errors import RefbenchError


def _zip(entries: dict[str, str], toolchain: str, stored: bool = False) -> bytes:
    """A toolchain zip as the proxy serves one: `entries` (name after its prefix: content)."""
    prefix = f"golang.org/toolchain@v0.0.1-{toolchain}.linux-amd64/"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED) as z:
        for name, text in entries.items():
            z.writestr(prefix + name, text)
    return buf.getvalue()


def _fetch_go(tmp_path: Path, monkeypatch, body: bytes, unpinned: str | None = None) -> RefbenchError:
    """`refbench setup` on a machine without Go, its proxy a loopback server answering `body`;
    `unpinned`: the Go asked for, one refbench pins no hash for (REFBENCH_UNPINNED_TOOLS=1). The
    error it must give."""
    from fakes.loopback import serving
    from refbench.commands import setup
    with serving(body) as url:
        monkeypatch.setenv("GOPROXY", url)
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
        monkeypatch.setenv("PATH", str(tmp_path / "no-go"))  # no Go on it: setup fetches one
        monkeypatch.setattr("platform.machine", lambda: "x86_64")
        if unpinned:
            monkeypatch.setenv("GO_TOOLCHAIN", unpinned)
            monkeypatch.setenv("REFBENCH_UNPINNED_TOOLS", "1")
        with pytest.raises(RefbenchError, match="Go toolchain") as e:
            setup.ensure_go(tmp_path / "bin")
    assert "\n" not in str(e.value)
    return e.value


def _null_device(path: Path) -> None:
    """A character device node like /dev/null at `path` (its open does nothing), as a root
    runner's cache restore makes the ones a tar holds."""
    import stat as st
    from conftest import need
    try:
        os.mknod(path, 0o600 | st.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        need("root", f"makes a device node at {path.name}")


def test_setup_refuses_a_go_zip_entry_whose_name_holds_an_empty_component(tmp_path, monkeypatch):
    """The toolchain zip's entries are written under the name with the zip's prefix cut off, so
    `PREFIX//abs/path` was written at /abs/path, outside the data directory, although no entry
    starts with `/` or holds `..` (review35m M1). It takes a Go refbench pins no hash for
    (REFBENCH_UNPINNED_TOOLS=1), whose contents are unchecked anyway; its names are checked still.
    A loopback server stands in for the proxy."""
    outside = tmp_path / "outside" / "written-by-the-zip"
    body = _zip({"bin/go": "#!/bin/sh\necho go1.99.0\n", str(outside): "x"}, "go1.99.0")  # PREFIX//abs/path
    assert "an entry named" in str(_fetch_go(tmp_path, monkeypatch, body, unpinned="go1.99.0"))
    assert not outside.exists()
    assert not list((tmp_path / "data").rglob("bin/go"))


def test_pinned_tool_builds_use_refbenchs_own_go_caches(tmp_path, monkeypatch):
    """`refbench setup` built MinIO, toxiproxy and refbench-s3restore in go's default caches
    (~/go/pkg/mod, ~/.cache/go-build: what the Action and actions/setup-go restore), so one module
    planted there made every later setup build other bytes, refuse them and blame the Go (review35m
    M3). They build in refbench's own, in its data directory, as target builds do, unless the
    environment names the user's own; go itself is asked where it would look."""
    import shutil
    import subprocess
    from conftest import need
    from refbench import paths, pins
    monkeypatch.delenv("GOMODCACHE", raising=False)
    monkeypatch.delenv("GOCACHE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    env = {**pins.build_env(), "GOTOOLCHAIN": "local"}
    go = shutil.which("go") or need("go", "asks go where it would look")
    said = subprocess.run([go, "env", "GOMODCACHE", "GOCACHE"], env=env, cwd="/",
                          capture_output=True, text=True, check=True).stdout.split()
    assert said == [str(paths.data_root() / "go" / "mod"), str(paths.data_root() / "go" / "build")], said
    assert "GOMODCACHE=" + str(paths.data_root() / "go" / "mod") in pins.env_caches()
    mine = {"GOMODCACHE": str(tmp_path / "mine" / "mod"), "GOCACHE": str(tmp_path / "mine" / "build")}
    assert {k: pins.build_env(mine)[k] for k in mine} == mine  # the user's own, named, are kept


def test_the_nightly_job_installs_hash_pinned_packages_and_builds_nothing_with_gos_defaults():
    """The nightly job holds the history database's password (a write credential), yet it ran
    scripts/setup.sh: `pip install -e '.[test]'` took every dependency by version range (review35m
    M4), and `go install` built actionlint in go's default caches, which a restore may fill, and
    with go's settings file (M2). It installs as the Action does now; and setup.sh, where a
    developer runs it, builds actionlint in refbench's own Go caches without the settings file."""
    import re
    from pathlib import Path
    from ruamel.yaml import YAML
    from test_action import _pip_installs
    root = Path(__file__).resolve().parent.parent
    wf = YAML(typ="safe").load((root / ".github" / "workflows" / "nightly.yml").read_text())
    steps = wf["jobs"]["nightly"]["steps"]
    assert any("REFBENCH_HISTORY_URL" in str(s.get("env", "")) for s in steps)  # the credential
    runs = [s["run"] for s in steps if "run" in s]
    assert not any("setup.sh" in r for r in runs), runs
    installs = [c for r in runs for c in _pip_installs(r)]
    assert installs and all(re.search(r"--require-hashes -r requirements/(action|pip)\.txt", c) or "--no-deps" in c
                            for c in installs), installs
    script = re.sub(r"\\\n\s*", " ", (root / "scripts" / "setup.sh").read_text())
    go_runs = [ln for ln in script.splitlines() if re.search(r"\bgo (install|build|get|run)\b", ln)
               and not ln.lstrip().startswith("#")]
    assert go_runs and all(all(f"{v}=" in ln for v in ("GOMODCACHE", "GOCACHE", "GOENV")) for ln in go_runs), go_runs


def test_two_runs_meeting_one_planted_fifo_at_a_lock_never_hold_it_together(tmp_path, monkeypatch):
    """A FIFO restored where a lock is kept is removed and the lock made anew (review35i I1). Two
    runs that met it together: B looked (opened the FIFO), A removed it, made the lock and held it,
    then B removed whatever was there now (A's held lock), made another and held that: both inside
    (review35m M5). Checking the inode number first did not help: ext4 gives the next file made the
    number just freed, and a removal could still come between the check and the unlink (review35n
    N1). Run B is held up for 0.5 s just before it removes anything, so that A's whole remake falls
    inside B's window, as the reviewers' reproducers did. The race is made; the logic is refbench's."""
    import threading
    import time
    from refbench import paths
    cache = tmp_path / "cache"
    cache.mkdir()
    lock = cache / "clone.lock"
    os.mkfifo(lock)
    held: list[str] = []

    def held_up(real):
        def call(*a, **kw):
            if threading.current_thread().name == "B" and not held:
                held.append(real.__name__)
                time.sleep(0.5)
            return real(*a, **kw)
        return call
    monkeypatch.setattr(os, "unlink", held_up(os.unlink))
    events: list[tuple[float, str, str]] = []

    def run(name: str, delay: float) -> None:
        time.sleep(delay)
        with paths.locked(lock, within=cache):
            events.append((time.monotonic(), name, "in"))
            time.sleep(0.8)
            events.append((time.monotonic(), name, "out"))
    threads = [threading.Thread(target=run, args=(n, d), name=n) for n, d in (("B", 0.0), ("A", 0.1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    order = [what for _, _, what in sorted(events)]
    assert order == ["in", "out", "in", "out"], sorted(events)
    assert held and lock.is_file() and not lock.is_symlink()


def test_the_environment_probe_asks_this_machines_go_whatever_gotoolchain_says(monkeypatch):
    """results.Environment.probe's `go env GOVERSION` inherited GOTOOLCHAIN (e94aac5 dropped the
    `local` the L2 fix had set), so a GOTOOLCHAIN naming another Go switched to it, from a module
    cache a restore may fill (review35m). Offline (GOPROXY=off) such a switch fails and the probe
    records no Go at all."""
    import shutil
    import subprocess
    from conftest import need
    from refbench.results import Environment
    go = shutil.which("go") or need("go", "the probe asks it")
    local = subprocess.run([go, "env", "GOVERSION"], env={"PATH": os.environ["PATH"], "HOME": os.environ["HOME"],
                                                          "GOTOOLCHAIN": "local"},
                           capture_output=True, text=True, check=True).stdout.strip()
    monkeypatch.setenv("GOTOOLCHAIN", "go1.99.0")
    monkeypatch.setenv("GOPROXY", "off")
    assert Environment.probe(hyperfine="x").go == local


def test_go_queries_use_the_go_setup_fetched_when_the_path_has_none(tmp_path, monkeypatch):
    """A machine with no Go on PATH gets one from `refbench setup`, in the data directory, which
    builds run (tools.go); but the toolchain chooser and verify_cached asked a bare `go` on PATH,
    so every build failed before it started: "go not found on PATH" (review35m). Here the data
    directory's Go is this machine's, linked where setup would unpack it."""
    import shutil
    from conftest import need
    from refbench import toolchain as tc
    from refbench import tools
    go = shutil.which("go") or need("go", "stands in for the Go setup fetched")
    root = Path(os.path.realpath(go)).parent.parent
    data = tmp_path / "data"
    (data / "refbench").mkdir(parents=True)
    (data / "refbench" / "go1.26.8.linux-amd64").symlink_to(root)
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert shutil.which("go", path="/usr/bin:/bin") is None
    assert tools.go() and tools.go().startswith(str(data))
    assert tc.go_version(tc.go_env()).startswith("go1.")


def test_a_device_node_at_a_lock_is_removed_without_being_opened(tmp_path, monkeypatch):
    """A root runner restoring a cache makes the device nodes a tar holds. The lock was opened
    (O_RDWR, blocking) before its type was checked, so a restored device node was opened, with
    whatever a device's open does (review35n N4, unconfirmed impact). Its type is looked at first;
    only a regular file is opened. The null device stands in (its open does nothing)."""
    import stat as st
    from refbench import paths
    cache = tmp_path / "cache"
    cache.mkdir()
    lock = cache / "clone.lock"
    _null_device(lock)
    opened_devices: list[str] = []
    real_open = os.open

    def watched(path, flags, *a, dir_fd=None, **kw):
        try:
            if st.S_ISCHR(os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                opened_devices.append(str(path))
        except OSError:
            pass
        return real_open(path, flags, *a, dir_fd=dir_fd, **kw)
    monkeypatch.setattr(os, "open", watched)
    with paths.locked(lock, within=cache):
        pass
    assert opened_devices == [] and lock.is_file()


@pytest.mark.parametrize("names", [["bin/go", "."], ["bin", "bin/go"]], ids=["a dot entry", "a file where a directory goes"])
def test_an_unpinned_go_zip_that_cannot_be_unpacked_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, names):
    """An entry named PREFIX + "." (the unpack directory itself), or a file where a later entry
    needs a directory, crashed setup (exit 3, a traceback) and left its temporary directory in the
    data directory (review35n N5; an unpinned Go only: a pinned zip is hash-checked first)."""
    _fetch_go(tmp_path, monkeypatch, _zip({n: "#!/bin/sh\n" for n in names}, "go1.99.0"), unpinned="go1.99.0")
    assert list((tmp_path / "data" / "refbench").iterdir()) == []


def test_go_queries_ask_the_go_their_environment_puts_first(tmp_path):
    """pins.verified_build_env puts the Go a pinned build runs first on the PATH it checks that Go's
    version with; the chooser's default go must be that one, and only without any fall back to
    the one setup fetched (review35n N6: after review35m's change the PATH line was dead)."""
    from refbench import toolchain as tc
    (tmp_path / "bin").mkdir()
    go = tmp_path / "bin" / "go"
    go.write_text("#!/bin/sh\necho go version go1.77.7 linux/amd64\n")
    go.chmod(0o755)
    assert tc.go_version({"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "GOTOOLCHAIN": "local"}) == "go1.77.7"


def test_no_cache_step_saves_or_restores_a_go_cache():
    """The Action cached ~/go/pkg/mod, which since the own Go caches nothing refbench runs reads:
    a surface and a cost for nothing (review35l L4). No cache step of the Action or a workflow
    names a Go module or build cache now; builds use refbench's own, which none saves."""
    from pathlib import Path
    from ruamel.yaml import YAML
    root = Path(__file__).resolve().parent.parent
    docs = [YAML(typ="safe").load((root / "action.yml").read_text())["runs"]]
    docs += [job for wf in sorted((root / ".github" / "workflows").glob("*.yml"))
             for job in YAML(typ="safe").load(wf.read_text())["jobs"].values()]
    cached = [str((s.get("with") or {}).get("path", "")) for d in docs for s in d.get("steps", [])
              if str(s.get("uses", "")).startswith("actions/cache")]
    assert len(cached) >= 4, cached
    assert not any(go in p for p in cached for go in ("go/pkg/mod", "go-build", "GOMODCACHE", "GOCACHE")), cached


@pytest.mark.parametrize("body", ["not a zip", "a bad CRC"])
def test_a_damaged_go_zip_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, body):
    """A proxy's answer that is no zip, or a zip whose data fails its CRC, crashed setup (exit 3,
    a traceback) and left a temporary directory in the data directory, for the pinned Go too
    (review35o O5)."""
    from refbench.commands import setup
    genuine = _zip({"bin/go": "#!/bin/sh\necho a genuine go\n"}, setup.DEFAULT_GO_TOOLCHAIN, stored=True)
    data = b"<html>proxy error</html>" if body == "not a zip" else genuine.replace(b"a genuine", b"a damaged")
    _fetch_go(tmp_path, monkeypatch, data)
    assert list((tmp_path / "data" / "refbench").iterdir()) == []


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_another_users_lock_is_waited_on_not_replaced(tmp_path, umask):
    """Two users sharing one cache: the lock is opened read-write, so the second user could not
    open the first's (0644) lock, took it for a restore's leftover, removed it while it was held,
    made its own and held that too (review35o O1). It opens read-only now and waits. Under a 077
    umask the first user's lock was 0600, which the second could not even read (review35p P5):
    a lock is made 0644 whatever the umask. The first user here is this process, the second a
    forked child running as nobody."""
    import tempfile
    import time
    from refbench import paths
    if os.geteuid() != 0:
        from conftest import need
        need("root", "runs a second user")
    top = Path(tempfile.mkdtemp(prefix="refbench-twouser-"))
    try:
        cache = top / "cache"
        (cache / "clones").mkdir(parents=True)
        for p in (top, cache, cache / "clones"):
            os.chown(p, 65534, 65534)  # the second user may write the directory, so it could unlink
        lock = cache / "clones" / "origin-abc.lock"
        r, w = os.pipe()
        was = os.umask(umask)
        try:
            held = paths.locked(lock, within=cache)
            held.__enter__()
        finally:
            os.umask(was)
        with contextlib.ExitStack() as stack:
            stack.push(held)
            inode = lock.stat().st_ino
            pid = os.fork()
            if pid == 0:  # pragma: no cover  (the child: the second user)
                os.close(r)
                try:
                    os.setgid(65534)
                    os.setuid(65534)
                    with paths.locked(lock, within=cache):
                        os.write(w, f"{time.monotonic()} {lock.stat().st_ino}\n".encode())
                finally:
                    os._exit(0)
            os.close(w)
            time.sleep(0.6)
            released = time.monotonic()
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        got = os.read(r, 200).decode().split()
        os.close(r)
        assert got and float(got[0]) >= released, (got, released)  # it waited for the first user
        assert int(got[1]) == inode  # and took the same lock, not one of its own
    finally:
        import shutil
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("blocked,mode", [("builds/clones", 0o600), ("builds", 0o300), ("builds", 0o000)],
                         ids=["the lock's directory, unsearchable", "one above, unreadable", "one above, 0000"])
def test_a_directory_a_lock_is_in_or_under_that_it_may_not_enter_is_a_one_line_refusal(blocked, mode):
    """A runner that is not root, and a directory that a restore left without read or search
    permission (tar keeps modes): the lock's first look raised PermissionError past the one-line
    refusal, and the run crashed with a traceback, for the lock's own directory (review35n N2) and
    for one on the way to it (review35o O3). Run as nobody in a forked child."""
    import shutil
    import subprocess
    import tempfile
    from refbench import paths
    from test_trust_r9 import _as_nobody
    top = Path(tempfile.mkdtemp(prefix="refbench-lockway-"))
    try:
        cache = top / "cache"
        (cache / "builds" / "clones").mkdir(parents=True)
        if os.geteuid() == 0:
            for p in (top, cache, cache / "builds", cache / "builds" / "clones"):
                os.chown(p, 65534, 65534)
        (cache / blocked).chmod(mode)

        def take() -> None:
            try:
                with paths.locked(cache / "builds" / "clones" / "origin-abc.lock", within=cache):
                    raise AssertionError(f"took a lock with {blocked} at mode {mode:o}")
            except RefbenchError as e:
                assert "cannot take the lock" in str(e) and "\n" not in str(e), e
        assert _as_nobody(take) == 0
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(top)], check=False)
        shutil.rmtree(top, ignore_errors=True)


def test_a_device_node_where_a_record_is_read_is_refused_without_being_opened(tmp_path, monkeypatch):
    """paths.open_regular (build.json, impl.json, state.json, ...) opened the file and then looked
    at its type, so a device node a root runner's restore made there was opened (review35o O2,
    impact unconfirmed). The null device stands in."""
    from refbench import paths
    record = tmp_path / "build.json"
    _null_device(record)
    opened: list[str] = []
    real_open = os.open

    def watched(path, flags, *a, **kw):
        opened.append(str(path))
        return real_open(path, flags, *a, **kw)
    monkeypatch.setattr(os, "open", watched)
    with pytest.raises(OSError, match="not a regular file"):
        paths.open_regular(record)
    assert str(record) not in opened, opened


def test_a_kubo_state_directory_it_may_not_enter_is_rebuilt_not_a_crash():
    """A restored kubo state directory of mode 0000 (tar sets directory modes last): a runner that
    is not root took its lock, then the lstat of its state.json raised PermissionError past every
    refusal: each kubo run crashed with a traceback, for good (review35p P1). The state counts as
    not ready and is rebuilt. Run as nobody in a forked child."""
    import shutil
    import subprocess
    import tempfile
    from refbench.backends.snapshot import StateCache
    from test_trust_r9 import _as_nobody
    top = Path(tempfile.mkdtemp(prefix="refbench-state-"))
    try:
        cache = top / "builds"
        where = cache / "ipfs-states" / "b" / "s" / "repo"
        where.mkdir(parents=True)
        (where / "state.json").write_text("{}")
        if os.geteuid() == 0:
            for p in (top, *[q for q in where.parents if q.is_relative_to(top)], where, where / "state.json"):
                os.chown(p, 65534, 65534)
        where.chmod(0o000)

        def meet() -> None:
            why = StateCache.why_not_ready(where, cache)
            assert why and "unreadable" in why, why
        assert _as_nobody(meet) == 0
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(top)], check=False)
        shutil.rmtree(top, ignore_errors=True)


def test_a_go_zip_whose_end_record_points_past_its_directory_is_one_line(tmp_path, monkeypatch):
    """A zip whose end record claims its central directory starts later than it does opens, then
    raises ValueError (a negative seek) on reading: setup crashed and left its temporary directory,
    for the pinned Go too (review35p P2)."""
    import struct
    from refbench.commands import setup
    data = bytearray(_zip({"bin/go": "#!/bin/sh\n"}, setup.DEFAULT_GO_TOOLCHAIN))
    eocd = data.rfind(b"PK\x05\x06")
    struct.pack_into("<I", data, eocd + 16, struct.unpack_from("<I", data, eocd + 16)[0] + 50)
    _fetch_go(tmp_path, monkeypatch, bytes(data))
    assert list((tmp_path / "data" / "refbench").iterdir()) == []
