"""Differential CPU profiles: folding perf's stacks, the functions whose share moved, symbols, a
real perf run where a contender burns CPU in main.burnCPU, the flame graph in headless Chromium,
and a run on a machine without perf."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from conftest import need, run_bench
from refbench import profile, results as rs
from refbench.render.explain import flame_svg, fmt_shift
from test_html_browser import chrome  # noqa: F401  (the headless Chromium fixture)

SCRIPT = """s5cmd 
\tffffffff8100 clear_page_erms
\t4a2b github.com/peak/s5cmd/v2/storage.(*S3).Put
\t4a00 main.main

s5cmd 
\t4a2c main.burnCPU
\t4a00 main.main

sh 
\t d43b8 __vfork
"""


def test_fold_puts_the_process_first_and_the_leaf_last():
    f = profile.fold(SCRIPT)
    assert f == Counter({"s5cmd;main.main;github.com/peak/s5cmd/v2/storage.(*S3).Put;clear_page_erms": 1,
                         "s5cmd;main.main;main.burnCPU": 1, "sh;__vfork": 1})


TRACES = """File: ipfs
Type: samples
Duration: 177.77ms, Total samples = 10
-----------+-------------------------------------------------------
         3   crypto/internal/fips140/sha256.blockSHANI
             github.com/ipfs/boxo/ipld/unixfs.Add
             main.main
-----------+-------------------------------------------------------
         1   runtime.heapArenaOf (inline)
             runtime.mallocgc
             main.main
-----------+-------------------------------------------------------
"""


def test_fold_pprof_traces_like_perfs_stacks():
    assert profile.fold_pprof(TRACES, "ipfs") == Counter({
        "ipfs;main.main;github.com/ipfs/boxo/ipld/unixfs.Add;crypto/internal/fips140/sha256.blockSHANI": 3,
        "ipfs;main.main;runtime.mallocgc;runtime.heapArenaOf": 1})


def test_the_pprof_shim_keeps_one_profile_per_ipfs_process(tmp_path):
    """A command that starts ipfs twice (pin rm, then repo gc) keeps both processes' profiles: each
    runs in a directory of its own, where IPFS_PROF makes kubo write ipfs.cpuprof."""
    fake = tmp_path / "ipfs"
    fake.write_text('#!/bin/sh\n[ -n "$IPFS_PROF" ] && echo "$@" > ipfs.cpuprof\nexit 0\n')
    fake.chmod(0o755)
    where = tmp_path / "pprof"
    shim = profile.write_pprof_shim(str(fake), where)
    cmd = f"{fake} pin rm x && {fake} repo gc"
    subprocess.run(["sh", "-c", cmd.replace(str(fake), str(shim))], check=True, cwd=tmp_path)
    files = profile.pprof_files(where)
    assert sorted(f.read_text() for f in files) == ["pin rm x\n", "repo gc\n"]
    assert not (tmp_path / "ipfs.cpuprof").exists()  # nothing written where the command ran


def test_top_shifts_rank_self_time_changes_and_format_as_points():
    base = Counter({"s5cmd;main.main;main.work": 90, "s5cmd;main.main;runtime.gc": 10})
    cont = Counter({"s5cmd;main.main;main.work": 45, "s5cmd;main.main;runtime.gc": 10,
                    "s5cmd;main.main;main.burnCPU": 45})
    top = profile.top_shifts(base, cont)
    assert top[0].function == "main.burnCPU" and fmt_shift(top[0]) == "main.burnCPU +45.0 pts"
    assert top[1].function == "main.work" and top[1].points == pytest.approx(-45.0)
    assert "main.main" not in [t.function for t in top]  # never a leaf: no self time


def test_diff_stacks_keep_every_sample_when_cut():
    base = Counter({f"a;b;c;d;e;f;g;h{i}": 1 for i in range(50)})
    cont = Counter({f"a;b;c;d;e;f;g;h{i}": 2 for i in range(50)})
    stacks = profile.diff_stacks(base, cont, limit=10, depth=3)
    assert sum(a for _, a, _ in stacks) == 50 and sum(b for _, _, b in stacks) == 100
    assert len(stacks) <= 20 and "a;b;c;…" in [s for s, _, _ in stacks]


def test_repeats_make_short_steps_long_enough():
    assert profile.repeats_for(2.0) == 1
    assert profile.repeats_for(0.1) == profile.MAX_REPEATS
    assert profile.repeats_for(None) == 1


def test_symbols_of_a_stripped_go_binary_are_reported(tmp_path):
    go = shutil.which("go")
    if not go:
        need("go", "builds a tiny binary with and without -s -w")
    (tmp_path / "go.mod").write_text("module example.com/x\n\ngo 1.21\n")
    (tmp_path / "main.go").write_text("package main\n\nfunc main() {}\n")
    env = {**os.environ, "GOFLAGS": "-buildvcs=false"}
    for name, flags in (("full", []), ("stripped", ["-ldflags=-s -w"])):
        subprocess.run([go, "build", *flags, "-o", name, "."], cwd=tmp_path, check=True, env=env, capture_output=True)
    assert profile.has_symbols(tmp_path / "full") is True
    assert profile.has_symbols(tmp_path / "stripped") is False
    assert profile.has_symbols(tmp_path / "main.go") is None


def test_the_flame_graph_draws_the_contenders_frames_coloured_by_change():
    p = rs.Profile(baseline="a", contender="b", stacks=(("s5cmd;main.main;main.work", 90, 45),
                                                        ("s5cmd;main.main;main.burnCPU", 0, 45)))
    svg = flame_svg(p)
    assert svg.startswith("<svg") and svg.count('class="frame"') == 4
    assert "main.burnCPU" in svg and "+50.0 pts" in svg and "-50.0 pts" in svg


def test_perf_status_without_perf_says_so(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert profile.perf_status() == (False, "no profile: perf not found")


def test_perf_status_keeps_no_file_while_it_probes(tmp_path, monkeypatch):
    """The probe's record goes to perf's pipe mode, so while perf runs nothing of refbench's is in
    the temp directory, and a refbench killed outright then leaves nothing there. A stand-in perf
    lists the temp directory while it runs (the probe's file lived in /tmp/refbench-perf-*, left by
    every suite's SIGKILL test); the real perf then probes as before."""
    tmp, seen = tmp_path / "tmp", tmp_path / "seen"
    tmp.mkdir()
    fake = tmp_path / "perf"
    fake.write_text(f'#!/bin/sh\necho "in TMPDIR: $(ls -A "$TMPDIR")" > {seen}\necho "$@" >> {seen}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    assert profile.perf_status(str(fake))[0]
    listed, argv = seen.read_text().splitlines()
    assert listed == "in TMPDIR: " and "-o -" in argv, (listed, argv)
    perf = profile.find_perf()
    if not perf:
        need("perf", "the probe of a real perf (make setup installs linux-perf)")
    ok, why = profile.perf_status(perf)
    assert ok, why
    assert list(tmp.iterdir()) == []


def test_doctor_names_perf_and_what_it_disables(monkeypatch):
    from refbench.commands import doctor

    monkeypatch.setenv("PATH", "/nonexistent")
    row = next(r for r in doctor.checks() if r[1] == "perf")
    assert row[0] == doctor.WARN and "perf not found" in row[2] and "CPU profiles" in row[2]


# ---- end to end ------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_cpu_burning_function_tops_the_profile_diff(explain_run):
    if not profile.find_perf():
        need("perf", "apt-get install linux-perf (scripts/setup.sh)")
    r = rs.load(explain_run["results"])
    burn = r.labels[2]
    for _, st in r.steps():
        p = next(p for p in st.profiles if p.contender == burn)
        assert p.top[0].function == "main.burnCPU" and p.top[0].points > 10, (st.name, p.top)
        assert p.samples[burn] > 0 and p.samples[r.baseline] > 0 and p.stacks
    summary = explain_run["summary"].read_text()
    assert "Where the CPU time moved" in summary and "`main.burnCPU +" in summary
    assert "`main.burnCPU +" in explain_run["comment"].read_text()


@pytest.mark.slow
def test_the_html_report_with_a_flame_graph_renders_in_chromium(explain_run, chrome):
    from selenium.webdriver.common.by import By

    if not profile.find_perf():
        need("perf", "apt-get install linux-perf (scripts/setup.sh)")
    chrome.get(Path(explain_run["html"]).as_uri())
    flames = chrome.find_elements(By.CSS_SELECTOR, "svg.chart.flame")
    assert flames, "no flame graph in the report"
    for svg in flames:
        assert svg.size["width"] > 300 and svg.size["height"] > 30, svg.size
    drawn = chrome.execute_script(
        "return Array.from(document.querySelectorAll('svg.flame rect'))"
        ".filter(r => { const b = r.getBoundingClientRect(); return b.width > 0 && b.height > 0; }).length")
    assert drawn > 20
    body = chrome.find_element(By.TAG_NAME, "body").text
    assert "main.burnCPU +" in body and "made different S3 requests" in body
    assert chrome.execute_script("return performance.getEntriesByType('resource').length") == 0


def _path_without_perf(tmp_path: Path) -> str:
    """A PATH with every tool of this one except perf (links in a directory of its own)."""
    bin_dir = tmp_path / "bin-no-perf"
    bin_dir.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            p = os.path.join(d, name)
            if name.startswith("perf") or (bin_dir / name).exists() or not os.access(p, os.X_OK):
                continue
            (bin_dir / name).symlink_to(p)
    return str(bin_dir)


@pytest.mark.slow
def test_a_machine_without_perf_runs_the_comparison_and_says_why_there_is_no_profile(explain_run, builds_dir,
                                                                                       tmp_path):
    path = _path_without_perf(tmp_path)
    assert shutil.which("perf", path=path) is None and shutil.which("go", path=path)
    local = tmp_path / "local"
    local.mkdir()
    proc = run_bench("-l", str(local), "-s", "v1.0.0", "22", "--repo", str(explain_run["origin"].path),
                     "--builds-dir", str(builds_dir), "--quick", "--only", "small files/remove", "-r", "2", "-w", "1",
                     "--rounds", "1", "--profile", "-o", str(tmp_path / "summary.md"),
                     "--json", str(tmp_path / "results.json"), env={"PATH": path}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = rs.load(tmp_path / "results.json")
    assert r.explain_notes == ("no profile: perf not found",)
    assert all(st.profiles is None and st.profile_note == "no profile: perf not found" for _, st in r.steps())
    assert "no profile: perf not found" in (tmp_path / "summary.md").read_text()
    assert all(st.requests for _, st in r.steps())  # the accounting does not need perf
    assert list(local.iterdir()) == []


def test_only_wall_or_cpu_verdicts_that_moved_ask_for_a_profile():
    from types import SimpleNamespace as C

    from refbench.explain import moved

    assert moved([C(verdict="slower")])  # no metric field yet: a wall verdict
    assert moved([C(verdict="faster", metric="cpu")])
    assert not moved([C(verdict="slower", metric="memory"), C(verdict="inconclusive", metric="wall")])
    assert not moved([C(verdict="no significant change")])


def test_a_servers_stacks_are_marked_apart_from_the_clients():
    """kubo's CLI and its online daemon are both `ipfs`: the daemon's samples are rooted at
    `ipfs (server)`, so the functions it runs read apart from the CLI's."""
    client = Counter({"ipfs;main.main;cmd.Run": 3})
    server = profile.as_server(Counter({"ipfs;runtime.goexit;add.Add": 5, "ipfs": 1}))
    assert server == Counter({"ipfs (server);runtime.goexit;add.Add": 5, "ipfs (server)": 1})
    assert set(profile.add([client, server])) == {"ipfs;main.main;cmd.Run", "ipfs (server);runtime.goexit;add.Add",
                                                  "ipfs (server)"}


def test_a_step_whose_daemon_metric_moved_asks_for_a_profile():
    """The daemon's CPU moved past its threshold while the client's figures did not (issue 36):
    the step is profiled, so the daemon's own profile (perf -p on it, kubo's pprof) explains it;
    its memory, writes or allocations do so only with its CPU (tests/test_explain.py: the rule)."""
    from types import SimpleNamespace as C

    from refbench.explain import moved

    wall = C(verdict="no significant change", metric="wall", rel=0.0)
    assert moved([wall, C(verdict="slower", metric="daemon-cpu", rel=0.1)])
    for metric in ("daemon-memory", "daemon-writes", "daemon-alloc"):
        assert moved([wall, C(verdict="slower", metric=metric, rel=0.1), C(verdict="slower", metric="daemon-cpu", rel=0.01)])
    assert not moved([C(verdict="inconclusive", metric="daemon-memory", rel=0.3)])


def test_the_daemons_pprof_profile_is_read_around_the_run_and_a_failure_names_its_url(tmp_path):
    """profile.daemon_pprof asks the daemon's API for a profile as long as the run, before the run
    starts, and keeps what it answers; an API that cannot answer is an error naming the URL."""
    import http.server
    import threading
    import time

    from refbench import profile

    asked = []

    class Api(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append((time.monotonic(), self.path))
            if not self.path.startswith("/debug/pprof/profile"):
                self.send_error(404)
                return
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"profile bytes")

        def log_message(self, *a):
            pass
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    api = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        with profile.daemon_pprof((), api, 3, tmp_path):
            started = time.monotonic()
        assert asked and asked[0][0] < started and asked[0][1] == "/debug/pprof/profile?seconds=3"
        assert [p.read_bytes() for p in profile.daemon_pprof_files(tmp_path)] == [b"profile bytes"]
        assert profile.daemon_pprof_seconds([0.4, 2.2, None]) == 4
        with pytest.raises(RuntimeError, match=f"daemon's profile at {api}/nothing/debug/pprof/profile"):
            with profile.daemon_pprof((), api + "/nothing", 1, tmp_path):
                pass
        with profile.daemon_pprof((), None, 1, tmp_path):  # no daemon: nothing asked
            pass
        assert len(asked) == 2
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_label_with_a_space_or_hash_gets_a_pprof_run_that_sh_can_start(tmp_path):
    """The explain pass ran each build's command through its pprof shim, the shim in a directory
    named after the label and spliced into the shell command unquoted: an A/A's second build,
    "v1.0.0 #2", became `.../pprof-v1.0.0 #2/ipfs-prof add ...`, which sh split at the space and
    cut at the `#` ("Permission denied"; issue 36's helper found it). The directory holds safe
    characters only, and the shim's path is quoted."""
    import shlex
    import subprocess
    from refbench.explain import pprof_dir, shim_command
    binary = tmp_path / "bin" / "ipfs"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\necho ran \"$@\"\n")
    binary.chmod(0o755)
    where = pprof_dir(tmp_path / "work dir", 1, "v1.0.0 #2")
    assert where.name == "pprof-1-v1.0.0__2" and where != pprof_dir(tmp_path / "work dir", 0, "v1.0.0 #2")
    shim = profile.write_pprof_shim(str(binary), where)
    cmd = shim_command(f"{binary} add -r fixture", str(binary), shim)
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "ran add -r fixture", (cmd, out.stderr)
    # a binary whose path the command quotes: its replacement inside those quotes was left bare, and
    # a work directory that needs quoting too was split (and its `$(...)` run; review35p P4)
    quoted = tmp_path / "b $(touch ran-outside)" / "ipfs"
    quoted.parent.mkdir()
    quoted.write_text(binary.read_text())
    quoted.chmod(0o755)
    shim = profile.write_pprof_shim(str(quoted), pprof_dir(tmp_path / "work $(touch ran-outside)", 0, "v1"))
    cmd = shim_command(f"{shlex.quote(str(quoted))} add x", str(quoted), shim)
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "ran add x", (cmd, out.stderr)
    assert not (tmp_path / "ran-outside").exists()
