"""Progress output: plain timestamped lines with rounds and ETA off a terminal, a live bar with
the step and ETA on one."""
from __future__ import annotations

import io
import re
import time

from rich.console import Console

from refbench.progress import Reporter


def test_progress_plain_lines_have_rounds_and_eta():
    out = io.StringIO()
    rep = Reporter(force_plain=True, stream=out)
    rep.start(4, builds=["v1", "v2"])
    rep.status("small files / upload: round 1/2")
    time.sleep(0.05)
    rep.advance()
    rep.status("small files / upload: round 2/2")
    rep.advance()
    rep.stop()
    lines = out.getvalue().splitlines()
    assert "4 interleaved rounds of v1, v2" in lines[0]
    assert "round 1/2" in lines[1] and "0/4 rounds" in lines[1] and "ETA" not in lines[1]
    assert "round 2/2" in lines[2] and "1/4 rounds, ETA 0:00" in lines[2]
    assert "\x1b" not in out.getvalue(), "no terminal control codes in CI logs"
    assert "2 rounds in" in lines[-1]


def test_progress_terminal_bar_shows_step_and_eta():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160, color_system=None)
    rep = Reporter(console=console)
    assert rep.tty
    rep.start(3)
    rep.status("small files / download: round 2/3")
    rep.advance()
    rep.advance()
    rep.advance()  # --until-decided may add rounds beyond the plan
    rep.advance()
    rep._progress.refresh()
    text = buf.getvalue()
    rep.stop()
    assert "small files / download: round 2/3" in text and "rounds" in text
    assert re.search(r"ETA \d+:\d\d", text), "an ETA as soon as a round is done"
    assert rep.total == 4


def test_a_budgeted_run_shows_its_budget_left_not_a_rounds_eta():
    """A budgeted run adds rounds until its steps decide: the planned rounds' pace promised 'ETA
    38:20' 35 min into a no-flag kubo run that had 2 h of budget left. Its budget bounds its end."""
    out = io.StringIO()
    rep = Reporter(force_plain=True, stream=out)
    rep.start(4, builds=["v1", "v2"], budget=2 * 3600 + 30)
    rep.advance()
    rep.status("tree / get: round 19 (extra)")
    rep.not_measuring(600)  # ten minutes building a GC state: not spent of the budget
    rep.status("garbage collection / repo gc: round 1/5")
    rep.stop()
    line = out.getvalue().splitlines()[1]
    assert re.search(r"1/4 rounds, budget left 2:00:[23]\d", line), line
    assert "ETA" not in line
    assert re.search(r"budget left 2:10:[23]\d", out.getvalue().splitlines()[2]), out.getvalue()
