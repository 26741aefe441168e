"""The markdown views: the GitHub PR-comment flavour and its size limit, and the busy-machine
warning of the summary."""
from __future__ import annotations

import re

import factories as fx
from refbench import results as rs
from refbench.render import markdown


def check_comment_shape(text: str) -> None:
    assert text.splitlines()[0] == markdown.COMMENT_MARKER
    assert markdown.comment_size(text) <= markdown.GITHUB_COMMENT_LIMIT
    assert len(text) <= 65536 and len(text.encode("utf-16-le")) // 2 <= 65536
    assert text.count("<details>") == text.count("</details>")
    table = text.index("| Scenario")
    if "<details>" in text:
        assert table < text.index("<details>"), "verdict table must come before the details"


def test_github_comment_small_run_has_everything():
    r = fx.basic()
    text = markdown.render_markdown(r, "github")
    check_comment_shape(text)
    assert "1 slower" in text and "1 faster" in text
    assert re.search(r"\| 🔴 +\| small files +\| upload", text)
    for title in ("Detailed timings", "Resources", "Builds", "Hyperfine summary"):
        assert f"<summary>{title}" in text
    assert "Left out" not in text and "not shown" not in text


def test_github_comment_many_steps_stays_within_limit_and_keeps_regressions():
    steps = {}
    for i in range(1500):
        slow = i % 250 == 7  # 6 regressions spread through the run
        steps[(f"scenario number {i // 10} with a rather long descriptive name", f"step-{i}")] = {
            "old": fx.times(1.0, n=4, seed=i), "new": fx.times(1.4 if slow else 1.0, n=4, seed=i + 5000)}
    r = fx.results(steps, cache=True)
    full = markdown.render_markdown(r, "md")
    assert markdown.comment_size(full) > markdown.GITHUB_COMMENT_LIMIT  # the plain summary would not fit
    text = markdown.render_github(r)
    check_comment_shape(text)
    n_slow = r.verdict_counts()["slower"]
    assert n_slow >= 6
    assert text.count("| 🔴") == n_slow, "every regression must stay in the table"
    assert "more rows not shown" in text
    assert "Left out to fit GitHub's comment limit" in text


def test_github_comment_drops_details_before_verdict_rows():
    r = fx.basic()
    full = markdown.render_github(r)
    limit = markdown.comment_size(full) - 200  # too small for all the details, plenty for the table
    text = markdown.render_github(r, limit=limit)
    assert markdown.comment_size(text) <= limit
    assert text.startswith(markdown.COMMENT_MARKER)
    assert "more rows not shown" not in text
    assert text.count("| small files") == 3
    assert "Left out to fit GitHub's comment limit" in text


def test_busy_machine_is_called_out():
    quiet = rs.Environment(cpus=2, load_before=2.5, competing_cpu_share=0.03)
    assert quiet.busy_warning() is None  # a high load of our own making is not "busy"
    busy = rs.Environment(cpus=2, load_before=0.3, competing_cpu_share=0.61)
    assert "other work used 61% of its 2 CPUs" in busy.busy_warning()
    assert "load average 6.8" in rs.Environment(cpus=2, load_before=6.8).busy_warning()
    assert rs.Environment().busy_warning() is None  # older results files
