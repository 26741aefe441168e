"""nightly, bisect and `refbench build` get their builder from the run's RunEnv (RunEnv.builder, given
a runenv.BuildSite), as a run does: none of them makes a builds.Builder of its own, so a stand-in
RunEnv (the mock's, a test's) is the one that resolves and builds their refs."""
from __future__ import annotations

import dataclasses

import pytest

from origins import new_origin


class Reached(Exception):
    """Raised by a recording builder factory: the command asked the RunEnv for its builder."""


def recording_env(sites: list, then=None):
    """This machine's RunEnv with a builder factory that records the BuildSite it is given, then
    makes the real builder (`then`: runenv.make_builder) or stops the command (Reached)."""
    from refbench import runenv

    def builder(site):
        sites.append(site)
        if then is None:
            raise Reached(site)
        return then(site)

    return dataclasses.replace(runenv.real(), builder=builder)


def test_bisect_lists_its_commits_with_the_run_envs_builder(tmp_path):
    from refbench import bisect as bs, runenv
    from refbench.commands import bisect as bisect_cmd
    (tmp_path / "origin").mkdir()
    o = new_origin(tmp_path / "origin")
    for i in range(1, 4):
        o.commit(f"c{i}", {"NOTE": f"{i}\n"}, f"c{i}", tags=["good"] if i == 1 else ())
    _, search, base = bisect_cmd.parse(["good", "master", "--only", "small files/remove", "--repo", str(o.path),
                                        "--builds-dir", str(tmp_path / "builds")])
    sites: list = []
    line = bs.prepare(search, base, recording_env(sites, then=runenv.make_builder))
    assert [c for c, _ in line.commits] == [o.shas["c2"], o.shas["c3"]]
    (site,) = sites
    assert site.target.name == "s5cmd" and site.request.repo == str(o.path) and site.request.source == "git"
    assert site.cache_dir == (tmp_path / "builds").resolve()


def test_the_night_resolves_its_head_with_the_run_envs_builder(tmp_path):
    from refbench import nightly
    from refbench.history import open_history
    from refbench.pipeline import RunRequest
    db = open_history(tmp_path / "h.db")
    req = nightly.NightRequest(run=RunRequest(refs=(), target="s5cmd", repo="/srv/origin.git", source="module",
                                              builds_dir=str(tmp_path / "b")),
                               machine="ci", home=tmp_path, trend=tmp_path / "t.html", draw=str, since_last=True)
    sites: list = []
    try:
        with pytest.raises(Reached):
            nightly.night(db, req, measure=lambda *a: pytest.fail("nothing is measured"), say=lambda m: None,
                          env=recording_env(sites))
    finally:
        db.close()
    (site,) = sites
    # the head is a commit of the origin whatever the comparison builds from, as before
    assert site.target.name == "s5cmd" and site.request.repo == "/srv/origin.git" and site.request.source == "git"
    assert site.origin is None and site.cache_dir == (tmp_path / "b").resolve()


def test_refbench_build_builds_with_the_run_envs_builder(tmp_path):
    from refbench import runenv
    from refbench.commands import build as build_cmd
    sites: list = []

    def builder(site):
        sites.append(site)
        raise Reached(site)

    env = dataclasses.replace(runenv.real(runenv.MachineSettings()), builder=builder)
    with pytest.raises(Reached):
        build_cmd.main(["-s", "v1.0.0", "--out", str(tmp_path / "out"), "--repo", str(tmp_path / "no-origin"),
                        "--source", "git", "--builds-dir", str(tmp_path / "b")], env=env)
    (site,) = sites
    assert site.target.name == "s5cmd" and site.request.repo == str(tmp_path / "no-origin")
    assert site.request.source == "git" and site.request.refs == ("v1.0.0",)
    assert site.cache_dir == (tmp_path / "b").resolve()
