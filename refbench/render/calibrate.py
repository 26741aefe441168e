"""calibrate's note (calibration.md): the figures refbench.calibrate.analyse computed, formatted;
nothing here computes."""
from __future__ import annotations

from ..calibrate import Calibration
from .env import render as render_template
from .format import fmt_interval, fmt_pct, fmt_share


def _seconds(s: float | None) -> str:
    return "—" if s is None else f"{s:.1f} s"


def render_calibration(c: Calibration, *, alpha: float, settings_line: str) -> str:
    """The note; `settings_line` spells the run options the repetitions measured with."""
    return render_template("calibrate.md.j2", c=c, pct=fmt_share, secs=_seconds, alpha=alpha,
                           settings_line=settings_line, signed=fmt_pct, interval=fmt_interval)
