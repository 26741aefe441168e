"""Finding a tool refbench runs: its own tools directories first (where `refbench setup` links
them), then PATH; a tool refbench builds for itself is checked against its pin on every use.

Apart from paths.py because the check needs pins.py, which builds on paths.py.
"""
from __future__ import annotations

import os
import shutil

from . import paths, pins


def find_tool(name: str) -> str | None:
    """A tool refbench runs: refbench's tools directories first, then PATH. A tool refbench builds
    for itself (refbench.pins) found in its own directories, which a cache restore may have
    filled, is used only when it is the pinned build; one on PATH is the system's own."""
    for d in paths.tool_dirs():
        p = d / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(pins.check(name, p)) if name in pins.PINNED_TOOLS else str(p)
    return shutil.which(name)
