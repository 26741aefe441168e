"""No circle and no import up (issue 56): refbench's import graph, read from the source with `ast`
(every import: at the top, inside a function, under TYPE_CHECKING), has no cycle, and no module
imports one that docs/architecture.md's Layers table puts on a higher floor. The floors are read
from that table, so the page and the code cannot part: a module no row takes fails, named."""
from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping

from test_layers import ROOT, _imports

PAGE = ROOT.parent / "docs" / "architecture.md"
TOP = ROOT.name  # "refbench"
Graph = Mapping[str, frozenset[str]]


def module_name(path) -> str:
    """A file's module as the Layers table names it: dotted below the package (`backends.s3`, a
    package by its own name: `backends`), the package's own __init__.py as `__init__`."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def dotted(name: str) -> str:
    """A module as an import names it: `refbench.backends.s3`, the package `refbench`."""
    return TOP if name == "__init__" else f"{TOP}.{name}"


def read_graph() -> Graph:
    """Each module -> the refbench modules it imports. A module's own packages are left out: Python
    runs them before the module, whatever it imports from them (`from . import __version__`)."""
    files = {module_name(p): p for p in sorted(ROOT.rglob("*.py")) if "__pycache__" not in p.parts}
    by_import = {dotted(n): n for n in files}
    graph = {}
    for name, path in files.items():
        own = {dotted(name).rsplit(".", k)[0] for k in range(1, dotted(name).count(".") + 1)}
        graph[name] = frozenset(by_import[m] for m in _imports(path)
                                if m in by_import and m != dotted(name) and m not in own)
    return graph


def read_floors(page: str) -> tuple[tuple[str, int], ...]:
    """(row's name, floor) of every module the Layers table names, floor 1 the bottom: the table's
    rows in order, the names the backticked ones of its last column."""
    section = page.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")][1:]
    return tuple((name, floor) for floor, row in enumerate(rows, 1)
                 for name in re.findall(r"`([^`]+)`", row.rstrip(" |").rsplit("|", 1)[1]))


def takes(row: str, module: str) -> bool:
    """Whether a row takes a module: its name (a pattern: `clone_*`), a package it is in
    (`backends` takes `backends.s3`), or a name it starts (`runner` takes `runner_rounds`: a
    module split out of another stays on its floor)."""
    return fnmatch.fnmatchcase(module, row) or module.startswith((row + ".", row + "_"))


def floor_of(module: str, floors: tuple[tuple[str, int], ...]) -> int | None:
    """The floor of the most specific row that takes the module (`backends.process` over `backends`)."""
    found = [(len(row.rstrip("*")), floor) for row, floor in floors if takes(row, module)]
    return max(found)[1] if found else None


def reachable(graph: Graph, start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def cycles(graph: Graph) -> list[list[str]]:
    """The circles: each set of two or more modules that reach one another, sorted (a hundred
    modules: the reach of each, found by walking, is quick enough)."""
    reach = {v: reachable(graph, v) for v in graph}
    found = {tuple(sorted(w for w in reach[v] if v in reach.get(w, ()))) for v in graph if v in reach[v]}
    return sorted(list(c) for c in found if len(c) > 1)


def imports_up(graph: Graph, floors: tuple[tuple[str, int], ...]) -> list[str]:
    """'a (floor 2) -> b (floor 5)' for every import of a module on a higher floor."""
    return [f"{a} (floor {floor_of(a, floors)}) -> {b} (floor {floor_of(b, floors)})"
            for a in sorted(graph) for b in sorted(graph[a])
            if None not in (floor_of(a, floors), floor_of(b, floors)) and floor_of(b, floors) > floor_of(a, floors)]


FLOORS = read_floors(PAGE.read_text(encoding="utf-8"))
GRAPH = read_graph()


def test_every_module_is_on_a_floor():
    assert [m for m in sorted(GRAPH) if floor_of(m, FLOORS) is None] == []
    assert [row for row, _ in FLOORS if not any(takes(row, m) for m in GRAPH)] == []  # no stale row
    assert {"__init__", "stats", "judge", "backends.s3", "render.format"} <= set(GRAPH)  # the walk saw them


def test_no_import_cycle():
    assert cycles(GRAPH) == []


def test_no_import_up():
    assert imports_up(GRAPH, FLOORS) == []


def test_the_checks_find_what_they_look_for():
    """A circle, an import up, a module without a floor and the most specific row are each found,
    so the tests above cannot pass by finding nothing."""
    toy = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"}),
           "low": frozenset({"runner_x"})}
    assert cycles(toy) == [["a", "b", "c"]]
    floors = (("low", 1), ("backends.process", 1), ("clone_*", 2), ("runner", 3), ("backends", 3))
    assert imports_up(toy, floors) == ["low (floor 1) -> runner_x (floor 3)"]
    assert [floor_of(m, floors) for m in ("backends.process", "backends.s3_objects", "clone_git", "runner", "a")] \
        == [1, 3, 2, 3, None]
    assert read_floors("x\n## Layers\n\n| floor | what | modules |\n|---|---|---|\n| 1 a | words | `x`, `y.z` |\n"
                       "| 2 b | more | `w` |\n\n## Next\n") == (("x", 1), ("y.z", 1), ("w", 2))
