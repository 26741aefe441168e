"""Subcommands beside the main comparison: one module per subcommand.

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


def dispatch(name: str, argv: list[str]) -> int:
    module, func = COMMANDS[name].split(":")
    return getattr(importlib.import_module(f"refbench.{module}"), func)(argv)
