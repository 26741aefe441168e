"""No class a person cannot hold in their head (issue 56 part 3): every class in refbench/ is at
most 300 lines, read from the source with `ast` (the class statement's first line to its last)."""
from __future__ import annotations

import ast
from pathlib import Path

import refbench

ROOT = Path(refbench.__file__).parent
LIMIT = 300


def class_lengths() -> dict[str, int]:
    """`module.py:Class` -> lines, for every class at any depth of every module."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                out[f"{path.relative_to(ROOT)}:{node.name}"] = node.end_lineno - node.lineno + 1
    return out


def test_no_class_is_over_300_lines():
    lengths = class_lengths()
    assert "runner.py:Runner" in lengths and "sources.py:Clone" in lengths  # the walk saw them
    assert {name: n for name, n in lengths.items() if n > LIMIT} == {}
