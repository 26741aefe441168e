"""Moved: the views live in refbench.render (html, csv, charts, markdown) and compare_runs in
refbench.compare. `write_extras` stays importable from here for cli and commands/merge until they
import it from refbench.render.extras."""
from __future__ import annotations

from .render.extras import write_extras  # noqa: F401
