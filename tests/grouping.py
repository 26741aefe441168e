"""Which slow tests run alone and which share a worker: the suite's collection hook (tests/conftest.py
imports it; tests/test_suite_passes.py loads it as a plugin into a session of its own).

The tests run in two passes (Makefile `test`): the "alone" ones with nothing beside them,
since two timed jobs on two cores measure each other (and a check of machine-wide state would see
the other test's run: a test reads its own run's files instead, as test_dead_server does); the rest, fast and slow, on three workers. A test is alone when marked so or
when it reads a run whose verdicts are asserted (TIMED_FIXTURES), so a new test of those runs
cannot land in the parallel pass by forgetting the marker.

In the parallel pass the longest work starts first (longest_first): a 60 s test handed out last
keeps one worker busy while the others idle; the fast tests (FAST_SECONDS each) fill in last. --dist loadgroup hands out work units (a group, or a
test of no group) in collection order when --no-loadscope-reorder is given (Makefile `test`; by
default it puts the units with the most tests first, whatever their length).
"""
from __future__ import annotations

import pytest

TIMED_FIXTURES = frozenset({"s5_run", "metrics_run"})
# On two workers each expensive session fixture is built once: every test using it goes to one
# worker (pytest-xdist --dist loadgroup), which builds it and shares it as a serial run does.
GROUP_FIXTURES = ("explain_run", "kubo_origin", "minio")


# Seconds a slow test of the parallel pass took, fixture set-up included (the fresh-clone CI run at
# 366a955, 2026-11-27: `--durations=20`). A test not listed counts DEFAULT_SECONDS, about the mean of
# the rest of that pass (83 tests in 518 s on two workers). Stale figures only cost balance.
EXPECTED_SECONDS: dict[str, float] = {
    "tests/test_accounting.py::test_kubo_contender_chunking_differently_stores_different_block_counts_and_profiles_both_ways": 107,
    "tests/test_e2e_network.py::test_the_new_s5cmd_steps_check_their_results_and_leave_nothing_outside_the_prefix": 77,
    "tests/test_accounting.py::test_a_contender_doing_everything_twice_shows_twice_the_requests_and_bytes": 72,
    "tests/test_runner.py::test_budgeted_steps_keep_false_alarms_under_alpha_and_find_ten_percent": 59,
    "tests/test_kubo.py::test_every_kubo_scenario_and_step_ran_for_both_builds": 56,
    "tests/test_implementations.py::test_the_go_module_proxy_installs_pinned_and_refuses_another_hash": 51,
    "tests/test_runner.py::test_steps_whose_pilot_under_estimates_the_noise_keep_their_error_rates_and_decide": 43,
    "tests/test_helia.py::test_kubo_beside_helia_end_to_end": 41,
    "tests/test_implementations.py::test_a_ref_beside_an_implementation_end_to_end": 30,
    "tests/test_dead_server.py::test_a_users_s3_server_killed_during_the_upload_ends_the_run_within_a_minute": 28,
    "tests/test_implementations.py::test_a_named_variants_flags_reach_an_implementation_end_to_end": 24,
    "tests/test_helia.py::test_npm_installs_helia_pinned_and_refuses_a_package_whose_integrity_differs": 22,
    "tests/test_longrun.py::test_sixty_uploads_keep_the_data_dir_flat": 22,
    "tests/test_identical.py::test_three_builds_measure_only_the_one_that_differs": 20,
    "tests/test_kubo.py::test_a_third_go_target_needs_only_a_scenarios_entry": 19,
    "tests/test_nightly.py::test_a_real_night_with_an_implementation": 18,
    "tests/test_package.py::test_installed_comparison_with_a_user_scenarios_file_then_report": 16,
    "tests/test_action.py::test_run_mode_on_a_pull_request_benchmarks_base_and_head_and_fills_the_env_files": 16,
    "tests/test_longrun.py::test_a_killed_runs_objects_are_removed_by_the_next_run": 16,
}
DEFAULT_SECONDS = 4.0
FAST_SECONDS = 0.1  # a test not marked slow: about the fast pass's mean (1,050 in ~200 s of CPU)


def expected_seconds(nodeid: str, group: str | None, seconds: dict[str, float] = EXPECTED_SECONDS,
                     slow: bool = True) -> float:
    """How long a test is expected to take: its figure in `seconds`, read under its node id without
    the "@group" suffix --dist loadgroup adds (_join_group), else DEFAULT_SECONDS, or FAST_SECONDS
    for a test not marked slow."""
    if group and nodeid.endswith(f"@{group}"):
        nodeid = nodeid[:-len(group) - 1]
    return seconds.get(nodeid, DEFAULT_SECONDS if slow else FAST_SECONDS)


def longest_first(tests: list[tuple[str, str, float]]) -> list[str]:
    """The node ids of `tests` ((node id, work unit, expected seconds) in collection order) reordered
    so that the work unit expected to take longest comes first; a unit's tests stay together and in
    their order (the first builds the group's fixture). Longest first is the classic greedy for two
    machines: the short units at the end fill in whichever worker frees up first."""
    units: dict[str, list[tuple[str, float]]] = {}
    for nodeid, unit, secs in tests:
        units.setdefault(unit, []).append((nodeid, secs))
    ordered = sorted(units.values(), key=lambda unit: -sum(secs for _, secs in unit))  # stable
    return [nodeid for unit in ordered for nodeid, _ in unit]


def group_of(fixtures: set[str]) -> str | None:
    """The group of a test using `fixtures`: the first expensive session fixture it uses."""
    return next((f for f in GROUP_FIXTURES if f in fixtures), None)


def _join_group(item: pytest.Item, group: str) -> None:
    """Put `group` in the test's node id as "<id>@<group>", where --dist loadgroup's scheduler reads
    it. pytest-xdist's own hook writes that id into item._nodeid, which pytest 9.2 no longer reads
    (it derives nodeid from item._id): its groups are silently dropped and every test of a group
    goes to any worker, each building the group's fixture again (pytest-xdist#1386). So on a pytest
    that keeps a structured id, it is written here; an older pytest is left to xdist's hook."""
    if not hasattr(item, "_id") or item.nodeid.endswith(f"@{group}"):
        return
    from _pytest.nodeid import NodeId
    item._id = NodeId.parse(f"{item.nodeid}@{group}")


# tryfirst: before pytest-xdist's hook, which reads the xdist_group markers this adds
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    loadgroup = bool(config.getoption("loadgroup", False))  # set on an xdist worker under --dist loadgroup
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & TIMED_FIXTURES:
            item.add_marker(pytest.mark.alone)
        mark = item.get_closest_marker("xdist_group")
        group = group_name(item) if mark else group_of(used)
        if group and not mark:
            item.add_marker(pytest.mark.xdist_group(group))
        if group and loadgroup:
            _join_group(item, str(group))
    if loadgroup:
        tests = [(item.nodeid, str(g or item.nodeid),
                  expected_seconds(item.nodeid, g, slow=item.get_closest_marker("slow") is not None))
                 for item in items for g in [group_name(item)]]
        by_id = {item.nodeid: item for item in items}
        items[:] = [by_id[i] for i in longest_first(tests)]


def group_name(item: pytest.Item) -> str | None:
    """The xdist_group a test carries (a marker of its own, or the one added above)."""
    mark = item.get_closest_marker("xdist_group")
    return (mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else None
