"""Moved: the views live in refbench.render (markdown, html, charts, csv) and compare_runs in
refbench.compare. `write_extras` stays importable from here, taking a results dict, for cli and
commands/merge until they hold typed Results and import refbench.render.extras."""
from __future__ import annotations

from . import results as rs
from .render import extras


def write_extras(results, html_path: str | None, csv_path: str | None) -> None:
    typed = results if isinstance(results, rs.Results) else rs.Results.from_json(results)
    extras.write_extras(typed, html_path, csv_path)
