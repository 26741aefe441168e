"""Long runs hold steady: storage bounded by the fixture however many runs a step takes, and the
watchdog stops a run that grows past its floor cleanly (exit 2, one line, nothing left).

End to end: a real s5cmd build (tests/origins.py), the embedded MinIO, hyperfine.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, run_bench

pytestmark = pytest.mark.slow

MiB = 1 << 20


def scenarios_file(tmp_path: Path, body: str) -> Path:
    """The real s5cmd target (from scenarios.toml) with scenarios of the test's own."""
    real = (ROOT / "refbench" / "scenarios.toml").read_text()
    targets = real[:real.index("\n[[scenarios]]")]
    path = tmp_path / "scenarios.toml"
    path.write_text(targets + body)
    return path


# the "large file" upload step of scenarios.toml, on a 16 MiB fixture
UPLOAD = """
[[scenarios]]
name = "upload"
target = "s5cmd"
fixture = { kind = "sparse", size = "16M", count = 1 }

  [[scenarios.steps]]
  name = "upload"
  command = "{{ bin }} {{ extra }} cp {{ file }} {{ remote ~ '/up/' }}"
  cleanup = "{{ bin }} {{ extra }} rm {{ remote ~ '/up/*' }}"
  stored_copies = 1
"""

# a step that finishes, then one whose every run stores a new object: the data dir grows without bound
GROW = """
[[scenarios]]
name = "grow"
target = "s5cmd"
fixture = { kind = "sparse", size = "4M", count = 1 }

  [[scenarios.steps]]
  name = "version"
  command = "{{ bin }} version"

  [[scenarios.steps]]
  name = "grow"
  command = "{{ bin }} {{ extra }} cp {{ file }} {{ remote ~ '/grow/' }}$(date +%s%N)"
"""


def leftovers(local: Path, data_dir: str | None) -> list[str]:
    """Anything the run left: files in its -l dir, its MinIO data dir, processes naming either."""
    left = [str(p) for p in local.iterdir()]
    if data_dir and Path(data_dir).exists():
        left.append(data_dir)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    left += [ln for ln in ps.splitlines() if str(local) in ln or (data_dir and data_dir in ln)]
    return left


def test_sixty_uploads_keep_the_data_dir_flat(s5_origin, builds_dir, tmp_path):
    """One upload step, 60 runs per build (120 uploads of 16 MiB onto the same key), A/A.

    Before the fix every overwrite left its old copy in MinIO's .minio.sys/tmp/.trash for 5 min:
    the data dir grew by 16 MiB per upload (measured: 1.9 GiB after the 120 uploads). Now it
    holds the object and at most one copy on its way out: <= 2x (fixture + the step's objects)."""
    local = tmp_path / "local"
    local.mkdir()
    bound = 2 * (16 + 16) * MiB + 4 * MiB  # 2x (fixture + its uploaded copy), plus MinIO's metadata
    proc = run_bench("-s", "v1.0.0", "v1.0.0", "--measure-identical", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     "--scenarios", str(scenarios_file(tmp_path, UPLOAD)), "-r", "60", "-w", "0", "--rounds", "2",
                     "--no-rss", "-l", str(local), "-o", str(tmp_path / "s.md"), cwd=tmp_path,
                     env={"REFBENCH_WATCHDOG": f"interval=0.1,data={bound}"})
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "results.json").read_text())
    st = r["scenarios"][0]["steps"][0]
    assert [len(b["times"]) for b in st["builds"].values()] == [60, 60]
    res = r["resources"]
    data = res["data_dir"]
    assert res["samples"] > 20 and res["stopped"] is None
    assert data["peak"] <= bound, data
    assert data["trash_purged"] >= 100 * 16 * MiB, data  # ~ every overwritten copy went through the trash
    assert res["memory"]["available_min"] > 0 and res["server"]["rss_peak"] > 10 * MiB
    assert leftovers(local, r["backend"]["data_dir"]) == []


def test_watchdog_stops_a_growing_run_cleanly(s5_origin, builds_dir, tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    proc = run_bench("-s", "v1.0.0", "v1.0.0", "--measure-identical", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                     "--scenarios", str(scenarios_file(tmp_path, GROW)), "-r", "40", "-w", "0", "--rounds", "2",
                     "--no-rss", "-l", str(local), "-o", str(tmp_path / "s.md"), cwd=tmp_path,
                     env={"REFBENCH_WATCHDOG": "interval=0.2,data=24M"})
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("refbench: error:")]
    assert len(errors) == 1, proc.stderr
    line = errors[0]
    assert "stopped by the watchdog: the embedded MinIO data dir (in RAM) grew by" in line, line
    assert "above its limit of 24.0 MiB" in line and "during grow / grow" in line, line
    assert "Traceback" not in proc.stderr
    # the step that finished is kept, with the reason the run stopped and the peaks
    r = json.loads((tmp_path / "results.json").read_text())
    assert [st["name"] for sc in r["scenarios"] for st in sc["steps"]] == ["version"]
    assert r["stopped"] == line.removeprefix("refbench: error: ")
    assert r["resources"]["data_dir"]["peak"] > 24 * MiB
    assert "version" in (tmp_path / "s.md").read_text()
    # nothing left: no temp dirs, no server, no data dir (and with it, no objects)
    assert leftovers(local, r["backend"]["data_dir"]) == []


def descendants(pid: int) -> list[int]:
    """pid and every process below it (read from /proc before anything is killed)."""
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(p.name))
    out, todo = [], [pid]
    while todo:
        q = todo.pop()
        out.append(q)
        todo += children.get(q, [])
    return out


def test_a_killed_runs_objects_are_removed_by_the_next_run(minio, s5_origin, builds_dir, tmp_path):
    """The issue's case: refbench SIGKILLed mid-run on a user's bucket left its keys there, and
    nothing found them. Now its lease expires, and the next run on the same -p removes them."""
    import os
    import signal
    import sys
    import time

    server, client = minio
    env = {**os.environ, **{k: v for k, v in server.env.items() if k != "S3_ENDPOINT_URL"},
           "REFBENCH_LEASE_TTL": "3"}
    for key in ("keep/me.txt", "killtest/not-a-run/x", "killtestx/y"):
        client.put_object(Bucket="testbucket", Key=key, Body=b"mine")

    def all_keys():
        out = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket="testbucket"):
            out += [o["Key"] for o in page.get("Contents", [])]
        return sorted(out)

    before = all_keys()
    args = ["-s", "v1.0.0", "v1.0.0", "--measure-identical", "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
            "-b", "testbucket", "--endpoint-url", server.endpoint, "-p", "killtest", "--quick"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench.py"), *args, "--only", "small files", "-r", "40",
                             "-o", str(tmp_path / "killed.md")], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(all_keys()) < len(before) + 50 and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before it was killed"
    tree = descendants(proc.pid)
    for pid in tree:  # refbench and everything it started, all at once: nothing can clean up
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)
    left = [k for k in all_keys() if k.startswith("killtest/") and k not in before]
    assert len(left) > 50 and any(k.endswith("/.refbench-lease.json") for k in left), left[:5]
    dead = left[0].split("/")[1]
    time.sleep(4)  # the lease (ttl 3 s) expires
    nxt = run_bench(*args, "--only", "small files/remove", "-r", "1", "-w", "0", "--rounds", "1", "--no-rss",
                    "-o", str(tmp_path / "next.md"), env=env, cwd=tmp_path)
    assert nxt.returncode == 0, nxt.stderr
    assert f"lease sweep: killtest/{dead}/: lease of " in nxt.stderr and "objects removed" in nxt.stderr, nxt.stderr
    assert "lease sweep: left alone below -p: 1 without a refbench lease" in nxt.stderr, nxt.stderr
    assert all_keys() == before  # the dead run's keys and the next run's own are gone; nothing else touched
