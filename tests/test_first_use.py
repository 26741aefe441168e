"""Issue 53: pinned servers a run builds on first use, in the background while its refs build
(refbench.firstuse): pinned and checked as `refbench setup` builds them, one line when offline,
and nothing left running or half-written when the run is interrupted."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from pathlib import Path

import pytest

from refbench import firstuse, mock, pins, pipeline, tools
from refbench.commands._args import bind_flag_values
from refbench.commands._run_options import request_from_args, run_parser
from refbench.errors import RefbenchError
from refbench.progress import Reporter
from refbench.runenv import MachineSettings


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A tool cache of the test's own (where the pinned binary lands); the Go caches stay the
    machine's refbench ones (warm), unless a test moves them."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("REFBENCH_UNPINNED_TOOLS", raising=False)
    return tmp_path / "cache" / "refbench"


def test_a_first_use_install_is_the_pinned_build_and_found_after(own_cache):
    said: list[str] = []
    with firstuse.installing(("refbench-s3restore",), said.append) as installs:
        installs.wait()
    assert tools.find_tool("refbench-s3restore") == str(pins.cached_path("refbench-s3restore"))  # checked by its pin
    assert pins.cached_path("refbench-s3restore").is_relative_to(own_cache)
    assert any("first use" in m and "refbench-s3restore" in m for m in said), said


def test_offline_a_first_use_install_fails_in_one_line_naming_what_it_could_not_fetch(tmp_path, own_cache,
                                                                                        monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # an empty module cache of its own
    monkeypatch.setenv("GOPROXY", "off")
    with firstuse.installing(("toxiproxy-server",), lambda m: None) as installs:
        with pytest.raises(RefbenchError) as e:
            installs.wait()
    text = str(e.value)
    assert "\n" not in text and "toxiproxy-server" in text and "could not fetch github.com/" in text, text
    assert not pins.cached_path("toxiproxy-server").exists()
    assert [p.name for p in own_cache.iterdir() if p.name.startswith(".")] == []  # no temporary directory left


def test_an_interrupted_run_stops_the_build_and_leaves_nothing(tmp_path, own_cache, monkeypatch):
    """MinIO from an empty module cache takes minutes: closing the installs a second in kills
    go's whole process group and removes the half-made install at once."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    installs = firstuse.Installs(("minio",), lambda m: None).start()
    deadline = time.monotonic() + 30
    while installs.go._proc is None and time.monotonic() < deadline:  # the build has started
        time.sleep(0.05)
    pgid = installs.go._proc.pid
    time.sleep(1)
    t0 = time.monotonic()
    installs.close()
    assert time.monotonic() - t0 < 20 and not installs._thread.is_alive()
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)  # nothing of go's group is left running
    assert not pins.cached_path("minio").exists()
    assert [p.name for p in own_cache.iterdir() if p.name.startswith(".")] == []


def test_the_run_waits_for_its_first_use_installs_after_building_and_before_the_backend(tmp_path):
    """pipeline.run: the installs start after validation, overlap resolve and build, and are
    waited for before anything is measured; a mock run stands in for the builds and the backend."""
    events: list[str] = []

    @contextlib.contextmanager
    def first_use(missing, say):
        events.append(f"start {','.join(missing)}")

        class Recorder:
            def wait(self):
                events.append("wait")
        yield Recorder()
        events.append("closed")

    class Told(Reporter):
        def info(self, msg: str) -> None:
            if " -> " in msg and "built" not in events:  # build_all's line for a build done
                events.append("built")

    env = mock.env(mock.MockSettings(), MachineSettings(), Told(quiet=True))
    env = dataclasses.replace(env, find_tool=lambda tool: None if tool == "minio" else f"/x/{tool}",
                              why_not_installable=lambda tool: None, first_use=first_use,
                              backend=_recording(env.backend, events))
    args = ["-s", "v1.0.0", "v1.1.0", "--quick", "--only", "small files/upload", "--builds-dir", str(tmp_path / "b"),
            "-r", "4", "--rounds", "2", "-w", "0"]
    pipeline.run(request_from_args(run_parser().parse_args(bind_flag_values(args)), args), env)
    assert events[0] == "start minio"
    assert events.index("built") < events.index("wait") < events.index("backend") < events.index("closed")


def _recording(open_backend, events):
    @contextlib.contextmanager
    def opener(*a, **kw):
        events.append("backend")
        with open_backend(*a, **kw) as b:
            yield b
    return opener


def test_setup_leaves_the_servers_to_the_first_run(own_cache, tmp_path, monkeypatch, capsys):
    """`make setup` (--servers-on-first-use) builds none of the three; plain `refbench setup` still does."""
    from refbench.commands import setup
    built: list[str] = []
    fake = tmp_path / "hyperfine"  # what the recorder hands over for hyperfine: a runnable 2.0
    fake.write_text("#!/bin/sh\necho hyperfine 2.0.0\n")
    fake.chmod(0o755)

    def install(tool, go, say):
        built.append(tool)
        return fake if tool == "hyperfine" else tmp_path / tool
    monkeypatch.setenv("REFBENCH_TOOLS_BIN", str(tmp_path / "bin"))  # not the checkout's tools/bin, nor on PATH
    monkeypatch.setenv("PATH", ":".join(p for p in os.environ["PATH"].split(":") if not p.endswith("tools/bin")))
    out = setup.run_setup(tmp_path / "bin", servers_on_first_use=True, install=install)
    assert built == ["hyperfine"] and out["minio"] is None and out["refbench-s3restore"] is None
    assert "built by the first run that needs them" in capsys.readouterr().err
    setup.run_setup(tmp_path / "bin", install=install)
    assert built == ["hyperfine", "hyperfine", "minio", "toxiproxy-server", "refbench-s3restore"]
