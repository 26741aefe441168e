"""Which steps the observer profiles (refbench.explain.moved, issue 36): the client's wall or CPU
time moved; the daemon's CPU moved past its threshold; the daemon's memory, writes or
allocations moved past theirs only together with wall or daemon CPU. Allocations are nearly
deterministic, so a change well inside the threshold is still `slower`: alone it takes no profile."""
from __future__ import annotations

from types import SimpleNamespace as C

import pytest

from refbench.explain import Explainer, moved
from refbench.figures import criteria

SAME = "no significant change"


def comp(metric: str, verdict: str, rel: float = 0.0) -> C:
    return C(metric=metric, verdict=verdict, rel=rel)


WALL_SAME = comp("wall", SAME, 0.002)


def test_only_alloc_moved_by_less_than_its_threshold_takes_no_profile():
    assert not moved([WALL_SAME, comp("daemon-alloc", "slower", 0.01)])
    assert not moved([WALL_SAME, comp("daemon-alloc", "faster", -0.049)])


def test_the_daemons_cpu_moved_past_its_threshold_takes_a_profile():
    assert moved([WALL_SAME, comp("daemon-cpu", "slower", 0.08)])
    assert moved([WALL_SAME, comp("daemon-cpu", "faster", -0.05)])
    assert not moved([WALL_SAME, comp("daemon-cpu", "slower", 0.03)])  # significant, but inside ±5%


def test_memory_writes_or_alloc_past_the_threshold_need_time_to_have_moved_too():
    for metric in ("daemon-memory", "daemon-writes", "daemon-alloc"):
        alone = comp(metric, "slower", 0.25)
        assert not moved([WALL_SAME, alone]), metric  # a CPU profile does not say where bytes went
        assert moved([WALL_SAME, alone, comp("daemon-cpu", "slower", 0.02)]), metric  # daemon CPU moved a little
        assert moved([comp("wall", "slower", 0.06), alone]), metric
        assert not moved([WALL_SAME, comp(metric, "slower", 0.01), comp("daemon-cpu", "slower", 0.02)]), metric


def test_the_thresholds_are_the_runs_own():
    crit = criteria(metric_thresholds={"daemon-cpu": 0.2, "daemon-alloc": 0.005})
    assert not moved([WALL_SAME, comp("daemon-cpu", "slower", 0.1)], crit)
    assert moved([WALL_SAME, comp("daemon-cpu", "slower", 0.25)], crit)
    assert moved([comp("daemon-cpu", "slower", 0.01), comp("daemon-alloc", "slower", 0.01)], crit)


@pytest.mark.parametrize("comps, profiled", [
    ([WALL_SAME, comp("daemon-alloc", "slower", 0.01)], False),
    ([WALL_SAME, comp("daemon-alloc", "slower", 0.01), comp("daemon-cpu", "slower", 0.09)], True),
])
def test_the_observer_profiles_a_step_by_the_rule(tmp_path, monkeypatch, comps, profiled):
    """Through Explainer.step_done, as the runner calls it at the end of each step: the alloc-only
    step costs no profiled runs; the one whose daemon CPU moved gets its profile."""
    e = Explainer(C(kind="ipfs"), tmp_path, "auto", perf_ok=False, perf_why="no perf here")
    asked = []
    monkeypatch.setattr(e, "profiles", lambda *a: asked.append(a) or {"profile_note": "profiled"})
    out = e.step_done(["a", "b"], ["/a", "/b"], ["x", "x"], [None, None], comps, [1.0, 1.0],
                      lambda *a: None, "s / step")
    assert bool(asked) is profiled
    assert ("profile_note" in out) is profiled
