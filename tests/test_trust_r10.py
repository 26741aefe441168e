"""The thirteenth reading (issue 35, /work/wt/review35m.md): what is left around the edges of the
trust boundary, LOWs each, closed with the attack planted in a throw-away place."""
from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from refbench.errors import RefbenchError


def test_setup_refuses_a_go_zip_entry_whose_name_holds_an_empty_component(tmp_path, monkeypatch):
    """The toolchain zip's entries are written under the name with the zip's prefix cut off, so
    `PREFIX//abs/path` was written at /abs/path, outside the data directory, although no entry
    starts with `/` or holds `..` (review35m M1). It takes a Go refbench pins no hash for
    (REFBENCH_UNPINNED_TOOLS=1), whose contents are unchecked anyway; its names are checked still.
    A loopback server stands in for the proxy."""
    from fakes.loopback import serving
    from refbench.commands import setup
    outside = tmp_path / "outside" / "written-by-the-zip"
    prefix = "golang.org/toolchain@v0.0.1-go1.99.0.linux-amd64/"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(prefix + "bin/go", "#!/bin/sh\necho go1.99.0\n")
        z.writestr(prefix + str(outside), "x")  # PREFIX//abs/path: the absolute path once cut
    with serving(buf.getvalue()) as url:
        monkeypatch.setenv("GOPROXY", url)
        monkeypatch.setenv("GO_TOOLCHAIN", "go1.99.0")
        monkeypatch.setenv("REFBENCH_UNPINNED_TOOLS", "1")
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
        monkeypatch.setenv("PATH", str(tmp_path / "no-go"))  # no Go on it: setup fetches one
        monkeypatch.setattr("platform.machine", lambda: "x86_64")
        with pytest.raises(RefbenchError, match="refusing the Go toolchain .*an entry named"):
            setup.ensure_go(tmp_path / "bin")
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
    assert installs and all("--require-hashes -r requirements/action.txt" in c or "--no-deps" in c
                            for c in installs), installs
    script = re.sub(r"\\\n\s*", " ", (root / "scripts" / "setup.sh").read_text())
    go_runs = [ln for ln in script.splitlines() if re.search(r"\bgo (install|build|get|run)\b", ln)
               and not ln.lstrip().startswith("#")]
    assert go_runs and all(all(f"{v}=" in ln for v in ("GOMODCACHE", "GOCACHE", "GOENV")) for ln in go_runs), go_runs


def test_two_runs_meeting_one_planted_fifo_at_a_lock_never_hold_it_together(tmp_path, monkeypatch):
    """A FIFO restored where a lock is kept opens, and is removed and made anew as a lock
    (review35i I1). Two runs that met it together: B opened the FIFO, A removed it, made the lock
    and held it, then B removed whatever was there now (A's held lock), made another and held
    that: both inside (review35m M5). B's fstat of what it opened is delayed here so that A's whole
    remake falls inside B's window, as the reviewer's reproducer did; the race is made, the logic is
    refbench's."""
    import os
    import threading
    import time
    from refbench import paths
    cache = tmp_path / "cache"
    cache.mkdir()
    lock = cache / "clone.lock"
    os.mkfifo(lock)
    real_fstat, delayed = os.fstat, []

    def slow_fstat(fd):
        if threading.current_thread().name == "B" and not delayed:
            delayed.append(True)
            time.sleep(0.5)  # B has opened the FIFO; A makes its lock and takes it meanwhile
        return real_fstat(fd)
    monkeypatch.setattr(os, "fstat", slow_fstat)
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
    assert delayed and lock.is_file() and not lock.is_symlink()


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
