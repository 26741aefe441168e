#!/usr/bin/env python3
"""The shape of refbench's code, for before/after figures of a reshape (issue 11): lines per
module, the longest function per module and overall, and the import cycles among refbench's
modules. Imports inside functions count too (a lazy import only hides a cycle, it does not break
it), and so do the 'module:function' names a dispatcher hands to importlib.

    python benchmarks/code_shape.py [PACKAGE_DIR]      (default: refbench/ beside this directory)

Standard library only (ast), so it runs on any checkout, old or new.
"""
from __future__ import annotations

import ast
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
