"""Finding a tool refbench runs, by absolute path, never through a cache directory on PATH.

A restored cache may hold anything (the threat model is refbench.trust's), so

- a tool refbench pins (refbench.pins: MinIO, toxiproxy, refbench-s3restore, hyperfine) is taken
  from the cache or refbench's tools directory only when its file is the pinned build, verified at
  every use (find_tool), or else from PATH;
- every other tool (git, go, curl, ...) comes from the clean PATH (refbench.cleanpath), as an
  absolute path.

Above pins.py, which it asks whether a file is the pinned build; the clean PATH itself lives below
both (cleanpath.py), and its names are said here too for the callers that find every program
through this module (`tools.git()`, `tools.child_env()`).
"""
from __future__ import annotations

import os

from . import paths, pins
from .cleanpath import child_env, clean_path, git, go, which  # noqa: F401 (said here too)


def find_tool(name: str) -> str | None:
    """A tool refbench runs, as an absolute path. A tool refbench pins (refbench.pins) in the cache
    or refbench's tools directory, which a cache restore may have filled, is used only when it is the
    pinned build (verified now, at this use); else it, like every other tool, comes from the clean
    PATH (the system's own). Nothing else in a cache directory is ever found."""
    if name in pins.PINNED_TOOLS:
        for p in (pins.cached_path(name), paths.tools_bin() / name):
            if p.is_file() and os.access(p, os.X_OK):
                return str(pins.verify(name, p))
    if name == "go":
        return go()
    return which(name)
