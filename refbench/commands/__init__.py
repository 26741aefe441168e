"""Subcommands beside the main run: one module per subcommand.

Each entry names the module and its function `main(argv) -> exit code`; a new subcommand is a new
file here and one line in COMMANDS.
"""
from __future__ import annotations

import importlib

# subcommand -> "module:function" (relative to the refbench package)
COMMANDS = {
    "report": "commands.report:main",
    "compare": "commands.compare:main",
    "comment": "commands.comment:main",
    "nightly": "commands.nightly:main",
    "bisect": "commands.bisect:main",
    "clean": "commands.clean:main",
    "calibrate": "commands.calibrate:main",
    "setup": "commands.setup:main",
    "doctor": "commands.doctor:main",
    "merge": "commands.merge:main",
    "build": "commands.build:main",
}


MAIN = "commands.run:main"  # the main run (`bench.py -s OLD NEW`): no subcommand named


def dispatch(name: str | None, argv: list[str]) -> int:
    """Run subcommand `name` (None: the main run, MAIN) with its argv; its exit code."""
    module, func = (MAIN if name is None else COMMANDS[name]).split(":")
    return getattr(importlib.import_module(f"refbench.{module}"), func)(argv)
