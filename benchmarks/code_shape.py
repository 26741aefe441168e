#!/usr/bin/env python3
"""The shape of refbench's code, for before/after figures of a reshape (issues 11 and 28): lines
per module, the longest function per module and overall, the import cycles among refbench's
modules, the library modules that import a view (refbench.render; 0 wanted: views format what the
library returns), the test functions that run refbench through the mock executor (no process, no
Go: the fast way to test a whole run), and what `import refbench.results` costs (every view reads
results; it should load no numpy or scipy). Imports inside functions count too (a lazy import only
hides a cycle, it does not break it), and so do the 'module:function' names a dispatcher hands to
importlib.

    python benchmarks/code_shape.py [PACKAGE_DIR]      (default: refbench/ beside this directory)

Standard library only (ast, subprocess), so it runs on any checkout, old or new; the import time is
measured with this Python, from PACKAGE_DIR's parent.
"""
from __future__ import annotations

import ast
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Module:
    name: str  # dotted, e.g. refbench.commands.run
    path: Path
    lines: int
    longest: tuple[str, int]  # (qualified function name, lines), ("", 0) without functions
    imports: frozenset[str]  # refbench modules this one imports, at any depth of the file


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def functions(tree: ast.AST) -> list[tuple[str, int]]:
    """(qualified name, lines including its decorators) of every function and method."""
    out = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    out.append((name, child.end_lineno - start + 1))
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


def imported(tree: ast.AST, name: str, is_package: bool, known: set[str]) -> frozenset[str]:
    """The known modules an import statement anywhere in the file names."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)  # `from . import x`: x may be a module
    found |= dispatched(tree, name.split(".")[0])
    # a module's own packages are imported before it runs, whatever it imports from them: no cycle
    own = {name.rsplit(".", k)[0] for k in range(1, name.count(".") + 1)}
    return frozenset(m for m in found if m in known and m != name and m not in own)


def dispatched(tree: ast.AST, top: str) -> set[str]:
    """Modules a file imports by name through importlib: its 'module:function' string constants
    (refbench.commands.COMMANDS), read relative to the top package."""
    if not any(isinstance(n, ast.Attribute) and n.attr == "import_module" for n in ast.walk(tree)):
        return set()
    return {f"{top}.{n.value.partition(':')[0]}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and ":" in n.value}


def read(root: Path) -> list[Module]:
    paths = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    names = {module_name(p, root): p for p in paths}
    out = []
    for name, path in names.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
        fns = functions(tree)
        out.append(Module(name, path, len(text.splitlines()), max(fns, key=lambda f: f[1], default=("", 0)),
                          imported(tree, name, path.name == "__init__.py", set(names))))
    return out


def cycles(modules: list[Module]) -> list[list[str]]:
    """Strongly connected components of two or more modules (Tarjan), each sorted."""
    graph = {m.name: sorted(m.imports) for m in modules}
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return sorted(out)


# ---- issue 28's figures -----------------------------------------------------------------------
VIEWS = ("render",)  # the view package
NOT_LIBRARY = ("render", "commands", "cli", "__main__")  # views, commands and the entry points


def view_imports(modules: list[Module], top: str) -> list[tuple[str, str]]:
    """(library module, view module) for every import of a view by a library module."""
    def under(name: str, parts: tuple[str, ...]) -> bool:
        rest = name[len(top) + 1:]
        return any(rest == p or rest.startswith(p + ".") for p in parts)

    return sorted((m.name, i) for m in modules if not under(m.name, NOT_LIBRARY)
                  for i in m.imports if under(i, VIEWS))


# how a test reaches the mock executor: the hidden CLI flag, or the stand-ins the fakes hand a run
MOCK_MARKS = ('"--executor", "mock"', "--executor mock", "'--executor', 'mock'", "mock_args(", "fake_env(",
              "MockExecutor")


def _is_fixture(fn: ast.FunctionDef) -> bool:
    return any("fixture" in ast.unparse(d) for d in fn.decorator_list)


def mock_tests(tests_dir: Path) -> tuple[int, int]:
    """(test functions that run through the mock executor, all test functions): a test counts when
    its source, a fixture it asks for (any file's) or a helper of its module it calls (at any
    depth) uses MOCK_MARKS."""
    files = {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(tests_dir.rglob("*.py"))
             if "__pycache__" not in p.parts}
    fixtures: dict[str, tuple[str, set[str]]] = {}  # name -> (source, fixtures it asks for)
    for path, tree in files.items():
        text = path.read_text(encoding="utf-8")
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _is_fixture(n)):
            fixtures[fn.name] = (ast.get_source_segment(text, fn) or "", {a.arg for a in fn.args.args})
    mocked_fixtures = {n for n, (src, _) in fixtures.items() if any(m in src for m in MOCK_MARKS)}
    changed = True
    while changed:  # a fixture that asks for a mocked fixture is mocked
        more = {n for n, (_, args) in fixtures.items() if args & mocked_fixtures} - mocked_fixtures
        mocked_fixtures |= more
        changed = bool(more)
    through, total = 0, 0
    for path, tree in files.items():
        if not path.name.startswith("test_"):
            continue
        text = path.read_text(encoding="utf-8")
        fns = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        fns += [m for c in fns if isinstance(c, ast.ClassDef) for m in c.body if isinstance(m, ast.FunctionDef)]
        src = {f.name: ast.get_source_segment(text, f) or "" for f in fns if isinstance(f, ast.FunctionDef)}
        calls = {f.name: {n.func.id for n in ast.walk(f) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
                 for f in fns if isinstance(f, ast.FunctionDef)}
        mocked = {n for n, s in src.items() if any(m in s for m in MOCK_MARKS)}
        changed = True
        while changed:  # a helper that calls a mocked helper is mocked
            more = {n for n, c in calls.items() if c & mocked} - mocked
            mocked |= more
            changed = bool(more)
        for f in fns:
            if isinstance(f, ast.FunctionDef) and f.name.startswith("test"):
                total += 1
                args = {a.arg for a in f.args.args}
                through += f.name in mocked or bool(args & mocked_fixtures)
    return through, total


IMPORT_PROBE = ("import sys, time; t = time.perf_counter(); import {m}; t = time.perf_counter() - t; "
                "print(t, int('numpy' in sys.modules), int('scipy' in sys.modules))")


def import_cost(module: str, where: Path, repeats: int = 5) -> tuple[float, bool, bool] | None:
    """The median seconds `import module` takes in a fresh interpreter (the first run warms the
    bytecode cache and is left out), and whether it loaded numpy and scipy; None where it fails."""
    seen = []
    for _ in range(repeats + 1):
        proc = subprocess.run([sys.executable, "-c", IMPORT_PROBE.format(m=module)], cwd=where,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return None
        t, np_, sp = proc.stdout.split()
        seen.append((float(t), np_ == "1", sp == "1"))
    return statistics.median(t for t, _, _ in seen[1:]), seen[-1][1], seen[-1][2]


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "refbench"
    modules = read(root)
    width = max(len(m.name) for m in modules)
    print(f"{'module':<{width}}  {'lines':>5}  longest function")
    for m in sorted(modules, key=lambda m: -m.lines):
        fn, n = m.longest
        print(f"{m.name:<{width}}  {m.lines:>5}  {fn} ({n})" if fn else f"{m.name:<{width}}  {m.lines:>5}  -")
    total = sum(m.lines for m in modules)
    top = max(modules, key=lambda m: m.longest[1])
    print(f"\n{len(modules)} modules, {total} lines; longest function: {top.name}.{top.longest[0]} "
          f"({top.longest[1]} lines)")
    found = cycles(modules)
    print(f"import cycles (lazy imports included): {len(found)}")
    graph = {m.name: m.imports for m in modules}
    for comp in found:
        members = set(comp)
        edges = [f"{a} -> {b}" for a in comp for b in sorted(graph[a]) if b in members]
        print(f"  {len(comp)} modules: {', '.join(comp)}")
        for e in edges:
            print(f"    {e}")
    top = root.name
    views = view_imports(modules, top)
    print(f"library -> render imports: {len(views)}")
    for a, b in views:
        print(f"  {a} -> {b}")
    tests_dir = root.parent / "tests"
    if tests_dir.is_dir():
        through, total = mock_tests(tests_dir)
        print(f"tests through the mock executor: {through} of {total} test functions")
    cost = import_cost(f"{top}.results", root.parent)
    if cost is None:
        print(f"import {top}.results: fails with {sys.executable}")
    else:
        t, np_, sp = cost
        print(f"import {top}.results: {t * 1000:.0f} ms (median of 5), numpy {'loaded' if np_ else 'not loaded'}, "
              f"scipy {'loaded' if sp else 'not loaded'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
