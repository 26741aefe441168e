"""Which slow tests run alone and which share a worker: the suite's collection hook (tests/conftest.py
imports it; tests/test_suite_passes.py loads it as a plugin into a session of its own).

The slow tests run in two passes (Makefile `test`): the "alone" ones with nothing beside them,
since two timed jobs on two cores measure each other (and a check of machine-wide state, such as
/dev/shm, sees the other test's run); the rest on two workers. A test is alone when marked so or
when it reads a run whose verdicts are asserted (TIMED_FIXTURES), so a new test of those runs
cannot land in the parallel pass by forgetting the marker.
"""
from __future__ import annotations

import pytest

TIMED_FIXTURES = frozenset({"s5_run", "metrics_run"})
# On two workers each expensive session fixture is built once: every test using it goes to one
# worker (pytest-xdist --dist loadgroup), which builds it and shares it as a serial run does.
GROUP_FIXTURES = ("explain_run", "kubo_origin", "minio")


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
        group = (mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else group_of(used)
        if group and not mark:
            item.add_marker(pytest.mark.xdist_group(group))
        if group and loadgroup:
            _join_group(item, str(group))
