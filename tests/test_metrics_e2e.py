"""End to end, a verdict per metric: real hyperfine 2.0, real Go builds of the s5cmd wrapper from
the test origin, real MinIO. A contender holding 64 MiB more is slower on memory and only there;
one spinning on the CPU for half its run time is slower on CPU."""
from __future__ import annotations

import json

import pytest

from conftest import need, run_bench
from refbench import hyperfine

pytestmark = pytest.mark.slow

# one 32 MB upload: long enough (a few hundred ms) that touching 64 MiB of huge pages is a small
# share of its time, short enough for a few runs
SCENARIOS = """
[targets.s5cmd]
repo = "https://github.com/peak/s5cmd"
module = "github.com/peak/s5cmd/v2"
package = "github.com/peak/s5cmd/v2"
build = ["go", "build", "-o", "{out}", "."]
binary = "s5cmd"
backend = "s3"

[[scenarios]]
name = "one file"
target = "s5cmd"
fixture = { kind = "sparse", size = "32M", count = 1 }

  [[scenarios.steps]]
  name = "upload"
  command = "{{ bin }} {{ extra }} cp {{ file }} {{ remote ~ '/up/' }}"
  cleanup = "{{ bin }} {{ extra }} rm {{ remote ~ '/up/*' }}"
  stored_copies = 1
"""


@pytest.fixture(scope="module")
def metrics_run(tmp_path_factory, s5_origin, builds_dir):
    info = hyperfine.HyperfineInfo.probe()
    if info is None or info.schema != 2:
        need("hyperfine 2.0", "run `refbench setup` (builds hyperfine 2.0.0 with cargo)")
    out = tmp_path_factory.mktemp("metrics")
    (out / "scenarios.toml").write_text(SCENARIOS)

    def run(contender: str, *flags: str) -> dict:
        res = out / f"{contender}.json"
        proc = run_bench("-s", "v1.0.0", contender, "--repo", str(s5_origin.path), "--builds-dir", str(builds_dir),
                         "--scenarios", str(out / "scenarios.toml"), "-r", "12", "-w", "1", "--rounds", "3",
                         "-o", str(out / f"{contender}.md"), "--json", str(res), *flags, cwd=out)
        assert proc.returncode == 0, proc.stderr
        return json.loads(res.read_text())
    return run


def verdicts(doc: dict) -> dict[str, str]:
    (step,) = doc["scenarios"][0]["steps"]
    return {c["metric"]: c["verdict"] for c in step["comparisons"]}


def test_a_contender_holding_64_mib_more_is_slower_on_memory_and_only_there(metrics_run):
    # Holding memory costs a little CPU too: mapping 64 MiB is page-table work in every run, system
    # time. Measured on a fresh machine (2026-11-27): system time 21.0 -> 25.2 ms a run, CPU +3.9%
    # [+1.2%, +7.4%] of 92.5 ms, which CPU's default 5% threshold called `slower` (one of that
    # session's two complete CI trials). So the CPU claim is made at a threshold above that cost:
    # within ±10%, which the page-table work stays inside and a CPU-bound change (busy-cpu: +50%) does not.
    doc = metrics_run("hold-memory", "--metric-threshold", "cpu=0.1")
    v = verdicts(doc)
    assert set(v) >= {"wall", "cpu", "memory"}
    assert v["memory"] == "slower", v
    # Wall time pays for the same work, a little: +1.6% on average over 8 runs of this step (old code and
    # new), which 3 of the 8 called slower, so "no wall change" is no property of this contender; its wall
    # verdict is left out, not asserted either way (it was the test's one flaky assertion: issue 34's A/A runs)
    assert [m for m, verdict in v.items() if verdict == "slower" and m != "wall"] == ["memory"], v
    assert v["cpu"] in ("no significant change", "inconclusive"), v
    step = doc["scenarios"][0]["steps"][0]
    mem = next(c for c in step["comparisons"] if c["metric"] == "memory")
    base, cont = (step["builds"][k]["memory_bytes"] for k in (mem["baseline"], mem["contender"]))
    assert min(cont) - max(base) > 32 * 2 ** 20  # every run's own peak: no running maximum across builds


def test_a_busy_loop_contender_is_slower_on_cpu(metrics_run):
    doc = metrics_run("busy-cpu")
    v = verdicts(doc)
    assert v["cpu"] == "slower", v
    # the default, --profile auto, profiles a step whose CPU verdict moved: this one, where perf is
    from refbench import profile
    from refbench.results import Results
    if profile.find_perf():
        (step,) = [st for _, st in Results.from_json(doc, "busy-cpu").steps()]
        assert step.profiles, step.profile_note
