"""What each layer of refbench may import, and the words it may use (issue 38 part 5), read from
the source with `ast`: fast, and no module needs importing for it."""
from __future__ import annotations

import ast
from pathlib import Path

import refbench

ROOT = Path(refbench.__file__).parent


def _imports(path: Path) -> set[str]:
    """Every module a file imports, as an absolute dotted name, at any level of the file (an import
    inside a function or under TYPE_CHECKING counts: it is still the writer reaching for it)."""
    package = ".".join(("refbench", *path.relative_to(ROOT).parent.parts))
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            mod = ".".join(p for p in (base, node.module or "") if p)
            found.add(mod)
            found |= {f"{mod}.{a.name}" for a in node.names}  # `from .. import stats`
    return found


# writers only write (issue 38 part 5c): what a view shows that takes computing (the statistics,
# the analysis, a query of the history) is computed before a writer is called, and passed in
WRITERS_MAY_NOT_IMPORT = ("numpy", "scipy", "sqlalchemy", "refbench.analysis", "refbench.stats",
                          "refbench.history")


def test_no_writer_imports_what_computes():
    found = {str(p.relative_to(ROOT)): sorted(m for m in _imports(p) for banned in WRITERS_MAY_NOT_IMPORT
                                              if m == banned or m.startswith(banned + "."))
             for p in sorted((ROOT / "render").rglob("*.py"))}
    assert {p: ms for p, ms in found.items() if ms} == {}
    assert "render/charts.py" in found  # the walk saw the writers
