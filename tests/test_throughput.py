"""MB/s and objects/s per step and build in the markdown summary and the PR comment."""
from __future__ import annotations

import re

import factories as fx
from refbench import results as rs
from refbench.render import markdown
from refbench.render.format import fmt_mbps, fmt_rate


def results():
    def around(mean):  # mean exactly `mean`, not degenerate for the bootstrap
        return [mean, mean * 1.01, mean * 0.99, mean]

    steps = {("small files", "upload"): {"old": around(2.0), "new": around(4.0)},
             ("large file", "download"): {"old": around(0.5), "new": around(0.5)}}
    # 200 files of 1 MB; one file of 1 GB (10^9 bytes)
    return fx.results(steps, fixtures={"small files": (200, 200_000_000), "large file": (1, 1_000_000_000)})


def test_throughput_of_a_step_and_build():
    r = results()
    sc = r.scenarios[0]
    st = sc.steps[0]
    bps, ops = sc.fixture.throughput(st.builds["old"])
    assert (bps, ops) == (100_000_000.0, 100.0)
    assert fmt_mbps(bps) == "100" and fmt_rate(ops) == "100"
    assert sc.fixture.throughput(rs.Samples(times=(), stats=None)) == (None, None)
    assert rs.Fixture().throughput(st.builds["old"]) == (None, None)
    assert fmt_rate(9.876) == "9.88" and fmt_rate(12.34) == "12.3" and fmt_rate(None) == "n/a"


def test_summary_and_comment_show_throughput_next_to_the_time_change():
    r = results()
    for flavour in ("md", "github"):
        text = markdown.render_markdown(r, flavour)
        header = next(ln for ln in text.splitlines() if "Time change" in ln)
        cols = [c.strip() for c in header.strip("|").split("|")]
        assert cols[cols.index("Time change") + 1: cols.index("Time change") + 3] == ["MB/s", "objects/s"]
        assert re.search(r"\| small files +\| upload +\| \+100\.0% +\| 100 → 50\.0 +\| 100 → 50\.0 +\|", text), flavour
        assert re.search(r"\| large file +\| download .*\| 2000 → 2000 +\| 2\.00 → 2\.00 +\|", text), flavour
        # per build, in the resources table
        assert re.search(r"\| upload small files +\| new +\| +50\.0 \| +50\.0 \|", text), flavour
