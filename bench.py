#!/usr/bin/env python3
"""refbench: compare builds of a Go storage tool (s5cmd, kubo, ...) with hyperfine.

This file is only the door; see refbench/cli.py.
"""
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_venv_python = os.path.join(_here, ".venv", "bin", "python")
# Re-exec inside the project venv when started with a bare interpreter.
if os.path.exists(_venv_python) and os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(_here, ".venv")):
    os.execv(_venv_python, [_venv_python, os.path.abspath(__file__), *sys.argv[1:]])
sys.path.insert(0, _here)

from refbench.__main__ import console  # noqa: E402

if __name__ == "__main__":
    sys.exit(console())
