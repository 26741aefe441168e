"""The runner's scheduling through the MockExecutor and a fake backend, in milliseconds: run-by-run
interleaving and its blocks, fixed-size vs sequential looks, stopping rules, the budget, when
hyperfine may skip the shell, a verdict per metric, and failed runs kept out of every verdict."""
from __future__ import annotations

import collections
import dataclasses
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from fakes.backend import FakeBackend
from fakes.executor import INFO_1, MockExecutor
from refbench import judge, runner as rn, stats
from refbench.builds import BuiltRef
from refbench.config import FixtureSpec, ScenarioSpec, StepSpec
from refbench.fixtures import FixtureFiles
from refbench.refs import ResolvedRef
from refbench.sampling import UNTIL_DECIDED_RUNS, Sampling
from refbench.verdict import Verdict

@pytest.fixture
def fake_hf():
    return MockExecutor()


def builds(tmp_path, *factors) -> list[BuiltRef]:
    out = []
    for i, f in enumerate(factors):
        ref = ResolvedRef(f"r{i}", "tag", f"{i:040d}", f"r{i}")
        name = f"fake-{f:.2f}" if isinstance(f, float) else f"fake-{f}"
        out.append(BuiltRef("t", ref, f"b{i}", tmp_path / name, "git", "go", False, 0.0))
    return out


SAMPLING_KEYS = ("interleave", "until_decided", "max_runs", "max_time", "budget", "min_rounds")


def run(tmp_path, factors, *, command="{{ bin }} go", prepare=None, setup=None, **kw):
    """One step of `factors` (wall time of each build x 0.1 s) through the runner; its StepResult."""
    return run_all(tmp_path, factors, [StepSpec("step", command, prepare=prepare, setup=setup)], **kw)[0]


def run_all(tmp_path, factors, steps, *, runs=10, rounds=5, warmup=0, backend=None, executor=None,
            family_size=1, stop_rule=None, **plan):
    """A scenario of `steps` through the runner, on the MockExecutor's simulated clock; `stop_rule`:
    the runner's (default: refbench.stopping.StopRule)."""
    (tmp_path / "work").mkdir(exist_ok=True)
    executor = executor or _current[0]
    sampling = Sampling(runs=runs, warmup=warmup, rounds=rounds,
                        **{k: plan.pop(k) for k in SAMPLING_KEYS if k in plan})
    p = rn.Bench(builds=builds(tmp_path, *factors), backend=backend or FakeBackend(tmp_path / "remote"),
                 executor=executor, workdir=tmp_path / "work", cache_dir=tmp_path, sampling=sampling,
                 criteria=stats.Criteria(), measure_rss=False, family_size=family_size,
                 clock=getattr(executor, "clock", time.monotonic), **plan)  # a real executor: real time
    r = rn.Runner(dataclasses.replace(p, steps=len(steps)), **({"stop_rule": stop_rule} if stop_rule else {}))
    spec = FixtureSpec(kind="sparse", size=1, count=1)
    sc = ScenarioSpec("s", "t", spec, spec, tuple(steps))
    fixture = FixtureFiles(spec, tmp_path, 1, 1, 0)
    return r.run_scenario(sc, fixture).steps


_current = [None]


@pytest.fixture(autouse=True)
def _executor(fake_hf):
    """Every run() of a test goes through that test's MockExecutor (fake_hf)."""
    _current[0] = fake_hf
    yield
    _current[0] = None


def calls(executor: MockExecutor) -> list[list[str]]:
    return executor.calls


def names(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-n"]


def test_runs_alternate_within_a_round_and_rounds_are_the_blocks(tmp_path, fake_hf):
    st = run(tmp_path, [1.0, 1.0], runs=4, rounds=2)
    rounds = calls(fake_hf)
    assert [names(a) for a in rounds] == [["b0", "b1", "b1", "b0"], ["b1", "b0", "b0", "b1"]]
    assert all(a[a.index("--runs") + 1] == "1" for a in rounds)
    a, b = st.samples["b0"], st.samples["b1"]
    assert a.rounds == b.rounds == [0, 0, 1, 1]
    assert st.comparisons[0].method.endswith("2 rounds"), st.comparisons[0].method
    assert st.looks == (1.0,) and st.stopped == "planned"


def test_interleave_rounds_keeps_plain_hyperfine_order(tmp_path, fake_hf):
    st = run(tmp_path, [1.0, 1.0], runs=4, rounds=2, interleave="rounds")
    rounds = calls(fake_hf)
    assert [names(a) for a in rounds] == [["b0", "b1"], ["b1", "b0"]]
    assert all(a[a.index("--runs") + 1] == "2" for a in rounds)
    assert st.samples["b0"].rounds == [0, 0, 1, 1]


def test_warmups_run_in_one_hyperfine_call_before_the_rounds(tmp_path, fake_hf):
    run(tmp_path, [1.0, 1.0], runs=2, rounds=1, warmup=3)
    first = calls(fake_hf)[0]
    # interleaved as a round is, each warm-up a run of its own (issue 34): the baseline no longer
    # warms up first and then leads the first round
    assert first[first.index("--warmup") + 1] == "0" and first[first.index("--runs") + 1] == "1"
    assert names(first) == ["b1", "b0", "b0", "b1", "b1", "b0"]
    assert names(calls(fake_hf)[1])[0] == "b0"  # the first round starts with the build that warmed up last


def test_fixed_size_run_names_a_large_slowdown(tmp_path, fake_hf):
    st = run(tmp_path, [1.0, 1.3], runs=10, rounds=5)
    assert st.comparisons[0].verdict == Verdict.SLOWER
    assert len(st.samples["b0"].times) == 10


def test_sequential_stops_once_decided_and_records_its_looks(tmp_path, fake_hf):
    st = run(tmp_path, [1.0, 1.5], runs=4, rounds=2, until_decided=True, max_runs=40)
    assert st.stopped == "decided"
    assert st.comparisons[0].verdict == Verdict.SLOWER
    assert len(st.looks) == st.rounds and st.looks == tuple(sorted(st.looks))
    assert len(st.samples["b0"].times) < 40


def test_sequential_gives_up_at_max_runs(tmp_path, fake_hf):
    fake_hf.sigma = 0.5  # far too noisy to decide 3% in 12 runs: this seed's step is not decided
    st = run(tmp_path, [1.0, 1.03], runs=4, rounds=2, until_decided=True, max_runs=12)
    assert st.stopped == "max-runs" and st.comparisons[0].verdict == Verdict.INCONCLUSIVE
    assert len(st.samples["b0"].times) == 12 and st.looks[-1] == 1.0  # its last look spent what was left


def test_budget_adds_no_rounds_that_cannot_decide_in_time(tmp_path, fake_hf):
    fake_hf.sigma = 0.5  # 3% at cv 50%: undecided after the planned 4 runs, and a millisecond pays for no more
    st = run(tmp_path, [1.0, 1.03], runs=4, rounds=2, budget=0.001, max_runs=200)
    assert st.stopped == "budget" and st.comparisons[0].verdict == Verdict.INCONCLUSIVE
    assert len(st.samples["b0"].times) == 4 and st.rounds == 2


def test_no_shell_only_when_every_command_and_prepare_allows_it(tmp_path, fake_hf):
    fake_hf.info = INFO_1  # 1.x runs a shell unless told -N
    run(tmp_path, [1.0, 1.0], runs=2, rounds=1)
    assert "-N" in calls(fake_hf)[-1]
    run(tmp_path, [1.0, 1.0], runs=2, rounds=1, prepare="true | true")
    assert "-N" not in calls(fake_hf)[-1]
    run(tmp_path, [1.0, 1.0], runs=2, rounds=1, no_shell="off")
    assert "-N" not in calls(fake_hf)[-1]


def test_the_backend_context_reaches_the_commands_and_every_scenario_is_closed(tmp_path, fake_hf):
    backend = FakeBackend(tmp_path / "remote")
    st = run(tmp_path, [1.0, 1.0], runs=2, rounds=1, command="{{ bin }} cp {{ remote ~ '/up/' }}",
             backend=backend)
    assert st.samples["b0"].command == f"{tmp_path}/fake-1.00 cp {tmp_path}/remote/s/up/"
    assert backend.calls == [("open_scenario", "s", ("b0", "b1")), ("close_scenario",)]


def test_a_failing_step_still_closes_its_scenario(tmp_path, fake_hf):
    backend = FakeBackend(tmp_path / "remote")
    with pytest.raises(rn.RunError, match="step: setup for b0 failed"):
        run(tmp_path, [1.0, 1.0], runs=2, rounds=1, backend=backend, setup="exit 3")
    assert backend.calls[-1] == ("close_scenario",)


def test_hyperfine_2_gets_a_shell_only_where_a_command_needs_one(tmp_path, fake_hf):
    run(tmp_path, [1.0, 1.0], runs=2, rounds=1)
    argv = calls(fake_hf)[-1]
    assert "-S" not in argv and "-N" not in argv
    assert argv[argv.index("--metrics") + 1] == "time_wall_clock,time_user,time_system,memory_peak_resident"
    run(tmp_path, [1.0, 1.0], runs=2, rounds=1, prepare="true | true")
    assert "-S" in calls(fake_hf)[-1]


def test_every_metric_gets_its_own_verdict(tmp_path, fake_hf):
    """A contender holding 64 MiB more is slower on memory only; one burning 30% more CPU in the
    same wall time is slower on CPU only; memory identical to the byte is no change."""
    fake_hf.sigma = 0.01
    st = run(tmp_path, [1.0, "1.00-mem64"], runs=10, rounds=5)
    by = {c.metric: c.verdict for c in st.comparisons}
    assert by == {"wall": Verdict.SAME, "cpu": Verdict.SAME, "memory": Verdict.SLOWER}
    st = run(tmp_path, [1.0, "1.00-cpu1.3"], runs=10, rounds=5)
    by = {c.metric: c.verdict for c in st.comparisons}
    assert by["cpu"] == Verdict.SLOWER and by["memory"] != Verdict.SLOWER and by["wall"] != Verdict.SLOWER
    rec = st.record()
    assert [c.metric for c in rec.comparisons] == ["wall"]
    assert [c.metric for c in rec.metric_comparisons] == ["cpu", "memory"]


def test_with_hyperfine_1_memory_is_unavailable_not_a_running_maximum(tmp_path, fake_hf):
    fake_hf.info = INFO_1
    st = run(tmp_path, [1.0, "1.00-mem64"], runs=4, rounds=2)
    assert {c.metric for c in st.comparisons} == {"wall", "cpu"}
    assert all(m is None for s in st.samples.values() for m in s.memory)
    assert st.record().builds["b1"].memory_bytes is None


def test_a_crashing_contender_is_an_error_not_faster(tmp_path, fake_hf):
    fake_hf.fail = {"fake-0.10": 139}
    with pytest.raises(rn.RunError, match=r"round 1: build b1 failed in 2 of 2 runs \(exit code 139\)"):
        run(tmp_path, [1.0, 0.1], runs=4, rounds=2)
    assert all("-i" in argv for argv in calls(fake_hf))  # hyperfine exports failed runs; refbench names the build
    # every warm-up run is a run of the call now (interleaved), so each one's exit is checked
    with pytest.raises(rn.RunError, match=r"warm-up: build b1 failed in 2 of 2 runs"):
        run(tmp_path, [1.0, 0.1], runs=4, rounds=2, warmup=2)


def test_results_are_matched_to_builds_by_name(tmp_path, fake_hf):
    """hyperfine answering for other commands than asked (e.g. a --reference run first) is an
    error, never samples shifted onto the wrong build."""
    fake_hf.names = lambda call: ("reference",) + call.names[:-1]
    fake_hf.executor_checks = True
    from refbench import hyperfine
    with pytest.raises(rn.RunError, match="hyperfine returned results for"):
        hyperfine.match_results(fake_hf.measure("x", rn.Call(("b0", "b1"), ("a", "b"), (None, None), 1, 0), {})[0],
                                ["b0", "b1"], "x")


# ---- the budget: every step sampled sequentially within it (refbench.budget) ----------------------
BUDGETED = dict(runs=20, rounds=5, min_rounds=2)  # the default run's: a 2-round pilot, then looks every round


def test_a_budgeted_step_stops_as_soon_as_it_is_decided(tmp_path, fake_hf):
    st = run(tmp_path, [1.0, 1.5], budget=600.0, **BUDGETED)
    assert st.stopped == "decided" and st.comparisons[0].verdict == Verdict.SLOWER
    # before the 20 planned: the pilot's two rounds of 4 and a look after every round from there
    assert len(st.samples["b0"].times) < 20 and len(st.looks) == st.rounds
    assert st.looks[-1] < 1.0 and fake_hf.now < 5


def test_max_runs_does_not_bind_before_the_budget(tmp_path, fake_hf):
    fake_hf.sigma = 0.12  # noise that needs well over the old cap of 60 runs to show ±5%
    st = run(tmp_path, [1.0, 1.0], budget=300.0, **BUDGETED)
    n = len(st.samples["b0"].times)
    assert st.stopped == "decided" and st.comparisons[0].verdict == Verdict.SAME, (st.stopped, n)
    assert n > UNTIL_DECIDED_RUNS and fake_hf.now < 300
    capped = run(tmp_path, [1.0, 1.0], budget=300.0, max_runs=30, **BUDGETED)  # the user's own cap binds
    assert capped.stopped == "max-runs" and len(capped.samples["b0"].times) == 30  # undecided at 30 in this seed
    assert capped.comparisons[0].verdict == Verdict.INCONCLUSIVE and capped.looks[-1] == 1.0


def test_futility_stops_a_step_that_cannot_decide_and_gives_its_time_to_the_next(tmp_path, fake_hf):
    steps = [StepSpec("hopeless", "{{ bin }} go sigma=0.6"), StepSpec("fine", "{{ bin }} go sigma=0.14")]
    hopeless, fine = run_all(tmp_path, [1.0, 1.0], steps, budget=30.0, **BUDGETED)
    assert hopeless.stopped == "budget" and hopeless.comparisons[0].verdict == Verdict.INCONCLUSIVE
    assert len(hopeless.samples["b0"].times) == 20  # it stopped after its planned runs, not at its share
    # its last look became the final one (a stop for time, not for what it saw): a finite interval
    assert hopeless.looks[-1] == 1.0 and hopeless.comparisons[0].ci_high is not None
    assert fine.stopped == "decided" and fine.comparisons[0].verdict == Verdict.SAME
    # the second step decided on time the first left: more than a fair half of the budget
    assert len(fine.samples["b0"].times) * 2 * 0.1 > 15.0 and fake_hf.now <= 30.0 * 1.05


def test_a_budget_too_small_for_a_step_ends_it_by_budget(tmp_path, fake_hf):
    fake_hf.sigma = 0.3
    st = run(tmp_path, [1.0, 1.0], budget=1.0, **BUDGETED)
    assert st.stopped == "budget" and len(st.samples["b0"].times) == 8
    assert st.comparisons[0].verdict == Verdict.INCONCLUSIVE


def test_a_pilot_that_under_estimates_the_noise_does_not_end_the_step_undecided(tmp_path, fake_hf):
    """A pilot whose runs were quieter than the step's (a full-size dag-pb GC step planned 22 runs a
    build from its pilot and stopped there, inconclusive, with a sixth of the budget unspent): its
    most runs grow with the noise seen at later looks, and the step decides within its share. The
    looks taken before they grew keep the alpha they spent: their spending times are recorded."""
    cmd = "{{ bin }} go pilot_sigma=0.02 sigma=0.12"
    st = run(tmp_path, [1.0, 1.0], command=cmd, budget=60.0, **BUDGETED)
    assert st.stopped == "decided" and st.comparisons[0].verdict == Verdict.SAME, st.stopped
    assert st.spend is not None and len(st.spend) == len(st.looks) == st.rounds
    assert all(a < b for a, b in zip(st.spend, st.spend[1:]))  # every look spends some alpha
    # the pilot's plan was its 20 planned runs (8/20 at its look): the step went far past them, and
    # the looks taken under smaller plans had larger spending times than their share of the last
    assert st.spend[1] == 8 / 20 and len(st.samples["b0"].times) > 100 and st.spend[2] > st.looks[2]
    from refbench.stopping import StopRule

    class PlannedOnce(StopRule):
        """The same rule, its most runs fixed by the pilot: never planned again."""
        def needs_replan(self, state):
            return False
    fixed = run(tmp_path, [1.0, 1.0], command=cmd, budget=60.0, executor=MockExecutor(), stop_rule=PlannedOnce,
                **BUDGETED)
    assert (fixed.stopped, fixed.comparisons[0].verdict, len(fixed.samples["b0"].times)) == \
        ("max-runs", Verdict.INCONCLUSIVE, 20)
    assert st.record().spend == tuple(round(x, 6) for x in st.spend)
    steady = run(tmp_path, [1.0, 1.0], budget=60.0, **BUDGETED)  # a pilot as noisy as the rest: no re-plan
    # the first look, before the plan, was read against the budget's guard of 2000 runs
    assert steady.stopped == "decided" and steady.record().spend[0] == 4 / 2000
    assert steady.record().spend[1:] == steady.record().looks[1:]
    fixed_size = run(tmp_path, [1.0, 1.0], runs=10, rounds=5)  # no looks to spend at: none recorded
    assert fixed_size.record().spend is None


def test_a_replan_only_grows_within_the_share_and_keeps_each_looks_spending_time():
    from refbench.stopping import Progress, StopRule
    sampling = Sampling(runs=20, warmup=0, rounds=5, budget=100.0, min_rounds=2)
    rule = StopRule(sampling, stats.Criteria(), family_size=1, n_builds=2)
    state = rule.start(20, t_step=0.0, remaining=100.0).after_round(4, 0.0).after_round(8, 0.8)
    planned = rule.plan(state, noise=0.02, now=1.6, progress=Progress(steps_total=1))
    assert not rule.needs_replan(state) and not rule.needs_replan(planned)  # the plan's own look
    look3 = planned.after_round(12, 1.6)
    assert rule.needs_replan(look3)
    assert rule.replan(look3, noise=0.01, now=2.4) == look3  # quieter than planned: never down
    grown = rule.replan(look3, noise=0.2, now=2.4)
    # at most as far as keeps this look's spending time above the last one's (12/m > 8/20)
    assert planned.n_max == 20 and 20 < grown.n_max < 12 * 20 / 8 and grown.look_max == (2000, 20, grown.n_max)
    assert grown.spend() == pytest.approx((4 / 2000, 8 / 20, 12 / grown.n_max))
    assert grown.looks() == pytest.approx((4 / grown.n_max, 8 / grown.n_max, 12 / grown.n_max))
    poor = rule.replan(dataclasses.replace(look3, allowance=3.0), noise=0.2, now=2.4)  # 0.6 s left: 3 runs a build
    assert poor.n_max == 20 and not poor.by_budget  # below its plan: the plan stands (futility ends it)
    short = rule.replan(dataclasses.replace(look3, allowance=4.4), noise=0.2, now=2.4)  # 2 s: 10 runs a build
    assert short.n_max == 22 and short.by_budget
    ended = grown.ended("budget")  # a stop for time: the last look is the final one
    assert ended.spend()[-1] == 1.0 and ended.spend()[:2] == grown.spend()[:2]


def _budgeted_trial(args) -> tuple[Verdict, str]:
    """One trial of the simulations below, in a directory of its process's own: its verdict and why
    it stopped."""
    root, factor, i, command = args
    where = Path(root) / f"p{os.getpid()}"
    where.mkdir(exist_ok=True)
    _current[0] = MockExecutor(seed=f"budget-{factor}-{i}", sigma=0.07)
    st = run(where, [1.0, factor], command=command, budget=60.0, **BUDGETED)
    return st.comparisons[0].verdict, st.stopped


def _budgeted_simulation(tmp_path, command: str) -> dict[float, list[tuple[Verdict, str]]]:
    """600 A/A trials and 200 at +10% of `command`'s step (the verdict and the stop of each)."""
    trials = {1.0: 600, 1.1: 200}
    # the trials are independent and seeded each on its own, so the machine's two cores share them
    # (the same verdicts in the same order as one after another: pool.map keeps the order)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        return {factor: pool.map(_budgeted_trial, [(str(tmp_path), factor, i, command) for i in range(n)])
                for factor, n in trials.items()}


def _assert_error_rates(verdicts: dict[float, list[tuple[Verdict, str]]]) -> None:
    from test_stats_sim import alarm_bound, at_least
    aa, slow = [v for v, _ in verdicts[1.0]], [v for v, _ in verdicts[1.1]]
    false = sum(v in (Verdict.SLOWER, Verdict.FASTER) for v in aa)
    same = sum(v == Verdict.SAME for v in aa)
    found = sum(v == Verdict.SLOWER for v in slow)
    print(f"\nA/A: {false} false alarms, {same} no change of {len(aa)}; +10%: {found} found of {len(slow)}; "
          f"stops: {sorted(collections.Counter(w for _, w in verdicts[1.0]).items())}")
    assert false <= alarm_bound(len(aa)), false
    assert same >= at_least(len(aa), 0.8), same  # the A/A answer is 'no significant change', not 🟡
    assert found >= at_least(len(slow), 0.9), found


@pytest.mark.slow
def test_budgeted_steps_keep_false_alarms_under_alpha_and_find_ten_percent(tmp_path):
    """Simulation: 600 A/A steps and 200 steps 10% slower, each on a budget of a minute of 0.1 s
    runs at 7% noise, each trial seeded on its own (independent trials).

    The false-alarm bound is test_stats_sim.alarm_bound(600): the largest count a Binomial(600,
    0.05) exceeds with < 1% probability (43), so a procedure at alpha passes with >= 99%; and a
    procedure at twice alpha stays within it with P(Binomial(600, 0.10) <= 43) = 0.0099, so it fails
    with >= 99% (100 trials, as before, passed a 10% procedure 88% of the time). Beside it the power
    check: a procedure that never calls anything passes the bound, so +10% must be found in at least
    at_least(200, 0.9) of 200 steps, the count a 90%-power procedure reaches with >= 99%."""
    _assert_error_rates(_budgeted_simulation(tmp_path, "{{ bin }} go"))


@pytest.mark.slow
def test_steps_whose_pilot_under_estimates_the_noise_keep_their_error_rates_and_decide(tmp_path):
    """The same simulation with pilots quieter than the step (noise 3% in the two pilot rounds, 8%
    after), where the most runs grow after the plan (StopRule.replan): the false alarms stay
    within the same bound, +10% is still found, and the A/A steps end decided, where with the
    most runs fixed by the pilot about half ended at them undecided (155 of 300 here)."""
    verdicts = _budgeted_simulation(tmp_path, "{{ bin }} go pilot_sigma=0.03 sigma=0.08")
    _assert_error_rates(verdicts)
    from test_stats_sim import at_most
    undecided = sum(why != "decided" for _, why in verdicts[1.0])
    assert undecided <= at_most(600, 0.05), undecided


# ---- a run is one record --------------------------------------------------------------------------
def test_every_run_is_one_measurement_and_the_metric_lists_are_read_off_them():
    """hyperfine's per-metric tuples become one Measurement per run; a figure the timer does not
    give every run (here CPU) is missing from all of them, so no comparison reads half a list."""
    from refbench.executor import measurements
    from refbench.hyperfine import CommandResult
    res = CommandResult("b0", (0.1, 0.2), (0.05, 0.06), (0.01, 0.02), (0, None), (100, 200), True,
                        instructions=(7, 9), own_memory=True)
    ms = measurements(res)
    assert [(m.wall, m.user, m.system, m.memory, dict(m.counters), m.exit_code) for m in ms] == [
        (0.1, 0.05, 0.01, 100, {"instructions": 7}, 0), (0.2, 0.06, 0.02, 200, {"instructions": 9}, None)]
    s = rn.BuildSamples()
    s.add(res, 3)
    assert s.times == [0.1, 0.2] and s.rounds == [3, 3] and s.exit_codes == [0, None]
    assert s.values("instructions") == [7.0, 9.0] and s.values("cpu") == pytest.approx([0.06, 0.08])
    no_cpu = CommandResult("b0", (0.1,), (), (), (0,), None)  # 1.x over several runs: no run's own CPU
    s.add(no_cpu, 4)
    assert s.user == [] and s.values("cpu") is None and s.values("memory") is None
    assert s.record().instructions == (7, 9, None) and s.record().memory_bytes == (100, 200, None)


# ---- the stopping rule is a value --------------------------------------------------------------------
def test_the_stopping_rule_is_pure_and_says_why():
    """decide(state, comparisons, now, progress) -> (why or CONTINUE, new state): the same inputs give
    the same answer, nothing it is given changes, and a stop for time makes the last look final."""
    from refbench.stopping import CONTINUE, Progress, StopRule
    sampling = Sampling(runs=20, warmup=0, rounds=5, budget=100.0, min_rounds=2)
    rule = StopRule(sampling, stats.Criteria(), family_size=1, n_builds=2)
    state = rule.start(20, t_step=0.0, remaining=rule.budget_left(0.0))
    assert state.per_round == (4, 4, 4, 4, 4) and state.on and state.n_max == 2000 and state.rounds == 0
    assert rule.decide(state, [], 0.0, Progress(steps_total=1)) == (CONTINUE, state)  # no look before a round
    after = state.after_round(4, started=0.0).after_round(8, started=5.0)
    assert after.t_rounds == 0.0 and after.looks() == (4 / 2000, 8 / 2000) and state.rounds == 0
    assert rule.needs_plan(after) and not rule.needs_plan(state)
    progress = Progress(steps_total=3, pilots=(2.0,))
    planned = rule.plan(after, noise=0.05, now=1.6, progress=progress)
    # its share: twice a fair third of the budget (two steps to come), unless the two steps to come
    # could not then run pilots as long as the mean so far (2.0 and its own 1.6); most runs from the noise
    assert planned.allowance == pytest.approx(min(100.0 - 2 * (2.0 + 1.6) / 2, 2 * 100.0 / 3))
    assert planned.pilot_seconds == 1.6
    assert 20 <= planned.n_max < 2000 and progress.pilots == (2.0,)  # the progress given is not changed
    x, y = [1.0 + 0.01 * (i % 3) for i in range(8)], [1.5 + 0.01 * (i % 3) for i in range(8)]
    slower = judge.contrast_metric("wall", "b0", x, "b1", y, stats.Criteria(), looks=planned.looks())
    why, final = rule.decide(planned, [slower], 1.6, progress)
    assert (why, final) == ("decided", planned) and rule.decide(planned, [slower], 1.6, progress) == (why, final)
    import random
    rng = random.Random(1)
    a, b = ([rng.lognormvariate(0, 0.3) for _ in range(8)] for _ in range(2))
    same = judge.contrast_metric("wall", "b0", a, "b1", b, stats.Criteria(), looks=planned.looks())
    assert not stats.should_stop(same, stats.Criteria(), 1)  # at cv 30%, 8 runs decide nothing
    assert rule.decide(planned, [same], 1.6, progress) == (CONTINUE, planned)
    # under a budget the step's runs, as many as its share paid for at the pilot's pace, bound it,
    # not a clock: a step of 40 s rounds (a GC at full size) is not stopped at a dozen runs
    assert rule.decide(planned, [same], 1000.0, progress) == (CONTINUE, planned)
    capped = StopRule(dataclasses.replace(sampling, max_time=600.0), stats.Criteria(), family_size=1, n_builds=2)
    late = capped.decide(planned, [same], 1000.0, progress)  # --max-time: the clock alone ends it
    assert late[0] == "max-time" and late[1].n_max == 8  # its last look spends what is left of alpha
    assert Sampling(runs=20, warmup=0, rounds=5, until_decided=True).step_seconds == 600.0  # no budget: 10 min
    assert sampling.step_seconds is None
    assert Progress(steps_total=3).step_done(planned).pilots == (1.6,)
    # a state built once per machine and build (a GC's million-block repo) spends no budget
    built = Progress(steps_total=3).spent("state", 30.0).spent("setup", 5.0)
    assert rule.budget_left(50.0, built) == 100.0 - 20.0 and rule.budget_left(50.0) == 50.0


def test_the_rule_goes_on_while_a_watched_daemon_metric_can_still_be_decided():
    """runner.WATCHED: the rule watches wall time and the daemon's metrics. A step whose wall time is
    decided goes on while a daemon metric is undecided and can be decided in the time left; it
    stops once all are decided, and for the budget once none still undecided can be. With wall
    time alone the rule is what it was: the most runs any contender's wall comparison needs."""
    from refbench import budget as bg
    from refbench.figures import Contrast
    from refbench.runner import WATCHED
    from refbench.stopping import CONTINUE, Progress, StopRule
    assert WATCHED[0] == "wall" and {"daemon-cpu", "daemon-memory", "daemon-writes", "daemon-alloc"} <= set(WATCHED)
    rule = StopRule(Sampling(runs=20, warmup=0, rounds=5, budget=100.0, min_rounds=2), stats.Criteria(),
                    family_size=1, n_builds=2)
    state = rule.start(20, t_step=0.0, remaining=rule.budget_left(0.0))
    for k, n in enumerate((4, 8, 12, 16, 20, 24)):
        state = state.after_round(n, started=float(k))
    state = state.with_max(400, allowance=50.0)
    now, progress = 6.0, Progress(steps_total=1)
    # 0.125 s a run so far, 44 s of its share left: 176 more runs a build, 200 in all
    assert 24 + bg.affordable_runs(50.0 - now, rule.per_run(state, now), 2) == 200

    def contrast(metric: str, decided: bool, needs: int, contender: str = "b1") -> Contrast:
        lo, hi = (-0.01, 0.01) if decided else (-0.2, 0.2)
        return Contrast("b0", contender, 1.0, 0.0, lo, hi, 0.5, Verdict.SAME if decided else Verdict.INCONCLUSIVE,
                        False, None, needs, 1.0, 0.0, "b1", "b0", p_raw=0.5, fraction=24 / 400, metric=metric)

    wall_same = contrast("wall", True, 50)
    assert rule.decide(state, [wall_same], now, progress)[0] == "decided"
    # the daemon's CPU not yet decided, and reachable: go on; out of reach (2x the runs left): stop
    assert rule.decide(state, [wall_same, contrast("daemon-cpu", False, 300)], now, progress) == (CONTINUE, state)
    assert rule.decide(state, [wall_same, contrast("daemon-cpu", False, 401)], now, progress)[0] == "budget"
    assert rule.decide(state, [wall_same, contrast("daemon-cpu", True, 10_000)], now, progress)[0] == "decided"
    # wall time undecided and out of reach, the daemon's CPU undecided and in reach: go on for it
    assert rule.decide(state, [contrast("wall", False, 10_000), contrast("daemon-cpu", False, 300)], now,
                       progress) == (CONTINUE, state)
    # wall time alone, as before: a decided contender's need counts, so the step stops here
    n_way = [contrast("wall", False, 300), contrast("wall", True, 10_000, "b2")]
    assert rule.decide(state, n_way, now, progress)[0] == "budget"
    assert rule.decide(state, n_way[:1], now, progress) == (CONTINUE, state)


def test_a_watchdog_stop_keeps_the_steps_that_finished_in_the_runners_progress(tmp_path, fake_hf):
    """The stop carries no results: the runner's progress holds the scenario with its finished step."""
    from refbench.watchdog import WatchdogStop

    class Stopping(MockExecutor):
        def measure(self, where, call, env):
            if "second" in where:
                raise WatchdogStop("memory is short")
            return super().measure(where, call, env)

    ex = Stopping()
    steps = [StepSpec("first", "{{ bin }} go"), StepSpec("second", "{{ bin }} go")]
    (tmp_path / "work").mkdir()
    p = rn.Bench(builds=builds(tmp_path, 1.0, 1.0), backend=FakeBackend(tmp_path / "remote"), executor=ex,
                 workdir=tmp_path / "work", cache_dir=tmp_path, sampling=Sampling(runs=2, warmup=0, rounds=1),
                 criteria=stats.Criteria(), measure_rss=False, clock=ex.clock, steps=2)
    runner = rn.Runner(p)
    spec = FixtureSpec(kind="sparse", size=1, count=1)
    with pytest.raises(WatchdogStop) as e:
        runner.run_scenario(ScenarioSpec("s", "t", spec, spec, tuple(steps)), FixtureFiles(spec, tmp_path, 1, 1, 0))
    assert not hasattr(e.value, "partial")
    [done] = runner.progress.finished
    assert [st.step for st in done.steps] == ["first"] and runner.progress.steps_done == 1
    assert runner.progress.hyperfine_seconds == pytest.approx(ex.now)


def test_the_commands_see_the_names_the_machine_settings_pass(tmp_path, monkeypatch):
    """REFBENCH_PASS_ENV reaches the commands through the bench (MachineSettings.pass_env), read once
    at the command line: a secret not named stays out."""
    monkeypatch.setenv("REFBENCH_TEST_PASSED", "yes")
    monkeypatch.setenv("REFBENCH_TEST_SECRET", "no")
    monkeypatch.setenv("REFBENCH_PASS_ENV", "REFBENCH_TEST_SECRET")  # read at the edge only: no effect here
    p = rn.Bench(builds=builds(tmp_path, 1.0, 1.0), backend=FakeBackend(tmp_path / "remote"), executor=MockExecutor(),
                 workdir=tmp_path, cache_dir=tmp_path, sampling=Sampling(runs=2, warmup=0, rounds=1),
                 criteria=stats.Criteria(), pass_env=frozenset({"REFBENCH_TEST_PASSED"}))
    env = rn.Runner(p).base_env
    assert env["REFBENCH_TEST_PASSED"] == "yes" and "REFBENCH_TEST_SECRET" not in env
