"""Every number, size, duration and name as the views print it: one place, so the summary, the
PR comment, the HTML report and the CLI never disagree on how a value reads."""
from __future__ import annotations

import math
import re
from collections.abc import Mapping

from ..metrics import table


# ---- changes, intervals, p-values ---------------------------------------------------------------
class _MetricNames(Mapping):
    """What the views call each metric (metrics.Metric.display, of the table in use): wall time is
    "time" beside the others, the daemon's "daemon CPU", ..."""

    def __getitem__(self, metric: str) -> str:
        m = table().get(metric)
        if m is None:
            raise KeyError(metric)
        return m.display

    def __iter__(self):
        return iter(table().names)

    def __len__(self) -> int:
        return len(table().names)


METRIC_NAMES: Mapping[str, str] = _MetricNames()


def fmt_pct(x: float | None, digits: int = 1) -> str:
    """A relative change with its sign: 0.3 -> '+30.0%'; None or non-finite -> 'n/a'."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x * 100:+.{digits}f}%"


def fmt_share(x: float | None) -> str:
    """A share such as a false-alarm rate or a power: 0.83 -> '83%'; unknown -> '—'."""
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.0f}%"


def fmt_interval(low: float | None, high: float | None) -> str:
    """A confidence interval of a relative change: '[+1.0%, +9.0%]'; 'n/a' when unbounded."""
    if low is None:
        return "n/a"
    return f"[{fmt_pct(low)}, {fmt_pct(high)}]"


def fmt_p(p: float | None) -> str:
    if p is None:
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def or_unknown(value):
    """A setting an older results file does not record, shown as '?' rather than 'None'."""
    return "?" if value is None else value


# ---- times and durations --------------------------------------------------------------------------
def fmt_s(x: float | None) -> str:
    """Seconds in the markdown tables' fixed form: 1.23456 -> '1.235'."""
    if x is None:
        return "n/a"
    return f"{x:.3f}"


def fmt_seconds(x: float) -> str:
    """Seconds with the unit that keeps three figures: 0.0123 -> '12.3 ms' (the HTML report)."""
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 100:
        return f"{x:.0f} s"
    if a >= 1:
        return f"{x:.2f} s"
    if a >= 1e-3:
        return f"{x * 1e3:.3g} ms"
    return f"{x * 1e6:.3g} µs"


# ---- sizes ------------------------------------------------------------------------------------------
def fmt_bytes(n: float) -> str:
    """A size with three significant figures, up to GiB: '1.5 GiB' (chart axes, HTML tables)."""
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_rss(kb: float | None) -> str:
    """Peak resident memory, recorded in KiB, as MiB."""
    return "n/a" if kb is None else f"{kb / 1024:.1f} MiB"


# ---- rates --------------------------------------------------------------------------------------------
def fmt_rate(x: float | None) -> str:
    """A rate with three significant figures or so: 1234 -> '1234', 95.31 -> '95.3', 0.512 -> '0.51'."""
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def fmt_mbps(bps: float | None) -> str:
    """bytes/s as MB/s (10^6 bytes, as warp and s3-benchmark print it)."""
    return fmt_rate(None if bps is None else bps / 1e6)


# ---- names --------------------------------------------------------------------------------------------
_MD_ACTIVE = re.compile(r"([\\`*_\[\]<>|~&])")


def md_escape(text: str) -> str:
    """One field (a name, a label, a note, a version string from a results file) as markdown that
    reads as the text and nothing more: on one line (a line break would end a table row or start a
    block, say a link definition) and every character that opens markup escaped with a backslash:
    emphasis, a code span, a link or an image, an HTML tag, a strikethrough, the end of a cell, an
    entity (`&commat;` and `&#x40;` are decoded to a live @ after every other net has run). A
    results file comes from a run of a pull request's code, so its fields can hold anything."""
    return _MD_ACTIVE.sub(r"\\\1", " ".join(str(text).splitlines()))


def md_code(text: str) -> str:
    """One field inside a code span (`...`): shown as is there, so only a backtick (which would end
    the span) and a line break are replaced."""
    return " ".join(str(text).splitlines()).replace("`", "'")


def md_code_cell(text: str) -> str:
    """md_code for a code span inside a table cell: its `|` backslashed too. GFM cuts a row into
    cells before it reads code spans, so a bare `|` would end the cell and the span with it (the
    rest of the field then read as markdown); `\\|` is GFM's own way to keep one, shown as `|`."""
    return md_code(text).replace("|", "\\|")


def fmt_ci(c) -> str:
    """A contrast's 95% interval (see fmt_interval)."""
    return fmt_interval(c.ci_low, c.ci_high)


# how a kubo scenario ran (results.Scenario.daemon), in words a reader of the summary needs
DAEMON_WORDS = {
    "online": "online daemon on a loopback-only network of the run's own, the CLI talking to it",
    "offline": "offline daemon (`ipfs daemon --offline`, test profile)",
    "none": "no daemon, the CLI alone on the repo",
}
