"""What each layer of refbench may import, and the words it may use (issue 38 part 5), read from
the source with `ast`: fast, and no module needs importing for it."""
from __future__ import annotations

import ast
import re
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
# the analysis, a query of the history) is computed before a writer is called, and passed in; what
# explain measured is printed by render/explain.py, not by the observer that runs commands (issue 56)
WRITERS_MAY_NOT_IMPORT = ("numpy", "scipy", "sqlalchemy", "refbench.analysis", "refbench.stats",
                          "refbench.history", "refbench.explain")


def test_no_writer_imports_what_computes():
    found = {str(p.relative_to(ROOT)): sorted(m for m in _imports(p) for banned in WRITERS_MAY_NOT_IMPORT
                                              if m == banned or m.startswith(banned + "."))
             for p in sorted((ROOT / "render").rglob("*.py"))}
    assert {p: ms for p, ms in found.items() if ms} == {}
    assert "render/charts.py" in found  # the walk saw the writers


# one word per idea (issue 38 part 5d): "compare" is `refbench compare` alone; the statistical
# comparison of two samples is a contrast (figures.Contrast, stats.contrast), the matching of two
# saved runs' steps a pairing (pairing.py). Names that must keep the old word, and why:
MAY_SAY_COMPARE = {
    # results.json's key "comparisons": results.Step's field is that key (the reader maps fields to
    # keys by name), Results.comparisons() iterates it, and files written before must still load
    # (tests/test_results.py reads them by these names)
    "comparisons": "results.json's key",
    # results.Step's other-metric part of that same key (written back into "comparisons")
    "metric_comparisons": "results.json's key, split by metric",
    # the standard library's words: dataclasses.field(compare=False), hmac.compare_digest
    "compare": "dataclasses.field's keyword",
    "compare_digest": "hmac's",
}
COMMAND = "commands/compare.py"  # the command itself may say it


def test_compare_is_the_command_alone():
    import io
    import tokenize
    found: dict[str, set[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel == COMMAND:
            continue
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
            if tok.type == tokenize.NAME and "compar" in tok.string.lower() and tok.string not in MAY_SAY_COMPARE:
                found.setdefault(tok.string, set()).add(rel)
    assert found == {}
    assert (ROOT / COMMAND).is_file() and not (ROOT / "compare.py").exists()


# results.json's key is read by attribute everywhere (`st.comparisons`, `comparisons=` building a
# Step), but a name of its own, one a module binds (a def, a parameter, an assignment, a field, a loop
# or comprehension variable, an import), may say it only here, each with its reason; a new one says
# `contrasts` (issue 56 part 4)
MAY_NAME_COMPARISONS = {
    ("results.py", "comparisons"): "results.Step's field is the file's key; Results.comparisons() iterates it",
    ("results.py", "metric_comparisons"): "results.Step's field: that key's other metrics",
    ("runner.py", "comparisons"): "runner.StepResult's field: every metric's contrasts, which record() "
                                  "splits into results.Step's two (the tests read it by that name)",
}


def _bound_names(tree: ast.AST):
    """Every name a module binds, at any level."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, ast.arg):
            yield node.arg
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            yield node.id
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            yield node.attr
        elif isinstance(node, ast.alias):
            yield node.asname or node.name.split(".")[0]


def test_a_name_says_contrast_where_no_file_keeps_comparison():
    found = {(str(p.relative_to(ROOT)), name) for p in sorted(ROOT.rglob("*.py"))
             if str(p.relative_to(ROOT)) != COMMAND
             for name in _bound_names(ast.parse(p.read_text(encoding="utf-8"))) if "compar" in name.lower()}
    assert found - set(MAY_NAME_COMPARISONS) == set()
    assert set(MAY_NAME_COMPARISONS) - found == set()  # an exception whose name went goes from the list too


def _prose(path: Path):
    """(line, text) of every comment and docstring of a file."""
    import io
    import tokenize
    text = path.read_text(encoding="utf-8")
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc


def test_the_prose_says_contrast_run_or_pairing():
    """Comments and docstrings name a contrast, a run or a pairing by its word: "comparison" only
    inside backticks or quotes, where it names results.json's key."""
    found = [f"{p.relative_to(ROOT)}:{line}" for p in sorted(ROOT.rglob("*.py")) if str(p.relative_to(ROOT)) != COMMAND
             for line, text in _prose(p) if re.search(r"comparison", re.sub(r"`[^`]*`|\"[^\"]*\"", "", text), re.I)]
    assert found == []


# the words above, each with its one meaning in the architecture page's glossary (issue 38 part 5e)
GLOSSARY_WORDS = ("build", "ref", "implementation", "variant", "step", "scenario", "round", "run", "sample",
                  "metric", "family", "verdict", "contrast", "pairing", "compare", "budget", "seal", "shard",
                  "series", "baseline", "contender",
                  # what "check" once named four of (issue 56 part 4): a step's check command keeps it
                  "check", "validate", "verify", "fault")


def test_the_glossary_gives_each_word_one_meaning():
    page = (ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    glossary = page.split("\n## Glossary\n", 1)[1].split("\n## ", 1)[0]
    defined = re.findall(r"^- \*\*([a-z ]+)\*\*:", glossary, flags=re.MULTILINE)
    assert [w for w in GLOSSARY_WORDS if defined.count(w) != 1] == []
    assert sorted(set(defined)) == sorted(defined)  # no word defined twice
